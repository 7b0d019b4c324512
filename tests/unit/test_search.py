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
    with pytest.raises(InputError, match=r"do not fit \(the smallest, .* alone is"):
        search(LLAMA70, DGX_H100, 1, global_batch=8, seq=4096)


def _clear_work_caches() -> None:
    from gpuperf.workloads import step_work

    for fn in (step_work._stages, step_work._stage_parts, step_work._layer_templates,
               step_work._ends):  # fmt: skip
        fn.cache_clear()


def test_shared_stage_work_gives_each_plan_its_own_numbers():
    """Plans share a stage's costed work (zero 0-2 and both schedules of a tp·pp·mb): every plan
    of a MoE search costed through one Engine equals the same plan costed alone, from empty
    caches, to the bit (a wrong memo key would hand one plan another's stages)."""
    from gpuperf.step.run import Engine
    from gpuperf.step.search import evaluate

    cfg = load_model("mixtral-8x7b")
    plans = list(enumerate_plans(cfg, DGX_H100, 16, global_batch=64, seq=2048, impl="eager"))
    plans += list(enumerate_plans(cfg, DGX_H100, 16, global_batch=64, seq=2048))[::7]
    shared = Engine(cfg, DGX_H100.gpu, DGX_H100)
    together = {}
    for sc in plans:
        try:
            together[sc] = evaluate(shared, sc, 2)
        except InputError:
            continue
    assert len(together) > 100
    assert {sc.zero for sc in together} == {0, 1, 2, 3}
    for sc, r in list(together.items())[::5]:
        _clear_work_caches()
        alone = evaluate(Engine(cfg, DGX_H100.gpu, DGX_H100), sc, 2)
        assert (alone.step_time, alone.cost.memory, alone.cost.breakdown) == (
            r.step_time, r.cost.memory, r.cost.breakdown), sc.label()  # fmt: skip


def test_plans_that_do_not_fit_are_refused_on_memory_before_their_time_is_costed(
    result, monkeypatch
):
    """The search rejects a plan whose busiest stage overflows the GPU without building or
    costing its work: it keeps exactly the plans a full costing keeps, with the same numbers
    and the same memory."""
    import gpuperf.workloads.step_work as step_work
    from gpuperf.step.run import Engine
    from gpuperf.step.search import _evaluate, evaluate

    real_build, built = step_work.build, []

    def counting_build(cfg, sc, g):  # noqa: ANN001, ANN202
        built.append(sc)
        return real_build(cfg, sc, g)

    monkeypatch.setattr(step_work, "build", counting_build)

    engine = Engine(LLAMA70, DGX_H100.gpu, DGX_H100)
    specs = [dict(tp=tp, pp=pp, dp=64 // (tp * pp), micro_batch=1, global_batch=1024,
                  seq=4096, mode="train", zero=zero)
             for tp, pp in ((1, 1), (2, 8), (8, 4)) for zero in (0, 2)]  # fmt: skip
    full = {}
    for spec in specs:
        built.clear()
        pruned = _evaluate(engine, spec, 8)
        assert len(built) == (1 if pruned.fits else 0)  # its work never built
        whole = evaluate(Engine(LLAMA70, DGX_H100.gpu, DGX_H100), pruned.scenario, 8)
        assert pruned.fits == whole.fits
        if pruned.fits:
            assert pruned.step_time == whole.step_time
            assert pruned.cost.memory == whole.cost.memory
        else:
            assert pruned.cost is None  # its time never costed
        full[spec["tp"], spec["pp"], spec["zero"]] = pruned.fits
    assert not full[1, 1, 0] and full[2, 8, 2]  # 70B unsharded on one GPU cannot fit
    assert result.ranked[0].fits


def test_a_search_whose_every_plan_is_refused_says_why(tmp_path):
    """A system without compute NICs cannot span nodes: every plan of 16 GPUs is refused where
    it is placed, and the error names that, not memory."""
    from gpuperf.hardware.loader import load_system

    path = tmp_path / "nonic.toml"
    path.write_text('display_name = "x"\ngpu = "h100-sxm5-80gb"\ngpus_per_node = 8\n'
                    'nvswitch = true\nnvlink_gbps_per_direction = 450\nnics_per_node = 0\n'
                    'nic_gbit_s = 0\n')  # fmt: skip
    with pytest.raises(InputError, match="has no compute NICs; it cannot span nodes"):
        search(LLAMA70, load_system(str(path)), 16, global_batch=64, seq=4096)


def test_the_search_leaves_the_collector_as_it_found_it():
    import gc

    from gpuperf.step.search import no_cycle_collection

    was = gc.isenabled()
    gc.freeze()  # a caller that froze its objects (before a fork, say) keeps them frozen
    try:
        frozen = gc.get_freeze_count()
        with no_cycle_collection():
            assert not gc.isenabled()
            junk = [[i] for i in range(1000)]  # noqa: F841 (objects the search would keep)
        assert gc.get_freeze_count() >= frozen and gc.isenabled() == was
    finally:
        gc.unfreeze()
    with no_cycle_collection():
        kept = [[i] for i in range(1000)]
    assert gc.get_freeze_count() == 0 and len(kept) == 1000  # nothing left frozen by the search


def test_the_explanation_shows_what_a_rival_saves_beside_what_it_spends():
    """A rival's extra costs alone over-explain a small gap: its savings are said too, so the
    listed terms net to its step time."""
    from types import SimpleNamespace

    from gpuperf.step.search import Ranked, explain
    from gpuperf.workloads.scenario import Scenario

    def plan(tp: int, **breakdown: float) -> Ranked:
        cost = SimpleNamespace(total_s=sum(breakdown.values()), breakdown=breakdown)
        return Ranked(Scenario(mode="train", tp=tp), cost, 1.0, 0.5, 1.0, True)  # type: ignore[arg-type]

    best = plan(1, compute=10.0, dp_comm=1.0, ep_comm=7.0)
    rival = plan(2, compute=11.0, dp_comm=6.0, ep_comm=1.0)
    line = explain([best, rival])[1]
    assert line.startswith("vs tp2") and "0.0% slower" in line
    assert "(dp_comm +5 s, compute +1 s; saves ep_comm −6 s)" in line
