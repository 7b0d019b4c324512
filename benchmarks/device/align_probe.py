"""Which GEMM dimensions make cuBLAS leave its fast path: a weight gradient over an odd token
count, and a decode step's attention scores over an odd KV length, beside their aligned twins.

    python3 benchmarks/device/align_probe.py OUT_DIR

gpuperf takes a GEMM off the Tensor-Core fast path (`gemm_misaligned_eff`) when a leading
dimension is not a multiple of 16 bytes (gpuperf.perfmodel.gemm.is_aligned). nn.Linear's forward
(X[T, k] @ W[n, k]ᵀ) leads with k and n; its weight gradient dW = dYᵀ @ X (autograd's
`grad_output.t().mm(input)`) reads dY[T, n] and X[T, k] along their rows, so it leads with n and
k too, and the token count T is the reduction length. Each case is timed as the calibration
sweeps time kernels (gpuperf.measure.timing, L2 flushed), in bf16:
- `fwd`: X[T, 4096] @ W[4096, 4096]ᵀ with k = 4096 + 4 (a misaligned leading dimension, the
  cliff's reference) and k = 4096;
- `wgrad`: dY[T, n]ᵀ @ X[T, k] for (n, k) of a Llama-3-8B layer at T = 1500, 1501, 1502, 1504,
  4096, 4097 and 4100;
- `scores`: Q[b·h, 1, 128] @ Kᵀ[b·h, 128, L] (batch 32 of 32 heads) at L = 8192, 8193, 8196 and
  8200, the math attention's first product in decode.
Writes align_probe.json (the environment stamp, one row per case).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    import torch

    from gpuperf.fileio import write_text
    from gpuperf.measure.env import environment
    from gpuperf.measure.timing import time_fn

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out_dir", type=Path)
    out = ap.parse_args().out_dir
    out.mkdir(parents=True, exist_ok=True)
    bf = torch.bfloat16
    dev = "cuda"
    rows = []

    def add(case: str, shape: dict, fn) -> None:  # noqa: ANN001
        ms = time_fn(fn, dev).median_s * 1e3
        rows.append({"case": case, **shape, "measured_ms": ms})
        print(f"{case:7s} {shape} {ms:.4f} ms", flush=True)

    for k in (4096, 4100):
        x = torch.randn(4096, k, device=dev, dtype=bf)
        w = torch.randn(4096, k, device=dev, dtype=bf)
        add("fwd", {"t": 4096, "n": 4096, "k": k}, lambda x=x, w=w: x @ w.t())
    for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096)):
        for t in (1500, 1501, 1502, 1504, 4096, 4097, 4100):
            dy = torch.randn(t, n, device=dev, dtype=bf)
            x = torch.randn(t, k, device=dev, dtype=bf)
            add("wgrad", {"t": t, "n": n, "k": k}, lambda dy=dy, x=x: dy.t().mm(x))
    for length in (8192, 8193, 8196, 8200):
        q = torch.randn(1024, 1, 128, device=dev, dtype=bf)
        kc = torch.randn(1024, length, 128, device=dev, dtype=bf)
        add(
            "scores", {"bh": 1024, "l": length}, lambda q=q, kc=kc: torch.bmm(q, kc.transpose(1, 2))
        )
    data = {"env": environment(dev), "kind": "align_probe", "rows": rows}
    write_text(out / "align_probe.json", json.dumps(data, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
