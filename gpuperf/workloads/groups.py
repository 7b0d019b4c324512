"""Which GPUs talk to which: the communicator groups of one GPU in a parallel plan.

Rank order, Megatron-LM's (Narayanan et al. SC21 §3): tp innermost (a TP group sits in one node),
then cp, then dp, then pp. EP groups are carved out of consecutive DP ranks. The dense gradients
are reduced over dp·cp ranks (context-parallel ranks hold the same weights), the expert gradients
over the dp·cp/ep ranks that hold the same experts.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from gpuperf.workloads.hashed import field_hash
from gpuperf.workloads.scenario import Scenario

# One server's GPUs: a plan or collective without a system runs in one node on the GPU's own links.
MAX_GPUS_WITHOUT_SYSTEM = 8


def group_nodes(size: int, stride: int, gpus_per_node: int) -> int:
    """Nodes spanned by a group of `size` ranks `stride` apart (ranks fill nodes in order).
    NCCL needs the same number of ranks on every node: rounded up to a divisor of `size`."""
    if size <= 1 or size * stride <= gpus_per_node:
        return 1
    per_node = max(1, gpus_per_node // stride)
    nodes = math.ceil(size / per_node)
    while size % nodes:
        nodes += 1
    return nodes


@dataclass(frozen=True, slots=True)
class Groups:
    """Ranks and nodes of each group one GPU belongs to, and how TP runs."""

    tp: int = 1
    tp_nodes: int = 1
    cp: int = 1
    cp_nodes: int = 1
    ep: int = 1
    ep_nodes: int = 1
    dp: int = 1  # dense-gradient group: dp·cp ranks
    dp_nodes: int = 1
    edp: int = 1  # expert-gradient group: dp·cp/ep ranks
    edp_nodes: int = 1
    etp: int = 0  # expert tensor parallelism: 0 (= tp), or 1 under MoE parallel folding
    pp_inter_node: bool = False
    sp: bool = False
    tp_impl: str = "megatron"
    tp_overlap: bool = False

    def __hash__(self) -> int:  # the engine's caches hash it per plan: once per object
        return field_hash(self)


SINGLE = Groups()


def groups_for(sc: Scenario, gpus_per_node: int | None) -> Groups:
    """The groups of `sc` on nodes of `gpus_per_node` GPUs (None: all in one node)."""
    if not sc.parallel and not sc.sequence_parallel:
        return SINGLE
    return _groups(sc.tp, sc.cp, sc.dp, sc.ep, sc.pp, gpus_per_node or sc.gpus,
                   bool(sc.sequence_parallel), sc.tp_impl, sc.tp_overlap, sc.expert_tp)  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _groups(tp: int, cp: int, dp: int, ep: int, pp: int, gpn: int, sp: bool, tp_impl: str,
            tp_overlap: bool, etp: int | None = None) -> Groups:  # fmt: skip
    """groups_for's Groups, one object per distinct plan shape (caches keyed on it compare by
    identity)."""
    gpus = tp * pp * dp * cp
    if etp is not None and etp != tp:  # MoE parallel folding (Megatron-Core): the experts'
        # own rank order over the tp·cp·dp ranks, etp innermost, then ep, then expert-dp
        edp = tp * cp * dp // (ep * etp)
        ep_nodes, edp_nodes = group_nodes(ep, etp, gpn), group_nodes(edp, ep * etp, gpn)
    else:  # EP out of consecutive DP ranks; the expert-dp group: every cp rank (stride tp) of
        # every dp/ep-th dp rank
        edp = dp * cp // ep
        ep_nodes = group_nodes(ep, tp * cp, gpn)
        edp_nodes = group_nodes(cp, tp, gpn) * group_nodes(dp // ep, tp * cp * ep, gpn)
        etp = 0  # as tp
    return Groups(
        tp=tp,
        tp_nodes=group_nodes(tp, 1, gpn),
        cp=cp,
        cp_nodes=group_nodes(cp, tp, gpn),
        ep=ep,
        ep_nodes=ep_nodes,
        dp=dp * cp,
        dp_nodes=group_nodes(dp * cp, tp, gpn),
        edp=edp,
        edp_nodes=edp_nodes,
        etp=etp,
        pp_inter_node=pp > 1 and gpus > gpn,
        sp=sp,
        tp_impl=tp_impl,
        tp_overlap=tp_overlap,
    )
