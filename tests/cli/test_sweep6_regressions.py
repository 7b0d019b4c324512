"""Regressions found by the helper sweeps of stop 59 (invariant probe, hostile inputs)."""

from __future__ import annotations

import pytest
from clirun import refused

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


def test_a_request_the_answer_room_rule_can_never_admit_does_not_fit():
    """SGLang's rule admits a request only while prompt + answer < the free cache: one that
    exactly fits the cache passed the fit check and then failed mid-run with a plain InputError,
    which made `serve --slo --gpus` abort instead of skipping the split."""
    from gpuperf.step.serve import DoesNotFit

    kw = {"gpu": "h100", "engine": "sglang", "isl": 1000, "osl": 24, "requests": 1}
    with pytest.raises(DoesNotFit, match="new-token-ratio 0"):
        api.serve("llama3.2-1b", kv_tokens=1024, **kw)
    ok = api.serve("llama3.2-1b", kv_tokens=1025, **kw)
    assert ok.summary["requests"] == 1
    alone = api.serve("llama3.2-1b", kv_tokens=1023, new_token_ratio=0.0, **kw)
    assert alone.summary["requests"] == 1


def test_a_block_larger_than_the_cache_says_so():
    from gpuperf.step.serve import DoesNotFit

    with pytest.raises(DoesNotFit, match="hold no block of 16,777,216 tokens"):
        api.serve("llama3-8b", gpu="h100", block_size=1 << 24, requests=5)


def test_generate_caches_the_prompt_and_all_but_the_last_answer_token():
    one = api.predict("llama3-8b", gpu="h100", mode="generate", seq=8192, new_tokens=1)
    pre = api.predict("llama3-8b", gpu="h100", mode="prefill", seq=8192)
    assert one.memory["kv_cache"] == pre.memory["kv_cache"]
    assert not any("positions" in w for w in one.warnings)


def test_a_trace_line_may_hold_a_line_separator_inside_a_string(tmp_path):
    from gpuperf.step.serve_load import read_trace

    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5, "prompt": '
                    '"a\u2028b\u0085c"}\n', encoding="utf-8")  # fmt: skip
    assert len(read_trace(path).requests) == 1


def test_calibrate_from_a_folder_without_results_says_so(capsys, tmp_path):
    refused(capsys, "calibrate", "--from", str(tmp_path), "-o", str(tmp_path / "x.toml"),
            match="no result files (*.json) in --from")  # fmt: skip
