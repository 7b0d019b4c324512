"""Plan search on two cores: the plans split between this process and one forked worker.

Plans are shared out by tensor-parallel degree (the shapes of their kernels), so each process
costs its own kernels and Parts and neither repeats the other's cold work; each builds its
plans' Scenarios from their keyword arguments (plan specs) itself. The worker sends back
what the ranking can use: its count of plans evaluated and fitting, and, of its fitting plans,
the fastest `keep` and the fastest of each (tp, pp), which is everything `search` shows and
`explain` compares (the union of both processes' shortlists holds the global top and each (tp,
pp)'s best). A shortlisted plan's table rows are costed again in this process on demand.

Only on Linux (fork is cheap and safe for pure-Python arithmetic there), only for searches large
enough to pay the ~2 ms a fork costs, and only while no other Python thread runs. A worker that
fails for any reason is not trusted: this process evaluates its share itself.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING

from gpuperf.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from gpuperf.step.run import Engine
    from gpuperf.step.search import Ranked

FORK_MIN_PLANS = 400  # below this a fork costs more than it saves
Found = tuple[int, int, list[tuple[int, "Ranked"]]]  # evaluated, fitting, (plan index, plan)


def workers() -> int:
    """Processes a search may use: two where the machine gives this one two cores, else one."""
    if not sys.platform.startswith("linux") or not hasattr(os, "fork"):
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return 2 if cores >= 2 and threading.active_count() == 1 else 1


def split(plans: Sequence[dict]) -> tuple[list[int], list[int]]:
    """Two shares of plan indices of about equal work, each holding whole groups of plans whose
    kernels share shapes (one tp: its layers, GEMMs and templates are costed in one process
    only). A ZeRO-3 plan counts twice: its layers carry their own collectives. The heavier
    share first: the one with more tensor-parallel plans, whose per-layer collectives make each
    dearer than a tp=1 plan (in the three searches of benchmarks/search_speed.py that share
    took 3-8% longer at equal counts)."""
    groups: dict[int, list[int]] = {}
    work: dict[int, int] = {}
    for i, spec in enumerate(plans):
        tp = spec["tp"]
        groups.setdefault(tp, []).append(i)
        work[tp] = work.get(tp, 0) + (2 if spec.get("zero") == 3 else 1)
    shares: tuple[list[int], list[int]] = ([], [])
    load, tensor_parallel = [0, 0], [0, 0]
    for key in sorted(groups, key=lambda k: (-work[k], k)):
        j = 0 if load[0] <= load[1] else 1
        shares[j].extend(groups[key])
        load[j] += work[key]
        tensor_parallel[j] += work[key] if key > 1 else 0
    return shares if tensor_parallel[0] >= tensor_parallel[1] else (shares[1], shares[0])


def shortlist(found: list[tuple[int, Ranked]], keep: int) -> list[tuple[int, Ranked]]:
    """The fastest `keep` plans and the fastest of each (tp, pp), in ranking order."""
    ordered = sorted(found, key=lambda f: (f[1].step_time, f[0]))
    out, best_of = ordered[:keep], set()
    for n, (_, r) in enumerate(ordered):
        key = (r.scenario.tp, r.scenario.pp)
        if key not in best_of:
            best_of.add(key)
            if n >= keep:
                out.append(ordered[n])
    return out


def evaluate_share(
    engine: Engine, plans: Sequence[dict], share: Sequence[int], nodes: int | None,
    evaluate: Callable[[Engine, dict, int | None], Ranked],
) -> Found:  # fmt: skip
    """Every plan of `share` through the engine; plans the model refuses are not counted."""
    evaluated = 0
    found: list[tuple[int, Ranked]] = []
    for i in share:
        try:
            r = evaluate(engine, plans[i], nodes)
        except InputError:
            continue
        evaluated += 1
        if r.fits:
            found.append((i, r))
    return evaluated, len(found), found


def evaluate_all(
    engine: Engine, plans: Sequence[dict], nodes: int | None, keep: int,
    evaluate: Callable[[Engine, dict, int | None], Ranked],
) -> Found:  # fmt: skip
    """Every plan, on two processes where `workers()` allows it (module docstring)."""
    if len(plans) < FORK_MIN_PLANS or workers() < 2:
        return evaluate_share(engine, plans, range(len(plans)), nodes, evaluate)
    mine, theirs = split(plans)  # the worker, which pays for the fork, takes the lighter
    got = _forked(engine, plans, theirs, nodes, keep, evaluate)
    try:
        evaluated, fitting, found = evaluate_share(engine, plans, mine, nodes, evaluate)
    except BaseException:  # an error or Ctrl-C here: the worker goes with it
        got(cancel=True)
        raise
    other = got()
    if other is None:  # the worker failed: its share here
        other = evaluate_share(engine, plans, theirs, nodes, evaluate)
    else:
        relink = _relinker(engine, plans, nodes, evaluate)
        other = (other[0], other[1], [(i, relink(i, r)) for i, r in other[2]])
    return evaluated + other[0], fitting + other[1], found + other[2]


def _forked(
    engine: Engine, plans: Sequence[dict], share: list[int], nodes: int | None, keep: int,
    evaluate: Callable[[Engine, dict, int | None], Ranked],
) -> Callable[..., Found | None]:  # fmt: skip
    """Start a worker on `share`; the returned call waits for its shortlist (None if it failed;
    with cancel=True it stops the worker instead)."""
    try:
        read, write = os.pipe()
    except OSError:  # out of descriptors: no worker
        return lambda cancel=False: None
    try:
        with warnings.catch_warnings():  # 3.12+ warns on fork when native threads exist
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:  # out of processes or memory: no worker
        os.close(read)
        os.close(write)
        return lambda cancel=False: None
    if pid == 0:  # the worker: evaluate, send, leave without running the parent's exit hooks
        status = 1
        try:
            os.close(read)
            evaluated, fitting, found = evaluate_share(engine, plans, share, nodes, evaluate)
            light = [(i, replace(r, cost=replace(r.cost, sections=None)))
                     for i, r in shortlist(found, keep)]  # fmt: skip
            data = pickle.dumps((evaluated, fitting, light), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write, "wb") as f:
                f.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write)

    def wait(cancel: bool = False) -> Found | None:
        if cancel:
            os.kill(pid, signal.SIGKILL)
        with os.fdopen(read, "rb") as f:
            data = f.read()
        _, code = os.waitpid(pid, 0)
        if code != 0:
            return None
        try:
            return pickle.loads(data)  # noqa: S301 (our own child's bytes over a private pipe)
        except Exception:  # noqa: BLE001 (a truncated stream: the worker is not trusted)
            return None

    return wait


def _relinker(
    engine: Engine, plans: Sequence[dict], nodes: int | None,
    evaluate: Callable[[Engine, dict, int | None], Ranked],
) -> Callable[[int, Ranked], Ranked]:  # fmt: skip
    """A worker's plan with its table rows costed again here when asked for (what a process
    boundary cannot carry: the closure over the worker's costed Parts)."""

    def relink(i: int, r: Ranked) -> Ranked:
        def sections() -> list:
            return evaluate(engine, plans[i], nodes).cost.sections()

        return replace(r, cost=replace(r.cost, sections=sections))

    return relink
