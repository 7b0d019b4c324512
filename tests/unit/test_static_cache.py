"""Eager decode under CUDA graphs uses HF's StaticCache: no whole-cache cat, repeat_kv for GQA."""

from gpuperf.workloads.config import load_model
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer import build_ops


def _layer0(model: str, graphs: bool, ctx: int = 4096, batch: int = 8):
    sc = Scenario(mode="decode", batch=batch, ctx=ctx, impl="eager", cuda_graphs=graphs)
    return {op.name: op for op in build_ops(load_model(model), sc) if op.name.startswith("L0/")}


def test_dynamic_cache_copies_whole_cache():
    ops = _layer0("llama3-8b", graphs=False)
    # cat of (ctx past + 1 new) tokens x 8 kv heads x 128 x 2 bytes, per sequence
    assert ops["L0/attn/cache_k"].nbytes == 8 * 8 * 128 * (2 * 4096 + 2 * 1)
    assert "L0/attn/repeat_k" not in ops


def test_static_cache_writes_only_new_token_and_repeats_kv_for_gqa():
    ops = _layer0("llama3-8b", graphs=True)
    assert ops["L0/attn/cache_k"].nbytes == 8 * 8 * 128 * 2
    rep = ops["L0/attn/repeat_k"]
    assert rep.numel == 8 * 32 * 4097 * 128  # every query head gets its own copy
    assert ops["L0/attn/core"].kv_heads == 32 and not ops["L0/attn/core"].causal


def test_static_cache_mha_needs_no_repeat():
    ops = _layer0("llama2-7b", graphs=True)
    assert "L0/attn/repeat_k" not in ops
    assert ops["L0/attn/core"].kv_heads == 32
