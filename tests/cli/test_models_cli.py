"""`gpuperf models list|show`."""

from __future__ import annotations

import csv
import io
import json

import pytest
from click.testing import CliRunner

from gpuperf.cli import cli, main


def run(*args):
    return CliRunner(env={"COLUMNS": "200"}).invoke(cli, list(args))


def test_list_json_has_every_preset():
    res = run("models", "list", "--format", "json")
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)["models"]}
    assert len(rows) == 20 and rows["llama3.1-8b"]["params_b"] == 8.03
    assert rows["qwen3-32b"]["params_b"] == 32.762 and rows["llama3.2-1b"]["params_b"] == 1.236
    assert rows["mixtral-8x7b"]["params_b"] == 46.703
    assert rows["mixtral-8x7b"]["active_params_b"] == 12.88
    assert rows["llama2-70b"]["heads"] == "64/8"
    assert (
        rows["deepseek-v3"]["params_b"] == 671.026
        and rows["deepseek-v3"]["active_params_b"] == 37.552
    )
    assert rows["qwen3-30b-a3b"]["features"] == "GQA, MoE top-8/128, qk-norm"
    assert rows["gemma2-9b"]["mlp"] == "gated (gelu_tanh)"


def test_list_table_never_wraps_names_or_numbers():
    res = CliRunner(env={"COLUMNS": "80"}).invoke(cli, ["models", "list"])
    assert res.exit_code == 0, res.output
    lines = {line.split()[0]: line for line in res.output.splitlines() if line.strip()}
    assert "671.026" in lines["deepseek-v3"] and "163,840" in lines["deepseek-v3"]
    assert "gated (gelu_tanh)" in lines["gemma2-9b"]


def test_show_deepseek_v3_prints_the_set_fields_with_units():
    res = run("models", "show", "deepseek-v3")
    assert res.exit_code == 0, res.output
    rows = {" ".join(line.split()[:-1]): line.split()[-1] for line in res.output.splitlines()
            if len(line.split()) >= 2}  # fmt: skip
    assert rows["kv_lora_rank"] == "512" and rows["q_lora_rank"] == "1,536"
    assert rows["num_experts"] == "256" and rows["num_experts_per_tok"] == "8"
    assert rows["moe_intermediate_size"] == "2,048" and rows["router"] == "sigmoid"
    assert rows["max_position_embeddings (tokens)"] == "163,840"
    assert "0-2 (3 layers)" in res.output and "MLA, MoE top-8/256 +shared" in res.output
    assert "671,026,419,200" in res.output and "37,552,297,472" in res.output
    assert "sliding_window" not in res.output and "qk_norm" not in res.output  # not set
    data = json.loads(run("models", "show", "deepseek-v3", "--format", "json").output)
    assert data["config"]["dense_layers"] == [0, 1, 2] and data["params"]["shared_expert"] > 0


def test_show_sliding_window():
    res = run("models", "show", "gemma2-9b")
    assert "sliding_window (tokens)" in res.output and "4,096" in res.output
    assert "0, 2, 4, 6, 8, … (21 layers)" in res.output and "softcap 50" in res.output


def test_list_table_and_csv():
    res = run("models", "list")
    assert res.exit_code == 0 and "params (B)" in res.output and "llama3.1-405b" in res.output
    rows = list(csv.DictReader(io.StringIO(run("models", "list", "--format", "csv").output)))
    assert {r["name"] for r in rows} >= {"llama2-7b", "qwen2-7b"}


def test_show_preset_and_file(tmp_path):
    res = run("models", "show", "LLAMA2-7B", "--format", "json")
    data = json.loads(res.output)
    assert data["params"]["total"] == 6_738_415_616 and data["config"]["head_dim"] == 128
    f = tmp_path / "config.json"
    f.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
                             "n_positions": 1024, "vocab_size": 50257}))  # fmt: skip
    out = run("models", "show", str(f))
    assert out.exit_code == 0 and "124,439,808" in out.output


def test_help_has_examples():
    for cmd in (["models"], ["models", "list"], ["models", "show"]):
        assert "Examples" in run(*cmd, "--help").output


def test_unknown_model_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["models", "show", "lama2-7b"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "did you mean llama2-7b" in err and "Traceback" not in err
