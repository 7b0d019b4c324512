"""--moe-dispatcher and --ep-overlap from the command line: the plan names them, JSON carries
them, and what cannot run is refused in one line (exit 2)."""

from __future__ import annotations

import json

from clirun import refused, run

PLAN = ["predict", "qwen3-30b-a3b", "--mode", "train", "--system", "dgx-h100", "--nodes", "2",
        "--ep", "16", "--dp", "16", "--global-batch", "256", "--seq", "4096"]  # fmt: skip


def test_predict_names_the_dispatcher_and_the_overlap(capsys):
    code, out, err = run(capsys, *PLAN, "--moe-dispatcher", "hybridep", "--ep-overlap")
    assert code == 0, err
    assert "hybridep ep-overlap" in out and "EP comm" in out
    code, out, err = run(capsys, *PLAN, "--moe-dispatcher", "deepep", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["scenario"]["moe_dispatcher"] == "deepep"
    assert doc["scenario"]["ep_overlap"] is False
    code, out2, err = run(capsys, *PLAN, "--format", "json")
    assert json.loads(out2)["total_ms"] > doc["total_ms"]  # every copy over NCCL costs more


def test_what_cannot_run_is_refused(capsys):
    refused(capsys, "predict", "qwen3-30b-a3b", "--moe-dispatcher", "deepep",
            match="needs ep > 1")  # fmt: skip
    refused(capsys, *PLAN, "--ep-overlap", "--recompute", "full", match="full recompute")
    refused(capsys, *PLAN, "--moe-dispatcher", "nccl", match="nccl")
