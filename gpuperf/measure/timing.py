"""One timer for every measurement: kernels, model layers, collectives.

Follows triton.testing.do_bench and nccl-tests:
- warm-up and repeats are time budgets (ms), turned into iteration counts from a short estimate and
  clamped to [min_reps, max_reps];
- on CUDA the L2 cache is flushed (a write of a buffer >= 2x L2) before every iteration, outside
  the timed region; one CUDA event pair per iteration; raw samples are kept;
- kernels of a few µs are captured `batch` times into a CUDA graph and the replay is timed and
  divided by `batch` (event resolution is ~0.5 µs and launch gaps would dominate). Inside one
  replay the L2 is flushed only before the first call, so this mode measures warm-L2 calls;
- on the CPU: time.perf_counter per iteration, no flush.

Median is the reported time; p10/p90 give the spread. torch is imported lazily.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

TIMING_METHOD_VERSION = "gpuperf-timer/2"  # 2: L2 flushed by a read, not a write
"""Bump when the timing method changes in a way that changes numbers (stamped into results)."""

GRAPH_THRESHOLD_S = 20e-6  # kernels shorter than this are timed as a batch in a CUDA graph
GRAPH_BATCH_TARGET_S = 200e-6  # a graph replay lasts about this long


@dataclass(frozen=True, slots=True)
class Budget:
    """How long to warm up and repeat, in milliseconds, and the bounds on iteration counts."""

    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    min_reps: int = 5
    max_reps: int = 1000
    flush_l2: bool = True
    graphs: bool = True  # allow CUDA-graph batching of short kernels
    # "read" leaves L2 clean; "write" (as triton's do_bench) leaves it dirty: for comparisons.
    flush_by: str = "read"


@dataclass(frozen=True, slots=True)
class Timing:
    """Seconds per call: median and 10th/90th percentiles of `n` samples; `method` says how."""

    median_s: float
    p10_s: float
    p90_s: float
    n: int
    samples: tuple[float, ...] = field(repr=False)
    method: str

    @property
    def spread_pct(self) -> float:
        """(p90 - p10) / median, in percent."""
        return 100.0 * (self.p90_s - self.p10_s) / self.median_s if self.median_s else 0.0

    def to_dict(self, with_samples: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "median_s": self.median_s,
            "p10_s": self.p10_s,
            "p90_s": self.p90_s,
            "n": self.n,
            "method": self.method,
        }
        if with_samples:
            d["samples"] = list(self.samples)
        return d


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default), q in [0, 1]."""
    if not values:
        raise ValueError("quantile of no values")
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(samples: Sequence[float], method: str) -> Timing:
    """Timing from raw per-call samples (seconds)."""
    return Timing(
        median_s=quantile(samples, 0.5),
        p10_s=quantile(samples, 0.1),
        p90_s=quantile(samples, 0.9),
        n=len(samples),
        samples=tuple(samples),
        method=method,
    )


def iterations(budget_ms: float, per_iter_s: float, lo: int, hi: int) -> int:
    """How many iterations fit in budget_ms at per_iter_s each, clamped to [lo, hi]."""
    n = int(budget_ms * 1e-3 / max(per_iter_s, 1e-9))
    return max(lo, min(hi, n))


def time_fn(
    fn: Callable[[], Any],
    device: str,
    budget: Budget | None = None,
    *,
    counts: tuple[int, int] | None = None,
) -> Timing:
    """Time fn() on `device` ("cuda", "cuda:1" or "cpu").

    `counts=(warmup, reps)` fixes the iteration counts (collectives: every rank must run the same
    number); otherwise they follow the budget. fn must be idempotent (it is called many times).
    """
    budget = budget or Budget()
    if device.startswith("cuda"):
        return _time_cuda(fn, device, budget, counts)
    return _time_cpu(fn, budget, counts)


def _time_cpu(fn: Callable[[], Any], budget: Budget, counts: tuple[int, int] | None) -> Timing:
    if counts is None:
        fn()  # first call: allocations, lazy init
        t0 = time.perf_counter()
        for _ in range(3):
            fn()
        est = (time.perf_counter() - t0) / 3
        n_warm = iterations(budget.warmup_ms, est, 1, budget.max_reps)
        n_rep = iterations(budget.rep_ms, est, budget.min_reps, budget.max_reps)
    else:
        n_warm, n_rep = counts
    for _ in range(n_warm):
        fn()
    samples = []
    for _ in range(n_rep):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return summarize(samples, f"{TIMING_METHOD_VERSION} cpu perf_counter")


_FLUSH: dict[str, Any] = {}


def l2_flush_buffer(device: str) -> Any:
    """A uint8 buffer of 2x the device's L2 (at least 64 MiB), allocated once per device."""
    import torch

    dev = torch.device(device)
    key = str(dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device()))
    if key not in _FLUSH:
        l2 = int(getattr(torch.cuda.get_device_properties(key), "L2_cache_size", 0) or 0)
        _FLUSH[key] = torch.empty(max(2 * l2, 64 * 2**20), dtype=torch.uint8, device=key)
    return _FLUSH[key]


def _time_cuda(
    fn: Callable[[], Any], device: str, budget: Budget, counts: tuple[int, int] | None
) -> Timing:
    import torch

    flush = l2_flush_buffer(device) if budget.flush_l2 else None

    def clear() -> None:
        # Evict the op's data from L2 by *reading* a buffer twice the L2: a write (as do_bench's
        # zero_()) would leave the L2 full of dirty lines that the timed kernel must write back
        # first, adding ~10-20 us to every mid-size kernel on an H100 (seen in our first sweep).
        if flush is not None:
            if budget.flush_by == "write":
                flush.zero_()
            else:
                flush.sum(dtype=torch.int64)

    fn()
    torch.cuda.synchronize(device)
    if counts is None:
        # Estimate: per-call time (events around the call) and per-iteration cost incl. flush.
        e = [torch.cuda.Event(enable_timing=True) for _ in range(3 * 5)]
        for i in range(5):
            e[3 * i].record()
            clear()
            e[3 * i + 1].record()
            fn()
            e[3 * i + 2].record()
        torch.cuda.synchronize(device)
        call = sorted(e[3 * i + 1].elapsed_time(e[3 * i + 2]) for i in range(5))[2] * 1e-3
        whole = sorted(e[3 * i].elapsed_time(e[3 * i + 2]) for i in range(5))[2] * 1e-3
        if budget.graphs and call < GRAPH_THRESHOLD_S:
            graphed = _graph_batch(fn, device, call)
            if graphed is not None:
                replay, batch = graphed
                per_iter = whole - call + batch * call
                n_warm = iterations(budget.warmup_ms, per_iter, 1, budget.max_reps)
                n_rep = iterations(budget.rep_ms, per_iter, budget.min_reps, budget.max_reps)
                samples = _event_loop(replay, clear, n_warm, n_rep, device)
                return summarize(
                    [s / batch for s in samples],
                    f"{TIMING_METHOD_VERSION} cuda-graph x{batch}, l2 flush per replay",
                )
        n_warm = iterations(budget.warmup_ms, whole, 1, budget.max_reps)
        n_rep = iterations(budget.rep_ms, whole, budget.min_reps, budget.max_reps)
    else:
        n_warm, n_rep = counts
    samples = _event_loop(fn, clear, n_warm, n_rep, device)
    flushed = "l2 flush" if flush is not None else "no flush"
    return summarize(samples, f"{TIMING_METHOD_VERSION} cuda events, {flushed}")


def _event_loop(
    fn: Callable[[], Any], clear: Callable[[], None], n_warm: int, n_rep: int, device: str
) -> list[float]:
    """n_warm untimed calls, then n_rep calls each between its own event pair, flush before."""
    import torch

    for _ in range(n_warm):
        clear()
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for i in range(n_rep):
        clear()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize(device)
    return [s.elapsed_time(e) * 1e-3 for s, e in zip(starts, ends, strict=True)]


def _graph_batch(
    fn: Callable[[], Any], device: str, call_s: float
) -> tuple[Callable[[], Any], int] | None:
    """Capture `batch` calls of fn into one CUDA graph; None when fn cannot be captured."""
    import torch

    batch = max(2, min(1000, int(GRAPH_BATCH_TARGET_S / max(call_s, 1e-7))))
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graphs advises
            for _ in range(3):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(batch):
                fn()
        graph.replay()
        torch.cuda.synchronize(device)
    except Exception:  # not capturable (host syncs, unsupported kernels): fall back to events
        torch.cuda.synchronize(device)
        return None
    return graph.replay, batch
