"""Property-based: the CLI grammar and the Python API driven with generated hostile values.

Whatever the value, the CLI exits 0, 2 or 3 with no traceback and, on 2 or 3, exactly one line
on stderr; the API returns a finite result or raises InputError, never another exception; a
command that writes a file leaves it whole or absent, with no temporary beside it. The named
regressions of issue 13 live beside the code they test (test_fileio, test_config,
test_units_sweeps, test_hardware_loader, test_html_report, test_collectives_cpu,
tests/cli/test_text_from_files)."""

from __future__ import annotations

import contextlib
import io
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuperf import api
from gpuperf.cli import main
from gpuperf.errors import InputError

SPECIAL = ["0", "-1", "1e400", "nan", "inf", "-inf", "1.5", "1K:4K:xinf", "1:2:x1.1", "1:0:+1",
           "[/x]", "[bold]", "\x1b[31m", "", " ", "True", "9" * 40, "4Kx", "1:10000:+1",
           "2147483649", "0x10", "1_000", "١٢", "4K,", ",", "-4K", "1:1:x2"]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(SPECIAL),
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(alphabet="0123456789KMGTiBx+:,.-e ", max_size=12),
)
# Command templates; {} slots take a generated value. Every one is cheap when its values are sane.
TEMPLATES = [
    ["predict", "gemm", "{}", "{}", "{}", "--gpu", "h100"],
    ["predict", "norm", "rmsnorm", "--rows", "{}", "--cols", "{}", "--gpu", "h200"],
    ["predict", "attention", "--seq", "{}", "--heads", "{}", "--gpu", "h100"],
    ["predict", "copy", "--bytes", "{}", "--gpu", "a100"],
    ["predict", "elementwise", "gelu", "--numel", "{}", "--gpu", "h100"],
    ["predict", "elementwise", "{}", "--numel", "{}"],
    ["predict", "allreduce", "--bytes", "{}", "--nproc", "{}", "--gpu", "h100"],
    ["predict", "allgather", "--bytes", "{}", "--system", "dgx-h100", "--nodes", "{}"],
    ["predict", "llama2-7b", "--gpu", "h100", "--seq", "{}", "--batch", "{}"],
    ["predict", "llama2-7b", "--gpu", "h100", "--mode", "decode", "--ctx", "{}", "--top", "{}"],
    ["predict", "llama3-8b", "--system", "dgx-h100", "--tp", "{}", "--pp", "{}"],
    ["predict", "llama3-8b", "--mode", "train", "--system", "dgx-h100", "--dp", "{}",
     "--global-batch", "{}"],
    ["predict", "{}", "--gpu", "h100"],
    ["predict", "llama2-7b", "--gpu", "{}"],
    ["models", "show", "{}"],
    ["hw", "show", "{}"],
    ["search", "llama3-8b", "--system", "dgx-h100", "--gpus", "{}", "--global-batch", "{}"],
]  # fmt: skip


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(template=st.sampled_from(TEMPLATES), values=st.lists(VALUES, min_size=3, max_size=3))
def test_cli_never_tracebacks(template, values):
    it = iter(values)
    argv = [next(it) if a == "{}" else a for a in template]
    code, _, err = _run(argv)
    assert code in (0, 2, 3), (argv, code, err[-500:])
    assert "Traceback" not in err, (argv, err[-500:])
    if code:
        assert len(err.strip().splitlines()) == 1, (argv, err)


NUMBERS = st.one_of(
    st.integers(-(10**12), 10**40), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.sampled_from(["1", "no", "", "[/x]", "bf16", "1K"]),
)  # fmt: skip
PREDICT_KEYS = ["batch", "seq", "ctx", "new_tokens", "tp", "pp", "dp", "mode", "dtype",
                "cuda_graphs", "impl", "micro_batch", "global_batch", "zero"]  # fmt: skip


def _finite(x: float | None) -> bool:
    return x is None or (isinstance(x, float | int) and math.isfinite(x) and x >= 0)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(kw=st.dictionaries(st.sampled_from(PREDICT_KEYS), NUMBERS, max_size=3))
def test_api_predict_is_a_result_or_an_input_error(kw):
    try:
        p = api.predict("llama2-7b", gpu="h100", **kw)
    except InputError:
        return
    assert _finite(p.total_ms) and p.total_ms > 0 and _finite(p.mfu), kw


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    kind=st.sampled_from(["gemm", "copy", "norm", "elementwise", "attention"]),
    kw=st.dictionaries(st.sampled_from(["m", "n", "k", "nbytes", "rows", "cols", "numel", "seq",
                                        "heads", "batch", "causal", "dtype", "fn"]),
                       NUMBERS, max_size=3),
)  # fmt: skip
def test_api_predict_op_is_a_result_or_an_input_error(kind, kw):
    try:
        p = api.predict_op(kind, gpu="h100", **kw)
    except InputError:
        return
    assert _finite(p.total_ms) and p.total_ms > 0, (kind, kw)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(seq=VALUES)
def test_report_output_is_whole_or_absent(tmp_path, seq):
    out = tmp_path / "r.html"
    if out.exists():
        out.unlink()
    code, _, err = _run(["report", "llama2-7b", "--gpu", "h100", "--seq", seq, "-o", str(out)])
    assert code in (0, 2), err
    assert [p.name for p in tmp_path.iterdir() if p.name != "r.html"] == []  # no temporaries
    if code == 0:
        assert out.read_text().rstrip().endswith("</html>")
    else:
        assert not out.exists()
