"""Megatron-Core's selective recompute by module (--recompute-modules): which forward kernels the
backward runs again, what the saved activations lose, the recomputed FLOPs HFU adds, and the
inputs refused."""

from __future__ import annotations

import json

import pytest

from gpuperf import api
from gpuperf.cli import main
from gpuperf.errors import InputError
from gpuperf.perfmodel.ops import BYTES
from gpuperf.step.memory import memory_breakdown
from gpuperf.workloads.config import load_model
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer import build_ops

TRAIN = dict(mode="train", batch=1, seq=1024, impl="fused")


def _redone(model: str, modules: tuple[str, ...]) -> set[str]:
    """The names (layer prefix dropped) of the recomputed kernels of a training step."""
    cfg = load_model(model)
    sc = Scenario(**TRAIN, recompute="selective", recompute_modules=modules)
    return {o.name.split("/", 1)[1].removesuffix(".recompute")
            for o in build_ops(cfg, sc) if o.name.endswith(".recompute")}  # fmt: skip


def test_each_module_recomputes_its_own_kernels():
    assert _redone("qwen3-30b-a3b", ()) == {"attn/core"}  # Megatron's default: core_attn
    # the MoE block's norm stands alone (no GEMM to fuse it into); the routed experts' activation
    assert _redone("qwen3-30b-a3b", ("layernorm", "moe_act")) == {"mlp/norm", "mlp/act"}
    moe = _redone("qwen3-30b-a3b", ("moe",))
    assert {"mlp/router", "mlp/permute", "mlp/experts_gate_up", "mlp/experts_down"} <= moe
    assert not any(n.startswith("attn/") or n == "mlp/norm" for n in moe)
    # a dense model's norms are fused into the QKV and fc1 GEMMs: nothing to recompute
    assert _redone("llama3-8b", ("layernorm",)) == set()
    assert _redone("llama3-8b", ("mlp",)) == {"mlp/gate_up", "mlp/act", "mlp/down"}
    # MLA: the up projections with their norms and the rotary embedding; the shared experts
    mla = _redone("deepseek-v3", ("mla_up_proj", "shared_experts"))
    assert {"attn/q_b", "attn/kv_b", "attn/rope", "mlp/shared/gate_up"} <= mla
    assert "attn/q_a" not in mla and "mlp/experts_gate_up" not in mla


def test_recomputed_outputs_leave_the_saved_activations():
    cfg = load_model("qwen3-30b-a3b")

    def act(modules: tuple[str, ...]) -> float:
        sc = Scenario(**TRAIN, recompute="selective", recompute_modules=modules)
        return memory_breakdown(cfg, sc)["activations"]

    # layernorm: the MoE block's input (its norm's output); moe_act: k copies of each expert's
    # activation output, 16-bit values per token per layer
    tokens, e = 1024 * cfg.layers, BYTES["bf16"]
    k, fe, h = cfg.num_experts_per_tok, cfg.expert_intermediate, cfg.hidden
    assert act(("core_attn",)) - act(("core_attn", "layernorm")) == pytest.approx(tokens * e * h)
    assert act(("core_attn",)) - act(("core_attn", "moe_act")) == pytest.approx(tokens * e * k * fe)
    assert act(("moe",)) < act(("moe_act", "layernorm")) < act(())


def test_hfu_counts_the_recomputed_model_flops():
    cfg = load_model("qwen3-30b-a3b")
    kw = dict(mode="train", batch=1, seq=1024, impl="fused", gpu="h100", recompute="selective")
    light = api.predict(cfg, **kw, recompute_modules=("layernorm", "moe_act"))
    assert light.hfu == pytest.approx(light.mfu)  # norms and activations carry no model FLOPs
    moe = api.predict(cfg, **kw, recompute_modules=("moe",))
    b = cfg.param_breakdown()
    routed = b["mlp"] * cfg.num_experts_per_tok / cfg.num_experts + b["router"]
    # HFU / MFU = (3 forward passes + the MoE block's again) / 3 forward passes
    from gpuperf.step.mfu import model_flops_per_token

    per_token, _ = model_flops_per_token(cfg, Scenario(**TRAIN))
    assert moe.hfu / moe.mfu == pytest.approx(1 + 2 * routed / per_token, rel=1e-6)
    assert moe.total_ms > light.total_ms


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (dict(recompute="none", recompute_modules=("moe",)), "recompute=selective"),
        (dict(recompute="full", recompute_modules=("moe",)), "recompute=selective"),
        (dict(recompute="selective", recompute_modules=("attention",)), "unknown recompute"),
        (dict(recompute="selective", recompute_modules="moe"), "list of module names"),
        (dict(recompute="selective", recompute_modules=("moe",), impl="eager"), "fused"),
    ],
)
def test_bad_module_plans_are_refused_in_one_line(kw, match):
    with pytest.raises(InputError, match=match):
        Scenario(**{**TRAIN, **kw})


def test_the_cli_takes_megatrons_module_list(capsys):
    args = ["predict", "qwen3-30b-a3b", "--mode", "train", "--impl", "fused", "--seq", "1024",
            "--recompute", "selective", "--recompute-modules", "moe_act,layernorm",
            "--format", "json"]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    assert exc.value.code == 0, err
    assert json.loads(out)["scenario"]["recompute_modules"] == ["layernorm", "moe_act"]
    with pytest.raises(SystemExit) as exc:
        main(args[:6] + ["--recompute-modules", "moe"])  # no --recompute selective
    out, err = capsys.readouterr()
    assert exc.value.code == 2
    assert "recompute=selective" in err and len(err.strip().splitlines()) == 1
