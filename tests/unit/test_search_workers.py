"""The plan search on two processes returns what it returns on one, to the bit."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuperf.hardware.loader import load_system
from gpuperf.step import search_workers as sw
from gpuperf.step.search import explain, plan_specs, search
from gpuperf.workloads.config import load_model

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork: Linux only")

DGX_H100 = load_system("dgx-h100")
LLAMA70 = load_model("llama2-70b")
ARGS = dict(global_batch=1024, seq=4096, top=12)


def _same(a, b) -> None:
    assert (a.evaluated, a.fitting, a.why) == (b.evaluated, b.fitting, b.why)
    assert [r.label() for r in a.ranked] == [r.label() for r in b.ranked]
    assert [r.step_time for r in a.ranked] == [r.step_time for r in b.ranked]
    assert [r.cost.memory for r in a.ranked] == [r.cost.memory for r in b.ranked]
    rows_a = [c.rows for c, _, _ in a.ranked[-1].cost.sections()]
    rows_b = [c.rows for c, _, _ in b.ranked[-1].cost.sections()]
    assert rows_a == rows_b  # a worker's plan still builds its table, here


@pytest.fixture(scope="module")
def serial():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sw, "workers", lambda: 1)
        return search(LLAMA70, DGX_H100, 64, **ARGS)


def test_two_processes_rank_as_one(serial, monkeypatch):
    monkeypatch.setattr(sw, "workers", lambda: 2)
    forked = []
    real = sw._forked
    monkeypatch.setattr(sw, "_forked", lambda *a: forked.append(1) or real(*a))
    _same(search(LLAMA70, DGX_H100, 64, **ARGS), serial)
    assert forked  # the worker did run


def test_a_failed_worker_is_not_trusted(serial, monkeypatch):
    parent = os.getpid()
    real = sw.evaluate_share

    def dies_in_worker(*a):  # noqa: ANN002
        if os.getpid() != parent:
            raise RuntimeError("worker crashed")
        return real(*a)

    monkeypatch.setattr(sw, "workers", lambda: 2)
    monkeypatch.setattr(sw, "evaluate_share", dies_in_worker)
    _same(search(LLAMA70, DGX_H100, 64, **ARGS), serial)


def test_no_fork_no_worker(serial, monkeypatch):
    def refuse() -> int:
        raise OSError("fork: Resource temporarily unavailable")

    monkeypatch.setattr(sw, "workers", lambda: 2)
    monkeypatch.setattr(os, "fork", refuse)
    _same(search(LLAMA70, DGX_H100, 64, **ARGS), serial)


def test_an_error_here_stops_the_worker(monkeypatch):
    parent = os.getpid()
    real = sw.evaluate_share
    children = []
    real_fork = os.fork

    def fork() -> int:
        pid = real_fork()
        if pid:
            children.append(pid)
        return pid

    def dies_here(*a):  # noqa: ANN002
        if os.getpid() == parent:
            raise KeyboardInterrupt
        return real(*a)

    monkeypatch.setattr(sw, "workers", lambda: 2)
    monkeypatch.setattr(os, "fork", fork)
    monkeypatch.setattr(sw, "evaluate_share", dies_here)
    with pytest.raises(KeyboardInterrupt):
        search(LLAMA70, DGX_H100, 64, **ARGS)
    assert children
    with pytest.raises(ChildProcessError):  # reaped: no zombie left behind
        os.waitpid(children[0], os.WNOHANG)


def test_split_keeps_shape_groups_whole_and_balanced():
    plans = list(plan_specs(LLAMA70, DGX_H100, 64, global_batch=1024, seq=4096))
    a, b = sw.split(plans)
    assert sorted(a + b) == list(range(len(plans)))

    def group(i: int) -> int:  # one tp's plans share its layers' kernels, ZeRO-3's included
        return plans[i]["tp"]

    assert {group(i) for i in a}.isdisjoint(group(i) for i in b)

    def work(share: list[int]) -> int:  # ZeRO-3 plans weigh twice
        return sum(2 if plans[i]["zero"] == 3 else 1 for i in share)

    assert abs(work(a) - work(b)) < 0.25 * (work(a) + work(b))

    def tensor_parallel(share: list[int]) -> int:
        return sum(2 if plans[i]["zero"] == 3 else 1 for i in share if plans[i]["tp"] > 1)

    # the heavier share (more tensor-parallel work) first: this process keeps it, the worker
    # (which pays for the fork) takes the other
    assert tensor_parallel(a) >= tensor_parallel(b)


def test_small_searches_stay_in_process(monkeypatch):
    monkeypatch.setattr(sw, "workers", lambda: 2)
    monkeypatch.setattr(sw, "_forked", lambda *a: pytest.fail("forked for a small search"))
    res = search(load_model("llama2-7b"), DGX_H100, 4, global_batch=8, seq=2048)
    assert res.evaluated < sw.FORK_MIN_PLANS


@dataclass(frozen=True)
class _Sc:
    tp: int
    pp: int


@dataclass(frozen=True)
class _Plan:
    scenario: _Sc
    step_time: float
    breakdown: dict
    mfu: float = 0.5

    def label(self) -> str:
        return f"tp{self.scenario.tp} pp{self.scenario.pp} t{self.step_time}"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(1, 30), st.booleans()),
        min_size=2,
        max_size=60,
    ),  # fmt: skip
    st.integers(1, 6),
)
def test_two_shortlists_hold_what_the_ranking_shows(plans, top):
    """The union of two processes' shortlists gives the same top plans and explanation as the
    whole list (ties in step time broken by the order enumerated)."""
    found = [(i, _Plan(_Sc(tp, pp), float(t), {"compute": float(t)}))
             for i, (tp, pp, t, _) in enumerate(plans)]  # fmt: skip
    keep = max(top, 2)
    mine = [f for f, (*_, side) in zip(found, plans, strict=True) if side]
    theirs = [f for f, (*_, side) in zip(found, plans, strict=True) if not side]
    merged = sw.shortlist(mine, keep) + sw.shortlist(theirs, keep)
    merged.sort(key=lambda f: (f[1].step_time, f[0]))
    whole = sorted(found, key=lambda f: (f[1].step_time, f[0]))
    assert [i for i, _ in merged[:top]] == [i for i, _ in whole[:top]]
    assert explain([r for _, r in merged]) == explain([r for _, r in whole])
