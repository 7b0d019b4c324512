"""Megatron-Core's selective recompute by module (--recompute-modules): which forward kernels the
backward runs again, what the saved activations lose, the recomputed FLOPs HFU adds, and the
inputs refused."""

from __future__ import annotations

import json
from collections import Counter

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


def _redone(model: str, modules: tuple[str, ...], **kw) -> set[str]:  # noqa: ANN003
    """The names (layer prefix dropped) of the recomputed kernels of a training step's first
    layer of each kind; each kernel once per layer."""
    cfg = load_model(model)
    sc = Scenario(**{**TRAIN, **kw}, recompute="selective", recompute_modules=modules)
    names = Counter(o.name for o in build_ops(cfg, sc) if o.name.endswith(".recompute"))
    assert set(names.values()) <= {1}, names.most_common(3)  # nothing recomputed twice
    return {n.split("/", 1)[1].removesuffix(".recompute") for n in names}


def test_each_module_recomputes_its_own_kernels():
    assert _redone("qwen3-30b-a3b", ()) == {"attn/core"}  # Megatron's default: core_attn
    # the MoE block's norm stands alone (no GEMM to fuse it into); the routed experts' activation
    assert _redone("qwen3-30b-a3b", ("layernorm", "moe_act")) == {"mlp/norm", "mlp/act"}
    moe = _redone("qwen3-30b-a3b", ("moe",))
    assert {"mlp/router", "mlp/permute", "mlp/experts_gate_up", "mlp/experts_down"} <= moe
    assert not any(n.startswith("attn/") or n == "mlp/norm" for n in moe)
    # a dense model's norms are fused into the QKV and fc1 GEMMs: nothing to recompute
    assert _redone("llama3-8b", ("layernorm",)) == set()
    # the dense MLP from the residual: its norm is fused into fc1, recomputed with it
    assert _redone("llama3-8b", ("mlp",)) == {"mlp/norm", "mlp/gate_up", "mlp/act", "mlp/down"}
    # moe holds moe_act and the shared experts: each kernel still once
    both = _redone("deepseek-v3", ("moe", "moe_act", "shared_experts"))
    assert both == _redone("deepseek-v3", ("moe",))
    # under expert parallelism the MoE block's all-to-alls run again too
    ep = dict(TRAIN, batch=2, system="dgx-h100", dp=2, ep=2, recompute="selective")
    names = set(api.predict("qwen3-30b-a3b", **ep, recompute_modules=("moe",)).table["name"])
    assert {"L0/mlp/dispatch.alltoall.recompute", "L0/mlp/combine.alltoall.recompute"} <= names


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
        (dict(recompute="selective", recompute_modules=None), "list of module names"),
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


def test_modules_a_model_does_not_have_are_refused():
    kw = dict(mode="train", batch=1, seq=1024, impl="fused", recompute="selective")
    with pytest.raises(InputError, match="no MLA"):
        api.predict("qwen3-30b-a3b", **kw, recompute_modules=("mla_up_proj",))
    with pytest.raises(InputError, match="no experts"):
        api.predict("llama3-8b", **kw, recompute_modules=("moe_act",))


def test_recomputed_tensor_parallel_collectives_overlap_as_the_forwards_do():
    kw = dict(mode="train", batch=1, seq=4096, impl="fused", gpu="h100", system="dgx-h100",
              tp=8, recompute="selective")  # fmt: skip

    def step(modules: tuple[str, ...], overlap: bool) -> float:
        return api.predict("llama3-70b", **kw, recompute_modules=modules,
                           tp_overlap=overlap).total_ms  # fmt: skip

    exposed = step(("core_attn", "mlp"), False) - step(("core_attn",), False)
    overlapped = step(("core_attn", "mlp"), True) - step(("core_attn",), True)
    assert overlapped < 0.9 * exposed  # the gather and reduce-scatter hide under the GEMMs


def test_dense_layers_of_an_moe_model_and_hybrids_free_what_they_recompute():
    def act(model: str, modules: tuple[str, ...]) -> float:
        sc = Scenario(**TRAIN, recompute="selective", recompute_modules=modules)
        return memory_breakdown(load_model(model), sc)["activations"]

    # DeepSeek-V3's three dense layers: their MLPs, from the residual
    assert act("deepseek-v3", ("core_attn", "mlp")) < act("deepseek-v3", ("core_attn",))
    # Nemotron 3 Nano: its MoE blocks, the experts' activations
    nano = [act("nemotron-3-nano", m) for m in [(), ("moe_act",), ("moe",)]]
    assert nano[0] > nano[1] > nano[2] > 0


def test_plans_with_other_modules_never_share_a_cached_step():
    kw = dict(mode="train", batch=1, seq=2048, impl="fused", gpu="h100", recompute="selective")
    a = api.predict("qwen3-30b-a3b", **kw, recompute_modules=("moe",))
    b = api.predict("qwen3-30b-a3b", **kw, recompute_modules=("moe_act",))
    again = api.predict("qwen3-30b-a3b", **kw, recompute_modules=("moe",))
    assert a.total_ms != b.total_ms and a.memory != b.memory
    assert again.total_ms == a.total_ms and again.memory == a.memory
