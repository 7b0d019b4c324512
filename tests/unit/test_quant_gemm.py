"""The kernels of their own (perfmodel.gemm_quant, gemm_grouped): the mechanisms each holds,
checked against hand math and against each other, and the late fit that calibrates them on their
own rows."""

from __future__ import annotations

import math
import random

import pytest

from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel import calibrate as cal
from gpuperf.perfmodel.gemm import gemm_time
from gpuperf.perfmodel.gemm_grouped import expected_ceil
from gpuperf.perfmodel.ops import Gemm, GroupedGemm

H100 = load_gpu("h100")


@pytest.mark.parametrize("trials, p, tile", [(4096, 1 / 32, 128), (64, 1 / 16, 64), (1, 0.25, 64),
                                             (2048, 0.25, 128)])  # fmt: skip
def test_expected_tiles_match_a_simulation(trials, p, tile):
    rng = random.Random(0)
    draws = [sum(rng.random() < p for _ in range(trials)) for _ in range(2000)]
    simulated = sum(math.ceil(x / tile) for x in draws) / len(draws)
    assert expected_ceil(trials, p, tile) == pytest.approx(simulated, rel=0.05, abs=0.02)


def test_expected_tiles_by_hand():
    assert expected_ceil(10, 1.0, 4) == 3  # every trial lands: ceil(10 / 4)
    assert expected_ceil(1, 0.25, 64) == pytest.approx(0.25)  # one row with probability p


def test_uneven_rows_cost_whole_tiles():
    """At 128 rows per expert on average, rows are Binomial: about half the experts need a second
    128-row tile, so the busy tiles exceed one per expert."""
    assert expected_ceil(4096, 1 / 32, 128) > 1.4


def test_grouped_gemm_grows_with_tokens_and_reads_only_touched_experts():
    t = [gemm_time(GroupedGemm("g", n, 8, 128, 1536, 2048), H100).time for n in (1, 64, 4096)]
    assert t[0] < t[1] < t[2]
    one = GroupedGemm("g", 1, 8, 128, 1536, 2048)
    assert one.touched() == pytest.approx(8)  # one token: its eight experts' weights only
    assert one.cost().bytes_read == pytest.approx(2 * (8 * 2048 + 8 * 2048 * 1536))


def test_expert_parallel_grouped_gemm_runs_this_gpus_share():
    whole = GroupedGemm("g", 4096, 8, 128, 1536, 2048)
    share = GroupedGemm("g", 4096 * 8, 8, 128, 1536, 2048, groups=16)  # ep=8: 16 local experts
    assert share.rows == whole.rows  # the same pairs land on each rank, on average
    assert share.touched() == pytest.approx(16, rel=1e-6)


def test_rowwise_fp8_without_split_k_is_slower_for_a_skinny_product():
    """4096 outputs at 16 tokens: the rowwise CUTLASS kernel runs N/128 = 32 CTAs (no split-K),
    cuBLAS's per-tensor kernel splits K; measured on an H100, 41 us against 28 us."""
    tensor = gemm_time(Gemm("g", 16, 4096, 14336, "fp8", scales="tensor"), H100).time
    row = gemm_time(Gemm("g", 16, 4096, 14336, "fp8", scales="row"), H100).time
    assert row > 1.3 * tensor
    big_t = gemm_time(Gemm("g", 8192, 8192, 8192, "fp8"), H100).time
    big_r = gemm_time(Gemm("g", 8192, 8192, 8192, "fp8", scales="row"), H100).time
    assert big_r == pytest.approx(big_t, rel=0.15)


def test_int4_weight_only_streams_less_but_computes_slowly():
    w4 = [gemm_time(Gemm("g", m, 8192, 8192, wdtype="int4"), H100).time for m in (1, 1024)]
    bf = [gemm_time(Gemm("g", m, 8192, 8192), H100).time for m in (1, 1024)]
    assert w4[0] < bf[0]  # decode: a quarter of the weight bytes
    assert w4[1] > 5 * bf[1]  # prefill: tinygemm's math, not the Tensor Cores' rate


def test_classes_of_the_new_kernels():
    assert cal.op_class(GroupedGemm("g", 64, 8, 128, 1536, 2048)) == "grouped gemm (MoE experts)"
    assert cal.op_class(Gemm("g", 16, 4096, 4096, wdtype="int4")) == "gemm weight-only int4/int8"
    assert cal.op_class(Gemm("g", 16, 4096, 4096, "fp8")) == "gemm fp8 LLM shapes (16-8192 tokens)"
    assert cal.op_class(Gemm("g", 8, 4096, 4096, "fp8")) == "gemm few tokens (M<=32)"


def test_the_late_fit_moves_its_parameters_only():
    """Samples of fp8 GEMMs made 20% slower than predicted: fitting every parameter moves
    gemm_fp8_eff and leaves the bf16 GEMM parameters, fitted on other rows, alone."""
    ops = [Gemm(f"g{m}", m, 8192, 8192, "fp8") for m in (1024, 2048, 4096, 8192)]
    samples = [cal.Sample(op, 1.2 * gemm_time(op, H100).time) for op in ops]
    params = cal.fit(samples, H100)
    assert params.gemm_eff == H100.params.gemm_eff
    assert params.extra["gemm_fp8_eff"] < H100.params.extra["gemm_fp8_eff"]


@pytest.mark.parametrize("groups", [0, 2])
def test_grouped_gemm_measures_this_gpus_experts_only(groups):
    # Under expert parallelism the kernel was given every expert's offsets (ending at
    # tokens·topk) over the local rows only, so it timed the wrong work
    torch = pytest.importorskip("torch")
    from gpuperf.measure import kernels_grouped

    op = GroupedGemm("x", tokens=64, topk=2, experts=8, n=128, k=64, groups=groups)
    counts, offs = kernels_grouped.routing(64, 2, 8, op.local, "cpu", torch)
    assert len(counts) == op.local and offs.tolist()[-1] == sum(counts)
    assert sum(counts) == 128 if not groups else 0 < sum(counts) < 128
    kernel = kernels_grouped.build(op, "cpu", torch)
    assert kernel.check() < 2e-2
    assert kernel.detail["touched"] <= op.local


@pytest.mark.parametrize("kind", ["dgrad", "wgrad"])
def test_grouped_gemm_backward_kernels_measure_what_autograd_runs(kind):
    """The input gradient (dY @ W, the weights row-major) and the weight gradient (dY_eᵀ @ X_e
    into the weights' [E, n, k] layout, a 2-D x 2-D grouped product over each expert's rows),
    each checked against fp64."""
    torch = pytest.importorskip("torch")
    from gpuperf.measure import kernels_grouped

    op = GroupedGemm(f"x.{kind}", tokens=64, topk=2, experts=8, n=96, k=64,
                     wgrad=kind == "wgrad")  # fmt: skip
    kernel = kernels_grouped.build(op, "cpu", torch)
    assert kernel.check() < 2e-2
    out = kernel.run()
    assert tuple(out.shape) == ((8, 96, 64) if kind == "wgrad" else (128, 96))


def test_grouped_weight_gradient_costs_the_products_and_writes_each_experts_weights():
    fwd = GroupedGemm("g", 4096, 8, 128, 1536, 2048)
    wg = GroupedGemm("g", 4096, 8, 128, 1536, 2048, wgrad=True)
    assert wg.cost().flops == fwd.cost().flops
    assert wg.cost().bytes_written == pytest.approx(2 * wg.touched() * 1536 * 2048)
    assert wg.cost().bytes_read == pytest.approx(2 * wg.rows * (1536 + 2048))
    # Big enough to be math-bound: within the forward's time give or take the tiles' shapes.
    t_f, t_w = gemm_time(fwd, H100).time, gemm_time(wg, H100).time
    assert 0.7 < t_w / t_f < 1.5
    # One token: eight experts' weight gradients written for a handful of rows, memory-bound.
    one = gemm_time(GroupedGemm("g", 1, 8, 128, 1536, 2048, wgrad=True), H100)
    assert one.t_mem > one.t_math
    assert one.time > 2 * 8 * 1536 * 2048 / H100.hbm_bw


def test_grouped_weight_gradient_leaves_part_of_its_stores_exposed():
    """Each output tile's k-loop is one expert's rows: where the dW stores weigh about as much
    as the products, the overlap share (1: hidden, as max(math, memory); 0: added in full)
    sets the time, and only there."""
    from gpuperf.perfmodel.calibrate import with_params

    def at(lap: float, tokens: int) -> float:
        gpu = with_params(H100, grouped_wgrad_overlap=lap)
        return gemm_time(GroupedGemm("g", tokens, 8, 128, 1536, 2048, wgrad=True), gpu).time

    hidden, exposed = at(1.0, 1024), at(0.0, 1024)  # 64 rows an expert: stores take as long
    assert exposed > 1.2 * hidden
    assert at(0.5, 1024) == pytest.approx((hidden + exposed) / 2, rel=0.02)
    # Many rows per expert: the products dwarf the stores, and the share barely matters.
    assert at(0.0, 65536) < 1.1 * at(1.0, 65536)
    assert 0.5 < H100.params.extra["grouped_wgrad_overlap"] < 0.8  # fitted: about 0.6
