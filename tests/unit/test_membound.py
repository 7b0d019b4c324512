"""Memory-bound kernels: hand numbers on an H100 SXM with default parameters."""

from __future__ import annotations

import dataclasses

import pytest

from gpuperf.hardware.loader import load_gpu
from gpuperf.hardware.spec import ModelParams
from gpuperf.perfmodel.membound import copy_time, elementwise_time, embedding_time, norm_time
from gpuperf.perfmodel.ops import Copy, Elementwise, Embedding, Norm

P = ModelParams()
H100 = dataclasses.replace(load_gpu("h100"), params=P)
NO_L2 = dataclasses.replace(H100, params=ModelParams(l2_bw_factor=1.0))
BW = 0.9 * 3.35e12


def test_copy_one_gib_streams_at_mem_eff():
    t = copy_time(Copy("c", 2**30), H100)
    assert t.bound == "memory"
    assert t.time == pytest.approx(2 * 2**30 / BW, rel=0.01)


def test_copy_hand_number_with_l2_and_ramp():
    # 256 MiB: 25 MiB of the working set (half the 50 MiB L2) at 1.5x, the rest at HBM speed,
    # plus the 2 MB ramp and the 4 µs floor.
    n = 2 * 256 * 2**20
    resident = 25 * 2**20
    expected = (n - resident + resident / 1.5 + 2e6) / BW + 4e-6
    assert copy_time(Copy("c", 256 * 2**20), H100).time == pytest.approx(expected, rel=1e-12)


def test_tiny_kernels_cost_the_floor():
    t = elementwise_time(Elementwise("e", "add", 1024, n_in=2), H100)
    assert t.bound == "latency"
    assert P.kernel_floor_s < t.time < P.kernel_floor_s + 1e-6


def test_bandwidth_ramps_with_size():
    def bw(nbytes):
        return 2 * nbytes / copy_time(Copy("c", nbytes), NO_L2).time

    sizes = [2**16, 2**20, 2**24, 2**28, 2**30]
    rates = [bw(s) for s in sizes]
    assert rates == sorted(rates)
    assert rates[0] < 0.05 * BW and rates[-1] > 0.98 * BW


def test_l2_resident_working_sets_run_faster():
    op = Copy("c", 8 * 2**20)  # 16 MiB touched, fits in half of the 50 MiB L2
    assert copy_time(op, H100).t_mem == pytest.approx(copy_time(op, NO_L2).t_mem / 1.5, rel=0.15)
    assert copy_time(op, H100).detail["achieved_bw"] > BW


def test_norm_with_few_rows_cannot_fill_the_gpu():
    # Same 16 MiB, as 16 long rows (16 CTAs) or 8192 short ones.
    few = norm_time(Norm("n", "rmsnorm", 16, 262144), NO_L2)
    many = norm_time(Norm("n", "rmsnorm", 8192, 512), NO_L2)
    assert few.time > 2 * many.time
    # One row per SM at bw / (0.5 · 132) each: a 1 MiB row takes 1 MiB / (BW / 66).
    assert few.t_mem == pytest.approx(2**20 / (BW / 66))


def test_gelu_flops_stay_hidden_behind_memory():
    t = elementwise_time(Elementwise("g", "gelu", 1 << 26, flops_per_elem=8.0), H100)
    assert t.bound == "memory" and t.t_math < 0.2 * t.t_mem


def test_fp32_cast_counts_both_dtypes():
    cast = Elementwise("c", "cast", 1 << 28, dtype="fp32", out_dtype="bf16")
    t = elementwise_time(cast, NO_L2)
    assert t.t_mem == pytest.approx((6 * 2**28 + 2e6) / BW)


def test_embedding_reads_indices_and_rows():
    t = embedding_time(Embedding("emb", 8192, 8192), NO_L2)
    nbytes = 2 * 8192 * 8192 * 2 + 8 * 8192
    assert t.t_mem == pytest.approx((nbytes + 2e6) / BW)


def test_the_strided_kernel_is_bound_by_the_sms_not_by_hbm():
    """PyTorch's non-vectorized copy (HF's repeat_kv) reached the same bytes per second on the
    H100 and the H200, fitted apart (the same SMs and clocks, 43% more HBM bandwidth on the
    H200): its rate is stated per SM clock, so the H100's parameters carry to the H200 (and its
    CUDA-graph decodes, whose time is mostly these copies, stop being 21-28% too fast there)."""
    from gpuperf.perfmodel.membound import strided_bw_eff

    h100, h200 = load_gpu("h100"), load_gpu("h200")
    rate = {g.name: strided_bw_eff(g) * g.hbm_bw for g in (h100, h200)}
    assert rate[h100.name] == pytest.approx(rate[h200.name], rel=0.01)
    assert rate[h100.name] == pytest.approx(0.585057 * h100.hbm_bw, rel=1e-5)  # the H100's fit
    lent = dataclasses.replace(h200, params=h100.params)
    assert strided_bw_eff(lent) * lent.hbm_bw == pytest.approx(rate[h200.name], rel=0.01)
    # never faster than a plain copy: a GPU with little HBM per SM streams it at the copy's rate
    slow = dataclasses.replace(h100, hbm_bw=h100.hbm_bw / 4)
    assert strided_bw_eff(slow) == slow.params.mem_eff
