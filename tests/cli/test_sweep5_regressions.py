"""The fifth sweep (hostile inputs and invariants, 2026-11-25, a later session), one named case
each: a closed stdout, an elementwise fn that is not a string, a size the mode does not use,
more CPU ranks than the host can run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import refused, run

from gpuperf import api
from gpuperf.errors import EnvironmentUnavailable, InputError

ROOT = Path(__file__).resolve().parents[2]


def test_a_closed_stdout_is_one_line_and_exit_3_not_a_traceback():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (["predict", "llama2-7b", "--format", "json"], ["hw", "list"]):
        cmd = [sys.executable, "-m", "gpuperf", *args]
        done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                              cwd=ROOT, timeout=120, close_fds=True,
                              preexec_fn=lambda: os.close(1))  # fmt: skip
        err = done.stderr.decode()
        assert done.returncode == 3, (args, err)
        assert err == "gpuperf: error: cannot write the output: standard output is closed\n"


@pytest.mark.parametrize("fn", [[1], {}, set(), 3])
def test_an_elementwise_fn_that_is_not_a_name_is_an_input_error(fn):
    with pytest.raises(InputError, match="unknown elementwise fn"):
        api.predict_op("elementwise", gpu="h100", fn=fn, numel=1024)


MISPLACED = [("train", "--ctx", "applies to mode decode, not train"),
             ("prefill", "--new-tokens", "applies to mode generate, not prefill"),
             ("decode", "--seq", "applies to mode prefill, generate and train, not decode"),
             ("generate", "--ctx", "applies to mode decode, not generate")]  # fmt: skip


@pytest.mark.parametrize(("mode", "flag", "match"), MISPLACED)
def test_a_size_the_mode_does_not_use_is_refused_by_predict_report_and_the_api(
    capsys, tmp_path, mode, flag, match
):
    """`--mode train --ctx 100` used to be ignored without a word (search refused it)."""
    refused(capsys, "predict", "llama3-8b", "--mode", mode, flag, "100", match=match)
    out = str(tmp_path / "r.html")
    refused(capsys, "report", "llama3-8b", "--mode", mode, flag, "100", "-o", out, match=match)
    assert not Path(out).exists()
    with pytest.raises(InputError, match=match):
        api.predict("llama3-8b", mode=mode, **{flag[2:].replace("-", "_"): 100})


def test_sizes_left_out_take_their_defaults_and_for_mode_drops_the_unused_ones():
    kw = {"mode": "decode", "batch": 32, "cuda_graphs": True}  # GPU-bound: the cache shows
    base = api.predict("llama3-8b", **kw).total_ms
    assert api.predict("llama3-8b", ctx=2048, **kw).total_ms == base
    assert api.predict("llama3-8b", ctx=4096, **kw).total_ms > base
    gen = api.predict("llama3-8b", mode="generate", seq=2048, new_tokens=128).total_ms
    assert api.predict("llama3-8b", mode="generate").total_ms == gen
    kw = api.for_mode({"mode": "decode", "seq": 64, "ctx": 4096, "new_tokens": 8, "batch": 2})
    assert kw == {"mode": "decode", "ctx": 4096, "batch": 2}


MANY_RANKS = [
    ["measure", "allreduce", "--bytes", "1K", "--nproc", "100000", "--device", "cpu"],
    ["validate", "llama3-8b", "--impl", "eager", "--mode", "train", "--dp", "4096", "--nproc",
     "4096", "--device", "cpu"],
]  # fmt: skip


@pytest.mark.parametrize("args", MANY_RANKS)
def test_more_cpu_ranks_than_the_host_can_run_are_refused_before_any_start(capsys, args):
    """--device cpu --nproc 100000 used to start that many gloo worker processes."""
    code, _, err = run(capsys, *args)
    assert code == 3, err
    assert err.count("\n") == 1 and "runs one process per rank" in err, err
    assert "4 per core" in err


def test_the_cpu_rank_check_counts_cores_and_memory(monkeypatch):
    from gpuperf.measure import env

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 64)  # the host's, not this process's
    env.check_cpu_ranks(8)  # 4 per core on 2 cores
    with pytest.raises(EnvironmentUnavailable, match="9 ranks on 2 cores"):
        env.check_cpu_ranks(9)
    monkeypatch.setattr(env, "host_available_bytes", lambda: 1.0 * 2**30)
    with pytest.raises(EnvironmentUnavailable, match="host memory"):
        env.check_cpu_ranks(8)  # 8 × 0.3 GiB over 1 GiB free


def _results_with(tmp_path, **row_fields) -> Path:
    import json

    src = ROOT / "benchmarks/results/h100-sxm5-80gb/attention.json"
    data = json.loads(src.read_text())
    data["rows"][0].update(row_fields)
    out = tmp_path / "attention.json"
    out.write_text(json.dumps(data))
    return out


@pytest.mark.parametrize("ms", [0, -1, 1e9, True, 5e-324])
def test_calibrate_and_report_refuse_the_same_measured_times(capsys, tmp_path, ms):
    """calibrate --from used to fit around a row of measured_ms 0 that report refused."""
    path = _results_with(tmp_path, measured_ms=ms)
    match = "measured_ms must be a number of milliseconds from a nanosecond (1e-6) to a day"
    refused(capsys, "calibrate", "--from", str(tmp_path), "--gpu", "h100", "-o",
            str(tmp_path / "p.toml"), match=match)  # fmt: skip
    refused(capsys, "report", "llama2-7b", "--measured", str(path), "-o",
            str(tmp_path / "r.html"), match=match)  # fmt: skip
    assert not (tmp_path / "p.toml").exists() and not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(("key", "value"), [("flops", -5), ("bytes", float("inf")),
                                            ("flops", "many")])  # fmt: skip
def test_report_refuses_a_measured_row_of_negative_or_endless_work(capsys, tmp_path, key, value):
    path = _results_with(tmp_path, **{key: value})
    refused(capsys, "report", "llama2-7b", "--measured", str(path), "-o",
            str(tmp_path / "r.html"), match=f"{key} must be a number >= 0")  # fmt: skip


def test_an_mfu_over_100_percent_names_the_count_that_causes_it():
    """A 2^31-token vocabulary's prefill passes 100% MFU through its lm_head (counted per token,
    run for the last token only); the warning used to blame causal attention."""
    from gpuperf.workloads.config import from_hf_dict

    big = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 2,
           "num_attention_heads": 8, "num_key_value_heads": 8, "intermediate_size": 2816,
           "vocab_size": 2**31, "max_position_embeddings": 4096}  # fmt: skip
    p = api.predict(from_hf_dict(big, name="big-vocab"), gpu="h100", seq=4096)
    (text,) = [w for w in p.warnings if w.startswith("MFU")]
    assert p.mfu > 1 and "lm_head for every prompt token" in text and "causal" not in text
    long = api.predict("llama3-8b", gpu="h100", seq=524288)
    (text,) = [w for w in long.warnings if w.startswith("MFU")]
    assert long.mfu > 1 and "masked half of causal attention" in text


@pytest.mark.parametrize(("mode", "flag"), [("prefill", "--ctx"), ("decode", "--seq")])
def test_validate_refuses_a_size_the_mode_does_not_use(capsys, mode, flag):
    refused(capsys, "validate", "llama2-7b", "--impl", "eager", "--mode", mode, flag, "5",
            "--device", "cpu", match="applies to mode")  # fmt: skip


def test_calibrate_refuses_a_recorded_run_whose_scenario_predict_refuses(capsys, tmp_path):
    """A run of mode 'bogus' used to print two progress lines before its error; batch 0
    passed (a size its mode does not use, a decode run's seq, is dropped as the replay drops
    it)."""
    import json

    src = ROOT / "benchmarks/results/h100-sxm5-80gb/e2e_hf_run1.json"
    for field, value, match in (("mode", "bogus", "unknown mode 'bogus'"),
                                ("batch", 0, "batch must be a positive integer")):  # fmt: skip
        data = json.loads(src.read_text())
        data["runs"][0]["scenario"][field] = value
        path = tmp_path / f"e2e_{field}.json"
        path.write_text(json.dumps(data))
        err = refused(capsys, "calibrate", "--from", str(path), "--gpu", "h100", "-o",
                      str(tmp_path / "c.toml"), match=match)  # fmt: skip
        assert str(path) in err


def test_materialized_decode_attention_reads_only_a_sliding_layers_window():
    """Fused decode with attn='math' charged Gemma-2's local layers every cached key (32,769),
    where flash reads their 4,096-key window."""
    t = api.predict("gemma2-9b", gpu="h100", mode="decode", batch=8, ctx=32768, attn="math").table
    scores = t[t["name"].str.endswith("attn/scores")]["shape"].tolist()
    assert scores[0] == "128×1×4096×256" and scores[1] == "128×1×32769×256"  # local, global


def test_a_weight_gradient_is_measured_as_autograd_runs_it_and_classed_as_predicted():
    from gpuperf.measure.kernels import measure_op
    from gpuperf.measure.timing import Budget
    from gpuperf.perfmodel.op_classes import misaligned
    from gpuperf.perfmodel.ops import Gemm

    op = Gemm("l.wgrad", 64, 48, 30, "fp32", wgrad=True)  # 30 tokens: not a leading dimension
    assert not misaligned(op) and misaligned(Gemm("l", 64, 48, 30, "fp32"))
    m = measure_op(op, "cpu", Budget(warmup_ms=1, rep_ms=2, min_reps=2))
    assert m.timing.median_s > 0 and m.check_err < 1e-5 and "dYᵀ" in m.detail["kernel"]


def test_report_takes_a_measured_file_with_rows_not_measured(capsys, tmp_path):
    """A null measured_ms (a row not measured) beside measured ones: report refused the file
    (pandas made the null a NaN), which calibrate reads."""
    import json

    src = ROOT / "benchmarks/results/h100-sxm5-80gb/gemm.json"
    data = json.loads(src.read_text())
    data["rows"][0]["measured_ms"] = None
    path = tmp_path / "gemm.json"
    path.write_text(json.dumps(data))
    out = tmp_path / "r.html"
    code, _, err = run(capsys, "report", "llama2-7b", "--measured", str(path), "-o", str(out))
    assert code == 0 and out.exists(), err


def test_a_gpu_without_a_host_fit_takes_the_pool_machines_host():
    """The host is the CPU's and PyTorch's: an A100 profile (no fit of its own) issued eager
    kernels at a default 8 us against the H100 pool machine's 24.8 us, so a host-bound
    Hugging Face decode step came out 3x faster on the A100."""
    from gpuperf.hardware.loader import load_gpu

    assert load_gpu("a100").params.host_dispatch_s == load_gpu("h100").params.host_dispatch_s
    kw = {"mode": "decode", "batch": 1, "ctx": 4096, "impl": "eager", "kv_lengths": "seen"}
    a100 = api.predict("llama3.2-1b", gpu="a100", **kw).total_ms
    h100 = api.predict("llama3.2-1b", gpu="h100", **kw).total_ms
    assert abs(a100 / h100 - 1) < 0.05
