"""Parallel plans: validation, pipeline/ZeRO arithmetic, memory, and Megatron-LM's published
throughput (Narayanan et al. SC21, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", Table 1: GPT, V=51200, s=2048, full recomputation, DGX A100 / Selene)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_system
from gpuperf.perfmodel.parallel import ParallelPlan, predict_plan
from gpuperf.workloads.config import ModelConfig, load_model

DGX_H100 = load_system("dgx-h100")
DGX_A100 = load_system("dgx-a100")
LLAMA70 = load_model("llama2-70b")
MIXTRAL = load_model("mixtral-8x7b")
TRAIN = ParallelPlan(mode="train", tp=8, pp=2, dp=4, global_batch=1024, micro_batch=1, seq=4096,
                     zero=1, recompute="selective", sequence_parallel=True)  # fmt: skip


def test_issue_example_llama70b_64_gpus():
    r = predict_plan(LLAMA70, TRAIN, DGX_H100, 8)
    assert r.fits and r.nodes == 8
    assert sum(r.breakdown.values()) == pytest.approx(r.step_time)
    # m = 1024 / (1·4) = 256 microbatches; bubble = (p-1)/m of the pipelined part
    pipelined = r.step_time - r.breakdown["dp_comm"] - r.breakdown["optimizer"]
    assert r.breakdown["bubble"] / pipelined == pytest.approx(1 / (256 + 1))
    assert r.tokens_per_s == pytest.approx(1024 * 4096 / r.step_time)
    assert 0.2 < r.mfu < 0.7


def test_interleaving_shrinks_the_bubble():
    base = replace(TRAIN, global_batch=64)
    inter = replace(base, schedule="interleaved", v=4)
    a, b = predict_plan(LLAMA70, base, DGX_H100, 8), predict_plan(LLAMA70, inter, DGX_H100, 8)
    assert b.breakdown["bubble"] < a.breakdown["bubble"] / 3
    assert b.breakdown["pp_comm"] == pytest.approx(4 * a.breakdown["pp_comm"])


def test_zero_stages_shrink_memory_as_rajbhandari():
    # Per parameter (bf16 params, fp32 grads, fp32 Adam): 18 | 6 + 12/d | 2 + 16/d | 18/d bytes.
    plan = replace(TRAIN, dp=4, zero=0)
    mems = [predict_plan(LLAMA70, replace(plan, zero=z), DGX_H100, 8).memory for z in range(4)]
    states = [m["weights"] + m["gradients"] + m["optimizer"] for m in mems]
    per_param = states[0] / 18
    for got, bytes_per_param in zip(states, (18, 6 + 12 / 4, 2 + 16 / 4, 18 / 4), strict=True):
        assert got == pytest.approx(per_param * bytes_per_param)


def test_full_recompute_trades_time_for_memory():
    none = predict_plan(LLAMA70, replace(TRAIN, recompute="none"), DGX_H100, 8)
    full = predict_plan(LLAMA70, replace(TRAIN, recompute="full"), DGX_H100, 8)
    assert full.memory["activations"] < none.memory["activations"] / 5
    assert full.step_time > none.step_time * 1.2


def test_70b_does_not_fit_on_one_node_without_sharding():
    plan = ParallelPlan(mode="train", tp=8, pp=1, dp=1, global_batch=8, seq=4096)
    r = predict_plan(LLAMA70, plan, DGX_H100, 1)
    assert not r.fits and r.notes


def test_decode_tp8_issue_example():
    r = predict_plan(LLAMA70, ParallelPlan(mode="decode", tp=8, batch=64, ctx=4096), DGX_H100)
    # KV cache: 320 KiB per token at bf16 (modeling-facts §7), 64 × 4097 tokens, split over 8
    assert r.memory["kv_cache"] == pytest.approx(320 * 1024 * 64 * 4097 / 8)
    assert r.breakdown["tp_comm"] > 0 and r.fits
    assert r.tokens_per_s == pytest.approx(64 / r.step_time)


def test_mixtral_expert_parallel_issue_example():
    plan = ParallelPlan(mode="train", tp=2, dp=8, ep=8, global_batch=256, seq=4096)
    r = predict_plan(MIXTRAL, plan, DGX_H100, 2)
    assert r.breakdown["ep_comm"] > 0
    dense = predict_plan(MIXTRAL, replace(plan, ep=1), DGX_H100, 2)
    assert r.memory["weights"] < dense.memory["weights"] / 3  # experts split 8 ways


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (ParallelPlan(tp=3, dp=16, pp=1, global_batch=48), "heads"),
        (ParallelPlan(tp=8, pp=8, dp=1, schedule="interleaved", v=3), "layers"),
        (ParallelPlan(tp=8, pp=2, dp=2), "GPUs"),
        (ParallelPlan(tp=8, dp=8, ep=8), "dense"),
        (ParallelPlan(tp=8, dp=8, global_batch=100), "multiple"),
        (ParallelPlan(tp=8, dp=8, schedule="interleaved", v=2), "pp > 1"),
    ],
)
def test_invalid_plans_say_why(plan, message):
    with pytest.raises(InputError, match=message):
        predict_plan(LLAMA70, plan, DGX_H100, 8)


def test_ep_must_divide_experts():
    with pytest.raises(InputError, match="experts"):
        predict_plan(MIXTRAL, ParallelPlan(tp=1, dp=16, ep=16), DGX_H100, 2)


def _gpt(hidden: int, layers: int, heads: int) -> ModelConfig:
    return ModelConfig(name=f"gpt-h{hidden}", model_type="gpt2", hidden_size=hidden,
                       num_hidden_layers=layers, num_attention_heads=heads,
                       intermediate_size=4 * hidden, vocab_size=51200,
                       max_position_embeddings=2048, mlp="gelu", norm="layernorm",
                       positions="learned", linear_bias=True, tie_word_embeddings=True)  # fmt: skip


# Narayanan et al. SC21 Table 1: (heads, hidden, layers, t, p, GPUs, batch, TFLOP/s per GPU).
# The table does not give the microbatch size; we use 1. Throughput counts the recompute FLOPs:
# F = 96 B s l h² (1 + s/(6h) + V/(16 l h)) per iteration (paper Eq. 3).
MEGATRON_TABLE1 = [
    (32, 4096, 36, 4, 1, 128, 512, 142),  # 7.5B
    (48, 6144, 40, 8, 1, 256, 1024, 135),  # 18.4B
    (64, 8192, 48, 8, 2, 512, 1536, 138),  # 39.1B
    (80, 10240, 60, 8, 4, 1024, 1792, 140),  # 76.1B
    (96, 12288, 80, 8, 8, 1536, 2304, 148),  # 145.6B
]


@pytest.mark.parametrize(("a", "h", "l", "t", "p", "n", "B", "X"), MEGATRON_TABLE1)
def test_megatron_sc21_table1_within_20_percent(a, h, l, t, p, n, B, X):  # noqa: E741
    s, V = 2048, 51200
    plan = ParallelPlan(mode="train", tp=t, pp=p, dp=n // (t * p), global_batch=B,
                        micro_batch=1, seq=s, recompute="full")  # fmt: skip
    r = predict_plan(_gpt(h, l, a), plan, DGX_A100, n // 8)
    flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    tflops = flops / r.step_time / n / 1e12
    assert r.fits
    assert tflops == pytest.approx(X, rel=0.20)
