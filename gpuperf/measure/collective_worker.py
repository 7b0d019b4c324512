"""One rank of a collective benchmark; run under torchrun by gpuperf.measure.collectives.

For each size, like nccl-tests: fill the buffers with a pattern whose result is known exactly,
run once and count wrong elements (#wrong, summed over ranks), agree on iteration counts (the
slowest rank's estimate), warm up, barrier, then one timed call per iteration (CUDA events on GPUs,
perf_counter on CPUs). The reported time is the slowest rank's median (all_reduce MAX).
Rank 0 rewrites the JSON result file after every size, so nothing done is lost.

python -m torch.distributed.run --nproc-per-node 2 -m gpuperf.measure.collective_worker \\
    --coll allreduce --sizes 1024,1048576 --device cpu --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from gpuperf.measure.timing import Budget, iterations, time_fn

COLLS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv")

# nccl-tests (doc/PERFORMANCE.md): busbw = algbw x factor(n).
BUS_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "sendrecv": lambda n: 1.0,
}


def element_counts(coll: str, nbytes: int, elem: int, n: int) -> tuple[int, int]:
    """(elements per rank buffer, bytes as nccl-tests counts them) for a requested size.

    allgather/reducescatter sizes are the total (count x n); alltoall splits the per-rank buffer
    into n chunks. As nccl-tests does, each rank's chunk is rounded down to a multiple of 16 bytes
    (`& -(16/eltSize)`), so every rank's part of the buffer starts 16-byte aligned: NCCL runs
    misaligned chunks far slower (0.4-0.9x on 3 H200s, benchmarks/results). At least one element
    per chunk.
    """
    count = max(1, nbytes // elem)
    if coll in ("allgather", "reducescatter", "alltoall"):
        chunk, align = count // n, max(1, 16 // elem)
        if chunk >= align:
            chunk -= chunk % align
        count = max(1, chunk) * n
    if coll == "allgather":
        return count // n, count * elem  # input per rank, total output bytes
    return count, count * elem


def _pattern(torch: Any, count: int, dt: Any, dev: str) -> Any:
    """0, 1, .., 6, 0, 1, ..: small integers, exact in every dtype and in sums over 8 ranks.

    Built by repeating a short tensor so a 4 GiB buffer needs no 8-byte index tensor beside it.
    """
    return torch.arange(7, dtype=dt, device=dev).repeat(count // 7 + 1)[:count]


def _setup(torch: Any, dist: Any, coll: str, count: int, n: int, rank: int, dt: Any, dev: str):
    """Buffers, the call to time, the result buffer, and the result one call must give."""
    chunk = torch.arange(n, dtype=dt, device=dev)[:, None]  # chunk index, as a column
    if coll == "allreduce":
        x = _pattern(torch, count, dt, dev) + rank
        expect = _pattern(torch, count, dt, dev) * n + n * (n - 1) // 2
        return (lambda: dist.all_reduce(x)), (lambda: x), expect
    if coll == "allgather":
        x = _pattern(torch, count, dt, dev) + rank
        out = torch.empty(count * n, dtype=dt, device=dev)
        expect = (_pattern(torch, count, dt, dev)[None, :] + chunk).reshape(-1)
        return (lambda: dist.all_gather_into_tensor(out, x)), (lambda: out), expect
    per = count // n
    if coll == "reducescatter":  # rank r sends chunk c = p + c + r; rank c gets the sum
        x = (_pattern(torch, per, dt, dev)[None, :] + chunk + rank).reshape(-1)
        out = torch.empty(per, dtype=dt, device=dev)
        expect = (_pattern(torch, per, dt, dev) + rank) * n + n * (n - 1) // 2
        return (lambda: dist.reduce_scatter_tensor(out, x)), (lambda: out), expect
    if coll == "alltoall":  # rank r sends chunk c = p + 2c + r to rank c
        x = (_pattern(torch, per, dt, dev)[None, :] + 2 * chunk + rank).reshape(-1)
        out = torch.empty_like(x)
        expect = (_pattern(torch, per, dt, dev)[None, :] + 2 * rank + chunk).reshape(-1)
        return (lambda: dist.all_to_all_single(out, x)), (lambda: out), expect
    if coll == "broadcast":
        x = _pattern(torch, count, dt, dev) + (1 if rank == 0 else -1)
        expect = _pattern(torch, count, dt, dev) + 1
        return (lambda: dist.broadcast(x, src=0)), (lambda: x), expect
    # sendrecv: send to the next rank, receive from the previous one (a ring step).
    send = _pattern(torch, count, dt, dev) + rank
    recv = torch.empty_like(send)
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    expect = _pattern(torch, count, dt, dev) + prv

    def sendrecv() -> None:
        ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()

    return sendrecv, (lambda: recv), expect


def measure_size(coll: str, nbytes: int, dtype: str, dev: str, budget: Budget) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from gpuperf.measure.kernels import torch_dtype

    n, rank = dist.get_world_size(), dist.get_rank()
    dt = torch_dtype(dtype)
    elem = torch.tensor([], dtype=dt).element_size()
    count, size_bytes = element_counts(coll, nbytes, elem, n)
    fn, result, expect = _setup(torch, dist, coll, count, n, rank, dt, dev)

    def sync() -> None:
        if dev.startswith("cuda"):
            torch.cuda.synchronize(dev)

    fn()
    sync()
    wrong = torch.tensor([int((result() != expect).sum().item())], device=dev)
    del expect
    dist.all_reduce(wrong)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    sync()
    est = torch.tensor([(time.perf_counter() - t0) / 3], dtype=torch.float64, device=dev)
    dist.all_reduce(est, op=dist.ReduceOp.MAX)  # every rank must run the same number of calls
    per = float(est.item())
    n_warm = iterations(budget.warmup_ms, per, 1, budget.max_reps)
    n_rep = iterations(budget.rep_ms, per, budget.min_reps, budget.max_reps)
    for _ in range(n_warm):
        fn()
    sync()
    dist.barrier()
    timing = time_fn(fn, dev, Budget(flush_l2=False, graphs=False), counts=(0, n_rep))
    stats = torch.tensor([timing.median_s, timing.p10_s, timing.p90_s], dtype=torch.float64)
    stats = stats.to(dev)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)  # the slowest rank sets the time
    med, p10, p90 = (float(v) for v in stats.tolist())
    algbw = size_bytes / med / 1e9
    return {
        "coll": coll,
        "requested_bytes": nbytes,
        "bytes": size_bytes,
        "count": count,
        "ranks": n,
        "dtype": dtype,
        "measured_ms": med * 1e3,
        "p10_ms": p10 * 1e3,
        "p90_ms": p90 * 1e3,
        "n": timing.n,
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * BUS_FACTOR[coll](n),
        "wrong": int(wrong.item()),
        "method": timing.method + ", slowest rank's median",
    }


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the launcher dies, so a killed run leaves no stray ranks."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            import signal

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PDEATHSIG
        except Exception:
            pass


def _write(path: str, rows: list[dict[str, Any]], env: dict[str, Any]) -> None:
    from gpuperf.fileio import write_text

    write_text(path, json.dumps({"env": env, "rows": rows}))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--coll", choices=COLLS, required=True)
    p.add_argument("--sizes", required=True, help="comma list of byte sizes")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--out", required=True)
    p.add_argument("--warmup-ms", type=float, default=10.0)
    p.add_argument("--rep-ms", type=float, default=50.0)
    p.add_argument("--max-reps", type=int, default=200)
    a = p.parse_args(argv)
    _die_with_parent()

    import torch
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    if a.device == "cuda":
        torch.cuda.set_device(local)
        dev = f"cuda:{local}"
        dist.init_process_group("nccl", device_id=torch.device(dev))
    else:
        dev = "cpu"
        dist.init_process_group("gloo")
    rank = dist.get_rank()
    if os.environ.get("GPUPERF_TEST_HANG_RANK") == str(rank):  # test hook: a rank that hangs
        time.sleep(3600)
    env: dict[str, Any] = {}
    if rank == 0:
        from gpuperf.measure.env import environment

        env = environment(dev)
        env["world_size"] = dist.get_world_size()
        env["backend"] = dist.get_backend()
    budget = Budget(warmup_ms=a.warmup_ms, rep_ms=a.rep_ms, max_reps=a.max_reps)
    rows: list[dict[str, Any]] = []
    for nbytes in (int(s) for s in a.sizes.split(",")):
        row = measure_size(a.coll, nbytes, a.dtype, dev, budget)
        if rank == 0:
            rows.append(row)
            _write(a.out, rows, env)
    dist.barrier()
    from gpuperf.measure.launch import worker_exit

    worker_exit()


if __name__ == "__main__":
    sys.exit(main())
