"""The host's side of an eager multi-GPU step, one mechanism at a time (issue 12: TP eager runs
are host-bound). Run under torchrun, one process a GPU:

    torchrun --nproc-per-node N benchmarks/device/host_probe_multigpu.py OUT.json [--tag T]

Each rank times, with the host clock and no synchronisation inside the timed loop, how long
the host takes to issue: a tiny elementwise kernel (the launch path), a Python loop (the CPU
itself), a plain `dist.all_reduce` of 8 KiB and of 16 MiB (the latter behind a busy GPU, as
in a prefill), a functional all-reduce plus its wait, and a linear layer on a DTensor weight
the way a column-parallel tp_plan runs it (input from_local, output to_local). Rank 0 writes
every rank's numbers (microseconds per call; the median of 5 repeats).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

CUDA = torch.cuda.is_available()


def _sync() -> None:
    if CUDA:
        torch.cuda.synchronize()


def per_call_us(fn, n: int, reps: int = 5) -> float:  # noqa: ANN001
    out = []
    for _ in range(reps):
        _sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        out.append((time.perf_counter() - t0) / n * 1e6)
        _sync()
    return statistics.median(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--tag", default="")
    a = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local) if CUDA else torch.device("cpu")  # cpu: a smoke test
    if CUDA:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if CUDA else "gloo", device_id=dev if CUDA else None)
    rank, world = dist.get_rank(), dist.get_world_size()
    res: dict[str, float] = {}

    x = torch.zeros(1, device=dev)
    res["launch_add_us"] = per_call_us(lambda: x.add_(1), 2000)

    def py() -> None:
        s = 0
        for i in range(2000):
            s += i

    res["python_loop_2000_us"] = per_call_us(py, 200)
    small = torch.ones(4096, dtype=torch.bfloat16, device=dev)
    res["allreduce_8k_us"] = per_call_us(lambda: dist.all_reduce(small), 300)
    ar = torch.ops._c10d_functional.all_reduce
    wait = torch.ops._c10d_functional.wait_tensor
    name = dist.group.WORLD.group_name
    res["functional_allreduce_8k_us"] = per_call_us(lambda: wait(ar(small, "sum", name)), 300)
    # 16 MiB all-reduces behind a GPU kept busy by matmuls (the host runs ahead, as in prefill)
    rows, h = (2048, 4096) if CUDA else (8, 64)
    big = torch.ones(rows, h, dtype=torch.bfloat16, device=dev)
    w = torch.randn(h, h, dtype=torch.bfloat16, device=dev)

    def busy_then(n: int, coll: bool) -> float:
        _sync()
        dist.barrier()
        for _ in range(60 if CUDA else 1):  # ~30 ms of GPU work queued first
            torch.mm(big, w)
        t0 = time.perf_counter()
        for _ in range(n):
            y = torch.mm(big, w)
            if coll:
                dist.all_reduce(y)
        dt = (time.perf_counter() - t0) / n * 1e6
        _sync()
        return dt

    busy_then(8, True)
    res["busy_mm_us"] = statistics.median(busy_then(32, False) for _ in range(3))
    res["busy_mm_allreduce16m_us"] = statistics.median(busy_then(32, True) for _ in range(3))
    # a column-parallel linear on a DTensor weight, as HF's tp_plan runs it
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

    mesh = init_device_mesh(dev.type, (world,))
    wd = distribute_tensor(torch.randn(4096, 4096, dtype=torch.bfloat16, device=dev), mesh,
                           [Shard(0)])  # fmt: skip
    inp = torch.randn(1, 1, 4096, dtype=torch.bfloat16, device=dev)

    def dlinear() -> None:
        xd = DTensor.from_local(inp, mesh, [Replicate()], run_check=False)
        torch.nn.functional.linear(xd, wd).to_local()

    res["dtensor_colwise_linear_us"] = per_call_us(dlinear, 200)
    wl = wd.to_local()
    res["plain_linear_us"] = per_call_us(lambda: torch.nn.functional.linear(inp, wl), 200)
    every: list = [None] * world
    dist.all_gather_object(every, res)
    if rank == 0:
        from gpuperf.measure.env import environment

        data = json.loads(a.out.read_text()) if a.out.exists() else {"env": environment(dev.type),
                                                                      "runs": []}  # fmt: skip
        data["runs"].append({"world": world, "tag": a.tag, "ranks": every,
                             "env_vars": {k: v for k, v in os.environ.items()
                                          if k.startswith(("NCCL_", "TORCH_"))}})  # fmt: skip
        a.out.write_text(json.dumps(data, indent=1))
        keys = list(res)
        print(f"world {world} {a.tag}: " + ", ".join(
            f"{k} {statistics.median(r[k] for r in every):.1f}"
            f" (max {max(r[k] for r in every):.1f})" for k in keys), flush=True)  # fmt: skip
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    raise SystemExit(main())
