"""The fourth sweep (a hostile-input sweep, 2026-11-25), one named case each: output that
cannot be written, a search with no plan that named neither the rule nor the memory term, serve
options whose messages pointed elsewhere, and GPU profiles with impossible peaks."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from clirun import refused, run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_stdout_on_a_full_disk_is_one_line_and_exit_3_not_a_traceback():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (["predict", "llama2-7b"], ["predict", "llama2-7b", "--format", "json"],
                 ["serve", "llama3.2-1b", "--requests", "3", "--format", "csv"]):  # fmt: skip
        cmd = [sys.executable, "-m", "gpuperf", *args]
        with open("/dev/full", "w") as full:
            done = subprocess.run(cmd, stdout=full, stderr=subprocess.PIPE, env=env, cwd=ROOT,
                                  timeout=120)  # fmt: skip
        err = done.stderr.decode()
        assert done.returncode == 3, (args, err)
        assert err == "gpuperf: error: cannot write the output: No space left on device\n", err
    # a file gpuperf writes itself (-o): the same exit
    cmd = [sys.executable, "-m", "gpuperf", "report", "llama3.2-1b", "-o", "/dev/full"]
    done = subprocess.run(cmd, capture_output=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 3, done.stderr.decode()
    assert done.stderr.decode() == ("gpuperf: error: cannot write /dev/full: No space left on "
                                    "device\n")  # fmt: skip


def test_search_with_every_plan_refused_by_a_rule_names_the_rule_not_memory(capsys):
    err = refused(capsys, "search", "llama2-7b", "--system", "dgx-a100", "--gpus", "8",
                  "--dtype", "fp8", match="every plan is refused: ")  # fmt: skip
    assert "has no fp8 peak" in err and "do not fit" not in err


def test_search_with_no_plan_that_fits_names_the_memory_term_over(capsys):
    err = refused(capsys, "search", "llama2-7b", "--system", "dgx-h100", "--gpus", "8",
                  "--seq", "10000000", match="do not fit (the smallest, ")  # fmt: skip
    assert "activations alone is" in err and "usable" in err


def test_serve_tp_beyond_a_node_says_so_without_naming_options_serve_lacks(capsys):
    err = refused(capsys, "serve", "llama3-8b", "--gpu", "h100", "--tp", "16",
                  match="tp=16 spans nodes")  # fmt: skip
    assert "--nodes" not in err and "lower --tp" in err


def test_serve_rate_at_its_stated_bound_is_taken(capsys):
    code, _, err = run(capsys, "serve", "llama3.2-1b", "--rate", "1e9", "--requests", "3")
    assert code == 0, err
    refused(capsys, "serve", "llama3.2-1b", "--rate", "1.1e9", "--requests", "3",
            match="--rate must be from 1e-6 to 1e9")  # fmt: skip


@pytest.mark.parametrize("peak", ["5e-324", "1e-300", "1e-7"])
def test_a_gpu_profile_peak_below_a_millionth_of_a_tflops_is_refused(capsys, tmp_path, peak):
    hw = tmp_path / "tiny.toml"
    hw.write_text(f'name = "tiny"\nbase = "h100"\n[peak_tflops]\nbf16 = {peak}\n')
    refused(capsys, "predict", "llama2-7b", "--gpu", str(hw),
            match="peak_tflops.bf16 must be at least 1e-06 TFLOP/s")  # fmt: skip


def test_serve_slo_where_no_split_can_run_says_why_and_exits_2(capsys):
    refused(capsys, "serve", "llama3-70b", "--gpu", "h100", "--slo", "ttft=500ms",
            "--requests", "20", match="does not fit for serving on 1 x")  # fmt: skip


def test_serve_slo_notes_too_long_for_the_table_print_whole_under_it(capsys):
    code, out, err = run(capsys, "serve", "llama3-70b", "--gpu", "h100", "--gpus", "2",
                         "--slo", "ttft=500ms", "--requests", "20")  # fmt: skip
    assert code == 0, err
    assert "see below" in out and "…" not in out
    whole = " ".join(out.split())
    assert "tp1 x 2: llama3-70b does not fit for serving on 1 x h100-sxm5-80gb: weights" in whole
    assert "raise --tp" in whole


def test_a_tpot_target_without_two_token_answers_is_refused(capsys):
    refused(capsys, "serve", "llama3.2-1b", "--osl", "1", "--slo", "tpot=50ms",
            "--requests", "20", match="a TPOT target needs answers of at least 2")  # fmt: skip


def test_a_pcie_cards_nvlink_bridge_joins_two_gpus_and_no_more():
    """h100-pcie, h100-nvl and a100-pcie-80gb: an NVLink bridge joins 2 GPUs; more ranks without
    a system ring over PCIe, and with no NVSwitch neither NVLS nor the engines' custom
    all-reduce beyond two apply."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel.comm import collective_time
    from gpuperf.perfmodel.comm_custom import custom_applies
    from gpuperf.perfmodel.ops import Collective

    for name in ("h100-pcie", "h100-nvl", "a100-pcie-80gb"):
        gpu = load_gpu(name)
        assert gpu.nvlink_gpus == 2 and gpu.nvlink_bw > 0
        pcie_only = replace(gpu, nvlink_bw=0.0)
        big = Collective("ar", "allreduce", 256 << 20, 8)
        t8 = collective_time(big, gpu).time
        assert t8 == pytest.approx(collective_time(big, pcie_only).time, rel=1e-9)
        pair = Collective("ar", "allreduce", 256 << 20, 2)
        assert collective_time(pair, gpu).time < collective_time(pair, pcie_only).time / 2
        assert collective_time(big, gpu, nvls=True).time == pytest.approx(t8, rel=1e-9)
        small = Collective("ar", "allreduce", 1 << 20, 4)
        assert not custom_applies(small, gpu, None)
        assert custom_applies(replace(small, ranks=2), gpu, None)
    sxm = load_gpu("h100")  # NVSwitch-connected: NVLink for 8 ranks
    assert sxm.nvlink_gpus == 0
    assert custom_applies(Collective("ar", "allreduce", 1 << 20, 8), sxm, None)


def test_an_ascii_only_stdout_gets_question_marks_not_a_traceback():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "ascii"}
    done = subprocess.run([sys.executable, "-m", "gpuperf", "predict", "llama2-7b"],
                          capture_output=True, env=env, cwd=ROOT, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-500:]
    assert b"?" in done.stdout and b"memory" in done.stdout


def test_report_from_a_row_measured_past_a_day_is_refused(capsys, tmp_path):
    import json

    rows = [{"name": "gemm/256x256x256", "kind": "gemm", "measured_ms": 1e308}]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"kind": "gemm", "rows": rows}))
    refused(capsys, "report", "--from", str(path), "-o", str(tmp_path / "r.html"),
            match="measured_ms must be a number of milliseconds from a nanosecond")  # fmt: skip
    assert not (tmp_path / "r.html").exists()


def test_a_user_engine_profile_naming_a_kernel_the_model_lacks_is_warned_of(capsys, tmp_path):
    typo = tmp_path / "typo.toml"
    typo.write_text('base = "vllm"\nname = "typo"\nfused_kernels = ["attn/rop"]\n')
    code, out, err = run(capsys, "serve", "llama3.2-1b", "--engine", str(typo), "--requests", "4")
    assert code == 0, err
    assert "fused_kernels names attn/rop, which no kernel of llama3.2-1b has" in " ".join(
        (out + err).split()
    )
    # a profile built on trtllm keeps its fp8 quantization names: known kernels, no warning
    mine = tmp_path / "mine.toml"
    mine.write_text('base = "trtllm"\nname = "mine"\n')
    code, out, err = run(capsys, "serve", "llama3.2-1b", "--engine", str(mine), "--requests", "4")
    assert code == 0, err
    assert "fused_kernels names" not in out + err


@pytest.mark.parametrize(("extra", "bad"), [("nvlink_gpus = 1", "1"),
                                            ("nvlink_gbps_per_direction = 0\nnvlink_gpus = 2",
                                             "2")])  # fmt: skip
def test_nvlink_gpus_is_0_or_at_least_2_and_needs_an_nvlink(capsys, tmp_path, extra, bad):
    hw = tmp_path / "card.toml"
    hw.write_text(f'name = "card"\nbase = "h100-pcie"\n{extra}\n')
    refused(capsys, "predict", "llama2-7b", "--gpu", str(hw),
            match=f"nvlink_gpus is the GPUs an NVLink joins: 0 (every GPU of a node) or 2 and "
                  f"more, with nvlink_gbps_per_direction above 0; got {bad}")  # fmt: skip


def test_a_tpot_target_with_lengths_that_cannot_reach_two_tokens_is_refused(capsys):
    for osl in ("uniform:1:1", "normal:1:0"):
        refused(capsys, "serve", "llama3.2-1b", "--osl", osl, "--slo", "tpot=50ms",
                "--requests", "20", match="a TPOT target needs answers of at least 2")  # fmt: skip
    code, _, err = run(capsys, "serve", "llama3.2-1b", "--osl", "uniform:1:4", "--slo",
                       "tpot=50ms", "--requests", "20")  # fmt: skip
    assert code == 0, err


def test_hw_show_lists_the_gpus_an_nvlink_bridge_joins(capsys):
    import json

    code, out, err = run(capsys, "hw", "show", "h100-pcie", "--format", "json")
    assert code == 0, err
    row = next(f for f in json.loads(out)["fields"] if f["field"] == "nvlink_gpus")
    assert row["value"] == 2 and "joins 2 GPUs" in row["source"]
    code, out, _ = run(capsys, "hw", "show", "h100", "--format", "json")  # NVSwitch: no row
    assert not any(f["field"] == "nvlink_gpus" for f in json.loads(out)["fields"])


def test_calibrate_from_files_of_an_unknown_gpu_names_it(capsys, tmp_path):
    import json

    rows = [{"name": "gemm/256x256x256", "kind": "gemm", "measured_ms": 0.05}]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"env": {"gpu": "nosuch"}, "kind": "gemm", "rows": rows}))
    refused(capsys, "calibrate", "--from", str(path), "-o", str(tmp_path / "c.toml"),
            match="measured on 'nosuch', which no built-in GPU profile matches")  # fmt: skip


def test_calibrate_from_a_negative_measured_time_says_so(capsys, tmp_path):
    import json

    rows = [{"name": "gemm/256x256x256", "kind": "gemm", "measured_ms": -1.0}]
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"env": {"gpu": "NVIDIA H100 80GB HBM3"}, "rows": rows}))
    refused(capsys, "calibrate", "--from", str(path), "--gpu", "h100", "--all-shapes", "-o",
            str(tmp_path / "c.toml"), match="(1e-6) to a day, got -1.0")  # fmt: skip
