"""GEMM time, the way cuBLAS runs it: a CTA tile and a split-K factor chosen by least predicted
time, tile and wave quantization, per-tile pipeline fill, operand re-reads past L2, and the
16-byte alignment of leading dimensions.

For one candidate (tile Tm×Tn, split-K s), with k-steps of 128 bytes of K (64 bf16 elements):
  ctas       = ceil(M/Tm)·ceil(N/Tn)·batch·s, each SM running ceil(ctas/SMs) of them in turn
  feed_eff   = min(1, (2·Tm·Tn/(Tm+Tn)) / gemm_tile_edge_full): small tiles reuse too little of
               what they load to keep the tensor cores busy (shared-memory bandwidth per FLOP)
  t_kstep    = 2·Tm·Tn·Tk / (eff·peak/SMs · feed_eff)       (padded tiles do full work)
  t_math     = (ceil(ctas/SMs)·ksteps + rounds·gemm_fill_ksteps) · t_kstep
  traffic    = A·ceil(tiles_n/c0) + B·ceil(tiles_m/r0) + C (+ split-K partials), where one wave
               of `slots` CTAs covers an r0×c0 block of tiles (grouped raster); everything is
               read once when A+B+C fit in L2
  t_mem      = (traffic + bytes_for_half_bw) / (gemm_mem_eff·HBM bandwidth)
  time       = max(t_math, t_mem) + kernel_floor_s + mma_latency_s
               (+ kernel_floor_s when split-K: the partials are summed by a second kernel)
Skinny GEMMs (decode, M ≤ 64) come out memory-bound on the weights: a thin tile (16×128 after
cuBLAS's operand swap) and split-K leave the math below the weight-streaming time.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

from gpuperf.dtypes import BYTES, DType
from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.ops import Gemm, GroupedGemm
from gpuperf.perfmodel.optime import OpTime
from gpuperf.perfmodel.roofline import finish, matmul_peak

# CTA tiles (Tm, Tn) of cuBLAS/CUTLASS Hopper and Ampere kernels. The thin ones (16, 32 wide) are
# the small-N wgmma/mma shapes cuBLAS uses for skinny products (it swaps A and B as needed).
TILES: tuple[tuple[int, int], ...] = (
    (128, 256),
    (256, 128),
    (128, 128),
    (256, 64),
    (64, 256),
    (128, 64),
    (64, 128),
    (64, 64),
    (128, 32),
    (32, 128),
    (64, 32),
    (32, 64),
    (128, 16),
    (16, 128),
    (64, 16),
    (16, 64),
)
SPLITS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16)  # split-K factors tried when tiles < SMs
K_STEP_BYTES = 128  # one k-step loads 128 bytes of K per row (64 bf16, 128 fp8, 32 fp32)
STAGES = 4  # shared-memory pipeline depth: sets how many CTAs fit on one SM
MAX_CTAS_PER_SM = 4
ALIGN_BYTES = 16  # cuBLAS Tensor-Core fast path needs 16-byte aligned leading dimensions
PARTIAL_BYTES = 4  # split-K partial sums are fp32


class _Hw(NamedTuple):
    """The numbers of a GpuSpec the GEMM model uses (hashable, for the shape cache)."""

    sms: int
    rate: float  # FLOP/s at the achievable efficiency for this dtype and alignment
    bw: float  # achievable HBM bytes/s
    l2_fit: float  # bytes of L2 that hold an operand set without re-reads
    smem: float
    floor: float
    half_bytes: float
    fill: float
    edge_full: float
    tail: float
    reduce_floor: float  # the second kernel of a split-K GEMM (cuBLAS's splitKreduce)


class Candidate(NamedTuple):
    """One (tile, split-K) choice and its predicted terms."""

    time: float
    t_math: float
    t_mem: float
    floor: float  # launch floors: the GEMM's, plus the reduce kernel's when split-K
    tm: int
    tn: int
    split: int
    ctas: int
    ctas_per_sm: int
    waves: int
    wave_eff: float
    tile_eff: float
    feed_eff: float
    traffic: float


def is_aligned(op: Gemm) -> bool:
    """True when the leading dimensions (K of A and B, N of C) are 16-byte multiples.

    nn.Linear's layout (A[m,k] @ W[n,k]ᵀ → C[m,n]) gives cuBLAS lda = ldb = K and ldc = N; M is
    not a leading dimension, so an odd M (token count) keeps the fast path. A weight gradient
    (`wgrad`: dW = dYᵀ @ X, here m and n the weight's dims and k the tokens; autograd's
    grad_output.t().mm(input)) reads dY and X along their rows: its leading dimensions are the
    weight's two, never the token count.
    """
    b = BYTES[op.dtype]
    lead = (op.m, op.n) if op.wgrad else (op.k, op.n)
    return all((d * b) % ALIGN_BYTES == 0 for d in lead)


def _hw(op: Gemm, gpu: GpuSpec) -> _Hw:
    return hw_for(gpu, op.dtype, is_aligned(op))


def hw_for(gpu: GpuSpec, dtype: DType, aligned: bool = True, rate_eff: float | None = None) -> _Hw:
    """The GPU's numbers for a GEMM kernel in `dtype` (`rate_eff` overrides the share of peak)."""
    from gpuperf.perfmodel.gemm_quant import dense_eff

    p = gpu.params
    eff = dense_eff(gpu, dtype, aligned) if rate_eff is None else rate_eff
    return _Hw(
        sms=gpu.sms,
        rate=eff * matmul_peak(gpu, dtype),
        bw=p.gemm_mem_eff * gpu.hbm_bw,
        l2_fit=p.l2_usable_frac * gpu.l2_bytes,
        smem=gpu.smem_per_sm_bytes,
        floor=p.kernel_floor_s + p.mma_latency_s,
        half_bytes=p.bytes_for_half_bw,
        fill=p.gemm_fill_ksteps * _fill_scale(gpu, dtype),
        edge_full=p.gemm_tile_edge_full,
        tail=p.gemm_tail_frac,
        reduce_floor=p.kernel_floor_s,
    )


def _fill_scale(gpu: GpuSpec, dtype: DType) -> float:
    """gemm_fill_ksteps counts k-steps of the 16-bit Tensor-Core kernels: the pipeline's fill is
    a time, the same for the other Tensor-Core types (fp8's and TF32's k-steps take as long), but
    fp32 on CUDA cores (no TF32) spends far longer on each k-step's math, so the same fill is
    fewer of its k-steps: 64 bf16 elements at the bf16 rate against 32 fp32 at the fp32 rate."""
    if dtype != "fp32" or "bf16" not in gpu.peak_flops:
        return 1.0
    peak = matmul_peak(gpu, "fp32")
    return min(1.0, (K_STEP_BYTES // 2) * peak / ((K_STEP_BYTES // 4) * gpu.peak("bf16")))


def ctas_per_sm(tm: int, tn: int, hw: _Hw) -> int:
    """CTAs of a tm × tn tile that one SM holds at once (their pipeline stages in its smem)."""
    return max(1, min(MAX_CTAS_PER_SM, int(hw.smem // (STAGES * (tm + tn) * K_STEP_BYTES))))


def k_step(tm: int, tn: int, b: int, hw: _Hw, eff: float = 1.0) -> tuple[int, float, float]:
    """(K elements a step covers, the tile's feed efficiency, seconds of one K step of every
    SM) for a tm × tn tile of `b`-byte elements at `eff` of the rate."""
    tk = max(1, K_STEP_BYTES // b)
    feed = min(1.0, 2.0 * tm * tn / (tm + tn) / hw.edge_full)
    return tk, feed, 2.0 * tm * tn * tk * hw.sms / (eff * hw.rate * feed)


def raster(tm: int, tn: int, per_sm: int, hw: _Hw) -> tuple[float, float]:
    """The r0 × c0 block of tiles one wave of CTAs covers in grouped raster order."""
    slots = hw.sms * per_sm
    r0 = max(1.0, math.sqrt(slots * tn / tm))
    return r0, max(1.0, slots / r0)


def candidate(
    m: int, n: int, k: int, batch: int, b: int, out_b: int, tm: int, tn: int, s: int, hw: _Hw
) -> Candidate:
    """Predicted terms of one (tile, split-K) choice for an [m,k]@[k,n] product in `b`-byte
    elements (`out_b`-byte output), `batch` independent products."""
    return _candidate(_terms(m, n, k, batch, b, out_b, tm, tn, s, hw, *_tile(tm, tn, b, hw)))  # type: ignore[arg-type]


def _tile(tm: int, tn: int, b: int, hw: _Hw) -> tuple[int, float, float, int, float, float]:
    """What a tile's candidates share: (K elements a step covers, feed efficiency, seconds of
    one K step of every SM, CTAs per SM, the r0 × c0 raster block of a wave)."""
    per_sm = ctas_per_sm(tm, tn, hw)
    return (*k_step(tm, tn, b, hw), per_sm, *raster(tm, tn, per_sm, hw))


@functools.lru_cache(maxsize=64)
def _tiles(b: int, hw: _Hw) -> tuple[tuple[int, int, tuple], ...]:
    """Every tile of TILES with what its candidates share, for `b`-byte elements on `hw`."""
    return tuple((tm, tn, _tile(tm, tn, b, hw)) for tm, tn in TILES)


def _terms(m: int, n: int, k: int, batch: int, b: int, out_b: int, tm: int, tn: int, s: int,
           hw: _Hw, tk: int, feed: float, t_kstep: float, per_sm: int, r0: float, c0: float,
           bound: float = math.inf) -> tuple | None:  # fmt: skip
    """candidate's numbers as a plain tuple, (time, t_math, ...): the search over candidates
    builds a Candidate for the winner only. None when the math and floors alone exceed `bound`
    seconds (the search's best so far: this candidate cannot beat it)."""
    tiles_m, tiles_n = -(-m // tm), -(-n // tn)
    ctas = tiles_m * tiles_n * batch * s
    k_cta = -(-k // s)  # K elements each split covers
    ksteps = -(-k_cta // tk)
    per_sm_ctas = -(-ctas // hw.sms)  # the busiest SM runs this many CTAs, per_sm at a time
    rounds = -(-per_sm_ctas // per_sm)
    # A partial last wave costs a whole one for classic kernels, its share for stream-K ones.
    balanced = ctas * ksteps / hw.sms
    busiest = balanced + hw.tail * (per_sm_ctas * ksteps - balanced)
    t_math = (busiest + rounds * hw.fill) * t_kstep
    # Split-K sums its fp32 partials in a second kernel (cuBLAS's splitKreduce): one more launch.
    floor = hw.floor + (hw.reduce_floor if s > 1 else 0.0)
    if t_math + floor > bound:
        return None

    a_bytes, b_bytes, c_bytes = m * k * b, k * n * b, m * n * out_b
    if a_bytes + b_bytes + c_bytes <= hw.l2_fit:
        reads = a_bytes + b_bytes
    else:  # a wave of CTAs covers an r0 × c0 block of tiles (grouped raster order)
        reads = a_bytes * math.ceil(tiles_n / c0) + b_bytes * math.ceil(tiles_m / r0)
    partials = 2 * s * m * n * PARTIAL_BYTES if s > 1 else 0
    traffic = float(batch * (reads + c_bytes + partials))
    t_mem = (traffic + hw.half_bytes) / hw.bw
    time = max(t_math, t_mem) + floor
    return (time, t_math, t_mem, floor, tm, tn, s, ctas, per_sm, hw.sms * per_sm,
            m * n / (tiles_m * tm * tiles_n * tn), feed, traffic)  # fmt: skip


def _candidate(terms: tuple) -> Candidate:
    time, t_math, t_mem, floor, tm, tn, s, ctas, per_sm, slots, tile_eff, feed, traffic = terms
    waves = -(-ctas // slots)
    return Candidate(
        time=time,
        t_math=t_math,
        t_mem=t_mem,
        floor=floor,
        tm=tm,
        tn=tn,
        split=s,
        ctas=ctas,
        ctas_per_sm=per_sm,
        waves=waves,
        wave_eff=ctas / (waves * slots),
        tile_eff=tile_eff,
        feed_eff=feed,
        traffic=traffic,
    )


def _best(m: int, n: int, k: int, batch: int, b: int, out_b: int, hw: _Hw) -> Candidate:
    best: tuple | None = None
    bound = math.inf  # a candidate whose math and floors exceed the best time cannot win
    for tm, tn, shared in _tiles(b, hw):
        tiles = -(-m // tm) * -(-n // tn) * batch
        per_sm = shared[3]
        for s in SPLITS:
            # Split K only while the tiles alone leave SMs idle, and not past two full waves.
            if s > 1 and (tiles >= hw.sms or tiles * s > 2 * hw.sms * per_sm):
                break
            c = _terms(m, n, k, batch, b, out_b, tm, tn, s, hw, *shared, bound)
            # Ties (memory-bound shapes) go to the candidate with the least math: what a
            # heuristic that also minimizes wasted work would pick.
            if c is not None and (best is None or (c[0], c[1]) < (best[0], best[1])):
                best, bound = c, c[0]
    assert best is not None
    return _candidate(best)


def gemm_time(
    op: Gemm, gpu: GpuSpec, *, tile: tuple[int, int] | None = None, split_k: int | None = None
) -> OpTime:
    """Predicted time of a GEMM: the fastest (tile, split-K) candidate, or the one given."""
    if isinstance(op, GroupedGemm):
        from gpuperf.perfmodel.gemm_grouped import grouped_gemm_time

        return grouped_gemm_time(op, gpu)
    if op.wdtype is not None:
        from gpuperf.perfmodel.gemm_quant import weight_only_time

        return weight_only_time(op, gpu)
    if tile is None and split_k is None:
        from gpuperf.perfmodel.gemm_quant import is_rowwise_fp8, rowwise_fp8_time

        if is_rowwise_fp8(op):
            return rowwise_fp8_time(op, gpu)
    if min(op.m, op.n, op.k, op.batch) <= 0:
        return finish(0.0, 0.0, 0.0, {"empty": 1.0})  # PyTorch launches nothing for empty tensors
    b = BYTES[op.dtype]
    out_b = 2 if b == 1 else b  # fp8/int8 GEMMs write 16-bit results (as Gemm.cost does)
    hw = _hw(op, gpu)
    if tile is None and split_k is None:
        c = _best(op.m, op.n, op.k, op.batch, b, out_b, hw)
    else:
        tm, tn = tile or (128, 128)
        c = candidate(op.m, op.n, op.k, op.batch, b, out_b, tm, tn, split_k or 1, hw)
    detail = {
        "tile": f"{c.tm}x{c.tn}",
        "split_k": c.split,
        "ctas": c.ctas,
        "ctas_per_sm": c.ctas_per_sm,
        "waves": c.waves,
        "wave_eff": c.wave_eff,
        "tile_eff": c.tile_eff,
        "feed_eff": c.feed_eff,
        "eff": hw.rate / matmul_peak(gpu, op.dtype),
        "aligned": 1.0 if is_aligned(op) else 0.0,
        "traffic_bytes": c.traffic,
    }
    return finish(c.t_math, c.t_mem, c.floor, detail)
