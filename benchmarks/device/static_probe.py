"""Where the GPU time of one Hugging Face StaticCache decode step goes (Llama-3-8B, GQA).

    python3 benchmarks/device/static_probe.py OUT_DIR [--batch 8 --ctx 4096]

Profiles one eager decode step on a StaticCache (the path CUDA-graph decode replays) and one on a
DynamicCache with torch.profiler, and writes static_probe.json: the GPU kernels grouped by name
with their count and total GPU time, so the prediction's op list can be compared kernel by kernel.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def profile_step(fn) -> list[dict]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        rows.append({"kernel": e.key[:160], "count": e.count, "gpu_us": t})
    return sorted(rows, key=lambda r: -r["gpu_us"])


def wall_ms(fn, reps: int = 5) -> float:
    """Median wall time of one eager step, host and GPU together (synchronized), in ms."""
    import statistics
    import time

    import torch

    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--out-name", default="static_probe.json", help="file name in OUT_DIR")
    a = ap.parse_args()
    import torch
    from e2e_hf import build_model, decode_step, load_config
    from transformers import StaticCache

    model = build_model(load_config(a.model)).eval()
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (a.batch, a.ctx), device="cuda")
    tok = torch.randint(0, vocab, (a.batch, 1), device="cuda")
    out: dict = {"model": a.model, "batch": a.batch, "ctx": a.ctx}
    with torch.no_grad():
        static = StaticCache(config=model.config, max_cache_len=a.ctx + 16)
        model(input_ids=ids, past_key_values=static, use_cache=True, logits_to_keep=1)
        pos = torch.tensor([a.ctx], device="cuda")
        step = lambda: model(  # noqa: E731
            input_ids=tok, past_key_values=static, cache_position=pos, use_cache=True
        )
        out["static"] = profile_step(step)
        out["static_eager_wall_ms"] = wall_ms(step)
        dynamic_step, _ = decode_step(model, a.batch, a.ctx)
        out["dynamic"] = profile_step(dynamic_step)
        out["dynamic_eager_wall_ms"] = wall_ms(dynamic_step)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    (a.out_dir / a.out_name).write_text(json.dumps(out, indent=1))
    for key in ("static", "dynamic"):
        total = sum(r["gpu_us"] for r in out[key])
        kernels = sum(r["count"] for r in out[key])
        wall = out[f"{key}_eager_wall_ms"]
        print(f"{key}: {kernels} kernels, {total / 1e3:.2f} ms GPU, eager step {wall:.2f} ms wall")
        for r in out[key][:10]:
            print(f"  {r['gpu_us'] / 1e3:8.3f} ms  x{r['count']:<5d} {r['kernel'][:100]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
