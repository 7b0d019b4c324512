"""A collective run under torchrun (gloo, 2 CPU ranks) stopped from outside: SIGTERM shows and
keeps the rows measured so far, exits 143 with one line, and leaves no process and no temporary
folder behind; SIGKILL of gpuperf itself still ends torchrun and its ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("torch")

SIZES = "4K:1G:x2"  # far more than finishes before the signal


def _ours(mark: str) -> list[int]:
    """Processes whose environment carries `mark` (gpuperf, torchrun, the ranks)."""
    pids = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if mark.encode() in (entry / "environ").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _start(tmp_path: Path, save: Path) -> tuple[subprocess.Popen, str]:
    mark = f"GPUPERF_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, "TMPDIR": str(tmp_path), mark.split("=")[0]: mark.split("=")[1]}
    cmd = [sys.executable, "-m", "gpuperf", "measure", "allreduce", "--bytes", SIZES,
           "--nproc", "2", "--device", "cpu", "--warmup-ms", "1", "--rep-ms", "5",
           "--save", str(save), "--format", "json"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return proc, mark


def _wait_for_rows(save: Path, proc: subprocess.Popen, n: int = 2, limit: float = 120) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end and proc.poll() is None:
        try:
            if len(json.loads(save.read_text())["rows"]) >= n:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    pytest.fail("no rows were measured in time")


def _gone(mark: str, limit: float = 30) -> bool:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if not _ours(mark):
            return True
        time.sleep(0.2)
    return False


def test_sigterm_keeps_the_rows_and_ends_every_process(tmp_path):
    save = tmp_path / "rows.json"
    proc, mark = _start(tmp_path, save)
    _wait_for_rows(save, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    lines = err.decode().strip().splitlines()
    assert "Traceback" not in err.decode()
    assert lines[-1].startswith("gpuperf: error: allreduce: measured ") and "SIGTERM" in lines[-1]
    shown = json.loads(out)
    assert len(json.loads(save.read_text())["rows"]) >= 2 and shown
    assert _gone(mark), "processes left behind"
    assert not list(tmp_path.glob("gpuperf-coll-*")), "temporary folder left behind"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux")
def test_sigkill_of_gpuperf_still_ends_torchrun_and_the_ranks(tmp_path):
    save = tmp_path / "rows.json"
    proc, mark = _start(tmp_path, save)
    _wait_for_rows(save, proc, n=1)
    proc.kill()
    proc.wait(timeout=30)
    assert _gone(mark), "processes left behind"


def test_sigterm_during_kernel_measurements_shows_what_was_measured(tmp_path):
    save = tmp_path / "gemm.json"
    cmd = [sys.executable, "-m", "gpuperf", "measure", "gemm", "64:8192:x2", "--device", "cpu",
           "--gpu", "h100", "--warmup-ms", "1", "--rep-ms", "200", "--save", str(save),
           "--format", "json"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for_rows(save, proc, n=1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "Traceback" not in err.decode() and "SIGTERM" in err.decode().strip().splitlines()[-1]
    measured = json.loads(save.read_text())["rows"]
    assert 1 <= len(measured) < 8 and len(json.loads(out)["ops"]) == len(measured)


def test_a_timeout_while_ranks_still_start_ends_them_all(tmp_path):
    """--timeout fires before 6 ranks have finished importing torch: exit 3, nothing left."""
    mark = f"GPUPERF_TEST_MARK={uuid.uuid4().hex}"
    env = {**os.environ, "TMPDIR": str(tmp_path), mark.split("=")[0]: mark.split("=")[1]}
    cmd = [sys.executable, "-m", "gpuperf", "measure", "allreduce", "--bytes", "1K",
           "--nproc", "6", "--device", "cpu", "--timeout", "1.5"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=120)
    err = proc.stderr.decode()
    assert proc.returncode == 3, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert _gone(mark), "processes left behind"
    assert not list(tmp_path.glob("gpuperf-coll-*")), "temporary folder left behind"
