"""Start torchrun workers, watch them, end them: one way for every multi-process run.

The launcher runs in its own session; on a timeout, Ctrl-C or SIGTERM every process of the run
(torchrun, its ranks, and anything they started) is killed, and if gpuperf itself is killed
torchrun gets SIGTERM from the kernel (PR_SET_PDEATHSIG). `poll` is called while the workers run (to
report rows as they land in the output file).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuperf.errors import EnvironmentUnavailable

REPO_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the gpuperf package


class WorkersTimedOut(EnvironmentUnavailable):
    """The workers did not finish in time (a hung rank, a dead link): exit 3."""

    def __init__(self, message: str, killed: int) -> None:
        super().__init__(message)
        self.killed = killed


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The workers' environment: gpuperf importable, NVLS off unless the user set it."""
    env = dict(os.environ)
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink SHARP/multicast is unreliable here
    env.setdefault("OMP_NUM_THREADS", "1")  # torchrun warns and sets it otherwise
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    env.update(extra or {})
    return env


def _descendants(pid: int) -> list[int]:
    """All processes below `pid` (Linux /proc); torchrun puts each rank in its own session."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(proc: subprocess.Popen[Any]) -> int:
    """SIGKILL the launcher's process group and every descendant; returns how many."""
    pids = _descendants(proc.pid)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return len(pids) + 1


def last_error(log: Path) -> str:
    """The last line of a workers' log that names an error (or the last line)."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in reversed(lines):  # torchrun's summary ("error_file: <N/A>") says nothing
        if ("Error" in ln or "error" in ln) and not ln.startswith("error_file"):
            return ln[:300]
    exits = [ln for ln in lines if ln.startswith("exitcode")]
    return (exits[-1] if exits else lines[-1] if lines else "no output")[:300]


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when gpuperf dies, even by SIGKILL (Linux
    PR_SET_PDEATHSIG; torchrun ends its ranks on SIGTERM, and they have their own)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGTERM))


def run_workers(cmd: list[str], env: dict[str, str], log: Path, timeout_s: float | None,
                poll: Callable[[], None] | None = None) -> int:  # fmt: skip
    """Run `cmd` (torchrun) with its output in `log`; its exit code. Raises WorkersTimedOut."""
    start = time.monotonic()
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent,
        )  # fmt: skip
        try:
            while proc.poll() is None:
                if poll is not None:
                    poll()
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    killed = kill_tree(proc)
                    raise WorkersTimedOut(f"timed out after {timeout_s:g} s", killed)
                time.sleep(0.1)
        except KeyboardInterrupt:
            kill_tree(proc)
            raise
    if poll is not None:
        poll()
    return proc.returncode
