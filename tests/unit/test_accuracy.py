"""The accuracy benchmark's loading and summary on small synthetic result files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import gpuperf
from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel.accuracy import e2e_table, load_e2e, load_samples, op_table, summarize
from gpuperf.perfmodel.ops import Gemm
from gpuperf.perfmodel.ops_io import op_to_dict
from gpuperf.perfmodel.roofline import op_time


def test_op_rows_reload_and_compare(tmp_path):
    gpu = load_gpu("h100")
    op = Gemm("gemm/4096", 4096, 4096, 4096)
    pred_ms = op_time(op, gpu).time * 1e3
    rows = [{"op": op_to_dict(op), "measured_ms": pred_ms * 1.25}, {"op": op_to_dict(op)}]
    (tmp_path / "gemm.json").write_text(json.dumps({"env": {}, "rows": rows}))
    samples = load_samples([tmp_path / "gemm.json"])
    assert len(samples) == 1  # the row without a measurement is skipped
    t = op_table(samples, gpu)
    assert t["ratio"].iloc[0] == pytest.approx(0.8)
    s = summarize(t)
    assert s["median_err"].iloc[0] == pytest.approx(0.2)
    assert s["target"].iloc[0] == pytest.approx(0.05)


def test_a_file_measured_to_check_the_model_is_held_out_whole(tmp_path):
    from gpuperf.perfmodel.calibrate import calibrates, is_calibration

    ops = [Gemm(f"gemm/{m}", m, 4096, 4096) for m in range(1024, 1024 + 64 * 40, 64)]
    assert any(is_calibration(op) for op in ops)  # some shapes fall in the calibration split
    rows = [{"op": op_to_dict(op), "measured_ms": 1.0} for op in ops]
    (tmp_path / "plain.json").write_text(json.dumps({"env": {}, "rows": rows}))
    (tmp_path / "held.json").write_text(json.dumps({"env": {}, "split": "held-out", "rows": rows}))
    plain = load_samples([tmp_path / "plain.json"])
    held = load_samples([tmp_path / "held.json"])
    assert [calibrates(s) for s in plain] == [is_calibration(op) for op in ops]
    assert not any(calibrates(s) for s in held)
    assert set(op_table(held, load_gpu("h100"))["split"]) == {"held-out"}


def test_summary_percentiles_by_hand():
    t = pd.DataFrame(
        {"class": ["x"] * 5, "split": ["held-out"] * 5, "ratio": [1.0, 1.1, 0.9, 1.2, 2.0]}
    )
    s = summarize(t)
    assert s["n"].iloc[0] == 5
    assert s["median_err"].iloc[0] == pytest.approx(0.1)
    assert s["p90_err"].iloc[0] == pytest.approx(0.2 + 0.6 * 0.8)  # numpy's linear quantile


def test_e2e_runs_are_predicted_with_the_api(tmp_path):
    cfg = json.loads(
        (Path(gpuperf.__file__).parent / "workloads/presets/llama2-7b.json").read_text()
    )
    run = {
        "model": "llama2-7b",
        "config": cfg,
        "scenario": {"mode": "prefill", "impl": "eager", "batch": 1, "seq": 512, "dtype": "bf16"},
        "measured_ms": 20.0,
    }
    skipped = dict(run, note="bf16 params, fused AdamW (bf16 states)")
    (tmp_path / "e2e.json").write_text(json.dumps({"env": {}, "runs": [run, skipped]}))
    runs = load_e2e([tmp_path / "e2e.json"])
    assert len(runs) == 1
    t = e2e_table(runs, load_gpu("h100"))
    assert t["class"].iloc[0] == "whole-model prefill"
    assert t["split"].iloc[0] == "calibration"  # llama2-7b runs calibrate the host parameters
    assert t["predicted_ms"].iloc[0] > 0


def test_runs_marked_excluded_are_kept_out(tmp_path):
    cfg = json.loads(
        (Path(gpuperf.__file__).parent / "workloads/presets/llama2-7b.json").read_text()
    )
    sc = {"mode": "decode", "impl": "eager", "batch": 1, "ctx": 2048, "dtype": "bf16"}
    run = {"model": "llama2-7b", "config": cfg, "scenario": sc, "measured_ms": 40.0}
    seen = dict(run, measured_ms=15.0, excluded="kv lengths seen before")
    (tmp_path / "e2e.json").write_text(json.dumps({"env": {}, "runs": [run, seen]}))
    assert [r.measured_s for r in load_e2e([tmp_path / "e2e.json"])] == [0.04]


def test_a_run_is_predicted_with_the_host_its_machine_measured(tmp_path):
    from gpuperf.perfmodel.accuracy import PROFILE_HOST_BARE_S, load_multigpu, on_host

    gpu = load_gpu("h200")
    # the bare dispatch is the calibration machine's; the profile is the pool's median machine
    ref = PROFILE_HOST_BARE_S[gpu.name] * gpu.params.extra["host_pool_factor"]
    here = on_host(gpu, {"host_dispatch_bare_s": 2 * ref, "host_attn_plan_s": 0.05})
    assert here.params.host_dispatch_s == pytest.approx(2 * gpu.params.host_dispatch_s)
    assert here.params.host_decode_layer_s == pytest.approx(2 * gpu.params.host_decode_layer_s)
    assert here.params.host_attn_plan_s == 0.05
    assert on_host(gpu, None) is None
    assert on_host(load_gpu("a100"), {"host_dispatch_bare_s": 1e-5}) is None  # host unknown
    # the file's host reaches its runs
    run = {"model": "m", "config": {}, "scenario": {}, "implementation": "single",
           "measured_ms": 1.0}  # fmt: skip
    path = tmp_path / "validate_multigpu_x.json"
    path.write_text(json.dumps({"runs": [run], "host": {"host_dispatch_bare_s": 1e-5}}))
    assert load_multigpu([path])[0].host == {"host_dispatch_bare_s": 1e-5}


def test_a_whole_model_run_takes_its_machines_launch_costs_and_plan_time(tmp_path):
    """e2e_hf.py's launch costs: the host factor is the median over the tiny kernels of their
    time over the profile host's (one slow add does not move it), and the cuDNN plan time the
    machine measured replaces the profile's as it is."""
    from gpuperf.perfmodel.accuracy import PROFILE_LAUNCH_US, host_factor, on_e2e_host

    gpu = load_gpu("h200")
    k = gpu.params.extra["host_pool_factor"]  # the profile's machine over the calibration one
    ref = PROFILE_LAUNCH_US[gpu.name]
    launch = {f"host_dispatch_us/{name}": 1.5 * k * v for name, v in ref.items()}
    launch["host_dispatch_us/add"] = 4 * k * ref["add"]  # an outlier
    launch["attn_plan_ms"] = 35.0
    cfg = json.loads(
        (Path(gpuperf.__file__).parent / "workloads/presets/llama2-7b.json").read_text()
    )
    sc = {"mode": "decode", "impl": "eager", "batch": 1, "ctx": 2048, "dtype": "bf16"}
    run = {"model": "llama2-7b", "config": cfg, "scenario": sc, "measured_ms": 40.0}
    (tmp_path / "e2e.json").write_text(json.dumps({"launch": launch, "runs": [run]}))
    (r,) = load_e2e([tmp_path / "e2e.json"])
    assert r.attn_plan_s == pytest.approx(0.035)
    assert host_factor(gpu, r.launch_us) == pytest.approx(1.5)
    here = on_e2e_host(gpu, r.launch_us, r.attn_plan_s)
    assert here.params.host_dispatch_s == pytest.approx(1.5 * gpu.params.host_dispatch_s)
    assert here.params.host_attn_plan_s == pytest.approx(0.035)
    # without a measured plan the plan scales like the other host costs
    assert on_e2e_host(gpu, r.launch_us).params.host_attn_plan_s == pytest.approx(
        1.5 * gpu.params.host_attn_plan_s
    )
    assert on_e2e_host(gpu, None) is None and host_factor(load_gpu("a100"), r.launch_us) is None
    # with an hf_probe in the file, its step sets the machine's host instead of the tiny kernels
    from gpuperf.perfmodel import host_pool
    from gpuperf.perfmodel.accuracy import calibration_host

    cal = calibration_host(gpu)
    probe = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
             "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1,
             "vocab_size": 2048}  # fmt: skip
    blank = host_pool.HfStep(probe, 1, 512, 0.0, None)
    seen_ms = host_pool._hf_step_s(host_pool.scaled(cal, 2.5), blank) * 1e3
    data = {"launch": launch, "runs": [run],
            "hf_probe": {"config": probe, "batch": 1, "ctx": 512, "seen_ms": seen_ms}}  # fmt: skip
    (tmp_path / "e2e.json").write_text(json.dumps(data))
    (r,) = load_e2e([tmp_path / "e2e.json"])
    here = on_e2e_host(gpu, r.launch_us, r.attn_plan_s, r.hf)
    assert here.params.host_dispatch_s == pytest.approx(2.5 * cal.params.host_dispatch_s, 1e-3)
    assert here.params.host_attn_plan_s == pytest.approx(0.035)
