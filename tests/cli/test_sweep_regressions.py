"""The hostile-input sweep of stop 29, one named case each, run through the CLI's entry point:
output files written through a symbolic link or into a special file, never replaced; nothing
created or wiped when a command fails; one-line errors (exit 2) where there were tracebacks or
hangs."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from clirun import refused, run

PRESETS = Path(__file__).resolve().parents[2] / "gpuperf" / "workloads" / "presets"
PROFILES = Path(__file__).resolve().parents[2] / "gpuperf" / "hardware" / "profiles"


def test_an_output_through_a_symbolic_link_writes_its_target(capsys, tmp_path):
    target = tmp_path / "target.html"
    target.write_text("old")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    code, _, err = run(capsys, "report", "llama3.2-1b", "-o", str(link))
    assert code == 0, err
    assert link.is_symlink() and target.read_text().lstrip().startswith("<!")


def test_an_output_that_is_not_a_regular_file_is_written_into(capsys, tmp_path):
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))  # `-o >(cat)`
    reader.start()
    code, _, err = run(capsys, "report", "llama3.2-1b", "-o", str(fifo))
    reader.join(timeout=60)
    assert code == 0, err
    assert fifo.is_fifo() and got and got[0].lstrip().startswith(b"<!")  # a FIFO still


def test_a_failed_command_creates_no_folder(capsys, tmp_path):
    out = tmp_path / "new" / "sub" / "r.html"
    refused(capsys, "report", "llama-99b", "-o", str(out), match="unknown model")
    assert not (tmp_path / "new").exists()


def test_a_moe_config_whose_every_layer_is_dense_is_refused(capsys, tmp_path):
    cfg = json.loads((PRESETS / "deepseek-v3.json").read_text())
    cfg["first_k_dense_replace"] = cfg["num_hidden_layers"]
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    refused(capsys, "predict", str(f), match="no layer is routed")


def test_timing_options_must_be_finite(capsys):
    for value in ("nan", "inf"):
        refused(capsys, "measure", "gemm", "64", "--device", "cpu", "--rep-ms", value,
                match="not a finite number")  # fmt: skip


def test_a_profile_bandwidth_too_small_to_invert_is_refused(capsys, tmp_path):
    text = (PROFILES / "a10g.toml").read_text()
    f = tmp_path / "tiny.toml"
    f.write_text(text.replace("hbm_bw_gbps = ", "hbm_bw_gbps = 1e-310 #", 1))
    refused(capsys, "predict", "llama2-7b", "--gpu", str(f), match="hbm_bw_gbps must be at least")


def test_an_answer_longer_than_any_context_is_refused_not_costed_for_minutes(capsys):
    refused(capsys, "predict", "llama2-7b", "--mode", "generate", "--new-tokens", "1G",
            match="new_tokens must be at most")  # fmt: skip


def test_a_pipe_with_no_writer_reads_as_empty_instead_of_hanging(capsys, tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    refused(capsys, "models", "show", str(fifo), match="not valid JSON")


def test_a_measurement_that_measures_nothing_keeps_the_old_results_file(capsys, tmp_path):
    old = tmp_path / "m.json"
    old.write_text('{"old": true}')
    code, _, _ = run(capsys, "measure", "gemm", "64K", "--device", "cpu", "--save", str(old))
    assert code != 0  # 64K cubed does not fit the host's memory
    assert json.loads(old.read_text()) == {"old": True}
