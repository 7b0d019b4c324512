"""Memory model: hand numbers and published ones."""

from __future__ import annotations

import pytest

from gpuperf.step.memory import (
    kv_cache_bytes,
    memory_breakdown,
    train_activation_bytes_per_layer,
)
from gpuperf.workloads.config import ModelConfig, load_model
from gpuperf.workloads.scenario import Scenario

KIB = 1024


@pytest.mark.parametrize(
    "name,kib",  # modeling-facts §7: KV cache per token at 16-bit
    [("llama2-7b", 512), ("llama2-13b", 800), ("llama2-70b", 320), ("llama3-8b", 128),
     ("mistral-7b", 128), ("mixtral-8x7b", 128), ("gpt3-175b", 4608)],
)  # fmt: skip
def test_kv_cache_per_token(name, kib):
    assert kv_cache_bytes(load_model(name), 1, 1, "bf16") == kib * KIB


def test_decode_kv_cache_and_fp8_kv():
    cfg = load_model("llama2-7b")
    m = memory_breakdown(cfg, Scenario(mode="decode", batch=4, ctx=1023))
    assert m["kv_cache"] == 4 * 1024 * 512 * KIB  # 2 GiB
    m8 = memory_breakdown(cfg, Scenario(mode="decode", batch=4, ctx=1023, kv_dtype="fp8"))
    assert m8["kv_cache"] == m["kv_cache"] / 2
    assert m["gradients"] == m["optimizer"] == 0


def test_inference_weights():
    cfg = load_model("llama2-7b")
    assert memory_breakdown(cfg, Scenario())["weights"] == 2 * 6_738_415_616
    # fp8: linear layers at 1 byte; embed, lm_head (2 x 32000 x 4096) and norms at 2 bytes.
    other = 2 * 32000 * 4096 + 65 * 4096
    fp8 = memory_breakdown(cfg, Scenario(dtype="fp8"))["weights"]
    assert fp8 == (6_738_415_616 - other) + 2 * other


def test_training_bytes_per_param_as_megatron_and_zero():
    # Megatron dist_optimizer.md: bf16 params + fp32 main grads + fp32 master, m, v = 18 bytes;
    # fp16 (grads in fp16) is ZeRO's 2 + 2 + 12 = 16 Psi (Rajbhandari et al. SC20 §3.1).
    cfg = load_model("llama2-7b")
    P = cfg.param_count()
    m = memory_breakdown(cfg, Scenario(mode="train", batch=1, seq=2048))
    assert (m["weights"], m["gradients"], m["optimizer"]) == (2 * P, 4 * P, 12 * P)
    m16 = memory_breakdown(cfg, Scenario(mode="train", batch=1, seq=2048, dtype="fp16"))
    assert m16["weights"] + m16["gradients"] + m16["optimizer"] == 16 * P
    eager = memory_breakdown(cfg, Scenario(mode="train", batch=1, seq=2048, impl="eager"))
    assert eager["gradients"] == 2 * P and eager["optimizer"] == 4 * P  # bf16 grads, m and v
    m32 = memory_breakdown(cfg, Scenario(mode="train", batch=1, seq=2048, dtype="fp32"))
    assert m32["weights"] + m32["gradients"] + m32["optimizer"] == 16 * P
    assert m["kv_cache"] == 0


def test_korthikanti_34sbh_for_gpt_layer():
    # Korthikanti et al. 2022 §4: s b h (34 + 5 a s / h); FlashAttention drops the 5as^2b term
    # and keeps a fp32 log-sum-exp per (token, head) instead.
    cfg = load_model("gpt3-175b")
    s, b, h, a = 2048, 1, 12288, 96
    got = train_activation_bytes_per_layer(cfg, b, s, "bf16", dropout=True)
    assert got == s * b * h * 34 + 4 * s * b * a


def test_gqa_swiglu_layer_by_hand():
    cfg = ModelConfig(name="t", hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, intermediate_size=128, vocab_size=10)  # fmt: skip
    # norms 2*64, attn 64 + 64 + 2*32 + 64, mlp 64 + 3*128 -> 832 elements/token, 2 B each.
    assert train_activation_bytes_per_layer(cfg, 2, 8, "bf16") == 16 * 832 * 2 + 4 * 16 * 4


def test_inference_activations_by_hand():
    cfg = load_model("llama2-7b")
    m = memory_breakdown(cfg, Scenario(mode="prefill", batch=1, seq=1024))
    # residual + norm output (2h) + max(QKV + O = 4h, SwiGLU 3f) per token, + fp32 last-token logits
    assert m["activations"] == 2 * 1024 * (2 * 4096 + 3 * 11008) + 4 * 32000


def test_optimizer_bytes_match_the_optimizer_ops():
    from gpuperf.step.memory import optimizer_bytes_per_param

    assert optimizer_bytes_per_param(2, eager=False) == 12  # fp32 master + m + v (ZeRO paper)
    assert optimizer_bytes_per_param(4, eager=False) == 8  # fp32 model: m + v, no master copy
    assert optimizer_bytes_per_param(8, eager=False) == 16  # fp64 model: fp64 m + v
    assert optimizer_bytes_per_param(2, eager=True) == 4  # torch AdamW on bf16 params: bf16 m, v


def test_an_uneven_stage_holds_its_share_of_the_kv_cache():
    from gpuperf.step.memory import memory_breakdown

    cfg = load_model("llama2-70b")  # 80 layers over 3 stages: 27, 27, 26
    one = memory_breakdown(cfg, Scenario(mode="decode", batch=8, ctx=4096))["kv_cache"]
    staged = memory_breakdown(cfg, Scenario(mode="decode", batch=8, ctx=4096, pp=3))
    assert staged["kv_cache"] == one * (27 / 80)  # the busiest stage's layers
