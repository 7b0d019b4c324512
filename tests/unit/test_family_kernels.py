"""Kernels that differ by family in Hugging Face's code (measured in e2e_families.json and
family_diag_probe.json on an H100): GPT-2's Python GELU, Falcon-7B's math SDPA, a multi-query
StaticCache step, and fp32 GEMMs on CUDA cores."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gpuperf.api import predict
from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel.gemm import _fill_scale
from gpuperf.perfmodel.ops import Attention, Gemm
from gpuperf.perfmodel.roofline import op_time
from gpuperf.workloads.config import from_hf_dict
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer import build_ops

CONFIGS = Path(__file__).parent / "data" / "hf_configs"
GPT2 = {"model_type": "gpt2", "activation_function": "gelu_new", "n_embd": 1600, "n_head": 25,
        "n_layer": 2, "n_positions": 1024, "vocab_size": 50257}  # fmt: skip


def _hf(name: str, **over: object) -> object:
    d = json.loads((CONFIGS / f"{name}.json").read_text())
    return from_hf_dict({**d, **over}, name=name)


def _names(cfg: object, **sc: object) -> list[str]:
    return [op.name for op in build_ops(cfg, Scenario(**sc))]  # type: ignore[arg-type]


def test_gelu_new_is_eight_kernels_in_eager_pytorch_and_one_fused():
    cfg = from_hf_dict(GPT2, name="gpt2")
    assert cfg.hidden_act == "gelu_new"
    eager = [n for n in _names(cfg, mode="prefill", seq=128, impl="eager") if "mlp/act" in n]
    fused = [n for n in _names(cfg, mode="prefill", seq=128, impl="fused") if "mlp/act" in n]
    assert len(eager) == 8 * cfg.num_hidden_layers  # mul, pow, mul, add, mul, tanh, add, mul
    assert len(fused) == cfg.num_hidden_layers
    fused_ops = [op for op in build_ops(cfg, Scenario(mode="prefill", seq=128, impl="fused"))
                 if "mlp/act" in op.name]  # fmt: skip
    assert {op.fn for op in fused_ops} == {"gelu_tanh_fused"}


def test_falcon_7b_runs_pytorchs_math_sdpa_in_fp32_and_plans_nothing():
    falcon = _hf("falcon-7b", num_hidden_layers=2)
    new_arch = _hf("falcon-40b", num_hidden_layers=2)
    assert falcon.sdpa_math and not new_arch.sdpa_math
    ops = build_ops(falcon, Scenario(mode="prefill", seq=2048, impl="eager"))
    scores = [op for op in ops if op.name.endswith("attn/scores")]
    assert scores and all(op.dtype == "fp32" and op.batch == 71 for op in scores)
    assert not any(op.kind == "attention" for op in ops)
    # fp32 on CUDA cores, every (query, key) pair: many times the flash kernel's time
    llama_like = dataclasses.replace(falcon, sdpa_math=False)
    flash = predict(llama_like, gpu="h100", mode="prefill", seq=2048, impl="eager")
    math = predict(falcon, gpu="h100", mode="prefill", seq=2048, impl="eager")
    assert math.total_ms > 2 * flash.total_ms
    # an eager decode step pays no cuDNN plan: the math backend has none
    with_plan = predict(llama_like, gpu="h100", mode="decode", ctx=2048, impl="eager")
    no_plan = predict(falcon, gpu="h100", mode="decode", ctx=2048, impl="eager")
    plan_ms = load_gpu("h100").params.host_attn_plan_s * 1e3
    assert with_plan.extra["host_ms"] - no_plan.extra["host_ms"] > 0.8 * plan_ms


def test_a_multi_query_static_cache_step_repeats_kv_as_a_view_and_gqa_copies_it():
    mqa = _hf("starcoder", num_hidden_layers=2)
    sc = Scenario(mode="decode", batch=8, ctx=2048, impl="eager", cuda_graphs=True)
    ops = build_ops(mqa, sc)
    assert not any("repeat" in op.name for op in ops)
    core = [op for op in ops if op.name.endswith("attn/core")]
    assert core and all(isinstance(op, Attention) and op.kv_heads == op.heads for op in core)
    gqa = _hf("minitron-8b-base", num_hidden_layers=2)
    assert any("repeat_k" in op.name for op in build_ops(gqa, sc))


@pytest.mark.parametrize("gpu", ["h100", "a100-sxm4-80gb", "h200"])
def test_gemm_fill_is_a_time_so_fp32_on_cuda_cores_fills_in_fewer_of_its_k_steps(gpu):
    g = load_gpu(gpu)
    assert _fill_scale(g, "bf16") == _fill_scale(g, "fp8") == _fill_scale(g, "tf32") == 1.0
    assert 0.05 < _fill_scale(g, "fp32") < 0.5
    # Falcon-7B's Q·Kᵀ in fp32 (71 heads, 2,048 x 2,048 x 64) took 1.09 ms on an H100
    # (family_diag_probe.json); the fill counted in fp32 k-steps made it 3.2 ms
    if gpu == "h100":
        t = op_time(Gemm("s", 2048, 2048, 64, "fp32", 71), g).time
        assert 0.8e-3 < t < 1.4e-3


def test_falcon_math_sdpa_decode_is_gemv_and_batch_one_keeps_kv_a_view():
    falcon = _hf("falcon-7b", num_hidden_layers=2)
    ops = build_ops(falcon, Scenario(mode="decode", ctx=2048, impl="eager"))
    scores = [op for op in ops if op.name.endswith("attn/scores")]
    assert scores and all(op.kind == "reduce" and op.fn == "gemv" for op in scores)
    # one query: streaming the fp32 keys once, tens of µs (cuBLAS gemv 17.5 µs, measured)
    assert op_time(scores[0], load_gpu("h100")).time < 60e-6
    assert not any("expand" in op.name for op in ops)
    two = build_ops(falcon, Scenario(mode="prefill", batch=2, seq=512, impl="eager"))
    assert any("expand_k" in op.name for op in two)


def test_math_sdpa_mask_kernels_have_no_backward_and_fused_gelu_new_is_tanh():
    falcon = _hf("falcon-7b", num_hidden_layers=2)
    names = [op.name for op in build_ops(falcon, Scenario(mode="train", seq=512, impl="eager"))]
    assert any(n.endswith("attn/math.isneginf") for n in names)
    assert not any("isneginf.bwd" in n or "mask_where.bwd" in n for n in names)
    gated = from_hf_dict({**GPT2, "model_type": "llama", "hidden_act": "gelu_new",
                          "hidden_size": 256, "intermediate_size": 512,
                          "num_attention_heads": 4, "num_hidden_layers": 1,
                          "vocab_size": 1000}, name="g")  # fmt: skip
    fns = {
        getattr(op, "fn", "")
        for op in build_ops(gated, Scenario(mode="prefill", seq=64, impl="fused"))
    }
    assert "gelu_tanh_and_mul" in fns and "gelu_new_and_mul" not in fns


def test_falcon_new_architecture_broadcasts_kv_and_masks_sdpa():
    cfg = _hf("falcon-40b", num_hidden_layers=2)
    assert cfg.kv_broadcast and cfg.sdpa_mask and not cfg.sdpa_math
    ops = build_ops(cfg, Scenario(mode="prefill", seq=4096, impl="eager"))
    core = [op for op in ops if op.name.endswith("attn/core")]
    # K and V reach SDPA at every query head, with HF's materialized causal mask
    assert core and all(op.kv_heads == op.heads == 128 and op.mask for op in core)
    expand = [op for op in ops if op.name.endswith("attn/expand_k")]
    assert expand and expand[0].numel == 4096 * 128 * 64
    # the masked kernel visits the whole square: several times the causal flash kernel
    plain = dataclasses.replace(cfg, kv_broadcast=False, sdpa_mask=False)
    a = predict(cfg, gpu="h100", mode="prefill", seq=4096, impl="eager")
    b = predict(plain, gpu="h100", mode="prefill", seq=4096, impl="eager")
    assert a.total_ms > 1.15 * b.total_ms
    train = build_ops(cfg, Scenario(mode="train", seq=1024, impl="eager"))
    sums = [op for op in train if op.name.endswith("attn/expand_k.bwd")]
    assert sums and sums[0].fn == "sum" and not any("dk_sum" in op.name for op in train)


def test_eager_norm_and_rope_run_pytorchs_non_vectorized_kernels():
    cfg = _hf("qwen3-0.6b", num_hidden_layers=1)
    ops = {op.name: op for op in build_ops(cfg, Scenario(mode="prefill", batch=8, seq=2048,
                                                          impl="eager"))}  # fmt: skip
    generic = {n.split("/", 1)[1] for n, op in ops.items() if getattr(op, "generic", False)}
    assert {"attn/norm/cast_f32", "attn/norm/mul", "attn/norm/mul_weight", "attn/rope_q/cat",
            "attn/rope_q/mul_cos", "attn/rope_q/add"} <= generic  # fmt: skip
    assert not ({"attn/norm/pow", "attn/norm/cast_back", "mlp/mul", "attn/residual"} & generic)
    g = load_gpu("h100")
    w = ops["L0/attn/norm/mul_weight"]
    vec = dataclasses.replace(w, generic=False)
    # measured: 1.4-1.7 TB/s against ~3 for the vectorized kernel (eager_ew.json)
    assert op_time(w, g).time > 1.8 * op_time(vec, g).time


def test_falcon_picks_k_and_v_by_a_list_index_and_sdpa_makes_its_mask_additive():
    for name, math in (("falcon-7b", True), ("falcon-40b", False)):
        cfg = _hf(name, num_hidden_layers=1)
        names = _names(cfg, mode="decode", ctx=512, impl="eager")
        # _split_heads: each list index copied to the GPU, then an index kernel
        for t in "kv":
            assert f"L0/attn/{t}_index_h2d" in names and f"L0/attn/pick_{t}" in names
        mask = "L0/attn/math.mask" if math else "L0/attn/mask"
        assert {f"{mask}_zero", f"{mask}_neg_inf", f"{mask}_where"} <= set(names)
        # mlp_output += attention_output; residual + out: two adds
        assert {"L0/mlp/residual_sum", "L0/mlp/residual"} <= set(names)
    llama = _names(from_hf_dict({**GPT2, "model_type": "gpt2"}, name="gpt2"), mode="decode",
                   ctx=64, impl="eager")  # fmt: skip
    assert not any("index_h2d" in n or "mask_zero" in n for n in llama)
