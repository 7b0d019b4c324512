"""Host cost of one Hugging Face MLP block, dense or MoE, per kernel it launches.

    python3 benchmarks/device/host_block_probe.py OUT_DIR

For a Llama-3-8B dense MLP and the MoE blocks of Mixtral-, Qwen3-MoE-, Qwen1.5-MoE- and
DeepSeek-V3-shaped models (one decoder layer each, random bf16 weights), `layer.mlp(x)` is called
back to back without synchronizing (the host's time per call: Python, the ops it dispatches,
the launches) at 1, 8 and 2048 tokens, its GPU time taken with events, its kernels counted with
torch.profiler. Writes host_block_probe.json. The MoE code's host time per kernel over the dense
MLP's is what gpuperf charges an eager MoE layer's kernels beyond host_dispatch_s: it belongs to
transformers' Python, not to the GPU, and is measured here rather than fitted to a model run.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import e2e_hf  # noqa: E402

BLOCKS = ("llama3-8b", "mixtral-4l", "qwen3-moe-8l", "qwen1.5-moe-8l", "deepseek-v3-3l")


def probe(name: str, torch, tiny: bool = False) -> list[dict]:  # noqa: ANN001
    cfg = e2e_hf.load_config(name, tiny)
    cfg["num_hidden_layers"] = 1
    if "first_k_dense_replace" in cfg:
        cfg["first_k_dense_replace"] = 0
    model = e2e_hf.build_model(cfg)
    model.eval()
    mlp = model.model.layers[0].mlp
    rows = []
    for tokens in (1, 8, 2048):
        x = torch.randn(1, tokens, cfg["hidden_size"], device=e2e_hf.DEV, dtype=torch.bfloat16)
        with torch.no_grad():
            for _ in range(10):
                mlp(x)
            e2e_hf.sync()
            n = 50 if tokens > 8 else 200
            hosts = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(n):
                    mlp(x)
                hosts.append((time.perf_counter() - t0) / n * 1e6)
                e2e_hf.sync()
            gpu = e2e_hf.time_iters(lambda x=x, m=mlp: m(x), 10, warmup=2)
            prof = e2e_hf.kernel_profile(lambda x=x, m=mlp: m(x))
        row = {"block": name, "tokens": tokens, "host_us": statistics.median(hosts),
               "gpu_us": 1e3 * statistics.median(gpu), "kernels": prof["kernels"],
               "host_top": prof["host_top"][:15]}  # fmt: skip
        row["host_us_per_kernel"] = row["host_us"] / max(1, row["kernels"])
        rows.append(row)
        print(f"{name:16s} T={tokens:5d} host {row['host_us']:8.1f} us  gpu {row['gpu_us']:8.1f} us"
              f"  {row['kernels']:3d} kernels  {row['host_us_per_kernel']:6.2f} us/kernel",
              flush=True)  # fmt: skip
    del model, mlp
    if e2e_hf.DEV == "cuda":
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    import torch

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    tiny = "--cpu" in sys.argv  # a smoke test of this script on tiny shapes
    if tiny:
        e2e_hf.DEV = "cpu"
    result = {"env": e2e_hf.env_stamp(), "rows": []}
    for name in BLOCKS:
        result["rows"] += probe(name, torch, tiny)
        (out / "host_block_probe.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
