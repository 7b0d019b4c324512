"""The work one GPU does in one step, as runs of kernels (Parts), for one GPU or a parallel plan.

A Part is a layer's kernels repeated for each of its layers (names "L{i}/..."), or kernels that
run once. A stage's micro-batch is its forward Parts (and backward Parts in training); the step
is every stage's micro-batches, the data-parallel gradient synchronisation and the optimizer.
The step engine (gpuperf.step) costs each distinct kernel once and adds the repeats up in closed
form, so an 80-layer model with 256 micro-batches costs no more than one layer.

`hide` names, within a Part, the kernels a communication op overlaps (ring attention's transfer
under the attention before it, Megatron's backward all-reduce under the weight-gradient GEMM,
FSDP's all-gather of the next layer under this one: "*" means every compute kernel of the Part).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from gpuperf.dtypes import BYTES
from gpuperf.perfmodel.ops import P2P, Collective, Copy, Elementwise, Op
from gpuperf.workloads import comm_ops
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.dp_ops import grad_bytes, grad_wire_dtype
from gpuperf.workloads.groups import SINGLE, Groups
from gpuperf.workloads.layer_kinds import LayerKind, kind_runs
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.shard import Params, Stage, stage_params
from gpuperf.workloads.transformer_layers import (
    DENSE,
    Dims,
    eager_layer,
    fused_layer,
    make_dims,
    ring_hide,
)

ALL = "*"  # hide under every compute kernel of the Part
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Part:
    """`ops` run `repeat` times back to back. With `layer0`, repeat i is layer layer0 + i (or
    layer0 - i when descending) and its ops are named "L{layer}/" + name."""

    ops: tuple[Op, ...]
    repeat: int = 1
    layer0: int | None = None
    descending: bool = False
    hide: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (comm op, the ops it hides under)
    # (offset, core ops, core hide): ops[offset:offset + len(core ops)] is an interned run that
    # other Parts share (a layer), which the step engine costs once and composes with the rest
    # (FSDP's per-layer collectives around it); hide is the core's hide, then the rest's.
    core: tuple[int, tuple[Op, ...], tuple[tuple[str, tuple[str, ...]], ...]] | None = None

    def layer(self, i: int) -> int | None:
        if self.layer0 is None:
            return None
        return self.layer0 - i if self.descending else self.layer0 + i


@dataclass(frozen=True, slots=True)
class StageWork:
    """One micro-batch on one GPU of a pipeline stage."""

    stage: Stage
    fwd: tuple[Part, ...]
    bwd: tuple[Part, ...]
    params: Params
    boundary: Part | None  # activation sent to the next stage per micro-batch (same size back)


@dataclass(frozen=True, slots=True)
class StepWork:
    """Everything one step of `sc` runs on the GPUs of one data-parallel replica."""

    stages: tuple[StageWork, ...]
    microbatches: int
    sync: tuple[Part, ...]  # gradient all-reduce / reduce-scatter (hidden under the backward)
    sync_kernels: tuple[Part, ...]  # DDP's bucket copies, on the compute stream
    optimizer: tuple[Part, ...]
    post: tuple[Part, ...]  # ZeRO-1/2: parameter all-gather after the step
    groups: Groups
    dims: Dims


_INTERNED: dict[tuple[Op, ...], tuple[Op, ...]] = {}
_BY_ID: dict[int, tuple[Op, ...]] = {}  # id of an interned tuple -> it (no hashing of ops)


def _intern(ops: tuple[Op, ...] | list[Op]) -> tuple[Op, ...]:
    """The one tuple equal to `ops` (an interned tuple passed again is found by identity)."""
    if type(ops) is tuple and _BY_ID.get(id(ops)) is ops:
        return ops
    if len(_INTERNED) > 65536:
        _INTERNED.clear()
        _BY_ID.clear()
    t = tuple(ops)
    t = _INTERNED.setdefault(t, t)
    _BY_ID[id(t)] = t
    return t


# Parts made once: the step engine costs a Part once per object, and the stages of many plans
# hold the same prologue, head and runs of layers. key -> (the object whose id it holds, Part)
_PARTS: dict[tuple, tuple[object, Part]] = {}


def _memo(store: dict, key: object, anchor: object, make: Callable[[], T],
          limit: int = 65536) -> T:  # fmt: skip
    """`make()` once per `key` of `store`; `anchor` is the object whose id the key holds, kept
    beside the value so that a reused id is never mistaken for it."""
    hit = store.get(key)
    if hit is None or hit[0] is not anchor:
        if len(store) > limit:
            store.clear()
        hit = store[key] = (anchor, make())
    return hit[1]


def _part(
    ops: tuple[Op, ...] | list[Op],
    hide: Mapping[str, tuple[str, ...]] | None = None,
    repeat: int = 1,
    layer0: int | None = None,
    descending: bool = False,
) -> Part:
    """A Part whose ops tuple is shared with every equal one (the step engine keys its cost
    caches on the tuple's identity), itself shared with every equal Part."""
    t, h = _intern(ops), tuple((hide or {}).items())
    return _memo(_PARTS, (id(t), h, repeat, layer0, descending), t,
                 lambda: Part(t, repeat, layer0, descending, h))  # fmt: skip


def _around(
    pre: tuple[Op, ...],
    core: tuple[Op, ...],
    core_hide: dict,
    post: tuple[Op, ...],
    outer_hide: dict,
    repeat: int = 1,
    layer0: int | None = None,
    descending: bool = False,
) -> Part:
    """A Part of `core` (an interned layer) with `pre` and `post` around it (the step engine
    costs the core once for every plan and composes the rest), one object per distinct one."""
    hide = tuple({**core_hide, **outer_hide}.items())
    core_items = tuple(core_hide.items())
    key = ("around", pre, id(core), core_items, post, hide, repeat, layer0, descending)

    def make() -> Part:
        ops = (*pre, *core, *post)
        return Part(ops, repeat, layer0, descending, hide, (len(pre), core, core_items))

    return _memo(_PARTS, key, core, make)


def build(cfg: ModelConfig, sc: Scenario, g: Groups = SINGLE) -> StepWork:
    """The step of `sc` (prefill, decode or train; not generate) on GPUs of groups `g`. Stages,
    templates and Parts are memoized: plans that share a stage's work share its objects (the
    step engine keys its costs on their identity)."""
    from gpuperf.errors import InputError

    if sc.mode == "generate":
        raise InputError("generate is prefill + decode steps; build the two scenarios separately")
    d = make_dims(cfg, sc, g)
    # What of the groups a stage's kernels see beyond d (d.g drops the data-parallel ranks).
    fsdp = None
    if sc.zero == 3:
        gb = grad_bytes(d.act, sc.pytorch, sc.grad_dtype)
        fsdp = (g.dp, g.dp_nodes, g.edp, g.edp_nodes, gb)
    link = (g.tp, g.tp_nodes, g.pp_inter_node, g.sp)
    out = _stages(cfg, d, sc.pytorch, sc.mode, sc.recompute_plan, sc.pp, fsdp, link)
    sync, kernels, opt, post = ((), (), (), ())
    if sc.mode == "train":
        from gpuperf.workloads.dp_ops import bucket_kernels, optimizer_parts, sync_parts

        busiest = max(out, key=lambda s: s.params.total).params
        sync, post = sync_parts(cfg, sc, g, busiest)
        kernels = bucket_kernels(sc, busiest)
        opt = optimizer_parts(cfg, sc, d, g, busiest)
    return StepWork(out, sc.microbatches, sync, kernels, opt, post, g, d)


@functools.lru_cache(maxsize=8192)
def _stages(cfg: ModelConfig, d: Dims, eager: bool, mode: str, recompute: str, pp: int,
            fsdp: tuple[int, int, int, int, int] | None,
            link: tuple[int, int, bool, bool]) -> tuple[StageWork, ...]:  # fmt: skip
    """Every distinct pipeline stage's micro-batch; fsdp: (dp ranks, dp nodes, expert-dp ranks,
    expert-dp nodes, gradient bytes) under ZeRO-3; link: (tp, tp nodes, pp crosses nodes, sp)."""
    out = []
    for st, params in stage_params(cfg, pp, d.g.tp, d.g.ep, d.g.etp, d.g.tp_impl):
        shard = (params, *fsdp) if fsdp is not None else None
        fwd, bwd = _stage_parts(cfg, d, eager, mode, recompute, st, shard)
        boundary = None
        if pp > 1 and not st.has_head:
            boundary = _boundary(d.T * d.hidden * BYTES[d.act], d.act, *link)
        out.append(StageWork(st, fwd, bwd, params, boundary))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _boundary(nbytes: int, act: str, tp: int, tp_nodes: int, inter_node: bool, sp: bool) -> Part:
    """A stage's activation to the next stage (and its gradient back): with TP, Megatron's
    scatter/gather (Narayanan et al. SC21 §4.1) sends 1/tp from each rank and all-gathers it on
    the other side over NVLink; under sequence parallelism the activation is split over the
    sequence already and each rank sends its own part (no gather)."""
    ops: list[Op] = [P2P("pp/send", max(1, nbytes // tp), act, inter_node)]  # type: ignore[arg-type]
    if tp > 1 and not sp:
        ops.append(Collective("pp/allgather", "allgather", nbytes, tp, act, tp_nodes))  # type: ignore[arg-type]
    return _part(ops)


@functools.lru_cache(maxsize=256)
def _layer_templates(cfg: ModelConfig, d: Dims, eager: bool, train: bool, recompute: str,
                     kind: LayerKind = DENSE) -> tuple:  # fmt: skip
    """(forward ops, backward ops, forward hides, backward hides) of one layer of `kind`, the
    op lists interned. eager: PyTorch's framework; its layers' kernels are the eager modules'
    unless they are compiled (d.compiled: the fused layer's kernels)."""
    eager = eager and not d.compiled
    layer = eager_layer(cfg, d, kind) if eager else fused_layer(cfg, d, kind)
    linears: list = []
    if d.compiled and BYTES[d.gemm] == 1:  # torchao's float8 Linears: their own scaling
        from gpuperf.workloads.float8_torchao import forward_scaling
        from gpuperf.workloads.transformer_train import eager_layer_gemms

        linears = eager_layer_gemms(cfg, d)
        kept = [op for op in layer if not (isinstance(op, Elementwise) and op.fn == "quant")]
        layer = kept + forward_scaling(linears, d.act)  # (the first op stays the norm)
    layer_bwd: list[Op] = []
    bwd_hide: dict[str, tuple[str, ...]] = {}
    if train:
        from gpuperf.workloads.transformer_train import layer_backward

        layer_bwd, bwd_hide = layer_backward(cfg, d, eager, layer, recompute)
        if linears:
            from gpuperf.workloads.float8_torchao import backward_scaling

            layer_bwd += backward_scaling(linears, d.act)
    fwd_hide = ring_hide(d, eager=eager)
    if d.g.tp_overlap:
        fwd_hide.update(comm_ops.overlap_hide(layer))
        bwd_hide = {**comm_ops.overlap_hide(layer_bwd), **bwd_hide}
    return _intern(layer), _intern(layer_bwd), fwd_hide, bwd_hide


@functools.lru_cache(maxsize=256)
def _ends(cfg: ModelConfig, d: Dims, eager: bool, mode: str) -> tuple[tuple[Op, ...], ...]:
    """(prologue, epilogue with the loss in training, head backward, embedding backward)."""
    from gpuperf.workloads.transformer import epilogue, prologue

    post = epilogue(cfg, d, eager, mode)
    head_bwd: list[Op] = []
    tail_bwd: list[Op] = []
    if mode == "train":
        from gpuperf.workloads.transformer_train import head_backward, loss_ops, tail_backward

        post += loss_ops(cfg, d, eager)[0]
        head_bwd, tail_bwd = head_backward(cfg, d, eager), tail_backward(cfg, d)
    return _intern(prologue(cfg, d, eager)), _intern(post), _intern(head_bwd), _intern(tail_bwd)


@functools.lru_cache(maxsize=8192)
def _stage_parts(cfg: ModelConfig, d: Dims, eager: bool, mode: str, recompute: str, st: Stage,
                 fsdp: tuple | None) -> tuple[tuple[Part, ...], tuple[Part, ...]]:  # fmt: skip
    """A stage's forward and backward Parts; fsdp: (params, dp ranks, dp nodes, expert-dp ranks,
    expert-dp nodes, gradient bytes) under ZeRO-3."""
    train = mode == "train"
    runs = [(first, n, _layer_templates(cfg, d, eager, train, recompute, kind))
            for first, n, kind in kind_runs(cfg, st.first, st.layers)]  # fmt: skip
    fsdp = _fsdp_layer_ops(d, st.layers, *fsdp) if fsdp is not None else None
    fwd = _forward_parts(cfg, d, eager, mode, st, runs, fsdp)
    bwd = _backward_parts(cfg, d, eager, st, runs, fsdp) if train else []
    return tuple(fwd), tuple(bwd)


def _forward_parts(cfg, d, eager, mode, st, runs, fsdp) -> list[Part]:  # noqa: ANN001
    """The stage's forward: the prologue, each run of alike layers, the head."""
    pre_ops, post_ops, _, _ = _ends(cfg, d, eager, mode)
    parts: list[Part] = []
    pre = pre_ops if st.has_embed else ()
    if fsdp:  # the root's parameters and the first layer's, gathered before anything runs
        pre = (*fsdp.first, *pre)
    if pre:
        parts.append(_part(pre))
    end = st.first + st.layers
    for first, n, (layer, _, hide, _) in runs:

        def body(last: bool, layer=layer, hide=hide, **kw) -> Part:  # noqa: ANN001, ANN003
            if not fsdp:
                return _part(layer, hide, **kw)
            if last:  # the last layer has no next layer to prefetch
                return _around((), layer, hide, fsdp.fwd[-1:], {}, **kw)
            return _around((), layer, hide, fsdp.fwd, fsdp.fwd_hide, **kw)

        ends_stage = first + n == end
        if first == 0 and not (eager and not d.compiled) and not cfg.parallel_residual \
                and cfg.pre_norm:  # fmt: skip
            # vLLM's first layer has no residual yet: a plain norm, not the fused add + norm.
            parts.append(body(n == 1 and ends_stage, _first_layer(layer), layer0=0))
            n, first = n - 1, 1
        if n and fsdp and ends_stage:  # n: the first layer may have been the run's only one
            if n > 1:
                parts.append(body(False, repeat=n - 1, layer0=first))
            parts.append(body(True, layer0=first + n - 1))
        elif n:
            parts.append(body(False, repeat=n, layer0=first))
    if st.has_head:
        parts.append(_part(post_ops))
    return parts


_FIRST: dict[int, tuple[object, tuple[Op, ...]]] = {}  # id(layer) -> (layer, first)


def _first_layer(layer: tuple[Op, ...]) -> tuple[Op, ...]:
    """`layer` (interned) with a plain first norm (no residual to add yet), once per layer."""

    def plain() -> tuple[Op, ...]:
        return _intern([replace(layer[0], residual=False), *layer[1:]])  # type: ignore[call-arg]

    return _memo(_FIRST, id(layer), layer, plain, limit=4096)


def _backward_parts(cfg, d, eager, st, runs, fsdp) -> list[Part]:  # noqa: ANN001
    """The stage's backward: the head, each run of alike layers from the last, the embedding."""
    _, _, head_bwd, tail_bwd = _ends(cfg, d, eager, "train")
    parts: list[Part] = []
    if st.has_head:
        parts.append(_part(head_bwd))
    for first, n, (_, layer_bwd, _, hide) in reversed(runs):
        kw = {"repeat": n, "layer0": first + n - 1, "descending": True}
        if fsdp:
            parts.append(_around(fsdp.bwd_pre, layer_bwd, hide, fsdp.bwd_post, fsdp.bwd_hide, **kw))
        else:
            parts.append(_part(layer_bwd, hide, **kw))
    tail = tail_bwd if st.has_embed else ()
    if fsdp:
        tail = (*tail, *fsdp.last)
    if tail:
        parts.append(_part(tail))
    return parts


@dataclass(frozen=True, slots=True)
class _Fsdp:
    """FSDP2 / ZeRO-3 kernels of one layer (Zhao et al. 2023, PyTorch FSDP2 `fully_shard`):
    before the first layer, the stage's root parameters (embedding, final norm, lm_head: what it
    holds of them) and the first layer's are gathered, exposed; forward: each layer but the last
    all-gathers the next layer's parameters (prefetch, hidden under it) and copies its own out of
    the gather buffer (each gather first copies this rank's shards into its input buffer:
    all_gather_copy_in's foreach copy); backward: all-gather again (parameters were freed after
    the forward), copy out, then copy the gradients into the reduce-scatter buffer and
    reduce-scatter them (hidden under the backward of the layer before); the root's gradients
    are reduce-scattered last. Dense weights are sharded over the dp·cp ranks, experts over the
    expert-dp ranks."""

    first: tuple[Op, ...]
    fwd: tuple[Op, ...]
    fwd_hide: dict[str, tuple[str, ...]]
    bwd_pre: tuple[Op, ...]
    bwd_post: tuple[Op, ...]
    bwd_hide: dict[str, tuple[str, ...]]
    last: tuple[Op, ...]


@functools.lru_cache(maxsize=1024)
def _fsdp_layer_ops(d: Dims, layers: int, params: Params, dp: int, dp_nodes: int, edp: int,
                    edp_nodes: int, gb: int) -> _Fsdp:  # fmt: skip
    """gb: bytes of a gradient element as dp_ops.grad_bytes says (what the reduce-scatters
    carry; the all-gathers carry the parameters)."""
    pb = BYTES[d.act]
    dense = max(1, int(params.layer_dense * pb))
    expert = int(params.layer_expert * pb)
    root = int((params.dense - layers * params.layer_dense) * pb)
    gdt = grad_wire_dtype(d.act, gb)

    def coll(name: str, kind: str, nbytes: int, ranks: int, nodes: int) -> list[Op]:
        if nbytes <= 0 or ranks <= 1:
            return []
        dtype = gdt if kind == "reducescatter" else d.act
        nbytes = nbytes * gb // pb if kind == "reducescatter" else nbytes
        return [Collective(name, kind, nbytes, ranks, dtype, nodes)]  # type: ignore[arg-type]

    def gather(name: str) -> list[Op]:  # one layer's parameters
        return coll(name, "allgather", dense, dp, dp_nodes) + coll(
            name + "_experts", "allgather", expert, edp, edp_nodes
        )

    def scatter(name: str) -> list[Op]:  # gradients, in grad_bytes' dtype
        return coll(name, "reducescatter", dense, dp, dp_nodes) + coll(
            name + "_experts", "reducescatter", expert, edp, edp_nodes
        )

    layer_bytes = dense + expert
    # all_gather_copy_in: this rank's shards copied into the all-gather's input buffer
    shard = max(1, dense // dp + expert // edp)
    nxt, bwd_ag, rs = (
        gather("fsdp/allgather.next"),
        gather("fsdp/allgather.bwd"),
        scatter("fsdp/reducescatter"),
    )
    return _Fsdp(
        first=(*coll("fsdp/allgather_root", "allgather", root, dp, dp_nodes),
               Copy("fsdp/copy_in.first", shard, d.act), *gather("fsdp/allgather")),
        fwd=(Copy("fsdp/copy_in", shard, d.act), *nxt, Copy("fsdp/copy_out", layer_bytes, d.act)),
        fwd_hide={op.name: (ALL,) for op in nxt},
        bwd_pre=(Copy("fsdp/copy_in.bwd", shard, d.act), *bwd_ag,
                 Copy("fsdp/copy_out.bwd", layer_bytes, d.act)),
        bwd_post=(Copy("fsdp/grad_copy_in", layer_bytes, d.act), *rs),
        bwd_hide={op.name: (ALL,) for op in bwd_ag + rs},
        last=tuple(coll("fsdp/reducescatter_root", "reducescatter", root, dp, dp_nodes)),
    )  # fmt: skip


def flatten(parts: tuple[Part, ...] | list[Part]) -> list[Op]:
    """The kernels of `parts` in order, named as the step engine names them."""
    from gpuperf.workloads.transformer import name_copies

    out: list[Op] = []
    for p in parts:
        if p.layer0 is None:
            for _ in range(p.repeat):
                out += p.ops
        else:
            out += name_copies(list(p.ops), [p.layer(i) for i in range(p.repeat)])
    return out


def single_gpu_ops(work: StepWork) -> list[Op]:
    """The op list of a one-GPU, one-micro-batch step: forward, backward, optimizer."""
    st = work.stages[0]
    return (flatten(st.fwd) + flatten(st.bwd) + flatten(work.sync) + flatten(work.sync_kernels)
            + flatten(work.optimizer))  # fmt: skip


def is_comm(op: Op) -> bool:
    return isinstance(op, Collective | P2P)
