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


def test_cpu_timer_measures_a_known_sleep():
    t = time_fn(lambda: time.sleep(0.002), "cpu", Budget(warmup_ms=1, rep_ms=20, min_reps=5))
    assert isinstance(t, Timing)
    assert 0.002 <= t.median_s < 0.02  # sleep never returns early; a loaded CI box may be slow
    assert t.p10_s <= t.median_s <= t.p90_s
    assert t.n == len(t.samples) >= 5
    assert "perf_counter" in t.method


def test_fixed_counts_run_exactly_that_many_times():
    calls = []
    t = time_fn(lambda: calls.append(1), "cpu", counts=(3, 7))
    assert len(calls) == 10 and t.n == 7
