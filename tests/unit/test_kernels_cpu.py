"""Real kernels on the CPU: every op kind is built, checked against fp64 and timed."""

import pytest
import torch

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.measure import kernels
from gpuperf.measure.kernels import WrongResult, build, measure_op, rel_err
from gpuperf.measure.kernels_attention import _reference
from gpuperf.measure.timing import Budget
from gpuperf.perfmodel import ops
from gpuperf.workloads import single_op as so

FAST = Budget(warmup_ms=1, rep_ms=5, min_reps=3, max_reps=50)

OPS = [
    so.gemm(64),
    so.gemm(33, 65, 127, "fp32"),
    so.gemm(48, dtype="fp16"),
    so.gemm(32, dtype="fp64"),
    so.gemm(32, dtype="tf32"),
    so.gemm(32, 48, 64, dtype="fp8"),
    so.gemm(32, 48, 64, dtype="int8"),
    ops.Gemm("bmm", m=16, n=24, k=32, batch=3),
    so.attention(batch=2, heads=4, kv_heads=2, seq=64, causal=True),
    so.attention(batch=1, heads=2, seq=1, kv_len=96, causal=True),  # decode
    so.attention(batch=1, heads=2, seq=16, kv_len=80, causal=True),  # chunked prefill
    so.attention(batch=1, heads=2, seq=16, causal=False, dtype="fp32"),
    *[so.elementwise(fn, 4096) for fn in so.ELEMENTWISE_FNS],
    ops.Elementwise("cast", "cast", 4096, dtype="fp32", out_dtype="bf16"),
    *[so.norm(fn, 16, 256) for fn in so.NORM_FNS],
    ops.Norm("addnorm", "rmsnorm", 16, 256, residual=True),
    *[ops.Reduce(fn, fn, 16, 256) for fn in ("sum", "mean", "max", "argmax")],
    ops.Reduce("topk", "topk", 16, 256, out_cols=4),
    ops.Embedding("embed", 32, 128),
    so.copy(10_001),
]


@pytest.mark.parametrize("op", OPS, ids=lambda op: f"{op.name}-{getattr(op, 'dtype', '')}")
def test_every_op_kind_measures_correctly(op):
    m = measure_op(op, "cpu", FAST)
    dtypes = {op.dtype, getattr(op, "out_dtype", None) or op.dtype}
    assert m.check_err <= max(kernels.TOLERANCE[d] for d in dtypes)
    t = m.timing
    assert 0 < t.p10_s <= t.median_s <= t.p90_s and t.n >= 3
    cost = op.cost()
    assert m.tflops == pytest.approx(cost.flops / t.median_s / 1e12)
    assert m.gbps == pytest.approx(cost.bytes / t.median_s / 1e9)


def test_wrong_kernel_is_refused(monkeypatch):
    real = torch.matmul
    monkeypatch.setattr(torch, "matmul", lambda a, b, out: out.copy_(real(a, b) * 1.1))
    with pytest.raises(WrongResult, match="differs from the reference by 10"):
        measure_op(so.gemm(64, dtype="fp32"), "cpu", FAST)


def test_rel_err_hand_values():
    ref = torch.tensor([3.0, 4.0])
    assert rel_err(torch.tensor([3.0, 4.0]), ref) == 0.0
    assert rel_err(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.1)  # 0.5 / 5


def test_attention_mask_is_bottom_right():
    """Queries are the last q_len positions: SDPA's top-left is_causal would fail the check."""
    op = so.attention(batch=1, heads=2, seq=4, kv_len=8, causal=True, dtype="fp32")
    k = build(op, "cpu")
    assert k.check() < 1e-5
    q = torch.randn(1, 2, 4, 16)
    kv = torch.randn(1, 2, 8, 16)
    op16 = so.attention(batch=1, heads=2, seq=4, kv_len=8, head_dim=16, causal=True, dtype="fp32")
    ref = _reference(q, kv, kv, [0, 1], op16, 4)
    top_left = torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True)
    assert rel_err(top_left[0], ref) > 0.1
    full = torch.nn.functional.scaled_dot_product_attention(q[:, :, -1:], kv, kv)
    assert rel_err(full[0], ref[:, -1:]) < 1e-5  # the last query sees every key


def test_ops_without_a_kernel_are_input_errors():
    with pytest.raises(InputError, match="rope"):
        measure_op(ops.Elementwise("r", "rope", 64), "cpu", FAST)
    with pytest.raises(InputError, match="gpuperf measure allreduce"):
        measure_op(ops.Collective("c", "allreduce", 1024, 2), "cpu", FAST)
    with pytest.raises(InputError, match="backend"):
        measure_op(so.attention(batch=1, heads=2, seq=8), "cpu", FAST, backend="nope")


def test_out_of_memory_names_the_op(monkeypatch):
    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8 GiB")

    monkeypatch.setattr(kernels, "build", oom)
    with pytest.raises(EnvironmentUnavailable, match=r"gemm/64x64x64 \(64×64×64"):
        measure_op(so.gemm(64), "cpu", FAST)
