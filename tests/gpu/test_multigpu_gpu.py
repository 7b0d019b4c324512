"""Whole models as parallel plans on 2 GPUs (NCCL): what the CPU tests cannot run, PyTorch's
context parallelism, measured and predicted through `gpuperf validate`."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs"),
]

from gpuperf.cli import main  # noqa: E402

SMALL = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816,
         "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4,
         "vocab_size": 32000, "max_position_embeddings": 16384}  # fmt: skip


@pytest.mark.parametrize("mode", ["prefill", "train"])
def test_context_parallel_runs_and_is_predicted(capsys, tmp_path, mode):
    path = tmp_path / "small.json"
    path.write_text(json.dumps(SMALL))
    try:
        main(["validate", str(path), "--cp", "2", "--nproc", "2", "--mode", mode, "--seq",
              "8192", "--impl", "eager", "--iters", "3", "--format", "json"])  # fmt: skip
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    assert code == 0, out.err
    r = json.loads(out.out)
    assert r["implementation"] == "cp" and r["world"] == 2
    assert r["measured_ms"] > 0 and r["predicted_ms"] > 0
    assert 0.5 < r["predicted_ms"] / r["measured_ms"] < 2.0
