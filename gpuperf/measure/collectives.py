"""Launch a collective benchmark with torchrun (torch.distributed.run) and read its result.

The workers (gpuperf.measure.collective_worker) use NCCL on GPUs and gloo on CPUs. They run under
gpuperf.measure.launch: on --timeout, Ctrl-C or SIGTERM every process of the run (torchrun, its
ranks, and anything they started) is killed, and the rows finished so far are kept.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuperf.errors import EnvironmentUnavailable, GpuperfError, InputError
from gpuperf.measure.collective_worker import COLLS
from gpuperf.measure.launch import WorkersTimedOut, child_env, last_error, run_workers

OnRow = Callable[[dict[str, Any], dict[str, Any]], None]
REPO_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the gpuperf package


class CollectiveTimeout(EnvironmentUnavailable):
    """The run did not finish within --timeout (a hung rank, a dead link): exit 3."""


class WorkersFailed(GpuperfError):
    """torchrun or a rank exited with an error (exit 1); the message carries the last error line."""


@dataclass(frozen=True, slots=True)
class Launch:
    """Where and how to run: ranks per node, nodes, this node's rank, rendezvous host:port."""

    nproc: int = 2
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    device: str = "cuda"

    @property
    def world(self) -> int:
        return self.nproc * self.nnodes


def check_launch(coll: str, launch: Launch) -> None:
    """InputError for impossible requests, EnvironmentUnavailable when GPUs are missing."""
    if coll not in COLLS:
        raise InputError(f"unknown collective {coll!r}; expected one of: {', '.join(COLLS)}")
    if launch.nproc < 1 or launch.nnodes < 1:
        raise InputError("--nproc and --nnodes must be positive")
    if not 0 <= launch.node_rank < launch.nnodes:
        raise InputError(f"--node-rank {launch.node_rank} must be in [0, {launch.nnodes})")
    if launch.nnodes > 1 and not launch.rdzv_endpoint:
        raise InputError("--nnodes > 1 needs --rdzv-endpoint host:port (node 0's address)")
    if launch.world < 2:  # as `gpuperf predict` says: one rank has nothing to exchange
        raise InputError(f"{coll} needs at least 2 ranks, got --nproc {launch.nproc}")
    if launch.rdzv_endpoint is not None:
        _, port = _endpoint(launch.rdzv_endpoint)
        if launch.node_rank == 0:
            _check_port_free(port)
    if launch.device == "cuda":
        try:
            import torch
        except ImportError:
            raise EnvironmentUnavailable("torch is not installed (pip install torch)") from None
        have = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if have < launch.nproc:
            raise EnvironmentUnavailable(
                f"{launch.nproc} GPUs per node requested, {have} present"
                + ("; use --device cpu" if have == 0 else "")
            )


def _endpoint(text: str) -> tuple[str, int]:
    """(host, port) of --rdzv-endpoint, or an InputError (a bad port made torchrun fail, exit 1)."""
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"--rdzv-endpoint {text!r} must be host:port with a port in 1-65535")
    return host, int(port)


def _check_port_free(port: int) -> None:
    """Node 0 listens on the rendezvous port (torchrun's store): a port in use or not allowed here
    is an InputError now, not torchrun failing (exit 1) after its start-up."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the store does
        try:
            sock.bind(("", port))
        except OSError as exc:
            raise InputError(
                f"--rdzv-endpoint port {port} cannot be used on this machine (node 0 listens "
                f"there): {exc.strerror or exc}"
            ) from None


def torchrun_command(coll: str, sizes: list[int], launch: Launch, out: str, **kw: Any) -> list[str]:
    """The torchrun command line (also printed by --dry-run style tooling and tests)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={launch.nproc}"]
    if launch.nnodes == 1 and not launch.rdzv_endpoint:
        cmd.append("--standalone")
    else:
        host, port = _endpoint(launch.rdzv_endpoint or "")
        cmd += [
            f"--nnodes={launch.nnodes}",
            f"--node-rank={launch.node_rank}",
            f"--master-addr={host}",
            f"--master-port={port}",
        ]
    cmd += ["-m", "gpuperf.measure.collective_worker", "--coll", coll]
    cmd += ["--sizes", ",".join(map(str, sizes)), "--device", launch.device, "--out", out]
    for key, value in kw.items():
        if value is not None:
            cmd += [f"--{key.replace('_', '-')}", str(value)]
    return cmd


def _read_rows(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, []
    return data.get("env", {}), data.get("rows", [])


def run_collective(
    coll: str,
    sizes: list[int],
    launch: Launch,
    *,
    dtype: str = "bf16",
    warmup_ms: float | None = None,
    rep_ms: float | None = None,
    timeout_s: float | None = None,
    on_row: OnRow | None = None,
    extra_env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run `coll` at each size over launch.world ranks; (env, rows) as rank 0 wrote them.

    on_row(env, row) is called as each size completes (for progress and incremental saving).
    Raises CollectiveTimeout (rows done so far are passed to on_row before) or WorkersFailed.
    """
    check_launch(coll, launch)
    if launch.device == "cpu":  # every rank is a process holding an input and an output buffer
        from gpuperf.measure.env import check_cpu_ranks, check_host_memory

        check_cpu_ranks(launch.nproc)
        if sizes:
            check_host_memory(2 * max(sizes) * launch.nproc, f"{coll} of {max(sizes):,} bytes")
    with tempfile.TemporaryDirectory(prefix="gpuperf-coll-") as tmp:
        out, log = Path(tmp) / "result.json", Path(tmp) / "workers.log"
        cmd = torchrun_command(
            coll, sizes, launch, str(out), dtype=dtype, warmup_ms=warmup_ms, rep_ms=rep_ms
        )
        seen = 0

        def poll() -> None:
            nonlocal seen
            seen = _report(out, seen, on_row)

        try:
            code = run_workers(cmd, child_env(extra_env), log, timeout_s, poll, remove=Path(tmp))
        except WorkersTimedOut as exc:
            poll()
            at = f" at {sizes[seen]} B" if seen < len(sizes) else ""
            raise CollectiveTimeout(
                f"{coll} timed out after {timeout_s:g} s{at} ({seen} of "
                f"{len(sizes)} sizes done); killed {exc.killed} processes"
            ) from None
        _report(out, seen, on_row)
        env, rows = _read_rows(out)
        if code != 0:
            raise WorkersFailed(f"{coll} workers failed (exit {code}): {last_error(log)}")
        if launch.node_rank == 0 and len(rows) != len(sizes):
            raise WorkersFailed(f"{coll}: {len(rows)} of {len(sizes)} sizes reported")
        return env, rows


def _report(out: Path, seen: int, on_row: OnRow | None) -> int:
    env, rows = _read_rows(out)
    for row in rows[seen:]:
        if on_row is not None:
            on_row(env, row)
    return max(seen, len(rows))
