"""Grouped GEMM time: the experts of an MoE layer in one launch, as PyTorch's torch._grouped_mm
runs it on Hopper (CUTLASS, aten/src/ATen/native/cuda/GroupMM.cu), which Hugging Face
transformers' grouped_mm experts call.

The kernel: a small `prepare_grouped_gemm_data` launch writes each group's pointers and shape,
then one persistent CUTLASS kernel walks every group's tiles. Its tile is 64×128 (ping-pong)
when the mean rows per group or N is at most 128, else 128×256 (cooperative); there is no split-K.

Rows per expert follow the routing: each of T tokens picks k distinct experts of E uniformly at
random, so an expert's rows are Binomial(T, k/E). The busy tiles are the sum over experts of
ceil(rows/Tm) · ceil(N/Tn), with the expectation taken over that distribution: uneven rows cost
whole tiles (at 128 rows per expert on average, half the experts need a second 128-row tile).
Each touched expert's weights are streamed once per wave of its M-tiles; rows are read once per
N-tile wave and written once. Time = max(math, memory) + the two launch floors + the grouped
setup (`grouped_gemm_floor_s` in [model.extra]); the math runs at `grouped_gemm_eff` of the dense
GEMM rate (the CUTLASS grouped kernel against cuBLAS's best dense kernel; fp8's grouped kernel,
torch._scaled_grouped_mm with rowwise scales, at `grouped_gemm_fp8_eff` of the dense fp8 rate)
and the weights stream at `grouped_gemm_mem_eff` of the HBM bandwidth (on an H200 the kernel
streams them at ~62% of its 4.8 TB/s, on an H100 at ~80% of 3.35 TB/s: grouped_gemm.json and
grouped_gemm_decode.json on each; the setup floor fits ~14.5 µs on both, the same chip).

fp8's kernel picks its tile by PyTorch's own rule (aten/src/ATen/native/cuda/ScaledGroupMM.cu,
dispatch_fp8_grouped_gemm_on_tile_size, without fast accumulation as torch._scaled_grouped_mm
runs by default), from the mean rows per group M, N and K: 64×128 ping-pong when M or N is at
most 128; 128×128 cooperative when two of M, N, K reach 2,048 (PyTorch's comment: a smaller tile
for slow accumulation, to avoid spilling); else 128×256 cooperative. That wide tile with slow
accumulation runs at `grouped_gemm_fp8_wide_eff` of the others' rate: on the H100 all ten such
shapes measured (K of 768-2,048 at 2-8K tokens) ran 2.6-3.1x the time of the model without it,
and no shape of the other tiles did (grouped_gemm_fp8.json)."""

from __future__ import annotations

import functools
import math

from gpuperf.dtypes import BYTES
from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.gemm import ctas_per_sm, hw_for, k_step, raster
from gpuperf.perfmodel.ops import GroupedGemm, wgrad_bytes
from gpuperf.perfmodel.optime import OpTime
from gpuperf.perfmodel.roofline import finish

GROUPED_EFF = 0.85  # defaults, overridden by a profile's [model.extra]
GROUPED_FLOOR_S = 8e-6
GROUPED_MEM_EFF = 0.8
# The share of the weight gradient's dW stores that its products hide (1: all, 0: none); the
# default between the H100's and H200's fits, for GPUs without one.
GROUPED_WGRAD_OVERLAP = 0.6
SMALL_TILE, LARGE_TILE = (64, 128), (128, 256)
FP8_SLOW_ACCUM_TILE = (128, 128)  # torch._scaled_grouped_mm's "large" tile without fast accum
FP8_LARGE = 2048  # two of M, N, K from here make a shape "large" (ScaledGroupMM.cu)
FP8_ROW_ALIGN = 16  # torch._scaled_grouped_mm's offsets: multiples of 16 rows
FP8_WIDE_EFF = 1.0  # default share of the rate on the wide tile (no slowdown): no fit, no guess


def forward_tile(dtype: str, mean_rows: float, n: int, k: int) -> tuple[tuple[int, int], bool]:
    """PyTorch's tile on Hopper for the forward grouped GEMM (module docstring): torch._grouped_mm's
    two, or torch._scaled_grouped_mm's three for fp8; and whether it is fp8's wide tile, which
    runs slow with slow accumulation."""
    if mean_rows <= 128 or n <= 128:
        return SMALL_TILE, False
    if dtype != "fp8":
        return LARGE_TILE, False
    big = (mean_rows >= FP8_LARGE) + (n >= FP8_LARGE) + (k >= FP8_LARGE)
    return (FP8_SLOW_ACCUM_TILE, False) if big >= 2 else (LARGE_TILE, True)


@functools.lru_cache(maxsize=4096)
def expected_ceil(trials: int, p: float, tile: int) -> float:
    """E[ceil(X / tile)] for X ~ Binomial(trials, p): sum over j >= 0 of P(X > j·tile)."""
    mean = trials * p
    var = mean * (1.0 - p)
    if var > 400.0:  # normal approximation with continuity correction
        sd = math.sqrt(var)
        top = int((mean + 10 * sd) // tile) + 1
        return sum(
            0.5 * math.erfc((j * tile + 0.5 - mean) / (sd * math.sqrt(2))) for j in range(top)
        )
    # Exact: the pmf in log space, accumulated up to far past the mean.
    if p >= 1:
        return float(-(-trials // tile))
    hi = min(trials, int(mean + 12 * math.sqrt(var) + tile + 2))
    logp, logq = math.log(p), math.log1p(-p)
    log_pmf, cdf, total = trials * logq, 0.0, 0.0
    for x in range(hi + 1):
        cdf += math.exp(log_pmf)
        if x % tile == 0:
            total += max(0.0, 1.0 - cdf)  # P(X > j·tile)
        if x < trials:
            log_pmf += math.log(trials - x) - math.log(x + 1) + logp - logq
    return total


def grouped_gemm_time(op: GroupedGemm, gpu: GpuSpec) -> OpTime:
    """Predicted time of one torch._grouped_mm over an MoE layer's experts."""
    e, k_top, t = op.experts, min(op.topk, op.experts), op.tokens
    if min(t, op.n, op.k, e, k_top) <= 0:
        return finish(0.0, 0.0, 0.0, {"empty": 1.0})
    b = BYTES[op.dtype]
    hw = hw_for(gpu, op.dtype)
    extra = gpu.params.extra
    eff = float(extra.get("grouped_gemm_eff", GROUPED_EFF))
    if op.dtype == "fp8":  # torch._scaled_grouped_mm: its own share of the fp8 rate
        eff = float(extra.get("grouped_gemm_fp8_eff", eff))
    setup = float(extra.get("grouped_gemm_floor_s", GROUPED_FLOOR_S))
    bw = float(extra.get("grouped_gemm_mem_eff", GROUPED_MEM_EFF)) * gpu.hbm_bw
    p = k_top / e
    local = op.local
    floor = hw.floor + hw.reduce_floor + setup  # the grouped kernel, the prepare kernel, setup
    if op.wgrad:
        return _wgrad_time(op, gpu, hw, eff, bw, floor, p)
    touched = op.touched()
    mean_rows = op.rows / local  # PyTorch picks the tile from the mean over all groups
    if op.dtype == "fp8":  # each group's rows padded to FP8_ROW_ALIGN, which PyTorch requires
        mean_rows += (FP8_ROW_ALIGN - 1) / 2 * touched / local
    (tm, tn), wide = forward_tile(op.dtype, mean_rows, op.n, op.k)
    if wide:
        eff *= float(extra.get("grouped_gemm_fp8_wide_eff", FP8_WIDE_EFF))
    tiles_m = local * expected_ceil(t, p, tm)  # busy M-tiles over this GPU's experts
    tiles_n = -(-op.n // tn)
    ctas = tiles_m * tiles_n
    tk, _, t_kstep = k_step(tm, tn, b, hw, eff)
    ksteps = -(-op.k // tk)
    per_sm = ctas_per_sm(tm, tn, hw)
    t_math = _math_s(ctas, ctas * ksteps, t_kstep, hw)
    r0, c0 = raster(tm, tn, per_sm, hw)
    m_tiles_per_expert = tiles_m / max(touched, 1e-9)
    a_bytes = op.rows * op.k * b * math.ceil(tiles_n / c0)
    w_bytes = touched * op.k * op.n * b * max(1.0, math.ceil(m_tiles_per_expert / r0))
    traffic = a_bytes + w_bytes + op.rows * op.n * b
    return _finish(op, gpu, hw, eff, bw, floor, (tm, tn), ctas, t_math, traffic)


def _math_s(ctas: float, steps: float, t_kstep: float, hw) -> float:  # noqa: ANN001
    """The products' time: `steps` k-steps over `ctas` tiles, the busiest SM's share (a whole
    tile's steps more where the tiles do not spread evenly). A persistent kernel fills its
    pipeline once per SM, not once per tile: the next tile's loads overlap this one's epilogue."""
    balanced = steps / hw.sms
    per_cta = steps / max(ctas, 1e-9)
    busiest = balanced + hw.tail * (math.ceil(ctas / hw.sms - 1e-9) * per_cta - balanced)
    return (busiest + hw.fill) * t_kstep


def _finish(op: GroupedGemm, gpu: GpuSpec, hw, eff: float, bw: float,  # noqa: ANN001
            floor: float, tile: tuple[int, int], ctas: float, t_math: float,
            traffic: float, t_mem: float | None = None) -> OpTime:  # fmt: skip
    """The kernel's time from its products and its traffic, with what it is made of."""
    touched = op.touched()
    detail = {
        "tile": f"{tile[0]}x{tile[1]}",
        "touched": touched,
        "tiles": ctas,
        "rows_per_expert": op.rows / max(touched, 1e-9),
        "eff": eff * hw.rate / gpu.peak(op.dtype),
        "traffic_bytes": traffic,
    }
    return finish(t_math, (traffic + hw.half_bytes) / bw if t_mem is None else t_mem, floor,
                  detail)  # fmt: skip


def _wgrad_time(op: GroupedGemm, gpu: GpuSpec, hw, eff: float, bw: float, floor: float,  # noqa: ANN001
                p: float) -> OpTime:  # fmt: skip
    """The weight gradients of an MoE layer's experts in one grouped launch: every touched
    expert's dW[n, k] = dY_eᵀ @ X_e (the weights held [E, n, k], as autograd computes them) is a
    grid of output tiles whose reduction runs over that expert's rows, so the tiles are fixed by
    the weights' shape and the uneven rows set each tile's k-steps (an expert's steps are
    ceil(rows / tk) with rows ~ Binomial(tokens, k/E))."""
    b = BYTES[op.dtype]
    tm, tn = SMALL_TILE if min(op.k, op.n) <= 128 else LARGE_TILE
    touched = op.touched()
    tiles_m, tiles_n = -(-op.n // tm), -(-op.k // tn)
    out_tiles = tiles_m * tiles_n  # per expert
    ctas = touched * out_tiles
    tk, _, t_kstep = k_step(tm, tn, b, hw, eff)
    steps = out_tiles * op.local * expected_ceil(op.tokens, p, tk)  # over every tile
    t_math = _math_s(ctas, steps, t_kstep, hw)
    r0, c0 = raster(tm, tn, ctas_per_sm(tm, tn, hw), hw)
    dy_bytes = op.rows * op.n * b * math.ceil(tiles_n / c0)  # dYᵀ: once per column wave
    x_bytes = op.rows * op.k * b * math.ceil(tiles_m / r0)
    w_bytes = touched * op.k * op.n * wgrad_bytes(op.dtype)
    traffic = x_bytes + dy_bytes + w_bytes
    # Each output tile's k-loop is short (an expert's rows), so its stores weigh as much as
    # its products; the cooperative kernel's epilogue overlaps the next tile's products only in
    # part: a share `lap` runs as max(products, traffic), the rest with the dW stores after
    # the products and the other traffic (the larger term takes the blend).
    lap = float(gpu.params.extra.get("grouped_wgrad_overlap", GROUPED_WGRAD_OVERLAP))
    t_mem = (traffic + hw.half_bytes) / bw
    t_store = w_bytes / bw
    blend = lap * max(t_math, t_mem) + (1.0 - lap) * (max(t_math, t_mem - t_store) + t_store)
    if t_math >= t_mem:
        t_math = blend
    else:
        t_mem = blend
    return _finish(op, gpu, hw, eff, bw, floor, (tm, tn), ctas, t_math, traffic, t_mem)
