"""op_to_dict / op_from_dict: exact round trip for every op type, through JSON too."""

import json

import pytest

from gpuperf.errors import InputError
from gpuperf.perfmodel import ops
from gpuperf.perfmodel.ops_io import OP_TYPES, op_from_dict, op_to_dict

EXAMPLES = [
    ops.Gemm("L0/mlp/up", m=2048, n=11008, k=4096, dtype="fp8", batch=8),
    ops.GroupedGemm("L0/mlp/experts_gate_up", tokens=512, topk=8, experts=128, n=1536, k=2048),
    ops.Attention("L0/attn", 2, 32, 8, 1, 4096, 128, causal=True, kv_dtype="fp8", backward=True),
    ops.Elementwise("L0/act", "silu", 1 << 20, n_in=1, out_dtype="fp32", flops_per_elem=4.0),
    ops.Reduce("topk", "topk", 16, 32000, out_cols=2, dtype="fp32"),
    ops.Norm("L0/norm", "rmsnorm", 2048, 4096, residual=True, backward=True),
    ops.Embedding("embed", 2048, 4096),
    ops.Copy("kv", 123457, dtype="fp16"),
    ops.Collective("tp/ar", "reducescatter", 1 << 26, 8, dtype="fp32"),
    ops.P2P("pp/send", 1 << 22),
    ops.Scan("L0/mamba/scan.dx", "dx", 2, 4096, 64, 64, 128, 8, 128, "bf16", "fp32"),
]


def test_examples_cover_every_op_type():
    assert {type(op).__name__ for op in EXAMPLES} == set(OP_TYPES)


@pytest.mark.parametrize("op", EXAMPLES, ids=lambda op: type(op).__name__)
def test_round_trip_through_json(op):
    d = op_to_dict(op)
    assert d["type"] == type(op).__name__
    back = op_from_dict(json.loads(json.dumps(d)))
    assert back == op
    assert type(back) is type(op)
    assert back.cost() == op.cost()


def test_dict_has_every_field():
    d = op_to_dict(ops.Gemm("g", m=1, n=2, k=3))
    assert d == {"type": "Gemm", "name": "g", "m": 1, "n": 2, "k": 3, "dtype": "bf16", "batch": 1,
                 "wdtype": None, "scales": "", "wgrad": False}  # fmt: skip


def test_weight_only_gemm_reads_its_weights_at_their_width():
    """W4A16: a 4096x4096 int4 weight is 8 MiB, half of int8 and a quarter of bf16."""
    w4 = ops.Gemm("g", m=1, n=4096, k=4096, wdtype="int4").cost()
    bf = ops.Gemm("g", m=1, n=4096, k=4096).cost()
    assert w4.bytes_read == 2 * 4096 + 4096 * 4096 // 2
    assert bf.bytes_read - w4.bytes_read == 4096 * 4096 * 3 // 2
    assert w4.flops == bf.flops


def test_unknown_type_suggests_a_close_name():
    with pytest.raises(InputError, match="did you mean 'Gemm'"):
        op_from_dict({"type": "Gem", "name": "g", "m": 1, "n": 1, "k": 1})


def test_unknown_field_is_an_error_not_silently_dropped():
    with pytest.raises(InputError, match="no field"):
        op_from_dict({"type": "Copy", "name": "c", "nbytes": 4, "stride": 2})


def test_missing_field_is_an_error():
    with pytest.raises(InputError, match="bad Gemm"):
        op_from_dict({"type": "Gemm", "name": "g", "m": 1})
    with pytest.raises(InputError, match="'type'"):
        op_from_dict({"name": "g"})


@pytest.mark.parametrize(("field", "value"), [("dtype", "zz"), ("dtype", "int4"), ("dtype", [1])])
def test_dtypes_are_known_names_and_int4_only_for_weights(field, value):
    # an unknown dtype reached the time model and raised KeyError there
    with pytest.raises(InputError, match=f"bad Gemm record: {field} must be a dtype"):
        op_from_dict({"type": "Gemm", "name": "g", "m": 1, "n": 1, "k": 1, field: value})
    ok = op_from_dict({"type": "Gemm", "name": "g", "m": 1, "n": 1, "k": 1, "wdtype": "int4"})
    assert ok.wdtype == "int4"


def test_a_weight_gradient_keeps_the_fast_path_at_an_odd_token_count():
    """dW = dYᵀ @ X leads with the weight's dims (align_probe.json: 1500 tokens ran as 1504)."""
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel.gemm import is_aligned
    from gpuperf.perfmodel.roofline import op_time

    odd = ops.Gemm("l.wgrad", 4096, 4096, 1500, wgrad=True)
    even = ops.Gemm("l.wgrad", 4096, 4096, 1504, wgrad=True)
    forward = ops.Gemm("l", 1500, 4096, 4100)  # K = 4100 leads: off the fast path
    assert is_aligned(odd) and is_aligned(even) and not is_aligned(forward)
    gpu = load_gpu("h100")
    assert op_time(odd, gpu).time <= op_time(even, gpu).time
    assert not is_aligned(ops.Gemm("l", 4096, 4096, 1500))  # the same shape as a forward
