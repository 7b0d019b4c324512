"""Serving targets: the highest request rate that meets latency targets, and how to split GPUs.

An SLO is "ttft=500ms,tpot=50ms": each key a metric (ttft, tpot, e2e) with an optional
percentile (ttft_p99; p90 when none is given), each value a time with its unit (ms or s: a bare
number is refused). The highest rate is found by bisection on the Poisson rate, each rate
simulated with the same seeded requests. With a number of GPUs, every tensor-parallel size that
divides it (and fits the model) is tried as GPUs / tp replicas behind a load balancer that
spreads requests evenly; the best split serves the most requests/s within the SLO. The Pareto
frontier is the set of (tokens/s per GPU, tokens/s per user) points, over splits and rates, that
no other point beats on both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuperf.errors import InputError, shown

METRICS = ("ttft", "tpot", "e2e")
BISECT_STEPS = 12
FRONTIER_RATES = 8  # rates per split sampled for the Pareto frontier


def parse_slo(text: str) -> dict[str, float]:
    """{"ttft_p90_ms": 500.0, ...} from "ttft=500ms,tpot=50ms" (module docstring)."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("--slo needs targets such as ttft=500ms,tpot=50ms")
    out: dict[str, float] = {}
    for item in text.split(","):
        m = re.fullmatch(r"\s*(ttft|tpot|e2e)(?:_p(50|90|99))?\s*=\s*([0-9.]+)\s*([a-z]*)\s*",
                         item, re.IGNORECASE)  # fmt: skip
        if not m:
            raise InputError(
                f"--slo {shown(item.strip())}: give metric=time, e.g. ttft=500ms, tpot_p99=50ms, "
                "e2e=10s (metrics ttft, tpot, e2e; percentiles p50, p90, p99)"
            )
        unit = m.group(4).lower()
        if unit not in ("ms", "s"):  # a bare number is 5 ms to one reader and 5 s to another
            got = f"unit {unit!r}" if unit else "no unit"
            raise InputError(f"--slo {shown(item.strip())}: {got}; give the time in ms or s, "
                             f"e.g. {m.group(1).lower()}={m.group(3)}ms")  # fmt: skip
        try:
            value = float(m.group(3)) * (1e3 if unit == "s" else 1.0)
        except ValueError:
            raise InputError(f"--slo {shown(item.strip())}: {m.group(3)!r} is not a number") \
                from None  # fmt: skip
        if not 0 < value < 1e9:
            raise InputError(f"--slo {item.strip()}: the time must be positive")
        key = f"{m.group(1).lower()}_p{m.group(2) or 90}_ms"
        if key in out:  # ttft=5ms,ttft=6ms: which one was meant?
            raise InputError(f"--slo names {key.removesuffix('_ms')} twice; give each target once")
        out[key] = value
    return out


def meets(summary: dict[str, Any], slo: dict[str, float]) -> bool:
    """Every target met (a metric no request has, TPOT of one-token answers, is vacuous)."""
    return all(summary[k] <= v or math.isnan(summary[k]) for k, v in slo.items())


@dataclass
class SplitResult:
    """One way to use the GPUs: tp per replica, replicas, the best rate and its numbers."""

    tp: int
    replicas: int
    rate: float  # requests/s over all replicas within the SLO (0: none)
    summary: dict[str, Any] | None
    points: list[dict[str, float]] = field(default_factory=list)  # for the frontier
    why: str = ""


def best_rate(run: Callable[[float], dict[str, Any]], slo: dict[str, float],
              ceiling: float) -> tuple[float, dict[str, Any] | None]:  # fmt: skip
    """The highest rate in (0, ceiling] whose run meets `slo`, and that run's summary."""
    lo, best = 0.0, None
    hi = ceiling
    top = run(hi)
    if meets(top, slo):
        return hi, top
    for _ in range(BISECT_STEPS):
        mid = (lo + hi) / 2
        s = run(mid)
        if meets(s, slo):
            lo, best = mid, s
        else:
            hi = mid
    return lo, best


def pareto(points: list[dict[str, float]]) -> list[dict[str, float]]:
    """The points no other point beats on both tokens/s per GPU and tokens/s per user."""
    pts = sorted(points, key=lambda p: (-p["tokens_per_s_per_gpu"], -p["tokens_per_s_per_user"]))
    out, best_user = [], -math.inf
    for p in pts:
        if p["tokens_per_s_per_user"] > best_user:
            out.append(p)
            best_user = p["tokens_per_s_per_user"]
    return out
