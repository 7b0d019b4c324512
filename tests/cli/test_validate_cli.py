"""`gpuperf validate --impl eager` on the CPU: the op-by-op table plus one whole eager layer run
for real (40 kernels, checked against fp64), in every output format; unsupported layers warn."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

pytest.importorskip("torch")

from gpuperf.cli import main  # noqa: E402

FAST = ["--device", "cpu", "--warmup-ms", "1", "--rep-ms", "3"]
TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100}  # fmt: skip
DECODE = ["--impl", "eager", "--mode", "decode", "--batch", "2", "--ctx", "24"]


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return str(path)


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_eager_json_has_the_whole_layer_and_saves_it(capsys, tiny, tmp_path):
    save = tmp_path / "v.json"
    code, out, err = run(capsys, "validate", tiny, *DECODE, *FAST, "--format", "json",
                         "--save", str(save))  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    names = {op["name"] for op in data["ops"]}
    assert {"L0/attn/norm/cast_f32", "L0/attn/q", "L0/attn/cache_k", "L0/mlp/gate"} <= names
    layer = data["layer"]
    assert layer["kernels_run"] == layer["kernels_predicted"] == 40
    assert layer["check_err"] < 0.05
    assert layer["graph"] is None and layer["host_per_kernel_us"] is None  # CPU: no graph
    gpu_row, host_row = layer["rows"]
    assert gpu_row["what"] == "GPU time" and gpu_row["measured_ms"] is None
    assert host_row["what"] == "with host dispatch"
    assert host_row["measured_ms"] == pytest.approx(layer["eager"]["median_s"] * 1e3)
    assert host_row["predicted_ms"] is None  # no prediction on the CPU
    saved = json.loads(save.read_text())
    assert saved["layer"]["kernels_run"] == 40 and saved["scenario"]["impl"] == "eager"


def test_eager_table_and_csv(capsys, tiny, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    code, out, err = run(capsys, "validate", tiny, *DECODE, *FAST)
    assert code == 0, err
    assert "one whole eager layer: 40 kernels run (40 predicted)" in out
    assert "measured (ms)" in out and "predicted (ms)" in out and "error (%)" in out
    code, out, err = run(capsys, "validate", tiny, *DECODE, *FAST, "--format", "csv")
    assert code == 0, err
    table = pd.read_csv(io.StringIO(out))  # stdout stays one CSV table: the ops
    assert "measured_ms" in table.columns and "L0/mlp/down" in set(table["name"])
    assert "whole layer: 40 kernels run (40 predicted)" in err


def test_fused_has_no_layer_and_unsupported_layers_warn(capsys, tmp_path):
    gpt = tmp_path / "gpt.json"
    gpt.write_text(json.dumps({"model_type": "gpt2", "n_embd": 32, "n_layer": 1, "n_head": 2,
                               "vocab_size": 50, "n_positions": 64}))  # fmt: skip
    code, out, err = run(capsys, "validate", str(gpt), "--seq", "4", *FAST, "--format", "json")
    assert code == 0, err
    assert "layer" not in json.loads(out)
    code, out, err = run(capsys, "validate", str(gpt), "--impl", "eager", "--seq", "4", *FAST,
                         "--format", "json")  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert data["layer"] is None
    assert any("whole layer not run" in w and "Llama-style" in w for w in data["warnings"])


def test_bad_impl_is_exit_2(capsys, tiny):
    code, _, err = run(capsys, "validate", tiny, "--impl", "compiled", *FAST)
    assert code == 2 and "compiled" in err
