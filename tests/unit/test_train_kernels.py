"""The kernels of an eager training step timed alone (benchmarks/device/train_kernels_probe.py):
foreach AdamW, the attention backward, dropout; their mechanisms and held-out accuracy."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel.attention import attention_time, kernel_head_dim
from gpuperf.perfmodel.calibrate import is_calibration, with_params
from gpuperf.perfmodel.membound import FOREACH_LAUNCH_ELEMS, elementwise_time, foreach_launches
from gpuperf.perfmodel.ops import Attention, Copy, Elementwise, Reduce
from gpuperf.perfmodel.ops_io import op_from_dict
from gpuperf.perfmodel.roofline import op_time
from gpuperf.workloads.config import from_hf_dict, load_model
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer import build_ops
from gpuperf.workloads.transformer_layers import vocab_shard

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
GPUS = [("h100", "h100-sxm5-80gb"), ("h200", "h200-sxm-141gb")]


def _held_out(folder: str, keep) -> list[float]:  # noqa: ANN001
    """|predicted/measured - 1| of the held-out rows of train_kernels.json that `keep` selects."""
    spec = load_gpu(folder)
    rows = json.loads((RESULTS / folder / "train_kernels.json").read_text())["rows"]
    out = []
    for r in rows:
        op = op_from_dict(r["op"])
        if keep(op) and not is_calibration(op):
            out.append(abs(op_time(op, spec).time / (r["measured_ms"] * 1e-3) - 1))
    return out


@pytest.mark.parametrize(("gpu", "folder"), GPUS)
def test_foreach_adamw_ops_are_predicted_within_five_percent(gpu, folder):
    errs = _held_out(folder, lambda op: isinstance(op, Elementwise) and op.foreach)
    assert len(errs) >= 30
    assert statistics.median(errs) < 0.05 and max(errs) < 0.10


@pytest.mark.parametrize(("gpu", "folder"), GPUS)
def test_attention_backward_at_head_dims_64_to_128_within_ten_percent(gpu, folder):
    errs = _held_out(folder, lambda op: isinstance(op, Attention) and op.backward
                     and not op.dropout and op.head_dim <= 128)  # fmt: skip
    assert len(errs) >= 20
    assert statistics.median(errs) < 0.10


@pytest.mark.parametrize(("gpu", "folder"), GPUS)
def test_attention_forward_at_small_head_dims_within_ten_percent(gpu, folder):
    """Head dims 64, 80 and 96: the softmax binds at 64, 80 and 96 run the 128 kernel."""
    errs = _held_out(folder, lambda op: isinstance(op, Attention) and not op.backward
                     and not op.dropout and op.head_dim < 128)  # fmt: skip
    assert len(errs) >= 8
    assert statistics.median(errs) < 0.10


def test_foreach_ops_pay_a_fixed_cost_per_launch():
    gpu = with_params(load_gpu("h100"), foreach_launch_s=10e-6)
    n = 5 * FOREACH_LAUNCH_ELEMS + 1  # six launches, the last nearly empty
    plain = Elementwise("x", "mul", n, 1, 1, "bf16")
    assert foreach_launches(n) == 6 and foreach_launches(1) == 1
    t0 = elementwise_time(plain, gpu).time
    t1 = elementwise_time(replace(plain, foreach=True), gpu).time
    assert t1 - t0 == pytest.approx(60e-6)


def test_eager_adamw_runs_eight_foreach_ops_reading_the_gradient_once_for_its_square():
    ops = build_ops(load_model("llama2-7b"), Scenario(mode="train", impl="eager", seq=512))
    opt = [op for op in ops if op.name.startswith("optimizer/")]
    assert len(opt) == 8 and all(isinstance(op, Elementwise) and op.foreach for op in opt)
    assert {op.name: op.n_in for op in opt}["optimizer/v_addcmul"] == 2


def test_kernel_head_dim_pads_to_the_kernels_that_exist():
    assert [kernel_head_dim(d, "hopper") for d in (32, 64, 80, 96, 128, 192, 256)] == [
        64, 64, 128, 128, 128, 192, 256]  # fmt: skip
    assert [kernel_head_dim(d, "ampere") for d in (64, 80, 96, 112)] == [64, 96, 96, 128]


def test_attention_backward_adds_its_two_streaming_passes_and_dropout_costs_time():
    gpu = load_gpu("h100")
    fwd = Attention("a", 2, 32, 32, 2048, 2048, 128, True, "bf16")
    bwd = replace(fwd, backward=True)
    t = attention_time(bwd, gpu)
    # the passes read O and dO and the fp32 dQ, write dQ: on top of the main kernel's floor
    assert t.t_overhead > gpu.params.kernel_floor_s + gpu.params.mma_latency_s
    for op in (fwd, bwd):
        assert attention_time(replace(op, dropout=True), gpu).time > attention_time(op, gpu).time


def test_dropout_keeps_a_byte_mask():
    n = 1000
    fwd = Elementwise("d", "dropout", n, 1, 1, "bf16")
    bwd = Elementwise("d.bwd", "dropout_bwd", n, 1, 1, "bf16")
    assert fwd.cost().bytes_written == 3 * n and bwd.cost().bytes_read == 3 * n


def test_gpt2_trains_with_its_config_dropout_and_bias_gradients():
    """GPT2Config's dropouts default to 0.1; HF applies them in training only."""
    cfg = from_hf_dict({"model_type": "gpt2", "n_embd": 768, "n_layer": 2, "n_head": 12,
                        "vocab_size": 50257, "n_positions": 1024}, name="gpt2-2l")  # fmt: skip
    assert cfg.hidden_dropout == 0.1 and cfg.attention_dropout == 0.1
    train = build_ops(cfg, Scenario(mode="train", impl="eager", batch=2, seq=512))
    names = {op.name.split("/", 1)[-1] for op in train}
    assert {"attn/resid_dropout", "mlp/resid_dropout", "attn/resid_dropout.bwd",
            "mlp/resid_dropout.bwd"} <= names  # fmt: skip
    assert all(op.dropout for op in train if isinstance(op, Attention))
    sums = [op for op in train if isinstance(op, Reduce) and op.name.endswith(".bias_grad")]
    assert len(sums) == 2 * 4  # c_attn, c_proj, c_fc, mlp c_proj per layer
    prefill = build_ops(cfg, Scenario(mode="prefill", impl="eager", batch=2, seq=512))
    assert not any("dropout" in op.name for op in prefill)
    math = build_ops(cfg, Scenario(mode="train", impl="eager", batch=2, seq=512, attn="math"))
    assert len([op for op in math if op.name.endswith(".bias_grad")]) == 2 * 4  # no score GEMMs
    assert len({op.name for op in math}) == len([op.name for op in math])  # names are unique
    assert not any(op.dropout for op in prefill if isinstance(op, Attention))


def test_qwen2_sums_its_qkv_bias_gradients_only():
    train = build_ops(load_model("qwen2-7b"), Scenario(mode="train", impl="eager", seq=256))
    sums = {op.name.split("/", 1)[-1] for op in train if op.name.endswith(".bias_grad")}
    assert sums == {"attn/q.bias_grad", "attn/k.bias_grad", "attn/v.bias_grad"}


def test_the_fitted_softmax_share_is_about_one_exp_and_half_a_pack():
    """Fitted on the head-dim-64 forward rows alone, both GPUs land near 1.5 special-function
    operations per pair (an exp2, and half a conversion packing two probabilities to bf16)."""
    for gpu, _ in GPUS:
        ops = load_gpu(gpu).params.extra["attn_softmax_ops"]
        assert math.isclose(ops, 1.5, rel_tol=0.1)


def test_gemma2_caps_its_logits_in_three_passes_and_gemma3_does_not():
    g2 = from_hf_dict({"model_type": "gemma2", "hidden_size": 256, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                       "intermediate_size": 512, "vocab_size": 4096}, name="g2")  # fmt: skip
    assert g2.final_softcap == 30.0
    train = build_ops(g2, Scenario(mode="train", impl="eager", batch=1, seq=128))
    caps = [op.name for op in train if "softcap" in op.name]
    assert caps == ["lm_head/softcap_div", "lm_head/softcap_tanh", "lm_head/softcap_mul",
                    "lm_head/softcap_mul.bwd", "lm_head/softcap_tanh.bwd",
                    "lm_head/softcap_div.bwd"]  # fmt: skip
    g3 = from_hf_dict({"model_type": "gemma3_text", "hidden_size": 256, "num_hidden_layers": 2,
                       "intermediate_size": 512}, name="g3")  # fmt: skip
    assert g3.final_softcap == 0.0
    assert not any("softcap" in op.name for op in build_ops(g3, Scenario(mode="prefill")))


def test_a_cat_of_strided_views_issues_at_its_own_cost():
    gpu = load_gpu("h100")
    cat = Copy("c", 2 * 2**24, "bf16", generic=True)
    slow = op_time(cat, with_params(gpu, issue_cat=300.0)).time
    assert slow > 1.5 * op_time(cat, with_params(gpu, issue_cat=150.0)).time
    no_cat = dict(gpu.params.extra)
    no_cat.pop("issue_cat", None)
    plain = replace(gpu, params=replace(gpu.params, extra=no_cat))  # falls back to issue_generic
    assert op_time(cat, plain).time == pytest.approx(
        op_time(cat, with_params(plain, issue_cat=no_cat["issue_generic"])).time
    )


@pytest.mark.parametrize(("gpu", "folder"), GPUS)
def test_cats_of_strided_views_are_predicted_within_ten_percent(gpu, folder):
    """The H100's fit on its calibration split; the H200 takes it (all its cat rows held out)."""
    spec = load_gpu(folder)
    errs = []
    for name in ("eager_ew.json", "partial_rope.json"):
        path = RESULTS / folder / name
        if not path.exists():
            continue
        for r in json.loads(path.read_text())["rows"]:
            op = op_from_dict(r["op"]) if "op" in r else None
            if isinstance(op, Copy) and op.generic and not (gpu == "h100" and is_calibration(op)):
                errs.append(abs(op_time(op, spec).time / (r["measured_ms"] * 1e-3) - 1))
    assert len(errs) >= 6
    assert statistics.median(errs) < 0.10


def test_gpt_neox_partial_rotary_backward_slices_and_concatenates_its_qkv_gradients():
    cfg = from_hf_dict({"model_type": "gpt_neox", "hidden_size": 512, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "intermediate_size": 2048,
                        "vocab_size": 4096, "rotary_pct": 0.25}, name="neox")  # fmt: skip
    assert cfg.qkv_per_head and cfg.rotary_frac < 1
    ops = build_ops(cfg, Scenario(mode="train", impl="eager", seq=512))
    names = {op.name.split("/", 1)[-1] for op in ops}
    assert {
        "attn/qkv.grad_cat",
        "attn/rope_q/pass_slice.bwd",
        "attn/rope_k/slices.bwd_add",
    } <= names
    llama = {
        op.name.split("/", 1)[-1]
        for op in build_ops(load_model("llama2-7b"), Scenario(mode="train", impl="eager", seq=512))
    }
    assert not any("slice.bwd_fill" in n or "grad_cat" in n for n in llama)


def test_training_memory_keeps_dropout_masks_and_the_softcapped_logits():
    from gpuperf.step.memory import memory_breakdown

    gpt2 = from_hf_dict({"model_type": "gpt2", "n_embd": 768, "n_layer": 2, "n_head": 12,
                         "vocab_size": 50257, "n_positions": 1024}, name="gpt2-2l")  # fmt: skip
    sc = Scenario(mode="train", impl="eager", batch=2, seq=512)
    with_masks = memory_breakdown(gpt2, sc)["activations"]
    without = memory_breakdown(replace(gpt2, hidden_dropout=0.0, attention_dropout=0.0), sc)
    assert with_masks - without["activations"] == pytest.approx(2 * 2 * 512 * 768 * 2)  # 2 layers
    g2 = from_hf_dict({"model_type": "gemma2", "hidden_size": 256, "num_hidden_layers": 2,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
                       "intermediate_size": 512, "vocab_size": 4096}, name="g2")  # fmt: skip
    capped = memory_breakdown(g2, sc)["activations"]
    plain = memory_breakdown(replace(g2, final_softcap=0.0), sc)["activations"]
    assert capped - plain == pytest.approx(2 * 512 * 4096 * 2)  # the tanh's bf16 output


def test_fit_formats_writes_a_model_table_into_a_profile_that_has_none(tmp_path):
    import importlib.util

    import tomllib

    from gpuperf.hardware.loader import PROFILES_DIR

    spec = importlib.util.spec_from_file_location(
        "fit_formats", Path(__file__).resolve().parents[2] / "benchmarks" / "fit_formats.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    prof = tmp_path / "a100.toml"
    prof.write_text((PROFILES_DIR / "a100-sxm4-80gb.toml").read_text())
    assert "[model]" not in prof.read_text()
    mod.write(prof, {"attn_bwd_eff": 0.5, "foreach_launch_s": 9e-6}, "a test")
    mod.write(prof, {"attn_bwd_eff": 0.6}, "again")  # replaces the line, keeps one
    data = tomllib.loads(prof.read_text())
    assert data["model"]["attn_bwd_eff"] == 0.6 and prof.read_text().count("attn_bwd_eff") == 1
    assert data["model"]["extra"]["foreach_launch_s"] == 9e-6


def test_the_lm_head_runs_the_vocabulary_as_each_implementation_pads_it():
    """Megatron-LM pads the vocabulary to a multiple of 128·tp, vLLM to 64, Hugging Face not at
    all: GPT-2's 50,257 columns miss cuBLAS's aligned fast path only in Hugging Face."""
    assert vocab_shard(50257, 1, "fused", True) == 50304
    assert vocab_shard(50257, 2, "fused", True) == 25216  # 50,432 / 2
    assert vocab_shard(50257, 2, "fused", False) == 25152  # 50,304 / 2
    assert vocab_shard(50257, 2, "eager", True) == 25129
    assert vocab_shard(32000, 4, "fused", True) == 8064  # 32,256 / 4
    assert vocab_shard(32000, 1, "fused", True) == 32000
    cfg = from_hf_dict({"model_type": "gpt2", "n_embd": 1024, "n_layer": 2, "n_head": 16,
                        "vocab_size": 50257, "n_positions": 1024}, name="gpt2-2l")  # fmt: skip
    gpu = load_gpu("h100")
    times = {}
    for impl, vocab in (("fused", 50304), ("eager", 50257)):
        ops = build_ops(cfg, Scenario(mode="train", impl=impl, batch=4, seq=1024))
        head = {op.name: op for op in ops if op.name.startswith("lm_head")}
        assert head["lm_head"].n == vocab and head["lm_head.dgrad"].k == vocab
        ce = next(op for op in ops if op.name.startswith("loss/") and "softmax" in op.shape)
        assert str(vocab) in ce.shape
        times[impl] = op_time(head["lm_head"], gpu).time
    assert times["fused"] < 0.5 * times["eager"]  # the misaligned GEMM's slow path
