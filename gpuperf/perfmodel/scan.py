"""Mamba-2's scan kernels (mamba_ssm's Triton SSD kernels): their loads and their small matrix
products do not overlap much, so a kernel's time is the sum of its memory term and its math term,
each at its own efficiency, plus the shortest kernel's floor:

    time = bytes / (HBM bandwidth · ssd_mem_eff) + FLOPs / (matmul peak · ssd_math_eff) + floor

Both efficiencies are profile parameters (`[model.extra]`), fitted on measured kernels
(benchmarks/fit_formats.py, benchmarks/results/<gpu>/ssd_kernels.json); a profile without them gets
the defaults below (the H100's fit, rounded): not calibrated for that GPU.
"""

from __future__ import annotations

from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.ops import Scan
from gpuperf.perfmodel.optime import OpTime
from gpuperf.perfmodel.roofline import finish, matmul_peak

SSD_MEM_EFF = 0.74
SSD_MATH_EFF = 0.46


def scan_time(op: Scan, gpu: GpuSpec) -> OpTime:
    cost = op.cost()
    extra = gpu.params.extra
    t_mem = cost.bytes / (gpu.hbm_bw * float(extra.get("ssd_mem_eff", SSD_MEM_EFF)))
    peak = matmul_peak(gpu, op.dtype) * float(extra.get("ssd_math_eff", SSD_MATH_EFF))
    t_math = cost.flops / peak if cost.flops else 0.0
    # finish() adds the larger term to the overhead: the smaller one rides there (a sum).
    return finish(t_math, t_mem, gpu.params.kernel_floor_s + min(t_math, t_mem),
                  {"model": "scan: memory + math, summed"})  # fmt: skip
