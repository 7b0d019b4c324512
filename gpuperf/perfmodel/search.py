"""Plan search: enumerate tp, pp, dp, ep, micro-batch, ZeRO stage, recompute and schedule for a
model on N GPUs, drop what does not fit, rank by step time, and say why the best wins.

One Evaluator is shared by every plan, so each (tp, micro-batch) layer is costed once and each
collective size once; the rest is arithmetic (benchmarks/search_speed.py measures plans/s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from gpuperf.errors import InputError
from gpuperf.hardware.spec import SystemSpec
from gpuperf.perfmodel.parallel import RECOMPUTE, ParallelPlan, PlanResult, validate
from gpuperf.perfmodel.parallel_cost import Evaluator
from gpuperf.workloads.config import ModelConfig

MICRO_BATCHES = (1, 2, 4, 8, 16)
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True, slots=True)
class SearchResult:
    ranked: list[PlanResult]  # fitting plans, fastest first (at most `top`)
    evaluated: int
    fitting: int
    seconds: float
    why: list[str]

    @property
    def plans_per_s(self) -> float:
        return self.evaluated / self.seconds if self.seconds > 0 else float("inf")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_plans(
    cfg: ModelConfig, system: SystemSpec, gpus: int, *, mode: str = "train",
    global_batch: int = 1, seq: int = 2048, batch: int = 1, ctx: int = 2048,
) -> Iterator[ParallelPlan]:  # fmt: skip
    """Every plan shape worth trying; invalid ones are filtered later by validate()."""
    gpn = system.gpus_per_node
    tps = [t for t in _divisors(min(gpus, gpn)) if cfg.heads % t == 0]
    experts = _divisors(cfg.num_experts) if cfg.is_moe else [1]
    for tp in tps:
        for pp in _divisors(cfg.layers):
            if gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            for ep in (e for e in experts if dp % e == 0):
                base = dict(mode=mode, tp=tp, pp=pp, dp=dp, ep=ep, seq=seq,
                            sequence_parallel=tp > 1)  # fmt: skip
                if mode != "train":
                    yield ParallelPlan(**base, batch=batch, ctx=ctx)  # type: ignore[arg-type]
                    continue
                schedules = [("1f1b", 1)] + ([("interleaved", 2)] if pp > 1 else [])
                for mb in MICRO_BATCHES:
                    if global_batch % (mb * dp):
                        continue
                    for zero in ZERO_STAGES:
                        for rc in RECOMPUTE:
                            for sched, v in schedules:
                                yield ParallelPlan(**base, micro_batch=mb,  # type: ignore[arg-type]
                                                   global_batch=global_batch, zero=zero,
                                                   recompute=rc, schedule=sched, v=v)  # fmt: skip


def search(
    cfg: ModelConfig, system: SystemSpec, gpus: int, *, mode: str = "train",
    global_batch: int = 1, seq: int = 2048, batch: int = 1, ctx: int = 2048, top: int = 10,
) -> SearchResult:  # fmt: skip
    """Rank the plans that fit by step time (see module docstring)."""
    gpn = system.gpus_per_node
    if gpus > gpn and gpus % gpn:
        raise InputError(f"--gpus {gpus} spans nodes but is not a multiple of {gpn} GPUs per node")
    nodes = max(1, -(-gpus // gpn))
    ev = Evaluator(cfg, system)
    start = time.perf_counter()
    results: list[PlanResult] = []
    evaluated = 0
    for plan in enumerate_plans(cfg, system, gpus, mode=mode, global_batch=global_batch,
                                seq=seq, batch=batch, ctx=ctx):  # fmt: skip
        try:
            validate(cfg, plan, system, nodes if gpus >= gpn else None)
        except InputError:
            continue
        evaluated += 1
        r = ev.evaluate(plan, nodes)
        if r.fits:
            results.append(r)
    seconds = time.perf_counter() - start
    results.sort(key=lambda r: r.step_time)
    if not results:
        raise InputError(
            f"no plan of {cfg.name} fits on {gpus} GPUs of {system.name} "
            f"({evaluated} tried); add GPUs or lower the batch"
        )
    return SearchResult(results[:top], evaluated, len(results), seconds, explain(results))


def explain(ranked: list[PlanResult]) -> list[str]:
    """Why the best plan wins: against the runner-up and the best plan of each other (tp, pp)."""
    best = ranked[0]
    lines = [f"best: {best.plan.label()}: {best.step_time:.3g} s/step, MFU {100 * best.mfu:.1f}%"]
    rivals: list[PlanResult] = []
    seen = {(best.plan.tp, best.plan.pp)}
    for r in ranked[1:]:
        key = (r.plan.tp, r.plan.pp)
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
        reasons = [f"{k} +{d:.3g} s" for d, k in diffs if d > 0.005 * best.step_time][:3]
        slower = 100 * (r.step_time / best.step_time - 1)
        because = ", ".join(reasons) if reasons else "about the same costs"
        lines.append(f"vs {r.plan.label()}: {slower:.1f}% slower ({because})")
    return lines
