"""A Mamba-2 mixer's kernels (Dao & Gu 2024), as Megatron-Core's MambaMixer runs them in training
(mamba_split_conv1d_scan_combined, its memory-efficient path) and vLLM's in serving.

Forward: the block's norm (fused with the residual add), in_proj to z, x, B, C and dt (one GEMM),
the causal depthwise convolution over x, B and C with its SiLU (causal_conv1d), the chunked scan's
five Triton kernels (cumulative decay, each chunk's state, the states passed along the chunks,
C·Bᵀ per chunk, the output), the gated RMSNorm (rmsnorm(y) · silu(z), per group) and out_proj.
A decode step runs the convolution's update and one state update per sequence instead of the
convolution and the scan.

Backward (training): the convolution and the scan's first four kernels run again (the forward
saved only in_proj's output and the scan's), then the scan's backward kernels, the partial sums
PyTorch reduces for dB, dC and d(C·Bᵀ), the decay gradients' small kernels, the gated norm's and
the convolution's backward; the GEMMs' are those of any GEMM.

Under tensor parallelism each rank holds heads / tp of the heads and groups / tp of the groups
(in_proj column-parallel, out_proj row-parallel), as Megatron-Core splits them.
"""

from __future__ import annotations

from gpuperf.dtypes import DType
from gpuperf.perfmodel.ops import Op, Reduce, Scan
from gpuperf.workloads import comm_ops
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.transformer_layers import Dims, _ew, _gemm

FORWARD = ("cumsum", "chunk_state", "state_passing", "bmm", "chunk_scan")
BACKWARD = ("dstates", "state_passing_bwd", "dx", "db", "dc", "dcb", "bmm_bwd", "bmm_bwd",
            "ddacs", "cumsum_bwd")  # fmt: skip


# One GPU's share of a Mamba-2 layer's scan, in Scan's order: (batch, seqlen, heads, head_dim,
# state, groups, chunk).
ScanShape = tuple[int, int, int, int, int, int, int]


def scan_shape(cfg: ModelConfig, d: Dims) -> ScanShape:
    tp = d.g.tp
    seq = 1 if d.decode else d.q_len
    return (d.batch, seq, cfg.mamba_heads // tp, cfg.mamba_head_dim, cfg.ssm_state_size,
            cfg.mamba_groups // tp, cfg.ssm_chunk)  # fmt: skip


def scan_forward(s: ScanShape, a: DType, prefix: str = "mamba/scan") -> list[Op]:
    """The chunked scan's five forward kernels."""
    return [Scan(f"{prefix}.{k}", k, *s, a) for k in FORWARD]


def scan_backward(s: ScanShape, a: DType, prefix: str = "mamba/scan") -> list[Op]:
    """The scan's backward: the forward's first four kernels again, its own kernels, PyTorch's
    sums of the fp32 partial dB, dC and d(C·Bᵀ), and the decay gradients' flips, cumulative sums,
    adds and reductions over (batch, heads, tokens)."""
    b, L, H, _, N, G, Q = s
    ops: list[Op] = [Scan(f"{prefix}.{k}.recompute", k, *s, a) for k in FORWARD[:4]]
    ops += [Scan(f"{prefix}.{k}.bwd", k, *s, a) for k in BACKWARD]
    for part, n in (("db", N), ("dc", N), ("dcb", Q)):
        ops.append(Reduce(f"{prefix}.{part}_sum", "sum", b * L * G * n, 1, 1, "fp32"))
    n = b * L * H
    steps = (("flip", "copy", 1), ("cumsum", "cumsum", 1), ("flip_back", "copy", 1),
             ("add", "add", 2), ("add_next", "add", 2))  # fmt: skip
    ops += [_ew(f"{prefix}.dda_{step}", fn, n, "fp32", n_in=k) for step, fn, k in steps]
    ops.append(Reduce(f"{prefix}.dd_sum", "sum", b * H, L, 1, "fp32"))
    return ops


def gated_norm(n: int, a: DType, name: str = "mamba/gated_norm") -> Op:
    """rmsnorm(y) · silu(z) over `n` values in groups (layernorm_gated's Triton kernel): reads y
    and z, writes the product."""
    return _ew(name, "gated_rmsnorm", n, a, n_in=2, flops=8.0)


def mamba_mixer(cfg: ModelConfig, d: Dims) -> list[Op]:
    """The mixer's forward after its norm (module docstring), one GPU's share."""
    s = scan_shape(cfg, d)
    T, h, a = d.T, d.hidden, d.act
    _, _, heads, head_dim, state, groups, _ = s
    di = heads * head_dim
    conv = di + 2 * groups * state
    ops: list[Op] = comm_ops.col_in(d, "mamba/in_proj")
    _gemm(ops, d, "mamba/in_proj", T, di + conv + heads, h)
    k = cfg.conv_kernel
    if d.decode:  # causal_conv1d_update: the window shifts by one token, then the dot and SiLU
        ops.append(_ew("mamba/conv1d_update", "conv1d", d.batch * conv * k, a, n_in=2,
                       flops=2.0))  # fmt: skip
        ops.append(Scan("mamba/state_update", "state_update", *s, a, d.kv))
    else:
        ops.append(_ew("mamba/conv1d", "conv1d_silu", T * conv, a, flops=2.0 * k + 4.0))
        ops += scan_forward(s, a)
    ops.append(gated_norm(T * di, a))
    _gemm(ops, d, "mamba/out_proj", T, h, di)
    ops += comm_ops.row_out(d, "mamba/out_proj")
    return ops


def scan_backward_of(op: Scan) -> list[Op]:
    """The backward of a forward scan (given its last kernel): the convolution first runs again
    (the memory-efficient path saved its input, not its output), then the scan's backward."""
    s = (op.batch, op.seqlen, op.heads, op.head_dim, op.state, op.groups, op.chunk)
    conv = op.batch * op.seqlen * (op.heads * op.head_dim + 2 * op.groups * op.state)
    prefix = op.name.rsplit(".", 1)[0]
    block = prefix.rsplit("/", 1)[0]
    recompute = _ew(f"{block}/conv1d.recompute", "conv1d_silu", conv, op.dtype, flops=12.0)
    return [recompute, *scan_backward(s, op.dtype, prefix)]
