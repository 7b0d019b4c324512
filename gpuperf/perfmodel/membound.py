"""Memory-bound kernels: elementwise, reductions, norms and softmax, embedding gathers, copies.

Each streams its bytes once (Cost.bytes_read + bytes_written):
  t_mem  = (bytes − resident + resident / l2_bw_factor + bytes_for_half_bw) / (mem_eff · HBM bw)
           where resident = min(bytes, l2_usable_frac · L2): the part of a small working set that
           stays in L2 (written lines are absorbed by the write-back L2; in a real model run the
           inputs were just written by the previous kernel). bytes_for_half_bw is the ramp: a
           kernel reaches half its streaming bandwidth after moving that many bytes.
  t_par  = ceil(rows / SMs) · row_bytes / (mem_eff · HBM bw / (bw_sm_frac · SMs))  (row kernels
           only: norms and softmax give one CTA per row; few rows cannot load the memory system)
  t_math = FLOPs / fp32 CUDA-core peak (never Tensor Cores)
  time   = max(t_math, max(t_mem, t_par)) + kernel_floor_s
"""

from __future__ import annotations

from gpuperf.dtypes import BYTES
from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.ops import Copy, Cost, Elementwise, Embedding, Norm, Reduce
from gpuperf.perfmodel.optime import OpTime
from gpuperf.perfmodel.roofline import finish

INDEX_BYTES = 8  # embedding lookups read one int64 index per token


def stream_time(
    cost: Cost,
    gpu: GpuSpec,
    *,
    rows: int = 0,
    row_bytes: float = 0.0,
    vector: str = "fp32",
    bw_eff: float | None = None,
) -> OpTime:
    """Time of a kernel that streams `cost.bytes` once and does `cost.flops` on CUDA cores.

    `rows`/`row_bytes`: the kernel runs one CTA per row (its parallelism is the row count).
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
    rate = (gpu.peak_flops.get(vector) or gpu.peak("fp32")) * p.vector_eff
    t_math = cost.flops / rate
    detail = {
        "bytes": total,
        "l2_resident_bytes": resident,
        "achieved_bw": total / t_mem if t_mem else 0.0,
    }
    if rows:
        detail["rows_per_sm"] = float(-(-rows // gpu.sms))
    return finish(t_math, t_mem, p.kernel_floor_s, detail)


def _vector(dtype: str) -> str:
    return "fp64" if dtype == "fp64" else "fp32"


# Copies out of a broadcast view: PyTorch's unvectorized elementwise kernel (strided_copy_eff).
STRIDED_FNS = frozenset({"repeat_kv"})


def elementwise_time(op: Elementwise, gpu: GpuSpec) -> OpTime:
    """A pointwise kernel (add, mul, silu, gelu, rope, cast, adamw...): pure streaming."""
    bw_eff = gpu.params.strided_copy_eff if op.fn in STRIDED_FNS else None
    return stream_time(op.cost(), gpu, vector=_vector(op.dtype), bw_eff=bw_eff)


def reduce_time(op: Reduce, gpu: GpuSpec) -> OpTime:
    """A row reduction; PyTorch splits the reduced dimension over CTAs when rows are few, so it
    streams at full bandwidth whatever the row count."""
    return stream_time(op.cost(), gpu, vector=_vector(op.dtype))


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
        cost, gpu, rows=op.rows, row_bytes=cost.bytes / max(op.rows, 1), vector=_vector(op.dtype)
    )


def embedding_time(op: Embedding, gpu: GpuSpec) -> OpTime:
    """Row gather: reads the indices and the selected rows, writes them out."""
    cost = op.cost() + Cost(bytes_read=float(INDEX_BYTES * op.tokens))
    return stream_time(cost, gpu)


def copy_time(op: Copy, gpu: GpuSpec) -> OpTime:
    """Device-to-device copy: reads and writes nbytes."""
    return stream_time(op.cost(), gpu)
