"""predict.py: host-dispatch simulation, totals, MFU, generate integration, grouping, JSON contract.

The per-op time model is replaced by a fixed fake (each op takes a known time) so every total
below is hand-computed; the real roofline is tested in its own file.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import numpy as np
import pytest

from gpuperf.hardware.loader import load_gpu
from gpuperf.hardware.spec import ModelParams
from gpuperf.perfmodel import predict as P
from gpuperf.perfmodel.ops import Attention, Elementwise, Gemm, Norm
from gpuperf.perfmodel.optime import OpTime
from gpuperf.workloads.config import load_model
from gpuperf.workloads.scenario import Scenario

US = 1e-6


def gpu(dispatch_s: float = 10 * US, graph_s: float = 1 * US):
    params = ModelParams(host_dispatch_s=dispatch_s, graph_launch_s=graph_s)
    return replace(load_gpu("h100"), params=params)


@pytest.fixture
def fixed_time(monkeypatch):
    """Every op takes `fixed_time.t` seconds (or t_by_name[name]); calls are counted."""

    class Fake:
        t = 1 * US
        by_name: dict[str, float] = {}
        calls = 0

        def __call__(self, op, gpu_, system=None):
            self.calls += 1
            t = self.by_name.get(op.name, self.t)
            return OpTime(time=t, bound="memory", t_mem=t)

    fake = Fake()
    monkeypatch.setattr(P, "_op_time", fake)
    return fake


def ew(name: str, n: int = 1024) -> Elementwise:
    return Elementwise(name=name, fn="add", numel=n, n_in=2)


def reference_dispatch(times, d):
    end, out = 0.0, []
    for i, t in enumerate(times, start=1):
        end = max(i * d, end) + t
        out.append(end)
    return np.array(out)


def test_dispatch_three_tiny_kernels_are_host_bound():
    # Issued at 10, 20, 30 µs; each takes 1 ns: the last ends at 30 µs + 1 ns.
    end = P.simulate_dispatch(np.array([1e-9] * 3), 10 * US)
    assert end[-1] == pytest.approx(30 * US + 1e-9, rel=1e-12)


@pytest.mark.parametrize(
    "times_us, expected_us",
    [
        ([1, 1, 1], [11, 21, 31]),  # host-bound: each waits for its launch
        ([50, 50, 50], [60, 110, 160]),  # GPU-bound: only the first launch shows
        ([30, 1, 1], [40, 41, 42]),  # a long kernel lets the host run ahead
        ([1, 1, 40, 1], [11, 21, 70, 71]),
    ],
)
def test_dispatch_hand_cases(times_us, expected_us):
    end = P.simulate_dispatch(np.array(times_us) * US, 10 * US)
    np.testing.assert_allclose(end / US, expected_us, rtol=1e-12)


def test_dispatch_matches_step_by_step_loop():
    rng = np.random.default_rng(0)
    times = rng.exponential(8 * US, size=500)
    np.testing.assert_allclose(
        P.simulate_dispatch(times, 7 * US), reference_dispatch(times, 7 * US), rtol=1e-9
    )


def test_dispatch_of_3000_kernels_is_well_under_a_millisecond():
    times = np.full(3000, 5 * US)
    P.simulate_dispatch(times, 8 * US)
    start = time.perf_counter()
    for _ in range(20):
        P.simulate_dispatch(times, 8 * US)
    assert (time.perf_counter() - start) / 20 < 0.5e-3


def test_host_bound_step_from_predict_ops(fixed_time):
    sc = Scenario(mode="decode")
    pred = P.predict_ops([ew("a"), ew("b"), ew("c")], gpu(), sc)
    assert pred.total_ms == pytest.approx(0.031)  # 30 µs of launches + the last 1 µs kernel
    assert pred.extra["host_bound"] == pytest.approx(1 - 3 / 31)
    assert any("host-bound" in w and "--cuda-graphs" in w for w in pred.warnings)
    graphs = P.predict_ops([ew("a"), ew("b"), ew("c")], gpu(), replace(sc, cuda_graphs=True))
    # A graph is one launch; each kernel then waits graph_launch_s (1 µs) on the GPU: 3 x (1 + 1).
    assert graphs.total_ms == pytest.approx(0.006)


def test_totals_equal_sum_of_rows_without_host_time(fixed_time):
    fixed_time.t = 2e-3
    ops = [ew(f"L{i}/x") for i in range(4)] + [ew("head", 4096)]
    pred = P.predict_ops(ops, gpu(), None)  # independent kernels: no host in the loop
    assert pred.total_ms == pytest.approx(pred.table["time_ms"].sum()) == pytest.approx(10.0)
    assert pred.table["share"].sum() == pytest.approx(1.0)
    # With a host, 2 ms kernels hide all but the first 10 µs launch.
    hosted = P.predict_ops(ops, gpu(), Scenario())
    assert hosted.total_ms == pytest.approx(10.0 + 0.010)
    assert hosted.warnings == []


def test_identical_ops_are_costed_once_and_rows_keep_names(fixed_time):
    ops = [Gemm(f"L{i}/mlp/up", 16, 32, 64) for i in range(80)] + [Gemm("lm_head", 16, 99, 64)]
    pred = P.predict_ops(ops, gpu(), None)
    assert fixed_time.calls == 2
    assert list(pred.table["layer"][:2]) == ["L0", "L1"] and pred.table["layer"].iloc[-1] == ""
    assert pred.table["flops"].iloc[0] == 2 * 16 * 32 * 64
    assert pred.table["name"].iloc[79] == "L79/mlp/up"


def test_hfu_of_one_gemm_is_flops_over_time_times_peak(fixed_time):
    fixed_time.t = 1e-3
    g = gpu()
    pred = P.predict_ops([Gemm("g", 4096, 4096, 4096)], g)
    assert pred.hfu == pytest.approx(2 * 4096**3 / (1e-3 * g.peak("bf16")))
    assert pred.mfu is None and pred.tokens_per_s is None


def test_json_contract(fixed_time):
    pred = P.predict_ops([Gemm("L0/attn/qkv", 8, 8, 8), ew("L0/add")], gpu(), Scenario())
    obj = json.loads(json.dumps(pred.to_json(), allow_nan=False))
    for key in ("total_ms", "tokens_per_s", "mfu", "hfu", "memory", "fits", "warnings", "ops"):
        assert key in obj
    op = obj["ops"][0]
    for key in ("name", "kind", "flops", "bytes", "intensity", "bound", "time_ms", "share"):
        assert key in op
    assert op["name"] == "L0/attn/qkv" and op["kind"] == "gemm" and op["flops"] == 1024
    assert obj["scenario"]["mode"] == "prefill"


# ------------------------------------------------------------------------------ whole models


def tiny_model_ops(cfg, sc):
    tok = sc.batch if sc.mode == "decode" else sc.batch * sc.seq
    kv = sc.ctx + 1 if sc.mode == "decode" else sc.seq
    q = 1 if sc.mode == "decode" else sc.seq
    ops = []
    for i in range(2):
        ops += [
            Norm(f"L{i}/norm", "rmsnorm", tok, 64),
            Gemm(f"L{i}/qkv", tok, 192, 64),
            Attention(f"L{i}/attn", sc.batch, 4, 4, q, kv, 16),
        ]
    return [*ops, Gemm("lm_head", tok, 100, 64)]


@pytest.fixture
def tiny(monkeypatch, fixed_time):
    monkeypatch.setattr(P, "_build_ops", tiny_model_ops)
    monkeypatch.setattr(P, "_memory", lambda cfg, sc: {"weights": 1e9, "kv_cache": 2e9})
    fixed_time.t = 1e-3  # 1 ms per kernel: host time hidden behind the GPU
    return fixed_time


def test_prefill_mfu_is_2n_per_token(tiny):
    cfg, g = load_model("llama2-7b"), gpu()
    pred = P.predict_model(cfg, g, Scenario(seq=512, batch=2))
    assert pred.total_ms == pytest.approx(7.0 + 0.010)  # 7 kernels x 1 ms + first launch
    assert pred.tokens_per_s == pytest.approx(1024 / 7.010e-3)
    n = 6_738_415_616  # Llama-2-7B, modeling-facts §8
    assert pred.mfu == pytest.approx(2 * n * 1024 / (7.010e-3 * g.peak("bf16")))
    assert pred.mfu_convention.startswith("2N")
    assert pred.memory == {"weights": 1e9, "kv_cache": 2e9} and pred.fits
    assert pred.model == "llama2-7b" and pred.gpu == "h100-sxm5-80gb"


def test_train_mfu_uses_palm_formula(tiny):
    cfg, g = load_model("llama2-7b"), gpu()
    pred = P.predict_model(cfg, g, Scenario(mode="train", seq=2048))
    per_token = 6 * 6_738_415_616 + 12 * 32 * 32 * 128 * 2048  # 6N + 12 L H Q T
    assert pred.mfu == pytest.approx(per_token * 2048 / (pred.total_ms * 1e-3 * g.peak("bf16")))
    assert "PaLM" in pred.mfu_convention


def test_tensor_parallel_mfu_divides_by_gpus(tiny):
    cfg, g = load_model("llama2-7b"), gpu()
    one = P.predict_model(cfg, g, Scenario())
    tp4 = P.predict_model(cfg, g, Scenario(tp=4))
    assert tp4.mfu == pytest.approx(one.mfu / 4)  # same (fake) per-GPU time, 4 GPUs


def test_not_fitting_warns(tiny, monkeypatch):
    monkeypatch.setattr(P, "_memory", lambda cfg, sc: {"weights": 140e9, "kv_cache": 0.0})
    pred = P.predict_model(load_model("llama2-70b"), gpu(), Scenario())
    assert not pred.fits
    assert pred.warnings[0].startswith("does not fit: needs 130 GiB per GPU of 80 GiB")


def test_decode_weights_sum_a_linear_function_exactly():
    pts, w = P.decode_weights(2048, 128)
    assert pts[0] == 2048 and pts[-1] == 2048 + 127 and len(pts) == P.DECODE_POINTS
    assert w.sum() == pytest.approx(128)
    assert (w * pts).sum() == pytest.approx(sum(range(2048, 2048 + 128)))
    pts1, w1 = P.decode_weights(100, 1)
    assert list(pts1) == [100] and list(w1) == [1.0]


def test_generate_is_prefill_plus_integrated_decode(tiny, monkeypatch):
    # 20 µs kernels (> 10 µs launches: the GPU stays the bottleneck); attention adds 1 ns per key.
    def timed(op, g, system=None):
        t = 20 * US + (op.kv_len * 1e-9 if isinstance(op, Attention) else 0.0)
        return OpTime(time=t, bound="memory", t_mem=t)

    monkeypatch.setattr(P, "_op_time", timed)
    cfg = load_model("llama2-7b")
    pred = P.predict_model(cfg, gpu(), Scenario(mode="generate", seq=1000, new_tokens=64))
    prefill_ms = (10 + 7 * 20 + 2 * 1000e-3) * 1e-3  # first launch + 7 kernels + 2 x 1 µs attn
    assert pred.extra["ttft_ms"] == pytest.approx(prefill_ms)
    # decode step at ctx c: 10 µs + 7 x 20 µs + 2 x (c + 1) ns
    steps = sum(10 + 140 + 2 * (c + 1) * 1e-3 for c in range(1000, 1064)) * 1e-3
    assert pred.extra["tpot_ms"] == pytest.approx(steps / 64)
    assert pred.total_ms == pytest.approx(prefill_ms + steps)
    assert pred.tokens_per_s == pytest.approx(64 / (pred.total_ms * 1e-3))
    assert pred.table["name"].iloc[0] == "prefill/L0/norm"
    decode_attn = pred.table[pred.table["name"] == "decode/L0/attn"]
    assert decode_attn["time_ms"].iloc[0] == pytest.approx(
        sum(20 + (c + 1) * 1e-3 for c in range(1000, 1064)) * 1e-3
    )
    assert pred.table["share"].sum() == pytest.approx(1.0)


# ---------------------------------------------------------------------------------- grouping


def test_group_by_op_folds_layers_with_count(tiny):
    pred = P.predict_model(load_model("llama2-7b"), gpu(), Scenario(seq=128))
    g = P.group(pred.table, "op")
    assert list(g["name"]) == ["norm", "qkv", "attn", "lm_head"]
    assert list(g["count"]) == [2, 2, 2, 1]
    assert list(g["layer"]) == ["L0-L1", "L0-L1", "L0-L1", ""]
    assert g["time_ms"].sum() == pytest.approx(pred.table["time_ms"].sum())
    assert g["flops"].iloc[1] == 2 * 2 * 128 * 192 * 64
    assert g["intensity"].iloc[1] == pytest.approx(g["flops"].iloc[1] / g["bytes"].iloc[1])


def test_group_by_layer_and_kind(tiny):
    pred = P.predict_model(load_model("llama2-7b"), gpu(), Scenario(seq=128))
    by_layer = P.group(pred.table, "layer")
    assert list(by_layer["name"]) == ["L0", "L1", "lm_head"]
    assert list(by_layer["time_ms"]) == pytest.approx([3.0, 3.0, 1.0])
    assert list(by_layer["kind"]) == ["layer", "layer", "gemm"]
    by_kind = P.group(pred.table, "kind")
    assert dict(zip(by_kind["name"], by_kind["count"], strict=True)) == {
        "norm": 2,
        "gemm": 3,
        "attention": 2,
    }
    assert by_kind["share"].sum() == pytest.approx(1.0)


def test_group_recomputes_measured_error():
    import pandas as pd

    table = pd.DataFrame(
        {
            "name": ["L0/a", "L1/a"],
            "layer": ["L0", "L1"],
            "kind": ["gemm", "gemm"],
            "shape": ["s", "s"],
            "flops": [1e9, 1e9],
            "bytes": [1e6, 1e6],
            "time_ms": [1.0, 1.0],
            "bound": ["compute", "compute"],
            "share": [0.5, 0.5],
            "measured_ms": [0.5, 1.5],
            "error_pct": [100.0, -33.3],
            "tflops": [2.0, 0.667],
        }
    )
    g = P.group(table, "op")
    assert g["count"].iloc[0] == 2 and g["measured_ms"].iloc[0] == pytest.approx(2.0)
    assert g["error_pct"].iloc[0] == pytest.approx(0.0)
    assert g["tflops"].iloc[0] == pytest.approx(2e9 / 2e-3 / 1e12)


def test_eager_decode_layer_host_cost_applies_to_eager_decode_only():
    import dataclasses

    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel.ops import Copy
    from gpuperf.perfmodel.predict import host_costs
    from gpuperf.workloads.scenario import Scenario

    gpu = load_gpu("h100")
    gpu = dataclasses.replace(
        gpu, params=dataclasses.replace(gpu.params, host_dispatch_s=1e-5, host_decode_layer_s=1e-3)
    )
    ops = [Copy(f"L{i}/x{j}", 1024) for i in range(2) for j in range(3)]
    eager = host_costs(ops, Scenario(mode="decode", impl="eager"), gpu)
    assert list(eager) == [1e-5 + 1e-3, 1e-5, 1e-5, 1e-5 + 1e-3, 1e-5, 1e-5]
    assert host_costs(ops, Scenario(mode="decode", impl="fused"), gpu) == 1e-5
    assert host_costs(ops, Scenario(mode="prefill", impl="eager"), gpu) == 1e-5


def test_attention_plan_is_paid_once_per_eager_decode_step():
    """cuDNN plans each new kv length once, for all layers: one host_attn_plan_s before the first
    attention kernel of an eager decode step, none with graphs or in prefill."""
    import dataclasses

    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel.ops import Attention, Copy
    from gpuperf.perfmodel.predict import host_costs
    from gpuperf.workloads.scenario import Scenario

    gpu = load_gpu("h100")
    p = dataclasses.replace(gpu.params, host_dispatch_s=1e-5, host_decode_layer_s=0.0,
                            host_attn_plan_s=0.02)  # fmt: skip
    gpu = dataclasses.replace(gpu, params=p)
    ops = []
    for i in range(3):
        ops += [Copy(f"L{i}/x", 1024), Attention(f"L{i}/attn", 1, 32, 32, 1, 2048, 128)]
    eager = host_costs(ops, Scenario(mode="decode", impl="eager"), gpu)
    assert list(eager) == pytest.approx([1e-5, 1e-5 + 0.02, 1e-5, 1e-5, 1e-5, 1e-5])
    assert host_costs(ops, Scenario(mode="decode", impl="eager", cuda_graphs=True), gpu) == 0.0
    assert host_costs(ops, Scenario(mode="prefill", impl="eager"), gpu) == 1e-5


def test_generate_charges_each_decode_step_its_host_costs():
    """A generation loop is eager decode steps on a growing cache: per token it costs what one
    decode step at the middle context costs, attention plan included."""
    from gpuperf.api import predict

    gen = predict("llama2-7b", "h200", mode="generate", seq=2048, new_tokens=16, impl="eager")
    pre = predict("llama2-7b", "h200", mode="prefill", seq=2048, impl="eager")
    step = predict("llama2-7b", "h200", mode="decode", ctx=2056, impl="eager")
    per_token = (gen.total_ms - pre.total_ms) / 16
    assert per_token == pytest.approx(step.total_ms, rel=0.02)
    assert step.total_ms > 1e3 * 0.02  # the H200 host's 23.6 ms plan is in it
