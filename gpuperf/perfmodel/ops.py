"""Ops: the unit of work that is both predicted and measured. An op knows shapes, never hardware.

Every op gives a `Cost` (FLOPs and the fewest bytes it must move through device memory: each input
read once, each output written once). Names are hierarchical ("L0/attn/qkv") so breakdowns are a
groupby on a prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from gpuperf.dtypes import BITS, BYTES, DType

OpKind = Literal[
    "gemm",
    "attention",
    "elementwise",
    "reduce",
    "norm",
    "softmax",
    "embedding",
    "copy",
    "collective",
    "p2p",
    "scan",
]
CollectiveKind = Literal["allreduce", "allgather", "reducescatter", "alltoall", "broadcast"]


@dataclass(frozen=True, slots=True)
class Cost:
    """What an op does: FLOPs, bytes read and written in device memory, bytes sent between GPUs."""

    flops: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    comm_bytes: float = 0.0

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOP per byte of memory traffic (0 for pure data movement)."""
        return self.flops / self.bytes if self.bytes else 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.flops + other.flops,
            self.bytes_read + other.bytes_read,
            self.bytes_written + other.bytes_written,
            self.comm_bytes + other.comm_bytes,
        )


@dataclass(frozen=True, slots=True)
class Gemm:
    """C[m, n] = A[m, k] @ B[k, n], `batch` independent products (bmm, or one per MoE expert).

    `dtype` is the operands' type (fp8/int8: both quantized, W8A8); `wdtype` the weights' (B's)
    type when only they are quantized (weight-only int4/int8 with bf16 activations, as
    torch._weight_int4pack_mm). `scales`: how quantized operands are scaled ("tensor", "row"
    for fp8; "g128" etc. for grouped int4), which changes the kernel's epilogue and reads."""

    name: str
    m: int
    n: int
    k: int
    dtype: DType = "bf16"
    batch: int = 1
    wdtype: DType | None = None
    scales: str = ""
    # A weight gradient, dW = dYᵀ @ X with m, n the weight's dims and k the tokens: it reads dY
    # and X along their rows, so its leading dimensions are m and n (gemm.is_aligned).
    wgrad: bool = False
    kind: ClassVar[OpKind] = "gemm"

    def cost(self) -> Cost:
        b = BYTES[self.dtype]
        wb = BITS[self.wdtype] / 8 if self.wdtype else b
        out_b = 2 if b == 1 else b  # fp8/int8 GEMMs write 16-bit results
        return Cost(
            flops=2.0 * self.m * self.n * self.k * self.batch,
            bytes_read=float((b * self.m * self.k + wb * self.k * self.n) * self.batch),
            bytes_written=float(out_b * self.m * self.n * self.batch),
        )

    @property
    def shape(self) -> str:
        pre = f"{self.batch}×" if self.batch > 1 else ""
        w = f" w{self.wdtype}" if self.wdtype else ""
        sc = f" {self.scales}" if self.scales else ""
        return f"{pre}{self.m}×{self.n}×{self.k}{w}{sc}"


# int4 weights carry a 16-bit scale and zero per group of K (tinygemm's layout), named in
# Gemm.scales as "g<size>"; 128 unless said.
INT4_GROUP = 128
INT4_GROUPS = (32, 64, 128, 256)


def int4_group(scales: str) -> int | None:
    """The int4 group size that Gemm.scales names ("g128"; "" for the default), or None when it
    names none of INT4_GROUPS."""
    text = scales or f"g{INT4_GROUP}"
    size = int(text[1:]) if text.startswith("g") and text[1:].isdigit() else None
    return size if size in INT4_GROUPS else None


def gemm_scales(dtype: DType, wdtype: DType | None, fp8_scales: str) -> str:
    """Gemm.scales for a format: int4 weights in groups of INT4_GROUP, fp8 operands at
    `fp8_scales` ("tensor" or "row"), nothing for the rest."""
    if wdtype == "int4":
        return f"g{INT4_GROUP}"
    return fp8_scales if dtype == "fp8" else ""


@dataclass(frozen=True, slots=True)
class GroupedGemm:
    """One grouped GEMM over the experts of an MoE layer (torch._grouped_mm, CUTLASS grouped
    kernels): `tokens` tokens each routed to `topk` of `experts` experts, every expert's rows
    times its own B[k, n]. The rows per expert follow from the routing; the op holds the shape
    and the time model the routing (uniform over experts unless a profile says otherwise)."""

    name: str
    tokens: int
    topk: int
    experts: int
    n: int
    k: int
    dtype: DType = "bf16"
    groups: int = 0  # experts this GPU runs (expert parallelism: experts / ep); 0 = all
    # The weight gradient instead: each expert's dW[n, k] = dY_eᵀ @ X_e (weights held [E, n, k]),
    # the sum running over that expert's rows (torch._grouped_mm of two 2-D operands, offsets
    # along the reduction).
    wgrad: bool = False
    kind: ClassVar[OpKind] = "gemm"

    @property
    def local(self) -> int:
        return self.groups or self.experts

    @property
    def rows(self) -> int:
        """Routed rows that reach this GPU's experts (all of them without expert parallelism)."""
        return self.tokens * self.topk * self.local // self.experts

    def touched(self) -> float:
        """This GPU's experts that receive at least one row, on average, when each token picks
        topk distinct experts uniformly at random: local·(1 - (1 - k/E)^T)."""
        e, k = self.experts, min(self.topk, self.experts)
        return self.local * (1.0 - (1.0 - k / e) ** self.tokens)

    def cost(self) -> Cost:
        b = BYTES[self.dtype]
        flops = 2.0 * self.rows * self.n * self.k
        if self.wgrad:  # reads the rows and their gradients, writes each touched expert's dW
            out = self.touched() * self.k * self.n * wgrad_bytes(self.dtype)
            return Cost(flops, float(b * self.rows * (self.k + self.n)), out)
        return Cost(
            flops=flops,
            bytes_read=b * (self.rows * self.k + self.touched() * self.k * self.n),
            bytes_written=float(b * self.rows * self.n),
        )

    @property
    def shape(self) -> str:
        here = f" ({self.local} here)" if self.groups else ""
        what = " wgrad" if self.wgrad else ""
        return f"{self.tokens}×top{self.topk}/{self.experts}e{here} ×{self.n}×{self.k}{what}"


def wgrad_bytes(dtype: DType) -> int:
    """Bytes per element of a grouped weight gradient: the operands' width, 16-bit for 8-bit
    operands (an fp8 GEMM writes its gradient in bf16)."""
    return max(2, BYTES[dtype])


@dataclass(frozen=True, slots=True)
class Attention:
    """Fused (FlashAttention-style) attention: softmax(Q Kᵀ / √d) V for `batch` sequences.

    q_len queries attend to kv_len keys; causal masks the future. With q_len < kv_len (decode or
    chunked prefill) the queries are the last q_len positions. `backward` is the gradient pass.
    """

    name: str
    batch: int
    heads: int
    kv_heads: int
    q_len: int
    kv_len: int
    head_dim: int
    causal: bool = True
    dtype: DType = "bf16"
    kv_dtype: DType | None = None
    backward: bool = False
    # An explicit mask tensor is passed (HF's StaticCache decode). Measured on an H100 and an H200
    # with torch 2.11, SDPA still picks cuDNN then, at the speed of unmasked decode
    # (benchmarks/results/*/attention_masked.json), so the time model treats it alike.
    mask: bool = False
    # Value head size when it differs from the query/key one (MLA: q·k over 192, values 128).
    v_head_dim: int = 0
    # Sliding window: each query sees at most the `window` latest keys (0: all), as a
    # windowed FlashAttention kernel skips the blocks outside it.
    window: int = 0
    # Dropout on the probabilities inside the kernel (training with attention dropout): a
    # random number per (query, key) pair, drawn forward and drawn again backward.
    dropout: bool = False
    kind: ClassVar[OpKind] = "attention"

    @property
    def vdim(self) -> int:
        return self.v_head_dim or self.head_dim

    @property
    def fixed_window(self) -> bool:
        """A decode step over a sliding window that is full: its key count is the same every
        step (the backend met this shape before; nothing to plan)."""
        return bool(self.window) and self.kv_len <= self.window

    def attended_pairs(self) -> float:
        """Number of (query, key) pairs computed per head, after causal masking and the window."""
        q, kv, w = self.q_len, self.kv_len, self.window
        if not self.causal:
            return float(q * min(kv, w) if w else q * kv)
        # Query i (0-based among the last q of kv positions) sees kv - q + i + 1 keys.
        full = q * (kv - q) + q * (q + 1) / 2
        if not w or w >= kv:
            return float(full)
        # Capped at w: queries that see fewer than w keys keep them all.
        short = max(0, min(q, w - (kv - q)))  # queries that see at most w keys
        return float(short * (kv - q) + short * (short + 1) / 2 + (q - short) * w)

    def cost(self) -> Cost:
        b = BYTES[self.dtype]
        kvb = BYTES[self.kv_dtype or self.dtype]
        pairs = self.attended_pairs() * self.batch * self.heads
        # QKᵀ over head_dim and PV over the value dim, 2 FLOP per multiply-add each.
        fwd_flops = 2.0 * pairs * (self.head_dim + self.vdim)
        q_elems = self.batch * self.heads * self.q_len * self.head_dim
        o_elems = self.batch * self.heads * self.q_len * self.vdim
        kv_elems = self.batch * self.kv_heads * self.kv_len * (self.head_dim + self.vdim)
        if not self.backward:
            return Cost(fwd_flops, b * q_elems + kvb * kv_elems, b * o_elems)
        # Backward (FlashAttention-2): recompute QKᵀ, dV, dP, dQ, dK = 2.5x forward FLOPs;
        # reads Q, K, V, O, dO; writes dQ, dK, dV.
        reads = b * (q_elems + 2 * o_elems) + kvb * kv_elems
        return Cost(2.5 * fwd_flops, reads, b * q_elems + kvb * kv_elems)

    @property
    def shape(self) -> str:
        gqa = f"/{self.kv_heads}" if self.kv_heads != self.heads else ""
        return (
            f"b{self.batch} h{self.heads}{gqa} q{self.q_len} kv{self.kv_len} d{self.head_dim}"
            + (f"/{self.v_head_dim}" if self.v_head_dim else "")
            + (" causal" if self.causal else "")
            + (f" window{self.window}" if self.window else "")
            + (" mask" if self.mask else "")
            + (" dropout" if self.dropout else "")
        )


MASK_WRITERS = frozenset({"dropout", "dropout_add"})


@dataclass(frozen=True, slots=True)
class Elementwise:
    """One pointwise kernel over `numel` elements: n_in inputs read, n_out outputs written.

    `fn` names it (add, mul, silu, gelu, rope, cast, adamw, ...). out_dtype differs from dtype for
    casts. flops_per_elem counts arithmetic per output element (gelu ~ 8, add 1).
    """

    name: str
    fn: str
    numel: int
    n_in: int = 1
    n_out: int = 1
    dtype: DType = "bf16"
    out_dtype: DType | None = None
    flops_per_elem: float = 1.0
    # PyTorch's non-vectorized TensorIterator kernel (elementwise_kernel / unrolled_...): an
    # operand broadcast or strided (eager RMSNorm's x * rsqrt and w * x, RoPE on transposed q/k),
    # or a widening cast; its per-element index arithmetic sets its pace (issue_generic).
    generic: bool = False
    # One of torch's _foreach ops over a parameter list (AdamW's default on CUDA): it runs as
    # multi_tensor_apply launches of a fixed size (FOREACH_LAUNCH_ELEMS), each paying
    # foreach_launch_s beyond its bytes (gpuperf.perfmodel.membound).
    foreach: bool = False
    kind: ClassVar[OpKind] = "elementwise"

    def cost(self) -> Cost:
        out_b = BYTES[self.out_dtype or self.dtype]
        # Dropout keeps a one-byte mask per element: written forward, read by the backward.
        mask_w = self.numel if self.fn in MASK_WRITERS else 0
        mask_r = self.numel if self.fn == "dropout_bwd" else 0
        return Cost(
            flops=self.flops_per_elem * self.numel,
            bytes_read=float(self.n_in * self.numel * BYTES[self.dtype] + mask_r),
            bytes_written=float(self.n_out * self.numel * out_b + mask_w),
        )

    @property
    def shape(self) -> str:
        return f"{self.fn} n={self.numel}"


@dataclass(frozen=True, slots=True)
class Reduce:
    """A row reduction (mean, sum, max, argmax/top-k) of [rows, cols] into [rows, out_cols]."""

    name: str
    fn: str
    rows: int
    cols: int
    out_cols: int = 1
    dtype: DType = "bf16"
    kind: ClassVar[OpKind] = "reduce"

    def cost(self) -> Cost:
        b = BYTES[self.dtype]
        return Cost(
            flops=float(self.rows * self.cols),
            bytes_read=float(b * self.rows * self.cols),
            bytes_written=float(b * self.rows * self.out_cols),
        )

    @property
    def shape(self) -> str:
        return f"{self.fn} {self.rows}×{self.cols}"


@dataclass(frozen=True, slots=True)
class Norm:
    """A fused row-wise kernel over [rows, cols]: rmsnorm, layernorm or softmax.

    Reads the input (and `residual` extra inputs when fused with a residual add), writes the output.
    """

    name: str
    fn: Literal["rmsnorm", "layernorm", "softmax"]
    rows: int
    cols: int
    dtype: DType = "bf16"
    residual: bool = False
    backward: bool = False

    @property
    def kind(self) -> OpKind:  # type: ignore[override]
        return "softmax" if self.fn == "softmax" else "norm"

    def cost(self) -> Cost:
        b = BYTES[self.dtype]
        n = self.rows * self.cols
        reads = 1 + (1 if self.residual else 0) + (1 if self.backward else 0)
        writes = 1 + (1 if self.residual else 0)
        flops_per = {"rmsnorm": 4, "layernorm": 7, "softmax": 5}[self.fn] * (
            2 if self.backward else 1
        )
        return Cost(
            flops=float(flops_per * n),
            bytes_read=float(b * n * reads),
            bytes_written=float(b * n * writes),
        )

    @property
    def shape(self) -> str:
        return f"{self.fn} {self.rows}×{self.cols}"


@dataclass(frozen=True, slots=True)
class Embedding:
    """Row gather: `tokens` rows of `hidden` from a table (reads only the rows it needs)."""

    name: str
    tokens: int
    hidden: int
    dtype: DType = "bf16"
    kind: ClassVar[OpKind] = "embedding"

    def cost(self) -> Cost:
        n = BYTES[self.dtype] * self.tokens * self.hidden
        return Cost(0.0, float(n), float(n))

    @property
    def shape(self) -> str:
        return f"{self.tokens}×{self.hidden}"


@dataclass(frozen=True, slots=True)
class Copy:
    """A device-to-device copy of `nbytes` bytes (reads and writes nbytes each)."""

    name: str
    nbytes: int
    dtype: DType = "bf16"
    generic: bool = False  # a torch.cat of strided views (RoPE's halves): issue_cat
    kind: ClassVar[OpKind] = "copy"

    def cost(self) -> Cost:
        return Cost(0.0, float(self.nbytes), float(self.nbytes))

    @property
    def shape(self) -> str:
        return f"{self.nbytes} B"


@dataclass(frozen=True, slots=True)
class Collective:
    """A collective over `ranks` GPUs. `nbytes` follows nccl-tests' size column: the per-rank buffer
    for allreduce/broadcast/alltoall, the total (count × ranks) for allgather/reducescatter.

    `net_bytes` (alltoall only) marks an MoE token dispatch or combine as DeepEP and HybridEP run
    it instead of NCCL: `nbytes` then holds each of this rank's tokens once per GPU it goes to
    (not once per routed copy), and `net_bytes` once per other node it goes to, the bytes this
    rank's NIC sends (0 in one node). None: NCCL's all-to-all."""

    name: str
    coll: CollectiveKind
    nbytes: int
    ranks: int
    dtype: DType = "bf16"
    nodes: int = 0  # nodes the group spans; 0: as many as the ranks fill (ranks / GPUs per node)
    net_bytes: int | None = None
    kind: ClassVar[OpKind] = "collective"

    def cost(self) -> Cost:
        return Cost(comm_bytes=float(self.nbytes))

    @property
    def shape(self) -> str:
        if self.net_bytes is not None:
            return f"dispatch {self.nbytes} B ({self.net_bytes} B by NIC) ×{self.ranks}"
        return f"{self.coll} {self.nbytes} B ×{self.ranks}"


@dataclass(frozen=True, slots=True)
class P2P:
    """A point-to-point send of `nbytes` from one GPU to another (pipeline stage boundary)."""

    name: str
    nbytes: int
    dtype: DType = "bf16"
    inter_node: bool = False  # over the NIC (the next pipeline stage is on another node)
    kind: ClassVar[OpKind] = "p2p"

    def cost(self) -> Cost:
        return Cost(comm_bytes=float(self.nbytes))

    @property
    def shape(self) -> str:
        return f"{self.nbytes} B"


# The row and column blocks of the scan kernels that weigh by C·Bᵀ (BLOCK_SIZE_M, BLOCK_SIZE_N):
# autotuned; 64 is what they picked at chunks of 128 and 256 on an H100 (x's gradient took 32).
SCAN_BLOCK = 64


@dataclass(frozen=True, slots=True)
class Scan:
    """One Triton kernel of Mamba-2's chunked scan (mamba_ssm.ops.triton, Dao & Gu 2024, the SSD
    algorithm: `kernel` names it, as cost() lists them) over `batch` sequences of `seqlen`
    tokens, `heads` heads of `head_dim` values, a state of `state` per head, B and C shared by
    the heads of each of `groups` groups, chunks of `chunk` tokens (decode: one token, a state
    update per sequence). Its cost counts what the kernel reads and writes once (states kept in
    fp32 between kernels, `dtype` for x, B, C and the output; `state_dtype` for decode's state)
    and the products it runs: the intra-chunk ones over whole chunks where the kernel's blocks
    span the chunk (the output, and dA's gradient), over half where they skip the masked
    triangle. C·Bᵀ is one fp32 matrix per group, but the kernels that weigh x or dout by it
    (the output, x's gradient, dA's gradient) run one program per head and each loads its
    group's matrix again: heads/groups times over (mamba_ssm 2.3's _chunk_scan_fwd_kernel,
    _chunk_scan_chunk_state_bwd_dx_kernel, _chunk_scan_bwd_ddAcs_stable_kernel), the row
    blocks up to and over the diagonal, once per block of the head dimension (blocks of
    SCAN_BLOCK, the autotuner's usual pick on an H100)."""

    name: str
    kernel: str
    batch: int
    seqlen: int
    heads: int
    head_dim: int
    state: int
    groups: int
    chunk: int
    dtype: DType = "bf16"
    state_dtype: DType = "bf16"
    kind: ClassVar[OpKind] = "scan"

    def cost(self) -> Cost:
        b, L, H, P, N, G, Q = (self.batch, self.seqlen, self.heads, self.head_dim, self.state,
                               self.groups, self.chunk)  # fmt: skip
        e = BYTES[self.dtype]
        if self.kernel == "state_update":  # read and write each state; x, B, C, z, the output
            n = b * H * P * N
            return Cost(
                5.0 * n,
                float(n * BYTES[self.state_dtype] + b * (3 * H * P + 2 * G * N) * e),
                float(n * BYTES[self.state_dtype] + b * H * P * e),
            )
        chunks = -(-L // Q)
        S = 4.0 * b * chunks * H * P * N  # the chunks' states, fp32 bytes
        X, BC, dt = e * b * L * H * P, e * b * L * G * N, 4.0 * b * L * H  # x, B (or C), fp32 dt
        CB = 4.0 * b * chunks * G * Q * Q  # C·Bᵀ within each chunk, fp32
        # what each head's program loads of it: the row blocks up to and over the diagonal
        # (64-row blocks: (1 + 64/Q)/2 of it) for every 64-wide block of the head dimension
        CBh = CB * H / G * (1 + SCAN_BLOCK / Q) / 2 * -(-P // SCAN_BLOCK)
        xn, xq, bq = 2.0 * b * L * H * P * N, 1.0 * b * L * H * P * Q, 2.0 * b * L * G * N * Q
        flops, read, written = {
            "cumsum": (0.0, dt / 2, 2 * dt),
            "chunk_state": (xn, X + BC + 2 * dt, S),
            "state_passing": (S / 2, S, S / 2),
            "bmm": (bq, 2 * BC, CB),
            "chunk_scan": (2 * xq + xn, CBh + X + S / 2 + BC + 2 * dt, X),
            "dstates": (xn, X + BC + 2 * dt, S),
            "state_passing_bwd": (S / 2, 1.5 * S, S),
            "dx": (2 * xq + xn, CBh + 2 * X + S + BC + 2 * dt, X + dt),
            "db": (xn, X + S + 2 * dt, 2 * BC),
            "dc": (xn, X + S / 2 + 2 * dt, 2 * BC),
            "dcb": (xq, 2 * X + 2 * dt, CB),
            "bmm_bwd": (bq, CB + 2 * BC, 2 * BC),
            "ddacs": (2 * xq, 2 * X + CBh + 2 * dt, dt),
            "cumsum_bwd": (0.0, 3 * dt, dt),
        }[self.kernel]
        return Cost(flops, read, written)

    @property
    def shape(self) -> str:
        return (f"{self.kernel} b{self.batch} L{self.seqlen} h{self.heads}×{self.head_dim} "
                f"n{self.state} g{self.groups}")  # fmt: skip


Op = (
    Gemm
    | GroupedGemm
    | Attention
    | Elementwise
    | Reduce
    | Norm
    | Embedding
    | Copy
    | Collective
    | P2P
    | Scan
)
