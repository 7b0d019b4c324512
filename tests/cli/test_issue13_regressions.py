"""Issue 13's hostile inputs, one named case each, run as a user runs them: through the CLI's entry
point (exit 2 and one "gpuperf: error:" line, or exit 0 with the stated output) or through the
Python API (InputError). Unit tests beside the code check the same rules one layer down
(test_config, test_fileio, test_units_sweeps, test_hardware_loader, test_api); the generated
cases are tests/unit/test_hostile_inputs.py."""

from __future__ import annotations

import json
import math
import os
import tracemalloc
from pathlib import Path

import pytest
from clirun import run

from gpuperf import api
from gpuperf.errors import InputError

TINY = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "vocab_size": 1000, "max_position_embeddings": 2048}  # fmt: skip
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "h100-sxm5-80gb"
LONG = "a" * 300  # longer than a file name may be (255 bytes): ENAMETOOLONG, not "no such file"


def refused(capsys, *args: str, match: str = "") -> str:
    """Run; assert exit 2 with one error line (containing `match`) and nothing on stdout."""
    code, out, err = run(capsys, *args)
    assert code == 2, (args, code, err[-2000:])
    assert out == "" and err.count("\n") == 1 and err.startswith("gpuperf: error: "), err
    assert match in err, err
    return err


def _config(folder: Path, **fields: object) -> str:
    f = folder / "config.json"
    f.write_text(json.dumps({**TINY, **fields}))
    return str(f)


def _profile(folder: Path, body: str, name: str = "p.toml") -> str:
    f = folder / name
    f.write_text(f'base = "h100-sxm5-80gb"\n{body}\n')
    return str(f)


# ------------------------------------------------------------------------------ sweeps, sizes


@pytest.mark.parametrize(
    "args",
    [["norm", "rmsnorm", "--rows", "1:10000:+1", "--cols", "1:10000:+1"],
     ["gemm", "1:9999:+1", "1:9999:+1", "1"]],
)  # fmt: skip
def test_sweep_products_are_refused_before_any_op_is_built(capsys, args):
    tracemalloc.start()
    try:
        refused(capsys, "predict", *args, "--gpu", "h100", match="at most 10,000")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20, f"{peak / 2**20:.0f} MiB allocated to refuse it"  # 10^8 ops: GBs


def test_sweep_x1_1_has_no_repeated_rows(capsys):
    code, out, err = run(capsys, "predict", "gemm", "1:2:x1.1", "--gpu", "h100", "--format", "csv")
    assert code == 0, err
    names = [line.split(",")[0] for line in out.splitlines()[1:]]
    assert names == ["gemm/1x1x1", "gemm/2x2x2"]


def test_sweep_with_an_infinite_factor_is_refused(capsys):
    refused(capsys, "predict", "gemm", "1K:4K:xinf", "--gpu", "h100", match="finite number > 1")


def test_a_size_past_2_53_is_never_rounded_through_a_float(capsys):
    err = refused(capsys, "predict", "llama2-7b", "--gpu", "h100", "--seq", "9007199254740993")
    assert "9007199254740993" in err  # as typed: a float would have made it ...992


# ---------------------------------------------------------------------- files that never end


@pytest.mark.parametrize(
    "args",
    [["predict", "/dev/zero", "--gpu", "h100"], ["predict", "llama2-7b", "--gpu", "/dev/zero"],
     ["report", "--from", "/dev/zero", "-o", "{d}/r.html"],
     ["calibrate", "--from", "/dev/zero", "--gpu", "h100", "-o", "{d}/c.toml"]],
)  # fmt: skip
def test_dev_zero_is_refused_not_read_to_the_end(capsys, tmp_path, args):
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    refused(capsys, *(a.format(d=tmp_path) for a in args), match="larger than")
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- config.json


@pytest.mark.parametrize(
    "fields, match",
    [({"num_hidden_layers": 1e12}, "num_hidden_layers must be a positive integer"),
     ({"rope_theta": "abc"}, "'rope_theta' must be a number"),
     ({"intermediate_size": 10**400}, "intermediate_size must be a positive integer"),
     ({"tie_word_embeddings": "false"}, "'tie_word_embeddings' must be true or false"),
     ({"model_type": "mixtral", "num_local_experts": 7.5, "num_experts_per_tok": 2},
      "'num_local_experts' must be a positive integer"),
     ({"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 1.5},
      "'num_experts_per_tok' must be a positive integer"),
     ({"hidden_size": "256"}, "hidden_size must be")],
)  # fmt: skip
def test_hostile_config_fields_are_one_line_errors(capsys, tmp_path, fields, match):
    path = _config(tmp_path, **fields)
    refused(capsys, "predict", path, "--gpu", "h100", match=match)
    refused(capsys, "models", "show", path, match=match)


def test_a_huge_number_in_a_config_is_not_printed_whole(capsys, tmp_path):
    err = refused(capsys, "predict", _config(tmp_path, intermediate_size=10**400))
    assert len(err) < 300, f"{len(err)} characters"  # 10**400 was echoed digit by digit


def test_a_config_that_is_not_utf8_is_refused(capsys, tmp_path):
    f = tmp_path / "config.json"
    f.write_bytes(b'{"model_type": "llama", "_name_or_path": "caf\xe9"}')
    refused(capsys, "models", "show", str(f), match="not UTF-8")


DEEP = "[" * 100_000 + "]" * 100_000  # deeper than json's own recursion limit


@pytest.mark.parametrize(
    "args",
    [["predict", "{f}", "--gpu", "h100"], ["models", "show", "{f}"],
     ["report", "--from", "{f}", "-o", "{d}/r.html"],
     ["calibrate", "--from", "{f}", "--gpu", "h100", "-o", "{d}/c.toml"]],
)  # fmt: skip
def test_deeply_nested_json_is_refused(capsys, tmp_path, args):
    src = tmp_path / "in"
    src.mkdir()
    f = src / "deep.json"
    f.write_text(DEEP)
    refused(capsys, *(a.format(f=f, d=tmp_path / "out") for a in args), match="nested too deeply")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize(
    "command", [["predict", "{f}", "--gpu", "h100"], ["models", "show", "{f}"]]
)
def test_escape_sequences_from_a_config_name_do_not_reach_the_terminal(capsys, tmp_path, command):
    path = _config(tmp_path, _name_or_path="\x1b[31mred\x1b[0m \x1b]0;title\x07 [bold]b")
    code, out, err = run(capsys, *(a.format(f=path) for a in command))
    assert code == 0, err
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "[bold]b" in out  # what is left is printed as written, markup included


# ------------------------------------------------------------------------------ profiles


@pytest.mark.parametrize(
    "body, match",
    [("[model]\nsustained_clock_frac = 0", "sustained_clock_frac must be positive"),
     ("[model]\nsustained_clock_frac = 50", "sustained_clock_frac is a fraction"),
     ("hbm_bw_gbps = -3350", "hbm_bw_gbps must be positive")],
)  # fmt: skip
def test_hostile_profile_values_are_one_line_errors(capsys, tmp_path, body, match):
    path = _profile(tmp_path, body)
    refused(capsys, "predict", "llama2-7b", "--gpu", path, match=match)
    refused(capsys, "hw", "show", path, match=match)


def test_markup_in_a_display_name_prints_literally(capsys, tmp_path):
    code, out, err = run(capsys, "hw", "show", _profile(tmp_path, 'display_name = "[/x] my gpu"'))
    assert code == 0, err
    assert "[/x] my" in out


# ------------------------------------------------------------------- measurements, results


@pytest.mark.parametrize(
    "data, match",
    [({"rows": [{"name": "x", "measured_ms": "abc"}]}, "measured_ms must be a number"),
     ({"rows": [{"kind": "gemm", "measured_ms": 1.0}]}, "needs a string 'name'"),
     ({"rows": "nope"}, "'rows' list"), ({"rows": [5]}, "row 0"), ([1, 2], "JSON object")],
)  # fmt: skip
def test_malformed_measured_rows_are_one_line_errors(capsys, tmp_path, data, match):
    f = tmp_path / "m.json"
    f.write_text(json.dumps(data))
    out = tmp_path / "r.html"
    refused(capsys, "report", "llama2-7b", "--seq", "128", "--measured", str(f), "-o", str(out),
            match=match)  # fmt: skip
    assert not out.exists()


# ---------------------------------------------------------------------------- collectives


def test_a_thousand_ranks_in_one_nvlink_domain_are_refused(capsys):
    refused(capsys, "predict", "allreduce", "--bytes", "1G", "--gpu", "h100", "--nproc", "1000",
            match="one server's NVLink domain")  # fmt: skip
    refused(capsys, "predict", "allreduce", "--bytes", "1G", "--system", "dgx-h100",
            "--nodes", "1", "--nproc", "1000", match="disagrees")  # fmt: skip


def test_a_thousand_ranks_of_a_system_are_spread_over_its_nodes_and_said_so(capsys):
    code, out, err = run(capsys, "predict", "allreduce", "--bytes", "1G", "--system", "dgx-h100",
                         "--nproc", "1000", "--format", "json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["nodes"] == 125  # 1000 / 8: not one NVLink node


def test_a_system_of_other_gpus_is_refused(capsys):
    refused(capsys, "predict", "llama2-70b", "--system", "dgx-h100", "--gpu", "h200",
            match="built of h100-sxm5-80gb")  # fmt: skip


def test_measure_a_collective_on_one_rank_is_refused(capsys):
    refused(capsys, "measure", "allreduce", "--bytes", "1K", "--nproc", "1", "--device", "cpu",
            match="at least 2 ranks")  # fmt: skip


# ----------------------------------------------------- found by test_hostile_inputs (issue 13)


@pytest.mark.parametrize(
    "args",
    [["predict", LONG], ["predict", LONG + ".json"], ["models", "show", LONG],
     ["search", LONG, "--system", "dgx-h100", "--gpus", "8"],
     ["report", "llama2-7b", "--seq", "128", "-o", "{d}/" + LONG + ".html"],
     ["calibrate", "--from", str(RESULTS / "relu.json"), "--gpu", "h100",
      "-o", "{d}/" + LONG + ".toml"]],
)  # fmt: skip
def test_a_name_too_long_for_the_file_system_is_a_one_line_error(capsys, tmp_path, args):
    refused(capsys, *(a.format(d=tmp_path) for a in args))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "body",
    ["sms = 1" + "0" * 400, "hbm_gib = 1" + "0" * 400, "[peak_tflops]\nbf16 = 1" + "0" * 400,
     "[model]\ngemm_eff = 1" + "0" * 400, "[model.extra]\nx = 1" + "0" * 400],
)  # fmt: skip
def test_a_400_digit_integer_in_a_profile_is_a_one_line_error(capsys, tmp_path, body):
    refused(capsys, "hw", "show", _profile(tmp_path, body))


@pytest.mark.parametrize("field, value", [("kv_heads", "abc"), ("q_len", "abc"), ("m", "abc")])
def test_ops_in_a_results_file_are_typed(capsys, tmp_path, field, value):
    """A results file's op fields are checked as predict_op's are ('abc' heads reached the
    attention model and failed there with a TypeError)."""
    rows = []
    for name in ("gemm.json", "attention.json"):
        row = json.loads((RESULTS / name).read_text())["rows"][0]
        if field in row["op"]:
            row["op"][field] = value
        rows.append(row)
    f = tmp_path / "results.json"
    f.write_text(json.dumps({"rows": rows, "env": {"gpu": "NVIDIA H100 80GB HBM3"}}))
    out = tmp_path / "r.html"
    refused(capsys, "report", "--from", str(f), "-o", str(out), match=field)
    assert not out.exists()


@pytest.mark.skipif(os.name != "posix", reason="POSIX file names are bytes")
def test_a_file_name_that_is_not_utf8_does_not_break_the_report(capsys, tmp_path):
    """argv carries such a name as surrogate escapes ('\\udcff'); the report embeds the model's
    source path, and writing it as UTF-8 raised UnicodeEncodeError."""
    f = Path(os.fsdecode(bytes(tmp_path) + b"/\xff.json"))
    f.write_text(json.dumps(TINY))
    out = tmp_path / "r.html"
    code, _, err = run(capsys, "report", str(f), "--seq", "128", "-o", str(out))
    assert code in (0, 2) and "Traceback" not in err, err
    assert out.exists() == (code == 0)


# ----------------------------------------------------------------------------------- API


@pytest.mark.parametrize(
    "call",
    [lambda: api.predict_op("gemm", m=-5.0), lambda: api.predict_op("copy", nbytes=-1.0),
     lambda: api.predict_op("gemm", m=True),
     lambda: api.predict_op("norm", fn="rmsnorm", rows=8, cols=math.nan),
     lambda: api.predict("llama2-7b", cuda_graphs="no"), lambda: api.predict(None),
     lambda: api.predict("llama2-7b", gpu=42),
     lambda: api.predict("llama2-7b", seq=9007199254740993),
     # found by test_hostile_inputs:
     lambda: api.predict_op(None), lambda: api.predict_op(["gemm"]),
     lambda: api.predict(LONG), lambda: api.predict("config\x00.json"),
     lambda: api.predict("llama2-7b", gpu="gpu\x00.toml"),
     lambda: api.predict_op("allreduce", system="dgx-h100", nbytes=2**30, ranks=1),
     lambda: api.predict_op("allreduce", gpu="h100", nbytes=2**30, ranks=1000)],
    ids=["gemm-m=-5.0", "copy-nbytes=-1.0", "gemm-m=True", "norm-cols=nan", "cuda_graphs=no",
         "predict-None", "gpu=42", "seq=2**53+1", "predict_op-None", "predict_op-list",
         "model-name-too-long", "model-NUL", "gpu-NUL", "allreduce-1-rank",
         "allreduce-1000-ranks-one-node"],
)  # fmt: skip
def test_api_hostile_values_are_input_errors(call):
    with pytest.raises(InputError):
        call()


@pytest.mark.parametrize(
    "args",
    [("predict", "gemm", "64", "--dtype", "int4"), ("predict", "norm", "--dtype", "int4"),
     ("predict", "llama3-8b", "--kv-dtype", "int4")],
)  # fmt: skip
def test_int4_is_a_weight_format_wherever_a_dtype_is_asked(capsys, args):
    # int4 was accepted as an operand dtype and the time model raised KeyError (a traceback)
    refused(capsys, *args, match="int4 is a weight format")
    with pytest.raises(InputError, match="weight format"):
        api.predict_op("elementwise", fn="add", numel=64, dtype="int4")
