"""The custom all-reduce of serving engines: one kernel that reads the peers' buffers over NVLink.

vLLM (`custom_all_reduce`, since vllm-project/vllm#2192) and TensorRT-LLM (its one-shot and
two-shot all-reduce kernels; SGLang ships the same) do not call NCCL for a tensor-parallel
all-reduce of a few MiB or less inside one NVLink node: every rank writes a flag to its peers,
waits for theirs, then reads their buffers and sums (one-shot), or reduces its 1/p share and
gathers the rest (two-shot). There is no ring of steps, so the small-message time is a few
microseconds where NCCL's ring over 8 ranks takes 15-30; in a decode step of a 70B model at
TP=8 (160 all-reduces of 64 KiB-1 MiB) that is most of the difference between NCCL and these
engines.

Model: t = alpha(p) + busbytes / CUSTOM_AR_BUSBW, busbytes = 2 (p - 1) / p x size (the
all-reduce bus convention of nccl-tests), alpha(p) = a0 + a1 log2(p). The constants come from
the one published table of such a kernel on an H100 (sgl-project/sglang#2904, "unit test
performance in H100 (without cuda graph)", TRT-LLM-derived custom all-reduce, bf16, ms):

    tp 2/4/8, 512 B:  0.0037 / 0.0048 / 0.0059      -> a0 = 2.6 us, a1 = 1.1 us (exact)
    tp 2/4/8, 1 MiB:  0.0199 / 0.0311 / 0.0338      -> busbw 65 / 57 / 63 GB/s (62)
    tp 2/4/8, 256 KiB: 0.0079 / 0.0139 / 0.0167     (the model: 7.9 / 10.9 / 13.0)

Not fitted to any serving run; the table is an H100's and other GPUs take it (assumed: these
kernels are bound by P2P load latency and the blocks they run, not by the link). The engines
dispatch an all-reduce by its size to the fastest path they have (TensorRT-LLM's AUTO strategy,
vLLM's ordered list of all-reduce backends), so where NCCL's predicted time is shorter (large
tensors, where these kernels' bandwidth falls behind the ring's) the model takes NCCL's; above
CUSTOM_AR_MAX_BYTES (vLLM's default buffer, 8 MiB), across nodes or beyond 8 ranks it is NCCL.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from gpuperf.errors import InputError
from gpuperf.perfmodel.optime import OpTime

if TYPE_CHECKING:
    from gpuperf.hardware.spec import GpuSpec, SystemSpec
    from gpuperf.perfmodel.ops import Collective

CUSTOM_AR_A0_S = 2.6e-6
CUSTOM_AR_A1_S = 1.1e-6  # per doubling of the ranks
CUSTOM_AR_BUSBW = 62e9  # bytes/s of bus bandwidth (nccl-tests' all-reduce convention)
CUSTOM_AR_MAX_BYTES = 8 << 20  # vLLM's custom all-reduce buffer; larger: NCCL
CUSTOM_AR_MAX_RANKS = 8


def custom_applies(op: Collective, gpu: GpuSpec, system: SystemSpec | None) -> bool:
    """Whether an engine's custom kernel runs this collective (else NCCL does): an all-reduce of
    NVLink-connected GPUs of one node, all-to-all connected beyond two (vLLM turns it off for
    more than two GPUs that are not: the system's nvswitch; without a system gpuperf assumes
    it, as its NCCL model does, but for a PCIe card's NVLink bridge: its gpu.nvlink_gpus)."""
    per_node = system.gpus_per_node if system is not None else CUSTOM_AR_MAX_RANKS
    if system is None and gpu.nvlink_gpus:  # an NVLink bridge: only the GPUs it joins
        per_node = gpu.nvlink_gpus
    all_to_all = system.nvswitch if system is not None else not gpu.nvlink_gpus
    return (
        op.coll == "allreduce"
        and gpu.nvlink_bw > 0
        and 2 <= op.ranks <= min(CUSTOM_AR_MAX_RANKS, per_node)
        and (op.ranks == 2 or all_to_all)
        and op.nodes <= 1
        and op.nbytes <= CUSTOM_AR_MAX_BYTES
    )


def _constant(gpu: GpuSpec, key: str, default: float, positive: bool) -> float:
    value = float(gpu.params.extra.get(key, default))
    if not (value > 0 if positive else value >= 0) or not math.isfinite(value):
        need = "above 0" if positive else "0 or more"
        raise InputError(f"{gpu.name}: [model.extra] {key} must be {need}, got {value:g}")
    return value


def custom_allreduce_time(op: Collective, gpu: GpuSpec, system: SystemSpec | None,
                          nvls: bool = False) -> OpTime:  # fmt: skip
    """Seconds of a tensor-parallel all-reduce through an engine's custom kernel (module
    docstring); NCCL's time (with NVLink SHARP where `nvls` allows it) where that is shorter or
    where the engine would fall back to NCCL."""
    from gpuperf.perfmodel.comm import collective_time

    nccl = collective_time(op, gpu, system, nvls=nvls)
    if not custom_applies(op, gpu, system):
        return nccl
    p, n = op.ranks, op.nbytes
    a0 = _constant(gpu, "custom_ar_a0_s", CUSTOM_AR_A0_S, positive=False)
    a1 = _constant(gpu, "custom_ar_a1_s", CUSTOM_AR_A1_S, positive=False)
    busbw = _constant(gpu, "custom_ar_busbw", CUSTOM_AR_BUSBW, positive=True)
    lat = a0 + a1 * math.log2(p)
    bw = 2 * (p - 1) / p * n / busbw
    t = lat + bw
    if nccl.time <= t:  # the engines dispatch by size to whichever is faster
        return nccl
    detail = {"algo": "custom", "lat_us": lat * 1e6, "bw_term_us": bw * 1e6, "ranks": p,
              "busbw_gbps": busbw / 1e9}  # fmt: skip
    return OpTime(time=t, bound="comm", t_comm=t, detail=detail)
