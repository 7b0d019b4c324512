"""GEMM kernels: torch.matmul (cuBLAS) for 16/32/64-bit, torch._scaled_mm for fp8 (per-tensor or
rowwise scales), torch._int_mm for int8 (W8A8), torch._weight_int4pack_mm and
torch._weight_int8pack_mm for weight-only int4/int8 with bf16 activations.

Layout follows nn.Linear: activations A[m, k] row-major times weights W[n, k] transposed
(the "TN" case cuBLAS sees in every Transformer layer). C[m, n] is preallocated (out=).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.measure.kernels import (
    TOLERANCE,
    Kernel,
    check_rows,
    rel_err,
    torch_dtype,
    unavailable,
)
from gpuperf.perfmodel.ops import int4_group

FP8_MAX = 448.0  # largest finite float8_e4m3fn


def _precision(dtype: str) -> Any:
    """fp32 means true fp32 (no TF32); tf32 turns TF32 tensor cores on, only while measuring."""

    @contextlib.contextmanager
    def ctx() -> Iterator[None]:
        import torch

        old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(old)

    return ctx


def build(op: Any, device: str, torch: Any) -> Kernel:
    m, n, k, batch, dt = op.m, op.n, op.k, op.batch, op.dtype
    if op.wdtype in ("int4", "int8"):
        return _weight_only(op, device, torch)
    if op.wdtype is not None:
        raise InputError(f"{op.name}: weight-only {op.wdtype} GEMMs are not measured")
    if dt == "fp8":
        return _fp8(op, device, torch)
    if dt == "int8":
        return _int8(op, device, torch)
    tdt = torch_dtype(dt)
    if op.wgrad:
        return _wgrad(op, device, torch, tdt)
    shape_a = (batch, m, k) if batch > 1 else (m, k)
    shape_w = (batch, n, k) if batch > 1 else (n, k)
    a = torch.randn(shape_a, dtype=tdt, device=device)
    w = torch.randn(shape_w, dtype=tdt, device=device)
    wt = w.transpose(-1, -2)
    c = torch.empty((*shape_a[:-1], n), dtype=tdt, device=device)

    def run() -> Any:
        return torch.matmul(a, wt, out=c)

    def check() -> float:
        run()
        r = check_rows(m)
        a0, w0, c0 = (a[0], w[0], c[0]) if batch > 1 else (a, w, c)
        return rel_err(c0[:r], a0[:r].double() @ w0.double().T)

    return Kernel(run, check, TOLERANCE[dt], {"kernel": "torch.matmul"}, _precision(dt))


def _wgrad(op: Any, device: str, torch: Any, tdt: Any) -> Kernel:
    """A weight gradient as autograd runs it: dW[n, m] = dY[k, n]ᵀ @ X[k, m] (here m and n the
    weight's dims, k the tokens; grad_output.t().mm(input)), so its leading dimensions are the
    weight's, as gpuperf.perfmodel.gemm.is_aligned says."""
    if op.batch > 1:
        raise InputError(f"{op.name}: a weight gradient is measured for one GEMM (batch 1)")
    m, n, k = op.m, op.n, op.k
    x = torch.randn((k, m), dtype=tdt, device=device)
    dy = torch.randn((k, n), dtype=tdt, device=device)
    c = torch.empty((n, m), dtype=tdt, device=device)

    def run() -> Any:
        return torch.mm(dy.t(), x, out=c)

    def check() -> float:
        run()
        r = check_rows(n)
        return rel_err(c[:r], dy[:, :r].double().T @ x.double())

    return Kernel(run, check, TOLERANCE[op.dtype], {"kernel": "torch.mm (dYᵀ @ X)"},
                  _precision(op.dtype))  # fmt: skip


def _fp8(op: Any, device: str, torch: Any) -> Kernel:
    m, n, k = op.m, op.n, op.k
    if device.startswith("cuda"):
        cap = torch.cuda.get_device_capability(torch.device(device))
        if cap < (8, 9):
            raise EnvironmentUnavailable(
                f"fp8 GEMM needs compute capability 8.9+ (Ada/Hopper); this GPU is "
                f"{cap[0]}.{cap[1]}"
            )
    if op.batch > 1:
        raise InputError(f"{op.name}: batched fp8 GEMM is not supported by torch._scaled_mm")
    if k % 16 or n % 16:
        raise InputError(f"{op.name}: fp8 GEMM (torch._scaled_mm) needs K and N multiples of 16")
    rowwise = op.scales == "row"
    if op.scales not in ("", "tensor", "row"):
        raise InputError(f"{op.name}: fp8 scales are 'tensor' or 'row', got {op.scales!r}")
    a_hi = torch.randn((m, k), dtype=torch.float32, device=device)
    w_hi = torch.randn((n, k), dtype=torch.float32, device=device)
    # The largest magnitude (of the tensor, or of each row: a token's, a weight row's) maps to
    # the largest finite e4m3 value. Rowwise: scale_a [m, 1], scale_b [1, n] (fp32).
    if rowwise:
        sa = a_hi.abs().amax(dim=1, keepdim=True) / FP8_MAX
        sw = w_hi.abs().amax(dim=1, keepdim=True) / FP8_MAX
    else:
        sa = (a_hi.abs().amax() / FP8_MAX).reshape(())
        sw = (w_hi.abs().amax() / FP8_MAX).reshape(())
    a = (a_hi / sa).to(torch.float8_e4m3fn)
    w = (w_hi / sw).to(torch.float8_e4m3fn)
    del a_hi, w_hi
    wt = w.t()  # column-major [k, n], as _scaled_mm requires
    sb = sw.t() if rowwise else sw
    try:
        sa16 = sa[:16] if rowwise else sa
        torch._scaled_mm(a[:16], wt, scale_a=sa16, scale_b=sb, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as exc:
        raise unavailable("fp8 GEMM", device, exc) from None

    def run() -> Any:
        return torch._scaled_mm(
            a, wt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=True
        )

    def check() -> float:
        r = check_rows(m)
        sa_r = sa[:r] if rowwise else sa
        ref = (a[:r].double() * sa_r.double()) @ (w.double() * sw.double()).T
        return rel_err(run()[:r], ref)  # the kernel against its own dequantized inputs

    scales = "rowwise" if rowwise else "per-tensor"
    detail = {"kernel": "torch._scaled_mm", "scales": scales, "fast_accum": True}
    return Kernel(run, check, TOLERANCE["fp8"], detail)


def _int8(op: Any, device: str, torch: Any) -> Kernel:
    m, n, k = op.m, op.n, op.k
    if op.batch > 1:
        raise InputError(f"{op.name}: batched int8 GEMM is not supported by torch._int_mm")
    if device.startswith("cuda") and (m <= 16 or k % 8 or n % 8):
        raise InputError(f"{op.name}: int8 GEMM (torch._int_mm) needs M > 16, K, N multiples of 8")
    a = torch.randint(-64, 64, (m, k), dtype=torch.int8, device=device)
    w = torch.randint(-64, 64, (n, k), dtype=torch.int8, device=device)
    wt = w.t()

    def run() -> Any:
        return torch._int_mm(a, wt)

    def check() -> float:
        r = check_rows(m)
        return rel_err(run()[:r], a[:r].double() @ w.double().T)

    return Kernel(run, check, TOLERANCE["int8"], {"kernel": "torch._int_mm"})


def _group_size(op: Any) -> int:
    """int4 group size from op.scales ("g128", the default; "g32", "g64", "g256")."""
    group = int4_group(op.scales)
    if group is None:
        raise InputError(f"{op.name}: int4 scales are g32, g64, g128 or g256, got {op.scales!r}")
    return group


def _identity_check(run_on: Any, a: Any, k: int, m: int, torch: Any) -> Any:
    """A check of a quantized linear map against itself: the kernel applied to the identity
    gives the dequantized weights it uses, and its output on `a` must be `a` times those (so
    the packing is right whatever the scale format)."""

    def check() -> float:
        eye = torch.eye(k, dtype=a.dtype, device=a.device)
        w_dq = run_on(eye).double()  # [k, n]: row i is the map of the i-th unit vector
        r = check_rows(m)
        return rel_err(run_on(a[:r]), a[:r].double() @ w_dq)

    return check


# A weight-only kernel: what makes the matmul (called once to probe it), and the row's detail.
Built = tuple[Callable[[], Callable[[Any], Any]], dict[str, Any]]


def _weight_only(op: Any, device: str, torch: Any) -> Kernel:
    """bf16 activations times int4 or int8 weights, by PyTorch's weight-only kernels, checked
    against the dequantized weights they use (_identity_check)."""
    if op.dtype != "bf16" or op.batch > 1:
        raise InputError(
            f"{op.name}: {op.wdtype} weight-only GEMMs take bf16 activations, no batch"
        )
    build = _int4_kernel if op.wdtype == "int4" else _int8_kernel
    make, detail = build(op, device, torch)
    a = torch.randn((op.m, op.k), dtype=torch.bfloat16, device=device)
    try:
        mm = make()
        mm(a[:1])
    except (RuntimeError, NotImplementedError, AttributeError) as exc:
        raise unavailable(f"{op.wdtype} GEMM", device, exc) from None

    def run() -> Any:
        return mm(a)

    return Kernel(run, _identity_check(mm, a, op.k, op.m, torch), TOLERANCE["bf16"], detail)


def _int4_kernel(op: Any, device: str, torch: Any) -> Built:
    """W4A16 as torch._weight_int4pack_mm runs it (tinygemm on CUDA): int4 weights packed by
    torch._convert_weight_to_int4pack, a bf16 scale and zero per group of `group` along K."""
    n, k = op.n, op.k
    group = _group_size(op)
    if k % group or n % 8 or k % 64:
        raise InputError(
            f"{op.name}: int4 weight-only needs K a multiple of {group} and of 64, N of 8"
        )
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, device=device)
    packed_u8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)  # two int4 per byte, [n, k/2]
    scales = torch.rand((k // group, n), dtype=torch.bfloat16, device=device) * 0.02 + 0.01
    zeros = torch.randn((k // group, n), dtype=torch.bfloat16, device=device) * 0.01
    s_z = torch.stack([scales, zeros], dim=2).contiguous()  # [k/group, n, 2]

    def make() -> Callable[[Any], Any]:
        if device.startswith("cuda"):
            w = torch._convert_weight_to_int4pack(packed_u8, 8)
            return lambda x: torch._weight_int4pack_mm(x, w, group, s_z)
        w = torch._convert_weight_to_int4pack_for_cpu(q, 8)
        return lambda x: torch._weight_int4pack_mm_for_cpu(x, w, group, s_z)

    return make, {"kernel": "torch._weight_int4pack_mm", "group": group, "inner_k_tiles": 8}


def _int8_kernel(op: Any, device: str, torch: Any) -> Built:
    """W8A16 as torch._weight_int8pack_mm runs it: int8 weights [n, k] with a bf16 scale per
    output channel."""
    w = torch.randint(-128, 128, (op.n, op.k), dtype=torch.int8, device=device)
    scales = torch.rand((op.n,), dtype=torch.bfloat16, device=device) * 0.02 + 0.01

    def make() -> Callable[[Any], Any]:
        return lambda x: torch._weight_int8pack_mm(x, w, scales)

    return make, {"kernel": "torch._weight_int8pack_mm"}
