"""Why does one eager decode step take 18 ms for six steps and then 42 ms (H200, Llama-2-7B,
batch 1, DynamicCache at ctx 2048, e2e_hf_run1.json)? A step-by-step record:

    python3 benchmarks/device/decode_regime_probe.py OUT.json [--model llama2-7b --batch 1]

For STEPS one-token steps on a DynamicCache (as e2e_hf.run_decode_eager), each step's
CUDA-event time, host issue time (until the forward returns, no sync), host CPU time of the thread
in that span, the caching allocator's cudaMalloc / cudaFree counts and retries, the Python GC
collections, and the cache length. Variants, each on a fresh cache: as e2e_hf does it; with the
Python GC disabled; with the allocator's memory released (torch.cuda.empty_cache) before the cache
is built. Run once more under PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (--tag) to test the
allocator.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

STEPS = 40
COUNTERS = ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_sync_all_streams")


def collections() -> int:
    return sum(s["collections"] for s in gc.get_stats())


def run(model, batch: int, ctx: int, steps: int) -> list[dict]:
    import torch
    from e2e_hf import decode_step

    step, cache = decode_step(model, batch, ctx)
    torch.cuda.synchronize()
    rows = []
    for i in range(steps):
        before = torch.cuda.memory_stats()
        gcs = collections()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0, c0 = time.perf_counter(), time.thread_time()
        a.record()
        step()
        b.record()
        t1, c1 = time.perf_counter(), time.thread_time()
        b.synchronize()
        t2 = time.perf_counter()
        after = torch.cuda.memory_stats()
        rows.append(
            {
                "step": i,
                "cache_len": cache.get_seq_length(),
                "event_ms": a.elapsed_time(b),
                "issue_ms": (t1 - t0) * 1e3,
                "issue_cpu_ms": (c1 - c0) * 1e3,
                "wall_ms": (t2 - t0) * 1e3,
                "gc_collections": collections() - gcs,
                **{k: after.get(k, 0) - before.get(k, 0) for k in COUNTERS},
                "reserved_mb": after.get("reserved_bytes.all.current", 0) / 2**20,
            }
        )
    del cache
    return rows


def summary(rows: list[dict]) -> str:
    ev = [round(r["event_ms"], 1) for r in rows]
    iss = [round(r["issue_ms"], 1) for r in rows]
    cpu = [round(r["issue_cpu_ms"], 1) for r in rows]
    mal = [r["num_device_alloc"] for r in rows]
    return f"event {ev}\n  issue {iss}\n  cpu {cpu}\n  cudaMalloc {mal}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="llama2-7b")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--tag", default="", help="label for this process's variants")
    a = ap.parse_args()
    import torch
    from e2e_hf import build_model, env_stamp, load_config

    model = build_model(load_config(a.model)).eval()
    out = {"env": env_stamp(), "kind": "decode_regime_probe", "model": a.model,
           "batch": a.batch, "ctx": a.ctx, "variants": {}}  # fmt: skip
    import os

    out["env"]["PYTORCH_CUDA_ALLOC_CONF"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")

    def go():
        return run(model, a.batch, a.ctx, a.steps)

    def emptied():
        torch.cuda.empty_cache()
        return go()

    variants = {"as e2e_hf": go, "gc disabled": lambda: _no_gc(go),
                "after empty_cache": emptied, "as e2e_hf, again": go}  # fmt: skip
    for name, fn in variants.items():
        key = f"{a.tag}{name}"
        out["variants"][key] = fn()
        print(f"{key}:\n  {summary(out['variants'][key])}", flush=True)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(out, indent=1))
    return 0


def _no_gc(fn):
    gc.disable()
    try:
        return fn()
    finally:
        gc.enable()


if __name__ == "__main__":
    sys.exit(main())
