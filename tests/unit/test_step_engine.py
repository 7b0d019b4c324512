"""The step engine: host dispatch in closed form, predict_ops, whole models and plans, MFU/HFU,
pipeline and data-parallel composition, generate, grouping, the JSON contract.

Most tests replace the per-op time model by a fixed fake (each op takes a known time) so every
total is hand-computed; the real roofline is tested in its own file.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuperf import api
from gpuperf.hardware.loader import load_gpu
from gpuperf.hardware.spec import ModelParams
from gpuperf.perfmodel.ops import Attention, Collective, Copy, Elementwise, Gemm
from gpuperf.perfmodel.optime import OpTime
from gpuperf.step import cost as C
from gpuperf.step.dispatch import Timed, simulate_dispatch
from gpuperf.step.generate import decode_weights
from gpuperf.step.plan import place
from gpuperf.step.result import group
from gpuperf.step.run import DECODE_POINTS, predict, predict_ops
from gpuperf.workloads.config import ModelConfig, load_model
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer import build_ops

US = 1e-6
TINY = ModelConfig(name="tiny", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100)  # fmt: skip


def gpu(dispatch_s: float = 10 * US, graph_s: float = 1 * US):
    params = ModelParams(host_dispatch_s=dispatch_s, graph_launch_s=graph_s)
    return replace(load_gpu("h100"), params=params)


def run(cfg, g, sc, system=None, nodes=None):
    return predict(cfg, sc, place(cfg, sc, g, system, nodes))


@pytest.fixture
def fixed_time(monkeypatch):
    """Every op takes `fixed_time.t` seconds (or by_kind[kind]); calls are counted."""

    class Fake:
        t = 1 * US
        by_kind: dict[str, float] = {}
        calls = 0

        def __call__(self, op, gpu_, system=None):
            self.calls += 1
            t = self.by_kind.get(op.kind, self.t)
            if op.kind in ("collective", "p2p"):
                return OpTime(time=t, bound="comm", t_comm=t)
            return OpTime(time=t, bound="memory", t_mem=t)

    fake = Fake()
    monkeypatch.setattr(C, "_op_time", fake)
    return fake


def ew(name: str, n: int = 1024) -> Elementwise:
    return Elementwise(name=name, fn="add", numel=n, n_in=2)


def reference_dispatch(times, d):
    end, out = 0.0, []
    for i, t in enumerate(times, start=1):
        end = max(i * d, end) + t
        out.append(end)
    return np.array(out)


# ----------------------------------------------------------------------------------- dispatch


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
    end = simulate_dispatch(np.array(times_us) * US, 10 * US)
    np.testing.assert_allclose(end / US, expected_us, rtol=1e-12)


def test_dispatch_matches_step_by_step_loop():
    times = np.random.default_rng(0).exponential(8 * US, size=500)
    np.testing.assert_allclose(
        simulate_dispatch(times, 7 * US), reference_dispatch(times, 7 * US), rtol=1e-9
    )


runs = st.lists(
    st.tuples(
        st.lists(st.tuples(st.floats(0, 50), st.floats(0, 30)), min_size=1, max_size=6),
        st.integers(1, 5),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=200, deadline=None)
@given(runs)
def test_timed_closed_form_equals_the_kernel_by_kernel_simulation(blocks):
    """Runs of kernels, each repeated, combined with then/times: the same end as simulating
    every kernel of the flattened sequence."""
    timed, times, hosts = Timed(), [], []
    for kernels, repeat in blocks:
        t = np.array([k[0] for k in kernels]) * US
        h = np.array([k[1] for k in kernels]) * US
        timed = timed.then(Timed.of(t, h).times(repeat))
        for _ in range(repeat):
            times += list(t)
            hosts += list(h)
    expected = simulate_dispatch(np.array(times), np.array(hosts))[-1]
    assert timed.end == pytest.approx(expected, rel=1e-9, abs=1e-15)
    assert timed.kernels == len(times)


# --------------------------------------------------------------------------------- predict_ops


def test_host_bound_step_from_predict_ops(fixed_time):
    sc = Scenario(mode="decode")
    pred = predict_ops([ew("a"), ew("b"), ew("c")], gpu(), sc)
    assert pred.total_ms == pytest.approx(0.031)  # 30 µs of launches + the last 1 µs kernel
    assert pred.extra["host_bound"] == pytest.approx(1 - 3 / 31)
    assert any("host-bound" in w and "--cuda-graphs" in w for w in pred.warnings)
    graphs = predict_ops([ew("a"), ew("b"), ew("c")], gpu(), replace(sc, cuda_graphs=True))
    # A graph is one launch; each kernel then waits graph_launch_s (1 µs) on the GPU: 3 x (1 + 1).
    assert graphs.total_ms == pytest.approx(0.006)


def test_totals_equal_sum_of_rows_without_host_time(fixed_time):
    fixed_time.t = 2e-3
    ops = [ew(f"L{i}/x") for i in range(4)] + [ew("head", 4096)]
    pred = predict_ops(ops, gpu(), None)  # independent kernels: no host in the loop
    assert pred.total_ms == pytest.approx(pred.table["time_ms"].sum()) == pytest.approx(10.0)
    assert pred.table["share"].sum() == pytest.approx(1.0)
    hosted = predict_ops(ops, gpu(), Scenario())  # 2 ms kernels hide all but the first launch
    assert hosted.total_ms == pytest.approx(10.0 + 0.010)
    assert hosted.warnings == []


def test_identical_ops_are_costed_once_and_rows_keep_names(fixed_time):
    ops = [Gemm(f"L{i}/mlp/up", 16, 32, 64) for i in range(80)] + [Gemm("lm_head", 16, 99, 64)]
    pred = predict_ops(ops, gpu(), None)
    assert fixed_time.calls == 2
    assert list(pred.table["layer"][:2]) == ["L0", "L1"] and pred.table["layer"].iloc[-1] == ""
    assert pred.table["flops"].iloc[0] == 2 * 16 * 32 * 64
    assert pred.table["name"].iloc[79] == "L79/mlp/up"


def test_hfu_of_one_gemm_is_flops_over_time_times_peak(fixed_time):
    fixed_time.t = 1e-3
    g = gpu()
    pred = predict_ops([Gemm("g", 4096, 4096, 4096)], g)
    assert pred.hfu == pytest.approx(2 * 4096**3 / (1e-3 * g.peak("bf16")))
    assert pred.mfu is None and pred.tokens_per_s is None


def test_eager_decode_host_costs_per_layer_and_one_attention_plan(fixed_time):
    """host_decode_layer_s at the first kernel of each layer, host_attn_plan_s once per step
    before the first attention kernel; neither in prefill, nor with CUDA graphs."""
    fixed_time.t = 1e-9
    p = ModelParams(host_dispatch_s=1e-5, host_decode_layer_s=1e-3, host_attn_plan_s=0.02)
    g = replace(load_gpu("h100"), params=p)
    ops = []
    for i in range(3):
        ops += [Copy(f"L{i}/x", 1024), Attention(f"L{i}/attn", 1, 32, 32, 1, 2048, 128)]
    eager = predict_ops(ops, g, Scenario(mode="decode", impl="eager"))
    assert eager.total_ms * 1e-3 == pytest.approx(6e-5 + 3e-3 + 0.02 + 1e-9)
    prefill = predict_ops(ops, g, Scenario(mode="prefill", impl="eager"))
    assert prefill.total_ms * 1e-3 == pytest.approx(6e-5 + 1e-9)
    graphs = predict_ops(ops, g, Scenario(mode="decode", impl="eager", cuda_graphs=True))
    assert graphs.total_ms * 1e-3 == pytest.approx(6 * (1e-9 + p.graph_launch_s))


def test_json_contract(fixed_time):
    pred = predict_ops([Gemm("L0/attn/qkv", 8, 8, 8), ew("L0/add")], gpu(), Scenario())
    obj = json.loads(json.dumps(pred.to_json(), allow_nan=False))
    for key in ("total_ms", "tokens_per_s", "mfu", "hfu", "memory", "fits", "warnings", "ops"):
        assert key in obj
    op = obj["ops"][0]
    for key in ("name", "kind", "flops", "bytes", "intensity", "bound", "time_ms", "share",
                "overlap_ms"):  # fmt: skip
        assert key in op
    assert op["name"] == "L0/attn/qkv" and op["kind"] == "gemm" and op["flops"] == 1024
    assert obj["scenario"]["mode"] == "prefill"


# ------------------------------------------------------------------------------ whole models


def test_whole_model_is_the_simulation_of_its_op_list():
    """The engine's closed form over layers gives, to the bit (within float rounding), what a
    kernel-by-kernel simulation of the flat op list gives, with the real time model."""
    g = load_gpu("h100")
    for sc in (Scenario(seq=512), Scenario(mode="decode", batch=4, ctx=999, impl="eager"),
               Scenario(mode="train", batch=2, seq=256), Scenario(mode="decode", batch=8,
                                                                  cuda_graphs=True)):  # fmt: skip
        cfg = load_model("llama2-7b")
        pred = run(cfg, g, sc)
        flat = predict_ops(build_ops(cfg, sc), g, sc)
        assert pred.total_ms == pytest.approx(flat.total_ms, rel=1e-12)
        assert len(pred.table) == len(flat.table) == pred.extra["kernels"]


def test_prefill_mfu_convention(fixed_time):
    """(2N' + 4·L·H·Q·T) per token, N' without the input embedding (a lookup, no FLOPs)."""
    fixed_time.t = 1e-3
    cfg, g = load_model("llama2-7b"), gpu()
    pred = run(cfg, g, Scenario(seq=512, batch=2))
    n = len(build_ops(cfg, Scenario(seq=512, batch=2)))
    assert pred.total_ms == pytest.approx(n + 0.010)  # n kernels of 1 ms + the first launch
    assert pred.tokens_per_s == pytest.approx(1024 / (pred.total_ms * 1e-3))
    per_token = 2 * (6_738_415_616 - 32000 * 4096) + 4 * 32 * 32 * 128 * 512
    assert pred.mfu == pytest.approx(per_token * 1024 / (pred.total_ms * 1e-3 * g.peak("bf16")))
    assert pred.hfu == pred.mfu  # nothing recomputed
    assert "PaLM" in pred.mfu_convention


def test_train_mfu_is_palm_and_hfu_adds_recompute(fixed_time):
    fixed_time.t = 1e-3
    cfg, g = load_model("llama2-7b"), gpu()
    pred = run(cfg, g, Scenario(mode="train", seq=2048))
    per_token = 6 * (6_738_415_616 - 32000 * 4096) + 12 * 32 * 32 * 128 * 2048
    assert pred.mfu == pytest.approx(per_token * 2048 / (pred.total_ms * 1e-3 * g.peak("bf16")))
    full = run(cfg, g, Scenario(mode="train", seq=2048, recompute="full"))
    assert full.hfu > full.mfu and full.total_ms > pred.total_ms  # a forward more, counted
    assert pred.hfu == pytest.approx(pred.mfu)


def test_not_fitting_names_the_largest_term():
    pred = api.predict("llama2-70b", gpu="h100", mode="train", seq=2048)
    assert not pred.fits
    assert pred.warnings[0].startswith("does not fit: needs")
    assert "usable; optimizer alone is" in pred.warnings[0]


def test_capacity_is_one_rule_everywhere():
    one = api.predict("llama2-7b", gpu="h100")
    plan = api.predict("llama2-7b", system="dgx-h100", tp=2)
    assert one.memory_capacity == plan.memory_capacity == 0.92 * load_gpu("h100").hbm_bytes


# ------------------------------------------------------------------------------------ plans


def test_degrees_one_and_data_parallel_inference_are_the_single_gpu_step():
    a = api.predict("llama2-7b", gpu="h100", seq=4096)
    b = api.predict("llama2-7b", system="dgx-h100", seq=4096)
    c = api.predict("llama2-7b", system="dgx-h100", seq=4096, dp=8)
    assert a.total_ms == b.total_ms == c.total_ms
    assert c.tokens_per_s == pytest.approx(8 * a.tokens_per_s)
    assert c.mfu == pytest.approx(a.mfu)


def test_api_takes_the_parallel_options_and_shards():
    one = api.predict("llama2-70b", system="dgx-h100")
    tp8 = api.predict("llama2-70b", tp=8, system="dgx-h100")
    assert tp8.total_ms < one.total_ms / 4  # an eighth of the work per GPU, plus all-reduces
    assert tp8.memory["weights"] == pytest.approx(one.memory["weights"] / 8, rel=0.01)
    assert (tp8.table["kind"] == "collective").sum() == 2 * 80 + 2  # per layer, embed, logits
    per_token = 2 * (68_976_648_192 - 32000 * 8192) + 4 * 80 * 64 * 128 * 2048
    peak = load_gpu("h100").peak("bf16")
    assert tp8.mfu == pytest.approx(per_token * 2048 / (tp8.total_ms * 1e-3 * peak * 8))


def test_pipeline_by_hand(fixed_time):
    """pp=2 stages of 2 layers, m=4 micro-batches, 1 ms per kernel and per transfer: 1F1B takes
    m·t_max + (Σ t_s − t_max); the rest of the slowest stage is the bubble."""
    fixed_time.t = 1e-3
    g = gpu(dispatch_s=1e-9)
    sc = Scenario(mode="prefill", batch=4, micro_batch=1, seq=64, pp=2)
    pred = run(TINY, g, sc)
    # final norm, logits gather and lm_head end the model
    first = len(build_ops(replace(TINY, num_hidden_layers=2), Scenario(seq=64))) - 3
    t0 = 1e-3 * (first + 1) + 1e-9  # stage 0: embedding + 2 layers, and the send
    t1 = 1e-3 * (len(build_ops(TINY, Scenario(seq=64))) - first + 1) + 1e-9  # and the receive
    assert pred.total_ms * 1e-3 == pytest.approx(4 * max(t0, t1) + min(t0, t1), rel=1e-6)
    bubble = pred.table.loc[pred.table["kind"] == "bubble", "time_ms"].iloc[0] * 1e-3
    assert bubble == pytest.approx(min(t0, t1), rel=1e-6)


def test_uneven_stages_are_allowed_and_the_slowest_sets_the_pace():
    even = api.predict("llama2-7b", system="dgx-h100", pp=4, batch=8, micro_batch=1)
    uneven = api.predict("llama2-7b", system="dgx-h100", pp=5, batch=8, micro_batch=1)
    assert uneven.total_ms > 0 and uneven.extra["pacing_stage"] == 0  # 7 layers + embedding
    assert even.total_ms > uneven.total_ms * 0.9


def _without_rank_slowdown(system: str):  # noqa: ANN202 - a SystemSpec
    """The system with hosts that issue as fast for eight ranks as for one."""
    from dataclasses import replace

    from gpuperf.hardware.loader import load_system

    sys_spec = load_system(system)
    gpu = sys_spec.gpu
    extra = {**gpu.params.extra, "host_rank_slowdown": 0.0}
    return replace(sys_spec, gpu=replace(gpu, params=replace(gpu.params, extra=extra)))


def test_data_parallel_gradient_sync_hides_under_the_backward():
    dgx = _without_rank_slowdown("dgx-h100")  # the sync alone: the same host as one GPU's
    one = api.predict("llama3-8b", system=dgx, mode="train", impl="eager", seq=2048)
    ddp = api.predict("llama3-8b", system=dgx, mode="train", impl="eager", seq=2048, dp=8)
    dp = ddp.table[ddp.table["name"].str.startswith("dp/")]
    sync = dp[dp["kind"] == "collective"]
    assert len(sync) == 162  # whole parameters a bucket: five a layer and the two embeddings
    # What hides under the backward still costs it comm_overlap_cost of its time; the last
    # bucket (the embedding's) shows in full.
    exposed = (sync["time_ms"] - sync["overlap_ms"]).sum()
    assert 0.486 * sync["time_ms"].sum() < exposed < 0.6 * sync["time_ms"].sum()
    copies = dp[dp["kind"] != "collective"]  # DDP's bucket copy and divide, on the GPU
    assert set(copies["name"]) == {"dp/bucket_copy", "dp/bucket_div"}
    assert ddp.total_ms == pytest.approx(one.total_ms + exposed + copies["time_ms"].sum(),
                                         rel=1e-6)  # fmt: skip


def test_fsdp_gathers_layer_by_layer_and_shards_memory():
    kw = dict(system="dgx-h100", mode="train", impl="eager", seq=2048, dp=8)
    ddp, fsdp = api.predict("llama3-8b", **kw), api.predict("llama3-8b", zero=3, **kw)
    names = set(fsdp.table["name"])
    assert "L0/fsdp/allgather.next" in names and "L31/fsdp/reducescatter" in names
    assert fsdp.memory["weights"] == pytest.approx(ddp.memory["weights"] / 8, rel=0.01)
    assert fsdp.memory["gathered"] > 0
    opt = [p.table[p.table["name"].str.startswith("optimizer/")]["time_ms"].sum()
           for p in (ddp, fsdp)]  # fmt: skip
    assert opt[1] == pytest.approx(opt[0] / 8, rel=0.05)  # each rank steps its shard
    # before each gather (forward and backward) the rank's shard of the layer is copied into
    # the gather's input buffer (FSDP2's all_gather_copy_in): 1/8 of a layer's bf16 weights
    t = fsdp.table
    copy_in = t[t["name"].str.match(r"L\d+/fsdp/copy_in")]
    layer_bytes = 2 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336 + 2 * 4096)
    assert len(copy_in) == 31 + 32  # no next layer after the last; one more per backward layer
    assert copy_in["shape"].iloc[0] == f"{layer_bytes // 8} B"


@pytest.mark.parametrize("impl", ["eager", "fused"])
def test_fsdp_layers_composed_around_the_shared_layer_cost_as_op_by_op(impl):
    """A ZeRO-3 layer Part is costed as the plain layer's template (shared with every other
    plan) with FSDP's collectives composed around it: the same numbers as costing it op by
    op, with the all-gather and reduce-scatter hiding under the whole layer."""
    from gpuperf.hardware.loader import load_system
    from gpuperf.workloads.groups import groups_for
    from gpuperf.workloads.step_work import build

    system = load_system("dgx-h100")
    sc = Scenario(mode="train", impl=impl, seq=2048, dp=8, tp=2, zero=3, micro_batch=1,
                  global_batch=16)  # fmt: skip
    cfg = load_model("llama3-8b")
    work = build(cfg, sc, groups_for(sc, system.gpus_per_node))
    parts = [p for st in work.stages for p in st.fwd + st.bwd if p.core is not None]
    assert len(parts) >= 3  # forward (prefetching, last) and backward layers
    coster = C.Coster(system.gpu, system, sc)
    for part in parts:
        composed = coster.cost(part).tpl
        whole = coster.template(part.ops, part.hide, True, False)
        assert composed.rows == whole.rows and composed.host_s == whole.host_s
        assert composed.hidden_s == pytest.approx(whole.hidden_s, rel=1e-12, abs=1e-18)
        outer = part.hide[len(part.core[2]) :]  # the last forward layer prefetches nothing
        assert any(h > 0 for h in composed.hidden_s) == bool(outer)  # hidden under the layer
        for a, b in zip(composed.once, whole.once, strict=True):
            assert a == pytest.approx(b, rel=1e-12)
        assert dict(composed.classes) == pytest.approx(dict(whole.classes), rel=1e-12)


def test_zero3_plan_of_gpt3_counts_the_gathered_layers():
    p = api.predict("gpt3-175b", system="dgx-a100", nodes=128, mode="train", seq=2048,
                    dp=1024, zero=3, global_batch=1024)  # fmt: skip
    assert p.memory["gathered"] > 2**30  # a gathered 96-layer GPT-3 layer is ~3.6 GB in bf16


def test_context_parallel_ring_attention():
    base = dict(system="dgx-h100", seq=32768)
    one = api.predict("llama3-8b", **base)
    cp4 = api.predict("llama3-8b", cp=4, **base)
    ring = cp4.table[cp4.table["name"].str.contains("/ring")]
    assert len(ring) == 32 * 3 and (ring["kind"] == "p2p").all()
    assert cp4.total_ms < one.total_ms / 3


def test_eager_context_parallel_is_pytorchs_ring():
    """Eager kernels under cp run PyTorch's context_parallel (cp_torch): one K/V all-gather a
    layer (no Megatron P2P), hidden under the first step, an fp32 merge after each later step;
    the forward is about half of one GPU's work plus the ring's."""
    base = dict(gpu="h200", impl="eager", seq=16384)
    one = api.predict("llama3-8b", **base)
    cp2 = api.predict("llama3-8b", cp=2, **base)
    t = cp2.table
    gathers = t[t["name"].str.endswith("attn/cp.kv_allgather")]
    assert len(gathers) == 32 and (gathers["kind"] == "collective").all()
    kv_local = 8192 * 8 * 128 * 2  # tokens a rank x KV heads x head dim x bf16 bytes
    assert (gathers["shape"] == f"allgather {2 * kv_local * 2} B ×2").all()  # K and V, 2 ranks
    assert (gathers["overlap_ms"] == gathers["time_ms"]).all()  # under step 0's attention
    assert t["name"].str.contains(r"attn/cp\.merge_").sum() == 32 * 3
    assert not t["name"].str.contains(r"\.p2p|attn/cache_").any()  # no Megatron P2P, no cache
    assert one.total_ms / 2 < cp2.total_ms < 0.6 * one.total_ms
    fused = api.predict("llama3-8b", cp=2, gpu="h200", seq=16384)
    assert fused.table["name"].str.contains(r"ring1\.p2p").sum() == 32
    cp4 = api.predict("llama3-8b", cp=4, **base).table  # K and V joined before steps 0, 1, 2
    assert cp4["name"].str.match(r"L0/attn/cp\.kv_cat(\.ring\d)?$").sum() == 3


@pytest.mark.parametrize("model", ["llama3-8b", "qwen3-30b-a3b"])  # traced / derived backward
def test_eager_context_parallel_backward_is_the_rings(model):
    """The backward gathers K and V again, sends dK/dV around the ring once per step (the last
    send waited for at once), sums GQA gradients per step over that step's keys, and gives the
    forward's merges no autograd kernels: for Llama's traced backward and a derived one."""
    t = api.predict(model, cp=2, gpu="h200", impl="eager", mode="train", seq=8192).table
    layers = {"llama3-8b": 32, "qwen3-30b-a3b": 48}[model]
    sends = t[t["name"].str.contains(r"attn/cp\.dkv_send")]
    assert len(sends) == layers * 2 and (sends["kind"] == "p2p").all()
    first = sends[~sends["name"].str.contains("ring")]
    assert (first["overlap_ms"] == first["time_ms"]).all()  # under step 1's backward
    last = sends[sends["name"].str.contains("ring1")]
    assert (last["overlap_ms"] == 0).all()
    assert t["name"].str.endswith("attn/cp.kv_allgather.bwd").sum() == layers
    sums = t[t["name"].str.match(r"L0/attn/cp\.dk_sum")]
    assert len(sums) == 2 and sums["shape"].tolist() == [
        f"sum n={4096 * 4 * 128 if 'qwen' in model else 4096 * 8 * 128}",
        f"sum n={2048 * 4 * 128 if 'qwen' in model else 2048 * 8 * 128}",
    ]
    assert not t["name"].str.contains(r"merge_.*\.bwd|attn/core\.dk_sum").any()


def test_generate_is_prefill_plus_integrated_decode(fixed_time):
    fixed_time.t = 20 * US  # > 10 µs launches: the GPU stays the bottleneck
    cfg, g = TINY, gpu()
    pred = run(cfg, g, Scenario(mode="generate", seq=100, new_tokens=16))
    pre = run(cfg, g, Scenario(seq=100))
    dec = run(cfg, g, Scenario(mode="decode", ctx=107))
    assert pred.extra["ttft_ms"] == pytest.approx(pre.total_ms)
    assert pred.extra["tpot_ms"] == pytest.approx(dec.total_ms)  # flat: every step the same
    # the prefill samples the first of the 16 tokens: 15 decode steps follow (HF's
    # max_new_tokens, serve's --osl)
    assert pred.total_ms == pytest.approx(pre.total_ms + 15 * dec.total_ms)
    assert pred.table["name"].iloc[0] == "prefill/embed"
    one = run(cfg, g, Scenario(mode="generate", seq=100, new_tokens=1))
    assert one.total_ms == pytest.approx(pre.total_ms) and one.extra["tpot_ms"] is None
    assert list(one.table["name"]) == ["prefill/" + v for v in pre.table["name"]]


def test_decode_weights_sum_a_linear_function_exactly():
    pts, w = decode_weights(2048, 128)
    assert pts[0] == 2048 and pts[-1] == 2048 + 127 and len(pts) == DECODE_POINTS
    assert sum(w) == pytest.approx(128)
    assert sum(wk * p for wk, p in zip(w, pts, strict=True)) == pytest.approx(
        sum(range(2048, 2048 + 128))
    )
    pts1, w1 = decode_weights(100, 1)
    assert list(pts1) == [100] and list(w1) == [1.0]


def test_generate_charges_each_decode_step_its_host_costs():
    gen = api.predict("llama2-7b", "h200", mode="generate", seq=2048, new_tokens=16, impl="eager")
    pre = api.predict("llama2-7b", "h200", mode="prefill", seq=2048, impl="eager")
    step = api.predict("llama2-7b", "h200", mode="decode", ctx=2056, impl="eager")
    assert (gen.total_ms - pre.total_ms) / 15 == pytest.approx(step.total_ms, rel=0.02)
    assert step.total_ms > 1e3 * 0.02  # the H200 host's 23.6 ms plan is in it


def test_plan_rows_are_ops_like_any_other():
    p = api.predict("llama2-70b", mode="train", system="dgx-h100", nodes=2, tp=8, pp=2,
                    global_batch=16, micro_batch=1)  # fmt: skip
    coll = p.table[p.table["kind"] == "collective"].iloc[0]
    assert coll["bound"] == "comm" and coll["time_ms"] > 0 and "×16 micro-batches" in coll["shape"]
    assert sum(p.extra["breakdown_ms"].values()) == pytest.approx(p.total_ms)
    assert p.extra["breakdown_ms"]["bubble"] > 0


# ---------------------------------------------------------------------------------- grouping


def test_group_by_op_layer_and_kind(fixed_time):
    pred = run(TINY, gpu(), Scenario(seq=128))
    g = group(pred.table, "op")
    qkv = g[g["name"] == "attn/qkv"].iloc[0]
    assert qkv["count"] == 4 and qkv["layer"] == "L0-L3"
    assert g["time_ms"].sum() == pytest.approx(pred.table["time_ms"].sum())
    by_layer = group(pred.table, "layer")
    assert list(by_layer["name"][:5]) == ["embed", "L0", "L1", "L2", "L3"]
    by_kind = group(pred.table, "kind")
    assert by_kind["share"].sum() == pytest.approx(1.0)


def test_group_recomputes_measured_error():
    import pandas as pd

    table = pd.DataFrame(
        {
            "name": ["L0/a", "L1/a"], "layer": ["L0", "L1"], "kind": ["gemm", "gemm"],
            "shape": ["s", "s"], "flops": [1e9, 1e9], "bytes": [1e6, 1e6],
            "time_ms": [1.0, 1.0], "bound": ["compute", "compute"], "share": [0.5, 0.5],
            "measured_ms": [0.5, 1.5], "error_pct": [100.0, -33.3], "tflops": [2.0, 0.667],
        }
    )  # fmt: skip
    g = group(table, "op")
    assert g["count"].iloc[0] == 2 and g["measured_ms"].iloc[0] == pytest.approx(2.0)
    assert g["error_pct"].iloc[0] == pytest.approx(0.0)
    assert g["tflops"].iloc[0] == pytest.approx(2e9 / 2e-3 / 1e12)


def test_collective_ops_carry_their_group():
    """TP groups stay in a node; the data-parallel group of a tp8 dp2 plan spans both nodes."""
    from gpuperf.workloads.groups import groups_for

    sc = Scenario(mode="train", tp=8, dp=2, global_batch=4)
    g = groups_for(sc, 8)
    assert (g.tp, g.tp_nodes, g.dp, g.dp_nodes) == (8, 1, 2, 2)
    p = api.predict("llama2-70b", system="dgx-h100", nodes=2, tp=8, dp=2, mode="train",
                    global_batch=4)  # fmt: skip
    shapes = set(p.table.loc[p.table["kind"] == "collective", "shape"])
    assert any(s.endswith("×8") for s in shapes) and any(s.endswith("×2") for s in shapes)
    assert [op for op in build_ops(load_model("llama2-7b"), Scenario())
            if isinstance(op, Collective)] == []  # fmt: skip # one GPU issues none


def test_ranks_sharing_a_host_issue_slower_and_inference_replicas_do_not():
    kw = dict(mode="decode", impl="eager", ctx=2048)
    one = api.predict("llama3-8b", system="dgx-h100", **kw)
    tp8 = api.predict("llama3-8b", system="dgx-h100", tp=8, **kw)
    replicas = api.predict("llama3-8b", system="dgx-h100", dp=8, batch=8, **kw)
    assert replicas.extra["host_ms"] == pytest.approx(one.extra["host_ms"], rel=1e-9)
    from gpuperf.step.cost import HOST_RANK_SLOWDOWN

    # eight ranks: every host cost 1 + k * log2(8) times one rank's
    base = api.predict("llama3-8b", system=_without_rank_slowdown("dgx-h100"), tp=8, **kw)
    eight = 1 + 3 * HOST_RANK_SLOWDOWN
    assert tp8.extra["host_ms"] == pytest.approx(eight * base.extra["host_ms"], rel=1e-6)
    assert tp8.total_ms > one.total_ms  # host-bound: the slower host shows


def test_dtensor_runs_adamw_once_per_dtensor_parameter_on_the_host():
    from dataclasses import replace

    from gpuperf.hardware.loader import load_gpu
    from gpuperf.step.cost import HOST_DTENSOR_OP_S, host_slowdown

    gpu = load_gpu("h200")
    free = replace(gpu, params=replace(gpu.params, extra={**gpu.params.extra,
                                                          "host_dtensor_op_s": 0.0}))  # fmt: skip
    kw = dict(mode="train", impl="eager", seq=2048, tp=2, tp_impl="dtensor",
              sequence_parallel=False)  # fmt: skip
    with_dt, without = (
        api.predict("llama3-8b", gpu=gpu, **kw),
        api.predict("llama3-8b", gpu=free, **kw),
    )
    gemms = with_dt.table[
        (with_dt.table["kind"] == "gemm") & with_dt.table["name"].str.startswith("L")
    ]
    tensors = 7 * 32 + 1  # seven projections a layer and the lm_head (the embedding stays plain)
    opt_ops = 8  # AdamW's foreach ops (transformer_train.optimizer_ops)
    want = host_slowdown(gpu, 2) * HOST_DTENSOR_OP_S * (len(gemms) + opt_ops * tensors) * 1e3
    assert with_dt.extra["host_ms"] - without.extra["host_ms"] == pytest.approx(want, rel=1e-6)


def test_dtensor_parameters_follow_the_tp_plan():
    from gpuperf.workloads.dp_ops import dtensor_params_per_layer

    # what apply_tensor_parallelism wraps (transformers 5.17, counted on gloo): Llama's seven
    # projections; Qwen2's q, k and v biases as well
    assert dtensor_params_per_layer(load_model("llama3-8b")) == 7
    assert dtensor_params_per_layer(load_model("qwen2-7b")) == 10


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_dtensor_inference_runs_the_local_kernels_as_megatron_style_code_does(mode):
    """With grad off, Hugging Face's tp_plan runs each Linear on its local shard and all-reduces
    with dist.all_reduce: no DTensor dispatch per linear (step.cost.HOST_DTENSOR_OP_S); in
    training it is paid. The two differ in their ends alone (Megatron-style code all-reduces a
    vocabulary-parallel embedding and concatenates the gathered logits)."""
    from gpuperf.step.cost import HOST_COLLECTIVE_S, HOST_RANK_SLOWDOWN

    kw = dict(gpu="h200", impl="eager", tp=2, sequence_parallel=False)
    kw |= {"seq": 2048} if mode == "prefill" else {"ctx": 2048}
    dtensor = api.predict("llama3-8b", mode=mode, tp_impl="dtensor", **kw)
    megatron = api.predict("llama3-8b", mode=mode, **kw)
    assert set(megatron.table["name"]) - set(dtensor.table["name"]) == {
        "embed.allreduce",
        "lm_head.cat",
    }
    spec = api.resolve_gpu("h200")
    two_kernels = 2 * spec.params.host_dispatch_s + HOST_COLLECTIVE_S  # at 2 ranks' slowdown
    extra = megatron.extra["host_ms"] - dtensor.extra["host_ms"]
    assert 0 < extra <= (1 + HOST_RANK_SLOWDOWN) * two_kernels * 1e3 + 1e-9
    kw.pop("ctx", None), kw.pop("seq", None)
    train = {t: api.predict("llama3-8b", mode="train", seq=2048, tp_impl=t, **kw)
             for t in ("dtensor", "megatron")}  # fmt: skip
    assert train["dtensor"].extra["host_ms"] > 1.5 * train["megatron"].extra["host_ms"]


def test_the_reported_dispatch_is_the_one_the_step_was_costed_with():
    from gpuperf.hardware.loader import load_system
    from gpuperf.step.cost import HOST_RANK_SLOWDOWN

    gpu = load_system("dgx-h100").gpu
    kw = dict(mode="train", impl="eager", seq=2048, tp=8, dp=4, system="dgx-h100", nodes=4)
    p = api.predict("llama3-8b", **kw)  # 32 ranks, 8 on each host: 1 + k * log2(8)
    eight = 1 + 3 * HOST_RANK_SLOWDOWN
    assert p.extra["dispatch_us"] == pytest.approx(eight * gpu.params.host_dispatch_s * 1e6)


def test_collectives_in_a_cuda_graph_take_the_graph_floor():
    """A replayed graph has no host side: a small all-reduce's floor is comm_graph_floor_s (the
    NCCL kernel's own, graph_collective_probe), not comm_floor_s (calls from Python)."""

    def allreduce_ms(gpu, graphs):
        p = api.predict("llama3-8b", gpu=gpu, mode="decode", batch=8, ctx=2048, tp=2,
                        impl="eager", cuda_graphs=graphs, sequence_parallel=False)  # fmt: skip
        t = p.table
        return float(t[t["kind"] == "collective"]["time_ms"].iloc[0]), p.total_ms

    h200 = load_gpu("h200")
    eager, _ = allreduce_ms(h200, False)
    graph, total = allreduce_ms(h200, True)
    assert eager == pytest.approx(h200.params.extra["comm_floor_s"] * 1e3)  # the floor binds
    assert graph < eager
    extra = {**h200.params.extra, "comm_graph_floor_s": 1e-3}
    slow = replace(h200, params=replace(h200.params, extra=extra))
    slow_graph, slow_total = allreduce_ms(slow, True)
    assert slow_graph == pytest.approx(1.0)  # the profile's value is the one used
    assert slow_total > total + 60  # 65 all-reduces per step, each now 1 ms


def test_host_bound_warning_names_the_cudnn_plan_of_eager_decode() -> None:
    """An eager decode step on a growing cache pays cuDNN's plan for the new kv length; the
    host-bound warning says how much of the step that is, and prefill (no new length each
    step) and CUDA-graph decode do not mention it."""
    plan_ms = load_gpu("h200").params.host_attn_plan_s * 1e3
    dec = api.predict("llama3-8b", gpu="h200", mode="decode", impl="eager", ctx=1024)
    text = " ".join(dec.warnings)
    assert "cuDNN planning attention" in text and f"{plan_ms:.3g} ms" in text
    pre = api.predict("llama3-8b", gpu="h200", mode="prefill", impl="eager", seq=128)
    graph = api.predict("llama3-8b", gpu="h200", mode="decode", impl="eager", ctx=1024,
                        cuda_graphs=True)  # fmt: skip
    assert not any("cuDNN" in w for w in pre.warnings + graph.warnings)


def test_seen_kv_lengths_drop_exactly_the_cudnn_plan() -> None:
    """kv_lengths="seen" (a warmed-up process) is the same eager decode step without cuDNN's
    plan; other modes refuse it, and generate takes it for its decode steps only."""
    from gpuperf.errors import InputError

    plan_ms = load_gpu("h200").params.host_attn_plan_s * 1e3
    kw = {"gpu": "h200", "mode": "decode", "impl": "eager", "ctx": 1024}
    new = api.predict("llama3-8b", **kw).total_ms
    seen = api.predict("llama3-8b", kv_lengths="seen", **kw).total_ms
    assert new - seen == pytest.approx(plan_ms, rel=1e-9)
    graphs = {**kw, "cuda_graphs": True}  # a graph replays a captured length: nothing to plan
    assert api.predict("llama3-8b", kv_lengths="seen", **graphs).total_ms == pytest.approx(
        api.predict("llama3-8b", **graphs).total_ms
    )
    gen = {"gpu": "h200", "mode": "generate", "impl": "eager", "seq": 256, "new_tokens": 8}
    g_new = api.predict("llama3-8b", **gen)
    g_seen = api.predict("llama3-8b", kv_lengths="seen", **gen)
    assert g_new.extra["ttft_ms"] == pytest.approx(g_seen.extra["ttft_ms"])
    assert g_new.total_ms - g_seen.total_ms == pytest.approx(7 * plan_ms, rel=1e-6)  # 7 steps
    with pytest.raises(InputError, match="kv_lengths=seen"):
        api.predict("llama3-8b", gpu="h200", mode="prefill", kv_lengths="seen")
    with pytest.raises(InputError, match="kv_lengths"):
        api.predict("llama3-8b", gpu="h200", mode="decode", kv_lengths="warm")


def test_cached_hashes_equal_the_dataclass_hash_and_follow_equality():
    from dataclasses import fields, replace

    from gpuperf.workloads.groups import Groups
    from gpuperf.workloads.hashed import field_hash
    from gpuperf.workloads.transformer_layers import make_dims

    cfg = load_model("llama3-8b")
    d = make_dims(cfg, Scenario(mode="train", seq=1024))
    for obj in (cfg, d, Groups(tp=2, dp=4)):
        names = [f.name for f in fields(obj) if f.compare]
        assert hash(obj) == field_hash(obj) == hash(tuple(getattr(obj, n) for n in names))
        twin = replace(obj)  # equal, another object: the same hash
        assert twin == obj and twin is not obj and hash(twin) == hash(obj)
    assert hash(replace(d, T=d.T + 1)) != hash(d)  # a changed field is hashed anew


def test_equal_parts_are_one_object_and_costed_once():
    from gpuperf.workloads.step_work import _part, build

    cfg = load_model("llama3-8b")
    a = build(cfg, Scenario(mode="train", pp=2, dp=2, zero=1, global_batch=8, seq=1024))
    b = build(cfg, Scenario(mode="train", pp=2, dp=2, zero=2, global_batch=8, seq=1024))
    assert a.stages[0].fwd[0] is b.stages[0].fwd[0]  # the same prologue Part
    p = a.stages[0].fwd[0]
    assert _part(p.ops) is p and _part(p.ops, repeat=2) is not p
    assert _part(p.ops, repeat=2).repeat == 2


def test_the_rank_slowdown_is_the_slowest_ranks_from_the_host_probe():
    """host_rank_slowdown is derived from the committed multi-process host probe (the slowest
    rank's time per call), not chosen: the constant and the derivation agree."""
    import sys
    from pathlib import Path

    from gpuperf.step.cost import HOST_RANK_SLOWDOWN

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from host_rank_slowdown import derive, ratios

    assert derive() == HOST_RANK_SLOWDOWN
    got = {(call, ranks): r for call, ranks, r in ratios()}
    assert len(got) == 8 and all(r >= 1.0 for r in got.values())  # never faster than alone


@pytest.mark.parametrize("kw", [{"gpu": "h100"}, {"system": "dgx-h100", "tp": 2},
                                {"gpu": "h100", "impl": "eager"}])  # fmt: skip
def test_generate_reports_its_breakdown_as_every_mode_does(kw):
    """Review: mode=generate's extra had no breakdown_ms, host_ms or attn_plan_ms; they are the
    prefill's plus each decode step's, weighted as the decode time is, and add up to the total."""
    from gpuperf import api

    r = api.predict("llama2-7b", mode="generate", seq=512, new_tokens=64, **kw)
    parts = r.extra["breakdown_ms"]
    assert sum(parts.values()) == pytest.approx(r.total_ms, rel=1e-9)
    assert r.extra["host_bound"] == pytest.approx(parts.get("host", 0.0) / r.total_ms)
    assert r.extra["host_ms"] > 0 and "attn_plan_ms" in r.extra
    step = api.predict("llama2-7b", mode="decode", ctx=544, **kw)
    assert set(step.extra["breakdown_ms"]) <= set(parts)
