"""Start torchrun workers, watch them, end them: one way for every multi-process run.

gpuperf starts a small supervisor (`python -m gpuperf.measure.launch`, in its own session, so a
Ctrl-C at the terminal reaches gpuperf alone), which starts torchrun and adopts every process of
the run whose parent dies (Linux PR_SET_CHILD_SUBREAPER), so no rank is re-parented to init. The
supervisor's stdin is a pipe whose write end only gpuperf holds: when gpuperf goes, however it
goes (SIGKILL included), the supervisor reads EOF, kills the run and removes its temporary
folder. On a timeout, Ctrl-C, SIGTERM or any error gpuperf ends the run itself (`kill_tree`).
`poll` is called while the workers run (to report rows as they land in the output file).
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from gpuperf.errors import EnvironmentUnavailable

REPO_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the gpuperf package
PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
STOPPED = "TtZX"  # /proc/PID/stat states of a process that can start no other: stopped or dead


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


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) of every process (Linux /proc)."""
    table = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            table[int(entry.name)] = (int(fields[1]), fields[0])
        except (OSError, ValueError, IndexError):
            continue
    return table


def _below(table: dict[int, tuple[int, str]], pid: int) -> list[int]:
    """Every process under `pid` in `table` (torchrun puts each rank in its own session, so a
    process group does not hold them)."""
    children: dict[int, list[int]] = {}
    for child, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(child)
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _signal(pid: int, sig: int) -> None:
    if pid > 1 and pid != os.getpid():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def end_tree(
    root: int, *, include_root: bool = True, settle_s: float = 2.0, exit_s: float = 10.0
) -> int:
    """SIGKILL every process under `root` (and `root`); returns how many.

    Each is stopped (SIGSTOP) first, and the tree read again until two readings find nothing
    new and nothing still running: killing them one by one while torchrun still ran let it start
    ranks after the count, which lived on under init. A process that will not stop within
    `settle_s` (in uninterruptible sleep) is killed with the rest. Returns once every one has
    exited (or `exit_s` has passed): a killed rank still unmapping its memory on a busy machine
    was still there when the caller said the run was over."""
    frozen: set[int] = set()
    if include_root:
        _signal(root, signal.SIGSTOP)
        frozen.add(root)
    deadline, calm = time.monotonic() + settle_s, 0
    while calm < 2 and time.monotonic() < deadline:
        table = _processes()
        new = [pid for pid in _below(table, root) if pid not in frozen]
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        frozen.update(new)
        running = [pid for pid in frozen if pid in table and table[pid][1] not in STOPPED]
        calm = 0 if new or running else calm + 1
        time.sleep(0.002)
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + exit_s
    while time.monotonic() < deadline:
        table = _processes()
        if not any(pid in table and table[pid][1] not in "ZX" for pid in frozen):
            break
        time.sleep(0.01)
    return len(frozen)


def kill_tree(proc: subprocess.Popen[Any]) -> int:
    """SIGKILL the launcher and every process under it (see end_tree); returns how many."""
    killed = end_tree(proc.pid)
    proc.wait()
    return killed


def last_error(log: Path) -> str:
    """The last line of a workers' log that names an error (or the last line)."""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in reversed(lines):  # torchrun's summary ("error_file: <N/A>") says nothing
        if ("Error" in ln or "error" in ln) and not ln.startswith("error_file"):
            return ln[:300]
    exits = [ln for ln in lines if ln.startswith("exitcode")]
    return (exits[-1] if exits else lines[-1] if lines else "no output")[:300]


def run_workers(cmd: list[str], env: dict[str, str], log: Path, timeout_s: float | None,
                poll: Callable[[], None] | None = None,
                remove: Path | None = None) -> int:  # fmt: skip
    """Run `cmd` (torchrun) under the supervisor, its output in `log`; its exit code.

    Raises WorkersTimedOut. Whatever else stops this (Ctrl-C, SIGTERM, an error from `poll`)
    ends the run first. `remove` (the run's temporary folder) is deleted by the supervisor if
    gpuperf dies without cleaning up."""
    start = time.monotonic()
    sup = [sys.executable, "-m", "gpuperf.measure.launch"]
    sup += ["--remove", str(remove)] if remove is not None else []
    with open(log, "wb") as logf:
        proc = subprocess.Popen(
            [*sup, "--", *cmd], env=env, stdout=logf, stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        try:
            while proc.poll() is None:
                if poll is not None:
                    poll()
                if timeout_s is not None and time.monotonic() - start > timeout_s:
                    killed = kill_tree(proc)
                    raise WorkersTimedOut(f"timed out after {timeout_s:g} s", killed)
                time.sleep(0.1)
        except BaseException:
            kill_tree(proc)
            raise
        finally:
            assert proc.stdin is not None
            proc.stdin.close()  # the lifeline: the supervisor is gone by now
    if poll is not None:
        poll()
    return proc.returncode


def _parent_gone() -> bool:
    """The lifeline (stdin) reads EOF: gpuperf has exited or been killed."""
    ready, _, _ = select.select([0], [], [], 0)
    return bool(ready) and not os.read(0, 1)


def _exit_like(code: int) -> int:
    """The supervisor's exit mirrors torchrun's: killed by signal N is killed by signal N."""
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


def supervise(argv: list[str]) -> int:
    """The supervisor: `python -m gpuperf.measure.launch [--remove DIR] -- CMD ...`, its stdin
    the lifeline pipe. Runs CMD, then ends whatever CMD left behind; ends everything at once when
    gpuperf goes, and then removes DIR (gpuperf's clean-up could not run)."""
    remove = Path(argv[1]) if argv[:1] == ["--remove"] else None
    cmd = argv[argv.index("--") + 1 :]
    with contextlib.suppress(OSError, AttributeError):  # Linux; elsewhere orphans go to init
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    ended = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    for sig in ended:  # killed by hand: still end the run
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))
    code = 128 + signal.SIGTERM
    try:
        if not _parent_gone():
            child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
            while child.poll() is None and not _parent_gone():
                select.select([0], [], [], 0.1)
            code = code if child.returncode is None else child.returncode
    finally:
        for sig in ended:
            signal.signal(sig, signal.SIG_IGN)
        end_tree(os.getpid(), include_root=False)  # the run, or what torchrun left behind
        with contextlib.suppress(ChildProcessError):
            while True:
                os.waitpid(-1, 0)
        if remove is not None and _parent_gone():
            shutil.rmtree(remove, ignore_errors=True)
    return _exit_like(code)


if __name__ == "__main__":
    sys.exit(supervise(sys.argv[1:]))


def worker_exit(destroy_group: bool = True) -> NoReturn:
    """End a torchrun worker whose result is written: destroy its process group (unless asked
    not to), then leave without the interpreter's teardown. On a loaded host a worker thread
    still joinable when its C++ object is destroyed aborts the process ("terminate called
    without an active exception", SIGABRT) after the run succeeded, and torchrun then reports
    the whole run failed (seen with gloo on 2 CPU ranks under load)."""
    import torch.distributed as dist

    if destroy_group:
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
