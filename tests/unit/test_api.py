"""gpuperf.api: name/path/object resolution, scenario plumbing, single ops, bad input."""

from __future__ import annotations

import pytest

from gpuperf import api
from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_gpu, load_system
from gpuperf.perfmodel.optime import OpTime
from gpuperf.step import cost as P
from gpuperf.workloads.config import load_model


@pytest.fixture
def seen(monkeypatch):
    """A fake roofline (1 µs per op) that records the ops and GPUs it is asked about."""
    log: list = []

    def fake(op, gpu, system=None):
        log.append((op, gpu, system))
        return OpTime(time=1e-6, bound="memory", t_mem=1e-6)

    monkeypatch.setattr(P, "_op_time", fake)
    return log


def test_predict_by_name_builds_the_scenario(seen):
    p = api.predict("llama2-7b", gpu="a100", mode="decode", batch=4, ctx=1024, dtype="fp16")
    assert p.gpu == "a100-sxm4-80gb" and p.model == "llama2-7b"
    assert p.scenario["mode"] == "decode" and p.scenario["batch"] == 4
    assert p.scenario["ctx"] == 1024 and p.scenario["dtype"] == "fp16"
    assert p.tokens_per_s == pytest.approx(4 / (p.total_ms * 1e-3))
    assert p.memory["weights"] > 0 and p.memory_capacity == 0.92 * load_gpu("a100").hbm_bytes


def test_predict_accepts_loaded_objects_and_defaults_to_h100(seen):
    cfg = load_model("llama2-7b")
    p = api.predict(cfg, seq=128)
    assert p.gpu == "h100-sxm5-80gb"
    assert api.predict(cfg, gpu=load_gpu("h200"), seq=128).gpu == "h200-sxm-141gb"


def test_system_without_gpu_uses_the_systems_gpu(seen):
    p = api.predict("llama2-7b", system="dgx-a100", seq=128, tp=2)
    assert p.gpu == load_system("dgx-a100").gpu.name
    assert p.scenario["tp"] == 2
    assert seen[0][2] is not None  # the system reaches the time model (collectives)


def test_unknown_parallel_argument_suggests():
    with pytest.raises(InputError, match="unknown argument 'tpp'; did you mean tp"):
        api.predict("llama2-7b", tpp=2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "infer"}, "unknown mode"),
        ({"batch": 0}, "batch must be a positive integer"),
        ({"seq": -5}, "seq must be a positive integer"),
        ({"dtype": "fp12"}, "unknown dtype"),
        ({"impl": "compiled"}, "unknown impl"),
    ],
)
def test_bad_scenarios_raise_input_error(kwargs, message, seen):
    with pytest.raises(InputError, match=message):
        api.predict("llama2-7b", **kwargs)


def test_predict_op_gemm(seen):
    p = api.predict_op("gemm", m=8192, n=4096, k=11008)
    assert len(p.table) == 1
    assert p.table["flops"].iloc[0] == 2 * 8192 * 4096 * 11008
    assert p.table["bytes"].iloc[0] == 2 * (8192 * 11008 + 11008 * 4096 + 8192 * 4096)
    assert p.total_ms == pytest.approx(1e-3)  # one kernel, no host in the loop
    assert p.scenario == {}


def test_predict_op_other_kinds(seen):
    att = api.predict_op("attention", batch=1, heads=32, seq=4096, causal=True)
    assert att.table["kind"].iloc[0] == "attention"
    assert api.predict_op("elementwise", fn="gelu", numel=1 << 20).table["flops"][0] == 8 << 20
    assert (
        api.predict_op("norm", fn="rmsnorm", rows=8, cols=4096, dtype="fp32").table["dtype"].iloc[0]
        == "fp32"
    )
    assert api.predict_op("copy", nbytes=1 << 30).table["bytes"].iloc[0] == 2 * (1 << 30)
    ar = api.predict_op("allreduce", system="dgx-h100", nbytes=1 << 20, ranks=8)
    assert ar.table["kind"].iloc[0] == "collective" and seen[-1][2] is not None


@pytest.mark.parametrize(
    "kind, params, message",
    [
        ("gemn", {"m": 8}, "unknown op kind 'gemn'; did you mean gemm"),
        ("gemm", {"m": 0}, "m must be positive"),
        ("gemm", {"rows": 8}, "gemm: "),
        ("attention", {"heads": 32}, "attention: "),
        ("gemm", {"m": 8, "dtype": "fp7"}, "unknown dtype"),
    ],
)
def test_predict_op_bad_input(kind, params, message):
    with pytest.raises(InputError, match=message):
        api.predict_op(kind, **params)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"model": None}, "model must be a name"),
        ({"model": "llama2-7b", "gpu": 42}, "gpu must be a name"),
        ({"model": "llama2-7b", "system": 3}, "system must be a name"),
        ({"model": "llama2-7b", "cuda_graphs": "no"}, "cuda_graphs must be true or false"),
        ({"model": "llama2-7b", "tp": True}, "tp must be a positive integer"),
        ({"model": "llama2-7b", "zero": 1.0, "dp": 2, "mode": "train"}, "zero must be"),
        ({"model": "llama2-7b", "nodes": 0, "system": "dgx-h100"}, "nodes must be"),
    ],
)
def test_wrong_types_are_input_errors(kwargs, message):
    with pytest.raises(InputError, match=message):
        api.predict(**kwargs)


@pytest.mark.parametrize(
    "kind, kw",
    [("gemm", {"m": -5.0}), ("gemm", {"m": True}), ("copy", {"nbytes": -1.0}),
     ("norm", {"fn": "rmsnorm", "rows": 4, "cols": float("nan")}), ("gemm", {"m": 4096.0}),
     ("attention", {"batch": 1, "heads": 8, "seq": 128, "causal": "no"})],
)  # fmt: skip
def test_predict_op_refuses_sizes_that_are_not_integers(kind, kw):
    with pytest.raises(InputError, match="must be"):
        api.predict_op(kind, gpu="h100", **kw)


def test_counts_beyond_2_31_are_refused_not_predicted():
    with pytest.raises(InputError, match="up to 2147483648"):
        api.predict("llama2-7b", gpu="h100", batch=10**30)  # predicted 4.9e31 ms before
    with pytest.raises(InputError, match="up to 2147483648"):
        api.predict("llama2-7b", gpu="h100", seq=9007199254740993)


def test_api_refuses_the_options_the_cli_refuses_without_fp8_or_ep():
    with pytest.raises(InputError, match="needs dtype=fp8"):
        api.predict("llama3.2-1b", fp8_scales="row")
    with pytest.raises(InputError, match="needs ep > 1"):
        api.predict("mixtral-8x7b", moe_imbalance=1.5)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: api.serve("llama3-8b", gpu="h100", tp=None, requests=4), "tp must be a positive"),
        (lambda: api.serve("llama3-8b", gpu="h100", tp="4", requests=4), "tp must be a positive"),
        (
            lambda: api.serve_plan("llama3-8b", "ttft=500ms,tpot=50ms", gpu="h100", tp=[2]),
            "tp must be a positive",
        ),  # fmt: skip
        (
            lambda: api.serve_plan("llama3-8b", "ttft=500ms,tpot=50ms", gpu="h100", progress=True),
            "progress must be a function",
        ),  # fmt: skip
        (lambda: api.search("llama3-8b", "dgx-h100", 8, tp=2), "search chooses tp itself"),
        (
            lambda: api.search("llama3-8b", "dgx-h100", 8, globl_batch=2),
            "unknown argument 'globl_batch'; did you mean global_batch?",
        ),  # fmt: skip
    ],
)
def test_serve_and_search_refuse_what_the_cli_cannot_express(call, message):
    """What the CLI's option types refuse (exit 2), the API refuses with InputError, not a
    TypeError from inside the simulation."""
    with pytest.raises(InputError, match=message.replace("?", r"\?")):
        call()
