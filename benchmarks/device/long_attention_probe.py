"""Attention forward and backward at long sequences with few heads per GPU (held out): the shapes
tensor and context parallelism leave on each GPU of a long-sequence training run, which the
calibration sweeps (up to 16,384 tokens, 32-64 heads) never reached.

    python3 benchmarks/device/long_attention_probe.py OUT_DIR

Each shape is PyTorch's SDPA (cuDNN on Hopper) on bf16, head dim 128, batch 1:
- causal, queries = keys, 16K-128K tokens, 4, 8 or 32 heads (a whole sequence, or the diagonal
  block of a ring step);
- not causal, queries against twice as many keys (a ring step's off-diagonal blocks);
forward and backward each timed from the profiler's kernel durations (median of calls), as
train_kernels_probe.py times its SDPA rows. Writes attention_long_held.json (the sweep format,
marked held out: no fit reads it).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_kernels_probe import _row, kernel_calls, short_name  # noqa: E402

from gpuperf.perfmodel.ops import Attention  # noqa: E402

K = 1024
# (heads, kv_heads, q_len, kv_len, causal)
SHAPES = [(h, h, s * K, s * K, True) for s in (16, 32, 64, 128) for h in (4, 8, 32)]
SHAPES += [(h, h, q * K, 2 * q * K, False) for q in (8, 16, 32) for h in (4, 8)]
SHAPES += [(32, 8, 64 * K, 64 * K, True)]


def _shape(torch, shape: tuple, budget, time_fn) -> list[dict]:  # noqa: ANN001
    import torch.nn.functional as F

    H, KV, sq, skv, causal = shape
    q = torch.randn(1, H, sq, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(1, KV, skv, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)

    def fwd():  # noqa: ANN202
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=KV != H)

    out = fwd()
    go = torch.randn_like(out)

    def bwd():  # noqa: ANN202
        return torch.autograd.grad(out, (q, k, v), go, retain_graph=True)

    tag = f"h{H}/kv{KV}/q{sq}/k{skv}" + ("/causal" if causal else "")
    rows = []
    for backward, fn in ((False, fwd), (True, bwd)):
        t = time_fn(fn, "cuda", budget)
        calls = kernel_calls(torch, fn, calls=3)
        us = statistics.median(sum(u for _, u in c) for c in calls)
        op = Attention(f"sdpa_long/{tag}" + ("/bwd" if backward else ""), 1, H, KV, sq, skv,
                       128, causal, "bf16", backward=backward)  # fmt: skip
        kernels = [(short_name(n), round(u, 2)) for n, u in calls[-1]]
        rows.append(_row(op, us, t.median_s * 1e3, {"kernels": kernels}))
        print(f"{op.name:44s} {us / 1e3:9.3f} ms (events {t.median_s * 1e3:9.3f})", flush=True)
    return rows


def main() -> int:
    import torch

    from gpuperf.fileio import json_safe, write_text
    from gpuperf.measure.env import environment
    from gpuperf.measure.timing import Budget, time_fn

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    data = {"env": environment("cuda"), "kind": "attention_long", "split": "held-out",
            "rows": []}  # fmt: skip
    path = out / "attention_long_held.json"
    budget = Budget(warmup_ms=10, rep_ms=40, min_reps=3, graphs=False)
    for shape in SHAPES:
        try:
            data["rows"] += _shape(torch, shape, budget, time_fn)
        except RuntimeError as exc:  # one shape the GPU cannot run does not stop the others
            data.setdefault("skipped", []).append({"shape": shape, "error": str(exc)[:300]})
            print(f"{shape}: {str(exc).splitlines()[0][:200]}", flush=True)
        torch.cuda.empty_cache()
        write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
