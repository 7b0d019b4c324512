"""GEMM kernels: torch.matmul (cuBLAS) for 16/32/64-bit, torch._scaled_mm for fp8, _int_mm for int8.

Layout follows nn.Linear: activations A[m, k] row-major times weights W[n, k] transposed
(the "TN" case cuBLAS sees in every Transformer layer). C[m, n] is preallocated (out=).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.measure.kernels import TOLERANCE, Kernel, check_rows, rel_err, torch_dtype

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
    if dt == "fp8":
        return _fp8(op, device, torch)
    if dt == "int8":
        return _int8(op, device, torch)
    tdt = torch_dtype(dt)
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
    a_hi = torch.randn((m, k), dtype=torch.float32, device=device)
    w_hi = torch.randn((n, k), dtype=torch.float32, device=device)
    # Per-tensor scales: the largest magnitude maps to the largest finite e4m3 value.
    sa = (a_hi.abs().amax() / FP8_MAX).reshape(())
    sw = (w_hi.abs().amax() / FP8_MAX).reshape(())
    a = (a_hi / sa).to(torch.float8_e4m3fn)
    w = (w_hi / sw).to(torch.float8_e4m3fn)
    del a_hi, w_hi
    wt = w.t()  # column-major [k, n], as _scaled_mm requires
    try:
        torch._scaled_mm(a[:16], wt, scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)
    except (RuntimeError, NotImplementedError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise EnvironmentUnavailable(f"fp8 GEMM unavailable on {device}: {first}") from None

    def run() -> Any:
        return torch._scaled_mm(
            a, wt, scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16, use_fast_accum=True
        )

    def check() -> float:
        r = check_rows(m)
        ref = (a[:r].double() * sa.double()) @ (w.double() * sw.double()).T
        return rel_err(run()[:r], ref)  # the kernel against its own dequantized inputs

    detail = {"kernel": "torch._scaled_mm", "scales": "per-tensor", "fast_accum": True}
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
