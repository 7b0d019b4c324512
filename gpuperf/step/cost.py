"""Cost a Part: every distinct kernel once (perfmodel.op_time), its host cost, and what of each
communication op hides under the kernels it overlaps; the repeats added up in closed form.

Host costs (per kernel, on the CPU that issues it):
- eager PyTorch: host_dispatch_s per kernel (a replayed CUDA graph: none on the host, but
  graph_launch_s of GPU idle between kernels);
- a collective call through torch.distributed: host_collective_s more;
- every host cost grows with the ranks that share the host, as the slowest of them issues
  (1 + k*log2(ranks), k = host_rank_slowdown: a collective waits for the last rank);
- DTensor tensor parallelism in training: host_dtensor_op_s more for each sharded GEMM (sharding
  propagation and redistribution in Python around the local kernel) and for each optimizer op
  on each DTensor parameter (inference runs the local kernels: HOST_DTENSOR_OP_S);
- an eager decode step on a growing cache: host_decode_layer_s at the first kernel of each layer,
  and host_attn_plan_s once per step at the first attention kernel (cuDNN plans the new length;
  none when the process has met the length before, kv_lengths="seen");
- Hugging Face gradient checkpointing (eager, recompute="full"): each checkpointed layer's
  forward pays HOST_CKPT_LAYER_KERNELS launches' worth more at its first kernel, and each kernel
  of its recomputation in the backward HOST_RECOMPUTE_FACTOR times a launch.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpuperf.step.dispatch import _EMPTY as _EMPTY_TIMED
from gpuperf.step.dispatch import Timed
from gpuperf.workloads.step_work import ALL, Part

if TYPE_CHECKING:
    from gpuperf.hardware.spec import GpuSpec, SystemSpec
    from gpuperf.perfmodel.ops import Op
    from gpuperf.workloads.config import ModelConfig
    from gpuperf.workloads.scenario import Scenario

# Per-op columns of the table, in order (time columns in ms).
ROW = ("kind", "shape", "dtype", "flops", "bytes", "intensity", "bound",
       "time_ms", "t_math_ms", "t_mem_ms", "t_overhead_ms", "t_comm_ms")  # fmt: skip
_COMM = ("collective", "p2p")


@dataclass(frozen=True, slots=True)
class HostRules:
    """What the host pays per kernel of a scenario (module docstring)."""

    per_kernel: float = 0.0
    graph_gap: float = 0.0
    layer_first: float = 0.0
    attn_plan: float = 0.0
    comm: float = 0.0
    dtensor: float = 0.0
    moe: float = 1.0  # host cost of an eager MoE block's kernels, in per_kernel units
    recompute: float = 1.0  # host cost of a recomputed kernel, in per_kernel units
    ckpt_layer: float = 0.0  # at the first kernel of a checkpointed layer's forward
    sac_forward: float = 1.0  # each kernel of a layer's forward under selective checkpointing

    @staticmethod
    def of(sc: Scenario | None, gpu: GpuSpec, system: SystemSpec | None = None,
           moe: float = 0.0) -> HostRules:  # fmt: skip
        """`moe`: the model's eager MoE host factor (moe_host); 0 for an op list of unknown
        origin (HF_MOE_HOST_DEFAULT)."""
        if sc is None:
            return HostRules()
        p = gpu.params
        extra = p.extra
        if sc.cuda_graphs:
            return HostRules(graph_gap=p.graph_launch_s)
        eager_decode = sc.impl == "eager" and sc.mode == "decode"
        # Hugging Face's tp_plan runs a Linear's local kernel on plain tensors while grad is off
        # (HOST_DTENSOR_OP_S): DTensor's dispatch is paid in training only.
        dtensor = sc.tp > 1 and sc.tp_impl == "dtensor" and sc.mode == "train"
        slow = host_slowdown(gpu, ranks_per_host(sc, system))
        dt = float(extra.get("host_dtensor_op_s", HOST_DTENSOR_OP_S)) if dtensor else 0.0
        ckpt = sc.recompute == "full" and sc.impl == "eager" and sc.mode == "train"
        sac = sc.recompute == "op" and sc.impl == "eager" and sc.mode == "train"
        rec = float(extra.get("host_recompute_factor", HOST_RECOMPUTE_FACTOR)) if ckpt else 1.0
        if sac:
            rec = float(extra.get("host_sac_recompute_factor", HOST_SAC_RECOMPUTE_FACTOR))
        layer_k = (
            float(extra.get("host_ckpt_layer_kernels", HOST_CKPT_LAYER_KERNELS)) if ckpt else 0
        )
        return HostRules(
            per_kernel=slow * p.host_dispatch_s,
            layer_first=slow * p.host_decode_layer_s if eager_decode else 0.0,
            attn_plan=slow * p.host_attn_plan_s if eager_decode and sc.kv_lengths == "new" else 0.0,
            comm=slow * float(extra.get("host_collective_s", HOST_COLLECTIVE_S)),
            dtensor=slow * dt,
            moe=(moe or HF_MOE_HOST_DEFAULT) if sc.impl == "eager" else 1.0,
            recompute=rec,
            ckpt_layer=slow * p.host_dispatch_s * layer_k,
            sac_forward=float(extra.get("host_sac_forward_factor", HOST_SAC_FORWARD_FACTOR))
            if sac
            else 1.0,
        )


# Host costs beyond one launch, measured on the 4-H200 host by benchmarks/device/
# host_probe_multigpu.py (host_probe_multigpu.json), none fitted to a whole-model run; a
# profile's [model.extra] overrides each, other GPUs' hosts take these values (assumed).
# - A plain torch.distributed all-reduce issues in 15.5 us, a one-element add in 6.9 us: the
#   collective's bookkeeping (work object, events, NCCL's enqueue) costs 8.6 us more.
HOST_COLLECTIVE_S = 8.6e-6
# - A column-parallel linear on a DTensor weight (input from_local, output to_local), as HF's
#   tp_plan runs each projection, issues in 131.5 us against 18.2 us for the same local linear:
#   sharding propagation and the DTensor wrapping in Python. That is the training path: with
#   grad disabled (prefill, decode) transformers 5.x's ColwiseParallel and RowwiseParallel
#   (distributed/tensor_parallel.py, should_use_local_tensors) run the Linear on its local
#   shard with the plain input and all-reduce the row-parallel output with dist.all_reduce, as
#   Megatron-style code does; profiled, its prefill and decode spent about the self CPU time
#   of the Megatron-style forward (validate_multigpu_2gpu_profile.json).
HOST_DTENSOR_OP_S = 113e-6
# - Every rank on a host issues slower as more ranks share it (one process per GPU, each with
#   its NCCL proxy and watchdog threads; shared caches), and unevenly: between two collectives
#   each rank issues alone and the collective ends when the last arrives, so an eager step pays
#   the slowest rank's host. The slowest rank's time per call over one rank's alone: 1.44x /
#   1.54x for a launch, 1.70x / 1.88x for a Python loop, 1.05x / 1.98x for a linear, 1.09x /
#   2.49x for a DTensor linear at 2 / 4 ranks (the mean rank: 1.23x / 1.51x for a launch). Host
#   costs scale by 1 + k*log2(ranks on the host), k the median of those eight ratios' k
#   (benchmarks/host_rank_slowdown.py; 0.25 from the mean rank before).
HOST_RANK_SLOWDOWN = 0.44
# Hugging Face gradient checkpointing, measured by benchmarks/device/train_host_probe.py on an
# H100 and an H200 host (train_host.json): six families made tiny, at 2 and 6 layers, so the
# difference is four layers' host time without the model call's own; each phase's host time per
# layer over the kernels gpuperf predicts for it, against the same machine's no-grad forward per
# kernel. A recomputed kernel costs 2.39x a forward kernel (the median of the 12 family-machine
# pairs; 2.29 while the recomputation was counted to the layer's end, before
# transformer_train._early_stop; torch.utils.checkpoint's saved-tensor hooks in the
# recomputation and in the backward that unpacks them), and a checkpointed layer's forward
# 35.5 kernels' worth more (0.6-70: the checkpoint call's own Python, RNG state, a hook per
# saved tensor).
# benchmarks/train_host_fit.py derives both from the files. The same pairs put a forward
# kernel with autograd at 1.08x a no-grad one and a backward kernel at 1.2-1.5x (0.6-2.5), which
# whole-model training steps do not bear out (a host-bound Gemma-3-1B step is already
# predicted 27% slow): both left at 1.
HOST_RECOMPUTE_FACTOR = 2.39
HOST_CKPT_LAYER_KERNELS = 35.5
# torchtitan's per-op selective checkpointing in eager PyTorch (recompute="op"): its
# TorchDispatchMode runs Python for every operator of a checkpointed layer's forward (the
# policy, and caching what it keeps) and of the recomputation. Measured on tiny shapes by
# benchmarks/device/train_host_probe.py --sac (train_host_sac.json, H100 host, four families):
# a layer's forward costs the host 2.15x the plain forward (1.5-4.5) and a recomputed kernel
# 3.56x a no-grad forward kernel (2.5-6.1); medians, by benchmarks/train_host_fit.py. Compiled
# layers run the policy inside the graph and pay neither.
HOST_SAC_FORWARD_FACTOR = 2.146
HOST_SAC_RECOMPUTE_FACTOR = 3.562
# Hugging Face's MoE blocks (router, grouped_mm experts, shared experts) spend more host time per
# kernel than its dense MLP: measured by benchmarks/device/host_block_probe.py on the H200 host
# (host_block_probe.json), one block called back to back at one token, host µs per op gpuperf
# predicts for it over the same for Llama-3-8B's MLP (22.6 µs): Mixtral 50.5, Qwen1.5-MoE 27.8,
# Qwen3-MoE 26.7. DeepSeek-V3's block ran GPU-bound at one token (22.8 µs per op is a lower
# bound), so it and other families take the Qwen models' value. Not fitted to any model run.
HF_MOE_HOST = {"mixtral": 2.23, "qwen2_moe": 1.23, "qwen3_moe": 1.18}
HF_MOE_HOST_DEFAULT = 1.2


def moe_host(cfg: ModelConfig) -> float:
    """The eager MoE host factor of `cfg`'s family (HF_MOE_HOST); 1 for a dense model."""
    return HF_MOE_HOST.get(cfg.model_type, HF_MOE_HOST_DEFAULT) if cfg.is_moe else 1.0


# Names of the ops of an MoE block (gpuperf.workloads.moe_layers).
MOE_PREFIXES = ("mlp/router", "mlp/topk", "mlp/experts", "mlp/shared")


def _is_optimizer(op: Op) -> bool:
    return op.name.startswith("optimizer/")


def _is_checkpointed_forward(ops: tuple[Op, ...]) -> bool:
    """Whether a layer's run of ops is its forward (a checkpointed layer's backward starts with
    its recomputation; FSDP's collectives around a layer are no compute kernels)."""
    if not ops or ops[0].name.endswith(".recompute"):
        return False
    return comm_class(ops[0].name, ops[0].kind) == "compute"


def ranks_per_host(sc: Scenario, system: SystemSpec | None) -> int:
    """The processes of one job on a host (one per GPU): a node's share of the plan. Inference
    replicas (dp outside training) are separate servers, not assumed to share a host, so the
    same work on one GPU and as a replica costs the same."""
    ranks = sc.gpus if sc.mode == "train" else sc.gpus // sc.dp
    return ranks if system is None else max(1, min(ranks, system.gpus_per_node))


def host_slowdown(gpu: GpuSpec, ranks: int) -> float:
    k = float(gpu.params.extra.get("host_rank_slowdown", HOST_RANK_SLOWDOWN))
    return 1.0 + k * math.log2(max(ranks, 1))


# Each second of communication hidden under compute still costs the compute this fraction of a
# second: NCCL's channels each hold an SM and its traffic shares HBM with the kernels it overlaps
# (and runs slower there: on 2 H200s, Llama-3-8B's DDP all-reduces took 106 ms of GPU time in the
# backward against ~72 ms alone). Fitted on that one run (DDP, 2 H200s, Llama-3-8B); the other
# DDP and FSDP2 runs on 2 and 4 GPUs are held out (benchmarks/fit_multigpu.py). A profile's
# [model.extra] comm_overlap_cost overrides it; other GPUs take the H200's value (assumed).
COMM_OVERLAP_COST = 0.486


# Megatron-Core's overlap_moe_expert_parallel_comm (Megatron-Bridge's moe_a2a_overlap) runs the
# forward of one micro-batch beside the backward of the one before, layer by layer, so that each
# side's token dispatch and combine can run under the other's GEMMs and attention. Measured, not
# fitted to gpuperf: in Megatron-Bridge's matched A/B (Qwen3-30B-A3B, 16 H100s, EP16, HybridEP,
# BF16, its skill card nemo-mbridge-perf-expert-parallel-overlap) Nsight found 36.55% of the
# communication concurrent with GEMMs or attention (0.11% without), and the step fell by 94% of
# those seconds (24.71 -> 20.99 s): a hidden second costs the compute next to nothing here.
EP_OVERLAP_HIDDEN = 0.3655


def ep_share(sc: Scenario | None) -> float:
    """The share of each EP dispatch and combine that sc's EP overlap hides: none in the first
    micro-batch's forward and the last one's backward, which have no partner. Part of a
    Coster's key (step.run)."""
    if sc is None or not sc.ep_overlap:
        return 0.0
    return EP_OVERLAP_HIDDEN * (1 - 1 / sc.microbatches)


def overlap_cost(gpu: GpuSpec) -> float:
    return float(gpu.params.extra.get("comm_overlap_cost", COMM_OVERLAP_COST))


# A collective captured in a CUDA graph has no host side: its per-call floor is the NCCL
# kernel's own, not comm_floor_s (fitted to calls from Python, host-bound at 25-40 us when small).
# Measured, not fitted to a model run: 50 all-reduces of 8-128 KiB replayed in one graph on 2
# H200s took 5.8-6.7 us each with NCCL_GRAPH_MIXING_SUPPORT=0, as gpuperf's graph decode runs
# (benchmarks/device/graph_collective_probe.py, graph_collective_probe_2gpu_nomix.json; 12 us
# with graph mixing on). A profile's [model.extra] comm_graph_floor_s overrides it.
COMM_GRAPH_FLOOR_S = 6.3e-6


@functools.lru_cache(maxsize=64)
def in_graph(gpu: GpuSpec) -> GpuSpec:
    """`gpu` as the collectives of a replayed CUDA graph see it (COMM_GRAPH_FLOOR_S)."""
    extra = gpu.params.extra
    floor = float(extra.get("comm_graph_floor_s", COMM_GRAPH_FLOOR_S))
    params = replace(gpu.params, extra={**extra, "comm_floor_s": floor})
    return replace(gpu, params=params)


def _op_time(op: Op, gpu: GpuSpec, system: SystemSpec | None, nvls: bool = False,
             custom_ar: bool = False) -> Any:  # fmt: skip
    """perfmodel's time of one kernel or collective (a seam tests replace); nvls: NCCL may pick
    NVLink SHARP for the collectives (NCCL_NVLS_ENABLE=1); custom_ar: the all-reduce runs on a
    serving engine's own kernel where it applies (perfmodel.comm_custom)."""
    if custom_ar:
        from gpuperf.perfmodel.comm_custom import custom_allreduce_time

        return custom_allreduce_time(op, gpu, system, nvls=nvls)  # type: ignore[arg-type]
    if nvls and op.kind == "collective":
        from gpuperf.perfmodel.comm import collective_time

        return collective_time(op, gpu, system, nvls=True)  # type: ignore[arg-type]
    from gpuperf.perfmodel.roofline import op_time

    return op_time(op, gpu, system)


@functools.lru_cache(maxsize=64)
def sustained(gpu: GpuSpec) -> GpuSpec:
    """The GPU under sustained load: peaks scaled by params.sustained_clock_frac."""
    frac = gpu.params.sustained_clock_frac
    if frac == 1.0:
        return gpu
    return replace(gpu, peak_flops={k: v * frac for k, v in gpu.peak_flops.items()})


@dataclass(frozen=True, slots=True)
class Template:
    """One repeat of a run of kernels, costed: per op its row, duration, hidden part and host
    cost (seconds); the run as a Timed (and with the step's one-off host cost, when it has one);
    its FLOPs and its effective GPU time by class (compute, tp_comm, ...). Plain floats, no
    numpy: `gpuperf predict` starts without importing it."""

    rows: tuple[tuple[Any, ...], ...]
    time_s: tuple[float, ...]
    hidden_s: tuple[float, ...]
    host_s: tuple[float, ...]
    once: Timed
    first: Timed  # the first repeat when it carries the step's one-off host cost
    flops: float
    classes: tuple[tuple[str, float], ...]
    compute: float = 0.0  # seconds of its compute kernels (what FSDP's ALL hides under)


@dataclass(frozen=True, slots=True)
class Costed:
    """A costed Part: its template's costs and the whole Part (every repeat) as a Timed run."""

    part: Part
    tpl: Template
    timed: Timed
    flops: float  # every repeat

    @property
    def rows(self) -> tuple[tuple[Any, ...], ...]:
        return self.tpl.rows

    @property
    def time_s(self) -> tuple[float, ...]:
        return self.tpl.time_s

    @property
    def hidden_s(self) -> tuple[float, ...]:
        return self.tpl.hidden_s

    def with_hidden(self, frac: float) -> Costed:
        """The same run with `frac` of each op hidden under other work (for the table)."""
        tpl = replace(self.tpl, hidden_s=tuple(t * frac for t in self.tpl.time_s))
        return Costed(self.part, tpl, self.timed, self.flops)


def comm_class(name: str, kind: str) -> str:
    """Which part of a step's breakdown an op's time belongs to."""
    if kind not in _COMM:
        return "compute"
    if name.startswith(("dp/", "fsdp/")):
        return "dp_comm"
    if name.startswith("pp/"):
        return "pp_comm"
    if "/ring" in name:
        return "cp_comm"
    if name.endswith(".alltoall") or ".alltoall." in name:
        return "ep_comm"
    return "tp_comm"


class Coster:
    """Costs Parts for one (GPU, system, scenario); distinct ops and templates are costed once."""

    def __init__(self, gpu: GpuSpec, system: SystemSpec | None, sc: Scenario | None,
                 moe: float = 0.0) -> None:  # fmt: skip
        self.gpu, self.system, self.sc = gpu, system, sc
        self.compute_gpu = sustained(gpu) if sc is not None else gpu
        self.comm_gpu = in_graph(gpu) if sc is not None and sc.cuda_graphs else gpu
        self.rules = HostRules.of(sc, gpu, system, moe)
        self.nvls = bool(sc is not None and sc.nvls)
        self.custom_ar = bool(sc is not None and sc.tp_allreduce == "custom")
        self.overlap_cost = overlap_cost(gpu)
        self.ep_hidden = ep_share(sc)
        self._rows: dict[tuple, tuple[Any, ...]] = {}
        self._op_rows: dict[int, tuple[Op, tuple[Any, ...]]] = {}  # by the op object: no hashing
        self._templates: dict[tuple, tuple[tuple, Template]] = {}
        self._parts: dict[tuple[int, bool], tuple[Part, Costed]] = {}
        self.stages: dict[tuple, tuple] = {}  # step.run._stage's memo

    def row(self, op: Op) -> tuple[Any, ...]:
        hit = self._op_rows.get(id(op))
        if hit is not None and hit[0] is op:
            return hit[1]
        from gpuperf.perfmodel.roofline import shape_key

        # A tensor-parallel all-reduce on the engine's own kernel is keyed apart from NCCL's.
        custom = (self.custom_ar and op.kind == "collective" and op.coll == "allreduce"  # type: ignore[attr-defined]
                  and comm_class(op.name, op.kind) == "tp_comm")  # fmt: skip
        key = (shape_key(op), "custom") if custom else shape_key(op)
        r = self._rows.get(key)
        if r is None:
            comm = op.kind in _COMM
            if custom:
                t = _op_time(op, self.comm_gpu, self.system, nvls=self.nvls, custom_ar=True)
            elif comm and self.nvls:
                t = _op_time(op, self.comm_gpu, self.system, nvls=True)
            else:
                t = _op_time(op, self.comm_gpu if comm else self.compute_gpu, self.system)
            c = op.cost()
            r = self._rows[key] = (
                op.kind, op.shape, getattr(op, "dtype", ""), c.flops, c.bytes, c.intensity,
                t.bound, t.time * 1e3, t.t_math * 1e3, t.t_mem * 1e3, t.t_overhead * 1e3,
                t.t_comm * 1e3,
            )  # fmt: skip
        if len(self._op_rows) > 65536:
            self._op_rows.clear()
        self._op_rows[id(op)] = (op, r)
        return r

    def cost(self, part: Part, first_step: bool = False) -> Costed:
        """Cost `part`; with first_step, its first repeat carries the step's one-off host costs
        (the attention plan of an eager decode step). Parts seen before cost nothing."""
        first_step = first_step and self.rules.attn_plan > 0  # else the first repeat is like any
        key = (id(part), first_step)  # Parts are memoized by their builders: identity is enough
        hit = self._parts.get(key)
        if hit is None or hit[0] is not part:
            layered = part.layer0 is not None
            if part.core is not None and not first_step and not self.rules.layer_first:
                tpl = self._around(part, layered)
            else:
                tpl = self.template(part.ops, part.hide, layered, first_step)
            if tpl.first is not tpl.once:
                timed = tpl.first.then(tpl.once.times(part.repeat - 1))
            else:
                timed = tpl.once.times(part.repeat)
            costed = Costed(part, tpl, timed, part.repeat * tpl.flops)
            hit = self._parts[key] = (part, costed)
        return hit[1]

    def template(self, ops: tuple[Op, ...], hide: tuple, layered: bool,
                 first_step: bool) -> Template:  # fmt: skip
        """The costs of one repeat of `ops` (ops tuples are interned: identity is enough)."""
        key = (id(ops), hide, layered, first_step)
        hit = self._templates.get(key)
        if hit is None or hit[0] is not ops:
            hit = self._templates[key] = (ops, self._template(ops, hide, layered, first_step))
        return hit[1]

    def _around(self, part: Part, layered: bool) -> Template:
        """The template of a Part with a shared core (Part.core): the core's template, costed
        once for every Part around it, and the ops around it costed here; what those hide
        under every compute kernel (ALL) takes the whole Part's compute time, as
        `_template` would. Ops around a core hide only under ALL, and the core's ops only
        under its own (else: the whole Part costed op by op)."""
        off, core, core_hide = part.core  # type: ignore[misc]
        ops, n = part.ops, len(core)
        outer_hide = part.hide[len(core_hide) :]
        pre, post = ops[:off], ops[off + n :]
        outer = {op.name for op in pre + post}
        if (part.hide[: len(core_hide)] != core_hide
                or any(u != (ALL,) or name not in outer for name, u in outer_hide)):  # fmt: skip
            return self.template(ops, part.hide, layered, False)
        key = (id(core), core_hide, pre, post, outer_hide, layered)  # a few ops to hash
        hit = self._templates.get(key)
        if hit is None or hit[0] is not core:
            hit = self._templates[key] = (core, self._compose(part, layered, pre, post))
        return hit[1]

    def _compose(self, part: Part, layered: bool, pre: tuple[Op, ...],
                 post: tuple[Op, ...]) -> Template:  # fmt: skip
        off, core, core_hide = part.core  # type: ignore[misc]
        ops, n = part.ops, len(core)
        outer_hide = part.hide[len(core_hide) :]
        c = self.template(core, core_hide, layered, False)
        p, q = self._side(pre, layered), self._side(post, layered)
        # The outer ops' hidden seconds, from one pool of the whole Part's compute time.
        index = {op.name: i for i, op in enumerate(ops) if not off <= i < off + n}
        t = (*p.time_s, *c.time_s, *q.time_s)
        hidden = [*p.hidden_s, *c.hidden_s, *q.hidden_s]
        left = p.compute + c.compute + q.compute
        for name, _ in outer_hide:
            i = index.get(name)
            if i is None:
                continue
            hidden[i] = min(t[i], left)
            left -= hidden[i]
        keep = 1.0 - self.overlap_cost
        classes = dict(c.classes)
        pieces = []
        for lo, tpl in ((0, p), (off + n, q)):
            k = len(tpl.time_s)
            if not k:
                pieces.append(_EMPTY_TIMED)
                continue
            eff = [t[lo + j] - hidden[lo + j] * keep for j in range(k)]
            for j, e in enumerate(eff):
                cls = _traits(ops[lo + j])[0]
                classes[cls] = classes.get(cls, 0.0) + float(e)
            pieces.append(Timed.of(eff, tpl.host_s))
        once = pieces[0].then(c.once).then(pieces[1])
        return Template((*p.rows, *c.rows, *q.rows), t, tuple(hidden),
                        (*p.host_s, *c.host_s, *q.host_s), once, once,
                        p.flops + c.flops + q.flops, tuple(classes.items()),
                        p.compute + c.compute + q.compute)  # fmt: skip

    def _side(self, ops: tuple[Op, ...], layered: bool) -> Template:
        """The template of the few ops around a core (FSDP's per-layer collectives), by their
        values: plans whose layers differ share them."""
        key = ("side", ops, layered)
        hit = self._templates.get(key)
        if hit is None:
            hit = self._templates[key] = (ops, self._template(ops, (), layered, False))
        return hit[1]

    def _template(self, ops: tuple[Op, ...], hide: tuple, layered: bool,
                  first_step: bool) -> Template:  # fmt: skip
        rows = tuple(self.row(op) for op in ops)
        rules = self.rules
        gap = rules.graph_gap
        t = tuple(r[7] * 1e-3 + gap for r in rows)
        compute = sum(t[i] for i, r in enumerate(rows) if r[0] not in _COMM)
        hidden = _hidden(hide, ops, rows, t, compute)
        free = _ep_hidden(ops, t, hidden, compute, self.ep_hidden) if self.ep_hidden else ()
        host = [rules.per_kernel] * len(ops)
        if rules.recompute != 1.0:
            host = [h * rules.recompute if op.name.endswith(".recompute") else h
                    for h, op in zip(host, ops, strict=True)]  # fmt: skip
        if rules.sac_forward != 1.0 and layered and _is_checkpointed_forward(ops):
            host = [h * rules.sac_forward for h in host]
        plan_at = -1
        moe, comm, dtensor = rules.moe != 1.0, rules.comm, rules.dtensor
        want_plan = first_step and rules.attn_plan
        classes: dict[str, float] = {}
        keep = 1.0 - self.overlap_cost
        eff = []
        for i, op in enumerate(ops):
            cls, is_moe, is_opt, growing = _traits(op)
            if moe and is_moe:
                host[i] *= rules.moe
            if cls != "compute":
                host[i] += comm
            elif dtensor and (layered and op.kind == "gemm" or is_opt):
                host[i] += dtensor
            if want_plan and plan_at < 0 and growing:
                plan_at = i
            e = t[i] - hidden[i] * (1.0 if i in free else keep)
            eff.append(e)
            classes[cls] = classes.get(cls, 0.0) + float(e)
        if rules.layer_first and layered and len(ops):
            host[0] += rules.layer_first
        if rules.ckpt_layer and layered and _is_checkpointed_forward(ops):
            host[0] += rules.ckpt_layer
        once = Timed.of(eff, host)
        first = once
        if plan_at >= 0:
            host1 = list(host)
            host1[plan_at] += rules.attn_plan
            first = Timed.of(eff, host1)
        flops = float(sum(r[3] for r in rows))
        return Template(rows, t, tuple(hidden), tuple(host), once, first, flops,
                        tuple(classes.items()), compute)  # fmt: skip


_TRAITS: dict[int, tuple[Op, tuple[str, bool, bool, bool]]] = {}


def _traits(op: Op) -> tuple[str, bool, bool, bool]:
    """What a template asks of an op beyond its time, by the op object: its breakdown class,
    whether it is an MoE block's or the optimizer's kernel, whether it is attention over a
    growing key count (where an eager decode step's plan is paid)."""
    hit = _TRAITS.get(id(op))
    if hit is not None and hit[0] is op:
        return hit[1]
    name, kind = op.name, op.kind
    traits = (comm_class(name, kind), name.startswith(MOE_PREFIXES), _is_optimizer(op),
              kind == "attention" and not op.fixed_window)  # fmt: skip
    if len(_TRAITS) > 65536:
        _TRAITS.clear()
    _TRAITS[id(op)] = (op, traits)
    return traits


def _ep_hidden(ops: tuple[Op, ...], t: tuple[float, ...], hidden: list[float], compute: float,
               share: float) -> set[int]:  # fmt: skip
    """EP_OVERLAP_HIDDEN: `share` of each expert-parallel dispatch and combine hidden (in place in
    `hidden`), from the compute the run's other hidden ops left; the indices hidden, whose
    seconds save the step in full."""
    left = compute - sum(hidden)
    free = set()
    for i, op in enumerate(ops):
        if left > 0 and _traits(op)[0] == "ep_comm":
            hidden[i] = min(share * t[i], left)
            left -= hidden[i]
            free.add(i)
    return free


def _hidden(hide: tuple, ops: tuple[Op, ...], rows: tuple, t: tuple[float, ...],
            compute: float) -> list[float]:  # fmt: skip
    """Seconds of each communication op that overlap the kernels `hide` names (`compute`: the
    seconds of every compute kernel of the run, what ALL hides under)."""
    hidden = [0.0] * len(ops)
    if not hide:
        return hidden
    index = {op.name: i for i, op in enumerate(ops)}
    left: dict[tuple[str, ...], float] = {}  # ops hidden under the same kernels share them
    for name, under in hide:
        i = index.get(name)
        if i is None:
            continue
        if under not in left:
            left[under] = compute if ALL in under else sum(t[index[u]] for u in under
                                                           if u in index)  # fmt: skip
        hidden[i] = min(t[i], left[under])
        left[under] -= hidden[i]
    return hidden
