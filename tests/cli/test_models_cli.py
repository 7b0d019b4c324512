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
    assert len(rows) == 10
    assert rows["mixtral-8x7b"]["params_b"] == 46.703
    assert rows["mixtral-8x7b"]["active_params_b"] == 12.88
    assert rows["llama2-70b"]["heads"] == "64/8"


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
