"""GEMM model: hand numbers on an H100 SXM with default parameters."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuperf.hardware.loader import load_gpu
from gpuperf.hardware.spec import ModelParams
from gpuperf.perfmodel.gemm import gemm_time, is_aligned
from gpuperf.perfmodel.ops import Gemm

H100 = dataclasses.replace(load_gpu("h100"), params=ModelParams())
BF16_PEAK, BW = 989.4e12, 3.35e12


def test_large_square_gemm_runs_near_eff_times_peak():
    op = Gemm("g", 8192, 8192, 8192)
    t = gemm_time(op, H100)
    ideal = 2 * 8192**3 / (0.8 * BF16_PEAK)  # 1.389 ms
    assert t.bound == "compute"
    # 16 waves of 128x256 tiles at 97% wave efficiency, 3 fill k-steps of 128: ≈ +6%.
    assert ideal <= t.time <= 1.08 * ideal
    assert t.detail["tile"] in ("128x256", "256x128")


def test_one_wave_plus_one_tile_costs_two_waves():
    # 12 x 11 tiles of 128x256 fill the 132 SMs once; 133 tiles need a second wave.
    full = gemm_time(Gemm("g", 1536, 2816, 8192), H100, tile=(128, 256), split_k=1)
    plus1 = gemm_time(Gemm("g", 896, 4864, 8192), H100, tile=(128, 256), split_k=1)  # 7 x 19
    assert (full.detail["waves"], plus1.detail["waves"]) == (1, 2)
    assert full.bound == plus1.bound == "compute"
    assert plus1.t_math / full.t_math == pytest.approx(2.0, rel=1e-9)


def test_one_more_row_past_a_full_wave_costs_half_a_wave_more():
    # 1536 → 1537 rows: 143 tiles of 128x256, or 286 of 128x128 in 3 rounds (the model's pick)
    # instead of 2: 1.5x, as much as any tile choice can recover.
    full = gemm_time(Gemm("g", 1536, 2816, 8192), H100)
    more = gemm_time(Gemm("g", 1537, 2816, 8192), H100)
    assert more.time / full.time == pytest.approx(1.48, abs=0.03)


def test_misaligned_2049_is_several_times_slower_than_2048():
    fast = gemm_time(Gemm("g", 2048, 2048, 2048), H100)
    slow = gemm_time(Gemm("g", 2049, 2049, 2049), H100)
    assert slow.detail["aligned"] == 0.0 and fast.detail["aligned"] == 1.0
    assert slow.time > 2.5 * fast.time


def test_odd_m_keeps_the_fast_path():
    # M (tokens) is not a leading dimension in A[m,k] @ W[n,k]^T.
    assert is_aligned(Gemm("g", 2049, 2048, 2048))
    assert not is_aligned(Gemm("g", 2048, 2048, 2049))
    assert not is_aligned(Gemm("g", 2048, 2049, 2048))
    assert is_aligned(Gemm("g", 2048, 2052, 2052, dtype="fp32"))  # 4-byte elements: 4 | N
    assert not is_aligned(Gemm("g", 2048, 2056, 2056, dtype="fp8"))  # 1-byte: needs 16 | N
    odd = gemm_time(Gemm("g", 2049, 2048, 2048), H100).time
    assert odd < 1.3 * gemm_time(Gemm("g", 2048, 2048, 2048), H100).time


def test_decode_gemm_streams_the_weights():
    op = Gemm("g", 1, 8192, 8192)
    t = gemm_time(op, H100)
    weights = 8192 * 8192 * 2
    ideal = weights / (ModelParams().gemm_mem_eff * BW)  # 47 µs at 0.85 of 3.35 TB/s
    assert t.bound == "memory"
    assert ideal <= t.time <= 1.15 * ideal


def test_batch_32_decode_is_still_weight_bound():
    t1 = gemm_time(Gemm("g", 1, 8192, 8192), H100).time
    t32 = gemm_time(Gemm("g", 32, 8192, 8192), H100).time
    assert t32 < 1.1 * t1


def test_fp8_doubles_the_rate_and_fp32_uses_cuda_cores():
    bf16 = gemm_time(Gemm("g", 8192, 8192, 8192), H100).time
    fp8 = gemm_time(Gemm("g", 8192, 8192, 8192, dtype="fp8"), H100).time
    assert 1.8 < bf16 / fp8 <= 2.0
    fp32 = gemm_time(Gemm("g", 4096, 4096, 4096, dtype="fp32"), H100)
    assert fp32.time == pytest.approx(2 * 4096**3 / (0.8 * 66.9e12), rel=0.1)
    tf32 = gemm_time(Gemm("g", 4096, 4096, 4096, dtype="tf32"), H100)
    assert tf32.time == pytest.approx(2 * 4096**3 / (0.8 * 494.7e12), rel=0.15)


def test_small_gemms_ramp_and_tiny_ones_hit_the_floor():
    mid = Gemm("g", 1024, 1024, 1024)
    rate = mid.cost().flops / gemm_time(mid, H100).time
    assert 0.15 * BF16_PEAK < rate < 0.5 * 0.8 * BF16_PEAK  # one partial wave, fill, floor
    tiny = gemm_time(Gemm("g", 64, 64, 64), H100)
    assert tiny.bound == "latency"
    p = ModelParams()
    assert tiny.time == pytest.approx(p.kernel_floor_s + p.mma_latency_s, rel=0.25)


def test_split_k_for_few_tiles_and_long_k():
    op = Gemm("g", 256, 256, 65536)
    best = gemm_time(op, H100)
    assert best.detail["split_k"] > 1
    assert best.time < 0.5 * gemm_time(op, H100, tile=(128, 128), split_k=1).time


def test_memory_term_covers_compulsory_traffic():
    for op in (Gemm("g", 8192, 8192, 8192), Gemm("g", 4096, 28672, 8192), Gemm("g", 7, 4096, 4096)):
        t = gemm_time(op, H100)
        assert t.detail["traffic_bytes"] >= op.cost().bytes
        assert t.t_mem >= op.cost().bytes / (0.9 * BW)


def test_big_operands_are_reread_past_l2():
    op = Gemm("g", 16384, 16384, 16384)  # 1.5 GiB of operands, far beyond 50 MiB of L2
    assert gemm_time(op, H100).detail["traffic_bytes"] > 1.5 * op.cost().bytes


@settings(max_examples=150, deadline=None)
@given(
    m=st.integers(1, 70000),
    n=st.integers(1, 140000),
    k=st.integers(1, 30000),
    dtype=st.sampled_from(["bf16", "fp8", "fp32"]),
)
def test_the_pruned_tile_search_picks_what_trying_every_candidate_picks(m, n, k, dtype):
    from gpuperf.dtypes import BYTES
    from gpuperf.perfmodel import gemm

    op = Gemm("g", m, n, k, dtype=dtype)
    hw, b = gemm._hw(op, H100), BYTES[dtype]
    out_b = 2 if b == 1 else b
    every = []
    for tm, tn in gemm.TILES:
        tiles = -(-m // tm) * -(-n // tn)
        per_sm = gemm.ctas_per_sm(tm, tn, hw)
        for s in gemm.SPLITS:
            if s > 1 and (tiles >= hw.sms or tiles * s > 2 * hw.sms * per_sm):
                break
            every.append(gemm.candidate(m, n, k, 1, b, out_b, tm, tn, s, hw))
    best = min(every, key=lambda c: (c.time, c.t_math))  # the first of equals, as the search
    assert gemm._best(m, n, k, 1, b, out_b, hw) == best
