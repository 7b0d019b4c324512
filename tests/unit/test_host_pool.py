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
