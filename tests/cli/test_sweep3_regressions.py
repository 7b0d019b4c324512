"""The third sweep (a new user's, 2026-11-25), one named case each: messages that named the
wrong option or the wrong kind of profile, options a --from report or a one-GPU step would have
ignored, and calibrate --from taking its GPU from the files."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import refused, run

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def test_hw_show_of_an_unknown_name_names_systems_too(capsys):
    err = refused(capsys, "hw", "show", "dgx-h10", match="unknown profile 'dgx-h10'")
    assert "did you mean dgx-h100" in err
    err = refused(capsys, "hw", "show", "bogus", match="unknown profile 'bogus'")
    assert "GPUs: " in err and "systems: " in err and "dgx-h100" in err


def test_report_from_a_file_refuses_scenario_options_it_would_ignore(capsys, tmp_path):
    code, out, err = run(capsys, "predict", "llama3.2-1b", "--seq", "64", "--format", "json")
    assert code == 0, err
    saved = tmp_path / "p.json"
    saved.write_text(out)
    html = tmp_path / "r.html"
    refused(capsys, "report", "--from", str(saved), "--mode", "train", "--tp", "8", "-o",
            str(html), match="--mode, --tp would be ignored")  # fmt: skip
    assert not html.exists()


def test_report_from_a_collective_says_what_it_is(capsys, tmp_path):
    code, out, err = run(capsys, "predict", "allreduce", "--bytes", "1M", "--format", "json")
    assert code == 0, err
    saved = tmp_path / "ar.json"
    saved.write_text(out)
    refused(capsys, "report", "--from", str(saved), "-o", str(tmp_path / "r.html"),
            match="a collective's prediction has no FLOPs")  # fmt: skip


def test_nvls_on_one_gpu_is_refused(capsys):
    refused(capsys, "predict", "llama3.2-1b", "--mode", "decode", "--nvls",
            match="needs a plan of more than one GPU")  # fmt: skip


def test_calibrate_from_files_takes_their_gpu(capsys, tmp_path):
    gemm = RESULTS / "h100-sxm5-80gb" / "gemm.json"
    named, default = tmp_path / "named.toml", tmp_path / "default.toml"
    assert run(capsys, "calibrate", "--from", str(gemm), "--gpu", "h100", "-o", str(named))[0] == 0
    code, out, err = run(capsys, "calibrate", "--from", str(gemm), "-o", str(default))
    assert code == 0, err
    assert default.read_text() == named.read_text()
    h200 = RESULTS / "h200-sxm-141gb" / "gemm.json"
    both = ("--from", str(gemm), "--from", str(h200), "-o", str(tmp_path / "x.toml"))
    refused(capsys, "calibrate", *both, match="measured on h100-sxm5-80gb and h200-sxm-141gb")
    bare = tmp_path / "bare.json"
    data = json.loads(gemm.read_text())
    data.pop("env", None)
    bare.write_text(json.dumps(data))
    refused(capsys, "calibrate", "--from", str(bare), "-o", str(tmp_path / "y.toml"),
            match="name no GPU they were measured on: give --gpu")  # fmt: skip


def test_eager_training_memory_says_which_moment_is_the_peak(capsys):
    """An eager step's breakdown is one moment's (no gradients yet, or no activations left):
    the memory line names it so a zero is not read as a missing term."""
    args = ("predict", "llama3-8b", "--mode", "train", "--impl", "eager", "--gpu", "h200")
    code, out, err = run(capsys, *args, "--seq", "8192", "--batch", "2")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("memory"))
    assert "at the backward's start: " in line and "gradients" not in line
    code, out, err = run(capsys, *args, "--seq", "1024")
    line = next(ln for ln in out.splitlines() if ln.startswith("memory"))
    assert "at AdamW's step: " in line and "activations" not in line
