"""Property-based: the CLI grammar and the Python API driven with generated hostile values
(negative, zero, huge and fractional sizes, nan, inf, bools, empty strings, unicode, rich markup,
escape sequences, sizes with units, sweeps, names that do not exist, names too long for a file).

The CLI owes what hostile.check_cli checks; the API returns a finite result or raises InputError,
never another exception. Hostile files are test_hostile_files.py; issue 13's named cases are
tests/cli/test_issue13_regressions.py."""

from __future__ import annotations

import math

import pytest
from hostile import VALUES, check_cli, examples
from hypothesis import given
from hypothesis import strategies as st

from gpuperf import api
from gpuperf.errors import InputError

# ------------------------------------------------------------------------------ CLI grammar

# Command templates; {} slots take a generated value. Every one is cheap when its values are sane.
TEMPLATES = [
    ["predict", "gemm", "{}", "{}", "{}", "--gpu", "h100"],
    ["predict", "gemm", "{}", "--gpu", "h100", "--dtype", "{}", "--format", "{}"],
    ["predict", "norm", "rmsnorm", "--rows", "{}", "--cols", "{}", "--gpu", "h200"],
    ["predict", "norm", "{}", "--rows", "{}", "--cols", "4K"],
    ["predict", "attention", "--seq", "{}", "--heads", "{}", "--gpu", "h100"],
    ["predict", "attention", "--seq", "4K", "--kv-len", "{}", "--kv-heads", "{}",
     "--head-dim", "{}"],
    ["predict", "copy", "--bytes", "{}", "--gpu", "a100"],
    ["predict", "elementwise", "gelu", "--numel", "{}", "--gpu", "h100"],
    ["predict", "elementwise", "{}", "--numel", "{}"],
    ["predict", "allreduce", "--bytes", "{}", "--nproc", "{}", "--gpu", "h100"],
    ["predict", "allreduce", "--bytes", "1G", "--system", "dgx-h100", "--nproc", "{}",
     "--nodes", "{}"],
    ["predict", "allgather", "--bytes", "{}", "--system", "dgx-h100", "--nodes", "{}"],
    ["predict", "alltoall", "--bytes", "{}", "--gpu", "{}", "--nproc", "{}"],
    ["predict", "sendrecv", "--bytes", "{}", "--system", "{}"],
    ["predict", "broadcast", "--bytes", "1M", "--system", "dgx-h100", "--algo", "{}",
     "--proto", "{}"],
    ["predict", "llama2-7b", "--gpu", "h100", "--seq", "{}", "--batch", "{}"],
    ["predict", "llama2-7b", "--gpu", "h100", "--mode", "decode", "--ctx", "{}", "--top", "{}"],
    ["predict", "llama2-7b", "--mode", "generate", "--seq", "{}", "--new-tokens", "{}",
     "--by", "{}"],
    ["predict", "llama2-7b", "--gpu", "h100", "--dtype", "{}", "--kv-dtype", "{}"],
    ["predict", "llama3-8b", "--system", "dgx-h100", "--tp", "{}", "--pp", "{}"],
    ["predict", "llama3-8b", "--mode", "train", "--system", "dgx-h100", "--dp", "{}",
     "--global-batch", "{}"],
    ["predict", "llama3-8b", "--mode", "train", "--system", "dgx-h100", "--nodes", "{}",
     "--tp", "8", "--pp", "{}", "--micro-batch", "{}"],
    ["predict", "llama3-8b", "--mode", "train", "--system", "dgx-h100", "--pp", "2",
     "--schedule", "interleaved", "--virtual-stages", "{}", "--global-batch", "{}"],
    ["predict", "llama3-8b", "--mode", "train", "--system", "dgx-h100", "--cp", "{}",
     "--seq", "{}"],
    ["predict", "mixtral-8x7b", "--mode", "train", "--system", "dgx-h100", "--ep", "{}",
     "--dp", "{}"],
    ["predict", "llama2-7b", "--system", "{}", "--gpu", "{}"],
    ["predict", "{}", "--gpu", "h100"],
    ["predict", "llama2-7b", "--gpu", "{}"],
    ["models", "show", "{}"],
    ["models", "show", "llama3-8b", "--format", "{}"],
    ["hw", "show", "{}"],
    ["hw", "list", "--format", "{}"],
    ["search", "llama3-8b", "--system", "dgx-h100", "--gpus", "{}", "--global-batch", "{}"],
    ["search", "llama3-8b", "--system", "dgx-h100", "--gpus", "8", "--mode", "decode",
     "--batch", "{}", "--ctx", "{}", "--top", "{}"],
    ["search", "{}", "--system", "{}", "--gpus", "8"],
    ["measure", "allreduce", "--bytes", "1K", "--nproc", "{}", "--device", "cpu"],
    ["measure", "gemm", "{}", "--device", "{}", "--format", "{}"],
]  # fmt: skip


def _safe_measure(argv: list[str]) -> bool:
    """Measure templates only with values that cannot start a real run (those are GPU tests)."""
    if argv[0] != "measure":
        return True
    if argv[1] == "allreduce":
        return argv[5] in ("0", "1", "-1", "", "1.5", "nan", "[/x]")  # refused before torchrun
    return argv[4] not in ("cpu", "auto", "cuda")  # an unknown device is refused first


@examples(200)
@given(template=st.sampled_from(TEMPLATES), values=st.lists(VALUES, min_size=3, max_size=3))
def test_cli_never_tracebacks(template, values):
    it = iter(values)
    argv = [next(it) if a == "{}" else a for a in template]
    if _safe_measure(argv):
        check_cli(argv)


# ------------------------------------------------------------------------------ the API

NUMBERS = st.one_of(
    st.integers(-(10**12), 10**40), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.sampled_from(["1", "no", "", "[/x]", "bf16", "1K", "h100"]),
)  # fmt: skip
PREDICT_KEYS = ["batch", "seq", "ctx", "new_tokens", "tp", "pp", "dp", "cp", "ep", "mode",
                "dtype", "kv_dtype", "cuda_graphs", "impl", "attn", "micro_batch",
                "global_batch", "zero", "recompute", "nodes", "sequence_parallel", "tp_overlap",
                "dp_overlap", "schedule", "virtual_stages", "nvls"]  # fmt: skip
MODELS = ["llama2-7b", None, 42, "", "a" * 300, "x" * 300 + ".json", "no-such.json", b"llama2-7b",
          "LLAMA2-7B", " llama2-7b ", "[/x]", "/", 1.5]  # fmt: skip
GPUS = ["h100", None, 42, "", "auto-no", "a" * 300, "no-such.toml", "dgx-h100", "H100", True]
SYSTEMS = [None, "dgx-h100", "h100", 3, "", "no-such.toml", "a" * 300]


def _finite(x: float | None) -> bool:
    return x is None or (isinstance(x, float | int) and math.isfinite(x) and x >= 0)


@examples(200)
@given(
    model=st.sampled_from(MODELS),
    gpu=st.sampled_from(GPUS),
    system=st.sampled_from(SYSTEMS),
    kw=st.dictionaries(st.sampled_from(PREDICT_KEYS), NUMBERS, max_size=3),
)
def test_api_predict_is_a_result_or_an_input_error(model, gpu, system, kw):
    try:
        p = api.predict(model, gpu=gpu, system=system, **kw)
    except InputError:
        return
    assert _finite(p.total_ms) and p.total_ms > 0 and _finite(p.mfu), (model, gpu, system, kw)


OP_KEYS = ["m", "n", "k", "nbytes", "rows", "cols", "numel", "seq", "heads", "kv_heads",
           "head_dim", "kv_len", "batch", "causal", "dtype", "fn", "ranks"]  # fmt: skip
KINDS = [
    "gemm",
    "copy",
    "norm",
    "elementwise",
    "attention",
    "allreduce",
    "allgather",
    "alltoall",
    "sendrecv",
    "broadcast",
    "reducescatter",
    "gemn",
    "",
    None,
    ["gemm"],
    3,
]


@examples(200)
@given(
    kind=st.sampled_from(KINDS),
    system=st.sampled_from([None, "dgx-h100"]),
    kw=st.dictionaries(st.sampled_from(OP_KEYS), NUMBERS, max_size=3),
)
def test_api_predict_op_is_a_result_or_an_input_error(kind, system, kw):
    try:
        p = api.predict_op(kind, gpu="h100" if system is None else None, system=system, **kw)
    except InputError:
        return
    assert _finite(p.total_ms) and p.total_ms > 0, (kind, system, kw)


HUGE = "1" + "0" * 305  # past a float: counts are bounded before the arithmetic sees them


@pytest.mark.parametrize(
    "argv",
    [["predict", "attention", "--seq", "4096", "--kv-len", HUGE],
     ["predict", "attention", "--batch", HUGE, "--heads", "32"],
     ["predict", "allreduce", "--bytes", "1G", "--system", "dgx-h100", "--nodes", HUGE],
     ["predict", "allgather", "--bytes", "1G", "--system", "dgx-h100", "--nodes", str(2**62)],
     ["predict", "mixtral-8x7b", "--ep", "8", "--dp", "8", "--system", "dgx-h100",
      "--moe-imbalance", "64"]],
)  # fmt: skip
def test_counts_past_their_bounds_are_refused_in_one_line(argv):
    code, _ = check_cli(argv)  # no traceback; an error is one line
    assert code == 2, argv
