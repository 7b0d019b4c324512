"""Fit the one parameter the multi-GPU runs calibrate, comm_overlap_cost (gpuperf.step.cost), on
the calibration run alone, and print every other multi-GPU run as held out.

    .venv/bin/python benchmarks/fit_multigpu.py [--write]

Calibration: PyTorch DDP training of Llama-3-8B on 2 H200s (validate_multigpu_2gpu.json and its
repeat). Everything else (DDP and FSDP2 of two sizes on 2 and 4 GPUs, tensor parallelism) is held
out. --write puts the value in the H200 profile's [model.extra].
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpuperf.hardware.loader import load_gpu  # noqa: E402
from gpuperf.perfmodel.accuracy import is_multigpu_calibration, load_multigpu  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "h200-sxm-141gb"
PROFILE = ROOT / "gpuperf" / "hardware" / "profiles" / "h200-sxm-141gb.toml"


def predict(run, gpu) -> float:  # noqa: ANN001
    from gpuperf.perfmodel.accuracy import predict_multigpu

    return predict_multigpu(run, gpu).total_ms


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    runs = load_multigpu(sorted(RESULTS.glob("validate_multigpu_*.json")))
    calib = [r for r in runs if is_multigpu_calibration(r)]
    base = load_gpu("h200")

    def gpu_with(k: float):  # noqa: ANN202
        extra = {**base.params.extra, "comm_overlap_cost": k}
        return dataclasses.replace(base, params=dataclasses.replace(base.params, extra=extra))

    def loss(k: float) -> float:
        g = gpu_with(k)
        return statistics.mean(predict(r, g) / r.measured_ms - 1 for r in calib)

    lo, hi = 0.0, 1.0
    for _ in range(40):  # the step grows with k: bisect for a zero mean error
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if loss(mid) < 0 else (lo, mid)
    k = round((lo + hi) / 2, 3)
    g = gpu_with(k)
    print(f"comm_overlap_cost = {k} (from {len(calib)} calibration run(s))")
    for r in runs:
        p = predict(r, g)
        split = "calibration" if r in calib else "held-out"
        print(f"  {split:11s} {r.label:55s} {r.measured_ms:9.2f} ms  predicted {p:9.2f} "
              f"({100 * (p / r.measured_ms - 1):+.1f}%)")  # fmt: skip
    if a.write:
        text = PROFILE.read_text()
        line = (f"comm_overlap_cost = {k}  # source: calibrated on DDP, Llama-3-8B, 2 GPUs "
                "(benchmarks/fit_multigpu.py)")  # fmt: skip
        lines = [ln for ln in text.splitlines() if not ln.startswith("comm_overlap_cost")]
        at = lines.index("[model.extra]") + 1
        lines.insert(at, line)
        PROFILE.write_text("\n".join(lines) + "\n")
        print(f"written to {PROFILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
