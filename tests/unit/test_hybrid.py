"""Hybrid Mamba-2 models (Nemotron-H, Nemotron 3): the loader, the mixer's kernels, the scan's
cost by hand, the backward, memory, refusals and plans."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuperf import api
from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel.ops import Gemm, GroupedGemm, Scan
from gpuperf.perfmodel.roofline import op_time
from gpuperf.step.memory import kv_cache_bytes
from gpuperf.workloads.config import ModelConfig, from_hf_dict, load_model
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer import build_ops

NANO = load_model("nemotron-3-nano")
SMALL = dict(name="h", model_type="nemotron_h", hidden_size=256, num_hidden_layers=4,
             layer_pattern="M*M-", num_attention_heads=4, num_key_value_heads=2, head_dim=64,
             intermediate_size=512, vocab_size=1000, mlp="plain", hidden_act="relu2",
             positions="none", mamba_heads=8, mamba_head_dim=32, ssm_state_size=16,
             mamba_groups=2)  # fmt: skip


def test_nemotron3_nano_has_its_published_size():
    # NVIDIA: 31.6B parameters, 3.2B active without the embeddings; 23 Mamba-2, 23 MoE and
    # 6 attention layers.
    assert NANO.param_count() == pytest.approx(31.6e9, rel=0.002)
    b = NANO.param_breakdown()
    assert NANO.active_param_count() - b["embed"] == pytest.approx(3.23e9, rel=0.01)
    assert (NANO.blocks("M"), NANO.blocks("E"), NANO.blocks("*")) == (23, 23, 6)
    # one Mamba-2 mixer by hand: in_proj to z, x, B, C, dt; conv (+bias); dt_bias, A, D; norm
    h, di, conv, H = 2688, 64 * 64, 64 * 64 + 2 * 8 * 128, 64
    mixer = h * (di + conv + H) + conv * 5 + 3 * H + di + di * h
    assert b["mamba"] == 23 * mixer


def test_loader_reads_the_hf_names_and_refuses_a_bad_pattern():
    d = {"model_type": "nemotron_h", "hidden_size": 256, "num_hidden_layers": 3,
         "hybrid_override_pattern": "M*-", "num_attention_heads": 4, "num_key_value_heads": 2,
         "head_dim": 64, "intermediate_size": 512, "vocab_size": 1000, "mamba_num_heads": 8,
         "mamba_head_dim": 32, "ssm_state_size": 16, "n_groups": 2}  # fmt: skip
    cfg = from_hf_dict(d, name="t")
    assert (cfg.layer_pattern, cfg.mamba_groups, cfg.positions) == ("M*-", 2, "none")
    assert cfg.blocks("-") == 1 and not cfg.is_moe
    with pytest.raises(InputError, match="layer_pattern"):
        from_hf_dict({**d, "hybrid_override_pattern": "M*X"}, name="t")
    with pytest.raises(InputError, match="layer_pattern"):
        from_hf_dict({**d, "hybrid_override_pattern": "M*"}, name="t")
    with pytest.raises(InputError, match="num_experts"):
        ModelConfig(**{**SMALL, "layer_pattern": "M*ME"})  # an MoE layer without experts
    with pytest.raises(InputError, match="mamba_groups"):
        ModelConfig(**{**SMALL, "mamba_groups": 3})


def test_scan_kernel_cost_by_hand():
    # chunk_state: per chunk and head, Bᵀ (Q×N) times the decayed x (Q×P): 2·L·H·P·N FLOPs;
    # reads x, B, dt and its cumulative sum (fp32), writes each chunk's state in fp32.
    b, L, H, P, N, G, Q = 2, 512, 8, 32, 16, 2, 128
    c = Scan("s", "chunk_state", b, L, H, P, N, G, Q).cost()
    assert c.flops == 2 * b * L * H * P * N
    assert c.bytes_read == 2 * b * L * H * P + 2 * b * L * G * N + 8 * b * L * H
    assert c.bytes_written == 4 * b * (L // Q) * H * P * N
    # a decode step reads and writes each sequence's state once
    u = Scan("u", "state_update", 4, 1, H, P, N, G, Q, "bf16", "fp32").cost()
    assert u.bytes_read - 4 * (3 * H * P + 2 * G * N) * 2 == 4 * H * P * N * 4
    # the kernels that weigh by C·Bᵀ load their group's fp32 matrix once per head: the 64-row
    # blocks up to and over the diagonal ((1 + 64/Q)/2 of it), once per 64-wide head block
    x, s_half, bc, dt = (
        2 * b * L * H * P,
        2 * b * (L // Q) * H * P * N,
        2 * b * L * G * N,
        4 * b * L * H,
    )
    cb = 4 * b * (L // Q) * G * Q * Q

    def reloads(q: int, p: int) -> float:
        return cb * (Q // q) * H / G * (1 + 64 / q) / 2 * -(-p // 64)

    o = Scan("o", "chunk_scan", b, L, H, P, N, G, Q).cost()
    assert o.bytes_read == reloads(Q, P) + x + s_half + bc + 2 * dt
    dx = Scan("d", "dx", b, L, H, P, N, G, Q).cost()
    assert dx.bytes_read == reloads(Q, P) + 2 * x + 2 * s_half + bc + 2 * dt
    dda = Scan("a", "ddacs", b, L, H, P, N, G, Q).cost()
    assert dda.bytes_read == reloads(Q, P) + 2 * x + 2 * dt
    # 80-wide heads (Nemotron-Nano-9B-v2) take two head blocks: twice the reloads
    wide = Scan("w", "chunk_scan", b, L, H, 80, N, G, Q).cost()
    more = reloads(Q, 80) - reloads(Q, P) + (80 - P) / P * (x + s_half)
    assert wide.bytes_read - o.bytes_read == pytest.approx(more)


@pytest.mark.parametrize(
    ("kernel", "pipelined"),
    [("bmm", True), ("bmm_bwd", True), ("chunk_state", True), ("dstates", True),
     ("chunk_scan", False), ("dx", False), ("dcb", False), ("ddacs", False), ("db", False),
     ("dc", False), ("state_passing", False), ("state_passing_bwd", False)],
)  # fmt: skip
def test_scan_kernels_overlap_loads_and_products_only_in_k_loops(kernel, pipelined):
    """K-loops of loads feeding products scaled per row pipeline the two (the longer one);
    decay and masks per element, or head loops with atomic adds, leave them summed."""
    gpu = load_gpu("h100")
    t = op_time(Scan("k", kernel, 1, 8192, 64, 64, 128, 8, 128), gpu)
    summed = gpu.params.kernel_floor_s + min(t.t_math, t.t_mem)
    floor = gpu.params.kernel_floor_s
    assert t.t_overhead == pytest.approx(floor if pipelined else summed)
    if kernel != "state_passing":  # a data mover: no products to overlap
        assert min(t.t_math, t.t_mem) > 0


def test_a_state_update_runs_at_a_rate_of_elements_per_sm_whatever_the_states_dtype():
    gpu = load_gpu("h100")
    rate = gpu.params.extra["ssd_update_rate"] * gpu.sms
    # Nemotron 3 Nano at batch 8: 8·64·64·128 state elements at the SMs' rate
    small = Scan("u", "state_update", 8, 1, 64, 64, 128, 8, 1, "bf16", "bf16")
    t = op_time(small, gpu)
    assert t.t_math == pytest.approx(8 * 64 * 64 * 128 / rate)
    assert t.time == pytest.approx(max(t.t_math, t.t_mem) + gpu.params.kernel_floor_s)
    assert t.t_math > t.t_mem  # a bf16 state: the rate, not the bytes
    # an fp32 state: twice the bytes, the same rate; the longer of the two
    fp32 = op_time(replace(small, state_dtype="fp32"), gpu)
    assert fp32.t_math == t.t_math and fp32.t_mem == pytest.approx(2 * t.t_mem, rel=0.2)
    # a 256-wide state (8-warp programs): as many elements a second per SM
    wide = op_time(Scan("w", "state_update", 8, 1, 64, 64, 256, 8, 1, "bf16", "bf16"), gpu)
    assert wide.t_math == pytest.approx(2 * t.t_math)


def test_mamba_layer_kernels_in_prefill_and_decode():
    sc = Scenario(mode="prefill", batch=1, seq=1024, impl="fused")
    ops = build_ops(NANO, sc)
    names = [o.name for o in ops]
    in_proj = next(o for o in ops if o.name == "L0/mamba/in_proj")
    assert isinstance(in_proj, Gemm) and in_proj.n == 2 * 4096 + 2 * 8 * 128 + 64
    assert sum(isinstance(o, Scan) for o in ops) == 23 * 5
    assert not any("rope" in n for n in names)  # Nemotron-H's attention has no positions
    up = next(o for o in ops if o.name == "L1/mlp/experts_up")  # squared-ReLU experts: no gate
    assert isinstance(up, GroupedGemm) and up.n == 1856
    decode = build_ops(NANO, Scenario(mode="decode", batch=8, ctx=1024, impl="fused"))
    kernels = {o.kernel for o in decode if isinstance(o, Scan)}
    assert kernels == {"state_update"}


def test_training_runs_the_scans_backward_once_per_mamba_layer():
    ops = build_ops(NANO, Scenario(mode="train", batch=1, seq=2048, impl="fused"))
    bwd = [o for o in ops if isinstance(o, Scan) and o.name.startswith("L0/")]
    # forward 5, then the forward's first four again and the backward's ten
    assert [o.kernel for o in bwd[5:9]] == ["cumsum", "chunk_state", "state_passing", "bmm"]
    assert len(bwd) == 5 + 4 + 10
    assert "L0/mamba/conv1d.recompute" in {o.name for o in ops}


def test_training_keeps_each_blocks_activations_by_hand():
    from gpuperf.step.memory import train_activation_bytes_per_layer

    cfg = ModelConfig(**SMALL)  # M * M -: hidden 256, 8 Mamba heads of 32, 2 groups of 16
    h, di, conv = 256, 8 * 32, 8 * 32 + 2 * 2 * 16
    mamba = h + di + conv + 8 + di  # norm input, in_proj's z x B C dt, the scan's output
    attn = h + 2 * 256 + 2 * 128 + 2 * 4  # norm input, q and out, k and v, lse (fp32) per head
    mlp = h + 2 * 512  # norm input, the plain MLP's up projection and activation
    per_token = (2 * mamba + attn + mlp) / 4
    assert train_activation_bytes_per_layer(cfg, 2, 100, "bf16") == 2 * 200 * per_token


def test_cache_holds_attention_kv_and_each_mamba_layers_state():
    per_seq = 6 * 2 * 2 * 128 * 1000 + 23 * NANO.mamba_state_numel
    assert kv_cache_bytes(NANO, 1000, 3, "bf16") == 3 * per_seq * 2
    assert NANO.mamba_state_numel == 64 * 64 * 128 + 3 * (4096 + 2 * 8 * 128)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (dict(impl="eager"), "eager hybrid"),
        (dict(impl="fused", cp=2, mode="train"), "context parallelism over Mamba-2"),
        (dict(impl="fused", tp=16, gpu="h100", system="dgx-h100", nodes=2), "Mamba heads"),
    ],
)
def test_what_a_hybrid_cannot_run_as_is_refused(kw, message):
    kw = {"gpu": "h100", "seq": 1024, **kw}
    with pytest.raises(InputError, match=message):
        api.predict("nemotron-3-nano", **kw)


def test_a_plan_splits_mamba_heads_and_matches_one_gpu_at_degree_one():
    one = api.predict("nemotron-3-nano", gpu="h100", seq=2048, impl="fused")
    plan = api.predict("nemotron-3-nano", gpu="h100", seq=2048, impl="fused", tp=1, dp=1)
    assert plan.total_ms == one.total_ms
    tp2 = api.predict("nemotron-3-nano", gpu="h100", seq=2048, impl="fused", tp=2)
    assert tp2.total_ms < one.total_ms
    small = ModelConfig(**SMALL)
    p = api.predict(small, gpu="h100", seq=512, impl="fused", mode="train")
    assert p.total_ms > 0 and small.blocks("M") == 2
