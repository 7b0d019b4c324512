"""op_time dispatch, ridge, intensity, the naive roofline and how terms combine."""

from __future__ import annotations

import dataclasses

import pytest

from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_gpu, load_system
from gpuperf.hardware.spec import ModelParams
from gpuperf.perfmodel.ops import (
    Attention,
    Collective,
    Copy,
    Elementwise,
    Embedding,
    Gemm,
    Norm,
    Reduce,
)
from gpuperf.perfmodel.roofline import (
    finish,
    intensity,
    matmul_peak,
    op_time,
    ridge,
    roofline_time,
)

# The built-in H100 SXM profile with default (uncalibrated) parameters, so hand numbers hold.
H100 = dataclasses.replace(load_gpu("h100"), params=ModelParams())
FLOOR = ModelParams().kernel_floor_s


def test_ridge_h100_bf16_matches_reference():
    # modeling-facts §1b: H100 SXM dense BF16 ridge = 989.4e12 / 3.35e12 = 295 FLOP/byte.
    assert ridge(H100, "bf16") == pytest.approx(295.3, abs=0.1)


def test_intensity_of_square_gemm():
    # 2·n³ FLOPs over 3·n²·2 bytes = n/3 FLOP/byte for bf16.
    assert intensity(Gemm("g", 3072, 3072, 3072).cost()) == pytest.approx(1024.0)


def test_roofline_time_is_the_larger_bound():
    big = Gemm("g", 8192, 8192, 8192).cost()
    assert roofline_time(big, H100, "bf16") == pytest.approx(2 * 8192**3 / 989.4e12)
    copy = Copy("c", 2**30).cost()
    assert roofline_time(copy, H100, "bf16") == pytest.approx(2 * 2**30 / 3.35e12)


def test_fp32_matmul_uses_cuda_cores_unless_tf32_allowed():
    assert matmul_peak(H100, "fp32") == pytest.approx(66.9e12)
    assert matmul_peak(H100, "tf32") == pytest.approx(494.7e12)
    tf32_ok = dataclasses.replace(H100, params=ModelParams(fp32_matmul_tf32=1.0))
    assert matmul_peak(tf32_ok, "fp32") == pytest.approx(494.7e12)


def test_missing_peak_is_an_input_error():
    a100 = load_gpu("a100-sxm4-80gb")
    with pytest.raises(InputError, match="fp8"):
        op_time(Gemm("g", 1024, 1024, 1024, dtype="fp8"), a100)


def test_finish_combines_terms_and_names_the_bound():
    t = finish(3.0, 2.0, 1.0, {})
    assert (t.time, t.bound) == (4.0, "compute")
    assert finish(2.0, 3.0, 1.0, {}).bound == "memory"
    lat = finish(1e-7, 2e-7, 4e-6, {})
    assert lat.bound == "latency" and lat.time == pytest.approx(4.2e-6)


@pytest.mark.parametrize(
    "op",
    [
        Gemm("g", 512, 512, 512),
        Attention("a", 1, 8, 8, 256, 256, 64),
        Elementwise("e", "add", 1 << 20, n_in=2),
        Reduce("r", "sum", 1024, 1024),
        Norm("n", "rmsnorm", 1024, 4096),
        Norm("s", "softmax", 1024, 4096),
        Embedding("emb", 2048, 4096),
        Copy("c", 1 << 20),
    ],
)
def test_every_compute_op_kind_dispatches(op):
    t = op_time(op, H100)
    assert t.time >= FLOOR
    assert t.time == pytest.approx(max(t.t_math, t.t_mem) + t.t_overhead)
    assert t.bound in ("compute", "memory", "latency")


def test_memo_shares_shapes_not_names_and_follows_the_spec():
    a = op_time(Gemm("L0/up", 4096, 11008, 4096), H100)
    b = op_time(Gemm("L1/up", 4096, 11008, 4096), H100)
    assert a is b
    slow = dataclasses.replace(H100, params=ModelParams(gemm_eff=0.4))
    assert op_time(Gemm("L0/up", 4096, 11008, 4096), slow).time > 1.5 * a.time


def test_collectives_go_to_comm():
    from gpuperf.perfmodel import comm

    system = load_system("dgx-h100")
    op = Collective("ar", "allreduce", 1 << 26, 8)
    assert op_time(op, system.gpu, system).time == pytest.approx(
        comm.collective_time(op, system.gpu, system).time
    )


@pytest.mark.parametrize(
    "op",
    [Gemm("g", 0, 4096, 4096), Attention("a", 0, 8, 8, 128, 128, 64), Copy("c", 0)],
)
def test_empty_ops_take_no_time(op):
    assert op_time(op, H100).time == 0.0
