"""NCCL collectives on one multi-GPU node, like nccl-tests. Run from the repo root:

    python3 benchmarks/device/run_collectives.py OUT_DIR [--nproc 2,4] [--max-bytes 4G]

For each rank count and each of allreduce, allgather, reducescatter, alltoall, broadcast and
sendrecv: sizes 1 KiB .. 4 GiB (x4) through torchrun with the gpuperf worker (#wrong check,
slowest rank's median, algbw and busbw with nccl-tests' factors). Writes
OUT_DIR/coll_<name>_<n>gpu.json as each finishes (format: gpuperf/measure/results.py), with the
prediction of gpuperf.perfmodel.comm beside each row. NCCL_NVLS_ENABLE=0 unless set.
Budget: under 5 minutes on 2 or 4 H200s (each launch costs ~10 s of NCCL start-up).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuperf.errors import GpuperfError  # noqa: E402
from gpuperf.measure import coll_report  # noqa: E402
from gpuperf.measure.collectives import Launch, run_collective  # noqa: E402
from gpuperf.measure.results import ResultsFile  # noqa: E402
from gpuperf.units import parse_size, parse_sweep  # noqa: E402

COLLS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--nproc", default=None, help="comma list of rank counts (default: all GPUs)")
    p.add_argument("--colls", default=",".join(COLLS))
    p.add_argument("--max-bytes", default="4G")
    p.add_argument("--rep-ms", type=float, default=30.0)
    p.add_argument("--warmup-ms", type=float, default=5.0)
    p.add_argument("--timeout", type=float, default=150.0, help="seconds per launch")
    p.add_argument("--device", default="cuda", help="cpu: a gloo smoke test")
    a = p.parse_args()
    import torch

    have = torch.cuda.device_count() if a.device == "cuda" else 2
    nprocs = [int(x) for x in a.nproc.split(",")] if a.nproc else [have]
    if a.device == "cuda" and (have < 2 or max(nprocs) > have):
        print(f"needs {max(nprocs, default=2)} GPUs, {have} present", file=sys.stderr)
        return 3
    sizes = parse_sweep(f"1K:{parse_size(a.max_bytes)}:x4", "bytes")
    a.out_dir.mkdir(parents=True, exist_ok=True)
    spec = None
    if a.device == "cuda":
        try:
            from gpuperf.hardware.detect import detect_gpu

            spec = detect_gpu(0)
        except Exception as exc:
            print(f"(no prediction: {exc})")
    start = time.monotonic()
    print(
        f"{'coll':14s} {'ranks':>5s} {'size (B)':>12s} {'time (us)':>10s} {'busbw (GB/s)':>12s} "
        f"{'pred (us)':>10s} {'#wrong':>6s}",
        flush=True,
    )
    failures = 0
    for n in nprocs:
        for coll in a.colls.split(","):
            warnings: list[str] = []
            predict = coll_report.predictor(spec, None, warnings)
            path = a.out_dir / f"coll_{coll}_{n}gpu.json"
            saver: list[ResultsFile] = []

            def on_row(env, raw, coll=coll, n=n, path=path, saver=saver, predict=predict):
                row = coll_report.finish_row(raw, predict)
                if not saver:
                    saver.append(ResultsFile(path, env, coll))
                saver[0].add(row)
                pred = "-" if row["time_us"] is None else f"{row['time_us']:.1f}"
                print(
                    f"{coll:14s} {n:5d} {row['bytes']:12d} {row['measured_us']:10.1f} "
                    f"{row['busbw_gbps']:12.2f} {pred:>10s} {row['wrong']:6d}",
                    flush=True,
                )

            try:
                run_collective(
                    coll,
                    sizes,
                    Launch(nproc=n, device=a.device),
                    warmup_ms=a.warmup_ms,
                    rep_ms=a.rep_ms,
                    timeout_s=a.timeout,
                    on_row=on_row,
                )
            except GpuperfError as exc:
                failures += 1
                print(f"{coll} x{n}: FAILED: {exc}", flush=True)
    print(f"total {time.monotonic() - start:.0f} s, {failures} failed launches; in {a.out_dir}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
