"""`gpuperf measure` on the CPU: every op kind for real, the JSON and results-file contracts,
collectives through torchrun (gloo), --timeout, missing GPU and bad input exit codes."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest
import torch

from gpuperf.cli import main
from gpuperf.perfmodel.ops_io import op_from_dict

FAST = ["--device", "cpu", "--warmup-ms", "1", "--rep-ms", "5"]


def run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


CASES = {
    "gemm": ["gemm", "32", "48", "64:128:x2", "--dtype", "fp32"],
    "attention": ["attention", "--heads", "4", "--kv-heads", "2", "--seq", "32", "--causal"],
    "decode": ["attention", "--heads", "4", "--seq", "1", "--kv-len", "64", "--causal"],
    "elementwise": ["elementwise", "gelu", "--numel", "1K,64K"],
    "norm": ["norm", "rmsnorm", "--rows", "8", "--cols", "256"],
    "softmax": ["norm", "softmax", "--rows", "8", "--cols", "256"],
    "copy": ["copy", "--bytes", "64K"],
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_every_op_kind_json(capsys, case):
    code, out, err = run(capsys, "measure", *CASES[case], *FAST, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert data["env"]["device"] == "cpu" and data["env"]["torch"] == torch.__version__
    assert data["env"]["timing_method"].startswith("gpuperf-timer/")
    assert data["ops"], data
    for row in data["ops"]:
        assert row["measured_ms"] > 0
        assert row["time_ms"] is None  # no prediction on the CPU
        assert row["error_pct"] is None
        assert row["check_err"] < 0.02
        assert row["gbps"] == pytest.approx(row["bytes"] / row["measured_ms"] / 1e6)
    if case == "gemm":
        assert [r["shape"] for r in data["ops"]] == ["32×48×64", "32×48×128"]


def test_table_and_csv_have_units(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # no wrapped headers
    code, out, err = run(capsys, "measure", "copy", "--bytes", "4K", *FAST)
    assert code == 0, err
    assert "measured (ms)" in out and "measured GB/s" in out
    code, out, err = run(capsys, "measure", "copy", "--bytes", "4K", *FAST, "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("name,") and "measured_ms" in out


def test_save_writes_the_results_contract(capsys, tmp_path):
    path = tmp_path / "sub" / "gemm.json"
    code, _, err = run(capsys, "measure", "gemm", "16,32", *FAST, "--save", str(path))
    assert code == 0, err
    data = json.loads(path.read_text())
    assert set(data) == {"env", "kind", "rows"} and data["kind"] == "gemm"
    assert len(data["rows"]) == 2
    for row in data["rows"]:
        op = op_from_dict(row["op"])  # the op round-trips: accuracy.py re-predicts from it
        assert (op.m, op.n, op.k) == (row["op"]["m"],) * 3
        for key in (
            "name",
            "kind",
            "shape",
            "flops",
            "bytes",
            "measured_ms",
            "p10_ms",
            "p90_ms",
            "n",
            "tflops",
            "gbps",
            "check_err",
            "predicted_ms",
            "samples_ms",
        ):
            assert key in row
        assert row["flops"] == 2 * op.m**3 and len(row["samples_ms"]) == row["n"]


def test_bad_sizes_exit_2(capsys):
    code, _, err = run(capsys, "measure", "gemm", "12Q", *FAST)
    assert code == 2 and "12Q" in err and "Traceback" not in err
    code, _, err = run(capsys, "measure", "allreduce", "--bytes", "0", "--device", "cpu")
    assert code == 2 and "Traceback" not in err


@pytest.mark.parametrize(
    "args",
    [("elementwise", "gelu", "--numel", "4611686018427387904"),  # torch overflowed: exit 1
     ("norm", "rmsnorm", "--rows", "100000", "--cols", "100000"),  # grew to 20 GB, then on
     ("allreduce", "--bytes", "1T")],  # every rank failed to allocate: exit 1
)  # fmt: skip
def test_cpu_runs_larger_than_the_host_memory_exit_3_before_they_start(capsys, monkeypatch, args):
    monkeypatch.setattr("gpuperf.measure.env.host_available_bytes", lambda: 8 * 2**30)
    code, _, err = run(capsys, "measure", *args, "--device", "cpu")
    assert code == 3 and "of host memory" in err and len(err.strip().splitlines()) == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_missing_gpu_exits_3(capsys):
    code, _, err = run(capsys, "measure", "gemm", "64")
    assert code == 3 and "no CUDA GPU found; use --device cpu" in err
    code, _, err = run(capsys, "measure", "allreduce", "--bytes", "1K", "--device", "cuda")
    assert code == 3


def test_reducescatter_through_torchrun_json(capsys, tmp_path):
    save = tmp_path / "rs.json"
    args = ["measure", "reducescatter", "--bytes", "4K", "--nproc", "2", *FAST]
    code, out, err = run(capsys, *args, "--format", "json", "--save", str(save))
    assert code == 0, err
    row = json.loads(out)["ops"][0]
    assert row["wrong"] == 0 and row["ranks"] == 2 and row["bytes"] == 4096
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] / 2)  # (n-1)/n, n = 2
    assert row["op"] == {
        "type": "Collective",
        "name": "reducescatter/4096",
        "coll": "reducescatter",
        "nbytes": 4096,
        "ranks": 2,
        "dtype": "bf16",
        "nodes": 0,
        "net_bytes": None,
    }
    assert json.loads(save.read_text())["rows"][0]["measured_ms"] == row["measured_ms"]


def _processes_with(marker: str) -> list[int]:
    found = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if marker.encode() in (p / "environ").read_bytes():
                found.append(int(p.name))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs Linux /proc")
def test_timeout_kills_every_rank(capsys, monkeypatch):
    marker = f"gpuperf-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("GPUPERF_TEST_MARK", marker)
    monkeypatch.setenv("GPUPERF_TEST_HANG_RANK", "1")  # rank 1 sleeps; rank 0 waits in allreduce
    code, out, err = run(
        capsys,
        "measure",
        "allreduce",
        "--bytes",
        "4K",
        "--nproc",
        "2",
        "--device",
        "cpu",
        "--timeout",
        "6",
    )
    assert code == 3
    assert err.strip().count("\n") == 0 and "timed out after 6 s" in err, err
    assert _processes_with(marker) == [os.getpid()] or _processes_with(marker) == []


def test_validate_measures_one_layer_and_lists_skipped_ops(capsys):
    code, out, err = run(capsys, "validate", "llama2-7b", "--seq", "8", *FAST, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    names = [r["name"] for r in data["ops"]]
    assert "L0/attn/qkv" in names and "lm_head" in names and "embed" in names
    assert not any(n.startswith("L1/") for n in names)  # one layer only
    qkv = data["ops"][names.index("L0/attn/qkv")]
    assert qkv["shape"] == "8×12288×4096" and qkv["measured_ms"] > 0
    assert any("skipped L0/attn/rope" in w for w in data["warnings"])


def test_weight_only_gemm_runs_its_kernel_on_the_cpu(capsys):
    """gpuperf measure gemm --weight-dtype int4 runs torch's weight-only kernel (the CPU one
    here), checked against the dequantized weights it applies (on the CPU nothing is
    predicted beside it: no profile describes the CPU)."""
    code, out, err = run(capsys, "measure", "gemm", "32", "256", "512", "--weight-dtype", "int4",
                         "--device", "cpu", "--gpu", "h100", "--format", "json")  # fmt: skip
    assert code == 0, err
    row = json.loads(out)["ops"][0]
    assert "wint4" in row["shape"] and row["measured_ms"] > 0 and row["time_ms"] is None


@pytest.mark.parametrize(
    "args",
    [("measure", "gemm", "64", "--device", "cpu"),
     ("calibrate", "--device", "cpu", "--allow-cpu", "--gpu", "h100", "-o", "{tmp}/p.toml")],
)  # fmt: skip
def test_without_torch_measuring_exits_3_with_the_install_line(capsys, monkeypatch, tmp_path,
                                                               args):  # fmt: skip
    # one import (measure.torch_import) for every command that measures
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    code, out, err = run(capsys, *(a.format(tmp=tmp_path) for a in args))
    assert code == 3, err
    assert err.strip().endswith("measuring needs torch: pip install 'gpuperf[measure]'"), err
    assert not (tmp_path / "p.toml").exists()
