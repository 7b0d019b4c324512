"""The grouped GEMM of an MoE layer as Hugging Face transformers runs it (grouped_mm experts):
tokens routed to their top-k experts by a random router, sorted by expert, and one
torch._grouped_mm over every expert's rows with the experts' weights [E, n, k] transposed (the
nn.Linear layout), offsets from histc + cumsum. The routing is drawn like a random-weight
model's: uniform, topk distinct experts per token. Under expert parallelism (op.groups) the
GPU runs its own experts' rows only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.measure.kernels import TOLERANCE, Kernel, rel_err, torch_dtype, unavailable

CHECKED_EXPERTS = 4  # experts whose rows are compared with the fp64 reference


def routing(tokens: int, topk: int, experts: int, local: int, device: str,
            torch: Any) -> tuple[list[int], Any]:  # fmt: skip
    """Rows that each of the first `local` experts (this GPU's) receives, and their int32 end
    offsets."""
    logits = torch.randn((tokens, experts), device=device)
    ids = torch.topk(logits, topk, dim=-1).indices.reshape(-1)
    counts = torch.bincount(ids, minlength=experts)[:local]
    return counts.tolist(), torch.cumsum(counts, dim=0).to(torch.int32)


def build(op: Any, device: str, torch: Any) -> Kernel:
    if op.dtype != "bf16":
        raise InputError(f"{op.name}: grouped GEMMs are measured in bf16 (torch._grouped_mm)")
    if op.topk > op.experts:
        raise InputError(f"{op.name}: topk {op.topk} is more than {op.experts} experts")
    if not hasattr(torch, "_grouped_mm"):
        raise EnvironmentUnavailable("torch._grouped_mm is not in this torch (needs 2.8+)")
    dt = torch_dtype(op.dtype)
    counts, offs = routing(op.tokens, op.topk, op.experts, op.local, device, torch)
    rows = sum(counts)  # op.rows on average (all of them without expert parallelism)
    if op.wgrad:
        return _wgrad(op, counts, offs, rows, dt, device, torch)
    a = torch.randn((rows, op.k), dtype=dt, device=device)
    if op.name.endswith(".dgrad"):  # autograd's dX = dY @ W: the weights [E, n_out, k_out]
        w = torch.randn((op.local, op.k, op.n), dtype=dt, device=device) * op.k**-0.5
        wt = w  # [E, k, n] row-major per expert
        w = w.transpose(-2, -1)  # w[e].T is the [k, n] operand, as below
    else:
        w = torch.randn((op.local, op.n, op.k), dtype=dt, device=device) * op.k**-0.5
        wt = w.transpose(-2, -1)  # [E, k, n], column-major per expert, as HF passes it

    def run() -> Any:
        return torch._grouped_mm(a, wt, offs=offs)

    def pair(out: Any, e: int, lo: int, c: int) -> tuple[Any, Any]:
        return out[lo : lo + c], a[lo : lo + c].double() @ w[e].double().T

    return _kernel(run, pair, counts, device, "grouped GEMM", "torch._grouped_mm")


def _wgrad(op: Any, counts: list[int], offs: Any, rows: int, dt: Any, device: str,
           torch: Any) -> Kernel:  # fmt: skip
    """The experts' weight gradients as autograd of torch._grouped_mm computes them for
    weights held [E, n, k] (nn.Linear's layout): each expert's dW[n, k] = dY_eᵀ @ X_e from the
    rows' output gradients dY [rows, n] (transposed view) and inputs X [rows, k], the offsets
    along the reduction."""
    x = torch.randn((rows, op.k), dtype=dt, device=device)
    dy = torch.randn((rows, op.n), dtype=dt, device=device) * max(rows / op.local, 1.0) ** -0.5

    def run() -> Any:
        return torch._grouped_mm(dy.t(), x, offs=offs)

    def pair(out: Any, e: int, lo: int, c: int) -> tuple[Any, Any]:
        return out[e], dy[lo : lo + c].double().T @ x[lo : lo + c].double()

    return _kernel(
        run,
        pair,
        counts,
        device,
        "grouped GEMM (weight gradient)",
        "torch._grouped_mm (2-D x 2-D, weight gradient)",
    )


def _kernel(run: Callable[[], Any], pair: Callable[[Any, int, int, int], tuple[Any, Any]],
            counts: list[int], device: str, what: str, kernel: str) -> Kernel:  # fmt: skip
    """A grouped kernel (`what`, run as `kernel`) checked on its first CHECKED_EXPERTS experts
    with rows: `pair` gives an expert's (output, fp64 reference) from the output and the
    expert's index, first row and row count."""
    try:
        run()
    except (RuntimeError, NotImplementedError) as exc:
        raise unavailable(what, device, exc) from None

    def check() -> float:
        out = run()
        errs, lo = [], 0
        for e, c in enumerate(counts):
            if c:
                errs.append(rel_err(*pair(out, e, lo, c)))
            lo += c
            if len(errs) == CHECKED_EXPERTS:
                break
        return max(errs, default=0.0)

    rows, touched = sum(counts), sum(1 for c in counts if c)
    detail = {"kernel": kernel, "touched": touched, "rows_max": max(counts),
              "rows_mean_touched": rows / max(1, touched)}  # fmt: skip
    return Kernel(run, check, TOLERANCE["bf16"], detail)
