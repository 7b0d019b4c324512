"""Mamba-2's scan kernels (mamba_ssm's Triton SSD kernels). Two shapes of kernel, read from
mamba_ssm 2.3's code:

- a K-loop of loads feeding small matrix products, scaled only per row (C·Bᵀ and its gradient,
  each chunk's state, the states' gradient: PIPELINED): Triton's software pipeline overlaps the
  loads with the products, so the kernel takes the longer of the two;
- the kernels that decay and mask each chunk's tile element by element between the loads and
  the product (the output, x's, C·Bᵀ's and dA's gradients), the ones that loop over heads with
  a row sum and atomic adds into dA's gradient (B's and C's gradients) and the pure data
  movers: the two do not overlap, so they add up.

    time = max or sum of (bytes / (HBM bandwidth · ssd_mem_eff), FLOPs / (matmul peak ·
           ssd_math_eff)) + the shortest kernel's floor

A decode step's state update (selective_state_update) runs at a rate of state elements per SM
instead: its small programs (a few rows of one head's state each) update ssd_update_rate
elements a second on each SM whatever the state's dtype (an fp32 state took about the time of
a bf16 one, twice its bytes), 4-warp and 8-warp programs alike (states of 128 and of 256):

    time = max(bytes / (HBM bandwidth · ssd_mem_eff), state elements / (SMs ·
           ssd_update_rate)) + the shortest kernel's floor

All three are profile parameters (`[model.extra]`), fitted on measured kernels
(benchmarks/fit_formats.py, benchmarks/results/<gpu>/ssd_kernels.json, ssd_decode.json); a
profile without them gets the defaults below (the H100's fit, rounded): not calibrated for that
GPU.
"""

from __future__ import annotations

from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.ops import Scan
from gpuperf.perfmodel.optime import OpTime
from gpuperf.perfmodel.roofline import finish, matmul_peak

SSD_MEM_EFF = 0.72
SSD_MATH_EFF = 0.59
PIPELINED = frozenset({"bmm", "bmm_bwd", "chunk_state", "dstates"})
SSD_UPDATE_RATE = 2.5e9  # state elements a second per SM


def scan_time(op: Scan, gpu: GpuSpec) -> OpTime:
    cost = op.cost()
    extra = gpu.params.extra
    t_mem = cost.bytes / (gpu.hbm_bw * float(extra.get("ssd_mem_eff", SSD_MEM_EFF)))
    if op.kernel == "state_update":
        rate = float(extra.get("ssd_update_rate", SSD_UPDATE_RATE)) * gpu.sms
        t_rate = op.batch * op.heads * op.head_dim * op.state / rate
        return finish(t_rate, t_mem, gpu.params.kernel_floor_s,
                      {"model": "scan: state update, max(memory, elements per SM)"})  # fmt: skip
    peak = matmul_peak(gpu, op.dtype) * float(extra.get("ssd_math_eff", SSD_MATH_EFF))
    t_math = cost.flops / peak if cost.flops else 0.0
    if op.kernel in PIPELINED:
        return finish(t_math, t_mem, gpu.params.kernel_floor_s,
                      {"model": "scan: max(memory, math), pipelined"})  # fmt: skip
    # finish() adds the larger term to the overhead: the smaller one rides there (a sum).
    return finish(t_math, t_mem, gpu.params.kernel_floor_s + min(t_math, t_mem),
                  {"model": "scan: memory + math, summed"})  # fmt: skip
