"""What does a small collective cost inside a CUDA graph? A probe under torchrun on 2 or more
GPUs, for the per-call floor of collectives captured in a graph (CUDA-graph TP decode):

    NCCL_NVLS_ENABLE=0 torchrun --nproc_per_node 2 \
        benchmarks/device/graph_collective_probe.py OUT.json

For all-reduce and all-gather of 8 KiB to 16 MiB (bf16, nccl-tests' sizes) it times, per call:
- `eager_single`: one call between two CUDA events (what `gpuperf measure allreduce` times);
- `eager_loop`: 50 calls back to back from Python, the total over 50 (host-bound when small);
- `graph_loop`: the same 50 calls captured in one CUDA graph, a replay over 50 (no host at all).
Each is the slowest rank's median of 20 after 5 warm-up rounds. Rank 0 writes OUT.json.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from nccl_tail_probe import REPS, WARM, graphed, timed  # noqa: E402

SIZES = tuple(2**k for k in range(13, 25, 2))  # 8 KiB ... 8 MiB, and 16 MiB below
SIZES = (*SIZES, 2**24)
LOOP = 50


def _call(coll: str, full: torch.Tensor, part: torch.Tensor):
    if coll == "allreduce":
        return lambda: dist.all_reduce(full)
    return lambda: dist.all_gather_into_tensor(full, part)


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
        env["method"] = (f"cuda events, slowest rank's median of {REPS} after {WARM} warm-up "
                         f"rounds; loops of {LOOP} calls")  # fmt: skip
    rows: list[dict] = []
    for coll in ("allreduce", "allgather"):
        for size in SIZES:
            elems = size // 2 // (8 * n) * (8 * n)
            full = torch.ones(elems, dtype=torch.bfloat16, device="cuda")
            part = torch.ones(elems // n, dtype=torch.bfloat16, device="cuda")
            one = _call(coll, full, part)

            def loop(one=one):
                for _ in range(LOOP):
                    one()

            row = {"coll": coll, "bytes": elems * 2, "ranks": n}
            try:
                row["eager_single_ms"] = timed(one, 1) * 1e3
                row["eager_loop_ms"] = timed(loop, LOOP) * 1e3
                row["graph_loop_ms"] = timed(graphed(loop), LOOP) * 1e3
            except Exception as exc:  # noqa: BLE001 - record and go on
                row["error"] = str(exc)[:300]
            rows.append(row)
            if rank == 0:
                print(json.dumps(row), flush=True)
                from gpuperf.fileio import write_text

                write_text(out, json.dumps({"env": env, "kind": "graph_collective_probe",
                                            "rows": rows}, indent=1))  # fmt: skip
    # Graph-captured communicators are not destroyed (pytorch#115388): exit without it.
    torch.cuda.synchronize()
    os._exit(0)


if __name__ == "__main__":
    main()
