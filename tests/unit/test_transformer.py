"""build_ops: op lists, shapes, FLOPs, kernel counts."""

from __future__ import annotations

import pytest

from gpuperf.errors import InputError
from gpuperf.perfmodel.ops import Attention, Copy, Elementwise, Gemm
from gpuperf.workloads.config import ModelConfig, load_model
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer import build_ops

TINY = ModelConfig(name="tiny", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100)  # fmt: skip


def by_name(ops):
    return {op.name: op for op in ops}


def test_fused_prefill_tiny_by_hand():
    ops = build_ops(TINY, Scenario(mode="prefill", batch=2, seq=16))
    names = [op.name for op in ops]
    assert names[:11] == ["embed", "L0/attn/norm", "L0/attn/qkv", "L0/attn/rope",
                          "L0/attn/kv_write", "L0/attn/core", "L0/attn/out", "L0/mlp/norm",
                          "L0/mlp/gate_up", "L0/mlp/act", "L0/mlp/down"]  # fmt: skip
    assert names[-3:] == ["final_norm", "logits_gather", "lm_head"]
    o = by_name(ops)
    qkv = o["L1/attn/qkv"]  # 32 tokens x (4 + 2 + 2) heads x 16 dims, from 64
    assert (qkv.m, qkv.n, qkv.k) == (32, 128, 64)
    assert qkv.cost().flops == 2 * 32 * 128 * 64
    assert qkv.cost().bytes_read == 2 * (32 * 64 + 64 * 128)
    core = o["L0/attn/core"]
    assert (core.batch, core.heads, core.kv_heads, core.q_len, core.kv_len) == (2, 4, 2, 16, 16)
    # causal: 16*17/2 pairs per head, 4 d FLOPs each (QK^T and PV)
    assert core.cost().flops == 2 * 4 * 136 * 4 * 16
    assert o["L0/attn/kv_write"].nbytes == 32 * 2 * 2 * 16 * 2
    # last token of each sequence only, over the vocabulary padded to 64 (vLLM's)
    assert (o["lm_head"].m, o["lm_head"].n) == (2, 128)
    assert not o["L0/attn/norm"].residual and o["L1/attn/norm"].residual
    assert o["L0/mlp/act"].numel == 32 * 128


def test_decode_shapes_and_kv_dtype():
    ops = by_name(build_ops(TINY, Scenario(mode="decode", batch=3, ctx=100, kv_dtype="fp8")))
    core = ops["L1/attn/core"]
    assert (core.q_len, core.kv_len, core.batch, core.kv_dtype) == (1, 101, 3, "fp8")
    assert ops["L0/mlp/down"].m == 3 and ops["lm_head"].m == 3
    assert ops["L0/attn/kv_write"].nbytes == 3 * 2 * 2 * 16 * 1


def test_generate_raises():
    with pytest.raises(InputError):
        build_ops(TINY, Scenario(mode="generate"))


def _gemm_flops(ops):
    return sum(op.cost().flops for op in ops if isinstance(op, Gemm))


@pytest.mark.parametrize("name", ["llama2-7b", "llama3-70b", "qwen2-7b", "gpt3-175b"])
def test_forward_flops_closed_form(name):
    # Forward FLOPs = 2 N_linear tokens + lm_head on the last tokens + causal attention. The
    # serving engine's lm_head runs the vocabulary padded to 64 (GPT-3's 50,257: 50,304).
    cfg = load_model(name)
    b, s = 2, 1024
    ops = build_ops(cfg, Scenario(mode="prefill", batch=b, seq=s))
    parts = cfg.param_breakdown()
    bias = (cfg.heads + 2 * cfg.kv_heads) * cfg.hd if (cfg.qkv_bias or cfg.linear_bias) else 0
    if cfg.linear_bias:
        bias += cfg.hidden + cfg.intermediate + cfg.hidden
    n_linear = parts["attn"] + parts["mlp"] - cfg.layers * bias
    expected_gemm = 2 * n_linear * b * s + 2 * b * cfg.hidden * -(-cfg.vocab // 64) * 64
    assert _gemm_flops(ops) == expected_gemm
    attn = sum(op.cost().flops for op in ops if isinstance(op, Attention))
    assert attn == cfg.layers * 4 * b * cfg.heads * cfg.hd * s * (s + 1) / 2


def test_train_gemm_flops_are_3x_forward():
    cfg = load_model("llama3-8b")
    sc = Scenario(mode="train", batch=1, seq=512)
    ops = build_ops(cfg, sc)
    fwd = [op for op in ops if isinstance(op, Gemm) and "." not in op.name]
    bwd = [op for op in ops if isinstance(op, Gemm) and op.name.endswith((".dgrad", ".wgrad"))]
    assert len(bwd) == 2 * len(fwd)
    assert _gemm_flops(fwd) + _gemm_flops(bwd) == 3 * _gemm_flops(fwd)
    lm = by_name(ops)["lm_head"]
    assert lm.m == 512  # training: logits for every token
    att = [op for op in ops if isinstance(op, Attention)]
    assert sum(a.backward for a in att) == cfg.layers == len(att) // 2
    names = [op.name for op in ops]
    assert names.index("L31/mlp/down.dgrad") < names.index("L0/mlp/down.dgrad")
    assert names[-3:] == ["optimizer/adamw", "optimizer/param_cast", "optimizer/zero_grad"]
    adam = by_name(ops)["optimizer/adamw"]
    assert adam.numel == cfg.param_count() and adam.cost().bytes == 28 * cfg.param_count()


# Kernel counts traced from transformers 5.23 LlamaForCausalLM (SDPA, DynamicCache, bf16, GQA) with
# a TorchDispatchMode on CPU, views excluded: 13 before the layers (embedding, positions, RoPE
# cos/sin), 40 per layer (RMSNorm 8 x 2, q/k/v 3, RoPE 10, cache cat 2, SDPA 1, o_proj 1,
# residual adds 2, MLP 5), 9 after (RMSNorm 8, lm_head 1); prefill and decode alike. Training adds
# 5 + 4 loss kernels, 2 + 16 for lm_head and final-norm backward, 73 per layer and 1 for the
# embedding backward: 276 for 2 layers; plus 8 foreach AdamW ops.
def test_eager_kernel_counts_match_hf_trace():
    for mode in ("prefill", "decode"):
        assert len(build_ops(TINY, Scenario(mode=mode, impl="eager", batch=2, seq=16))) == 102
    assert len(build_ops(TINY, Scenario(mode="train", impl="eager", batch=2, seq=16))) == 284
    # fp32: no casts in the norms (2 x 2 per layer) nor in the RoPE cache (3) or final norm (2)
    fp32 = build_ops(TINY, Scenario(mode="prefill", impl="eager", batch=2, seq=16, dtype="fp32"))
    assert len(fp32) == 102 - 8 - 3 - 2


def test_eager_vs_fused_counts():
    cfg = load_model("llama2-70b")
    fused = build_ops(cfg, Scenario(mode="decode", batch=8, ctx=1024))
    eager = build_ops(cfg, Scenario(mode="decode", batch=8, ctx=1024, impl="eager"))
    assert len(fused) == 1 + 80 * 10 + 2  # embed, 10 per layer, final norm + lm_head
    assert len(eager) == 13 + 80 * 40 + 9
    # Same GEMM FLOPs either way: q/k/v and gate/up are split, not changed.
    assert _gemm_flops(fused) == _gemm_flops(eager)
    cat = by_name(eager)["L5/attn/cache_k"]  # torch.cat re-copies the whole cache each step
    assert isinstance(cat, Copy) and cat.nbytes == 8 * 8 * 128 * 2 * 1025


def test_fp8_uses_fp8_gemms():
    ops = build_ops(load_model("llama3-8b"), Scenario(mode="prefill", seq=128, dtype="fp8"))
    o = by_name(ops)
    assert o["L0/mlp/down"].dtype == "fp8" and o["lm_head"].dtype == "bf16"
    assert isinstance(o["L0/mlp/down_quant"], Elementwise) and o["L0/mlp/act"].dtype == "bf16"


def test_moe_mixtral():
    cfg = load_model("mixtral-8x7b")
    o = by_name(build_ops(cfg, Scenario(mode="prefill", batch=1, seq=1000)))
    up = o["L0/mlp/experts_gate_up"]
    assert (up.tokens, up.topk, up.experts, up.n, up.k) == (1000, 2, 8, 2 * 14336, 4096)
    assert up.rows == 2000 and up.touched() == 8  # 1000 tokens x 2 reach all 8 experts
    assert o["L0/mlp/router"].n == 8
    one = by_name(build_ops(cfg, Scenario(mode="decode", batch=1, ctx=10)))
    down = one["L0/mlp/experts_down"]
    assert down.rows == 2 and down.touched() == 2  # one token: its two experts, one row each
    # Expert GEMM FLOPs per token = 2 x active expert params.
    flops = sum(op.cost().flops for n, op in o.items() if n.startswith("L0/mlp/experts"))
    assert flops == 2 * 1000 * 2 * 3 * 4096 * 14336
