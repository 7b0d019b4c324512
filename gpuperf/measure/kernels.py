"""Run the real kernel of an Op on a real device, check it once, time it.

Each builder makes random inputs (never zeros: some kernels short-cut on zeros and memory
compression favours them) and returns a `Kernel`: the call to time, and a check that compares the
output with a higher-precision reference (on a slice for big problems). Wrong results are never
timed. torch is imported lazily.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuperf.errors import EnvironmentUnavailable, GpuperfError, InputError
from gpuperf.measure.timing import Budget, Timing, time_fn
from gpuperf.perfmodel.ops import GroupedGemm, Op
from gpuperf.units import fmt_bytes

# Relative Frobenius error allowed against the fp64 reference, per dtype of the kernel's inputs.
TOLERANCE: dict[str, float] = {
    "fp64": 1e-10,
    "fp32": 1e-4,
    "tf32": 5e-3,
    "bf16": 2e-2,
    "fp16": 5e-3,
    "fp8": 2e-2,
    "int8": 1e-9,
}


def unavailable(what: str, device: str, exc: BaseException) -> EnvironmentUnavailable:
    """The error for a kernel this torch or device lacks (its first call raised `exc`)."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return EnvironmentUnavailable(f"{what} unavailable on {device}: {first}")


class WrongResult(GpuperfError):
    """The kernel's output disagrees with the reference: it is not timed (exit 1)."""


@dataclass(slots=True)
class Kernel:
    """`run()` is the timed call; `check()` returns the relative error of its output."""

    run: Callable[[], Any]
    check: Callable[[], float]
    tol: float
    detail: dict[str, Any] = field(default_factory=dict)
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured op: timing, achieved rates, and its distance from the reference."""

    op: Op
    timing: Timing
    tflops: float
    gbps: float
    check_err: float
    detail: dict[str, Any] = field(default_factory=dict)


def torch_dtype(dtype: str) -> Any:
    import torch

    return {
        "fp64": torch.float64,
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp8": torch.float8_e4m3fn,
        "int8": torch.int8,
    }[dtype]


def rel_err(out: Any, ref: Any) -> float:
    """||out - ref||_F / ||ref||_F in float64 (0 when both are 0)."""
    out, ref = out.double(), ref.double()
    den = ref.norm().item()
    num = (out - ref).norm().item()
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return num / den


def randn(shape: tuple[int, ...], dtype: str, device: str, scale: float = 1.0) -> Any:
    import torch

    if dtype in ("fp8", "int8"):
        raise InputError(f"randn of {dtype} is built by the GEMM path")
    return torch.randn(shape, dtype=torch_dtype(dtype), device=device) * scale


def check_rows(m: int) -> int:
    """Rows of a big output compared with the reference (keeps the fp64 check cheap)."""
    return min(m, 128)


def _gemm(op: Any, device: str) -> Kernel:
    import torch

    if isinstance(op, GroupedGemm):
        from gpuperf.measure import kernels_grouped

        return kernels_grouped.build(op, device, torch)
    from gpuperf.measure import kernels_gemm

    return kernels_gemm.build(op, device, torch)


CHECK_ELEMS = 1 << 20  # elements of a big pointwise output compared with the fp64 reference


REPEAT_GROUP, REPEAT_ROW = 4, 128  # repeat_kv kernels: GQA group size and head_dim


def _repeat_kv(op: Any, device: str) -> Kernel:
    """HF's repeat_kv: K/V [rows, D] expanded to [rows, group, D] and reshaped, a copy from a
    broadcast (stride-0) view; `numel` counts the output elements."""

    unit = REPEAT_GROUP * REPEAT_ROW
    if op.numel % unit:
        raise InputError(f"{op.name}: repeat_kv needs numel divisible by {unit}, got {op.numel}")
    rows = op.numel // unit
    x = randn((rows, 1, REPEAT_ROW), op.dtype, device)

    def run() -> Any:
        return x.expand(rows, REPEAT_GROUP, REPEAT_ROW).reshape(rows * REPEAT_GROUP, REPEAT_ROW)

    def check() -> float:
        out = run()
        r = min(rows, CHECK_ELEMS // unit + 1)
        ref = x[:r].double().expand(r, REPEAT_GROUP, REPEAT_ROW).reshape(-1, REPEAT_ROW)
        return rel_err(out[: r * REPEAT_GROUP], ref)

    return Kernel(run, check, TOLERANCE[op.dtype], {"kernel": "expand+reshape (repeat_kv)"})


GENERIC_ROW = 128  # generic kernels: the broadcast operand's length (a norm weight's row)


def _generic(op: Any, device: str) -> Kernel:
    """PyTorch's non-vectorized elementwise kernel as an eager RMSNorm runs it: weight * x with
    the weight broadcast over the rows (mul), or the widening cast x.to(fp32) (cast)."""

    if op.fn not in ("mul", "cast") or op.numel % GENERIC_ROW:
        raise InputError(
            f"{op.name}: measure runs generic mul (a broadcast row) and cast only, on numel "
            f"divisible by {GENERIC_ROW}; got {op.fn} of {op.numel}"
        )
    rows = op.numel // GENERIC_ROW
    x = randn((rows, GENERIC_ROW), op.dtype, device)
    if op.fn == "mul":
        w = randn((GENERIC_ROW,), op.dtype, device)

        def run() -> Any:
            return w * x

        def ref(r: int) -> Any:
            return w.double() * x[:r].double()

    else:
        out_dt = torch_dtype(op.out_dtype or op.dtype)

        def run() -> Any:
            return x.to(out_dt)

        def ref(r: int) -> Any:
            return x[:r].double()

    def check() -> float:
        r = min(rows, CHECK_ELEMS // GENERIC_ROW + 1)
        return rel_err(run()[:r], ref(r))

    tol = max(TOLERANCE[op.dtype], TOLERANCE[op.out_dtype or op.dtype])
    return Kernel(run, check, tol, {"kernel": f"{op.fn} (non-vectorized: broadcast / widening)"})


def _elementwise(op: Any, device: str) -> Kernel:
    import torch
    import torch.nn.functional as F

    if op.fn == "repeat_kv":
        return _repeat_kv(op, device)
    if op.generic:
        return _generic(op, device)
    n, dt, fn = op.numel, op.dtype, op.fn
    s = min(n, CHECK_ELEMS)
    a = randn((n,), dt, device)
    b = randn((n,), dt, device) if fn in ("add", "mul") else None
    refs: dict[str, Callable[..., Any]] = {
        "add": lambda x, y: x + y,
        "mul": lambda x, y: x * y,
        "relu": lambda x: torch.relu(x),
        "silu": lambda x: F.silu(x),
        "gelu": lambda x: F.gelu(x),
        "cast": lambda x: x,
    }
    if fn not in refs:
        raise InputError(f"measure has no kernel for elementwise fn {fn!r} ({', '.join(refs)})")
    out = torch.empty(n, dtype=torch_dtype(op.out_dtype or dt), device=device)
    if fn == "cast":

        def run() -> Any:
            return out.copy_(a)

    elif b is not None:
        aten2 = getattr(torch.ops.aten, fn).out

        def run() -> Any:
            return aten2(a, b, out=out)

    elif fn == "relu":
        # torch.relu is clamp_min(x, 0); aten.relu.out is an autogenerated wrapper that runs relu
        # and then copies into `out` (two kernels, twice the traffic), so time clamp_min.out.
        clamp_min = torch.ops.aten.clamp_min.out

        def run() -> Any:
            return clamp_min(a, 0, out=out)

    else:
        aten1 = getattr(torch.ops.aten, fn).out

        def run() -> Any:
            return aten1(a, out=out)

    def check() -> float:
        run()
        args = [t[:s].double() for t in (a, b) if t is not None]
        return rel_err(out[:s], refs[fn](*args))

    tol = max(TOLERANCE[dt], TOLERANCE[op.out_dtype or dt])
    name = "aten.clamp_min (relu)" if fn == "relu" else f"aten.{fn}"
    return Kernel(run, check, tol, {"kernel": name})


def _norm(op: Any, device: str) -> Kernel:
    import torch
    import torch.nn.functional as F

    if op.backward:
        raise InputError(f"{op.name}: measuring norm backward is not supported")
    if op.residual:
        # The op is one fused kernel (vLLM's fused_add_rms_norm: 2 reads, 2 writes); eager PyTorch
        # would run an add and then the norm, two kernels and 5 passes, and time something else.
        raise InputError(
            f"{op.name}: PyTorch has no fused residual-add + {op.fn} kernel to measure; "
            "measure the add and the norm as two ops"
        )
    rows, cols, dt = op.rows, op.cols, op.dtype
    x = randn((rows, cols), dt, device)
    w = randn((cols,), dt, device, 0.1) + 1
    b = randn((cols,), dt, device, 0.1)

    def apply(t: Any, weight: Any, bias: Any) -> Any:
        if op.fn == "rmsnorm":
            return F.rms_norm(t, (cols,), weight, eps=1e-6)
        if op.fn == "layernorm":
            return F.layer_norm(t, (cols,), weight, bias, eps=1e-5)
        return torch.softmax(t, dim=-1)

    def run() -> Any:
        return apply(x, w, b)

    def check() -> float:
        r = check_rows(rows)
        return rel_err(run()[:r], apply(x[:r].double(), w.double(), b.double()))

    return Kernel(run, check, TOLERANCE[dt], {"kernel": op.fn})


def _reduce(op: Any, device: str) -> Kernel:
    import torch

    x = randn((op.rows, op.cols), op.dtype, device)
    fns: dict[str, Callable[[Any], Any]] = {
        "sum": lambda t: t.sum(-1),
        "mean": lambda t: t.mean(-1),
        "max": lambda t: t.amax(-1),
        "argmax": lambda t: t.argmax(-1),
        "topk": lambda t: torch.topk(t, op.out_cols, dim=-1).values,
    }
    if op.fn not in fns:
        raise InputError(f"measure has no kernel for reduce fn {op.fn!r} ({', '.join(fns)})")
    f = fns[op.fn]
    r = check_rows(op.rows)
    return Kernel(lambda: f(x), lambda: rel_err(f(x)[:r], f(x[:r].double())), TOLERANCE[op.dtype])


def _embedding(op: Any, device: str) -> Kernel:
    import torch
    import torch.nn.functional as F

    vocab = 32000  # the gather reads only the rows it needs; the table size barely matters
    table = randn((vocab, op.hidden), op.dtype, device)
    idx = torch.randint(0, vocab, (op.tokens,), device=device)

    def run() -> Any:
        return F.embedding(idx, table)

    return Kernel(run, lambda: rel_err(run(), table.double()[idx]), 0.0, {"vocab": vocab})


def _copy(op: Any, device: str) -> Kernel:
    import torch

    src = torch.randint(-128, 127, (op.nbytes,), dtype=torch.int8, device=device)
    dst = torch.empty_like(src)

    def run() -> Any:
        return dst.copy_(src)

    def check() -> float:
        run()
        return 0.0 if torch.equal(dst, src) else 1.0

    return Kernel(run, check, 0.0)


def _attention(op: Any, device: str, backend: str | None) -> Kernel:
    from gpuperf.measure import kernels_attention

    return kernels_attention.build(op, device, backend)


def build(op: Op, device: str, backend: str | None = None) -> Kernel:
    """The Kernel for `op` on `device`; InputError for ops that are not single kernels."""
    kind = op.kind
    if kind == "gemm":
        return _gemm(op, device)
    if kind == "attention":
        return _attention(op, device, backend)
    if kind == "elementwise":
        return _elementwise(op, device)
    if kind in ("norm", "softmax"):
        return _norm(op, device)
    if kind == "reduce":
        return _reduce(op, device)
    if kind == "embedding":
        return _embedding(op, device)
    if kind == "copy":
        return _copy(op, device)
    raise InputError(
        f"{op.name}: {kind} ops run across processes; use `gpuperf measure allreduce ...`"
    )


@contextlib.contextmanager
def _oom_as_error(op: Op) -> Iterator[None]:
    import torch

    try:
        yield
    except torch.OutOfMemoryError:
        raise EnvironmentUnavailable(
            f"out of device memory for {op.name} ({op.shape}, moves {fmt_bytes(op.cost().bytes)})"
        ) from None
    except RuntimeError as exc:
        if "alloc" in str(exc).lower() and "memory" in str(exc).lower():
            raise EnvironmentUnavailable(
                f"out of memory for {op.name} ({op.shape}, moves {fmt_bytes(op.cost().bytes)})"
            ) from None
        raise


def _gpu_bytes(device: str) -> int:
    import torch

    return torch.cuda.get_device_properties(torch.device(device)).total_memory


def measure_op(
    op: Op, device: str = "cuda", budget: Budget | None = None, backend: str | None = None
) -> Measurement:
    """Build, check once, then time `op` on `device`. Raises WrongResult when the check fails."""
    import torch

    if device == "cpu":  # inputs, outputs and the reference check: about twice what it moves
        from gpuperf.measure.env import check_host_memory

        check_host_memory(2 * op.cost().bytes, f"{op.name} ({op.shape})")
    elif device.startswith("cuda") and op.cost().bytes > _gpu_bytes(device):
        raise EnvironmentUnavailable(  # torch would overflow or fail to allocate midway
            f"{op.name} ({op.shape}) moves {fmt_bytes(op.cost().bytes)}, more than this GPU holds"
        )
    try:
        with _oom_as_error(op):
            kernel = build(op, device, backend)
            with kernel.context():
                err = kernel.check()
                if not err <= kernel.tol:  # also catches nan
                    raise WrongResult(
                        f"{op.name} ({op.shape}): output differs from the reference by "
                        f"{err:.2%} (tolerance {kernel.tol:.2%}); not timed"
                    )
                timing = time_fn(kernel.run, device, budget)
    finally:
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    cost = op.cost()
    t = timing.median_s
    return Measurement(
        op=op,
        timing=timing,
        tflops=cost.flops / t / 1e12 if t else 0.0,
        gbps=cost.bytes / t / 1e9 if t else 0.0,
        check_err=err,
        detail=dict(kernel.detail),
    )
