"""Plan search: enumerate tp, pp, dp, ep, micro-batch, ZeRO stage, recomputation and schedule
for a model on N GPUs, drop what does not fit, rank by step time, and say why the best wins.

Every plan that fits is costed by the step engine that `gpuperf predict` uses (step.run.Engine),
so a plan's time here is its time there, to the bit; a plan whose busiest stage does not fit is
refused on its memory alone. One Engine serves the whole search: each layer,
collective and Part is costed once, the rest is arithmetic (benchmarks/search_speed.py).
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuperf.errors import InputError
from gpuperf.hardware.spec import SystemSpec
from gpuperf.step.memory import total_bytes, usable_bytes
from gpuperf.step.mfu import model_flops_per_token
from gpuperf.step.plan import place
from gpuperf.step.run import Engine, StepCost, predict, rates
from gpuperf.step.search_workers import evaluate_all
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.scenario import Scenario

if TYPE_CHECKING:
    from gpuperf.step.result import Prediction

MICRO_BATCHES = (1, 2, 4, 8, 16)
ZERO_STAGES = (0, 1, 2, 3)
# The search's recomputation choices: Megatron's selective for fused and eager layers (as it
# always searched them), torchtitan's per-op policy for compiled ones (impl=compile).
SEARCH_RECOMPUTE = ("none", "selective", "full")
COMPILE_RECOMPUTE = ("none", "op", "full")


@dataclass(frozen=True, slots=True)
class Ranked:
    """One plan's result: its scenario, the step's numbers, throughput and memory per GPU."""

    scenario: Scenario
    cost: StepCost | None  # None: refused on memory before its time was costed (fits False)
    tokens_per_s: float
    mfu: float
    tflops_per_gpu: float  # model FLOPs per GPU per second, in TFLOP/s
    fits: bool

    @property
    def step_time(self) -> float:
        return self.cost.total_s

    @property
    def breakdown(self) -> dict[str, float]:
        return self.cost.breakdown

    @property
    def memory_total(self) -> float:
        return total_bytes(self.cost.memory)

    def label(self) -> str:
        return self.scenario.label()

    def summary(self) -> dict[str, Any]:
        """The numbers `gpuperf search` shows for the plan (seconds, percents, GiB)."""
        b = self.breakdown
        comm = sum(v for k, v in b.items() if k.endswith("_comm"))
        return {
            "label": self.label(),
            "step_time_s": self.step_time,
            "tokens_per_s": self.tokens_per_s,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu_pct": 100 * self.mfu,
            "bubble_pct": 100 * b.get("bubble", 0.0) / self.step_time,
            "comm_pct": 100 * comm / self.step_time,
            "memory_gib": self.memory_total / 2**30,
        }

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {
            "scenario": asdict(self.scenario),
            "label": self.label(),
            "step_time_ms": self.step_time * 1e3,
            "breakdown_ms": {k: v * 1e3 for k, v in self.breakdown.items()},
            "memory": self.cost.memory,
            "memory_total": self.memory_total,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "fits": self.fits,
        }


@dataclass(frozen=True, slots=True)
class SearchResult:
    ranked: list[Ranked]  # fitting plans, fastest first (at most `top`)
    evaluated: int
    fitting: int
    seconds: float  # the plans' costing only (plans_per_s): not `best`'s prediction
    why: list[str]
    model: str = ""
    system: str = ""
    gpus: int = 0
    # The fastest plan as `gpuperf predict` predicts it (its total_ms is ranked[0]'s step time):
    # its op rows, memory and MFU are what the JSON contract asks of every command.
    best: Prediction | None = None

    @property
    def plans_per_s(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else float("inf")

    def to_json(self) -> dict[str, Any]:
        """The `--format json` object: the best plan's Prediction.to_json() (total_ms, ops,
        memory, MFU, ...: the ARCHITECTURE contract), plus the search's own keys."""
        from gpuperf.fileio import json_safe

        best = self.best.to_json() if self.best is not None else {}
        plans = [{**r.summary(), **r.to_dict()} for r in self.ranked]
        return {**best, **json_safe({
            "model": self.model, "system": self.system, "gpus": self.gpus,
            "evaluated": self.evaluated, "fitting": self.fitting, "plans_per_s": self.plans_per_s,
            "why": self.why, "plans": plans,
        })}  # fmt: skip


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_plans(
    cfg: ModelConfig, system: SystemSpec, gpus: int, *, mode: str = "train",
    global_batch: int = 1, seq: int = 2048, batch: int = 1, ctx: int = 2048,
    impl: str = "fused", fixed: dict | None = None,
) -> Iterator[Scenario]:  # fmt: skip
    """Every plan shape worth trying; ones the model cannot take are filtered later. Training
    splits `global_batch`, inference `batch`, over the data-parallel replicas (a dp that does not
    divide it is skipped)."""
    for spec in plan_specs(cfg, system, gpus, mode=mode, global_batch=global_batch, seq=seq,
                           batch=batch, ctx=ctx, impl=impl, fixed=fixed):  # fmt: skip
        plan = _scenario(spec)
        if plan is not None:
            yield plan


# Options a search holds fixed over its plans (api.search's `fixed`), and what a plan needs for
# each to apply: the others run without it (a plan of ep = 1 sends no tokens, so it has no
# dispatcher; full recompute runs without EP overlap, as Megatron-Core does).
FIXED = ("dtype", "attn", "grad_dtype", "optimizer", "dp_overlap", "tp_overlap",
         "moe_dispatcher", "ep_overlap", "moe_imbalance")  # fmt: skip
_APPLIES = {"dp_overlap": lambda tp, dp, ep, rc: dp > 1,
            "tp_overlap": lambda tp, dp, ep, rc: tp > 1,
            "moe_dispatcher": lambda tp, dp, ep, rc: ep > 1,
            "moe_imbalance": lambda tp, dp, ep, rc: ep > 1,
            "ep_overlap": lambda tp, dp, ep, rc: ep > 1 and rc != "full"}  # fmt: skip


def _fixed_for(fixed: dict, tp: int, dp: int, ep: int, rc: str) -> dict:
    """The fixed options that apply to a plan of these degrees and recomputation (_APPLIES)."""
    return {k: v for k, v in fixed.items() if k not in _APPLIES or _APPLIES[k](tp, dp, ep, rc)}


def plan_specs(
    cfg: ModelConfig, system: SystemSpec, gpus: int, *, mode: str = "train",
    global_batch: int = 1, seq: int = 2048, batch: int = 1, ctx: int = 2048,
    impl: str = "fused", fixed: dict | None = None,
) -> Iterator[dict]:  # fmt: skip
    """enumerate_plans' plans as Scenario keyword arguments (not yet checked: Scenario refuses
    some; the search builds them in the process that costs them). `fixed`: Scenario fields held
    over every plan to which each applies (FIXED, _APPLIES)."""
    fixed = fixed or {}
    gpn = system.gpus_per_node
    tps = [t for t in _divisors(min(gpus, gpn)) if cfg.heads % t == 0 and gpus % t == 0]
    experts = _divisors(cfg.num_experts) if cfg.is_moe else [1]
    recomputes = SEARCH_RECOMPUTE
    if impl == "compile":  # compiled layers: data and pipeline parallelism (Scenario's rule)
        tps, experts, recomputes = [1], [1], COMPILE_RECOMPUTE
    for tp in tps:
        # Stages need not split the layers evenly (the slowest sets the pace, as Megatron's
        # uneven first and last stages): any pp of at least one layer a stage.
        for pp in _divisors(gpus // tp):
            if pp > cfg.layers:
                continue
            dp = gpus // (tp * pp)
            for ep in (e for e in experts if dp % e == 0):
                base = dict(mode=mode, tp=tp, pp=pp, dp=dp, ep=ep, seq=seq, impl=impl)
                if mode != "train":  # `batch` sequences over all replicas
                    if batch % dp == 0:
                        yield dict(base, batch=batch // dp, ctx=ctx,
                                   **_fixed_for(fixed, tp, dp, ep, "none"))  # fmt: skip
                    continue
                if global_batch % dp:
                    continue
                schedules = [("1f1b", 1)] + ([("interleaved", 2)] if pp > 1 else [])
                for mb in MICRO_BATCHES:
                    if (global_batch // dp) % mb:
                        continue
                    for zero in ZERO_STAGES if dp > 1 else (0,):
                        for rc in recomputes:
                            held = _fixed_for(fixed, tp, dp, ep, rc)
                            for sched, v in schedules:
                                yield dict(base, global_batch=global_batch, micro_batch=mb,
                                           zero=zero, recompute=rc, schedule=sched,
                                           virtual_stages=v, **held)  # fmt: skip


def no_split(cfg: ModelConfig, system: SystemSpec, gpus: int, mode: str, global_batch: int,
             batch: int) -> str:  # fmt: skip
    """Why plan_specs has no plan: the degrees that break each of its rules (tp must divide the
    heads, pp be at most the layers, dp divide the batch it splits), from every split of `gpus`
    into tp·pp·dp. For the error message only: the search never calls it."""
    gpn = system.gpus_per_node
    total, what = (global_batch, "global-batch") if mode == "train" else (batch, "batch")
    bad: dict[str, set[int]] = {"tp": set(), "pp": set(), "dp": set()}
    for tp in (t for t in _divisors(min(gpus, gpn)) if gpus % t == 0):
        for pp in _divisors(gpus // tp):
            dp = gpus // (tp * pp)
            rule = (
                "tp" if cfg.heads % tp else "pp" if pp > cfg.layers else "dp" if total % dp else ""
            )
            if rule:
                bad[rule].add({"tp": tp, "pp": pp, "dp": dp}[rule])
    whole = {"tp": f"does not divide its {cfg.heads} heads",
             "pp": f"exceeds its {cfg.layers} layers",
             "dp": f"does not divide the --{what} {total}"}  # fmt: skip
    return "; ".join(f"{k}={_either(sorted(v))} {whole[k]}" for k, v in bad.items() if v)


def _either(values: list[int]) -> str:
    """'3', '3 or 6', '3, 6 or 12'."""
    *head, last = values
    return f"{', '.join(map(str, head))} or {last}" if head else str(last)


def _scenario(spec: dict) -> Scenario | None:
    try:
        return Scenario(**spec)
    except InputError:
        return None


def evaluate(engine: Engine, sc: Scenario, nodes: int | None) -> Ranked:
    """One plan through the step engine (InputError when the model or system refuses it)."""
    where = place(engine.cfg, sc, engine.gpu, engine.system, nodes)
    return _ranked(engine, sc, engine.cost(sc, where))


def _ranked(engine: Engine, sc: Scenario, cost: StepCost) -> Ranked:
    per_token = model_flops_per_token(engine.cfg, sc)[0]
    tps, mfu, _ = rates(engine.gpu, sc, cost.total_s, sc.tokens, sc.tokens, per_token)
    fits = total_bytes(cost.memory) <= usable_bytes(engine.gpu)
    peak = engine.gpu.peak_flops.get(sc.dtype, 0.0)
    return Ranked(sc, cost, tps, mfu or 0.0, (mfu or 0.0) * peak / 1e12, fits)


@contextlib.contextmanager
def no_cycle_collection() -> Iterator[None]:
    """Python's cycle collector off while plans are costed: the search allocates many small
    objects that reference counting frees, and the collector's passes over the engine's growing
    caches cost a search of Mixtral's 6,000 plans a quarter of its time. What the search made
    then goes to the oldest generation unscanned (freeze, then unfreeze): else the first young
    collection after it walks every object the search kept (20 ms after Mixtral's search). A
    full collection, when the interpreter next runs one, still sees them. Not where the caller
    keeps objects frozen itself (unfreeze would release them too)."""
    was = gc.isenabled()
    caller_froze = gc.get_freeze_count() > 0
    gc.disable()
    try:
        yield
    finally:
        if not caller_froze:
            gc.freeze()
            gc.unfreeze()
        if was:
            gc.enable()


def _load_engine() -> None:
    """Load the modules that cost kernels, which the engine imports on first use: a search's
    clock times plans, not module loading (which `gpuperf search` pays once either way)."""
    from gpuperf.perfmodel import comm, gemm_grouped, gemm_quant, roofline  # noqa: F401
    from gpuperf.workloads import dp_ops, moe_layers, transformer, transformer_train  # noqa: F401

    roofline._dispatch()


def _evaluate(engine: Engine, spec: dict, nodes: int | None) -> Ranked:
    """A plan spec through the engine (InputError when the Scenario, model or system refuses).
    A plan whose busiest stage does not fit the GPU is refused on its memory alone, before its
    time is costed: the search keeps only plans that fit."""
    from gpuperf.step.memory import busiest
    from gpuperf.workloads.step_work import build

    sc = Scenario(**spec)
    where = place(engine.cfg, sc, engine.gpu, engine.system, nodes)
    memory = busiest(engine.cfg, sc, where.groups)
    if total_bytes(memory) > usable_bytes(engine.gpu):
        return Ranked(sc, None, 0.0, 0.0, 0.0, False)  # type: ignore[arg-type]
    work = build(engine.cfg, sc, where.groups)
    return _ranked(engine, sc, engine.cost(sc, where, work, memory))


def search(
    cfg: ModelConfig, system: SystemSpec, gpus: int, *, mode: str = "train",
    global_batch: int = 1, seq: int = 2048, batch: int = 1, ctx: int = 2048, top: int = 10,
    impl: str = "fused", fixed: dict | None = None,
) -> SearchResult:  # fmt: skip
    """Rank the plans that fit by step time (see module docstring)."""
    nodes = nodes_for(system, gpus)
    engine = Engine(cfg, system.gpu, system)
    _load_engine()
    start = time.perf_counter()
    specs = list(plan_specs(cfg, system, gpus, mode=mode, global_batch=global_batch, seq=seq,
                            batch=batch, ctx=ctx, impl=impl, fixed=fixed))  # fmt: skip
    # `explain` compares the best with the runner-up: keep two even when one is shown.
    with no_cycle_collection():
        evaluated, fitting, found = evaluate_all(engine, specs, nodes, max(top, 2), _evaluate)
    found.sort(key=lambda f: (f[1].step_time, f[0]))  # ties: in the order enumerated
    results = [r for _, r in found]
    seconds = time.perf_counter() - start
    if not specs:
        raise InputError(f"no plan of {cfg.name} can be built on {gpus} GPUs of {system.name}, "
                         "as every split of them into tp·pp·dp breaks a rule: "
                         f"{no_split(cfg, system, gpus, mode, global_batch, batch)}")  # fmt: skip
    if not results:
        raise InputError(f"no plan of {cfg.name} runs on {gpus} GPUs of {system.name}: "
                         f"{why_none(engine, specs, nodes)}")  # fmt: skip
    best = results[0].scenario
    prediction = predict(cfg, best, place(cfg, best, system.gpu, system, nodes))
    return SearchResult(results[:top], evaluated, fitting, seconds, explain(results),
                        cfg.name, system.name, gpus, prediction)  # fmt: skip


def why_none(engine: Engine, specs: list[dict], nodes: int | None) -> str:
    """Why none of `specs` runs (the search's error path only): how many a rule refuses, with
    the first rule, and how many do not fit, with the smallest's memory against the GPU. Only
    plans that fit are costed (as the search costs them), and the smallest that does not: a
    rule that refuses it too (fp8 on an A100) refuses every plan, whatever its size."""
    from gpuperf.step.memory import busiest, over
    from gpuperf.workloads.step_work import build

    capacity = usable_bytes(engine.gpu)
    smallest: tuple[float, dict, Scenario, Any] | None = None
    big = ruled = 0
    rule = ""
    for spec in specs:
        try:
            sc = Scenario(**spec)
            where = place(engine.cfg, sc, engine.gpu, engine.system, nodes)
            memory = busiest(engine.cfg, sc, where.groups)
            need = total_bytes(memory)
            if need <= capacity:
                engine.cost(sc, where, build(engine.cfg, sc, where.groups), memory)
                continue  # (the search found none such: it dropped this one for a rule)
        except InputError as exc:
            ruled, rule = ruled + 1, rule or str(exc)
            continue
        big += 1
        if smallest is None or need < smallest[0]:
            smallest = (need, memory, sc, where)
    if smallest is not None:
        _, memory, sc, where = smallest
        try:
            engine.cost(sc, where, build(engine.cfg, sc, where.groups), memory)
        except InputError as exc:  # the smallest too: a rule no size escapes
            return f"every plan is refused: {rule or exc}"
    parts = []
    if ruled:
        parts.append(f"{ruled} of {len(specs)} plans are refused: {rule}")
    if smallest is not None:
        _, memory, sc, _ = smallest
        parts.append(f"{big} of {len(specs)} do not fit (the smallest, {sc.label()}, "
                     f"{over(memory, capacity)}); add GPUs or lower the batch")  # fmt: skip
    return "; ".join(parts) or "every plan was refused"


def nodes_for(system: SystemSpec, gpus: int) -> int | None:
    """The nodes `gpus` GPUs of `system` fill (None: part of one node)."""
    gpn = system.gpus_per_node
    if gpus > gpn and gpus % gpn:
        raise InputError(f"--gpus {gpus} spans nodes but is not a multiple of {gpn} GPUs per node")
    return max(1, -(-gpus // gpn)) if gpus >= gpn else None


def explain(ranked: list[Ranked]) -> list[str]:
    """Why the best plan wins: against the runner-up and the best plan of each other (tp, pp)."""
    best = ranked[0]
    lines = [f"best: {best.label()}: {best.step_time:.3g} s/step, MFU {100 * best.mfu:.1f}%"]
    rivals: list[Ranked] = []
    seen = {(best.scenario.tp, best.scenario.pp)}
    for r in ranked[1:]:
        key = (r.scenario.tp, r.scenario.pp)
        if not rivals or key not in seen:
            rivals.append(r)
            seen.add(key)
        if len(rivals) >= 3:
            break
    for r in rivals:
        diffs = sorted(
            ((r.breakdown[k] - best.breakdown.get(k, 0.0), k) for k in r.breakdown),
            reverse=True,
        )
        small = 0.005 * best.step_time
        reasons = [f"{k} +{d:.3g} s" for d, k in diffs if d > small][:3]
        saves = [f"{k} −{-d:.3g} s" for d, k in reversed(diffs) if d < -small][:2]
        slower = 100 * (r.step_time / best.step_time - 1)
        because = ", ".join(reasons) if reasons else "about the same costs"
        if saves:  # what the rival spends less on, so the net is its step time's
            because += "; saves " + ", ".join(saves)
        lines.append(f"vs {r.label()}: {slower:.1f}% slower ({because})")
    return lines
