"""The real eager decoder layer on the CPU: the same kernels gpuperf predicts (counted with a
TorchDispatchMode trace of aten ops, views excluded), the same numbers as an independent fp64
reference, timed, and compared with a prediction."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpuperf.errors import InputError  # noqa: E402
from gpuperf.hardware.loader import load_gpu  # noqa: E402
from gpuperf.measure import eager_layer as el  # noqa: E402
from gpuperf.measure.timing import Budget  # noqa: E402
from gpuperf.perfmodel.calibrate import with_params  # noqa: E402
from gpuperf.step.run import predict_ops  # noqa: E402
from gpuperf.workloads.config import ModelConfig, load_model  # noqa: E402
from gpuperf.workloads.scenario import Scenario  # noqa: E402

# GQA (4 query heads on 2 KV heads), head_dim 16.
TINY = ModelConfig(name="tiny", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100)  # fmt: skip
FAST = Budget(warmup_ms=1, rep_ms=5)
SCENARIOS = {
    "prefill-bf16": Scenario(mode="prefill", batch=2, seq=16, dtype="bf16"),
    "decode-bf16": Scenario(mode="decode", batch=2, ctx=24, dtype="bf16"),
    "prefill-fp32": Scenario(mode="prefill", batch=2, seq=16, dtype="fp32"),
    "decode-fp16": Scenario(mode="decode", batch=3, ctx=7, dtype="fp16"),
}


def _kind(aten: str) -> str:
    """The predicted op kind an aten kernel stands for."""
    if aten in ("aten::mm", "aten::addmm"):
        return "gemm"
    if aten.startswith("aten::_scaled_dot_product"):
        return "attention"
    return {"aten::cat": "copy", "aten::mean": "reduce"}.get(aten.split(".")[0], "elementwise")


@pytest.mark.parametrize("name", SCENARIOS)
def test_kernels_match_prediction_one_for_one(name):
    sc = SCENARIOS[name]
    layer = el.build_layer(el.layer_shape(TINY, sc), "cpu")
    run = el.aten_kernels(layer.run)
    ops = el.layer_ops(TINY, sc)
    # 40 kernels in bf16/fp16 (RMSNorm 8 x 2, q/k/v 3, RoPE 10, cat 2, SDPA 1, o 1, adds 2,
    # MLP 5); fp32 drops the 4 casts of the two norms.
    assert len(ops) == (36 if sc.dtype == "fp32" else 40)
    assert len(run) == len(ops)
    assert [_kind(a) for a in run] == [op.kind for op in ops]


@pytest.mark.parametrize("name", SCENARIOS)
def test_layer_matches_fp64_reference(name):
    sc = SCENARIOS[name]
    layer = el.build_layer(el.layer_shape(TINY, sc), "cpu")
    out, ref = el.reference_delta(layer, seqs=2)
    assert out.shape == (2, 1 if sc.mode == "decode" else 16, 64)
    err = el.check_layer(layer)
    assert err <= el.LAYER_TOLERANCE[sc.dtype]
    if sc.dtype == "fp32":
        assert err < 1e-5  # only fp32 rounding


def test_reference_catches_a_wrong_layer(monkeypatch):
    """The check is not vacuous: RoPE rotating the wrong way (decode at position 24), or prefill
    attention without the causal mask, fail it by several times the tolerance."""
    decode = el.build_layer(el.layer_shape(TINY, SCENARIOS["decode-bf16"]), "cpu")
    rotate = el._rotate_half
    monkeypatch.setattr(el, "_rotate_half", lambda x: -rotate(x))
    assert el.check_layer(decode) > 0.2
    monkeypatch.undo()
    layer = el.build_layer(el.layer_shape(TINY, SCENARIOS["prefill-bf16"]), "cpu")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda *a, **k: sdpa(*a, **{**k, "is_causal": False}))  # fmt: skip
    assert el.check_layer(layer) > 0.3


def test_shapes_follow_the_config():
    s = el.layer_shape(load_model("llama3-8b"), Scenario(mode="decode", batch=4, ctx=100))
    assert (s.batch, s.q_len, s.past, s.kv_len) == (4, 1, 100, 101)
    assert (s.hidden, s.heads, s.kv_heads, s.head_dim, s.inter) == (4096, 32, 8, 128, 14336)
    p = el.layer_shape(load_model("qwen2-7b"), Scenario(mode="prefill", batch=1, seq=8))
    assert (p.q_len, p.past, p.qkv_bias, p.linear_bias) == (8, 0, True, False)


def test_qkv_bias_is_addmm_not_an_extra_kernel():
    cfg = ModelConfig(name="b", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, vocab_size=10, qkv_bias=True)  # fmt: skip
    sc = Scenario(mode="prefill", batch=1, seq=4)
    layer = el.build_layer(el.layer_shape(cfg, sc), "cpu")
    run = el.aten_kernels(layer.run)
    assert run.count("aten::addmm") == 3 and len(run) == len(el.layer_ops(cfg, sc)) == 40
    assert el.check_layer(layer) <= el.LAYER_TOLERANCE["bf16"]


@pytest.mark.parametrize(
    ("model", "sc", "why"),
    [
        ("mixtral-8x7b", Scenario(), "MoE"),
        ("gpt3-175b", Scenario(), "layernorm/plain/learned"),
        ("llama2-7b", Scenario(dtype="fp8"), "dtype fp8"),
        ("llama2-7b", Scenario(mode="train"), "mode train"),
    ],
)
def test_unsupported_layers_say_why(model, sc, why):
    with pytest.raises(InputError, match=why):
        el.layer_shape(load_model(model), sc)


def test_measure_and_compare_on_cpu():
    sc = Scenario(mode="decode", batch=2, ctx=24)
    run = el.measure_layer(TINY, sc, "cpu", FAST)
    assert run.kernels_run == len(run.ops) == 40
    assert run.check_err <= el.LAYER_TOLERANCE["bf16"]
    assert run.eager.median_s > 0 and run.eager.method.endswith("cpu perf_counter")
    assert run.graph is None and run.host_per_kernel_s is None  # CUDA only
    # No GPU profile: measured rows only.
    rows = el.compare(run, None, sc)
    assert [r["what"] for r in rows] == ["GPU time", "with host dispatch"]
    assert rows[0]["measured_ms"] is None and rows[1]["predicted_ms"] is None
    assert rows[1]["measured_ms"] == pytest.approx(run.eager.median_s * 1e3)
    # With a profile: GPU time is the sum of the op times; with host dispatch the simulated queue.
    gpu = load_gpu("h100")
    rows = el.compare(run, gpu, sc)
    sc_eager = Scenario(mode="decode", batch=2, ctx=24, impl="eager")
    pred = predict_ops(run.ops, gpu, sc_eager)
    assert rows[0]["predicted_ms"] == pytest.approx(float(pred.table["time_ms"].sum()))
    # The layer replays one shape, so the attention plan (32.8 ms on the H100 host) is paid once,
    # not per call: compare leaves it out.
    cached = predict_ops(run.ops, with_params(gpu, host_attn_plan_s=0.0), sc_eager)
    assert rows[1]["predicted_ms"] == pytest.approx(cached.total_ms)
    assert pred.total_ms - cached.total_ms == pytest.approx(1e3 * gpu.params.host_attn_plan_s)
    # 40 tiny kernels are host bound: at least 40 x host_dispatch_s.
    assert rows[1]["predicted_ms"] >= 40 * gpu.params.host_dispatch_s * 1e3
    assert run.to_json()["rows"] == rows


def test_compare_with_measured_host_cost():
    sc = Scenario(mode="decode", batch=2, ctx=24)
    run = el.measure_layer(TINY, sc, "cpu", FAST)
    run.host_per_kernel_s = 5e-6  # as if measured on a GPU host
    rows = el.compare(run, load_gpu("h100"), sc)
    assert rows[2]["what"] == "with host dispatch (this layer's host cost)"
    # Host-bound: the simulated end is 40 x 5 µs, plus the last kernel (no HF per-layer cost).
    assert 0.2 <= rows[2]["predicted_ms"] <= 0.2 + 0.02
