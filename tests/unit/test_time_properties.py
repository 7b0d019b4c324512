"""Properties of the time model (hypothesis): more work never takes less time; a faster GPU
(more peak FLOP/s or more bandwidth) never takes more."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuperf.hardware.loader import load_gpu
from gpuperf.hardware.spec import GpuSpec, ModelParams
from gpuperf.perfmodel.attention import attention_time
from gpuperf.perfmodel.gemm import gemm_time
from gpuperf.perfmodel.membound import copy_time, elementwise_time, norm_time
from gpuperf.perfmodel.ops import Attention, Copy, Elementwise, Gemm, Norm
from gpuperf.perfmodel.roofline import op_time

GPUS = [dataclasses.replace(load_gpu(n), params=ModelParams()) for n in ("h100", "a100-sxm4-80gb")]
GPUS += [load_gpu("h100"), load_gpu("h200")]  # the calibrated parameters that ship
EPS = 1e-12  # relative slack for float rounding only

gpus = st.sampled_from(GPUS)
# Multiples of 8 keep bf16 leading dimensions 16-byte aligned: crossing alignment classes
# legitimately changes the kernel (2049 is slower than 2056).
dim8 = st.integers(1, 1024).map(lambda x: 8 * x)
grow8 = st.integers(1, 512).map(lambda x: 8 * x)


def no_faster(before: float, after: float) -> bool:
    return after >= before * (1 - EPS)


@settings(max_examples=150, deadline=None)
@given(gpus, dim8, dim8, dim8, st.integers(1, 4), st.sampled_from("mnkb"), grow8)
def test_gemm_time_never_falls_when_a_size_grows(gpu, m, n, k, batch, which, inc):
    op = Gemm("g", m, n, k, batch=batch)
    field = {"m": "m", "n": "n", "k": "k", "b": "batch"}[which]
    bigger = dataclasses.replace(op, **{field: getattr(op, field) + (inc if which != "b" else 1)})
    assert no_faster(gemm_time(op, gpu).time, gemm_time(bigger, gpu).time)


@settings(max_examples=150, deadline=None)
@given(gpus, st.integers(1, 64), st.integers(1, 4096), st.integers(1, 32768))
def test_skinny_gemm_time_never_falls_with_m(gpu, m, grow, nk):
    # Decode-like M (any value, M is not a leading dimension) against aligned weights.
    n = k = 8 * (1 + nk % 2048)
    before = gemm_time(Gemm("g", m, n, k), gpu).time
    assert no_faster(before, gemm_time(Gemm("g", m + grow, n, k), gpu).time)


attn_shapes = st.tuples(
    st.integers(1, 16),  # batch
    st.sampled_from([(8, 8), (32, 8), (32, 32), (64, 8), (16, 2)]),  # heads, kv_heads
    st.integers(1, 4096),  # q_len
    st.integers(0, 8192),  # extra keys beyond q_len
    st.sampled_from([64, 128]),
    st.booleans(),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(gpus, attn_shapes, st.sampled_from(["batch", "q", "kv", "heads"]), st.integers(1, 2048))
def test_attention_time_never_falls_when_a_size_grows(gpu, shape, which, inc):
    b, (h, kvh), q, extra, d, causal, bwd = shape
    op = Attention("a", b, h, kvh, q, q + extra, d, causal=causal, backward=bwd)
    if which == "batch":
        bigger = dataclasses.replace(op, batch=b + 1)
    elif which == "q":  # more queries over the same extra context
        bigger = dataclasses.replace(op, q_len=q + inc, kv_len=q + inc + extra)
    elif which == "kv":
        bigger = dataclasses.replace(op, kv_len=q + extra + inc)
    else:  # more query heads per KV head
        bigger = dataclasses.replace(op, heads=h + kvh)
    assert no_faster(attention_time(op, gpu).time, attention_time(bigger, gpu).time)


@settings(max_examples=150, deadline=None)
@given(gpus, st.integers(1, 1 << 28), st.integers(1, 1 << 26), st.integers(1, 3))
def test_streaming_time_never_falls_with_size(gpu, n, inc, n_in):
    a = elementwise_time(Elementwise("e", "add", n, n_in=n_in), gpu).time
    b = elementwise_time(Elementwise("e", "add", n + inc, n_in=n_in), gpu).time
    assert no_faster(a, b)
    assert no_faster(copy_time(Copy("c", n), gpu).time, copy_time(Copy("c", n + inc), gpu).time)


@settings(max_examples=150, deadline=None)
@given(gpus, st.integers(1, 65536), st.integers(1, 65536), st.integers(1, 4096), st.booleans())
def test_norm_time_never_falls_with_rows_or_cols(gpu, rows, cols, inc, grow_rows):
    op = Norm("n", "rmsnorm", rows, cols)
    bigger = (
        dataclasses.replace(op, rows=rows + inc)
        if grow_rows
        else Norm("n", "rmsnorm", rows, cols + inc)
    )
    assert no_faster(norm_time(op, gpu).time, norm_time(bigger, gpu).time)


def faster(gpu: GpuSpec, peak_x: float, bw_x: float) -> GpuSpec:
    peaks = {dt: v * peak_x for dt, v in gpu.peak_flops.items()}
    return dataclasses.replace(gpu, peak_flops=peaks, hbm_bw=gpu.hbm_bw * bw_x)


any_op = st.one_of(
    st.builds(lambda m, n, k: Gemm("g", m, n, k), st.integers(1, 16384), dim8, dim8),
    st.builds(
        lambda b, q, kv, c, bwd: Attention("a", b, 32, 8, q, q + kv, 128, c, backward=bwd),
        st.integers(1, 8),
        st.integers(1, 8192),
        st.integers(0, 8192),
        st.booleans(),
        st.booleans(),
    ),
    st.builds(lambda n: Elementwise("e", "silu", n, flops_per_elem=4.0), st.integers(1, 1 << 28)),
    st.builds(lambda r, c: Norm("n", "layernorm", r, c), st.integers(1, 1 << 16), dim8),
    st.builds(lambda n: Copy("c", n), st.integers(1, 1 << 31)),
)
factor = st.floats(1.0, 8.0)


@settings(max_examples=200, deadline=None)
@given(gpus, any_op, factor, factor)
def test_more_peak_or_bandwidth_never_slows_an_op(gpu, op, peak_x, bw_x):
    base = op_time(op, gpu).time
    assert op_time(op, faster(gpu, peak_x, 1.0)).time <= base * (1 + EPS)
    assert op_time(op, faster(gpu, 1.0, bw_x)).time <= base * (1 + EPS)
    assert op_time(op, faster(gpu, peak_x, bw_x)).time <= base * (1 + EPS)
