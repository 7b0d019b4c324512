"""The second hostile-input sweep (branch sweep2), one named case each, through the CLI's entry
point: options that were silently ignored are refused, result files of another GPU never
calibrate this one, and no NaN reaches a table."""

from __future__ import annotations

import json
from pathlib import Path

from clirun import run

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def refused(capsys, *args: str, match: str = "") -> str:  # noqa: ANN001
    code, out, err = run(capsys, *args)
    assert code == 2, (args, code, err[-2000:])
    assert err.count("\n") == 1 and err.startswith("gpuperf: error: "), err
    assert match in err, err
    return err


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
            match="measured_ms must be a finite number, got nan")  # fmt: skip
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
