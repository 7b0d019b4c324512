"""GEMM time for the quantized kernels PyTorch ships, each its own kernel with its own limits.

- fp8 with per-tensor scales and int8 W8A8 (torch._scaled_mm, torch._int_mm) run cuBLASLt's
  kernels: the dense model (gpuperf.perfmodel.gemm) at their own efficiency, `gemm_fp8_eff` and
  `gemm_int8_eff` (fp8 tensor cores at twice the bf16 rate reach a smaller share of their peak).
- fp8 with rowwise scales (torch._scaled_mm with a scale per token and per weight row) runs
  PyTorch's CUTLASS kernel (aten/src/ATen/native/cuda/RowwiseScaledMM.cu): 64×128 tiles while
  they fit in one wave, else 128×128, and no split-K. A skinny product then has few CTAs (N/128
  for a decode step) and each streams its slice of the weights at most at `gemm_cta_bw` bytes/s:
  4096×14336 at 16 tokens runs 32 CTAs and takes 41 µs, where cuBLAS's per-tensor kernel splits K
  and takes 28 µs.
- weight-only int4 (torch._weight_int4pack_mm, tinygemm) and int8 (torch._weight_int8pack_mm):
  bf16 activations times dequantized weights. Their memory term streams the packed weights and
  their group scales; their math runs on a fixed fraction of the bf16 peak (`w4_gemm_eff`,
  `w8_gemm_eff`: the dequantization and narrow MMA tiles of these kernels, not the Tensor Cores'
  rate), and the two overlap only partly (`w4_overlap`, `w8_overlap`: 1 = max, 0 = sum).
All parameters live in a profile's [model.extra]; the defaults are H100 fits.
"""

from __future__ import annotations

from gpuperf.dtypes import BITS, BYTES
from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.ops import INT4_GROUP, Gemm, int4_group
from gpuperf.perfmodel.optime import OpTime
from gpuperf.perfmodel.roofline import finish

DEFAULTS = {
    "gemm_fp8_eff": 0.75,
    "gemm_int8_eff": 0.5,
    "gemm_cta_bw": 45e9,
    "w4_gemm_eff": 0.03,
    "w4_mem_eff": 0.6,
    "w4_overlap": 0.5,
    "w8_gemm_eff": 0.0015,
    "w8_mem_eff": 0.04,
    "w8_overlap": 0.0,
}
ROW_TILES = ((64, 128), (128, 128))  # RowwiseScaledMM.cu on sm90, K-tile 128
SCALE_BYTES = 2  # bf16 scale and zero per group (int4), scale per channel (int8)


def param(gpu: GpuSpec, name: str) -> float:
    return float(gpu.params.extra.get(name, DEFAULTS[name]))


def rowwise_fp8_time(op: Gemm, gpu: GpuSpec) -> OpTime:
    """torch._scaled_mm with rowwise scales (PyTorch's CUTLASS kernel, no split-K)."""
    from gpuperf.perfmodel.gemm import candidate, hw_for

    m, n, k, batch = op.m, op.n, op.k, op.batch
    hw = hw_for(gpu, op.dtype, rate_eff=param(gpu, "gemm_fp8_eff"))
    # PyTorch takes the smaller tile while its CTAs fit in one wave (clusters of two).
    tm, tn = ROW_TILES[0] if -(-m // 64) * -(-n // 128) <= gpu.sms else ROW_TILES[1]
    c = candidate(m, n, k, batch, 1, 2, tm, tn, 1, hw)
    cta_bw = param(gpu, "gemm_cta_bw")
    t_mem = max(c.t_mem, c.traffic / (min(c.ctas, gpu.sms) * cta_bw))
    detail = {"tile": f"{tm}x{tn}", "ctas": c.ctas, "split_k": 1, "kernel": "cutlass rowwise"}
    return finish(c.t_math, t_mem, c.floor, detail)


def weight_only_time(op: Gemm, gpu: GpuSpec) -> OpTime:
    """bf16 activations × int4/int8 weights (PyTorch's weight-only kernels)."""
    assert op.wdtype is not None
    p = gpu.params
    name = "w4" if op.wdtype == "int4" else "w8"
    a_b = BYTES[op.dtype]
    group = int4_group(op.scales) or INT4_GROUP
    scale_bytes = (2 * op.k / group if name == "w4" else 1) * op.n * SCALE_BYTES
    w_bytes = op.k * op.n * BITS[op.wdtype] / 8 + scale_bytes
    traffic = op.batch * (w_bytes + a_b * op.m * (op.k + op.n))
    t_mem = (traffic + p.bytes_for_half_bw) / (param(gpu, f"{name}_mem_eff") * gpu.hbm_bw)
    rate = param(gpu, f"{name}_gemm_eff") * gpu.peak("bf16")
    t_math = 2.0 * op.m * op.n * op.k * op.batch / rate
    # Partial overlap: the larger term plus (1 - overlap) of the smaller.
    lap = param(gpu, f"{name}_overlap")
    small = (1.0 - lap) * min(t_math, t_mem)
    t_math, t_mem = (t_math + small, t_mem) if t_math >= t_mem else (t_math, t_mem + small)
    floor = p.kernel_floor_s + p.mma_latency_s
    detail = {"kernel": f"weight-only {op.wdtype}", "weight_bytes": w_bytes}
    return finish(t_math, t_mem, floor, detail)


def is_rowwise_fp8(op: Gemm) -> bool:
    return op.dtype == "fp8" and op.scales == "row" and op.wdtype is None


def dense_eff(gpu: GpuSpec, dtype: str, aligned: bool) -> float:
    """The share of peak the dense (cuBLAS/cuBLASLt) kernels reach in `dtype`."""
    if dtype == "fp8":
        return param(gpu, "gemm_fp8_eff")
    if dtype == "int8":
        return param(gpu, "gemm_int8_eff")
    return gpu.params.gemm_eff if aligned else gpu.params.gemm_misaligned_eff
