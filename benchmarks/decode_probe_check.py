"""Eager decode steps of seven Hugging Face models (benchmarks/device/sdpa_decode_probe.py, files
sdpa_decode_probe.json) beside gpuperf: steps over kv lengths the process had not met
(`--kv-lengths new`: cuDNN plans each) and over lengths it had (`--kv-lengths seen`), each with
the profile's host and with the host the run measured (its cuDNN plan time, and its tiny-kernel
launch costs over the profile host's). Nothing here is fitted.

    .venv/bin/python benchmarks/decode_probe_check.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from gpuperf.api import predict
from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel.accuracy import launch_host, on_e2e_host
from gpuperf.workloads.config import from_hf_dict

RESULTS = Path(__file__).parent / "results"
GPUS = {"h100-sxm5-80gb": "h100", "h200-sxm-141gb": "h200"}


def err(pred: float, real: float) -> str:
    return f"{100 * (pred / real - 1):+5.0f}%"


def main() -> None:
    for folder, name in GPUS.items():
        path = RESULTS / folder / "sdpa_decode_probe.json"
        if not path.exists():
            continue
        data = json.loads(path.read_text())
        gpu = load_gpu(name)
        launch_us, plan = launch_host(data["launch"])
        here = on_e2e_host(gpu, launch_us, plan)
        ref = gpu.params.host_attn_plan_s * 1e3
        print(f"{folder} ({data['env'].get('cpu', '?')}): this host's cuDNN plan "
              f"{plan * 1e3:.1f} ms (profile {ref:.1f} ms)")  # fmt: skip
        print(f"  {'model':15s} {'kv lengths':10s} {'measured':>9s} {'profile host':>20s} "
              f"{'its host':>20s}")  # fmt: skip
        rows = {"new": [], "seen": []}
        for m in data["models"]:
            if "error" in m:
                continue
            cfg = from_hf_dict(m["config"], name=m["model"])
            for kv, key in (("new", "new_lengths_step_ms"), ("seen", "seen_lengths_step_ms")):
                real = statistics.median(m[key])
                kw = {"mode": "decode", "batch": 1, "ctx": m["ctx"], "impl": "eager",
                      "kv_lengths": kv}  # fmt: skip
                p = predict(cfg, gpu=gpu, **kw).total_ms
                h = predict(cfg, gpu=here, **kw).total_ms
                rows[kv].append((abs(p / real - 1), abs(h / real - 1)))
                print(f"  {m['model']:15s} {kv:10s} {real:7.1f} ms {p:7.1f} ms {err(p, real)} "
                      f"{h:11.1f} ms {err(h, real)}")  # fmt: skip
        for kv, r in rows.items():
            print(f"  median |error|, {kv} lengths: profile host "
                  f"{100 * statistics.median(x[0] for x in r):.0f}%, its host "
                  f"{100 * statistics.median(x[1] for x in r):.0f}%")  # fmt: skip


if __name__ == "__main__":
    main()
