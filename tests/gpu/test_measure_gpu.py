"""gpuperf.measure on a real GPU: checked kernels, the timer against triton's do_bench, physics
bounds (nothing beats the datasheet peak), CUDA-graph batching, NCCL through torchrun."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

from gpuperf.measure.kernels import measure_op  # noqa: E402
from gpuperf.measure.timing import Budget, time_fn  # noqa: E402
from gpuperf.workloads import single_op as so  # noqa: E402

B = Budget(warmup_ms=10, rep_ms=50)


def _spec():
    try:
        from gpuperf.hardware.detect import detect_gpu

        return detect_gpu(0)
    except Exception:
        return None


def test_gemm_bf16_checked_and_below_peak():
    m = measure_op(so.gemm(4096), "cuda", B)
    assert m.check_err < 0.02 and "cuda events" in m.timing.method
    spec = _spec()
    if spec is not None:
        assert m.tflops * 1e12 <= 1.05 * spec.peak("bf16")
        assert m.tflops * 1e12 >= 0.3 * spec.peak("bf16")  # cuBLAS on a square 4K is not slow


def test_timer_agrees_with_triton_do_bench():
    triton_testing = pytest.importorskip("triton.testing")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    ours = time_fn(lambda: a @ b, "cuda", B).median_s * 1e3
    theirs = triton_testing.do_bench(lambda: a @ b, warmup=10, rep=50, return_mode="median")
    assert ours == pytest.approx(theirs, rel=0.10)


def test_tiny_kernels_are_timed_in_a_cuda_graph():
    m = measure_op(so.elementwise("add", 1024), "cuda", B)
    assert "cuda-graph" in m.timing.method
    assert 0.5e-6 < m.timing.median_s < 20e-6


def test_copy_with_l2_flush_does_not_beat_hbm():
    spec = _spec()
    m = measure_op(so.copy(1 << 30), "cuda", B)
    if spec is not None:
        assert m.gbps * 1e9 <= 1.05 * spec.hbm_bw


@pytest.mark.parametrize("backend", ["flash", "efficient", "auto"])
def test_attention_backends_checked(backend):
    # The efficient (mem-efficient) backend has no GQA kernel with a mask on H100 with torch 2.11
    # ("No available kernel", seen in benchmarks/results/*/attention_backends.json): test it on MHA.
    kv_heads = 32 if backend == "efficient" else 8
    op = so.attention(batch=1, heads=32, kv_heads=kv_heads, seq=128, kv_len=2048, causal=True)
    m = measure_op(op, "cuda", B, backend=backend)
    assert m.check_err < 0.02


def test_fp8_gemm_on_hopper():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 needs compute capability 8.9+")
    m = measure_op(so.gemm(4096, dtype="fp8"), "cuda", B)
    assert m.check_err < 0.02


@pytest.mark.multigpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_nccl_allreduce_two_gpus():
    from gpuperf.measure.collectives import Launch, run_collective

    env, rows = run_collective("allreduce", [1 << 20, 1 << 28], Launch(nproc=2), timeout_s=180)
    assert env["backend"] == "nccl"
    assert all(r["wrong"] == 0 for r in rows)
    assert rows[-1]["busbw_gbps"] > 10  # NVLink or PCIe, not a broken setup


@pytest.mark.parametrize(
    "op",
    [so.gemm(64, 4096, 4096, "fp8", scales="row"), so.gemm(4, 4096, 4096, wdtype="int4"),
     so.gemm(4, 4096, 4096, wdtype="int8")],
    ids=["fp8-rowwise", "w4", "w8"],
)  # fmt: skip
def test_quantized_gemms_checked_and_predicted_within_2x(op):
    """Each of PyTorch's quantized kernels runs, agrees with its own dequantized weights, and
    lands within 2x of the prediction (the accuracy table holds the tight numbers)."""
    from gpuperf.perfmodel.roofline import op_time

    m = measure_op(op, "cuda", B)
    assert m.check_err < 0.02 and m.timing.median_s > 0
    spec = _spec()
    if spec is not None and spec.calibrated:
        assert 0.5 < op_time(op, spec).time / m.timing.median_s < 2.0


def test_grouped_gemm_of_moe_experts():
    from gpuperf.perfmodel.ops import GroupedGemm
    from gpuperf.perfmodel.roofline import op_time

    op = GroupedGemm("experts", tokens=512, topk=8, experts=128, n=1536, k=2048)
    m = measure_op(op, "cuda", B)
    assert m.check_err < 0.02 and m.detail["touched"] == 128
    spec = _spec()
    if spec is not None and spec.calibrated:
        assert 0.5 < op_time(op, spec).time / m.timing.median_s < 2.0


def test_fp8_grouped_gemm_of_moe_experts_on_hopper():
    from gpuperf.perfmodel.ops import GroupedGemm

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("torch._scaled_grouped_mm runs on Hopper")
    # 512 tokens: at 2-8K tokens this K gets PyTorch's wide fp8 tile, slow with slow accumulation
    op = GroupedGemm("experts", tokens=512, topk=8, experts=128, n=1536, k=2048, dtype="fp8")
    m = measure_op(op, "cuda", B)
    assert m.check_err < 0.05 and m.detail["scales"] == "rowwise"
    assert m.detail["rows_padded"] % 16 == 0 and m.detail["rows_padded"] >= 512 * 8
    bf16 = measure_op(GroupedGemm("experts", 512, 8, 128, 1536, 2048), "cuda", B)
    assert m.timing.median_s < bf16.timing.median_s  # fp8's products at twice the rate
