"""benchmarks/serve_public.py: each row of the public serving sample simulated under its
benchmark client (InferenceMAX's where the row is of its sweep, fixed waves otherwise)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import serve_public as sp  # noqa: E402

from gpuperf import api  # noqa: E402


def _row(
    isl: int, osl: int, users: int = 8, backend: str = "vllm", tp: int = 8, version: str = ""
) -> dict[str, str]:
    """A sample row; no backend version: one of InferenceMAX's."""
    return {"id": "x", "backend": backend, "backend_version": version,
            "model_path": "meta-llama/Llama-3.1-70B", "system": "h200_sxm",
            "gemm_quant_mode": "fp8", "isl": str(isl), "osl": str(osl),
            "batch_size": str(users), "tp_size": str(tp)}  # fmt: skip


def test_every_sample_row_names_a_model_gpu_and_engine_the_script_knows():
    rows = sp.rows()
    assert len(rows) == 910
    assert {r["model_path"] for r in rows} <= set(sp.MODELS)
    assert {r["system"] for r in rows} <= set(sp.GPUS)
    assert {r["backend"] for r in rows} <= set(sp.ENGINES)
    known = [r for r in rows if sp.inferencemax(r)]
    assert 0 < len(known) < len(rows)
    # InferenceMAX's sweep: Llama-3.1-70B at its three shapes (other engines' runs of the same
    # shapes carry a version and another client)
    assert {r["model_path"] for r in known} == {"meta-llama/Llama-3.1-70B"}
    assert {(r["isl"], r["osl"]) for r in known} == {("1024", "1024"), ("1024", "8192"),
                                                     ("8192", "1024")}  # fmt: skip


@pytest.fixture
def seen(monkeypatch) -> dict:  # noqa: ANN001
    """api.serve replaced: what predict asked of it; its summary's means are 1 and 2 ms, its
    medians 3 and 4 ms."""
    asked: dict = {}

    class Report:
        summary = {"ttft_mean_ms": 1.0, "tpot_mean_ms": 2.0, "ttft_p50_ms": 3.0,
                   "tpot_p50_ms": 4.0}  # fmt: skip

    def fake_serve(model, **kw):  # noqa: ANN001, ANN003, ANN202
        asked.update(kw)
        return Report()

    monkeypatch.setattr(api, "serve", fake_serve)
    return asked


@pytest.mark.parametrize("shape", [(1024, 1024), (1024, 8192), (8192, 1024)])
def test_inferencemax_rows_run_its_client_and_report_means(seen, shape):
    assert sp.predict(_row(*shape, users=16)) == (1.0, 2.0)
    isl, osl = shape
    assert seen["isl"] == f"uniform:{int(0.8 * isl)}:{isl}"
    assert seen["osl"] == f"uniform:{int(0.8 * osl)}:{osl}"
    assert seen["requests"] == 160 and seen["concurrency"] == 16


def test_rows_of_an_unrecorded_client_run_aiconfigurators_client(seen):
    """Ten fixed-length requests per user, means; TRT-LLM under the generator's batch size and
    token budget, its chunked context kept."""
    row = _row(1024, 1024, users=16, backend="trtllm", version="1.0.0rc3")
    assert sp.predict(row) == (1.0, 2.0)
    assert (seen["isl"], seen["osl"], seen["requests"]) == (1024, 1024, 10 * 16)
    assert seen["max_seqs"] == 16 and seen["token_budget"] == 2560  # 16 + 1024 + 1500 in 32s
    assert "kv_dtype" not in seen and "chunked_prefill" not in seen


def test_unrecorded_vllm_rows_run_aiconfigurators_generated_settings(seen):
    sp.predict(_row(2048, 128, users=32, backend="vllm", version="0.12.0"))
    assert seen["max_seqs"] == 32 and seen["token_budget"] == 32 + 2048 + 1500


@pytest.mark.parametrize(("backend", "shape", "tp", "waits"), [
    ("trtllm", (1024, 1024), 4, True), ("trtllm", (1024, 1024), 8, False),
    ("trtllm", (1024, 8192), 1, False), ("vllm", (1024, 1024), 1, False)])  # fmt: skip
def test_inferencemax_rows_run_its_servers_settings(seen, backend, shape, tp, waits):
    sp.predict(_row(*shape, backend=backend, tp=tp))
    assert seen["kv_dtype"] == "fp8"
    assert seen.get("token_budget") == (16384 if backend == "trtllm" else None)
    assert ("batch_wait_iters" in seen) is waits
    if waits:
        assert (seen["batch_wait_iters"], seen["batch_wait_tokens"]) == (20, 0.9)


def test_a_closed_loop_of_drawn_lengths_drifts_apart_after_the_first_wave():
    """Why the client matters: with lengths drawn from [0.8 L, L] the users' requests spread
    out after the first wave, so the mean TTFT over ten waves is far below the burst's."""
    kw = dict(gpu="h200", engine="vllm", tp=8, concurrency=32, dtype="fp8")
    burst = api.serve("llama3-70b", isl=1024, osl=1024, requests=32, **kw)
    drawn = api.serve("llama3-70b", isl="uniform:819:1024", osl="uniform:819:1024",
                      requests=320, **kw)  # fmt: skip
    assert drawn.summary["ttft_mean_ms"] < 0.5 * burst.summary["ttft_mean_ms"]


@pytest.mark.parametrize(("version", "mixed"), [("0.5.1.post1", False), ("0.5.6.post2", True)])
def test_unrecorded_sglang_rows_run_the_generators_settings(seen, version, mixed):
    sp.predict(_row(1000, 100, users=64, backend="sglang", version=version))
    assert seen["max_seqs"] == 64 and "token_budget" not in seen
    assert seen["mixed_prefill"] is mixed
