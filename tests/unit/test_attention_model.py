"""FlashAttention model: hand numbers on an H100 SXM with default parameters."""

from __future__ import annotations

import dataclasses

import pytest

from gpuperf.hardware.loader import load_gpu
from gpuperf.hardware.spec import ModelParams
from gpuperf.perfmodel.attention import tile_blocks
from gpuperf.perfmodel.ops import Attention
from gpuperf.perfmodel.roofline import op_time

H100 = dataclasses.replace(load_gpu("h100"), params=ModelParams())
P = ModelParams()


def attn(b=4, h=32, kvh=32, q=4096, kv=4096, d=128, causal=True, backward=False):
    return Attention("a", b, h, kvh, q, kv, d, causal=causal, backward=backward)


def test_tile_blocks_causal_triangle():
    # 4 query tiles of 128 over 512 keys: tile j sees j+1 KV blocks of 128 → 1+2+3+4 = 10.
    assert tile_blocks(512, 512, 512, 128, True) == (4, 10, 4)
    assert tile_blocks(512, 512, 512, 128, False) == (4, 16, 4)
    # 128 queries at the end of 1024 keys (chunked prefill): one tile sees all 8 blocks.
    assert tile_blocks(128, 1024, 128, 128, True) == (1, 8, 8)


def test_long_noncausal_prefill_hand_number():
    # Per pair on one SM: 132 · (4·128 / 989.4e12 + 1 / (132 · 1.98e9 · 16)) / 0.55.
    t_pair = 132 * (4 * 128 / 989.4e12 + 1 / (132 * 1.98e9 * 16)) / 0.55
    # 4·32 heads × 32 query tiles = 4096 CTAs → 32 waves on 132 SMs, 32 KV blocks each + 2 fill.
    expected = (32 * 32 + 32 * 2) * 128 * 128 * t_pair + P.kernel_floor_s + P.mma_latency_s
    t = op_time(attn(causal=False), H100)
    assert t.bound == "compute"
    assert t.time == pytest.approx(expected, rel=1e-9)
    # That is ≈ 34% of dense peak: FA2-class forward throughput on an H100.
    assert 0.3 < attn(causal=False).cost().flops / t.time / 989.4e12 < 0.4


def test_causal_costs_about_half_on_long_sequences():
    full = op_time(attn(q=8192, kv=8192, b=2, causal=False), H100).time
    causal = op_time(attn(q=8192, kv=8192, b=2, causal=True), H100).time
    assert 0.5 < causal / full < 0.56


def test_short_sequences_run_below_long_ones():
    def rate(s):
        op = attn(b=max(1, 16384 // s), q=s, kv=s)
        return op.cost().flops / op_time(op, H100).time

    assert rate(512) < 0.6 * rate(8192)
    assert rate(512) < rate(1024) < rate(2048) < rate(4096) < rate(8192)


def test_decode_reads_the_kv_cache_at_hbm_bandwidth():
    op = attn(b=8, h=32, kvh=8, q=1, kv=4096)
    t = op_time(op, H100)
    kv_bytes = 2 * 8 * 8 * 4096 * 128 * 2  # 128 MiB
    assert t.bound == "memory"
    assert t.time == pytest.approx(
        kv_bytes / (0.9 * 3.35e12) + P.kernel_floor_s + P.mma_latency_s, rel=0.05
    )
    assert t.detail["gqa_packed"] == 1.0


def test_decode_with_one_sequence_splits_the_kv():
    t = op_time(attn(b=1, h=32, kvh=8, q=1, kv=32768), H100)
    assert t.detail["split_kv"] > 1
    assert t.bound == "memory"


def test_gqa_decode_is_faster_by_the_kv_ratio():
    mha = op_time(attn(b=32, h=32, kvh=32, q=1, kv=4096), H100).time
    gqa = op_time(attn(b=32, h=32, kvh=8, q=1, kv=4096), H100).time
    assert 3.3 < mha / gqa < 4.0


def test_backward_is_slower_than_its_flop_ratio():
    fwd = op_time(attn(), H100).time
    bwd = op_time(attn(backward=True), H100)
    assert bwd.detail["eff"] == P.attn_bwd_eff
    assert 2.5 < bwd.time / fwd < 4.5


def test_attention_eff_scales_compute_bound_time():
    slow = dataclasses.replace(H100, params=ModelParams(attn_eff=0.275))
    t1, t2 = op_time(attn(), H100), op_time(attn(), slow)
    assert (t2.time - t2.t_overhead) == pytest.approx(2 * (t1.time - t1.t_overhead))


@pytest.mark.parametrize("mode", ["prefill", "train"])
@pytest.mark.parametrize("seq", [2**15, 2**19, 2**20])
def test_long_sequences_run_under_the_peak_on_the_flops_they_execute(mode, seq):
    """MFU's convention (PaLM: every query-key pair, causal or not) passes 100% on long causal
    prefills, where the count is twice the attention the kernel runs, and says so in a warning.
    What the kernels run never passes the peak: the time model and the FLOP count agree."""
    from gpuperf import api

    p = api.predict("llama2-7b", gpu="h100", seq=seq, mode=mode)
    cols, peak = p.columns, load_gpu("h100").peak("bf16")
    for name, flops, ms in zip(cols["name"], cols["flops"], cols["time_ms"], strict=True):
        assert flops <= ms * 1e-3 * peak, name
    assert 0.3 < sum(cols["flops"]) / (p.total_ms * 1e-3 * peak) < 0.7
    over = [w for w in p.warnings if "over 100% by the convention" in w]
    assert len(over) == (p.hfu > 1.0)
    if (seq, mode) == (2**20, "prefill"):  # the case the sweep found: 102%
        assert p.mfu > 1.0 and over
