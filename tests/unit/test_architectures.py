"""Issue 14's architectures in the op lists: MoE as Hugging Face runs it (grouped_mm experts,
routers, shared experts, dense layers), MLA (naive and absorbed), sliding windows, and their
memory. Hand math first; the kernel lists follow transformers 5.17's code (moe_layers,
mla_layers docstrings)."""

from __future__ import annotations

import pytest

from gpuperf import api
from gpuperf.errors import InputError
from gpuperf.perfmodel.ops import Attention, Gemm, GroupedGemm
from gpuperf.step.memory import kv_cache_bytes, weight_bytes
from gpuperf.workloads.config import load_model
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer import build_ops


def by_name(ops):
    return {op.name: op for op in ops}


def test_qwen3_moe_experts_are_grouped_gemms_of_the_expert_width():
    cfg = load_model("qwen3-30b-a3b")
    o = by_name(build_ops(cfg, Scenario(mode="prefill", seq=512, impl="eager")))
    up = o["L0/mlp/experts_gate_up"]
    assert isinstance(up, GroupedGemm)
    assert (up.tokens, up.topk, up.experts, up.n, up.k) == (512, 8, 128, 2 * 768, 2048)
    # HF's grouped_mm path: sort, gather, the offsets, three masked fills, the inverse permute.
    for name in (
        "experts.gather",
        "experts.histc",
        "experts.cumsum",
        "experts.mask_in",
        "experts.mask_up",
        "experts.mask_down",
        "experts.unpermute",
        "experts.sum",
    ):
        assert f"L0/mlp/{name}" in o, name  # fmt: skip
    # Qwen's router hands bf16 weights to the experts: no fp32 cast at the end.
    assert "L0/mlp/experts.cast" not in o and o["L0/mlp/experts.unpermute"].dtype == "bf16"


def test_mixtral_weights_are_fp32_so_the_weighted_sum_is_too():
    o = by_name(build_ops(load_model("mixtral-8x7b"), Scenario(seq=256, impl="eager")))
    assert o["L0/mlp/experts.unpermute"].dtype == "fp32"
    assert o["L0/mlp/experts.cast"].out_dtype == "bf16"


def test_deepseek_v3_dense_layers_mla_and_shared_expert():
    cfg = load_model("deepseek-v3")
    ops = build_ops(cfg, Scenario(mode="decode", batch=1, ctx=1023, impl="eager"))
    o = by_name(ops)
    assert "L0/mlp/gate" in o and "L0/mlp/experts_gate_up" not in o  # first_k_dense_replace
    assert "L3/mlp/experts_gate_up" in o and "L3/mlp/shared/gate" in o
    assert o["L3/mlp/shared/gate"].n == 2048  # one shared expert of the expert width
    # Naive MLA in decode: kv_b expands the whole cached latent (1024 tokens) every step.
    kv_b = o["L0/attn/kv_b"]
    assert isinstance(kv_b, Gemm) and (kv_b.m, kv_b.n, kv_b.k) == (1024, 128 * (128 + 128), 512)
    core = o["L0/attn/core"]
    assert (core.head_dim, core.vdim, core.kv_len) == (192, 128, 1024)
    assert o["L3/mlp/router"].dtype == "fp32"  # DeepSeek's router runs in fp32


def test_absorbed_mla_attends_over_the_latent():
    cfg = load_model("deepseek-v3")
    o = by_name(build_ops(cfg, Scenario(mode="decode", ctx=4095, mla="absorbed")))
    core = o["L0/attn/core"]
    assert (core.kv_heads, core.head_dim, core.vdim, core.kv_len) == (1, 512 + 64, 512, 4096)
    assert "L0/attn/kv_b" not in o and o["L0/attn/q_absorb"].batch == 128
    with pytest.raises(Exception, match="naive"):
        build_ops(cfg, Scenario(mode="decode", impl="eager", mla="absorbed"))


def test_mla_caches_the_latent():
    cfg = load_model("deepseek-v3")
    # 61 layers x (512 + 64) values x 1000 tokens x 2 bytes
    assert kv_cache_bytes(cfg, 1000, 1, "bf16") == 61 * 576 * 1000 * 2


def test_sliding_window_caps_the_cache_and_the_decode_attention():
    cfg = load_model("mistral-7b")  # a 4096-token window on every layer
    assert kv_cache_bytes(cfg, 16000, 1, "bf16") == kv_cache_bytes(cfg, 4096, 1, "bf16")
    fused = by_name(build_ops(cfg, Scenario(mode="decode", ctx=16000)))["L0/attn/core"]
    assert fused.kv_len == 4096
    eager = by_name(build_ops(cfg, Scenario(mode="decode", ctx=16000, impl="eager")))
    assert eager["L0/attn/core"].kv_len == 4096 and eager["L0/attn/core"].fixed_window


def test_hf_sliding_prefill_past_the_window_is_a_masked_square_flash_a_window():
    cfg = load_model("mistral-7b")
    hf = by_name(build_ops(cfg, Scenario(seq=8192, impl="eager")))["L0/attn/core"]
    assert hf.mask and not hf.causal and hf.attended_pairs() == 8192 * 8192
    flash = by_name(build_ops(cfg, Scenario(seq=8192)))["L0/attn/core"]
    # causal within a 4096 window: the first 4096 queries see 1..4096 keys, the rest 4096 each
    assert flash.attended_pairs() == 4096 * 4097 / 2 + 4096 * 4096


def test_window_pairs_by_hand():
    a = Attention("a", 1, 1, 1, q_len=10, kv_len=10, head_dim=8, window=4)
    assert a.attended_pairs() == 1 + 2 + 3 + 4 * 7
    assert Attention("a", 1, 1, 1, 1, 100, 8, window=4).attended_pairs() == 4


def test_weight_only_int4_memory_and_ops():
    cfg = load_model("llama3-8b")
    p = api.predict(cfg, gpu="h100", mode="decode", weight_dtype="int4")
    gemms = [op for op in build_ops(cfg, Scenario(mode="decode", weight_dtype="int4"))
             if isinstance(op, Gemm) and op.name.startswith("L0/")]  # fmt: skip
    assert gemms and all(g.wdtype == "int4" and g.dtype == "bf16" for g in gemms)
    b = cfg.param_breakdown()
    linear = b["attn"] + b["mlp"]
    expected = linear * (0.5 + 4 / 128) + (cfg.param_count() - linear) * 2
    assert weight_bytes(cfg, "bf16", "int4") == pytest.approx(expected)
    assert p.memory["weights"] == pytest.approx(expected)


def test_fp8_rowwise_reaches_the_gemms():
    ops = build_ops(load_model("llama3-8b"), Scenario(seq=256, dtype="fp8", fp8_scales="row"))
    down = by_name(ops)["L0/mlp/down"]
    assert (down.dtype, down.scales) == ("fp8", "row")


def test_weight_formats_are_refused_where_they_do_not_apply():
    with pytest.raises(Exception, match="weight format"):
        Scenario(dtype="int4")
    with pytest.raises(Exception, match="inference"):
        Scenario(mode="train", weight_dtype="int4")
    with pytest.raises(Exception, match="bf16 or fp16"):
        Scenario(dtype="fp8", weight_dtype="int4")


def test_moe_host_cost_is_measured_per_family():
    """Mixtral's eager MoE block costs the host more per kernel than a dense MLP (measured:
    step.cost.HF_MOE_HOST); the same ops under a fused implementation do not."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.step.cost import HF_MOE_HOST, HostRules, moe_host

    h100 = load_gpu("h100")
    mixtral = moe_host(load_model("mixtral-8x7b"))
    rules = HostRules.of(Scenario(mode="decode", impl="eager"), h100, None, mixtral)
    assert rules.moe == HF_MOE_HOST["mixtral"] > 2
    assert HostRules.of(Scenario(mode="decode"), h100, None, mixtral).moe == 1.0
    assert moe_host(load_model("mistral-7b")) == 1.0
    # Mixtral and Mistral-7B share their attention and 32 layers; Mixtral's MoE block costs the
    # host more than Mistral's MLP.
    moe = api.predict("mixtral-8x7b", gpu="h100", mode="decode", impl="eager", ctx=1024)
    dense = api.predict("mistral-7b", gpu="h100", mode="decode", impl="eager", ctx=1024)
    assert moe.extra["host_ms"] > 1.5 * dense.extra["host_ms"]


def test_moe_imbalance_slows_the_busiest_expert_parallel_rank():
    """With ep=8 the busiest rank gets 1.5x the mean token copies: its grouped GEMMs and its
    all-to-alls carry 1.5x the rows; without ep it would change nothing, so it is refused."""
    cfg = load_model("mixtral-8x7b")
    plan = {"system": "dgx-h100", "seq": 4096, "ep": 8, "dp": 8}

    def rows(p):  # noqa: ANN001
        t = p.table.set_index("name")
        return t.loc["L0/mlp/experts_down", "flops"], t.loc["L0/mlp/dispatch.alltoall", "bytes"]

    even, uneven = (api.predict(cfg, **plan, moe_imbalance=f) for f in (1.0, 1.5))
    (f1, b1), (f2, b2) = rows(even), rows(uneven)
    assert f2 == pytest.approx(1.5 * f1, rel=1e-3) and b2 == pytest.approx(1.5 * b1, rel=1e-3)
    assert uneven.total_ms > even.total_ms
    with pytest.raises(InputError, match="needs ep > 1"):
        api.predict(cfg, gpu="h100", seq=4096, moe_imbalance=1.5)
    with pytest.raises(Exception, match="moe_imbalance"):
        Scenario(moe_imbalance=0.5)


DATA = "tests/unit/data/hf_configs"


@pytest.mark.parametrize(
    "model, backward_of",
    [
        # fused qkv_proj / gate_up_proj: the traced Llama backward looked up attn/q and raised
        # StopIteration (a traceback from `predict --mode train --impl eager`)
        (f"{DATA}/phi-3-mini-4k-instruct.json", "attn/qkv"),
        ("gemma2-9b", "attn/post_norm"),  # sandwich norms
        (f"{DATA}/qwen3-0.6b.json", "attn/q_norm"),  # per-head q/k norms
    ],
)
def test_eager_training_backward_covers_layers_unlike_llama(model, backward_of):
    from gpuperf.workloads.transformer_layers import eager_layer, make_dims
    from gpuperf.workloads.transformer_train import eager_layer_backward

    cfg = load_model(model)
    assert cfg.unlike_llama()
    d = make_dims(cfg, Scenario(mode="train", impl="eager", seq=128))
    bwd = eager_layer_backward(cfg, d, eager_layer(cfg, d))
    assert any(op.name.startswith(backward_of) for op in bwd), backward_of
    assert api.predict(model, mode="train", impl="eager", seq=128).total_ms > 0
    assert not load_model("llama2-7b").unlike_llama()


@pytest.mark.parametrize("model", ["llama3-8b", "llama2-7b"])
def test_the_derived_eager_backward_of_llama_is_the_traced_one(model):
    """Families unlike Llama get their eager backward derived from the forward kernels; pushed
    through that path, Llama's layer (GQA and MHA) gives the kernels traced on it, sizes and
    order, only silu's backward named by its fused rule."""
    from gpuperf.workloads.transformer_layers import eager_layer, make_dims
    from gpuperf.workloads.transformer_train import _derived_backward, eager_layer_backward

    cfg = load_model(model)
    d = make_dims(cfg, Scenario(mode="train", impl="eager", batch=2, seq=256))
    layer = eager_layer(cfg, d)
    traced, derived = eager_layer_backward(cfg, d, layer), _derived_backward(cfg, d, layer)
    assert [op.name for op in derived] == [op.name for op in traced]
    for t, g in zip(traced, derived, strict=True):
        if t.name != "mlp/act.bwd":
            assert g == t


def test_mla_gathers_the_sequence_shards_under_sequence_parallelism():
    from gpuperf.workloads.groups import Groups
    from gpuperf.workloads.transformer_layers import fused_layer, make_dims

    cfg = load_model("deepseek-v3")
    sc = Scenario(mode="prefill", seq=1024)
    d = make_dims(cfg, sc, Groups(tp=8, sp=True))
    names = {op.name for op in fused_layer(cfg, d)}
    assert {"attn/qkv.allgather", "attn/out.reducescatter"} <= names


@pytest.mark.parametrize("prompt, steps", [(8192, 4096), (100, 5000), (4000, 200), (10, 3)])
def test_generate_counts_each_decode_step_at_its_windowed_context(prompt, steps):
    # generate's model FLOPs multiplied one key's cost by every key and so ignored the window
    # (mistral-7b, 8192 + 4096: 6.6% too many); they are the per-step counts, summed
    from types import SimpleNamespace

    from gpuperf.step.mfu import attention_flops_per_token, decode_attention_flops

    for name in ("mistral-7b", "gemma2-9b", "llama2-7b"):
        cfg = load_model(name)
        per_step = sum(
            attention_flops_per_token(cfg, SimpleNamespace(mode="decode", ctx=prompt + j))
            for j in range(steps)
        )
        assert decode_attention_flops(cfg, prompt, steps) == pytest.approx(per_step, rel=1e-12)


@pytest.mark.parametrize("pp", [4, 16, 32])
def test_pipeline_stages_hold_the_parameters_of_their_own_layers(pp):
    # The experts were spread evenly over all 61 layers, dense ones included (pp=16: the first
    # stage, 3 dense layers + 1 MoE, held 5.4e9 expert parameters instead of 1.4e9), and stages
    # with as many layers were taken as alike whatever their layers were.
    from gpuperf.workloads.layer_kinds import layer_kinds
    from gpuperf.workloads.shard import gpu_params, stages

    cfg = load_model("deepseek-v3")
    sc = Scenario(mode="train", pp=pp, ep=8, dp=8, global_batch=64, micro_batch=1)
    b = cfg.param_breakdown()
    expert = dense = 0.0
    for st in stages(layer_kinds(cfg), pp):
        p = gpu_params(cfg, st, sc.tp, sc.ep, sc.pp)
        moe = sum(k.moe for k in layer_kinds(cfg)[st.first : st.first + st.layers])
        assert p.expert == pytest.approx(moe * b["mlp"] / cfg.moe_layers / 8)
        expert += p.expert * 8 * st.count
        dense += p.dense * st.count
    assert expert == pytest.approx(b["mlp"])
    assert dense == pytest.approx(cfg.param_count() - b["mlp"])


def test_gemma_norm_scales_in_fp32_before_the_cast_back():
    """Gemma2/3RMSNorm: output * (1.0 + weight.float()), then type_as(x); LlamaRMSNorm casts
    back first and scales in bf16. The eager op lists follow each (forward and backward)."""
    from dataclasses import replace

    gemma = load_model("gemma2-9b")
    assert gemma.norm_weight_fp32 and not load_model("llama3-8b").norm_weight_fp32
    llama_like = replace(gemma, norm_weight_fp32=False)
    sc = Scenario(mode="train", seq=256, impl="eager")
    names = [op.name for op in build_ops(gemma, sc) if op.name.startswith("L0/attn/norm/")]
    assert names.index("L0/attn/norm/mul_weight") < names.index("L0/attn/norm/cast_back")
    assert names.index("L0/attn/norm/cast_back.bwd") < names.index("L0/attn/norm/mul_weight.bwd_w")
    g, ll = by_name(build_ops(gemma, sc)), by_name(build_ops(llama_like, sc))
    n = 256 * gemma.hidden_size
    for op in ("L0/attn/norm/mul_weight", "L0/attn/norm/mul_weight.bwd_x"):
        assert g[op].dtype == "fp32" and ll[op].dtype == "bf16"
        # an fp32 multiply moves twice the bytes of the bf16 one
        assert g[op].cost().bytes == pytest.approx(2 * ll[op].cost().bytes)
        assert g[op].cost().bytes >= 8 * n


@pytest.mark.parametrize("model", ["gemma2-9b", "qwen3-32b"])
def test_non_llama_eager_norms_take_autograds_rmsnorm_kernels(model):
    """Families whose layer is not Llama's derive their eager backward from the forward
    kernels, but an eager RMSNorm's backward is autograd's 16 kernels there too (its mean and
    the rsqrt's sum have gradients; the generic per-kernel rule gave it 7, none of them reduces)."""
    cfg = load_model(model)
    assert cfg.unlike_llama()
    ops = build_ops(cfg, Scenario(mode="train", seq=256, impl="eager"))
    for norm in ("L0/attn/norm", "L0/attn/q_norm", "L0/mlp/norm"):
        if not any(op.name.startswith(norm + "/") for op in ops):
            continue
        bwd = [op.name for op in ops if op.name.startswith(norm + "/") and ".bwd" in op.name
               or op.name in (norm + "/weight.grad", norm + "/rsqrt.grad_sum",
                              norm + "/grad_add")]  # fmt: skip
        assert len(bwd) == 16, (norm, bwd)
        assert norm + "/mean.bwd" in bwd and norm + "/pow.bwd" not in bwd


def test_gemma_norm_weight_kernels_and_fp32_models_without_casts():
    """1.0 + weight.float() is two small kernels (and the weight's gradient is cast back); a
    model run in fp32 has no casts, forward or backward."""
    gemma = load_model("gemma2-9b")
    names = [op.name for op in build_ops(gemma, Scenario(mode="train", seq=256, impl="eager"))
             if op.name.startswith("L0/attn/norm/")]  # fmt: skip
    for k in ("weight_f32", "weight_plus1", "weight.grad_cast"):
        assert f"L0/attn/norm/{k}" in names
    assert len([n for n in names if ".bwd" in n or "grad" in n]) == 17
    fp32 = build_ops(gemma, Scenario(mode="train", seq=256, impl="eager", dtype="fp32"))
    assert not [op.name for op in fp32 if "/norm/" in op.name and "cast" in op.name]


@pytest.mark.parametrize("model", ["gemma2-9b", "qwen3-32b", "phi-3-mini-like"])
def test_eager_tp_backward_all_reduces_for_every_family(model):
    """Megatron-style TP of eager layers all-reduces each block's input gradient once (qkv and
    gate/up) for every family, not only where the backward follows Llama's trace."""
    from dataclasses import replace

    from gpuperf.perfmodel.ops import Collective
    from gpuperf.workloads.groups import groups_for
    from gpuperf.workloads.step_work import build

    cfg = (replace(load_model("llama3-8b"), qkv_fused=True, gate_up_fused=True)
           if model == "phi-3-mini-like" else load_model(model))  # fmt: skip
    sc = Scenario(mode="train", seq=256, impl="eager", tp=2)
    work = build(cfg, sc, groups_for(sc, 8))
    layer = next(p for p in work.stages[0].bwd if p.layer0 is not None)
    names = [op.name for op in layer.ops if isinstance(op, Collective)]
    assert "attn/qkv.bwd_allreduce" in names and "mlp/gate_up.bwd_allreduce" in names


@pytest.mark.parametrize("impl", ["fused", "eager"])
def test_moe_training_runs_every_expert_gemms_backward(impl):
    """Each routed expert's grouped GEMM has an input gradient (n and k swapped) and a weight
    gradient: the backward's expert products are twice the forward's (they were missing)."""
    cfg = load_model("qwen3-30b-a3b")
    ops = build_ops(cfg, Scenario(mode="train", seq=2048, impl=impl))
    grouped = [op for op in ops if isinstance(op, GroupedGemm) and op.name.startswith("L0/")]
    fwd = [op for op in grouped if not op.name.endswith((".dgrad", ".wgrad"))]
    assert {op.name for op in fwd} == {"L0/mlp/experts_gate_up", "L0/mlp/experts_down"}
    o = by_name(grouped)
    for op in fwd:
        dgrad, wgrad = o[op.name + ".dgrad"], o[op.name + ".wgrad"]
        assert (dgrad.n, dgrad.k, dgrad.wgrad) == (op.k, op.n, False)
        assert (wgrad.n, wgrad.k, wgrad.wgrad) == (op.n, op.k, True)
    back = sum(op.cost().flops for op in grouped if op not in fwd)
    assert back == pytest.approx(2 * sum(op.cost().flops for op in fwd))


def test_megatron_moe_training_permutes_sorts_and_unpermutes_with_their_gradients():
    """Megatron-Core's token dispatcher under expert parallelism: the permute before the
    all-to-all, the sort by local expert after it (and back), each with a backward pass over
    the routed copies; serving's fused MoE has none of them."""
    cfg = load_model("qwen3-30b-a3b")
    kw = dict(system="dgx-h100", dp=8, ep=8, seq=4096)
    p = api.predict(cfg, mode="train", **kw)
    names = set(p.table["name"])
    for part in ("permute", "sort_chunks", "unsort_chunks", "moe_sum"):
        assert f"L0/mlp/{part}" in names and f"L0/mlp/{part}.bwd" in names, part
    prefill = set(api.predict(cfg, mode="prefill", **kw).table["name"])
    assert "L0/mlp/permute" not in prefill and "L0/mlp/sort_chunks" not in prefill
    assert "L0/mlp/moe_sum" in prefill


def test_fp8_moe_quantizes_hidden_states_once_in_serving_and_the_routed_rows_in_training():
    """A serving engine's fp8 fused MoE quantizes each token's hidden state before it gathers
    the k copies (T·h); Megatron quantizes the permuted rows it received (T·k·h)."""
    cfg = load_model("qwen3-30b-a3b")
    sc = dict(seq=1024, dtype="fp8", impl="fused")
    pre = by_name(build_ops(cfg, Scenario(mode="prefill", **sc)))
    assert pre["L0/mlp/experts_gate_up_quant"].numel == 1024 * 2048
    assert pre["L0/mlp/experts_down_quant"].numel == 1024 * 8 * 768
    train = by_name(build_ops(cfg, Scenario(mode="train", **sc)))
    assert train["L0/mlp/experts_gate_up_quant"].numel == 1024 * 8 * 2048
