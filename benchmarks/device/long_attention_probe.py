"""Attention forward and backward at long sequences with few heads per GPU (held out): the shapes
tensor and context parallelism leave on each GPU of a long-sequence training run, which the
calibration sweeps (up to 16,384 tokens, 32-64 heads) never reached.

    python3 benchmarks/device/long_attention_probe.py OUT_DIR

Each shape is PyTorch's SDPA (cuDNN on Hopper) on bf16, head dim 128, batch 1:
- causal, queries = keys, 16K-128K tokens, 4, 8 or 32 heads (a whole sequence, or the diagonal
  block of a ring step);
- not causal, queries against twice as many keys (a ring step's off-diagonal blocks);
forward and backward each timed from the profiler's kernel durations (median of calls) by
train_kernels_probe.py's SDPA rows (cuDNN's GQA head sums of dK and dV apart, as gpuperf charges
them; the committed file's one GQA backward row, taken before, holds them: 0.44 of 166.5 ms).
Writes attention_long_held.json (the sweep format, marked held out: no fit reads it).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_kernels_probe import _sdpa_shape, sweep_shapes  # noqa: E402

K = 1024
# (heads, kv_heads, q_len, kv_len, causal)
SHAPES = [(h, h, s * K, s * K, True) for s in (16, 32, 64, 128) for h in (4, 8, 32)]
SHAPES += [(h, h, q * K, 2 * q * K, False) for q in (8, 16, 32) for h in (4, 8)]
SHAPES += [(32, 8, 64 * K, 64 * K, True)]


def _shape(torch, shape: tuple, budget, time_fn) -> list[dict]:  # noqa: ANN001
    H, KV, sq, skv, causal = shape
    name = f"sdpa_long/h{H}/kv{KV}/q{sq}/k{skv}" + ("/causal" if causal else "")
    return _sdpa_shape(torch, (1, H, KV, sq, 128, 0.0), budget, time_fn, kv_len=skv,
                       causal=causal, name=name)  # fmt: skip


def main() -> int:
    import torch

    from gpuperf.measure.env import environment
    from gpuperf.measure.timing import Budget, time_fn

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    data = {"env": environment("cuda"), "kind": "attention_long", "split": "held-out",
            "rows": []}  # fmt: skip
    path = out / "attention_long_held.json"
    budget = Budget(warmup_ms=10, rep_ms=40, min_reps=3, graphs=False)
    sweep_shapes(torch, SHAPES, _shape, budget, time_fn, data, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
