"""op_time: each op to its time model; the naive roofline kept for comparison columns.

Every model returns the same shape of answer (OpTime): a math term, a memory term and a per-kernel
floor, combined as `max(t_math, t_mem) + t_overhead` (the floor is launch and drain, paid in series
with the work); `bound` names the largest of the three. See docs/model.md.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from gpuperf.dtypes import DType
from gpuperf.hardware.spec import GpuSpec, SystemSpec
from gpuperf.perfmodel.ops import Cost, Op
from gpuperf.perfmodel.optime import Bound, OpTime


def matmul_peak(gpu: GpuSpec, dtype: DType) -> float:
    """Dense peak FLOP/s a matmul in `dtype` runs at: fp32 uses the CUDA-core fp32 rate unless the
    profile allows TF32 for fp32 matmuls (PyTorch's default does not); `tf32` is the TF32 rate."""
    if dtype == "fp32" and gpu.params.fp32_matmul_tf32 and "tf32" in gpu.peak_flops:
        return gpu.peak("tf32")
    return gpu.peak(dtype)


def ridge(gpu: GpuSpec, dtype: DType) -> float:
    """Critical arithmetic intensity (FLOP/byte): matmul peak / datasheet HBM bandwidth."""
    return matmul_peak(gpu, dtype) / gpu.hbm_bw


def intensity(cost: Cost) -> float:
    """Arithmetic intensity of a cost: FLOP per byte of memory traffic (0 for pure movement)."""
    return cost.intensity


def roofline_time(cost: Cost, gpu: GpuSpec, dtype: DType) -> float:
    """The naive bound max(FLOPs / peak, bytes / HBM bandwidth): no efficiencies, no floor."""
    t_math = cost.flops / matmul_peak(gpu, dtype) if cost.flops else 0.0
    return max(t_math, cost.bytes / gpu.hbm_bw)


def finish(
    t_math: float, t_mem: float, t_overhead: float, detail: Mapping[str, float | str]
) -> OpTime:
    """Combine the terms: time = max(t_math, t_mem) + t_overhead; bound = the largest term."""
    bound: Bound = "compute" if t_math >= t_mem else "memory"
    if t_overhead > max(t_math, t_mem):
        bound = "latency"
    return OpTime(
        time=max(t_math, t_mem) + t_overhead,
        bound=bound,
        t_math=t_math,
        t_mem=t_mem,
        t_overhead=t_overhead,
        detail=MappingProxyType(dict(detail)),
    )


@functools.cache
def _dispatch() -> dict[str, Callable[..., OpTime]]:
    # Imported here: gemm/attention/membound import helpers from this module.
    from gpuperf.perfmodel import attention, gemm, membound, scan

    return {
        "gemm": gemm.gemm_time,
        "attention": attention.attention_time,
        "elementwise": membound.elementwise_time,
        "reduce": membound.reduce_time,
        "norm": membound.norm_time,
        "softmax": membound.norm_time,
        "embedding": membound.embedding_time,
        "copy": membound.copy_time,
        "scan": scan.scan_time,
    }


def shape_key(op: Op) -> tuple[Any, ...]:
    """Every field of the op except its name (layers of one model share shapes, not names)."""
    cls = type(op)
    getter = _FIELDS.get(cls)
    if getter is None:
        names = [f.name for f in dataclasses.fields(cls) if f.name != "name"]
        getter = _FIELDS[cls] = operator.attrgetter(*names)
    return (cls, getter(op))


def _memo_for(gpu: GpuSpec) -> dict[tuple[Any, ...], OpTime]:
    """A result cache that lives with one GpuSpec object. Specs are frozen and the entry holds a
    reference to the spec, so its id cannot be reused while the entry exists."""
    entry = _MEMO.get(id(gpu))
    if entry is None or entry[0] is not gpu:
        if len(_MEMO) >= _MEMO_GPUS:
            _MEMO.clear()
        entry = _MEMO[id(gpu)] = (gpu, {})
    if len(entry[1]) >= _MEMO_OPS:
        entry[1].clear()
    return entry[1]


_FIELDS: dict[type, Callable[[Any], Any]] = {}
_MEMO: dict[int, tuple[GpuSpec, dict[tuple[Any, ...], OpTime]]] = {}
_MEMO_GPUS, _MEMO_OPS = 16, 65536


def op_time(op: Op, gpu: GpuSpec, system: SystemSpec | None = None) -> OpTime:
    """Predicted GPU time of one op on `gpu` (collectives and P2P also need `system`).

    Results are memoized per (GpuSpec object, op shape): a model's op list of thousands of ops
    has a few dozen distinct shapes, so a whole prediction takes milliseconds.
    """
    kind = op.kind
    if kind == "collective" or kind == "p2p":
        from gpuperf.perfmodel import comm  # written separately; imported only when needed

        fn: Any = comm.collective_time if kind == "collective" else comm.p2p_time
        return fn(op, gpu, system)
    memo = _memo_for(gpu)
    key = shape_key(op)
    t = memo.get(key)
    if t is None:
        t = memo[key] = _dispatch()[kind](op, gpu)
    return t
