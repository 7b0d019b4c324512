"""`gpuperf search`, and its plans through `gpuperf predict`."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpuperf.cli import cli


def test_search_json():
    args = ["search", "llama2-70b", "--system", "dgx-h100", "--gpus", "64", "--mode", "train",
            "--global-batch", "1024", "--seq", "4096", "--top", "3",
            "--format", "json"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert len(out["plans"]) == 3 and out["evaluated"] > 100
    steps = [p["step_time_s"] for p in out["plans"]]
    assert steps == sorted(steps)
    assert out["why"][0].startswith("best:")


def test_search_table_has_units_and_example():
    args = ["search", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--global-batch", "64",
            "--top", "2"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "best:" in result.output and "plans evaluated" in result.output
    assert "gpuperf search llama2-70b" in CliRunner().invoke(cli, ["search", "--help"]).output


def test_search_plan_is_the_predict_plan():
    """The best plan's step time in `search` is `predict`'s for the same plan, to the bit."""
    args = ["search", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--global-batch", "64",
            "--seq", "2048", "--top", "1", "--format", "json"]  # fmt: skip
    best = json.loads(CliRunner().invoke(cli, args).output)["plans"][0]
    sc = best["scenario"]
    flags = ["predict", "llama3-8b", "--system", "dgx-h100", "--mode", "train", "--format", "json",
             "--seq", str(sc["seq"]), "--global-batch", str(sc["global_batch"]),
             "--micro-batch", str(sc["micro_batch"]), "--zero", str(sc["zero"]),
             "--recompute", sc["recompute"], "--schedule", sc["schedule"],
             "--virtual-stages", str(sc["virtual_stages"])]  # fmt: skip
    for k in ("tp", "pp", "dp", "cp", "ep"):
        flags += [f"--{k}", str(sc[k])]
    flags.append("--sequence-parallel" if sc["sequence_parallel"] else "--no-sequence-parallel")
    out = CliRunner().invoke(cli, flags)
    assert out.exit_code == 0, out.output
    pred = json.loads(out.output)
    assert pred["total_ms"] == best["step_time_ms"]
    assert pred["mfu"] == best["mfu"]
    assert pred["extra"]["plan"] == best["label"]


def test_search_holds_dtype_and_moe_options_over_its_plans(capsys):
    from clirun import refused, run

    code, out, err = run(capsys, "search", "qwen3-30b-a3b", "--system", "dgx-h100", "--gpus",
                         "16", "--global-batch", "256", "--dtype", "fp8", "--moe-dispatcher",
                         "hybridep", "--ep-overlap", "--top", "2", "--format", "csv")  # fmt: skip
    assert code == 0, err
    assert "hybridep ep-overlap" in out.splitlines()[1]
    refused(capsys, "search", "llama2-7b", "--system", "dgx-h100", "--gpus", "8",
            "--moe-dispatcher", "deepep", match="llama2-7b has no experts")  # fmt: skip
