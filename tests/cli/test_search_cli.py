"""`gpuperf search` and the plan options of `gpuperf predict` (plan_opts.run_plan)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpuperf.cli import cli
from gpuperf.cli.plan_opts import run_plan, wants_plan


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


def test_run_plan_json(capsys):
    assert wants_plan(8, 2, 4, 1, 8) and not wants_plan(1, 1, 1, 1, None)
    run_plan("llama2-70b", "dgx-h100", "train", tp=8, pp=2, dp=4, ep=1, batch=1, seq=4096,
             ctx=4096, dtype="bf16", fmt="json", nodes=8, global_batch=1024, micro_batch=1,
             zero=1, recompute="selective")  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["label"] == "tp8 pp2 dp4 mb1 zero1 selective sp"
    assert (
        out["total_ms"] == sum(op["time_ms"] for op in out["ops"])
        or abs(out["total_ms"] - sum(op["time_ms"] for op in out["ops"])) < 1e-6 * out["total_ms"]
    )
    assert out["fits"] is True
