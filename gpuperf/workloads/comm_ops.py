"""The collectives a parallel layer issues, as Ops next to its kernels.

Tensor parallelism (Megatron-LM, Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2): a
column-parallel GEMM (qkv, gate/up) takes a replicated input, a row-parallel GEMM (out, down)
gives partial sums. Without sequence parallelism the partial sums are all-reduced in the forward
("g"), and the input gradient of each column-parallel GEMM is all-reduced in the backward ("f").
With sequence parallelism the norms and residuals hold T/tp rows: an all-gather before each
column-parallel GEMM and a reduce-scatter after each row-parallel one, mirrored in the backward.
Megatron overlaps the backward "f" all-reduce with the weight-gradient GEMM, and under sequence
parallelism the re-gather of the input with the data-gradient GEMM (the `hide` names below).

Sizes follow nccl-tests' size column (Collective.nbytes): the per-rank buffer for all-reduce, the
whole gathered tensor for all-gather and reduce-scatter: T·hidden·bytes either way.
"""

from __future__ import annotations

from dataclasses import replace

from gpuperf.dtypes import BYTES
from gpuperf.perfmodel.ops import P2P, Collective, Op

# Hidden-under relations inside a layer template: comm op name -> names of the ops it overlaps.
Hide = dict[str, tuple[str, ...]]


def _coll(name: str, coll: str, nbytes: int, ranks: int, nodes: int, dtype: str) -> Collective:
    return Collective(name, coll, max(1, int(nbytes)), ranks, dtype, nodes)  # type: ignore[arg-type]


def activation_bytes(d) -> int:  # noqa: ANN001 (Dims; imported lazily to avoid a cycle)
    return d.T * d.hidden * BYTES[d.act]


def row_out(d, name: str) -> list[Op]:  # noqa: ANN001
    """After a row-parallel GEMM `name`: all-reduce the partial sums (SP: reduce-scatter)."""
    g = d.g
    if g.tp == 1:
        return []
    coll = "reducescatter" if g.sp else "allreduce"
    return [_coll(f"{name}.{coll}", coll, activation_bytes(d), g.tp, g.tp_nodes, d.act)]


def col_in(d, name: str) -> list[Op]:  # noqa: ANN001
    """Before a column-parallel GEMM `name`: gather the sequence shards (SP only)."""
    g = d.g
    if g.tp == 1 or not g.sp:
        return []
    return [_coll(f"{name}.allgather", "allgather", activation_bytes(d), g.tp, g.tp_nodes, d.act)]


def row_out_backward(d, name: str) -> list[Op]:  # noqa: ANN001
    """Backward of row_out: the output gradient is replicated already (SP: all-gather it)."""
    g = d.g
    if g.tp == 1 or not g.sp:
        return []
    return [_coll(f"{name}.bwd_allgather", "allgather", activation_bytes(d), g.tp, g.tp_nodes,
                  d.act)]  # fmt: skip


def col_in_backward(d, dgrad: Op, wgrad: Op) -> tuple[list[Op], Hide]:  # noqa: ANN001
    """Backward of a column-parallel GEMM: [dgrad, wgrad] with its collectives, and what hides
    them (Megatron's async all-reduce under the wgrad; SP: re-gather under dgrad, reduce-scatter
    under wgrad). DTensor overlaps nothing."""
    g = d.g
    if g.tp == 1:
        return [dgrad, wgrad], {}
    base = dgrad.name.removesuffix(".dgrad")
    nbytes = activation_bytes(d)
    if g.sp:
        ag = _coll(f"{base}.bwd_regather", "allgather", nbytes, g.tp, g.tp_nodes, d.act)
        rs = _coll(f"{base}.bwd_reducescatter", "reducescatter", nbytes, g.tp, g.tp_nodes, d.act)
        return [ag, dgrad, rs, wgrad], {ag.name: (dgrad.name,), rs.name: (wgrad.name,)}
    ar = _coll(f"{base}.bwd_allreduce", "allreduce", nbytes, g.tp, g.tp_nodes, d.act)
    hide = {ar.name: (wgrad.name,)} if g.tp_impl == "megatron" else {}
    return [dgrad, ar, wgrad], hide


def expert_alltoall(d, name: str, slots: int) -> list[Op]:  # noqa: ANN001
    """MoE dispatch or combine: every rank sends its routed token copies to the experts' ranks."""
    g = d.g
    if g.ep == 1:
        return []
    nbytes = slots * d.hidden * BYTES[d.act]
    return [_coll(f"{name}.alltoall", "alltoall", nbytes, g.ep, g.ep_nodes, d.act)]


def token_dispatch(d, name: str, tokens_gpus: int, tokens_nodes: int) -> list[Op]:  # noqa: ANN001
    """MoE dispatch or combine as DeepEP and HybridEP run it: this rank's tokens once per GPU
    they go to (`tokens_gpus` rows) and, across nodes, once per node (`tokens_nodes`)."""
    g, row = d.g, d.hidden * BYTES[d.act]
    op = _coll(f"{name}.alltoall", "alltoall", tokens_gpus * row, g.ep, g.ep_nodes, d.act)
    return [replace(op, net_bytes=int(tokens_nodes * row))]


def ring_kv(d, step: int, backward: bool = False) -> P2P:  # noqa: ANN001
    """One step of ring attention: this rank's K and V chunk (and their gradients in backward)
    passed to the next rank of the context-parallel group."""
    chunk = d.batch * d.kv_heads * d.q_len * d.head_dim * BYTES[d.kv]
    nbytes = 2 * chunk * (2 if backward else 1)
    suffix = ".bwd" if backward else ""
    return P2P(f"attn/ring{step}.p2p{suffix}", nbytes, d.kv, d.g.cp_nodes > 1)


def overlap_hide(ops: list[Op] | tuple[Op, ...]) -> Hide:
    """Megatron's TP communication overlap (Transformer Engine's userbuffers, --tp-overlap): each
    tensor-parallel collective is split into chunks pipelined with the GEMM it feeds or drains:
    the gather before a column-parallel GEMM hides under it, the reduce after a row-parallel GEMM
    under that one. Only the collectives next to their GEMM are paired."""
    hide: Hide = {}
    for i, op in enumerate(ops):
        if not isinstance(op, Collective) or op.coll == "alltoall":
            continue
        # a recomputed collective (name.recompute) pairs with its recomputed GEMM
        name, redo = op.name.removesuffix(".recompute"), op.name.endswith(".recompute")
        base = name.rsplit(".", 1)[0]
        under = (base + ".recompute",) if redo else (base, base + ".dgrad", base + ".wgrad")
        for j in (i + 1, i - 1):
            if 0 <= j < len(ops) and ops[j].name in under:
                hide[op.name] = (ops[j].name,)
                break
    return hide
