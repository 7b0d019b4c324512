"""Plan search: enumeration, filtering by memory, ranking, explanation; one engine with predict."""

from __future__ import annotations

import pytest

from gpuperf import api
from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_system
from gpuperf.step.search import enumerate_plans, search
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
    assert all(r.scenario.gpus == 64 for r in result.ranked)


def test_best_is_what_predict_says(result):
    """One engine: the search's numbers are predict's, to the bit."""
    from dataclasses import asdict

    best = result.ranked[0]
    sc = asdict(best.scenario)
    kw = {k: sc[k] for k in ("mode", "seq", "dtype", "impl", "tp", "pp", "dp", "cp", "ep",
                             "micro_batch", "zero", "recompute", "sequence_parallel",
                             "schedule", "virtual_stages")}  # fmt: skip
    again = api.predict(LLAMA70, system=DGX_H100, nodes=8, global_batch=1024, **kw)
    assert again.total_ms == best.step_time * 1e3  # the same float, through the same engine
    assert again.mfu == best.mfu
    assert again.fits


def test_mfu_stays_below_the_sustained_gemm_rate(result):
    """Plans run on the calibrated single-GPU model: no plan beats the sustained clock."""
    frac = DGX_H100.gpu.params.sustained_clock_frac * DGX_H100.gpu.params.gemm_eff
    assert all(r.mfu < frac for r in result.ranked)


def test_search_covers_the_issue_plan():
    plans = list(enumerate_plans(LLAMA70, DGX_H100, 64, global_batch=1024, seq=4096))
    labels = {p.label() for p in plans}
    assert "tp8 pp2 dp4 mb1 zero1 selective sp" in labels
    assert all(p.tp <= 8 for p in plans)  # TP stays inside a node


def test_explains_the_winner(result):
    assert result.why[0].startswith("best: " + result.ranked[0].label())
    assert len(result.why) >= 2 and "slower" in result.why[1]


def test_nothing_fits_is_an_input_error():
    with pytest.raises(InputError, match="fits"):
        search(LLAMA70, DGX_H100, 1, global_batch=8, seq=4096)
