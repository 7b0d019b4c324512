"""The grouped GEMM of an MoE layer as Hugging Face transformers runs it (grouped_mm experts):
tokens routed to their top-k experts by a random router, sorted by expert, and one
torch._grouped_mm over every expert's rows with the experts' weights [E, n, k] transposed (the
nn.Linear layout), offsets from histc + cumsum. The routing is drawn like a random-weight
model's: uniform, topk distinct experts per token.
"""

from __future__ import annotations

from typing import Any

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.measure.kernels import TOLERANCE, Kernel, rel_err, torch_dtype

CHECKED_EXPERTS = 4  # experts whose rows are compared with the fp64 reference


def routing(tokens: int, topk: int, experts: int, device: str, torch: Any) -> tuple[Any, Any]:
    """(sorted expert id of each routed row, int32 end offset of each expert's rows)."""
    logits = torch.randn((tokens, experts), device=device)
    ids = torch.topk(logits, topk, dim=-1).indices.reshape(-1)
    ids_sorted, _ = torch.sort(ids)
    counts = torch.bincount(ids_sorted, minlength=experts)
    return ids_sorted, torch.cumsum(counts, dim=0).to(torch.int32)


def build(op: Any, device: str, torch: Any) -> Kernel:
    if op.dtype != "bf16":
        raise InputError(f"{op.name}: grouped GEMMs are measured in bf16 (torch._grouped_mm)")
    if op.topk > op.experts:
        raise InputError(f"{op.name}: topk {op.topk} is more than {op.experts} experts")
    if not hasattr(torch, "_grouped_mm"):
        raise EnvironmentUnavailable("torch._grouped_mm is not in this torch (needs 2.8+)")
    dt = torch_dtype(op.dtype)
    _, offs = routing(op.tokens, op.topk, op.experts, device, torch)
    a = torch.randn((op.rows, op.k), dtype=dt, device=device)
    w = torch.randn((op.experts, op.n, op.k), dtype=dt, device=device) * op.k**-0.5
    wt = w.transpose(-2, -1)  # [E, k, n], column-major per expert, as HF passes it

    def run() -> Any:
        return torch._grouped_mm(a, wt, offs=offs)

    try:
        run()
    except (RuntimeError, NotImplementedError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EnvironmentUnavailable(f"grouped GEMM unavailable on {device}: {first}") from None

    def check() -> float:
        out = run()
        ends = offs.tolist()
        errs = []
        for e in range(op.experts):
            lo, hi = (ends[e - 1] if e else 0), ends[e]
            if hi > lo:
                ref = a[lo:hi].double() @ w[e].double().T
                errs.append(rel_err(out[lo:hi], ref))
            if len(errs) == CHECKED_EXPERTS:
                break
        return max(errs, default=0.0)

    counts = [b - a_ for a_, b in zip([0, *offs.tolist()[:-1]], offs.tolist(), strict=True)]
    detail = {
        "kernel": "torch._grouped_mm",
        "touched": sum(1 for c in counts if c),
        "rows_max": max(counts),
        "rows_mean_touched": op.rows / max(1, sum(1 for c in counts if c)),
    }
    return Kernel(run, check, TOLERANCE["bf16"], detail)
