"""The pointwise kernels of a Hugging Face layer as its modeling code runs them, each timed alone.

An eager LlamaRMSNorm and apply_rotary_pos_emb run most of their kernels on broadcast or strided
operands (x * rsqrt(var) with var [.., 1], weight * x with weight [hidden], q * cos on q
transposed to [b, heads, T, d], the halves of rotate_half), or as a widening cast; PyTorch's
TensorIterator then takes its non-vectorized kernel (elementwise_kernel, unrolled_elementwise_
kernel, CatArrayBatchedCopy), whose index arithmetic per element, not the bytes, sets its pace.
This times each expression exactly as the modeling code writes it, beside the contiguous
kernels of the same layer, and records the kernel PyTorch ran (torch.profiler).

    python3 benchmarks/device/eager_ew_probe.py OUT_DIR

Writes OUT_DIR/eager_ew.json in the sweep format (gpuperf/measure/results.py): each row's "op"
is the kernel as gpuperf's eager layer describes it (Elementwise/Copy with generic=True for the
non-vectorized path), so benchmarks/accuracy.py predicts it and `gpuperf calibrate` fits on it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuperf.perfmodel.ops import Copy, Elementwise, Reduce  # noqa: E402
from gpuperf.perfmodel.ops_io import op_to_dict  # noqa: E402

# (tokens, hidden, heads, head_dim): Llama-3-8B's and Qwen3-0.6B's widths at several lengths
SHAPES = [(2048, 4096, 32, 128), (8192, 4096, 32, 128), (32768, 4096, 32, 128),
          (16384, 1024, 16, 128), (4096, 2048, 16, 128), (65536, 1024, 8, 128)]  # fmt: skip


def _ew(name, fn, n, dt, out=None, n_in=1, generic=False, flops=1.0):  # noqa: ANN001, ANN202
    return Elementwise(name, fn, n, n_in, 1, dt, out, flops, generic)


def cases(torch, T: int, h: int, H: int, D: int) -> list[tuple]:  # noqa: ANN001
    """(op, expression to time) for one shape; inputs made once, outside the timed call."""
    dev, bf, f32 = "cuda", torch.bfloat16, torch.float32
    x = torch.randn(1, T, h, device=dev, dtype=bf)
    y = torch.randn(1, T, h, device=dev, dtype=bf)
    x32 = x.float()
    var = x32.pow(2).mean(-1, keepdim=True)
    r = torch.rsqrt(var + 1e-6)
    w = torch.randn(h, device=dev, dtype=bf)
    w1 = 1.0 + w.float()
    q = torch.randn(1, T, H * D, device=dev, dtype=bf).view(1, T, H, D).transpose(1, 2)
    cos = torch.randn(1, T, D, device=dev, dtype=bf).unsqueeze(1)
    sin = torch.randn(1, T, D, device=dev, dtype=bf).unsqueeze(1)
    x1, x2 = q[..., : D // 2], q[..., D // 2 :]
    neg = -x2
    rot = torch.cat((neg, x1), dim=-1)
    qc, rs = q * cos, rot * sin
    n, nq = T * h, T * H * D
    tag = f"T{T}/h{h}"
    return [
        (_ew(f"hf/{tag}/norm/cast_f32", "cast", n, "bf16", "fp32", generic=True, flops=0.0),
         lambda: x.to(f32)),
        (_ew(f"hf/{tag}/norm/pow", "pow", n, "fp32"), lambda: x32.pow(2)),
        (Reduce(f"hf/{tag}/norm/mean", "mean", T, h, 1, "fp32"),
         lambda: x32.mean(-1, keepdim=True)),
        (_ew(f"hf/{tag}/norm/mul", "mul", n, "fp32", generic=True), lambda: x32 * r),
        (_ew(f"hf/{tag}/norm/cast_back", "cast", n, "fp32", "bf16", flops=0.0),
         lambda: x32.to(bf)),
        (_ew(f"hf/{tag}/norm/mul_weight", "mul", n, "bf16", generic=True), lambda: w * x),
        (_ew(f"hf/{tag}/norm/mul_weight_f32", "mul", n, "fp32", generic=True),
         lambda: x32 * w1),
        (_ew(f"hf/{tag}/rope/mul_cos", "mul", nq, "bf16", generic=True), lambda: q * cos),
        (_ew(f"hf/{tag}/rope/neg", "neg", nq // 2, "bf16", generic=True), lambda: -x2),
        (Copy(f"hf/{tag}/rope/cat", nq * 2, "bf16", generic=True),
         lambda: torch.cat((neg, x1), dim=-1)),
        (_ew(f"hf/{tag}/rope/mul_sin", "mul", nq, "bf16", generic=True), lambda: rot * sin),
        (_ew(f"hf/{tag}/rope/add", "add", nq, "bf16", n_in=2, generic=True), lambda: qc + rs),
        (_ew(f"hf/{tag}/residual", "add", n, "bf16", n_in=2), lambda: x + y),
        (_ew(f"hf/{tag}/mlp/mul", "mul", n, "bf16", n_in=2), lambda: x * y),
    ]  # fmt: skip


def kernel_names(torch, fn) -> list[str]:  # noqa: ANN001
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name[:120] for e in prof.events() if e.device_type.name == "CUDA"})


def main() -> int:
    import torch

    from gpuperf.fileio import json_safe, write_text
    from gpuperf.measure.env import environment
    from gpuperf.measure.timing import Budget, time_fn

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    data = {"env": environment("cuda"), "kind": "eager_ew", "rows": []}
    path = out / "eager_ew.json"
    budget = Budget(warmup_ms=10, rep_ms=40)
    for shape in SHAPES:
        for op, fn in cases(torch, *shape):
            t = time_fn(fn, "cuda", budget)
            cost = op.cost()
            data["rows"].append({
                "op": op_to_dict(op), "name": op.name, "kind": op.kind, "shape": op.shape,
                "dtype": op.dtype, "flops": cost.flops, "bytes": cost.bytes,
                "measured_ms": t.median_s * 1e3, "p10_ms": t.p10_s * 1e3, "p90_ms": t.p90_s * 1e3,
                "n": t.n, "gbps": cost.bytes / t.median_s / 1e9, "method": t.method,
                "detail": {"kernels": kernel_names(torch, fn)},
            })  # fmt: skip
            print(f"{op.name:40s} {t.median_s * 1e6:9.1f} us {cost.bytes / t.median_s / 1e9:7.0f}"
                  f" GB/s", flush=True)  # fmt: skip
        torch.cuda.empty_cache()
        write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
