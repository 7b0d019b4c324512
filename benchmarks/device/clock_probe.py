"""SM clock and power under sustained tensor-core load: evidence for sustained_clock_frac.

    python3 benchmarks/device/clock_probe.py OUT_DIR [--seconds 4]

Runs back-to-back bf16 8192^3 GEMMs for a few seconds while a thread samples the SM clock and power
through NVML every 20 ms, and times each GEMM with CUDA events. Writes clock_probe.json: samples,
the first and last GEMM times and the achieved TFLOP/s over the run. Reads clocks only; changes
nothing on the GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seconds", type=float, default=4.0)
    a = ap.parse_args()
    import pynvml
    import torch

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    samples: list[dict] = []
    stop = threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        while not stop.is_set():
            samples.append(
                {
                    "t_s": time.perf_counter() - t0,
                    "sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                    "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
                }
            )
            time.sleep(0.02)

    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        x @ w
    torch.cuda.synchronize()
    idle = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
    th = threading.Thread(target=sample, daemon=True)
    th.start()
    times = []
    end = time.perf_counter() + a.seconds
    while time.perf_counter() < end:
        evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
               for _ in range(20)]  # fmt: skip
        for s, e in evs:
            s.record()
            x @ w
            e.record()
        torch.cuda.synchronize()
        times += [s.elapsed_time(e) for s, e in evs]
    stop.set()
    th.join()
    flops = 2 * n**3
    first, last = statistics.median(times[:10]), statistics.median(times[-50:])
    res = {
        "gemm": "bf16 8192^3",
        "sm_clock_before_mhz": idle,
        "first10_ms": first,
        "last50_ms": last,
        "first_tflops": flops / first / 1e9,
        "last_tflops": flops / last / 1e9,
        "slowdown_last_vs_first": last / first,
        "sm_mhz_median_last_second": statistics.median(
            s["sm_mhz"] for s in samples if s["t_s"] > a.seconds - 1
        ),
        "max_sm_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
        "samples": samples,
        "gemm_ms": times,
    }
    a.out_dir.mkdir(parents=True, exist_ok=True)
    (a.out_dir / "clock_probe.json").write_text(json.dumps(res, indent=1))
    print({k: v for k, v in res.items() if k not in ("samples", "gemm_ms")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
