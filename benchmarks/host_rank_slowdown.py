"""Derive host_rank_slowdown (gpuperf.step.cost.HOST_RANK_SLOWDOWN) from the multi-process host
probe (benchmarks/device/host_probe_multigpu.py, host_probe_multigpu.json), fitted to no
whole-model run.

Each rank of an eager multi-GPU step issues its kernels alone between two collectives, and a
collective ends when the last rank reaches it: the step pays the slowest rank's host. The probe
timed, on every rank at once, a launch, a Python loop, a plain linear and a DTensor linear at 1, 2
and 4 ranks on one host. For each call and rank count, the slowest rank's time over one rank's
alone gives k = (ratio - 1) / log2(ranks); the model's k is the median of those eight.

    .venv/bin/python benchmarks/host_rank_slowdown.py
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

PROBE = (Path(__file__).resolve().parent / "results" / "h200-sxm-141gb" /
         "host_probe_multigpu.json")  # fmt: skip
CALLS = ("launch_add_us", "python_loop_2000_us", "plain_linear_us", "dtensor_colwise_linear_us")


def ratios(path: Path = PROBE) -> list[tuple[str, int, float]]:
    """(call, ranks, slowest rank's time over one rank's) for every call at 2 and more ranks of
    the probe's default runs."""
    runs = [r for r in json.loads(path.read_text())["runs"] if r["tag"] == "default"]
    alone = next(r for r in runs if r["world"] == 1)["ranks"][0]
    return [(call, r["world"], max(rank[call] for rank in r["ranks"]) / alone[call])
            for r in runs if r["world"] > 1 for call in CALLS]  # fmt: skip


def derive(path: Path = PROBE) -> float:
    """The median k over the probe's (call, ranks) pairs, to two decimals."""
    ks = [(ratio - 1) / math.log2(ranks) for _, ranks, ratio in ratios(path)]
    return round(statistics.median(ks), 2)


def main() -> None:
    print(f"{'call':28s} {'ranks':>5s} {'slowest/alone':>13s} {'k':>6s}")
    for call, ranks, ratio in ratios():
        print(f"{call:28s} {ranks:5d} {ratio:13.2f} {(ratio - 1) / math.log2(ranks):6.2f}")
    print(f"host_rank_slowdown = {derive()} (median k)")


if __name__ == "__main__":
    main()
