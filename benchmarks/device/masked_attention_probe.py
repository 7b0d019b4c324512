"""SDPA with Hugging Face's boolean attention mask, forward and backward, as training runs it.

Hugging Face hands SDPA a dense boolean mask (is_causal off) once a sliding window is shorter
than the keys (Mistral v0.1, Phi-3, Gemma-2/3, StarCoder2) and where a family builds its causal
mask itself (Falcon); with a mask it repeats GQA's K and V to every query head first, so SDPA
sees as many K/V heads as query heads. Whole-model training runs of windowed models came out
7-8% slower than measured on an H100 (e2e_validate_windows_*.json), and the masked backward had
never been timed alone. This times, for shapes of those models and around them:

- the masked forward (grad on, as in training) and its backward (torch.autograd.grad of one
  call), bf16, the mask as HF builds it: causal, and inside the window where there is one
  (key > query - window), shape (batch, 1, q, kv);
- with dropout_p where the family trains with attention dropout (StarCoder2);
- the kernels each call ran (torch.profiler), and the whole call with events. A row's
  measured_ms is the attention's own kernels (cuDNN's, with their helpers); SDPA's conversion
  of the boolean mask to an additive one (two fills and a where, gpuperf's attn/mask ops) is
  kept apart in detail.mask_us.

    python3 benchmarks/device/masked_attention_probe.py OUT_DIR

Writes OUT_DIR/attention_masked_train.json in the sweep format (gpuperf/measure/results.py):
each row's "op" is the call as gpuperf describes it (Attention, mask on, K/V heads = heads),
its measured_ms the median over profiled calls of the kernels that call ran.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from train_kernels_probe import _row, kernel_calls, short_name, sweep_shapes  # noqa: E402

from gpuperf.perfmodel.ops import Attention  # noqa: E402

# (batch, heads, seq, head_dim, window (0: causal mask only), dropout_p): Mistral-7B v0.1 (32
# heads, window 4,096), Phi-3-mini (32 heads of 96, window 2,047), Gemma-3-4B (8 heads of 256,
# window 1,024), StarCoder2-7B (36 heads, window 4,096, attention dropout 0.1), Falcon-7B (71
# heads of 64, its own causal mask), and shapes around them
SHAPES = [(1, 32, 8192, 128, 4096, 0.0), (2, 32, 4096, 128, 2048, 0.0),
          (1, 32, 4096, 96, 2047, 0.0), (2, 32, 2048, 96, 2047, 0.0),
          (1, 8, 8192, 256, 1024, 0.0), (2, 8, 4096, 256, 1024, 0.0),
          (1, 36, 8192, 128, 4096, 0.1), (2, 36, 4096, 128, 2048, 0.1),
          (1, 71, 2048, 64, 0, 0.0), (2, 71, 2048, 64, 0, 0.0),
          (4, 16, 2048, 64, 1024, 0.0), (1, 40, 16384, 128, 4096, 0.0),
          (8, 32, 1024, 128, 512, 0.0), (1, 32, 2048, 128, 1024, 0.0),
          (2, 16, 8192, 128, 4096, 0.0), (1, 64, 4096, 128, 2048, 0.0),
          (4, 32, 1024, 64, 256, 0.0), (1, 32, 8192, 128, 0, 0.0),
          (4, 24, 2048, 128, 0, 0.0), (2, 32, 4096, 96, 2047, 0.1),
          # more of the head dims and dropout that fit apart: Gemma-2-9B (16 heads of 256, window
          # 4,096), Gemma-3-12B (16 of 256, 1,024), dropout at head dims 64-256
          (1, 16, 8192, 256, 4096, 0.0), (4, 8, 2048, 256, 1024, 0.0),
          (1, 32, 4096, 256, 1024, 0.0), (8, 12, 1024, 64, 512, 0.0),
          (2, 32, 4096, 64, 2048, 0.0), (1, 32, 4096, 128, 2048, 0.1),
          (4, 16, 2048, 64, 1024, 0.1), (2, 36, 2048, 128, 1024, 0.1),
          (1, 24, 8192, 128, 4096, 0.1), (8, 12, 1024, 64, 512, 0.1),
          (2, 8, 4096, 256, 1024, 0.1), (1, 48, 4096, 128, 2048, 0.1),
          (2, 16, 8192, 128, 4096, 0.1), (2, 24, 4096, 128, 2048, 0.1),
          (4, 32, 2048, 128, 1024, 0.1), (8, 16, 1024, 96, 512, 0.1)]  # fmt: skip


def hf_mask(torch, b: int, s: int, window: int):  # noqa: ANN001, ANN201
    """HF's boolean SDPA mask (True: attend): causal, and inside the window where there is one."""
    q = torch.arange(s, device="cuda")[:, None]
    k = torch.arange(s, device="cuda")[None, :]
    keep = k <= q
    if window:
        keep &= k > q - window
    return keep[None, None].expand(b, 1, s, s).contiguous()


def _converts(kernel: str) -> bool:
    """A kernel of SDPA's conversion of the boolean mask (fills of 0 and -inf, a where)."""
    return "FillFunctor" in kernel or "where_kernel" in kernel


def _shape(torch, shape: tuple, budget, time_fn) -> list[dict]:  # noqa: ANN001
    import torch.nn.functional as F

    b, H, s, d, window, p = shape
    q = torch.randn(b, H, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn_like(q, requires_grad=True)
    v = torch.randn_like(q, requires_grad=True)
    mask = hf_mask(torch, b, s, window)

    def fwd():  # noqa: ANN202
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)

    out = fwd()
    go = torch.randn_like(out)

    def bwd():  # noqa: ANN202
        return torch.autograd.grad(out, (q, k, v), go, retain_graph=True)

    tag = f"b{b}/h{H}/s{s}/d{d}/w{window}" + (f"/p{p}" if p else "")
    rows = []
    for backward, fn in ((False, fwd), (True, bwd)):
        t = time_fn(fn, "cuda", budget)
        calls = kernel_calls(torch, fn)
        us = statistics.median(sum(u for n, u in c if not _converts(n)) for c in calls)
        mask_us = statistics.median(sum(u for n, u in c if _converts(n)) for c in calls)
        op = Attention(f"sdpa_mask/{tag}" + ("/bwd" if backward else ""), b, H, H, s, s, d,
                       False, "bf16", mask=True, backward=backward, dropout=p > 0)  # fmt: skip
        rows.append(_row(op, us, t.median_s * 1e3, {
            "window": window, "dropout_p": p, "mask_us": mask_us,
            "kernels": [(short_name(n), round(u, 2)) for n, u in calls[-1]]}))  # fmt: skip
        print(f"{op.name:40s} {us:9.1f} us (events {t.median_s * 1e6:9.1f})", flush=True)
    return rows


def main() -> int:
    import torch

    from gpuperf.measure.env import environment
    from gpuperf.measure.timing import Budget, time_fn

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    data = {"env": environment("cuda"), "kind": "attention_masked_train", "rows": []}
    path = out / "attention_masked_train.json"
    budget = Budget(warmup_ms=10, rep_ms=40, graphs=False)
    sweep_shapes(torch, SHAPES, _shape, budget, time_fn, data, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
