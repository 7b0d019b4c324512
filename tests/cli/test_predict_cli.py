"""`gpuperf predict`: happy paths, output formats, and every bad input -> exit 2 with one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuperf.cli import main
from gpuperf.perfmodel.optime import OpTime
from gpuperf.step import cost as P

ROOT = Path(__file__).resolve().parents[2]
GPUPERF = Path(sys.executable).parent / "gpuperf"


@pytest.fixture
def fast_model(monkeypatch):
    """A fixed 10 µs per kernel, so these tests check the CLI, not the time model."""
    t = 10e-6
    monkeypatch.setattr(P, "_op_time", lambda op, g, s=None: OpTime(t, "memory", t_mem=t))


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_predict_model_table(capsys, fast_model):
    code, out, err = run(capsys, "predict", "llama2-7b", "--gpu", "h100", "--seq", "2048")
    assert code == 0, err
    assert "llama2-7b · prefill · batch 1 × seq 2048 · bf16 · fused · on h100-sxm5-80gb" in out
    for text in ("time (ms)", "FLOPs (G)", "×32", "mlp/down", "tokens/s", "MFU", "memory"):
        assert text in out


def test_predict_json_parses(capsys, fast_model):
    code, out, _ = run(capsys, "predict", "llama2-7b", "--seq", "512", "--format", "json")
    assert code == 0
    obj = json.loads(out)
    assert obj["total_ms"] > 0 and obj["scenario"]["seq"] == 512
    assert {"name", "kind", "flops", "bytes", "intensity", "bound", "time_ms"} <= set(obj["ops"][0])
    assert len({op["name"] for op in obj["ops"]}) == len(obj["ops"])  # every op, not folded


def test_predict_by_kind_and_top(capsys, fast_model):
    code, out, _ = run(capsys, "predict", "llama2-7b", "--by", "kind", "--format", "csv")
    assert code == 0
    kinds = [line.split(",")[0] for line in out.splitlines()[1:]]
    assert "gemm" in kinds and "attention" in kinds and len(kinds) == len(set(kinds))
    code, out, _ = run(capsys, "predict", "llama2-7b", "--top", "3", "--format", "csv")
    assert code == 0 and len(out.splitlines()) == 4


def test_predict_generate_shows_latency(capsys, fast_model):
    code, out, _ = run(capsys, "predict", "llama2-7b", "--mode", "generate", "--seq", "128")
    assert code == 0 and "time to first token" in out and "per output token" in out


def test_predict_gemm(capsys, fast_model):
    code, out, _ = run(capsys, "predict", "gemm", "4096", "--format", "json")
    assert code == 0
    op = json.loads(out)["ops"][0]
    assert op["kind"] == "gemm" and op["flops"] == 2 * 4096**3
    code, out, _ = run(capsys, "predict", "gemm", "1K:4K:x2")
    assert code == 0 and "TFLOP/s" in out and "1024×1024×1024" in out


def test_every_help_has_an_example(capsys):
    for args in (["predict"], ["predict", "model"], ["predict", "gemm"], ["predict", "copy"]):
        code, out, _ = run(capsys, *args, "--help")
        assert code == 0 and "Example" in out and "gpuperf predict" in out


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


LLAMA = {
    "model_type": "llama",
    "hidden_size": 4096,
    "num_hidden_layers": 2,
    "num_attention_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
}


@pytest.mark.parametrize(
    "args, message",
    [
        (["llama2-7x"], "did you mean llama2-7b"),
        (["llama2-7b", "--gpu", "h10"], "h100"),
        (["llama2-7b", "--seq", "abc"], "not a size"),
        (["llama2-7b", "--batch", "1.5"], "not a whole number"),
        (["llama2-7b", "--batch", "0"], "must be positive"),
        (["llama2-7b", "--seq", "-1"], "seq must be positive, got '-1'"),
        (["llama2-7b", "--dtype", "fp12"], "unknown dtype"),
        (["llama2-7b", "--kv-dtype", "int3"], "unknown dtype"),
        (["llama2-7b", "--mode", "infer"], "infer"),
        (["/nonexistent/dir/config.json"], "config.json"),
        (["{tmp}/broken.json"], "broken.json"),
        (["{tmp}/odd_heads.json"], "must divide"),
        (["llama2-7b", "--gpu", "{tmp}/bad.toml"], "bad.toml"),
        (["gemm", "4096", "4096"], "M N K"),
        (["gemm", "0"], "must be positive"),
        (["attention", "--seq", "x"], "not a size"),
    ],
)
def test_bad_input_is_one_line_exit_2(capsys, tmp_path, fast_model, args, message):
    _write(tmp_path, "broken.json", '{"hidden_size": 4096,')
    _write(tmp_path, "odd_heads.json", json.dumps({**LLAMA, "num_attention_heads": 3}))
    _write(tmp_path, "bad.toml", "name = [unclosed\n")
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code, out, err = run(capsys, "predict", *args)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("gpuperf: error:"), err
    assert message in err and "Traceback" not in err


def test_predict_path_does_not_import_torch():
    code = "import gpuperf.cli.predict_cmd, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.skipif(not GPUPERF.exists(), reason="console script not installed")
def test_demo_command_end_to_end():
    """`make demo` with the real time model, in a fresh process: a table with totals, no torch."""
    env = {**os.environ, "PYTHONWARNINGS": "error::DeprecationWarning:gpuperf"}
    res = subprocess.run(
        [str(GPUPERF), "predict", "llama2-7b", "--gpu", "h100", "--seq", "2048"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    assert "time (ms)" in res.stdout and "tokens/s" in res.stdout and "MFU" in res.stdout


@pytest.mark.parametrize(
    "extra",
    [["--kv-dtype", "fp8"], ["--impl", "eager"], ["--cuda-graphs"], ["--by", "layer"]],
)
def test_plans_take_every_single_gpu_option(capsys, extra):
    fmt = "csv" if "--by" in extra else "json"  # --by chooses table rows; JSON has every op
    code = main_code(["predict", "llama2-70b", "--mode", "decode", "--system", "dgx-h100",
                      "--tp", "8", "--format", fmt, *extra])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err
    if fmt == "json":
        assert json.loads(out.out)["extra"]["plan"] == "tp8 pp1 dp1"
    else:
        assert out.out.splitlines()[0].startswith("name,") and "L79" in out.out


def test_plan_on_a_system_of_other_gpus_is_one_line_exit_2(capsys):
    code = main_code(["predict", "llama2-70b", "--system", "dgx-h100", "--tp", "8", "--gpu",
                      "h200"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "built of h100-sxm5-80gb" in err and "Traceback" not in err


def main_code(args):
    from gpuperf.cli import main

    try:
        main(args)
    except SystemExit as exc:
        return exc.code
    return 0


@pytest.mark.parametrize(
    "args",
    [
        ["norm", "rmsnorm", "--rows", "1:10000:+1", "--cols", "1:10000:+1"],
        ["gemm", "1:9999:+1", "1:9999:+1", "1"],
        ["gemm", "1:200:+1", "1:200:+1", "1"],  # each sweep small, the product 40,000
    ],
)
def test_sweep_products_are_capped_before_any_work(capsys, args):
    code, out, err = run(capsys, "predict", *args, "--gpu", "h100")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "points; at most 10,000" in err


def test_formats_and_mla_from_the_command_line(capsys):
    code, out, err = run(capsys, "predict", "llama3-8b", "--gpu", "h200", "--mode", "decode",
                         "--weight-dtype", "int4", "--format", "json")  # fmt: skip
    assert code == 0, err
    shapes = [op["shape"] for op in json.loads(out)["ops"] if op["kind"] == "gemm"]
    assert any("wint4" in s for s in shapes)
    code, out, err = run(capsys, "predict", "llama3-8b", "--gpu", "h200", "--dtype", "fp8",
                         "--fp8-scales", "row", "--format", "json")  # fmt: skip
    assert code == 0 and any(" row" in op["shape"] for op in json.loads(out)["ops"]), err
    code, out, err = run(capsys, "predict", "deepseek-v3", "--gpu", "h200", "--mode", "decode",
                         "--mla", "absorbed", "--format", "json")  # fmt: skip
    assert code == 0 and any("d576/512" in op["shape"] for op in json.loads(out)["ops"]), err


def test_by_and_top_with_json_are_refused_not_ignored(capsys):
    code = main_code(["predict", "llama3-8b", "--by", "kind", "--top", "2", "--format", "json"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--format json carries every op" in err


def test_weight_dtype_is_read_as_the_api_reads_it(capsys):
    """--weight-dtype INT4 is int4 (as api.predict(weight_dtype="INT4") and --dtype BF16);
    a format that is not weight-only is one line, exit 2."""
    args = ("predict", "llama3-8b", "--gpu", "h100", "--mode", "decode", "--format", "json")
    code, upper, err = run(capsys, *args, "--weight-dtype", " INT4 ")
    assert code == 0, err
    code, lower, err = run(capsys, *args, "--weight-dtype", "int4")
    assert code == 0 and json.loads(upper)["total_ms"] == json.loads(lower)["total_ms"]
    code, out, err = run(capsys, *args, "--weight-dtype", "bf16")
    assert code == 2 and err.count("\n") == 1 and "not one of 'int4', 'int8'" in err


def test_int4_activations_are_a_one_line_error(capsys):
    code, out, err = run(capsys, "predict", "llama3-8b", "--dtype", "int4")
    assert code == 2 and err.count("\n") == 1 and "--weight-dtype" in err


def test_predict_kv_lengths_seen_from_the_cli(capsys):
    """--kv-lengths seen: the same eager decode step less the cuDNN plan, recorded in the JSON
    scenario; one line and exit 2 where there is no decode step."""
    base = ("predict", "llama3-8b", "--gpu", "h200", "--mode", "decode", "--impl", "eager",
            "--format", "json")  # fmt: skip
    code, out, err = run(capsys, *base)
    assert code == 0, err
    new = json.loads(out)
    code, out, err = run(capsys, *base, "--kv-lengths", "seen")
    assert code == 0, err
    seen = json.loads(out)
    assert seen["scenario"]["kv_lengths"] == "seen" and new["scenario"]["kv_lengths"] == "new"
    from gpuperf.hardware.loader import load_gpu

    drop = new["total_ms"] - seen["total_ms"]
    assert drop == pytest.approx(load_gpu("h200").params.host_attn_plan_s * 1e3, rel=1e-6)
    code, out, err = run(capsys, "predict", "llama3-8b", "--kv-lengths", "seen")
    assert code == 2 and "kv_lengths=seen" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
