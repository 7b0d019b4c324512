"""`gpuperf report`: files written for a model (one or several GPUs) and for saved results; every
bad input exits 2 with one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuperf.cli import main
from gpuperf.perfmodel.ops_io import op_to_dict
from gpuperf.perfmodel.optime import OpTime
from gpuperf.step import cost as P
from gpuperf.workloads import single_op


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


def test_report_one_gpu(capsys, tmp_path, fast_model):
    out_file = tmp_path / "r.html"
    code, out, err = run(capsys, "report", "llama2-7b", "--gpu", "h100", "--seq", "512",
                         "-o", str(out_file))  # fmt: skip
    assert code == 0, err
    assert f"report written to {out_file}" in out
    page = out_file.read_text()
    assert page.startswith("<!DOCTYPE html>") and 'id="fig-roofline"' in page
    assert "batch 1 × seq 512" in page and "NVIDIA H100 SXM5 80GB" in page
    assert 'id="fig-compare"' not in page


def test_report_several_gpus_and_scenario_options(capsys, tmp_path, fast_model):
    out_file = tmp_path / "cmp.html"
    args = ["report", "llama2-7b", "--gpu", "h100,h200,a100", "--mode", "decode", "--batch",
            "4", "--ctx", "1K", "--kv-dtype", "fp8", "--impl", "eager", "--cuda-graphs",
            "-o", str(out_file)]  # fmt: skip
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert "(3 results," in out
    page = out_file.read_text()
    assert 'id="fig-compare"' in page
    for name in ("h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-80gb"):
        assert name in page
    assert "decode · batch 4, ctx 1024" in page and "eager + CUDA graphs" in page


def test_report_from_predict_json(capsys, tmp_path, fast_model):
    code, out, _ = run(capsys, "predict", "llama2-7b", "--seq", "256", "--format", "json")
    assert code == 0
    saved = tmp_path / "p.json"
    saved.write_text(out)
    out_file = tmp_path / "p.html"
    code, out, err = run(capsys, "report", "--from", str(saved), "-o", str(out_file))
    assert code == 0, err
    assert "seq 256" in out_file.read_text()


def test_report_from_measurement_file_with_gpu(capsys, tmp_path):
    op = single_op.gemm(2048)
    row = {"op": op_to_dict(op), "name": op.name, "kind": "gemm", "shape": op.shape,
           "flops": op.cost().flops, "bytes": op.cost().bytes, "measured_ms": 0.05}  # fmt: skip
    saved = tmp_path / "gemm.json"
    saved.write_text(json.dumps({"env": {"device": "cpu"}, "rows": [row]}))
    out_file = tmp_path / "m.html"
    code, _, err = run(capsys, "report", "--from", str(saved), "--gpu", "a100", "-o",
                       str(out_file))  # fmt: skip
    assert code == 0, err
    page = out_file.read_text()
    assert "NVIDIA A100 SXM4 80GB" in page and "Measurement environment" in page


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give MODEL"),
        (["llama2-7b", "--gpu", "h1000"], "unknown gpu"),
        (["llama2-7b", "--gpu", ","], "--gpu"),
        (["llama2-7b", "--mode", "serve"], "mode"),
        (["llama2-7b", "--batch", "0"], "batch"),
        (["llama2-7b", "--dtype", "fp7"], "dtype"),
        (["no-such-model"], "no-such-model"),
        (["--from", "missing.json"], "missing.json does not exist"),
        (["llama2-7b", "--from", "x.json"], "not both"),
        (["--from", "a.json", "--measured", "b.json"], "--measured"),
        (["--from", "a.json", "--from", "b.json", "--gpu", "h100,a100,h200"], "3 GPUs for 2"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, args, message):
    code, _, err = run(capsys, "report", *args, "-o", str(tmp_path / "x.html"))
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert message in err
    assert not (tmp_path / "x.html").exists()


def test_unwritable_output_exits_2_before_any_work(capsys, tmp_path, fast_model, monkeypatch):
    from gpuperf import api

    def no_work(*a, **k):
        raise AssertionError("predicted before checking the output")

    monkeypatch.setattr(api, "predict", no_work)
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(capsys, "report", "llama2-7b", "-o", str(blocker / "r.html"))
    assert code == 2 and "cannot write" in err and len(err.strip().splitlines()) == 1


def test_a_report_that_fails_to_land_leaves_the_old_one(capsys, tmp_path, fast_model, monkeypatch):
    """The rename that puts the new report in place fails (disk full, a quota): the report that
    was there is still the whole old one, the error is one line, no temporary is left."""
    import os

    out_file = tmp_path / "r.html"
    out_file.write_text("<html>old</html>")

    def refused(src, dst):
        assert Path(src).read_text().rstrip().endswith("</html>")  # the new one was written
        raise OSError(122, "Disk quota exceeded")

    monkeypatch.setattr(os, "replace", refused)
    code, out, err = run(capsys, "report", "llama2-7b", "--seq", "128", "-o", str(out_file))
    assert code == 3 and out == "" and err.count("\n") == 1 and "Disk quota exceeded" in err
    assert out_file.read_text() == "<html>old</html>"
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_help_has_examples(capsys):
    code, out, _ = run(capsys, "report", "--help")
    assert code == 0
    assert "gpuperf report llama2-7b --gpu h100 -o report.html" in out
    assert "--from" in out and "--gpu GPU[,GPU...]" in out


def test_report_measured_joined_by_work(capsys, tmp_path):
    """--measured files whose op names differ from the model's are joined by kind, shape and
    dtype (a sweep of the model's GEMM shapes), and both files are used."""
    from gpuperf import api

    table = api.predict("llama2-7b", gpu="h100", seq=256).table
    qkv = table.set_index("name").loc["L0/attn/qkv"]
    rows = [{"name": "sweep/qkv", "kind": "gemm", "shape": qkv["shape"], "dtype": "bf16",
             "flops": qkv["flops"], "bytes": qkv["bytes"], "measured_ms": 0.5}]  # fmt: skip
    norm = {**rows[0], "name": "L0/attn/norm", "kind": "norm", "measured_ms": 0.25}
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"env": {}, "rows": rows}))
    b.write_text(json.dumps({"env": {}, "rows": [norm]}))
    out_file = tmp_path / "j.html"
    code, _, err = run(capsys, "report", "llama2-7b", "--seq", "256", "--measured", str(a),
                       "--measured", str(b), "-o", str(out_file))  # fmt: skip
    assert code == 0, err
    page = out_file.read_text()
    assert "Diamonds are measured" in page
    kernels = page[page.index('id="kernels-0"') :]
    rows = kernels[: kernels.index("</table>")].split("<tr>")
    # every layer's qkv took the sweep's 0.5 ms; L0's norm its own 0.25 ms (by name)
    qkv_rows = [r for r in rows if "/attn/qkv</td>" in r]
    assert len(qkv_rows) == 32 and all('data-v="0.5"' in r for r in qkv_rows)
    norm_rows = [r for r in rows if 'data-v="0.25"' in r]
    assert len(norm_rows) == 1 and "<td>L0/attn/norm</td>" in norm_rows[0]


def test_report_of_a_parallel_plan(capsys, tmp_path):
    out_file = tmp_path / "plan.html"
    code, out, err = run(capsys, "report", "llama2-70b", "--mode", "train", "--system",
                         "dgx-h100", "--nodes", "2", "--tp", "8", "--pp", "2", "--global-batch",
                         "16", "--micro-batch", "1", "-o", str(out_file))  # fmt: skip
    assert code == 0, err
    page = out_file.read_text()
    assert "pipeline bubble" in page and 'id="fig-step"' in page and 'id="ops"' in page
    assert "attn/out.reducescatter" in page  # the plan's collectives are rows of its op table
