"""Single ops from the command-line grammar shared by `predict` and `measure`.

gemm M [N K] [--dtype]                      elementwise add|mul|gelu|silu|relu --numel N
attention --batch --heads --kv-heads --seq --kv-len --head-dim [--causal]
norm rmsnorm|layernorm|softmax --rows --cols  copy --bytes N
allreduce|allgather|reducescatter|alltoall|broadcast --bytes N --nproc P
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuperf.dtypes import DType
from gpuperf.errors import InputError
from gpuperf.perfmodel.ops import (
    Attention,
    Collective,
    CollectiveKind,
    Copy,
    Elementwise,
    Gemm,
    Norm,
    gemm_scales,
)
from gpuperf.workloads.groups import MAX_GPUS_WITHOUT_SYSTEM

if TYPE_CHECKING:
    from gpuperf.hardware.spec import SystemSpec

# fn -> (inputs, FLOP per element). gelu (tanh form) and silu cost a handful of FLOPs each.
ELEMENTWISE_FNS: dict[str, tuple[int, float]] = {
    "add": (2, 1.0),
    "mul": (2, 1.0),
    "relu": (1, 1.0),
    "silu": (1, 4.0),
    "gelu": (1, 8.0),
}
NORM_FNS = ("rmsnorm", "layernorm", "softmax")
COLLECTIVES: tuple[CollectiveKind, ...] = (
    "allreduce",
    "allgather",
    "reducescatter",
    "alltoall",
    "broadcast",
)


def gemm(m: int, n: int | None = None, k: int | None = None, dtype: DType = "bf16",
         wdtype: DType | None = None, scales: str = "") -> Gemm:  # fmt: skip
    """`gemm M` is square; `gemm M N K` multiplies [M, K] by [K, N]. `wdtype`: weight-only
    int4/int8 weights with `dtype` activations; `scales`: fp8 "tensor" or "row"."""
    n = m if n is None else n
    k = m if k is None else k
    if wdtype is not None and (wdtype not in ("int4", "int8") or dtype not in ("bf16", "fp16")):
        raise InputError(f"weight-only GEMMs take int4 or int8 weights and bf16/fp16 inputs, "
                         f"got weights {wdtype} with {dtype}")  # fmt: skip
    if scales and (dtype != "fp8" or scales not in ("tensor", "row")):
        raise InputError(
            f"scales 'tensor' or 'row' apply to fp8 GEMMs, got {scales!r} with {dtype}"
        )
    scales = gemm_scales(dtype, wdtype, scales)
    return Gemm(name=f"gemm/{m}x{n}x{k}", m=m, n=n, k=k, dtype=dtype, wdtype=wdtype, scales=scales)


# A head wider than this is a typo: published models' widest are 256 (Gemma 2, MLA's 192 + 64)
# and FlashAttention's kernels stop there; 1024 leaves room for experiments.
MAX_HEAD_DIM = 1024


def attention(
    *,
    batch: int,
    heads: int,
    seq: int,
    head_dim: int = 128,
    kv_heads: int | None = None,
    kv_len: int | None = None,
    causal: bool = False,
    dtype: DType = "bf16",
) -> Attention:
    """Prefill attention (q_len = seq); with --kv-len it is `seq` queries against kv_len keys."""
    if head_dim > MAX_HEAD_DIM:
        raise InputError(f"head-dim must be at most {MAX_HEAD_DIM} (the widest heads of "
                         f"published models are 256), got {head_dim:,}")  # fmt: skip
    kv_heads = heads if kv_heads is None else kv_heads
    if heads % kv_heads:
        raise InputError(f"heads ({heads}) must be a multiple of kv-heads ({kv_heads})")
    kv_len = seq if kv_len is None else kv_len
    if kv_len < seq:
        raise InputError(f"kv-len ({kv_len}) must be at least seq ({seq})")
    return Attention(
        name=f"attention/b{batch}h{heads}q{seq}kv{kv_len}",
        batch=batch,
        heads=heads,
        kv_heads=kv_heads,
        q_len=seq,
        kv_len=kv_len,
        head_dim=head_dim,
        causal=causal,
        dtype=dtype,
    )


def elementwise(fn: str, numel: int, dtype: DType = "bf16") -> Elementwise:
    if not isinstance(fn, str) or fn not in ELEMENTWISE_FNS:
        raise InputError(
            f"unknown elementwise fn {fn!r}; expected one of: {', '.join(ELEMENTWISE_FNS)}"
        )
    n_in, flops = ELEMENTWISE_FNS[fn]
    return Elementwise(
        name=f"elementwise/{fn}", fn=fn, numel=numel, n_in=n_in, dtype=dtype, flops_per_elem=flops
    )


def norm(fn: str, rows: int, cols: int, dtype: DType = "bf16") -> Norm:
    if fn not in NORM_FNS:
        raise InputError(f"unknown norm fn {fn!r}; expected one of: {', '.join(NORM_FNS)}")
    return Norm(name=f"{fn}/{rows}x{cols}", fn=fn, rows=rows, cols=cols, dtype=dtype)  # type: ignore[arg-type]


def copy(nbytes: int) -> Copy:
    return Copy(name=f"copy/{nbytes}", nbytes=nbytes)


def collective(coll: str, nbytes: int, ranks: int, dtype: DType = "bf16") -> Collective:
    if coll not in COLLECTIVES:
        raise InputError(f"unknown collective {coll!r}; expected one of: {', '.join(COLLECTIVES)}")
    if ranks < 2:
        raise InputError(f"{coll} needs at least 2 ranks, got {ranks}")
    return Collective(name=f"{coll}/{nbytes}", coll=coll, nbytes=nbytes, ranks=ranks, dtype=dtype)  # type: ignore[arg-type]


def group(system: SystemSpec | None, nodes: int | None, ranks: int | None) -> tuple[int, int]:
    """(ranks, nodes) of a collective's group: on a bare GPU (no system) every rank is in one
    server's NVLink domain (8 by default, at most 8, as for a model's plan); on a system,
    `ranks` fill nodes of gpus_per_node (a group that spans nodes takes whole nodes) or `nodes`
    whole nodes. The CLI's --nproc/--nodes and the API's ranks/nodes both come here."""
    if system is None:
        if nodes not in (None, 1):
            raise InputError("more than one node needs a system (the network between nodes)")
        if (ranks or 8) > MAX_GPUS_WITHOUT_SYSTEM:  # as for a model's plan (step.plan.place)
            raise InputError(
                f"{ranks} ranks: beyond {MAX_GPUS_WITHOUT_SYSTEM} (one server's NVLink domain) "
                "give a system (e.g. dgx-h100, or gb200-nvl72 for 72 GPUs on NVLink) and nodes"
            )
        return ranks or 8, 1
    gpn = system.gpus_per_node
    if ranks is not None and nodes is not None and ranks != nodes * gpn:
        raise InputError(f"{ranks} ranks disagrees with {nodes} nodes × {gpn} GPUs per node")
    if ranks is not None:
        if ranks > gpn and ranks % gpn:
            raise InputError(f"{ranks} ranks span nodes but are not a multiple of {gpn}")
        return ranks, max(1, -(-ranks // gpn))
    n = nodes or 1
    return n * gpn, n
