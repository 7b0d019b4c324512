"""Where a Hugging Face continuous-batching step spends its time: 64 requests of 512 tokens
through generate_batch under torch.profiler (CPU and CUDA), for random-weight models (by
default a Llama-3-8B and a Llama-3.2-1B; any preset, or qwen3-8b and phi-3-mini as e2e_hf.py
builds them). Writes the top GPU kernels and host ops, per step, and the GPU's busy time.

    python3 benchmarks/device/serve_hf_profile.py OUT.json [--n N] [--new T] [MODEL ...]
    python3 benchmarks/device/serve_hf_profile.py OUT.json --n 16 --new 128 phi-3-mini qwen3-8b
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuperf.measure.serve_hf import _model  # noqa: E402

PRESETS = Path(__file__).resolve().parents[2] / "gpuperf" / "workloads" / "presets"


def _config(name: str) -> dict:
    """A preset's config, or one e2e_hf.py builds (qwen3-8b, phi-3-mini: no preset of theirs)."""
    path = PRESETS / f"{name}.json"
    if path.exists():
        return json.loads(path.read_text())
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from e2e_hf import load_config

    return load_config(name)


def warmed(name: str, n: int, new: int, torch):  # noqa: ANN001, ANN201
    """`name`'s random-weight model on the GPU, n prompts of 512 random tokens, the generation
    and batching configs (2,048-token budget, 512 blocks of 256), after one warm-up batch."""
    from transformers import ContinuousBatchingConfig, GenerationConfig

    cfg = _config(name)
    model = _model(cfg, "bf16", torch)
    rng = random.Random(0)
    prompts = [[rng.randrange(cfg["vocab_size"]) for _ in range(512)] for _ in range(n)]
    cbc = ContinuousBatchingConfig(
        block_size=256,
        num_blocks=512,
        max_batch_tokens=2048,
        allow_block_sharing=False,
        scheduler_type="fifo",
    )
    gc = GenerationConfig(max_new_tokens=new, do_sample=False, eos_token_id=-1)
    model.generate_batch(inputs=prompts[:4], generation_config=gc,
                         continuous_batching_config=cbc, progress_bar=False)  # fmt: skip
    torch.cuda.synchronize()
    return model, prompts, gc, cbc


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from gpuperf.measure.env import environment

    args = sys.argv[2:]
    n, new = 64, 32
    while args[:1] in (["--n"], ["--new"]):
        flag, value, *args = args
        n, new = (int(value), new) if flag == "--n" else (n, int(value))
    import transformers

    env = {**environment("cuda"), "transformers": transformers.__version__}
    out = {"env": env, "requests": n, "input_tokens": 512, "new_tokens": new,
           "runs": []}  # fmt: skip
    for name in args or ("llama3-8b", "llama3.2-1b"):
        model, prompts, gc, cbc = warmed(name, n, new, torch)
        t0 = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            res = model.generate_batch(inputs=prompts, generation_config=gc,
                                       continuous_batching_config=cbc, record_timestamps=True,
                                       progress_bar=False)  # fmt: skip
            torch.cuda.synchronize()
        wall = time.perf_counter() - t0
        stamps = sorted(t for r in res.values() for t in (r.timestamps or []))
        steps = 1 + sum(1 for a, b in zip(stamps, stamps[1:], strict=False) if b - a > 0.003)
        gpu, cpu = {}, {}
        for e in prof.key_averages():
            dev = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
            if dev > 0 and e.self_cpu_time_total == 0:
                gpu[e.key] = (e.count, dev)
            else:
                cpu[e.key] = (e.count, e.self_cpu_time_total)
        busy = sum(t for _, t in gpu.values())  # kernels, memcpy and memset: the GPU's busy us
        top_gpu = sorted(gpu.items(), key=lambda kv: -kv[1][1])[:25]
        top_cpu = sorted(cpu.items(), key=lambda kv: -kv[1][1])[:30]
        run = {
            "model": name, "wall_s": wall, "steps": steps, "gpu_busy_us": busy,
            "gpu_top": [{"name": k[:160], "count": c, "us": t} for k, (c, t) in top_gpu],
            "cpu_top": [{"name": k[:160], "count": c, "self_us": t} for k, (c, t) in top_cpu],
        }  # fmt: skip
        out["runs"].append(run)
        Path(sys.argv[1]).write_text(json.dumps(out))
        print(name, f"wall {wall:.2f} s, ~{steps} steps, GPU busy {busy / 1e6:.2f} s", flush=True)
        for g in run["gpu_top"][:12]:
            print("  GPU", round(g["us"] / steps), "us/step", g["count"], g["name"][:90])
        for c in run["cpu_top"][:12]:
            print("  CPU", round(c["self_us"] / steps), "us/step", c["count"], c["name"][:90])
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
