"""The README's quick-start outputs, from a run: each block between `<!-- quickstart N -->` and
`<!-- /quickstart -->` is what its command prints now (the op rows it names, then the summary),
so the README cannot drift from `make demo`. tests/unit/test_readme_quickstart.py checks it.

    .venv/bin/python benchmarks/readme_quickstart.py            # rewrite the README's blocks
    .venv/bin/python benchmarks/readme_quickstart.py --check    # exit 1 if they are stale
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
WIDTH = "160"  # the terminal width the blocks are rendered at
SUMMARY = ("total ", "plan ", "throughput ", "memory ", "accuracy ")
# (command, the op rows to show) for each block, in README order.
BLOCKS = [
    (["predict", "llama2-7b", "--gpu", "h100", "--seq", "2048"],
     ("attn/qkv", "attn/core", "mlp/gate_up")),
    (["predict", "llama3-70b", "--mode", "train", "--system", "dgx-h100", "--nodes", "4", "--tp",
      "8", "--pp", "4", "--global-batch", "64", "--micro-batch", "1"], ()),
]  # fmt: skip
_BLOCK = re.compile(r"(<!-- quickstart (\d+) -->\n)(.*?)(<!-- /quickstart -->)", re.S)


def output(argv: list[str]) -> str:
    """What `gpuperf ARGV` prints at WIDTH columns (run in this process)."""
    from gpuperf.cli import main

    out = io.StringIO()
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        with contextlib.redirect_stdout(out):
            try:
                main(argv)
            except SystemExit as exc:
                if exc.code:
                    raise RuntimeError(f"gpuperf {' '.join(argv)} exited {exc.code}") from None
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return out.getvalue()


def block(argv: list[str], ops: tuple[str, ...]) -> str:
    """The fenced block: the command, the header and the named op rows, `...`, the summary."""
    lines = [ln.rstrip() for ln in output(argv).splitlines()]
    head = [ln for ln in lines if ln.lstrip().startswith("op ")][:1] if ops else []
    rows = [ln for ln in lines if ln.split()[:1] and ln.split()[0] in ops]
    start = next((i for i, ln in enumerate(lines) if ln.startswith(SUMMARY)), len(lines))
    summary = [
        ln for ln in lines[start:] if ln.startswith(SUMMARY) or not ln.startswith(("warning", " "))
    ]  # a summary line and what wraps of it
    body = [f"$ gpuperf {' '.join(argv)}", *head, *rows, "  ...", *summary]
    return "```\n" + "\n".join(body) + "\n```\n"


def render(text: str) -> str:
    """`text` (the README) with every quick-start block regenerated."""

    def one(m: re.Match) -> str:
        index = int(m.group(2))
        return m.group(1) + block(*BLOCKS[index]) + m.group(4)

    out, n = _BLOCK.subn(one, text)
    if n != len(BLOCKS):
        raise SystemExit(f"{README}: found {n} quick-start blocks, expected {len(BLOCKS)}")
    return out


def main() -> int:
    from gpuperf.fileio import write_text

    text = README.read_text(encoding="utf-8")
    fresh = render(text)
    if "--check" in sys.argv[1:]:
        if fresh != text:
            print("README quick start is stale: run benchmarks/readme_quickstart.py", flush=True)
            return 1
        return 0
    if fresh != text:
        write_text(README, fresh)
    print("README quick start is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
