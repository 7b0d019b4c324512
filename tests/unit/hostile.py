"""What every command owes whatever its input, for the property-based tests test_hostile_*.py:
exit 0, 2 or 3, no traceback, on 2 or 3 exactly one "gpuperf: error:" line on stderr, no escape
sequence in the output, no temporary left beside a file it writes.

CI runs a fixed, derandomized set. To search further: GPUPERF_HOSTILE_SCALE=20 runs twenty times
the examples, randomized and shrunk."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from gpuperf.cli import main

SCALE = int(os.environ.get("GPUPERF_HOSTILE_SCALE", "1"))


def examples(n: int) -> settings:
    """n examples (times SCALE); shrinking only when searching, so a failure in CI costs no more
    than a pass (the failing example is printed as generated)."""
    phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if SCALE > 1 else [])
    return settings(max_examples=n * SCALE, deadline=None, derandomize=SCALE == 1, phases=phases,
                    database=None, suppress_health_check=[HealthCheck.too_slow])  # fmt: skip


@contextlib.contextmanager
def folder() -> Iterator[Path]:
    """A fresh folder for each example (pytest's tmp_path is one for all of a test's examples)."""
    with tempfile.TemporaryDirectory(prefix="gpuperf-hostile-") as d:
        yield Path(d)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def check_cli(argv: list[str], out_dir: Path | None = None) -> tuple[int, str]:
    """Run argv and check what every command owes whatever its input; (exit code, stdout)."""
    code, out, err = run_cli(argv)
    assert code in (0, 2, 3), (argv, code, err[-800:])
    assert "Traceback" not in err + out, (argv, err[-800:])
    if code:
        assert len(err.strip().splitlines()) == 1, (argv, err)
        assert err.startswith("gpuperf: error:"), (argv, err)
    assert "\x1b" not in out + err, (argv, out[-300:], err)  # an ESC from the input, printed
    if out_dir is not None and out_dir.exists():
        assert [p.name for p in out_dir.iterdir() if p.name.endswith(".tmp")] == [], argv
    return code, out


# Hostile command-line values: sizes, sweeps, numbers, names, markup, escapes, unicode.
SPECIAL = ["0", "-1", "1e400", "nan", "inf", "-inf", "1.5", "1K:4K:xinf", "1:2:x1.1", "1:0:+1",
           "[/x]", "[bold]", "\x1b[31m", "", " ", "True", "9" * 40, "4Kx", "1:10000:+1",
           "2147483649", "0x10", "1_000", "١٢", "4K,", ",", "-4K", "1:1:x2", "1K", "4Ki",
           "9007199254740993", "1:9999:+1", "1e12", "a" * 300, "x" * 300 + ".json",
           "/dev/zero", "/", ".", "no-such.json", "no-such.toml", "h100", "dgx-h100", "\n",
           "1G:1K:x2", "1:1000000:x1.0000001", "-0", "+4", "4 K"]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet="0123456789KMGTiBx+:,.-e ", max_size=12),
    st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=8),
)
