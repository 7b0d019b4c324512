"""The accuracy class of each op: the rows of the README's accuracy table, the classes a fit
calibrates (gpuperf.perfmodel.calibrate) and a kernel's track record (gpuperf.step.track_record).
Light on purpose: `gpuperf predict gemm` reads it."""

from __future__ import annotations

import re

from gpuperf.perfmodel.ops import Attention, Collective, Gemm, GroupedGemm, Op, Scan

# GEMMs taken from a model's layers are named "<model>/t<tokens>/<op>" (benchmarks/device sweeps).
_LLM_NAME = re.compile(r"/t\d+/")
MB16 = 16e6


def misaligned(op: Gemm) -> bool:
    """A GEMM whose leading dimensions (those cuBLAS loads) break 16-byte alignment: the time
    model's own rule (gpuperf.perfmodel.gemm.is_aligned; a weight gradient's are the weight's)."""
    from gpuperf.perfmodel.gemm import is_aligned

    return not is_aligned(op)


def op_class(op: Op) -> str:
    """The accuracy class of an op (the rows of the README's accuracy table)."""
    cost = op.cost()
    if isinstance(op, GroupedGemm):
        return (
            "grouped gemm fp8 (MoE experts)" if op.dtype == "fp8" else "grouped gemm (MoE experts)"
        )
    if isinstance(op, Gemm) and op.wdtype is not None:
        return "gemm weight-only int4/int8"
    if isinstance(op, Gemm) and op.dtype == "fp8" and 16 <= op.m <= 8192 and op.batch == 1:
        return "gemm fp8 LLM shapes (16-8192 tokens)"
    if isinstance(op, Gemm):
        if misaligned(op):
            return "gemm misaligned"
        if op.m <= 32:
            return "gemm few tokens (M<=32)"
        if op.dtype in ("bf16", "fp16") and _LLM_NAME.search(op.name) and 128 <= op.m <= 8192:
            return "gemm LLM layer shapes"
        if op.dtype in ("bf16", "fp16") and min(op.m, op.n, op.k) >= 1024:
            return "gemm bf16/fp16 >=1024"
        return f"gemm other ({op.dtype})"
    if isinstance(op, Attention):
        return "attention decode" if op.q_len <= 16 else "attention prefill"
    if isinstance(op, Collective):
        from gpuperf.perfmodel.comm import chunk_misaligned  # NCCL's model: only for collectives

        if chunk_misaligned(op.coll, op.nbytes, op.ranks):
            return "collective misaligned"
        return "collective >=1MiB" if op.nbytes >= 2**20 else "collective <1MiB"
    if isinstance(op, Scan):
        return (
            "mamba-2 decode state update" if op.kernel == "state_update" else "mamba-2 scan kernels"
        )
    if op.kind in ("elementwise", "norm", "softmax", "copy", "reduce", "embedding"):
        return "memory-bound >=16MB" if cost.bytes >= MB16 else "memory-bound <16MB"
    return op.kind
