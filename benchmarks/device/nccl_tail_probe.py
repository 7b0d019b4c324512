"""Does a ring all-gather or reduce-scatter lose time to a copy-only last step? A probe of the
ring copy tail (gpuperf.perfmodel.comm), run under torchrun on 2, 3 or 4 GPUs:

    NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node 2 benchmarks/device/nccl_tail_probe.py OUT.json

Times all-gather and reduce-scatter of 256 MiB and 1 GiB (the full buffer, nccl-tests' size) in
three forms: out of place (what run_collectives measures), in place (the rank's own chunk is a
view of the full buffer, so NCCL skips the copy of the local chunk), and out of place captured
in a CUDA graph. Broadcast and all-reduce are timed beside them as references. Under the tail
model, in place is as slow as out of place (the tail is the copy out of the receive buffer, not
the copy of the local chunk). Each time is the slowest rank's median of 20 CUDA-event-timed
calls after 5 warm-up calls. Rank 0 writes OUT.json with the environment.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SIZES = (256 * 2**20, 2**30)
REPS, WARM = 20, 5


def timed(fn, per: int = 1) -> float:
    """The slowest rank's median seconds of one call (of fn() / per, when fn makes `per` calls)."""
    for _ in range(WARM):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    times = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / per)
    t = torch.tensor([statistics.median(times)], dtype=torch.float64, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def graphed(fn):
    """fn captured in a CUDA graph; the replay is the timed call."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def calls(size: int, n: int, rank: int) -> dict[str, tuple]:
    elems = size // 2 // (8 * n) * (8 * n)  # each rank's chunk a multiple of 16 bytes
    full = torch.ones(elems, dtype=torch.bfloat16, device="cuda")
    part = torch.ones(elems // n, dtype=torch.bfloat16, device="cuda")
    mine = full.view(n, -1)[rank]  # this rank's chunk of the full buffer
    f = (n - 1) / n
    return {
        "allgather out-of-place": (lambda: dist.all_gather_into_tensor(full, part), f),
        "allgather in-place": (lambda: dist.all_gather_into_tensor(full, mine), f),
        "reducescatter out-of-place": (lambda: dist.reduce_scatter_tensor(part, full), f),
        "reducescatter in-place": (lambda: dist.reduce_scatter_tensor(mine, full), f),
        "allreduce": (lambda: dist.all_reduce(full), 2 * f),
        "broadcast": (lambda: dist.broadcast(full, 0), 1.0),
        "allgather out-of-place, CUDA graph": (
            lambda: graphed(lambda: dist.all_gather_into_tensor(full, part)),
            f,
        ),
    }


def main() -> None:
    out = Path(sys.argv[1])
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, n = dist.get_rank(), dist.get_world_size()
    env = None
    if rank == 0:
        from gpuperf.measure.env import environment

        env = {**environment("cuda"), "world_size": n, "nccl_env": {
            k: v for k, v in os.environ.items() if k.startswith("NCCL_")}}  # fmt: skip
        env["method"] = f"cuda events, slowest rank's median of {REPS} after {WARM} warm-up calls"
        out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    # The CUDA-graph captures go last: a capture NCCL refuses must not cost the other rows.
    for graph in (False, True):
        for size in SIZES:
            for name, (fn, factor) in calls(size, n, rank).items():
                if name.endswith("CUDA graph") != graph:
                    continue
                row = {"call": name, "bytes": size // 2 // (8 * n) * (8 * n) * 2, "ranks": n}
                try:
                    t = timed(fn() if graph else fn)  # graphs: capture once, time the replays
                    row |= {"measured_ms": t * 1e3, "busbw_gbps": row["bytes"] * factor / t / 1e9}
                except Exception as exc:
                    row["error"] = str(exc)[:300]
                rows.append(row)
                if rank == 0:
                    print(json.dumps(row), flush=True)
                    out.write_text(json.dumps({"env": env, "kind": "nccl_tail_probe",
                                               "rows": rows}, indent=1))  # fmt: skip
            torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
