"""Is Hugging Face continuous batching's per-step host time (the hf profile's eager_step, fitted
at 3,800 dispatches) cuDNN planning SDPA for a shape it has not met? Paged|sdpa attention meets
a new total cache length every step, and cuDNN builds a plan for every new shape.

Per model (random weights, 64 and 16 requests of 512 tokens, 64 new tokens, the serve_hf.py
cache and budget) four runs in one process: the first (cuDNN on, every step's shape new), the
same again (same prompts, so the same shapes, every one met), with cuDNN's SDPA off (new shapes,
no plans), and again with cuDNN on. Each run: wall, TTFT and TPOT percentiles; plus the host's plan
time (gpuperf's calibration probe) and what the SDPA call alone costs at a masked, gathered
shape the first and the second time.

    python3 benchmarks/device/serve_hf_cudnn_probe.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpuperf.measure.serve_hf import metrics, run  # noqa: E402

PRESETS = Path(__file__).resolve().parents[2] / "gpuperf" / "workloads" / "presets"
CB = {"block_size": 256, "num_blocks": 512, "max_batch_tokens": 2048}


def _masked_sdpa(torch) -> dict:  # noqa: ANN001
    """One masked SDPA at a gathered decode shape (64 queries, 8 KV heads repeated to 32, a
    boolean mask), host ms at new and met key counts, and the backend PyTorch picks."""
    import torch.nn.functional as F

    rows = []
    for seen in (False, True):
        for kv in range(33001, 33001 + 6 * 64, 64):
            q = torch.randn(1, 32, 64, 128, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(1, 32, kv, 128, device="cuda", dtype=torch.bfloat16)
                    for _ in range(2))  # fmt: skip
            mask = torch.ones(1, 1, 64, kv, device="cuda", dtype=torch.bool)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            rows.append({"seen": seen, "kv": kv, "host_ms": (time.perf_counter() - t0) * 1e3})
            torch.cuda.synchronize()
    new = sorted(r["host_ms"] for r in rows if not r["seen"])
    met = sorted(r["host_ms"] for r in rows if r["seen"])
    return {"rows": rows, "new_median_ms": new[len(new) // 2], "met_median_ms": met[len(met) // 2]}


def main() -> None:
    import torch

    from gpuperf.measure.calibration import measure_attn_plan
    from gpuperf.measure.env import environment

    out: dict = {"env": environment("cuda"), "runs": []}
    out["attn_plan_ms"] = measure_attn_plan() * 1e3
    out["masked_sdpa"] = _masked_sdpa(torch)
    for name in ("llama3.2-1b", "llama3-8b"):
        cfg = json.loads((PRESETS / f"{name}.json").read_text())
        for n in (64, 16):
            spec = {"config": cfg, "requests": [[0.0, 512, 64]] * n, "cb": CB, "seed": n,
                    "label": f"{name}_n{n}_512x64"}  # fmt: skip
            for variant in ("first", "again", "cudnn_off", "cudnn_on_again"):
                torch.backends.cuda.enable_cudnn_sdp(variant != "cudnn_off")
                t0 = time.perf_counter()
                res = run(spec)
                took = time.perf_counter() - t0
                m = metrics(res["requests"])
                row = {"label": spec["label"], "variant": variant, "call_s": took, **m,
                       "requests": res["requests"]}  # fmt: skip
                out["runs"].append(row)
                print(f"{spec['label']:24s} {variant:15s} wall {m['wall_s']:.3f} s, "
                      f"TPOT p50 {m['tpot_p50_ms']:.1f} ms", flush=True)  # fmt: skip
            torch.backends.cuda.enable_cudnn_sdp(True)
    Path(sys.argv[1]).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
