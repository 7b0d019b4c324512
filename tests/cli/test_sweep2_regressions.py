"""The second hostile-input sweep (branch sweep2), one named case each, through the CLI's entry
point: options that were silently ignored are refused, result files of another GPU never
calibrate this one, and no NaN reaches a table."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import refused, run

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_calibrate_refuses_results_measured_on_another_gpu(capsys, tmp_path):
    folder = tmp_path / "mixed"
    folder.mkdir()
    for gpu, name in (("h100-sxm5-80gb", "gemm.json"), ("h200-sxm-141gb", "attention.json")):
        (folder / name).write_text((RESULTS / gpu / name).read_text())
    out = tmp_path / "h100.toml"
    err = refused(capsys, "calibrate", "--from", str(folder), "--gpu", "h100", "-o", str(out),
                  match="attention.json was measured on NVIDIA H200")  # fmt: skip
    assert "not on h100-sxm5-80gb" in err
    assert not out.exists()


def test_calibrate_refuses_a_measurement_that_is_not_a_number(capsys, tmp_path):
    data = json.loads((RESULTS / "h100-sxm5-80gb" / "gemm.json").read_text())
    for row in data["rows"]:
        row["measured_ms"] = float("nan")  # json writes NaN, which Python's reader takes
    f = tmp_path / "gemm.json"
    f.write_text(json.dumps(data))
    out = tmp_path / "h100.toml"
    refused(capsys, "calibrate", "--from", str(f), "--gpu", "h100", "-o", str(out),
            match="from a nanosecond (1e-6) to a day, got nan")  # fmt: skip
    assert not out.exists()


def test_calibrate_says_default_for_a_parameter_no_row_constrains(capsys, tmp_path):
    out = tmp_path / "h100.toml"
    gemm = RESULTS / "h100-sxm5-80gb" / "gemm.json"
    code, stdout, err = run(capsys, "calibrate", "--from", str(gemm), "--gpu", "h100", "-o",
                            str(out))  # fmt: skip
    assert code == 0, err
    issue = next(line for line in stdout.splitlines() if line.strip().startswith("issue_gelu"))
    assert issue.split()[1] == "default", issue
    assert "nan" not in stdout


def test_serve_takes_weight_dtype_as_api_serve_does(capsys):
    kv = {}
    for extra in ((), ("--weight-dtype", "int4")):
        code, out, err = run(capsys, "serve", "llama3-8b", "--requests", "4", "--osl", "8",
                             "--format", "json", *extra)  # fmt: skip
        assert code == 0, err
        kv[extra] = json.loads(out)["summary"]["kv_cache_tokens"]
    assert kv[("--weight-dtype", "int4")] > kv[()]  # 4-bit weights leave more room for the cache


def test_serve_dtype_int4_names_the_option_serve_has(capsys):
    err = refused(capsys, "serve", "llama3-8b", "--requests", "4", "--dtype", "int4",
                  match="int4 is a weight format")  # fmt: skip
    assert "serve" in err


def test_serve_table_prints_no_nan_when_no_request_decodes(capsys):
    code, out, err = run(capsys, "serve", "llama3-8b", "--requests", "4", "--osl", "1")
    assert code == 0, err
    assert "nan" not in out.lower(), out
    assert "- tok/s per user" in " ".join(out.split())


def test_fp8_scales_without_fp8_is_refused_not_ignored(capsys):
    refused(capsys, "predict", "llama3.2-1b", "--fp8-scales", "row", match="needs dtype=fp8")
    refused(capsys, "predict", "gemm", "4096", "--scales", "row", match="apply to fp8 GEMMs")
    code, _, err = run(capsys, "predict", "gemm", "4096", "--dtype", "fp8", "--scales", "row")
    assert code == 0, err


def test_moe_imbalance_without_expert_parallelism_is_refused_not_ignored(capsys):
    refused(capsys, "predict", "llama3.2-1b", "--moe-imbalance", "2", match="needs ep > 1")
    refused(capsys, "predict", "mixtral-8x7b", "--moe-imbalance", "2", match="needs ep > 1")


def test_csv_keeps_its_rows_on_stdout_and_says_its_warnings_on_stderr(capsys):
    code, out, err = run(capsys, "predict", "llama2-7b", "--seq", "1M", "--format", "csv")
    assert code == 0, err
    assert "does not fit" in err and "does not fit" not in out
    assert out.splitlines()[0].startswith("name,")


# --- sweep3 -------------------------------------------------------------------------------------

SEARCH = ("search", "llama3-8b", "--system", "dgx-h100", "--gpus", "8")


def test_search_json_is_api_search_with_the_best_plan_as_predict_writes_it(capsys):
    import pytest

    from gpuperf import api

    code, out, err = run(capsys, *SEARCH, "--global-batch", "64", "--top", "2", "--format", "json")
    assert code == 0, err
    got = json.loads(out)
    res = api.search("llama3-8b", system="dgx-h100", gpus=8, global_batch=64, top=2)
    assert [p["label"] for p in got["plans"]] == [r.label() for r in res.ranked]
    assert got["plans"][0]["step_time_ms"] == res.ranked[0].step_time * 1e3
    # the contract of every command: total_ms and ops (the best plan's), as predict writes them
    assert got["total_ms"] == got["plans"][0]["step_time_ms"] == res.best.total_ms
    assert got["ops"] and {"name", "kind", "flops", "bytes", "bound", "time_ms"} <= set(
        got["ops"][0]
    )
    assert got["mfu"] == pytest.approx(got["plans"][0]["mfu"])
    assert got["extra"]["plan"] == got["plans"][0]["label"]


def test_search_refuses_sizes_its_mode_does_not_use(capsys):
    import pytest

    from gpuperf import api
    from gpuperf.errors import InputError

    cases = [("prefill", "--global-batch", "global_batch"), ("decode", "--global-batch", ""),
             ("train", "--batch", "batch"), ("train", "--ctx", "ctx"),
             ("prefill", "--ctx", ""), ("decode", "--seq", "seq")]  # fmt: skip
    for mode, flag, arg in cases:
        refused(capsys, *SEARCH, "--mode", mode, flag, "8", match=f"({flag}) applies to mode")
        if arg:
            with pytest.raises(InputError, match="applies to mode"):
                api.search("llama3-8b", system="dgx-h100", gpus=8, mode=mode, **{arg: 8})
    with pytest.raises(InputError, match="gpus must be a whole number"):
        api.search("llama3-8b", system="dgx-h100", gpus=0)


def test_a_reader_that_leaves_early_ends_the_program_quietly_with_exit_0():
    """`gpuperf hw list | head -1`: the pipe's reader is gone before gpuperf writes (its end
    closed first, so every write meets a broken pipe, whatever the timing)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    for args in (["hw", "list"], ["predict", "llama2-7b", "--gpu", "h100"], ["--help"],
                 ["predict", "llama2-7b", "--format", "json"]):  # fmt: skip
        read, write = os.pipe()
        os.close(read)
        try:
            cmd = [sys.executable, "-m", "gpuperf", *args]
            done = subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, env=env, cwd=root,
                                  timeout=120)  # fmt: skip
        finally:
            os.close(write)
        assert (done.returncode, done.stderr.decode()) == (0, ""), args


def test_slo_time_without_a_unit_is_refused_not_taken_for_ms(capsys):
    import pytest

    from gpuperf import api
    from gpuperf.errors import InputError

    for slo, got in (("ttft=5", "no unit"), ("ttft=2s,tpot=50", "no unit"), ("e2e=5us", "'us'")):
        err = refused(capsys, "serve", "llama3.2-1b", "--slo", slo, "--requests", "20",
                      match=got)  # fmt: skip
        assert "ms or s" in err
        with pytest.raises(InputError, match="give the time in ms or s"):
            api.serve_plan("llama3.2-1b", slo, requests=20)


def test_scenario_options_that_cannot_mean_anything_are_refused_not_ignored(capsys):
    import pytest

    from gpuperf import api
    from gpuperf.errors import InputError

    cases = [
        (("--mla", "absorbed"), {"mla": "absorbed"}, "llama2-7b has no MLA"),
        (("--dp-overlap",), {"dp_overlap": True}, "training only"),
        (("--no-dp-overlap", "--mode", "decode"), {"dp_overlap": False, "mode": "decode"},
         "training only"),
        (("--mode", "train", "--dp-overlap"), {"mode": "train", "dp_overlap": True}, "dp·cp > 1"),
        (("--tp-impl", "dtensor"), {"tp_impl": "dtensor"}, "needs tp > 1"),
        (("--mode", "train", "--kv-dtype", "fp8"), {"mode": "train", "kv_dtype": "fp8"},
         "keeps no cache"),
    ]  # fmt: skip
    for flags, kwargs, match in cases:
        refused(capsys, "predict", "llama2-7b", *flags, match=match)
        with pytest.raises(InputError, match=match):
            api.predict("llama2-7b", **kwargs)
    # where they mean something they still work
    api.predict("llama2-7b", mode="train", dp=8, dp_overlap=True, system="dgx-h100")
    api.predict("llama2-7b", tp=2, tp_impl="dtensor", kv_dtype="fp8")


def test_serve_refuses_options_a_trace_or_the_table_ignores(capsys, tmp_path):
    import pytest

    from gpuperf import api
    from gpuperf.errors import InputError

    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n')
    for flags in (("--isl", "100"), ("--osl", "100"), ("--seed", "3")):
        refused(capsys, "serve", "llama3.2-1b", "--trace", str(trace), *flags,
                match=f"so {flags[0]} would be ignored")  # fmt: skip
    with pytest.raises(InputError, match="so --isl would be ignored"):
        api.serve("llama3.2-1b", trace=str(trace), isl=100)
    code, out, err = run(capsys, "serve", "llama3.2-1b", "--trace", str(trace), "--format", "json")
    assert code == 0 and json.loads(out)["summary"], err
    for fmt in ("table", "csv"):
        refused(capsys, "serve", "llama3.2-1b", "--requests", "4", "--per-request", "--format",
                fmt, match="--per-request adds every request")  # fmt: skip


def test_calibrate_from_files_refuses_the_options_of_a_live_run(capsys, tmp_path):
    gemm = RESULTS / "h100-sxm5-80gb" / "gemm.json"
    out = tmp_path / "h100.toml"
    for flags in (("--device", "cuda"), ("--no-collectives",), ("--allow-cpu",)):
        refused(capsys, "calibrate", "--from", str(gemm), "--gpu", "h100", "-o", str(out), *flags,
                match=f"{flags[0]} would be ignored")  # fmt: skip
    assert not out.exists()


def test_a_quantized_checkpoint_is_not_predicted_in_bf16_without_a_word(capsys, tmp_path):
    """quantization_config is not read (a warning, not a mapping): it says how to model it."""
    from gpuperf import api

    preset = Path(__file__).resolve().parents[2] / "gpuperf/workloads/presets/llama3-8b.json"
    config = json.loads(preset.read_text())
    for qc, hint in (({"quant_method": "awq", "bits": 4}, "--weight-dtype int4"),
                     ({"quant_method": "gptq", "bits": 8}, "--weight-dtype int8"),
                     ({"quant_method": "fp8"}, "--dtype fp8")):  # fmt: skip
        path = tmp_path / f"{qc['quant_method']}.json"
        path.write_text(json.dumps({**config, "quantization_config": qc}))
        code, out, err = run(capsys, "predict", str(path), "--format", "json")
        assert code == 0, err
        said = " ".join(json.loads(out)["warnings"])
        assert f"quantization_config ({qc['quant_method']}" in said and hint in said, said
        assert not api.predict(str(path), weight_dtype="int4" if "int4" in hint else "int8",
                               dtype="bf16").warnings  # fmt: skip
        assert any("quantization_config" in w for w in api.serve(str(path), requests=2).warnings)
    assert not api.predict("llama3-8b").warnings  # no quantization_config: no word


PRESET = Path(__file__).resolve().parents[2] / "gpuperf/workloads/presets/llama3-8b.json"


def test_an_empty_model_name_is_called_empty(capsys):
    refused(capsys, "predict", "", match="the model name is empty")


def test_a_bad_config_is_named_by_its_path(capsys, tmp_path):
    bad = tmp_path / "float.json"
    bad.write_text(json.dumps({**json.loads(PRESET.read_text()), "hidden_size": 1.5}))
    refused(capsys, "predict", str(bad), match=f"error: {bad}: hidden_size must be")


def test_a_results_row_whose_op_lacks_its_type_names_the_file_and_row(capsys, tmp_path):
    data = json.loads((RESULTS / "h100-sxm5-80gb" / "gemm.json").read_text())
    del data["rows"][0]["op"]["type"]
    rows = tmp_path / "bad.json"
    rows.write_text(json.dumps(data))
    out = str(tmp_path / "x.toml")
    refused(capsys, "calibrate", "--from", str(rows), "--gpu", "h100", "-o", out, "--all-shapes",
            match=f"{rows}: rows[0]: op record")  # fmt: skip


def test_report_measured_names_the_file_that_is_not_a_results_file(capsys, tmp_path):
    refused(capsys, "report", "llama2-7b", "--measured", str(PRESET), "-o",
            str(tmp_path / "r.html"), match=f"{PRESET}: expected a results file")  # fmt: skip


def test_attention_head_dim_is_bounded_with_the_limit_named(capsys):
    import pytest

    from gpuperf import api
    from gpuperf.errors import InputError

    refused(capsys, "predict", "attention", "--seq", "4096", "--head-dim", "1000000",
            match="head-dim must be at most 1024")  # fmt: skip
    with pytest.raises(InputError, match="at most 1024"):
        api.predict_op("attention", batch=1, heads=8, seq=128, head_dim=2048)


def test_an_slo_that_names_a_target_twice_is_refused(capsys):
    refused(capsys, "serve", "llama3.2-1b", "--slo", "ttft=5ms,ttft=6ms", "--requests", "20",
            match="ttft_p90 twice")  # fmt: skip
    refused(capsys, "serve", "llama3.2-1b", "--slo", "tpot_p99=5ms,TPOT_P99=9ms",
            "--requests", "20", match="tpot_p99 twice")  # fmt: skip
