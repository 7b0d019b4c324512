"""The step engine: one step of a model on one GPU or as a parallel plan, one way.

A plan is a step and one GPU is the plan whose degrees are all 1. The engine takes the work one
GPU does (workloads.step_work: each pipeline stage's micro-batch, the gradient synchronisation,
the optimizer), costs every kernel and collective with the calibrated single-GPU model (sustained
clock, kernel floors, host dispatch, CUDA-graph gaps), and adds what parallelism adds:

- a stage's micro-batch runs its kernels and blocking collectives back to back behind the host
  (step.dispatch); communication that overlaps (ring attention, Megatron's backward all-reduce,
  FSDP's prefetch) shows only the part its window does not cover;
- pipeline (1F1B; interleaved with v chunks): m·t_max + (Σ_s t_s − t_max)·⌈L/v⌉/L, t_s a
  stage's forward + backward + boundary transfers per micro-batch, L the pacing stage's layers
  (1/v when v divides them; the slowest stage sets the pace; an uneven split is fine); the rest
  of the slowest stage's time is the bubble;
- data parallel: gradient buckets all-reduced (or reduce-scattered) under the backward of the last
  micro-batch, the last bucket always exposed: max(t_last, t_sync − t_bwd·(1 − 1/buckets));
  ZeRO-1/2's parameter all-gather hides under the next forward;
- the optimizer after it.

`predict` returns a Prediction (table built on demand); `step_cost` the numbers alone, which the
plan search calls thousands of times.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gpuperf.errors import InputError
from gpuperf.step.cost import Costed, Coster, moe_host
from gpuperf.step.dispatch import Timed
from gpuperf.workloads.step_work import Part, build

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpuperf.hardware.spec import GpuSpec, SystemSpec
    from gpuperf.perfmodel.ops import Op
    from gpuperf.step.columns import Columns
    from gpuperf.step.plan import Placement
    from gpuperf.step.result import Prediction
    from gpuperf.workloads.config import ModelConfig
    from gpuperf.workloads.scenario import Scenario

HOST_BOUND_WARN = 0.3  # warn when the GPU waits on the host this fraction of the time
DECODE_POINTS = 5  # KV-context points at which generate evaluates a decode step
# Table columns that scale with a section's multiplier, and the text columns.
_SCALED = ("flops", "bytes", "time_ms", "t_math_ms", "t_mem_ms", "t_overhead_ms", "t_comm_ms")
_TEXT = ("name", "layer", "kind", "shape", "dtype", "bound")
_BREAKDOWN = ("compute", "host", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "bubble",
              "dp_comm", "optimizer")  # fmt: skip


@dataclass
class StepCost:
    """One step's numbers: seconds, and the costed Parts the table is built from."""

    total_s: float
    breakdown: dict[str, float]
    busy_s: float
    host_s: float
    kernels: int
    flops: float  # executed on one GPU of the pacing stage
    memory: dict[str, float]
    stage: int  # the pacing stage
    sections: Any = None  # () -> [(Costed part, ×, shape suffix)]: the table's rows, on demand
    extra_rows: list[dict[str, Any]] = field(default_factory=list)  # the bubble


def _classify(c: Costed, mult: float, into: dict[str, float]) -> None:
    """Add the effective GPU time of each op of `c` (× repeats × mult) to its class."""
    reps = c.part.repeat * mult
    for cls, t in c.tpl.classes:
        into[cls] += t * reps


def _first_attention(parts: Sequence[Part]) -> int:
    """Index of the first Part with an attention kernel whose key count grows step by step (a
    new shape: where a step's one-off host costs go)."""
    for j, p in enumerate(parts):
        if any(op.kind == "attention" and not op.fixed_window for op in p.ops):  # type: ignore[union-attr]
            return j
    return -1


def _seq(costed: Sequence[Costed]) -> Timed:
    out = Timed()
    for c in costed:
        out = out.then(c.timed)
    return out


def _sync_exposed(sync: list[Costed], window: float) -> tuple[float, float]:
    """(exposed, total) seconds of the bucketed gradient synchronisation under `window`."""
    total = sum(c.timed.gpu for c in sync)  # nothing in these Parts hides: full times
    if total <= 0:
        return 0.0, 0.0
    buckets = sum(c.part.repeat for c in sync)
    last = sync[-1].tpl.once.gpu
    return max(last, total - window * (1 - 1 / buckets)), total


def _set_hidden(sync: list[Costed], exposed: float, total: float) -> list[Costed]:
    """The same Parts with the hidden share spread over their ops (for the table)."""
    frac = 1 - exposed / total if total > 0 else 0.0
    return [c.with_hidden(frac) for c in sync]


class Engine:
    """Costs steps of one model on one kind of GPU and system. Kernels, collectives and Parts are
    costed once and shared by every plan it is asked about (the plan search's speed)."""

    def __init__(self, cfg: ModelConfig, gpu: GpuSpec, system: SystemSpec | None) -> None:
        from gpuperf.step.cost import HostRules

        self.cfg, self.gpu, self.system = cfg, gpu, system
        self._costers: dict[tuple[HostRules, bool, str, float], Coster] = {}

    def coster(self, sc: Scenario) -> Coster:
        from gpuperf.step.cost import HostRules, ep_share

        moe = moe_host(self.cfg)
        key = (HostRules.of(sc, self.gpu, self.system, moe), sc.nvls, sc.tp_allreduce,
               ep_share(sc))  # fmt: skip
        c = self._costers.get(key)
        if c is None:
            c = self._costers[key] = Coster(self.gpu, self.system, sc, moe)
        return c

    def cost(self, sc: Scenario, where: Placement, work: Any = None,
             memory: dict[str, float] | None = None) -> StepCost:  # fmt: skip
        """The step of `sc` placed as `where` says (`work`: its step_work.build and `memory`
        its memory.busiest, where the caller has them)."""
        return step_cost(self.cfg, sc, where, self.coster(sc), work, memory)


@dataclass(frozen=True, slots=True)
class _Stage:
    """One stage's micro-batch, costed: its Parts and their runs, by class for one micro-batch."""

    fwd: tuple[Costed, ...]
    bwd: tuple[Costed, ...]
    F: Timed
    B: Timed
    classes: tuple[tuple[str, float], ...]
    FB: Timed  # F then B
    flops: float  # of F and B


def _stage(coster: Coster, st: Any, first: int) -> _Stage:
    """Cost a stage's Parts."""
    fwd = tuple(coster.cost(p, first_step=(j == first)) for j, p in enumerate(st.fwd))
    bwd = tuple(coster.cost(p) for p in st.bwd)
    classes = dict.fromkeys(_BREAKDOWN, 0.0)
    for c in fwd + bwd:
        _classify(c, 1.0, classes)
    F, B = _seq(fwd), _seq(bwd)
    return _Stage(fwd, bwd, F, B, tuple(classes.items()), F.then(B),
                  sum(c.flops for c in fwd + bwd))  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Pipeline:
    """A plan's distinct stages costed: each one's forward + backward per micro-batch (t_fb), how
    many stages are like it, the pacing stage (the slowest; boundary transfers are alike for
    every stage), the boundary transfer Part."""

    stages: tuple[_Stage, ...]
    t_fb: tuple[float, ...]
    counts: tuple[int, ...]
    pace: int
    link: Costed | None


def _pipeline(coster: Coster, work: Any) -> _Pipeline:
    """The stages of `work` costed, memoized by the identity of build's stage tuple (plans that
    differ only in ZeRO stage, schedule or batch count share it)."""
    key = id(work.stages)
    hit = coster.stages.get(key)
    if hit is not None and hit[0] is work.stages:
        return hit[1]
    first = _first_attention(work.stages[0].fwd)
    costed = tuple(_stage(coster, st, first if i == 0 else -1) for i, st in enumerate(work.stages))
    # Every stage sends or receives each micro-batch's activation (and gradient) once per chunk
    # boundary; the transfers block in Megatron's 1F1B (batched isend/irecv, then wait).
    link = next((coster.cost(st.boundary) for st in work.stages if st.boundary), None)
    t_fb = tuple(x.F.end + x.B.end for x in costed)
    pace = max(range(len(t_fb)), key=t_fb.__getitem__)
    counts = tuple(st.stage.count for st in work.stages)
    out = _Pipeline(costed, t_fb, counts, pace, link)
    if len(coster.stages) > 16384:
        coster.stages.clear()
    coster.stages[key] = (work.stages, out)
    return out


def step_cost(cfg: ModelConfig, sc: Scenario, where: Placement, coster: Coster | None = None,
              work: Any = None, memory: dict[str, float] | None = None) -> StepCost:  # fmt: skip
    """The numbers of one step of `sc` (not generate) placed as `where` says (`work`: its
    step_work.build, `memory`: its memory.busiest, where the caller has them)."""
    from gpuperf.step.memory import busiest

    coster = coster or Coster(where.gpu, where.system, sc, moe_host(cfg))
    work = work if work is not None else build(cfg, sc, where.groups)
    m, v = work.microbatches, sc.virtual_stages
    pipe = _pipeline(coster, work)
    link = pipe.link
    passes = 2 if sc.mode == "train" else 1
    hop = passes * v * link.timed.gpu if link else 0.0
    pace = pipe.pace
    ps = pipe.stages[pace]
    sync = [coster.cost(p) for p in work.sync]
    kernels = [coster.cost(p) for p in work.sync_kernels]
    opt = [coster.cost(p) for p in work.optimizer]
    post = [coster.cost(p) for p in work.post]
    # The buckets hide under the backward's wall time: a host-bound backward leaves the GPU
    # idle between its kernels, and the reductions run there.
    window = ps.B.end if sc.dp_overlap else 0.0
    slow = coster.overlap_cost
    exposed, sync_total = _sync_exposed(sync, window)
    # ZeRO-1/2's parameter all-gather overlaps the next step's forward only when the gradient
    # reduction overlaps too (Megatron-LM's overlap_param_gather goes with overlap_grad_reduce).
    post_exposed, post_total = _sync_exposed(post, ps.F.end if sc.dp_overlap else 0.0)
    # What hides under the backward still slows it (step.cost.Coster.overlap_cost).
    exposed += slow * (sync_total - exposed)
    post_exposed += slow * (post_total - post_exposed)
    tail = _seq(kernels).then(Timed.wait(exposed)).then(_seq(opt))
    tail = tail.then(Timed.wait(post_exposed))
    run = ps.FB.times(m).then(tail)
    if sc.pp == 1:
        total, bubble = run.end, 0.0
    else:  # t_s = t_fb + hop for every stage
        t_max = pipe.t_fb[pace] + hop
        total_stage = sum((t + hop) * c for t, c in zip(pipe.t_fb, pipe.counts, strict=True))
        # A stage's v chunks hold ceil(layers / v) layers at most (Megatron-Core splits a stage
        # that v does not divide unevenly): the bubble scales with the largest chunk.
        layers = work.stages[pace].stage.layers
        bubble = (total_stage - t_max) * (-(-layers // v) / layers)
        total = m * t_max + bubble + tail.end
    breakdown = {k: m * t for k, t in ps.classes}
    breakdown["pp_comm"] += m * hop
    breakdown["bubble"] = bubble
    kernel_s = sum(c.timed.gpu for c in kernels)
    breakdown["dp_comm"] += exposed + post_exposed + kernel_s
    breakdown["optimizer"] = sum(c.timed.gpu for c in opt)
    breakdown["host"] = max(0.0, total - sum(breakdown.values()))
    busy = m * (ps.FB.gpu + hop) + exposed + post_exposed + kernel_s
    busy += breakdown["optimizer"]
    flops = m * ps.flops + sum(c.flops for c in kernels + opt)
    host = m * ps.FB.host + sum(c.timed.host for c in kernels + opt)

    def sections() -> list[tuple[Costed, float, str]]:
        suffix = f" ×{m} micro-batches" if m > 1 else ""
        out = [(c, float(m), suffix) for c in ps.fwd + ps.bwd]
        if link is not None:
            out.append((link, float(m * passes * v), suffix))
        out += [(c, 1.0, "") for c in _set_hidden(sync, exposed, sync_total)]
        out += [(c, 1.0, "") for c in kernels + opt]
        out += [(c, 1.0, "") for c in _set_hidden(post, post_exposed, post_total)]
        return out

    extra_rows = []
    if bubble > 0:
        extra_rows.append({"name": "pipeline/bubble", "kind": "bubble", "bound": "idle",
                           "shape": f"pp{sc.pp} v{v} m{m}", "time_ms": bubble * 1e3})  # fmt: skip
    memory = memory if memory is not None else busiest(cfg, sc, work.groups)
    return StepCost(total, breakdown, busy, host, run.kernels, flops, memory,
                    work.stages[pace].stage.index, sections, extra_rows)  # fmt: skip


# ------------------------------------------------------------------------------------ the table


def _rows(sections: list[tuple[Costed, float, str]], extra_rows: list[dict]) -> Columns:
    """The per-op table as plain columns (COLUMNS order): every op of every repeat of every
    section, its costs × the section's multiplier, then the extra rows (the bubble)."""
    from gpuperf.step.result import COLUMNS, intensity, layer_of, with_share

    names: list[str] = []
    idx: list[tuple[int, int]] = []
    mults: list[float] = []
    suffixes: list[str] = []
    hidden: list[float] = []
    uniq: list[tuple] = []
    for s, (c, mult, suffix) in enumerate(sections):
        part = c.part
        for r in range(part.repeat):
            layer = part.layer(r)
            prefix = "" if layer is None else f"L{layer}/"
            for i, op in enumerate(part.ops):
                names.append(prefix + op.name)
                idx.append((s, i))
                mults.append(mult)
                suffixes.append(suffix)
                hidden.append(float(c.hidden_s[i]) * 1e3 * mult)
        uniq.append(c.rows)
    rows = [uniq[s][i] for s, i in idx]
    cols: Columns = {"name": names, "layer": [layer_of(n) for n in names]}
    for j, col in enumerate(COLUMNS[2:-2]):
        values = [r[j] for r in rows]
        if col in _SCALED:
            cols[col] = [float(v) * m for v, m in zip(values, mults, strict=True)]
        elif col == "shape":
            cols[col] = [v + sfx for v, sfx in zip(values, suffixes, strict=True)]
        else:
            cols[col] = values
    cols["overlap_ms"] = hidden
    for extra in extra_rows:
        for col in COLUMNS[:-1]:
            cols[col].append(extra.get(col, "" if col in _TEXT else 0.0))
    cols["intensity"] = intensity(cols["flops"], cols["bytes"])
    return with_share(cols)


# ---------------------------------------------------------------------------------- predictions


def predict_ops(ops: Sequence[Op], gpu: GpuSpec, scenario: Scenario | None = None,
                system: SystemSpec | None = None) -> Prediction:  # fmt: skip
    """An op list run back to back on one GPU. With a `scenario` the kernels are issued by a host
    at its dispatch cost (eager or CUDA graphs) and the total is the end of the last kernel;
    without one they are independent kernels timed alone (a sweep) and the total is their sum."""
    from gpuperf.step.result import Prediction, layer_of

    if not ops:
        raise ValueError("predict_ops needs at least one op")
    coster = Coster(gpu, system, scenario)
    parts: list[Part] = []
    start = 0
    for i in range(1, len(ops) + 1):  # runs of one layer: the host's per-layer costs apply
        if i == len(ops) or layer_of(ops[i].name) != layer_of(ops[start].name):
            run = tuple(ops[start:i])
            parts.append(Part(run, layer0=-1 if layer_of(run[0].name) else None))
            start = i
    first = _first_attention(parts)
    costed = [coster.cost(p, first_step=(j == first)) for j, p in enumerate(parts)]
    sections = [(replace(c, part=replace(c.part, layer0=None)), 1.0, "") for c in costed]
    timed = _seq(costed)
    total_s = timed.end if scenario is not None else timed.gpu
    busy = timed.gpu
    pred = Prediction(
        build=lambda: _rows(sections, []),
        total_ms=total_s * 1e3,
        memory_capacity=gpu.hbm_bytes,
        gpu=gpu.name,
        scenario=asdict(scenario) if scenario is not None else {},
        extra=_extra(scenario, gpu, system, len(ops), busy, total_s, timed.host),
    )
    pred.hfu = _hfu_of_ops(sum(c.flops for c in costed), total_s, gpu, costed)
    _host_warning(pred, scenario, gpu, len(ops), busy, total_s, timed.host)
    return pred


def _hfu_of_ops(flops: float, total_s: float, gpu: GpuSpec, costed: list[Costed]) -> float | None:
    dtypes = {r[2] for c in costed for r in c.rows} - {""}
    if len(dtypes) != 1 or total_s <= 0:
        return None
    peak = _peak(gpu, dtypes.pop())
    return flops / (total_s * peak) if peak else None


def _peak(gpu: GpuSpec, dtype: str) -> float | None:
    try:
        return gpu.peak(dtype)  # type: ignore[arg-type]
    except (KeyError, InputError):  # no such rate on this GPU: no MFU, not an error here
        return None


def _extra(sc: Scenario | None, gpu: GpuSpec, system: SystemSpec | None, kernels: int,
           busy: float, total: float, host: float) -> dict[str, Any]:  # fmt: skip
    from gpuperf.step.cost import HostRules

    rules = HostRules.of(sc, gpu, system)  # the rules the step was costed with
    d = rules.per_kernel if sc is not None and not sc.cuda_graphs else (
        gpu.params.graph_launch_s if sc is not None else 0.0)  # fmt: skip
    return {
        "kernels": kernels,
        "gpu_busy_ms": busy * 1e3,
        "host_bound": 1.0 - busy / total if total > 0 else 0.0,
        "dispatch_us": d * 1e6,
        "host_ms": host * 1e3,
        "attn_plan_ms": rules.attn_plan * 1e3,  # cuDNN's plan of a new kv length, per step
    }


def _host_warning(pred: Prediction, sc: Scenario | None, gpu: GpuSpec, kernels: int,
                  busy: float, total: float, host: float) -> None:  # fmt: skip
    bound = pred.extra.get("host_bound", 1.0 - busy / total if total > 0 else 0.0)
    if sc is None or bound <= HOST_BOUND_WARN:
        return
    d = pred.extra["dispatch_us"] * 1e-6
    hint = ""
    if not sc.cuda_graphs and sc.mode != "train":  # training steps are not graphed here
        hint = "; CUDA graphs (--cuda-graphs) remove most of it"
    more = host - d * kernels
    extra = f", plus {more * 1e3:.3g} ms of other host work" if more > 1e-6 else ""
    plan = pred.extra["attn_plan_ms"] * 1e-3  # what the step was costed with
    if extra and 0 < plan <= more:  # more: one decode step's (generate: its last)
        # A step per new kv length: cuDNN's SDPA plans the shape (sdpa_decode_probe.json).
        extra += (f", of which {plan * 1e3:.3g} ms is cuDNN planning attention for a kv length "
                  "this process has not met (23-60 ms on the hosts measured: `gpuperf calibrate` "
                  "measures yours; --kv-lengths seen for a warmed-up process)")  # fmt: skip
    pred.warnings.append(
        f"host-bound: the GPU waits {bound:.0%} of the time for the host: "
        f"{kernels} kernels × {d * 1e6:.3g} µs of launches{extra}{hint}"
    )


def predict(cfg: ModelConfig, sc: Scenario, where: Placement) -> Prediction:
    """One step of `sc` (a whole generation for mode=generate), per GPU of the plan, with its
    track record (how sure it is: gpuperf.step.track_record) in extra."""
    from gpuperf.step import track_record

    if sc.mode == "generate":
        from gpuperf.step.generate import predict_generate

        pred = predict_generate(cfg, sc, where)
    else:
        pred = _predict_step(cfg, sc, where)
    _finish(pred, cfg, sc, where)
    pred.extra["track_record"] = track_record.for_model(
        pred.scenario, cfg.is_moe, where.gpu, sc.gpus, pred.extra.get("nodes", 1)
    )
    return pred


_COSTERS: dict[tuple, tuple[Any, Coster]] = {}


def coster_for(sc: Scenario, where: Placement, moe: float = 0.0) -> Coster:
    """A Coster shared by every prediction on the same GPU, system, host rules and NVLS setting
    (its caches hold op times and costed templates, which depend on nothing else)."""
    from gpuperf.step import cost

    # The time model is part of the key: what a Coster cached, it cached with it.
    rules = cost.HostRules.of(sc, where.gpu, where.system, moe)
    key = (where.gpu, id(where.system), rules, sc.nvls, sc.tp_allreduce, cost.ep_share(sc),
           cost._op_time)  # fmt: skip
    hit = _COSTERS.get(key)
    if hit is None or hit[0] is not where.system:
        if len(_COSTERS) > 32:
            _COSTERS.clear()
        hit = _COSTERS[key] = (where.system, Coster(where.gpu, where.system, sc, moe))
    return hit[1]


def _predict_step(cfg: ModelConfig, sc: Scenario, where: Placement) -> Prediction:
    from gpuperf.step.mfu import model_flops_per_token, recompute_flops_per_token
    from gpuperf.step.result import Prediction

    cost = step_cost(cfg, sc, where, coster_for(sc, where, moe_host(cfg)))
    total_s = cost.total_s
    kernels = cost.kernels
    pred = Prediction(
        build=lambda: _rows(cost.sections(), cost.extra_rows),
        total_ms=total_s * 1e3,
        gpu=where.gpu.name,
        memory=cost.memory,
        extra=_extra(sc, where.gpu, where.system, kernels, cost.busy_s, total_s, cost.host_s),
    )
    # cuDNN's plan of a new KV length is paid by a part whose first repeat differs from the
    # rest; none when no attention runs over a growing cache (a sliding window's is fixed)
    if pred.extra["attn_plan_ms"] and not any(
        c.tpl.first is not c.tpl.once for c, _, _ in cost.sections()
    ):
        pred.extra["attn_plan_ms"] = 0.0
    pred.extra["breakdown_ms"] = {k: v * 1e3 for k, v in cost.breakdown.items() if v}
    pred.extra["host_bound"] = cost.breakdown["host"] / total_s if total_s > 0 else 0.0
    if sc.parallel:
        pred.extra["pacing_stage"] = cost.stage
    _host_warning(pred, sc, where.gpu, kernels, cost.busy_s, total_s, cost.host_s)
    per_token, pred.mfu_convention = model_flops_per_token(cfg, sc)
    redo = recompute_flops_per_token(cfg, sc)
    throughput(pred, where.gpu, sc, sc.tokens, sc.tokens, per_token, redo, total_s, cfg=cfg)
    return pred


def rates(gpu: GpuSpec, sc: Scenario, total_s: float, tokens: int, out_tokens: int,
          per_token: float, redo_per_token: float = 0.0) -> tuple[float, float | None,
                                                                   float | None]:  # fmt: skip
    """(tokens/s over all replicas, MFU, HFU): MFU = model FLOPs of one replica's `tokens` over
    the GPUs that hold the replica (tp·pp·cp) at their dense peak; HFU adds recomputed FLOPs."""
    tps = out_tokens * sc.dp / total_s
    peak = _peak(gpu, sc.dtype)
    if not peak:
        return tps, None, None
    denom = total_s * peak * sc.model_parallel
    return tps, per_token * tokens / denom, (per_token + redo_per_token) * tokens / denom


def throughput(pred: Prediction, gpu: GpuSpec, sc: Scenario, tokens: int, out_tokens: int,
               per_token: float, redo_per_token: float = 0.0,
               total_s: float | None = None, *, cfg: ModelConfig) -> None:  # fmt: skip
    """Set the Prediction's tokens/s, MFU and HFU (see rates); over 100%, warn with the cause
    (step.mfu.over_peak_cause of cfg)."""
    total_s = pred.total_ms * 1e-3 if total_s is None else total_s
    got = rates(gpu, sc, total_s, tokens, out_tokens, per_token, redo_per_token)
    pred.tokens_per_s, pred.mfu, pred.hfu = got
    pred.extra["tokens_per_s_per_gpu"] = pred.tokens_per_s / sc.gpus
    if (pred.hfu or 0.0) > 1.0:  # the convention's count, not the kernels': see step.mfu
        from gpuperf.step.mfu import over_peak_cause

        pred.warnings.append(
            f"MFU {pred.mfu:.0%} / HFU {pred.hfu:.0%} is over 100% by the convention, not the "
            f"GPU: {over_peak_cause(cfg, sc)}; the ops' own FLOPs stay under the peak"
        )


def _finish(pred: Prediction, cfg: ModelConfig, sc: Scenario, where: Placement) -> None:
    """Model name, scenario, the positions warning, memory against the one capacity rule."""
    from gpuperf.step.memory import over, total_bytes, usable_bytes
    from gpuperf.workloads.config import quantization_warning

    pred.model = getattr(cfg, "name", "") or "model"
    pred.scenario = asdict(sc)
    if sc.parallel or where.system is not None:
        pred.extra["plan"] = sc.label()
        pred.extra["gpus"] = sc.gpus
        pred.extra["nodes"] = where.nodes
        if where.system is not None:
            pred.extra["system"] = where.system.name
    longest = {"decode": sc.ctx + 1, "generate": sc.seq + sc.new_tokens - 1}.get(sc.mode, sc.seq)
    limit = getattr(cfg, "max_position_embeddings", None)
    if limit and longest > limit:
        pred.warnings.append(
            f"sequences of {longest} tokens exceed the model's {limit} positions "
            "(max_position_embeddings): the prediction extrapolates"
        )
    quant = quantization_warning(cfg, sc.dtype, sc.weight_dtype, sc.mode == "train")
    if quant:
        pred.warnings.append(quant)
    capacity = usable_bytes(where.gpu)
    pred.memory_capacity = capacity
    need = total_bytes(pred.memory)
    pred.fits = need <= capacity
    if not pred.fits:
        pred.warnings.insert(0, f"does not fit: {over(pred.memory, capacity)}")
