"""Mamba-2's scan kernels (mamba_ssm's Triton SSD kernels). Two shapes of kernel, read from
mamba_ssm 2.3's code:

- a K-loop of loads feeding small matrix products, scaled only per row (C·Bᵀ and its gradient,
  each chunk's state, the states' and B's gradients: PIPELINED): Triton's software pipeline
  overlaps the loads with the products, so the kernel takes the longer of the two;
- the kernels that decay and mask each chunk's tile element by element between the loads and
  the product (the output, x's, C·Bᵀ's and dA's gradients), the ones with atomic adds (C's
  gradient) and the pure data movers: the two do not overlap, so they add up.

    time = max or sum of (bytes / (HBM bandwidth · ssd_mem_eff), FLOPs / (matmul peak ·
           ssd_math_eff)) + the shortest kernel's floor

A decode step's state update (selective_state_update) is latency-bound instead: its programs
each update a few rows of one head's state (BLOCK_SIZE_M rows of 4 or 8 warps, by the state
size, as the kernel's launcher picks them), each SM holds 64 warps' worth of programs at a time,
and each such set takes ssd_update_wave_s to load, update and store its rows, whatever the
state's dtype (an fp32 state took the time of a bf16 one but at the largest batches):

    time = max(bytes / (HBM bandwidth · ssd_mem_eff), programs / (SMs · resident) ·
           ssd_update_wave_s) + the shortest kernel's floor

All three are profile parameters (`[model.extra]`), fitted on measured kernels
(benchmarks/fit_formats.py, benchmarks/results/<gpu>/ssd_kernels.json); a profile without them gets
the defaults below (the H100's fit, rounded): not calibrated for that GPU.
"""

from __future__ import annotations

from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.ops import Scan
from gpuperf.perfmodel.optime import OpTime
from gpuperf.perfmodel.roofline import finish, matmul_peak

SSD_MEM_EFF = 0.72
SSD_MATH_EFF = 0.59
PIPELINED = frozenset({"bmm", "bmm_bwd", "chunk_state", "dstates", "db"})
SSD_UPDATE_WAVE_S = 3.2e-6
WARPS_PER_SM = 64  # Hopper and Ampere's resident warps per SM


def update_waves(op: Scan, gpu: GpuSpec) -> float:
    """Sets of resident programs a state update runs (mamba_ssm 2.3's selective_state_update:
    BLOCK_SIZE_M rows a program, 4 warps, 8 past a state of 128)."""
    n = op.state
    rows = 32 if n <= 16 else 16 if n <= 32 else 8 if n <= 64 else 4
    warps = 4 if n <= 128 else 8
    programs = -(-op.head_dim // rows) * op.batch * op.heads
    return programs / (gpu.sms * (WARPS_PER_SM // warps))


def scan_time(op: Scan, gpu: GpuSpec) -> OpTime:
    cost = op.cost()
    extra = gpu.params.extra
    t_mem = cost.bytes / (gpu.hbm_bw * float(extra.get("ssd_mem_eff", SSD_MEM_EFF)))
    peak = matmul_peak(gpu, op.dtype) * float(extra.get("ssd_math_eff", SSD_MATH_EFF))
    t_math = cost.flops / peak if cost.flops else 0.0
    if op.kernel == "state_update":
        wave = float(extra.get("ssd_update_wave_s", SSD_UPDATE_WAVE_S))
        t_lat = update_waves(op, gpu) * wave
        return finish(t_lat, t_mem, gpu.params.kernel_floor_s,
                      {"model": "scan: state update, max(memory, resident waves)"})  # fmt: skip
    if op.kernel in PIPELINED:
        return finish(t_math, t_mem, gpu.params.kernel_floor_s,
                      {"model": "scan: max(memory, math), pipelined"})  # fmt: skip
    # finish() adds the larger term to the overhead: the smaller one rides there (a sum).
    return finish(t_math, t_mem, gpu.params.kernel_floor_s + min(t_math, t_mem),
                  {"model": "scan: memory + math, summed"})  # fmt: skip
