"""The schema of hardware. The numbers live in profiles/*.toml, each with a `# source:` comment.

SI units throughout: bytes, bytes/s, FLOP/s, seconds. Peaks are dense (no 2:4 sparsity).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields

from gpuperf.dtypes import DType
from gpuperf.errors import InputError


def _scalar_fields(obj: object) -> dict[str, object]:
    return {f.name: getattr(obj, f.name) for f in fields(obj) if f.name != "extra"}  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelParams:
    """Parameters of the time model for one GPU: efficiencies and latencies, never measured times.

    Defaults are a reasonable uncalibrated GPU; a profile's `[model]` table overrides them, and
    `gpuperf calibrate` writes them from measurements on a present GPU.
    """

    gemm_eff: float = 0.80  # fraction of dense peak a large, aligned GEMM sustains
    gemm_misaligned_eff: float = 0.30  # the same when a dimension breaks 16-byte alignment
    mem_eff: float = 0.90  # fraction of datasheet HBM bandwidth a large streaming kernel reaches
    attn_eff: float = 0.55  # FlashAttention forward: fraction of peak matmul and exp rates
    kernel_floor_s: float = 4e-6  # the shortest any kernel takes on the GPU (launch + tail)
    # CPU time PyTorch eager spends issuing one kernel. The host is the CPU's and PyTorch's, not
    # the GPU's: a GPU without a fit of its own takes the H100 pool's median machine (its
    # profile's host_dispatch_s, moved there by benchmarks/host_pool.py), not a guess.
    host_dispatch_s: float = 2.47519e-05
    graph_launch_s: float = 1.0e-6  # per-kernel cost inside a replayed CUDA graph
    # --- added for perfmodel (roofline/gemm/attention/membound); docs/model.md explains each ---
    attn_bwd_eff: float = 0.35  # FlashAttention backward: fraction of peak (matmul and exp rates)
    attn_fill_blocks: float = 2.0  # per-CTA prologue/epilogue of attention, in KV-block times
    gemm_fill_ksteps: float = 3.0  # per-tile pipeline fill + epilogue of a GEMM, in k-step times
    gemm_tile_edge_full: float = 128.0  # tile harmonic edge 2·Tm·Tn/(Tm+Tn) that feeds full rate
    bytes_for_half_bw: float = 2e6  # bytes a kernel moves to reach half its streaming bandwidth
    bw_sm_frac: float = 0.5  # fraction of SMs (one CTA each) that saturates HBM bandwidth
    l2_bw_factor: float = 1.5  # speed-up of traffic whose working set fits in L2 (1 = none)
    l2_usable_frac: float = 0.5  # fraction of L2 an op's working set may use and stay resident
    fp32_matmul_tf32: float = 0.0  # 1: fp32 GEMMs run on TF32 tensor cores (PyTorch default 0)
    # --- measured mechanisms of real kernels (docs/model.md) ---
    # Extra passes over the input that row kernels make when a row does not stay on chip
    # (PyTorch's block norm re-reads the row to normalize it; its softmax reads it for the max,
    # the sum and the output).
    norm_extra_reads: float = 0.0
    softmax_extra_reads: float = 0.0
    # 0: the attention kernel runs exp after the matmuls (FlashAttention-2); 1: it overlaps them
    # (FlashAttention-3 / cuDNN on Hopper, ping-pong warpgroups), so a pair costs max, not sum.
    attn_exp_overlap: float = 0.0
    # Fraction of HBM bandwidth a GEMM's operand stream reaches (skinny, weight-bound GEMMs:
    # cuBLAS's tiles stream the weights less efficiently than a plain copy kernel).
    gemm_mem_eff: float = 0.85
    # Rate of a copy out of a broadcast (stride-0) view, such as HF's repeat_kv, which PyTorch
    # runs on its generic, unvectorized elementwise kernel, as a fraction of 16 bytes per SM clock
    # (the SMs' issue bounds it, not HBM: membound.strided_bw_eff). Default: the H100's fit.
    strided_copy_eff: float = 0.47
    # Fraction of the fp32 CUDA-core peak that pointwise and row kernels reach on their arithmetic
    # (bf16 unpack/pack, special functions, index math): GELU on an H200 is bound by it.
    vector_eff: float = 1.0
    # Critical path of a row kernel (norm, softmax, reduction) beyond the shortest kernel's floor:
    # its CTAs load a row, reduce it across threads and only then normalize and store.
    row_latency_s: float = 2e-6
    # Setup and drain of a Tensor Core kernel (GEMM, attention) beyond the shortest kernel's
    # floor: barriers, TMA descriptors, the pipeline's prologue and epilogue.
    mma_latency_s: float = 1e-6
    # Whole-model runs keep the GPU busy for many milliseconds and its clock settles below the
    # boost clock that short, isolated kernel timings see: compute-bound time in a scenario
    # (predict_model) is divided by this fraction. 1 = no sustained-load slow-down.
    sustained_clock_frac: float = 1.0
    # How much of a partial last wave a GEMM pays: 1 = a whole wave (classic kernels),
    # 0 = only its share of the work (stream-K / persistent kernels balance the tail).
    gemm_tail_frac: float = 1.0
    # Extra host time per layer of an eager decode step on a growing KV cache (Hugging Face's
    # DynamicCache and mask bookkeeping in Python), on top of host_dispatch_s per kernel.
    host_decode_layer_s: float = 0.0
    # Host time the attention backend spends on a shape it has not met before (cuDNN's SDPA builds
    # an execution plan: 23 ms on an H200 host, sdpa_shape_probe.json; flash and efficient 0.05
    # ms). An eager decode step on a growing cache meets a new kv length every step, once for all
    # its layers. 0 where the default backend has no such cost.
    host_attn_plan_s: float = 0.0
    extra: Mapping[str, float] = field(default_factory=dict)  # model-specific extras by name

    def __hash__(self) -> int:
        return hash(tuple(v for k, v in sorted(_scalar_fields(self).items())))


# The architectures gpuperf has numbers for (the collective model's NCCL tables are per
# architecture; ada and cdna3 borrow Ampere's there, as their profiles' sources say).
ARCHS = ("volta", "ampere", "ada", "hopper", "blackwell", "cdna3")


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One GPU model. Bandwidths are per direction unless named otherwise."""

    name: str  # canonical profile name, e.g. "h100-sxm5-80gb"
    display_name: str  # e.g. "NVIDIA H100 SXM5 80GB"
    arch: str  # one of ARCHS: "ampere", "ada", "hopper", "blackwell"; "cdna3" (AMD MI300X)
    compute_capability: str  # "9.0"
    sms: int
    boost_clock_mhz: float
    peak_flops: Mapping[DType, float]  # FLOP/s, dense
    hbm_bytes: float  # capacity, bytes
    hbm_bw: float  # bytes/s, datasheet
    l2_bytes: float
    smem_per_sm_bytes: float
    nvlink_bw: float  # bytes/s per direction, all links together (0 when none)
    pcie_bw: float  # bytes/s per direction
    params: ModelParams = field(default_factory=ModelParams)
    sources: Mapping[str, str] = field(default_factory=dict)  # field -> where the number comes from
    path: str = ""  # the file it was loaded from
    # a calibrated profile whose time-model parameters this uncalibrated one starts from
    params_from: str = ""
    # GPUs its NVLink joins without a system: 2 for a PCIe card's NVLink bridge (the rest of a
    # node then talks over PCIe, and no NVSwitch means no NVLS); 0: every GPU of the node
    nvlink_gpus: int = 0

    def __hash__(self) -> int:
        # Mapping fields are not hashable; name, file and the headline numbers identify a spec well
        # enough for caches, and equality (all fields) settles collisions.
        return hash(
            (self.name, self.path, self.sms, self.hbm_bw, self.boost_clock_mhz, self.params)
        )

    @property
    def calibrated(self) -> bool:
        """True when the profile (or its base) sets time-model parameters in a [model] table; False
        when every parameter is gpuperf's default, i.e. datasheet numbers only. A built-in profile
        ships a [model] table only when it was fitted to committed measurements of that GPU; one
        that borrows another GPU's fitted parameters (params_from) is not calibrated."""
        return not self.params_from and self.params != ModelParams()

    def same_chip(self, other: GpuSpec) -> bool:
        """Whether `other` describes the same GPU: the same architecture, SMs and memory (a
        calibrated profile of a chip is that chip; another SKU or generation is not)."""
        return (self.arch, self.sms, self.hbm_bytes) == (other.arch, other.sms, other.hbm_bytes)

    def peak(self, dtype: DType) -> float:
        """Dense peak FLOP/s for `dtype`; InputError when the GPU lacks it (fp8 on A100)."""
        try:
            return self.peak_flops[dtype]
        except KeyError:
            have = ", ".join(self.peak_flops)
            raise InputError(
                f"{self.display_name} ({self.name}) has no {dtype} peak in its profile "
                f"(it supports: {have}); pick another dtype or GPU"
            ) from None

    def ridge(self, dtype: DType) -> float:
        """Critical arithmetic intensity (FLOP/byte) where compute and HBM time are equal."""
        return self.peak(dtype) / self.hbm_bw


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemSpec:
    """A node (and how nodes connect): GPUs per node, NVLink/NVSwitch, NICs."""

    name: str  # "dgx-h100"
    display_name: str
    gpu: GpuSpec
    gpus_per_node: int
    nvswitch: bool  # all-to-all NVLink through switches
    nvlink_bw: float  # bytes/s per direction per GPU inside the node
    nics_per_node: int  # compute NICs (GPU-facing)
    nic_bw: float  # bytes/s per direction per NIC
    sources: Mapping[str, str] = field(default_factory=dict)
    path: str = ""
