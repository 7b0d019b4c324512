"""The README's quick-start outputs are what the commands print now (regenerate them with
`python benchmarks/readme_quickstart.py`): they had drifted from `make demo`'s output."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    path = ROOT / "benchmarks" / "readme_quickstart.py"
    spec = importlib.util.spec_from_file_location("readme_quickstart", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_quick_start_is_what_the_commands_print():
    q = _script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert q.render(text) == text, "stale: run python benchmarks/readme_quickstart.py"
    block = q.block(*q.BLOCKS[0])
    assert "total " in block and "attn/qkv" in block and "memory " in block  # what it shows


def test_a_stale_block_is_seen():
    q = _script()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    stale = text.replace("total      ", "total      9", 1)
    assert q.render(stale) == text


def test_the_first_block_is_what_make_demo_runs():
    q = _script()
    make = (ROOT / "Makefile").read_text(encoding="utf-8").split("\ndemo:", 1)[1]
    recipe = next(line.strip() for line in make.splitlines()[1:] if line.startswith("\t"))
    assert recipe == "$(BIN)/gpuperf " + " ".join(q.BLOCKS[0][0])
