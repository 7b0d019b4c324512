"""Memory-bound kernels: elementwise, reductions, norms and softmax, embedding gathers, copies.

Each streams its bytes once (Cost.bytes_read + bytes_written):
  t_mem  = (bytes − resident + resident / l2_bw_factor + bytes_for_half_bw) / (mem_eff · HBM bw)
           where resident = min(bytes, l2_usable_frac · L2): the part of a small working set that
           stays in L2 (written lines are absorbed by the write-back L2; in a real model run the
           inputs were just written by the previous kernel). bytes_for_half_bw is the ramp: a
           kernel reaches half its streaming bandwidth after moving that many bytes.
  t_par  = ceil(rows / SMs) · row_bytes / (mem_eff · HBM bw / (bw_sm_frac · SMs))  (row kernels
           only: norms and softmax give one CTA per row; few rows cannot load the memory system)
  t_math = elements · issue_<fn> / (SMs · 128 · boost clock) for kernels whose instruction cost
           per element is calibrated (issue_<fn> in [model.extra]: gelu, silu, layernorm,
           softmax), else FLOPs / (vector_eff · fp32 CUDA-core peak) (never Tensor Cores)
  time   = ‖t_math, max(t_mem, t_par)‖₈ + kernel_floor_s (+ row_latency_s for row kernels)
           where ‖a, b‖₈ = (a⁸ + b⁸)^(1/8): the larger term, plus a little where the two are close
           (warps stall on memory and on issue slots at once; see OVERLAP_NORM)

The issue term: every element costs the SM a number of thread instructions (load, unpack to fp32,
the math, pack, store, index arithmetic), and an SM issues at most 128 of them per clock (4
schedulers × 32 lanes). Few bytes per element and much math make a kernel issue-bound: on an
H100 and an H200 softmax over 32768×4096 takes 0.42 ms in bf16 and in fp32 alike, whatever the
bandwidth (benchmarks/results/*/dtype_probe.json). The cost is the kernel's, not the GPU's.
"""

from __future__ import annotations

import dataclasses

from gpuperf.dtypes import BYTES
from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.ops import Copy, Cost, Elementwise, Embedding, Norm, Reduce
from gpuperf.perfmodel.optime import OpTime
from gpuperf.perfmodel.roofline import finish

INDEX_BYTES = 8  # embedding lookups read one int64 index per token
ISSUE_WIDTH = 128  # thread instructions an SM issues per clock: 4 schedulers × 32 lanes (sm_70+)
# How memory and issue time combine: (a^k + b^k)^(1/k). bf16 GELU over 2**27 elements took
# 0.174 ms on an H200, where it is issue-bound, and 0.189 ms on an H100, 7% over its copy time
# (dtype_probe.json on each): one issue time explains both for k between 8 and 10. max() (k = ∞)
# would leave the H100's 7% unexplained and the H100 blind to the issue cost.
OVERLAP_NORM = 8.0


def issue_time(fn: str, elements: float, gpu: GpuSpec, default: float = 0.0) -> float | None:
    """Seconds to issue `elements` × the calibrated instruction cost of `fn` (issue_<fn> in the
    profile's [model.extra], else `default`); None when there is neither."""
    cost = gpu.params.extra.get(f"issue_{fn}") or default
    if not cost:
        return None
    return elements * cost / (gpu.sms * ISSUE_WIDTH * gpu.boost_clock_mhz * 1e6)


def stream_time(
    cost: Cost,
    gpu: GpuSpec,
    *,
    rows: int = 0,
    row_bytes: float = 0.0,
    vector: str = "fp32",
    bw_eff: float | None = None,
    t_issue: float | None = None,
    extra_floor: float = 0.0,
) -> OpTime:
    """Time of a kernel that streams `cost.bytes` once and does `cost.flops` on CUDA cores.

    `rows`/`row_bytes`: the kernel runs one CTA per row (its parallelism is the row count).
    `t_issue`: the kernel's instruction-issue time, when known (replaces the FLOP-rate term).
    `extra_floor`: latency on top of kernel_floor_s (row kernels: row_latency_s).
    """
    p = gpu.params
    total = cost.bytes
    if total <= 0 and cost.flops <= 0:
        return finish(0.0, 0.0, 0.0, {"empty": 1.0})  # PyTorch launches nothing for empty tensors
    bw = (p.mem_eff if bw_eff is None else bw_eff) * gpu.hbm_bw
    resident = min(total, p.l2_usable_frac * gpu.l2_bytes)
    t_stream = (total - resident + resident / p.l2_bw_factor + p.bytes_for_half_bw) / bw
    t_par = 0.0
    if rows:
        per_sm_bw = bw / (p.bw_sm_frac * gpu.sms)
        t_par = -(-rows // gpu.sms) * row_bytes / per_sm_bw
    t_mem = max(t_stream, t_par)
    if t_issue is None:
        rate = (gpu.peak_flops.get(vector) or gpu.peak("fp32")) * p.vector_eff
        t_math = cost.flops / rate
    else:
        t_math = t_issue
    detail = {
        "bytes": total,
        "l2_resident_bytes": resident,
        "achieved_bw": total / t_mem if t_mem else 0.0,
    }
    if rows:
        detail["rows_per_sm"] = float(-(-rows // gpu.sms))
    out = finish(t_math, t_mem, p.kernel_floor_s + extra_floor, detail)
    k = OVERLAP_NORM
    big = max(t_math, t_mem)
    if big > 0:
        both = big * ((t_math / big) ** k + (t_mem / big) ** k) ** (1 / k)
        out = dataclasses.replace(out, time=both + out.t_overhead)
    return out


def _vector(dtype: str) -> str:
    return "fp64" if dtype == "fp64" else "fp32"


# PyTorch's unvectorized elementwise kernel (strided_copy_eff): copies out of a broadcast view
# (HF's repeat_kv), a masked fill with a broadcast mask, and pointwise ops on the strided halves
# of a chunked tensor (act(gate) · up of a fused gate_up output: HF's grouped MoE experts, Phi-3).
STRIDED_FNS = frozenset({"repeat_kv", "masked_fill", "act_chunk", "mul_chunk"})
# That kernel computes every operand's offset per element, dimension by dimension: the SMs' issue
# rate bounds it, not HBM. strided_copy_eff is its rate as a fraction of 16 bytes per SM clock:
# fitted apart, the H100 and the H200 (the same SMs and clocks, 3.35 and 4.8 TB/s of HBM) reach
# 1.96 and 1.98 TB/s (0.469 and 0.473 of it; 0.59 and 0.41 of their HBM bandwidths), and
# Hugging Face's CUDA-graph decodes, whose repeat_kv copies take half their time, ran on the
# H200 at 0.92 of the H100's time, not at the 0.70 of an HBM-bound copy (e2e_batched.json).
STRIDED_BYTES_PER_SM_CLOCK = 16.0


def strided_bw_eff(gpu: GpuSpec) -> float:
    """The bandwidth of PyTorch's non-vectorized elementwise kernel (STRIDED_FNS), as a fraction
    of the GPU's HBM bandwidth: its SM-bound rate, at most a plain copy's."""
    p = gpu.params
    rate = p.strided_copy_eff * STRIDED_BYTES_PER_SM_CLOCK * gpu.sms * gpu.boost_clock_mhz * 1e6
    return min(p.mem_eff, rate / gpu.hbm_bw)


# Thread instructions per element of PyTorch's non-vectorized elementwise kernel (an offset
# computed per operand and dimension, scalar loads and stores) where a profile has not measured
# its own (issue_generic in [model.extra]; benchmarks/device/eager_ew_probe.py).
ISSUE_GENERIC = 100.0

# Thread instructions per element of two kernels of PyTorch's masked_scatter_ (Hugging Face's
# paged cache on a sliding-window layer: gpuperf.step.serve_steps), where a profile has not
# measured its own (issue_<fn> in [model.extra]): the contiguous copy of a broadcast bool mask
# (mask_copy, the direct-copy elementwise kernel with broadcast strides: 52-56) and cub's
# prefix sum of it into int64 (scan, DeviceScanKernel: 154-161). Both from an H100's profiles
# of Phi-3-mini served at two loads (serve_hf_profile_families2.json and its _decode twin: each
# kernel's time per call, the gathered values from the gather kernel beside it, which the model
# times within 0.3%); the scatter pass itself streams its bytes (within 2-5% of the same
# profiles).
ISSUE_DEFAULTS = {"mask_copy": 54.0, "scan": 157.0}


# torch's _foreach ops (multi_tensor_apply, ATen/native/cuda/MultiTensorApply.cuh) cut a
# parameter list into chunks of kChunkSize = 65536 elements and launch at most 320 of them
# (one CTA each) per kernel, so a list of P elements runs as ~P / (320 · 65536) equal launches.
# Each launch costs a fixed time beyond its bytes: every thread walks its chunk in 32 steps of 4
# elements, a load's latency exposed at each, and the launch ends with its slowest CTA. Timed
# alone (benchmarks/device/train_kernels_probe.py: AdamW's eight ops over model-shaped lists of
# 0.16-3.6B parameters, bf16 and fp32) that is 6-11 µs per launch on an H100 and an H200:
# foreach_launch_s in [model.extra], FOREACH_LAUNCH_S where a profile has not measured it.
FOREACH_LAUNCH_ELEMS = 320 * 65536
FOREACH_LAUNCH_S = 8e-6


def foreach_launches(numel: int) -> int:
    """multi_tensor_apply launches for a parameter list of `numel` elements (full chunks)."""
    return max(1, -(-numel // FOREACH_LAUNCH_ELEMS))


def elementwise_time(op: Elementwise, gpu: GpuSpec) -> OpTime:
    """A pointwise kernel (add, mul, silu, gelu, rope, cast, adamw...): pure streaming, or as
    many elements as the non-vectorized path issues (generic); a foreach op adds its launches'
    fixed cost."""
    bw_eff = strided_bw_eff(gpu) if op.fn in STRIDED_FNS else None
    if op.generic:
        t_issue = issue_time("generic", op.numel, gpu, ISSUE_GENERIC)
    else:
        t_issue = issue_time(op.fn, op.numel, gpu, ISSUE_DEFAULTS.get(op.fn, 0.0))
    out = stream_time(op.cost(), gpu, vector=_vector(op.dtype), bw_eff=bw_eff, t_issue=t_issue)
    if op.foreach:
        per = float(gpu.params.extra.get("foreach_launch_s", FOREACH_LAUNCH_S))
        launches = foreach_launches(op.numel)
        out = dataclasses.replace(out, time=out.time + launches * per,
                                  t_overhead=out.t_overhead + launches * per,
                                  detail={**out.detail, "launches": float(launches)})  # fmt: skip
    return out


def reduce_time(op: Reduce, gpu: GpuSpec) -> OpTime:
    """A row reduction; PyTorch splits the reduced dimension over CTAs when rows are few, so it
    streams at full bandwidth whatever the row count."""
    return stream_time(
        op.cost(), gpu, vector=_vector(op.dtype), extra_floor=gpu.params.row_latency_s
    )


def norm_time(op: Norm, gpu: GpuSpec) -> OpTime:
    """RMSNorm / LayerNorm / softmax: one CTA per row, so few rows cannot fill the GPU. Rows that
    do not stay on chip are read again (norm_extra_reads / softmax_extra_reads passes)."""
    cost = op.cost()
    p = gpu.params
    extra = p.softmax_extra_reads if op.fn == "softmax" else p.norm_extra_reads
    if extra:
        row_in = float(BYTES[op.dtype] * op.rows * op.cols)
        cost = cost + Cost(bytes_read=extra * row_in)
    return stream_time(
        cost,
        gpu,
        rows=op.rows,
        row_bytes=cost.bytes / max(op.rows, 1),
        vector=_vector(op.dtype),
        t_issue=issue_time(op.fn, op.rows * op.cols * (2 if op.backward else 1), gpu),
        extra_floor=p.row_latency_s,
    )


def embedding_time(op: Embedding, gpu: GpuSpec) -> OpTime:
    """Row gather: reads the indices and the selected rows, writes them out."""
    cost = op.cost() + Cost(bytes_read=float(INDEX_BYTES * op.tokens))
    return stream_time(cost, gpu)


def copy_time(op: Copy, gpu: GpuSpec) -> OpTime:
    """Device-to-device copy: reads and writes nbytes. Out of strided views (generic) it is a
    torch.cat of them, CatArrayBatchedCopy: per element an offset for every dimension of input
    and output, issue_cat thread instructions (issue_generic where a profile has not measured
    it): 135-170 on an H100 against the elementwise kernels' 99 (partial_rope.json)."""
    if op.generic:
        elements = op.nbytes / BYTES[op.dtype]
        t = issue_time("cat", elements, gpu) or issue_time("generic", elements, gpu, ISSUE_GENERIC)
        return stream_time(op.cost(), gpu, t_issue=t)
    return stream_time(op.cost(), gpu)
