"""The timer: quantiles, budgets turned into iteration counts, CPU timing of a known sleep."""

import time

import pytest

from gpuperf.measure.timing import Budget, Timing, iterations, quantile, summarize, time_fn


def test_quantile_matches_numpy_linear_interpolation():
    xs = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert quantile(xs, 0.5) == 3.0
    assert quantile(xs, 0.0) == 1.0 and quantile(xs, 1.0) == 5.0
    assert quantile(xs, 0.1) == pytest.approx(1.4)  # numpy.quantile(xs, 0.1) = 1.4
    assert quantile([1.0, 2.0], 0.9) == pytest.approx(1.9)


def test_summarize_and_spread():
    t = summarize([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0], "m")
    assert t.median_s == 6.0 and t.p10_s == 2.0 and t.p90_s == 10.0 and t.n == 11
    assert t.spread_pct == pytest.approx(100 * 8 / 6)
    assert t.to_dict()["samples"][0] == 1.0
    assert "samples" not in t.to_dict(with_samples=False)


def test_iterations_fill_the_budget_within_bounds():
    assert iterations(100.0, 1e-3, 5, 1000) == 100  # 100 ms of 1 ms calls
    assert iterations(100.0, 1.0, 5, 1000) == 5  # a slow call still runs min_reps times
    assert iterations(100.0, 1e-9, 5, 1000) == 1000


class FakeClock:
    """perf_counter for the timer: time moves only when the timed function says so."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls = 0

    def perf_counter(self) -> float:
        return self.now

    def work(self) -> None:  # the function under test: 1 ms, then 3 ms, 1 ms, 3 ms, ...
        self.calls += 1
        self.now += 1e-3 if self.calls % 2 else 3e-3


def test_cpu_timer_times_each_call_and_sizes_the_loops_from_the_budget(monkeypatch):
    import gpuperf.measure.timing as timing

    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock)
    t = time_fn(clock.work, "cpu", Budget(warmup_ms=4, rep_ms=40, min_reps=5))
    # 1 first call, 3 to estimate (calls 2-4: 3+1+3 = 7 ms, so 7/3 ms each), then the budgets:
    # warm-up int(4 / 2.33) = 1 call, repeats int(40 / 2.33) = 17 calls, each its own sample.
    assert clock.calls == 1 + 3 + 1 + 17 and t.n == len(t.samples) == 17
    ms = [round(x * 1e3, 6) for x in t.samples]  # each call its own sample, not an average
    assert ms == [3.0 if call % 2 == 0 else 1.0 for call in range(6, 23)]
    assert t.median_s == pytest.approx(3e-3) and t.p10_s == pytest.approx(1e-3)  # 9 of 17 at 3
    assert isinstance(t, Timing) and "perf_counter" in t.method


def test_cpu_timer_uses_the_real_clock():
    t = time_fn(lambda: time.sleep(0.002), "cpu", Budget(warmup_ms=1, rep_ms=20, min_reps=5))
    assert t.p10_s >= 0.002  # sleep never returns early; no upper bound: CI boxes are loaded
    assert t.n == len(t.samples) >= 5


def test_fixed_counts_run_exactly_that_many_times():
    calls = []
    t = time_fn(lambda: calls.append(1), "cpu", counts=(3, 7))
    assert len(calls) == 10 and t.n == 7
