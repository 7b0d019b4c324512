"""PyTorch-native training as torchtitan runs it: torch.compile'd layers (impl=compile) and the
per-op selective checkpointing policy (recompute=op), with their refusals."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from gpuperf import api
from gpuperf.dtypes import BYTES
from gpuperf.errors import InputError
from gpuperf.workloads.config import from_hf_dict
from gpuperf.workloads.transformer_train import op_policy_matmuls, op_policy_split

# Llama-3.1-8B's width, 8 layers (the shape of benchmarks/results/h100-sxm5-80gb/
# e2e_compile_train.json)
L8 = from_hf_dict(
    {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
     "num_hidden_layers": 8, "num_attention_heads": 32, "num_key_value_heads": 8,
     "head_dim": 128, "vocab_size": 128256, "max_position_embeddings": 131072,
     "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False},
    name="llama3.1-8b-8l",
)  # fmt: skip
TRAIN = dict(gpu="h100", mode="train", batch=1, seq=8192)


def names(p: api.Prediction) -> set[str]:
    """The op names of a prediction without their layer ("L3/attn/k" -> "attn/k")."""
    return {re.sub(r"^L\d+/", "", n) for n in p.table["name"]}


def test_compile_runs_fused_layer_kernels_inside_pytorchs_loss_and_optimizer():
    eager = api.predict(L8, impl="eager", **TRAIN)
    fused = api.predict(L8, impl="fused", **TRAIN)
    comp = api.predict(L8, impl="compile", **TRAIN)
    n_eager, n_fused, n_comp = names(eager), names(fused), names(comp)
    # the layers: one norm kernel (Inductor fuses RMSNorm's eight), not the eager modules'
    assert "attn/norm" in n_comp and not any(n.startswith("attn/norm/") for n in n_comp)
    assert any(n.startswith("attn/norm/") for n in n_eager)
    # around them: Hugging Face's loss and torch.optim's foreach AdamW, as in eager
    for n in ("loss/log_softmax", "optimizer/update", "final_norm/pow"):
        assert n in n_comp and n in n_eager and n not in n_fused
    assert "optimizer/adamw" in n_fused and "optimizer/adamw" not in n_comp
    # fewer kernels than eager; slower than Megatron's fused step (its loss and optimizer)
    assert fused.total_ms < comp.total_ms < eager.total_ms
    # PyTorch's memory: AdamW's moments in the parameters' bf16, no fp32 master copy
    assert comp.memory["optimizer"] == pytest.approx(eager.memory["optimizer"])
    assert comp.memory["optimizer"] < fused.memory["optimizer"] / 2


def test_op_policy_recomputes_every_second_matmul_and_everything_but_the_attention():
    plain = api.predict(L8, impl="eager", **TRAIN)
    op = api.predict(L8, impl="eager", recompute="op", **TRAIN)
    full = api.predict(L8, impl="eager", recompute="full", **TRAIN)
    again = {n[: -len(".recompute")] for n in names(op) if n.endswith(".recompute")}
    gemms = {n for n in again if n in ("attn/q", "attn/k", "attn/v", "attn/out", "mlp/gate",
                                       "mlp/up", "mlp/down")}  # fmt: skip
    assert gemms == {"attn/k", "attn/out", "mlp/up"}  # q, v, gate and down are kept
    assert "attn/core" not in again  # SDPA's output is kept
    assert {"attn/norm/pow", "mlp/act", "attn/rope_q/mul_cos"} <= again
    assert plain.total_ms < op.total_ms < full.total_ms
    act = [p.memory["activations"] for p in (plain, op, full)]
    assert act[0] > act[1] > act[2]
    # HFU counts the recomputed matmuls' FLOPs (k, o and up per layer), MFU does not
    h, kv, f = L8.hidden, L8.kv_heads * L8.hd, L8.intermediate
    again = 2 * L8.layers * (h * kv + L8.heads * L8.hd * h + h * f) * 8192
    assert op.hfu / op.mfu == pytest.approx(1 + again / (op.mfu * op.total_ms / 1e3 * 989.4e12),
                                            rel=1e-3)  # fmt: skip
    # compiled layers: the same matmuls again, as the model's own Linears (q, k, v apart)
    comp = api.predict(L8, impl="compile", recompute="op", **TRAIN)
    assert {"attn/k.recompute", "attn/out.recompute", "mlp/up.recompute"} <= names(comp)
    assert "attn/qkv.recompute" not in names(comp)


def test_the_op_policy_counts_mm_alone_so_biased_linears_always_run_again():
    # Qwen2's q, k and v carry biases: addmm, neither kept nor counted; o, gate, up, down are
    # the policy's 1st..4th mm, so o and up are kept; down would run again but the
    # recomputation stops before it (nothing needs its output). GPT-2's every Linear is biased.
    qwen2 = replace(L8, qkv_bias=True)
    kept, again = op_policy_split(qwen2)
    assert [k[0] for k in kept] == ["attn/out", "mlp/up"]
    assert [a[0] for a in again] == ["attn/q", "attn/k", "attn/v", "mlp/gate"]
    assert op_policy_split(replace(L8, linear_bias=True))[0] == []


def test_op_policy_keeps_the_input_the_odd_matmuls_and_the_attention_output():
    widths = op_policy_matmuls(L8)
    assert [w[0] for w in widths] == ["attn/q", "attn/k", "attn/v", "attn/out", "mlp/gate",
                                      "mlp/up", "mlp/down"]  # fmt: skip
    h, q, kv, f = L8.hidden, L8.heads * L8.hd, L8.kv_heads * L8.hd, L8.intermediate
    op = api.predict(L8, impl="eager", recompute="op", **TRAIN).memory["activations"]
    full = api.predict(L8, impl="eager", recompute="full", **TRAIN).memory["activations"]
    # beside full recomputation's input: q, v, gate and down's outputs, the attention's output
    # and its fp32 log-sum-exp per head, every layer (the loss's buffers set both peaks)
    kept = 8192 * (BYTES["bf16"] * (q + kv + f + h + q) + 4 * L8.heads)
    assert op - full == pytest.approx(L8.layers * kept)
    # Phi-3's one q/k/v and one gate/up Linear: four matmuls, o and down run again
    merged = replace(L8, qkv_fused=True, gate_up_fused=True)
    assert [w[0] for w in op_policy_matmuls(merged)] == ["attn/qkv", "attn/out", "mlp/gate_up",
                                                        "mlp/down"]  # fmt: skip


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(impl="compile", mode="prefill"), "impl=compile models training steps"),
        (dict(impl="compile", mode="train", tp=2), "tp=2 with compiled layers"),
        (dict(impl="compile", mode="train", cp=2), "cp=2 with compiled layers"),
        (dict(impl="fused", mode="train", recompute="op"), "--impl eager or compile"),
        (dict(impl="eager", mode="train", dtype="fp8"), "eager fp8 training"),
    ],
)
def test_what_compile_and_the_op_policy_cannot_run_as_is_refused(kw, message):
    with pytest.raises(InputError, match=message):
        api.predict("llama3-8b", gpu="h100", system="dgx-h100" if kw.get("tp", 1) * kw.get(
            "cp", 1) > 1 else None, **kw)  # fmt: skip


def test_compile_and_the_op_policy_refuse_moe_layers():
    with pytest.raises(InputError, match="dense attention layers"):
        api.predict("mixtral-8x7b", gpu="h100", mode="train", impl="compile", seq=1024)
    with pytest.raises(InputError, match="recompute=op"):
        api.predict("mixtral-8x7b", gpu="h100", mode="train", impl="eager", recompute="op",
                    seq=1024)  # fmt: skip


def test_compile_plans_use_pytorchs_data_parallelism():
    # FSDP2 over 8 GPUs, as torchtitan's Table 1 runs it: the per-layer gathers around the
    # compiled layers, torch.optim on this rank's shard
    p = api.predict("llama3-8b", system="dgx-h100", mode="train", impl="compile", recompute="op",
                    dp=8, zero=3, global_batch=16, micro_batch=2, seq=8192)  # fmt: skip
    n = names(p)
    assert any("allgather" in x for x in n) and "optimizer/update" in n
    assert p.scenario["dp_overlap"] is True  # PyTorch's default, as with eager


def test_torchao_float8_scales_each_linear_in_both_directions():
    p = api.predict(L8, impl="compile", dtype="fp8", recompute="op", **TRAIN)
    n = names(p)
    linears = ("attn/q", "attn/k", "attn/v", "attn/out", "mlp/gate", "mlp/up", "mlp/down")
    for lin in linears:  # each Linear casts its own input, weight and output gradient
        for step in ("x_amax", "x_cast", "w_amax", "w_cast", "dy_amax", "dy_cast", "xt_cast",
                     "wt_cast"):  # fmt: skip
            assert f"{lin}.{step}" in n, (lin, step)
    assert not any(x.endswith("_quant") for x in n)  # not Transformer Engine's one cast
    # the policy keeps max's output: the casts run again, the amaxes do not
    assert "attn/q.x_cast.recompute" in n and "attn/q.x_amax.recompute" not in n
    dy = p.table[p.table["name"].str.endswith("mlp/down.dy_cast")].iloc[0]
    assert dy["bytes"] == pytest.approx(8192 * 4096 * (2 + 2 * 1), rel=1e-3)  # read bf16, two fp8
    # Transformer Engine's fp8 (fused) charges none of it
    fused = api.predict(L8, impl="fused", dtype="fp8", **TRAIN)
    assert not any(x.endswith((".x_amax", ".x_cast", ".dy_cast")) for x in names(fused))


def test_selective_checkpointing_costs_the_eager_host_not_the_compiled_one():
    # its dispatch mode (train_host_sac.json): each forward kernel of a checkpointed layer and
    # each recomputed one cost the host more in eager PyTorch; compiled layers pay neither
    small = dict(gpu="h100", mode="train", batch=1, seq=256)
    eager = [api.predict("llama3.2-1b", impl="eager", recompute=r, **small) for r in ("none", "op")]
    comp = [
        api.predict("llama3.2-1b", impl="compile", recompute=r, **small) for r in ("none", "op")
    ]
    n_rec = sum(n.endswith(".recompute") for n in eager[1].table["name"])
    assert n_rec > 0
    assert eager[1].extra["host_ms"] > 1.8 * eager[0].extra["host_ms"]
    assert comp[1].extra["host_ms"] < 1.5 * comp[0].extra["host_ms"]


def test_search_over_compiled_layers_tries_data_and_pipeline_plans_with_the_op_policy():
    from gpuperf.hardware.loader import load_system
    from gpuperf.step.search import plan_specs
    from gpuperf.workloads.config import load_model

    specs = list(plan_specs(load_model("llama3-8b"), load_system("dgx-h100"), 16,
                            global_batch=32, seq=4096, impl="compile"))  # fmt: skip
    assert specs and {s["tp"] for s in specs} == {1}
    assert {s["recompute"] for s in specs} == {"none", "op", "full"}
    res = api.search("llama3-8b", system="dgx-h100", gpus=16, global_batch=32, seq=4096,
                     impl="compile")  # fmt: skip
    assert res.ranked and all(r.scenario.impl == "compile" for r in res.ranked)


def test_early_stop_only_where_nothing_after_the_down_projection_is_saved():
    # Gemma-2's post-norm and GPT-3's dropout save tensors made from the down projection's
    # output: the whole layer runs again; under TP its all-reduce goes with it
    def again(model: str, **kw: object) -> set[str]:
        p = api.predict(model, gpu="h100", mode="train", impl="eager", recompute="full",
                        seq=512, **kw)  # fmt: skip
        return {n[: -len(".recompute")] for n in names(p) if n.endswith(".recompute")}

    assert "mlp/down" not in again("llama3-8b")
    assert "mlp/down" in again("gemma2-9b") and "mlp/down" in again("gpt3-175b")
    tp = again("llama3-8b", system="dgx-h100", tp=2)
    assert not any(n.startswith("mlp/down") for n in tp)
    # HFU: the recomputed FLOPs without the down projection PyTorch skips (Megatron reruns it)
    from gpuperf.step.mfu import recompute_flops_per_token
    from gpuperf.workloads.scenario import Scenario

    def redo(impl: str) -> float:
        return recompute_flops_per_token(L8, Scenario(mode="train", impl=impl, recompute="full"))

    assert redo("fused") - redo("eager") == pytest.approx(
        2 * L8.layers * L8.hidden * L8.intermediate
    )
    assert redo("compile") == redo("eager")


def test_op_memory_keeps_the_input_and_row_parallel_outputs_whole_under_tp():
    one = api.predict("llama3-8b", gpu="h100", mode="train", impl="eager", recompute="op",
                      seq=4096, batch=8)  # fmt: skip
    two = api.predict("llama3-8b", system="dgx-h100", mode="train", impl="eager", tp=2,
                      recompute="op", seq=4096, batch=8)  # fmt: skip
    full1 = api.predict("llama3-8b", gpu="h100", mode="train", impl="eager", recompute="full",
                        seq=4096, batch=8)  # fmt: skip
    full2 = api.predict("llama3-8b", system="dgx-h100", mode="train", impl="eager", tp=2,
                        recompute="full", seq=4096, batch=8)  # fmt: skip
    kept1 = one.memory["activations"] - full1.memory["activations"]
    kept2 = two.memory["activations"] - full2.memory["activations"]
    # down's output (whole) stays, q, v, gate, the attention output and LSE halve
    assert kept1 / 2 < kept2 < kept1


def test_the_early_stop_rule_matches_every_layer_it_is_applied_to():
    # down_output_unneeded(cfg) is the one rule for where PyTorch's checkpoint stops: where it
    # holds, a layer's forward after its down projection is the residual add (and the down
    # projection's collectives) alone; where it does not, something after it is saved (a
    # post-norm, a dropout); an MoE model's dense first layers (DeepSeek's) follow it too
    import json
    from pathlib import Path

    from gpuperf.workloads.config import from_hf_dict, load_model, preset_names
    from gpuperf.workloads.transformer_train import _AFTER_LAST_SAVED, down_output_unneeded

    hf = Path(__file__).parent / "data" / "hf_configs"
    cfgs = [load_model(n) for n in preset_names()]
    cfgs += [from_hf_dict(json.loads(f.read_text()), name=f.stem) for f in sorted(hf.glob("*"))]
    checked = {True: 0, False: 0}
    for cfg in cfgs:
        if cfg.layer_pattern:  # hybrids: not every block has an MLP
            continue
        for impl in ("eager", "compile"):
            try:
                p = api.predict(cfg, gpu="h100", mode="train", impl=impl, seq=256)
            except InputError:  # compile refuses MoE, MLA and math-SDPA models
                continue
            rows = list(p.table["name"])
            first_bwd = next(i for i, n in enumerate(rows) if ".bwd" in n or ".dgrad" in n)
            fwd = [n[3:] for n in rows[:first_bwd] if n.startswith("L0/")]
            downs = [i for i, n in enumerate(fwd) if n == "mlp/down"]
            if not downs:  # an MoE layer: no dense down projection to stop before
                continue
            tail = fwd[downs[-1] + 1 :]
            plain = all(n in _AFTER_LAST_SAVED or n.startswith("mlp/down.") for n in tail)
            assert down_output_unneeded(cfg) == plain, (cfg.name, impl, tail)
            checked[plain] += 1
    assert checked[True] >= 20 and checked[False] >= 4


def test_compiled_layers_run_hugging_faces_attention_with_its_mask():
    # Phi-3-mini's 2,047-token window is shorter than the sequence: HF hands SDPA a mask, and a
    # compiled layer runs the module's own SDPA call (measured: e2e_validate_families.json)
    import json
    from pathlib import Path

    hf = Path(__file__).parent / "data" / "hf_configs"
    phi3 = from_hf_dict(json.loads((hf / "phi-3-mini-4k-instruct.json").read_text()), name="phi3")

    def core(cfg: object, **kw: object) -> str:
        p = api.predict(cfg, gpu="h200", mode="train", batch=2, **kw)
        return p.table.set_index("name").loc["L0/attn/core", "shape"]

    for impl in ("eager", "compile"):
        assert core(phi3, impl=impl, seq=2048).endswith("mask")
        assert "mask" not in core(phi3, impl=impl, seq=1024)  # within the window: causal
    # with a mask GQA's K and V are repeated to every query head first (use_gqa_in_sdpa)
    p = api.predict("mistral-7b", gpu="h100", mode="train", impl="compile", seq=8192)
    names = set(p.table["name"])
    assert {"L0/attn/repeat_k", "L0/attn/repeat_v"} <= names
    assert "L0/attn/core.dk_sum" not in names
    # SDPA applies the module's attention dropout under a mask as well (StarCoder2's 0.1)
    sc2 = from_hf_dict(json.loads((hf / "starcoder2-7b.json").read_text()), name="sc2")
    assert core(sc2, impl="eager", seq=2048).endswith("dropout")


def test_full_recompute_of_float8_layers_stops_before_the_down_matmul_but_recasts():
    # torchao's float8 casts come after the layer's kernels in its list; the backward saved their
    # outputs (the down projection's fp8 inputs too), so they run again while the down matmul
    # and the residual add do not
    p = api.predict("llama3-8b", gpu="h100", mode="train", impl="compile", dtype="fp8",
                    seq=4096, batch=2, recompute="full")  # fmt: skip
    again = {n[3 : -len(".recompute")] for n in p.table["name"]
             if n.startswith("L0/") and n.endswith(".recompute")}  # fmt: skip
    fwd = {
        n[3:]
        for n in p.table["name"]
        if n.startswith("L0/") and n.endswith((".x_amax", ".x_cast", ".w_amax", ".w_cast"))
    }
    assert len(fwd) == 28 and fwd <= again
    assert "mlp/down" not in again and "mlp/gate_up" in again
