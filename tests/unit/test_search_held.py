"""Options a search holds over its plans (api.search's dtype ... moe_imbalance): each plan that
has what an option needs runs with it, the others without; bad values are refused as predict
refuses them; the best plan is predict's, to the bit."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from gpuperf import api
from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_system
from gpuperf.step.search import FIXED, enumerate_plans
from gpuperf.workloads.config import load_model

DGX = load_system("dgx-h100")
QWEN = load_model("qwen3-30b-a3b")
MOE_HELD = dict(dtype="fp8", moe_dispatcher="hybridep", ep_overlap=True, moe_imbalance=1.5,
                dp_overlap=True, grad_dtype="param", tp_overlap=True)  # fmt: skip


def test_each_plan_gets_the_options_it_can_take():
    plans = list(enumerate_plans(QWEN, DGX, 16, global_batch=256, seq=4096, fixed=MOE_HELD))
    assert len({p.ep for p in plans}) > 2 and len({p.tp for p in plans}) > 2
    for p in plans:
        assert (p.dtype, p.grad_dtype) == ("fp8", "param")
        assert p.dp_overlap is (True if p.dp > 1 else None)
        assert p.tp_overlap is (p.tp > 1)
        assert p.moe_dispatcher == ("hybridep" if p.ep > 1 else "alltoall")
        assert p.ep_overlap is (p.ep > 1 and p.recompute != "full")
        assert p.moe_imbalance == (1.5 if p.ep > 1 else 1.0)
    assert set(MOE_HELD) <= set(FIXED)


def test_held_options_reach_the_best_plan_and_predict_agrees():
    res = api.search("qwen3-30b-a3b", system="dgx-h100", gpus=16, global_batch=256,
                     dtype="fp8", moe_dispatcher="hybridep", ep_overlap=True, top=3)  # fmt: skip
    best = res.ranked[0].scenario
    assert best.ep > 1 and best.moe_dispatcher == "hybridep" and best.ep_overlap
    assert "hybridep ep-overlap" in res.ranked[0].label()
    kw = {k: v for k, v in asdict(best).items() if k in (*api.PARALLEL, "mode", "seq", "dtype")}
    kw.pop("global_batch")
    again = api.predict("qwen3-30b-a3b", system="dgx-h100", nodes=2, global_batch=256, **kw)
    assert again.total_ms == res.best.total_ms == res.ranked[0].step_time * 1e3
    plain = api.search("qwen3-30b-a3b", system="dgx-h100", gpus=16, global_batch=256, top=3)
    assert plain.ranked[0].scenario.dtype == "bf16"  # held options change what is costed
    assert plain.ranked[0].step_time != res.ranked[0].step_time


@pytest.mark.parametrize(
    ("model", "kw", "message"),
    [
        ("llama2-7b", dict(moe_dispatcher="deepep"), "llama2-7b has no experts: moe_dispatcher"),
        ("llama2-7b", dict(ep_overlap=True), "no experts: ep_overlap"),
        ("llama2-7b", dict(tp_overlap=True, mode="prefill"), "training only"),
        ("qwen3-30b-a3b", dict(ep_overlap=True, mode="prefill"), "fused training only"),
        ("qwen3-30b-a3b", dict(moe_dispatcher="deepep", mode="decode"), "low-latency"),
        ("qwen3-30b-a3b", dict(moe_dispatcher="deepep", impl="eager"), "fused kernels only"),
        ("qwen3-30b-a3b", dict(moe_imbalance=100), "from 1 to 64"),
        ("qwen3-30b-a3b", dict(moe_dispatcher="nccl"), "unknown moe_dispatcher"),
        ("llama2-7b", dict(dtype="int8"), "not int8"),
        ("llama2-7b", dict(dp_overlap=1), "dp_overlap must be true, false or None"),
        ("llama2-7b", dict(dp_overlap=True, mode="decode"), "training only"),
        ("llama2-7b", dict(grad_dtype="fp16"), "unknown grad_dtype"),
        ("llama2-7b", dict(attn="xx"), "unknown attn"),
        ("llama2-7b", dict(dtype=None, mode="prefill"), "dtype must be a name"),
        ("llama2-7b", dict(tp_overlap=True, impl="eager"), "fused training only"),
        ("mixtral-8x7b", dict(moe_imbalance=64), "at most 8 of mixtral-8x7b's 8 experts"),
        ("qwen3-30b-a3b", dict(moe_imbalance=16), "at most 8 of qwen3-30b-a3b's 128 experts"),
        ("llama2-7b", dict(nvls=True), "unknown argument 'nvls'"),
        ("llama2-7b", dict(zero=1), "search chooses zero itself"),
    ],
)
def test_bad_held_options_are_refused(model, kw, message):
    with pytest.raises(InputError, match=message):
        api.search(model, system="dgx-h100", gpus=8, **kw)


def test_defaults_given_explicitly_are_no_options():
    """moe_imbalance=1 (an int) on a dense model is the default, not an MoE option."""
    a = api.search("llama2-7b", system="dgx-h100", gpus=8, moe_imbalance=1, top=2)
    b = api.search("llama2-7b", system="dgx-h100", gpus=8, top=2)
    assert a.ranked[0].step_time == b.ranked[0].step_time


def test_an_imbalance_leaves_out_the_plans_too_even_for_it_and_shows_on_the_rest():
    """The busiest of ep ranks takes at most ep times the mean: plans of a smaller ep are not
    searched, and the others carry the imbalance in their labels."""
    plans = list(enumerate_plans(QWEN, DGX, 16, global_batch=256, seq=4096,
                                 fixed={"moe_imbalance": 3.0}))  # fmt: skip
    eps = {p.ep for p in plans}
    assert 1 in eps and 2 not in eps and {4, 8, 16} <= eps
    assert all(("imb3" in p.label()) == (p.ep > 1) for p in plans)
