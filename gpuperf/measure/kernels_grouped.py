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
from gpuperf.measure.kernels_gemm import FP8_MAX
from gpuperf.perfmodel.gemm_grouped import FP8_ROW_ALIGN

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
    if op.dtype not in ("bf16", "fp8"):
        raise InputError(f"{op.name}: grouped GEMMs are measured in bf16 (torch._grouped_mm) "
                         "or fp8 (torch._scaled_grouped_mm)")  # fmt: skip
    if op.topk > op.experts:
        raise InputError(f"{op.name}: topk {op.topk} is more than {op.experts} experts")
    if op.dtype == "fp8":
        return _fp8(op, device, torch)
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


def _fp8(op: Any, device: str, torch: Any) -> Kernel:
    """The forward grouped GEMM in fp8 with rowwise scales (a scale per row of the routed rows,
    one per output column of each expert's weights), as torch._scaled_grouped_mm runs it on
    Hopper (CUTLASS) and torchao's fp8 MoE training calls it: each expert's rows padded to a
    multiple of FP8_ROW_ALIGN, the weights [E, n, k] passed transposed (column-major)."""
    if op.wgrad or op.name.endswith(".dgrad"):
        raise InputError(f"{op.name}: fp8 grouped GEMMs are measured forward only")
    if op.k % 16 or op.n % 16:
        raise InputError(f"{op.name}: fp8 grouped GEMM needs K and N multiples of 16")
    if not hasattr(torch, "_scaled_grouped_mm"):
        raise EnvironmentUnavailable("torch._scaled_grouped_mm is not in this torch")
    counts, _ = routing(op.tokens, op.topk, op.experts, op.local, device, torch)
    counts = [-(-c // FP8_ROW_ALIGN) * FP8_ROW_ALIGN for c in counts]
    offs = torch.cumsum(torch.tensor(counts, device=device), dim=0).to(torch.int32)
    rows = sum(counts)
    a_hi = torch.randn((rows, op.k), dtype=torch.float32, device=device)
    w_hi = torch.randn((op.local, op.n, op.k), dtype=torch.float32, device=device)
    sa = a_hi.abs().amax(dim=1) / FP8_MAX  # [rows]
    sw = w_hi.abs().amax(dim=2) / FP8_MAX  # [E, n]
    a = (a_hi / sa[:, None]).to(torch.float8_e4m3fn)
    w = (w_hi / sw[:, :, None]).to(torch.float8_e4m3fn)
    del a_hi, w_hi
    wt = w.transpose(-2, -1)  # [E, k, n], column-major per expert

    def run() -> Any:
        return torch._scaled_grouped_mm(a, wt, sa, sw, offs=offs, out_dtype=torch.bfloat16)

    def pair(out: Any, e: int, lo: int, c: int) -> tuple[Any, Any]:
        ref = (a[lo : lo + c].double() * sa[lo : lo + c, None].double()) @ (
            w[e].double() * sw[e][:, None].double()
        ).T
        return out[lo : lo + c], ref  # the kernel against its own dequantized inputs

    return _kernel(run, pair, counts, device, "fp8 grouped GEMM", "torch._scaled_grouped_mm",
                   TOLERANCE["fp8"], scales="rowwise", rows_padded=rows)  # fmt: skip


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
            counts: list[int], device: str, what: str, kernel: str,
            tol: float = TOLERANCE["bf16"], **detail: Any) -> Kernel:  # fmt: skip
    """A grouped kernel (`what`, run as `kernel`) checked on its first CHECKED_EXPERTS experts
    with rows: `pair` gives an expert's (output, fp64 reference) from the output and the
    expert's index, first row and row count; `tol` bounds its error, `detail` adds to its
    record."""
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
    info = {"kernel": kernel, "touched": touched, "rows_max": max(counts),
              "rows_mean_touched": rows / max(1, touched), **detail}  # fmt: skip
    return Kernel(run, check, tol, info)
