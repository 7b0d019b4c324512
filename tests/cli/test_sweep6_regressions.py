"""Regressions found by the helper sweeps of stop 59 (invariant probe, hostile inputs)."""

from __future__ import annotations

import pytest

from gpuperf import api


def test_the_reported_plan_time_is_the_one_the_step_pays():
    """A sliding-window cache at its window keeps a fixed key count, so an eager decode step
    pays no cuDNN plan; extra.attn_plan_ms still reported 48 ms, and a generate's plan time came
    out larger than its whole host time."""
    kw = {"gpu": "h100", "impl": "eager", "mode": "decode"}
    below = api.predict("mistral-7b", ctx=4094, **kw)
    at = api.predict("mistral-7b", ctx=4095, **kw)
    assert below.extra["attn_plan_ms"] > 0 and at.extra["attn_plan_ms"] == 0.0
    # the plan is the step's drop at the window, less the masked window's own kernels
    assert 0 < below.total_ms - at.total_ms <= below.extra["attn_plan_ms"]
    gen = api.predict("mistral-7b", gpu="h100", impl="eager", mode="generate", seq=8192,
                      new_tokens=64)  # fmt: skip
    assert gen.extra["attn_plan_ms"] <= gen.extra["host_ms"]


def test_generate_counts_the_answer_as_serve_and_hugging_face_do():
    """new_tokens is the answer's length: the prefill samples the first token and
    new_tokens - 1 decode steps follow (generate had one decode step more than serve's --osl)."""
    kw = {"gpu": "h100", "impl": "fused", "cuda_graphs": True}
    gen = api.predict("llama3.1-8b", mode="generate", seq=512, new_tokens=1, **kw)
    pre = api.predict("llama3.1-8b", mode="prefill", seq=512, **kw)
    assert gen.total_ms == pytest.approx(pre.total_ms)
    assert gen.extra["tpot_ms"] is None and gen.extra["decode_tokens_per_s"] is None
    two = api.predict("llama3.1-8b", mode="generate", seq=512, new_tokens=2, **kw)
    step = api.predict("llama3.1-8b", mode="decode", ctx=512, **kw)
    assert two.total_ms == pytest.approx(pre.total_ms + step.total_ms)
