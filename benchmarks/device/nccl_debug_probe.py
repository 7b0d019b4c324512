"""What NCCL picks for each collective (channels, algorithm, protocol), for the 2- vs 4-rank
bus-bandwidth gap of all-gather and reduce-scatter. Run under torchrun with NCCL_DEBUG=INFO and
NCCL_DEBUG_SUBSYS=INIT,TUNING,COLL; rank 0 also prints its busbw per collective:

    NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,COLL \\
        torchrun --nproc_per_node 2 benchmarks/device/nccl_debug_probe.py
"""

from __future__ import annotations

import os
import statistics

import torch
import torch.distributed as dist

SIZE = 256 * 2**20  # bytes of the full (gathered / reduced) buffer


def timed(fn, reps: int = 10) -> float:
    times = []
    for _ in range(reps + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times[2:])


def main() -> None:
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    elems = SIZE // 2
    full = torch.ones(elems, dtype=torch.bfloat16, device="cuda")
    part = torch.ones(elems // n, dtype=torch.bfloat16, device="cuda")
    calls = {
        "allreduce": (lambda: dist.all_reduce(full), 2 * (n - 1) / n),
        "allgather": (lambda: dist.all_gather_into_tensor(full, part), (n - 1) / n),
        "reducescatter": (lambda: dist.reduce_scatter_tensor(part, full), (n - 1) / n),
        "broadcast": (lambda: dist.broadcast(full, 0), 1.0),
    }
    for name, (fn, factor) in calls.items():
        t = timed(fn)
        if rank == 0:
            print(
                f"PROBE {name} n={n} {SIZE >> 20} MiB: {t * 1e3:.3f} ms, "
                f"busbw {SIZE / t * factor / 1e9:.0f} GB/s",
                flush=True,
            )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
