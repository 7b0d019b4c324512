"""The machine a GPU profile's host constants describe: the median of the probed pool."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpuperf.hardware.loader import load_gpu
from gpuperf.hardware.spec import ModelParams
from gpuperf.perfmodel import host_pool

ROOT = Path(__file__).parents[2]
REF = {"add": 6.0, "linear": 10.0, "sdpa": 12.0}


def _probe(name: str, k: float | None, plan_ms: float | None) -> host_pool.HostProbe:
    launch = {n: k * v for n, v in REF.items()} if k else None
    return host_pool.HostProbe(name, launch, plan_ms / 1e3 if plan_ms else None)


def test_the_pool_median_machine_and_too_few_machines():
    pool = [_probe("a", 1.0, 30), _probe("b", 1.3, None), _probe("c", 1.6, 50),
            _probe("d", None, 40)]  # fmt: skip
    t = host_pool.typical(pool, REF)
    assert t.factor == pytest.approx(1.3) and t.factors == pytest.approx((1.0, 1.3, 1.6))
    assert t.plan_s == pytest.approx(0.040)
    few = host_pool.typical(pool[:2], REF)  # two machines: no pool, nothing moves
    assert few.factor is None and few.plan_s is None
    params = ModelParams(host_dispatch_s=10e-6, host_decode_layer_s=100e-6, host_attn_plan_s=0.02)
    assert host_pool.moved(params, few) == ModelParams(  # nothing moved, and it says so
        host_dispatch_s=10e-6,
        host_decode_layer_s=100e-6,
        host_attn_plan_s=0.02,
        extra={"host_pool_factor": 1.0},
    )
    moved = host_pool.moved(params, t)
    assert moved.host_dispatch_s == pytest.approx(13e-6)
    assert moved.host_decode_layer_s == pytest.approx(130e-6)
    assert moved.host_attn_plan_s == pytest.approx(0.040)
    assert moved.extra["host_pool_factor"] == pytest.approx(1.3)


def test_one_slow_kernel_does_not_make_a_slow_machine():
    launch = {n: 1.2 * v for n, v in REF.items()} | {"add": 5 * REF["add"]}
    assert host_pool.ratio(launch, REF) == pytest.approx(1.2)
    assert host_pool.ratio(None, REF) is None and host_pool.ratio(launch, {}) is None


def test_the_probes_each_kind_of_file_carries():
    launch = {"host_dispatch_us/add": 7.0, "eager_per_kernel_us/add": 7.1, "attn_plan_ms": 36.0}
    p = host_pool.probe_of({"launch": launch}, "e2e.json")
    assert p.launch_us == {"add": 7.0} and p.plan_s == pytest.approx(0.036)
    assert host_pool.probe_of({"attn_plan_ms": 41.0}, "serve.json").plan_s == pytest.approx(0.041)
    rows = [{"backend": "default", "seen_before": s, "host_ms": m}
            for s, m in ((False, 400.0), (False, 30.0), (False, 32.0), (True, 0.05))]  # fmt: skip
    assert host_pool.probe_of({"rows": rows}, "sdpa.json").plan_s == pytest.approx(0.03095)
    assert host_pool.probe_of({"rows": [{"op": {}}]}, "gemm.json") is None
    assert host_pool.probe_of({"launch": {"attn_plan_ms": True}}, "x.json") is None


def test_the_shipped_profiles_hold_their_pools_median_machine():
    """benchmarks/host_pool.py --write set them from the committed result files; a new result
    file with a host probe moves the median, and the profile must follow. accuracy's launch
    costs of the calibration machine are those of the files the profile was fitted on."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import host_pool as bench
    finally:
        sys.path.pop(0)
    from gpuperf.perfmodel.accuracy import PROFILE_LAUNCH_US

    for gpu in bench.GPUS:
        assert bench.mismatches(gpu) == []
        _, _, ref = bench.pool(gpu)
        assert ref == pytest.approx(PROFILE_LAUNCH_US[gpu], abs=0.006)
        assert load_gpu(gpu).params.extra["host_pool_factor"] > 1  # the fitted host was fast


def test_calibrate_from_moves_the_host_to_the_pools_median(tmp_path, capsys):
    from gpuperf.cli import main

    src = ROOT / "benchmarks/results/h200-sxm-141gb"
    for name in ("e2e_hf_run1.json", "sdpa_shape_probe.json"):  # the fitted machine's plan known
        (tmp_path / name).write_text((src / name).read_text())
    launch = json.loads((src / "e2e_hf_run1.json").read_text())["launch"]
    for i, k in enumerate((1.1, 1.5, 2.0)):  # three more machines, slower than the fitted one
        slow = {n: v * k for n, v in launch.items() if n.startswith("host_dispatch_us/")}
        slow["attn_plan_ms"] = 30.0 + 10 * i
        (tmp_path / f"probe{i}.json").write_text(json.dumps({"launch": slow, "runs": []}))
    out = tmp_path / "p.toml"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--from", str(tmp_path), "--gpu", "h200", "-o", str(out)])
    err = capsys.readouterr().err
    assert exc.value.code == 0, err
    text = out.read_text()
    assert "4 probed machines issues kernels 1.3x" in err  # median of 1, 1.1, 1.5, 2
    # plans: the fitted machine's 23.6 ms (sdpa_shape_probe.json), 30, 40 and 50
    assert "host_pool_factor = 1.3" in text and "host_attn_plan_s = 0.035\n" in text


def test_a_probe_that_is_not_a_time_is_no_probe():
    launch = {"host_dispatch_us/add": True, "host_dispatch_us/mul": float("inf"),
              "host_dispatch_us/linear": float("nan"), "host_dispatch_us/sdpa": -3.0,
              "attn_plan_ms": float("inf")}  # fmt: skip
    assert host_pool.probe_of({"launch": launch}, "x.json") is None
    assert host_pool.probe_of({"attn_plan_ms": float("nan")}, "x.json") is None
    rows = [
        {"backend": "default", "host_ms": 30.0},  # no seen_before: not a call
        {"backend": "default", "seen_before": False, "host_ms": "slow"},
        {"backend": "default", "seen_before": True, "host_ms": float("nan")},
        "row",
        None,
    ]
    assert host_pool.attn_plan_s(rows) is None
    assert host_pool.probe_of({"rows": rows}, "sdpa_shape_probe.json") is None


def _calibrate(tmp_path, capsys, *extra):  # noqa: ANN001, ANN202
    from gpuperf.cli import main

    out = tmp_path / "p.toml"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--from", str(tmp_path), "--gpu", "h200", "-o", str(out), *extra])
    err = capsys.readouterr().err
    assert exc.value.code == 0, err
    return out.read_text(), err


def test_calibrate_says_why_the_host_did_not_move(tmp_path, capsys):
    """One machine: nothing moves, and the profile says so (host_pool_factor 1, not the base
    profile's inherited); --all-shapes fits every machine's runs and moves nothing either."""
    src = ROOT / "benchmarks/results/h200-sxm-141gb"
    (tmp_path / "e2e_hf_run1.json").write_text((src / "e2e_hf_run1.json").read_text())
    text, err = _calibrate(tmp_path, capsys)
    assert "host_pool_factor = 1\n" in text and "1 probed machine(s), fewer than 3" in err
    for i in range(3):
        (tmp_path / f"probe{i}.json").write_text(json.dumps({"attn_plan_ms": 40.0, "runs": []}))
    text, err = _calibrate(tmp_path, capsys, "--all-shapes")
    assert "host_pool_factor = 1\n" in text and "--all-shapes fits the runs" in err


# A probe model like e2e_hf.py's HF_PROBE_CONFIG (a narrow 32-layer Llama), smaller to keep the
# bisection quick.
PROBE_CFG = {
    "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 64,
    "vocab_size": 2048, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip


def _hf_probe(seen_ms: float, new_ms: float | None = None, ctx: int = 512) -> dict:
    p = {"config": PROBE_CFG, "batch": 1, "ctx": ctx, "seen_ms": seen_ms}
    return p | ({"new_ms": new_ms} if new_ms is not None else {})


def _step_ms(gpu, k: float) -> float:  # noqa: ANN001
    step = host_pool.HfStep(PROBE_CFG, 1, 512, 0.0, None)
    return host_pool._hf_step_s(host_pool.scaled(gpu, k), step) * 1e3


def test_hf_probe_steps_as_a_file_carries_them():
    data = {"hf_probe": _hf_probe(20.0, 60.0), "hf_probe_end": _hf_probe(25.0, 70.0, ctx=512)}
    start, end = host_pool.hf_steps(data)
    assert start.seen_s == pytest.approx(0.020) and start.plan_s == pytest.approx(0.040)
    assert end.seen_s == pytest.approx(0.025) and end.plan_s is None  # its lengths were met
    data["hf_probe_end"] = _hf_probe(25.0, 70.0, ctx=768)  # lengths new to the process
    assert host_pool.hf_steps(data)[1].plan_s == pytest.approx(0.045)
    for bad in ({"config": "llama", "seen_ms": 20.0, "ctx": 512},
                {"config": PROBE_CFG, "seen_ms": float("nan"), "ctx": 512},
                {"config": PROBE_CFG, "seen_ms": 20.0, "ctx": "512"},
                {"config": PROBE_CFG, "seen_ms": 20.0, "ctx": 512, "batch": 0},
                {"config": PROBE_CFG, "seen_ms": 20.0, "ctx": True}, "probe"):  # fmt: skip
        assert host_pool.hf_steps({"hf_probe": bad}) == ()
    assert host_pool.probe_of({"hf_probe": _hf_probe(20.0)}, "e2e.json").hf != ()


def test_the_hf_factor_is_the_host_under_which_the_model_predicts_the_probe_step():
    gpu = load_gpu("h100")
    for k in (0.8, 1.0, 1.7, 3.0):
        step = host_pool.HfStep(PROBE_CFG, 1, 512, _step_ms(gpu, k) / 1e3, None)
        assert host_pool.hf_factor(gpu, step) == pytest.approx(k, rel=1e-4)
    assert _step_ms(gpu, 2.0) > 1.5 * _step_ms(gpu, 1.0)  # the probe step is mostly host
    too_fast = host_pool.HfStep(PROBE_CFG, 1, 512, 1e-6, None)  # faster than its kernels
    assert host_pool.hf_factor(gpu, too_fast) is None


def test_the_pool_takes_the_hf_steps_once_three_machines_ran_them():
    gpu = load_gpu("h100")

    def machine(name: str, tiny_k: float, hf_k: tuple[float, ...]) -> host_pool.HostProbe:
        steps = tuple(host_pool.HfStep(PROBE_CFG, 1, 512, _step_ms(gpu, k) / 1e3, None)
                      for k in hf_k)  # fmt: skip
        return host_pool.HostProbe(name, {n: tiny_k * v for n, v in REF.items()}, 0.04, steps)

    # start and end probes of one machine: their median (two: the mean)
    two = [machine("a", 1.0, (1.2, 1.6)), machine("b", 1.1, (1.8,)), machine("c", 1.2, ())]
    t = host_pool.typical(two, REF, gpu)
    assert t.basis == "tiny kernels" and t.factor == pytest.approx(1.1)
    three = [*two, machine("d", 1.3, (2.4,))]
    t = host_pool.typical(three, REF, gpu)
    assert t.basis == "hf step" and t.factors == pytest.approx((1.4, 1.8, 2.4), rel=1e-4)
    assert t.factor == pytest.approx(1.8, rel=1e-4) and t.plan_s == pytest.approx(0.04)
    assert host_pool.typical(three, REF).basis == "tiny kernels"  # no calibration host given


def test_calibrate_from_takes_the_median_machines_hf_step(tmp_path, capsys):
    """Three machines ran the probe step at 1x, 2x and 3x the fitted runs' host: the written
    profile's host is the middle one's, so it predicts the step that machine ran."""
    src = ROOT / "benchmarks/results/h200-sxm-141gb"
    for name in ("e2e_hf_run1.json", "sdpa_shape_probe.json"):  # the fitted machine's plan known
        (tmp_path / name).write_text((src / name).read_text())
    text, err = _calibrate(tmp_path, capsys)  # the fitted machine alone: nothing moves
    fitted = load_gpu(str(tmp_path / "p.toml"))
    for i, k in enumerate((1.0, 2.0, 3.0)):
        probe = {"hf_probe": _hf_probe(_step_ms(fitted, k)), "runs": []}
        (tmp_path / f"probe{i}.json").write_text(json.dumps(probe))
    text, err = _calibrate(tmp_path, capsys)
    assert "the median of 3 machines' Hugging Face probe steps costs 2x" in err
    moved = load_gpu(str(tmp_path / "p.toml"))
    assert moved.params.extra["host_pool_factor"] == pytest.approx(2.0, rel=5e-3)
    assert _step_ms(moved, 1.0) == pytest.approx(_step_ms(fitted, 2.0), rel=5e-3)
    # without the fitted machine's plan the host fit holds the plan in its per-layer cost, so
    # the probe step cannot be inverted: the tiny kernels' basis (none here) moves nothing
    (tmp_path / "sdpa_shape_probe.json").unlink()
    text, err = _calibrate(tmp_path, capsys)
    assert "Hugging Face probe steps" not in err and "host_pool_factor = 1\n" in text


def test_a_probe_config_the_model_cannot_build_is_skipped():
    gpu = load_gpu("h100")
    bad = host_pool.HfStep({"model_type": "nonesuch"}, 1, 512, 0.02, None)
    good = host_pool.HfStep(PROBE_CFG, 1, 512, _step_ms(gpu, 1.5) / 1e3, None)
    k, _ = host_pool.hf_host(gpu, (bad, good))
    assert k == pytest.approx(1.5, rel=1e-4)
