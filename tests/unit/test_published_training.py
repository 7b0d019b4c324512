"""benchmarks/published_training.py: published H100 pre-training runs (NVIDIA's Megatron-Bridge,
NeMo and AutoModel tables, the Megatron-LM README, the Llama 3 paper), fitted to nothing."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import published_training as pt  # noqa: E402


def test_every_row_is_sourced_and_either_evaluated_or_says_why_not():
    rows = pt.rows()
    assert len(rows) == 79
    for row in rows:
        assert row["source"].startswith("https://")
        assert row["arch"] in ("dense", "moe", "hybrid mamba moe")
        assert row["tokens_per_s_per_gpu"] or row["tflops_per_gpu"]
        if not row["config"]:  # the note says why: a family gpuperf lacks, or no architecture
            assert row["note"].startswith(("not expressible", "not evaluated"))
    results = [pt.evaluate(r) for r in rows]
    for r in results:
        if r.row["config"]:
            assert not r.why_not, r.why_not  # every row with a model runs as published
        if r.row["arch"] == "dense" and r.row["config"]:
            assert 0.6 < r.predicted_s / r.measured_s < 1.6


def test_each_row_runs_the_model_it_names():
    """The size in a row's model name (GPT OSS 120B, LLAMA3.1_405B, GPT 1.7B) is its config's
    parameter count within 10%."""
    import re

    checked = 0
    for row in pt.rows():
        size = re.search(r"(\d+(?:\.\d+)?)B", row["model"])
        if row["config"] and size:
            total = pt.model(row).param_count() / 1e9
            assert total == pytest.approx(float(size.group(1)), rel=0.1), row["model"]
            checked += 1
    assert checked >= 60


def test_dense_runs_within_ten_percent_in_the_median():
    """45 dense runs on 8 to 16,384 H100s (Llama 2/3, GPT-3, Nemotron-4 340B, Megatron-LM's
    GPTs to 462B; bf16 and fp8; TP, PP and interleaving, CP to 32, FSDP): median |error| ≤ 10%,
    every one expressible."""
    rows = [r for r in pt.rows() if r["arch"] == "dense" and r["config"]]
    assert len(rows) == 45
    results = [pt.evaluate(r) for r in rows]
    assert all(not r.why_not for r in results)
    errors = [abs(r.error) for r in results]
    assert statistics.median(errors) <= 0.10
    assert sum(e <= 0.2 for e in errors) >= 0.7 * len(errors)


def test_megatron_bridge_counts_causal_attention_at_half():
    """A Megatron-Bridge row gives tokens/s and TFLOP/s: its TFLOP/s is the tokens' FLOPs with
    causal attention counted at half, not PaLM's full count, so a step derived from TFLOP/s
    with PaLM's count (what the TFLOP/s-only rows use: Megatron-LM's count before it halved
    causal attention) is longer by the masked half's share."""
    from gpuperf.step.mfu import attention_flops_per_token, model_flops_per_token
    from gpuperf.workloads.scenario import Scenario

    row = next(r for r in pt.rows() if r["model"] == "LLAMA3_70B" and r["table"].endswith("26.04"))
    by_tokens = pt.measured_s(row)
    by_flops = pt.measured_s(dict(row, tokens_per_s_per_gpu=""))
    sc = Scenario(mode="train", seq=int(row["seq"]))
    full, _ = model_flops_per_token(pt.model(row), sc)
    causal = full - 1.5 * attention_flops_per_token(pt.model(row), sc)  # ×3 passes, half
    assert by_flops / by_tokens == pytest.approx(full / causal, abs=0.01)
