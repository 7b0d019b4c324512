"""benchmarks/trtllm_perf_overview.py: TensorRT-LLM's published throughput table, each row
simulated as trtllm-bench ran it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import trtllm_perf_overview as tpo  # noqa: E402

from gpuperf import api  # noqa: E402
from gpuperf.hardware.loader import load_gpu  # noqa: E402
from gpuperf.workloads.config import load_model  # noqa: E402

# the document's num_requests by (ISL, OSL)
REQUESTS = {(128, 128): 30000, (128, 2048): 3000, (128, 4096): 1500, (500, 2000): 3000,
            (1000, 1000): 3000, (1000, 2000): 1500, (2048, 128): 3000, (2048, 2048): 1500,
            (5000, 500): 1500, (20000, 2000): 1000, (1024, 1024): 3000, (1024, 8192): 1500,
            (8192, 1024): 1500, (32768, 1024): 1000}  # fmt: skip


def test_every_row_is_a_known_model_on_a_known_gpu_with_the_documents_request_count():
    rows = tpo.rows()
    assert len(rows) == 67
    for r in rows:
        load_model(r["model"])
        load_gpu(r["gpu"])
        assert int(r["requests"]) == REQUESTS[int(r["isl"]), int(r["osl"])]
        assert tpo.published(r) > 0
    # release 1.0: six (model, GPU, TP) columns of ten length pairs each; the later document's
    # rows are per GPU
    assert len({(r["model"], r["gpu"], r["tp"]) for r in rows if r["doc"] == "1.0"}) == 6
    later = [r for r in rows if r["doc"] == "later"]
    assert later and all(tpo.published(r) == 2 * float(r["published"]) for r in later)


def test_bench_settings_follow_trtllm_bench_rounding():
    """Llama-3.1-8B in FP8 on one 80 GiB GPU at 1000/1000: 72.5 GiB after 7.5 GiB of weights,
    0.95 of it at 64 KiB a token (FP8 K and V of 32 layers x 8 heads x 128) holds 564
    requests of 2,000 tokens: a batch of 640 (a multiple of 128 between 256 and 1024) and
    1,129 tokens, raised to the 2,048 floor."""
    cfg, gpu = load_model("llama3.1-8b"), load_gpu("h100")
    assert tpo.bench_settings(cfg, gpu, 1, 1000, 1000) == (640, 2048)
    # 2048/128: 519 requests of 2,176 tokens, 519 x (1 + 2048/128) = 8,820 tokens, rounded up
    # to a multiple of 1,024 past 8,192
    assert tpo.bench_settings(cfg, gpu, 1, 2048, 128) == (640, 9216)
    # each rounding tier, worked by hand (FP8: a byte a parameter and a byte a cached value;
    # the cache gets 0.95 of the GPUs' GiB less the parameters' GiB):
    # 70B on one H200, 128/128: 71.53 GiB / (160 KiB x 256) = 1,831 requests -> a multiple of
    # 256 past 1,024 (2,048); 3,662 tokens -> a multiple of 256 below 4,096 (3,840)
    h200, l70, l405 = load_gpu("h200"), load_model("llama3.1-70b"), load_model("llama3.1-405b")
    assert tpo.bench_settings(l70, h200, 1, 128, 128) == (2048, 3840)
    # 70B on one H200, 500/2000: 187.5 requests -> a multiple of 32 below 256 (192)
    assert tpo.bench_settings(l70, h200, 1, 500, 2000)[0] == 192
    # 405B on eight H200s, 128/2048: 712.5 GiB / (252 KiB x 2,176) = 1,362 -> 1,536
    assert tpo.bench_settings(l405, h200, 8, 128, 2048) == (1536, 2048)
    # 405B on eight H200s, 5000/500: 539 requests -> 640; 5,929 tokens -> a multiple of 512
    assert tpo.bench_settings(l405, h200, 8, 5000, 500) == (640, 6144)
    # 8B on one H100, 128/128: 4,409 requests, capped at 4,096; 8,192 tokens
    assert tpo.bench_settings(cfg, gpu, 1, 128, 128) == (4096, 8192)
    # a bf16 cache holds half the requests
    assert tpo.bench_settings(cfg, gpu, 1, 1000, 1000, kv_bytes=2.0)[0] == 384
    assert tpo._round_up(10, tpo.BATCH_STEPS, tpo.BATCH_FLOOR) == 64


def test_predict_runs_whole_prompts_in_a_budget_that_holds_one(monkeypatch):
    """Chunked context is off in trtllm-bench's PyTorch runs: max_num_tokens is raised to hold
    the longest prompt beside a full batch (get_settings), and the KV cache is FP8."""
    asked: dict = {}

    class Report:
        summary = {"output_tokens_per_s": 1000.0, "mean_batch": 10.0}

    def fake_serve(model, **kw):  # noqa: ANN001, ANN003, ANN202
        asked.update(kw)
        return Report()

    monkeypatch.setattr(api, "serve", fake_serve)
    row = {"model": "llama3.1-8b", "gpu": "h100", "tp": "1", "isl": "20000", "osl": "2000",
           "requests": "1000", "published": "1351", "unit": "total"}  # fmt: skip
    got, settings = tpo.predict(row)
    assert got == 1000.0
    assert asked["token_budget"] == 20000 + asked["max_seqs"]
    assert asked["chunked_prefill"] is False and asked["kv_dtype"] == "fp8"
    assert asked["requests"] == 1000 and asked["engine"].graph_sizes == tpo.GRAPH_SIZES


@pytest.mark.parametrize("row", [0, 34])
def test_a_row_simulates_within_a_third_of_its_published_throughput(row):
    """Two rows end to end (Llama-3.3-70B on an H200 at 128/128; Llama-3.1-405B on eight
    H100s at 1000/1000): the simulation runs and lands near the published number."""
    r = tpo.rows()[row]
    got, _ = tpo.predict(r)
    assert abs(got / tpo.published(r) - 1) < 1 / 3
