"""Our timer against triton.testing.do_bench, with the flush method as the only difference.

    python3 benchmarks/device/timer_crosscheck.py OUT_DIR

For bf16 GEMMs of 2048³, 4096³ and 8192³: three interleaved rounds of (a) gpuperf's timer flushing
L2 by a read, (b) gpuperf's timer flushing by a write (zero_, as do_bench does), (c) do_bench
(median). Writes timer_crosscheck.json. If (b) agrees with (c) and (a) is lower, the difference
between our timer and do_bench is the dirty-line write-back the write flush leaves behind.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    import torch
    from triton.testing import do_bench

    from gpuperf.measure.timing import Budget, time_fn

    out_dir = Path(sys.argv[1])
    res = []
    for n in (2048, 4096, 8192):
        a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
        fn = lambda a=a, b=b: a @ b  # noqa: E731
        runs: dict[str, list[float]] = {"read": [], "write": [], "do_bench": []}
        for _ in range(3):
            for how in ("read", "write"):
                t = time_fn(fn, "cuda", Budget(rep_ms=100, flush_by=how, graphs=False))
                runs[how].append(t.median_s * 1e3)
            runs["do_bench"].append(do_bench(fn, warmup=25, rep=100, return_mode="median"))
        med = {k: statistics.median(v) for k, v in runs.items()}
        row = {"mnk": n, "runs_ms": runs, "median_ms": med,
               "read_vs_do_bench_pct": 100 * (med["read"] / med["do_bench"] - 1),
               "write_vs_do_bench_pct": 100 * (med["write"] / med["do_bench"] - 1)}  # fmt: skip
        res.append(row)
        print(f"{n}^3: read {med['read']:.4f}  write {med['write']:.4f}  do_bench "
              f"{med['do_bench']:.4f} ms  (read {row['read_vs_do_bench_pct']:+.1f}%, write "
              f"{row['write_vs_do_bench_pct']:+.1f}%)", flush=True)  # fmt: skip
    out_dir.mkdir(parents=True, exist_ok=True)
    # An object, like every results file, so that folder scans can read it.
    (out_dir / "timer_crosscheck.json").write_text(json.dumps({"gemm": res}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
