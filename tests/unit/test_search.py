"""Plan search: enumeration, filtering by memory, ranking, explanation, speed."""

from __future__ import annotations

import pytest

from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_system
from gpuperf.perfmodel.parallel import predict_plan
from gpuperf.perfmodel.search import enumerate_plans, search
from gpuperf.workloads.config import load_model

DGX_H100 = load_system("dgx-h100")
LLAMA70 = load_model("llama2-70b")


@pytest.fixture(scope="module")
def result():
    return search(LLAMA70, DGX_H100, 64, global_batch=1024, seq=4096, top=20)


def test_ranked_fitting_and_sorted(result):
    times = [r.step_time for r in result.ranked]
    assert times == sorted(times)
    assert all(r.fits for r in result.ranked)
    assert result.fitting < result.evaluated  # some plans of a 70B model do not fit
    assert all(r.plan.gpus == 64 for r in result.ranked)


def test_best_equals_predict_plan(result):
    best = result.ranked[0]
    again = predict_plan(LLAMA70, best.plan, DGX_H100, 8)
    assert again.step_time == pytest.approx(best.step_time)


def test_search_covers_the_issue_plan():
    plans = list(enumerate_plans(LLAMA70, DGX_H100, 64, global_batch=1024, seq=4096))
    labels = {p.label() for p in plans}
    assert "tp8 pp2 dp4 mb1 zero1 selective sp" in labels
    assert all(p.tp <= 8 for p in plans)  # TP stays inside a node


def test_explains_the_winner(result):
    assert result.why[0].startswith("best: " + result.ranked[0].plan.label())
    assert len(result.why) >= 2 and "slower" in result.why[1]


def test_speed_at_least_10k_plans_per_s_warm():
    search(LLAMA70, DGX_H100, 64, global_batch=1024, seq=4096)  # op models memoized
    res = search(LLAMA70, DGX_H100, 64, global_batch=1024, seq=4096)
    assert res.plans_per_s >= 10_000


def test_nothing_fits_is_an_input_error():
    with pytest.raises(InputError, match="fits"):
        search(LLAMA70, DGX_H100, 1, global_batch=8, seq=4096)
