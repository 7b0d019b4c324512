"""`gpuperf predict` starts fast (issue 13: ≤ 0.3 s cold, benchmarks/predict_speed.py): its
predict path renders, and writes JSON and CSV, without importing pandas or numpy (together
about 0.5 s to import) — or torch. Each command runs in a fresh interpreter, as from a shell."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Runs the CLI in-process, then prints the heavy modules it left in sys.modules.
PROBE = """
import contextlib, io, json, sys
from gpuperf.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(sys.argv[1:])
    except SystemExit as exc:
        code = exc.code
heavy = sorted(m for m in ("pandas", "numpy", "torch", "plotly") if m in sys.modules)
print(json.dumps({"code": code, "heavy": heavy, "out": out.getvalue()}))
"""


@pytest.mark.parametrize(
    "args",
    [
        ["predict", "llama2-7b", "--gpu", "h100"],
        ["predict", "llama2-7b", "--gpu", "h100", "--format", "json"],
        ["predict", "llama2-7b", "--gpu", "h100", "--format", "csv", "--by", "layer"],
        ["predict", "llama2-7b", "--gpu", "h100", "--top", "3", "--by", "kind"],
        ["predict", "llama3-8b", "--mode", "generate", "--new-tokens", "16", "--format", "csv"],
        ["predict", "llama3-70b", "--mode", "train", "--system", "dgx-h100", "--nodes", "4",
         "--tp", "8", "--pp", "4", "--format", "json"],
        ["predict", "gemm", "1K:4K:x2", "4096", "4096", "--gpu", "h100"],
    ],
)  # fmt: skip
def test_predict_imports_neither_pandas_nor_numpy(args):
    res = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=ROOT, check=True
    )
    got = json.loads(res.stdout)
    assert got["code"] == 0, res.stderr
    assert got["heavy"] == [], f"gpuperf {' '.join(args)} imported {got['heavy']}"
    if "json" in args:
        assert json.loads(got["out"])["ops"]


def test_help_imports_no_heavy_module():
    res = subprocess.run(
        [sys.executable, "-c", PROBE, "--help"], capture_output=True, text=True, cwd=ROOT
    )
    assert json.loads(res.stdout)["heavy"] == []
