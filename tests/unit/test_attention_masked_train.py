"""cuDNN's masked SDPA as training runs it (benchmarks/device/masked_attention_probe.py): the
whole square whatever the window, its own pace backward, wider kernels slower under the mask,
dropout at its own cost; the held-out rows of the committed H100 and H200 sweeps, and SDPA's
conversion of a sliding window's boolean mask in the layer's op list."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel.attention import attention_time
from gpuperf.perfmodel.calibrate import is_calibration, with_params
from gpuperf.perfmodel.ops import Attention
from gpuperf.perfmodel.ops_io import op_from_dict
from gpuperf.perfmodel.roofline import op_time
from gpuperf.workloads.config import load_model
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer import build_ops

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
GPUS = [("h100", "h100-sxm5-80gb"), ("h200", "h200-sxm-141gb")]


def _held_out(gpu: str, folder: str, keep) -> list[float]:  # noqa: ANN001
    spec = load_gpu(gpu)
    rows = json.loads((RESULTS / folder / "attention_masked_train.json").read_text())["rows"]
    out = []
    for r in rows:
        op = op_from_dict(r["op"])
        if keep(op) and not is_calibration(op):
            out.append(attention_time(op, spec).time / (r["measured_ms"] * 1e-3) - 1)
    return out


@pytest.mark.parametrize(("gpu", "folder"), GPUS)
def test_held_out_masked_kernels_without_dropout_within_eight_percent(gpu, folder):
    errs = _held_out(gpu, folder, lambda op: not op.dropout)
    assert len(errs) >= 18
    assert statistics.median(abs(e) for e in errs) < 0.08
    assert max(abs(e) for e in errs) < 0.16


@pytest.mark.parametrize(("gpu", "folder"), GPUS)
def test_held_out_masked_kernels_with_dropout_within_fifteen_percent(gpu, folder):
    """The H100's rows of dropout are all held out (its profile takes the H200's fit)."""
    errs = _held_out(gpu, folder, lambda op: op.dropout)
    assert len(errs) >= 6
    assert statistics.median(abs(e) for e in errs) < 0.15
    # Head dim 128 (StarCoder2's) within 16% each; 64 and 256 stray further (README)
    wide = _held_out(gpu, folder, lambda op: op.dropout and op.head_dim == 128)
    assert wide and max(abs(e) for e in wide) < 0.16


def _op(d: int = 128, backward: bool = False, dropout: bool = False) -> Attention:
    return Attention("a", 1, 32, 32, 8192, 8192, d, False, "bf16", mask=True,
                     backward=backward, dropout=dropout)  # fmt: skip


def test_the_backward_takes_its_own_mask_pace():
    """attn_mask_bwd_eff moves the masked backward alone; attn_mask_eff the forward alone."""
    h100 = load_gpu("h100")
    slow_bwd = with_params(h100, attn_mask_bwd_eff=0.3)
    fwd, bwd = _op(), _op(backward=True)
    assert attention_time(fwd, slow_bwd).time == attention_time(fwd, h100).time
    assert attention_time(bwd, slow_bwd).time > 1.3 * attention_time(bwd, h100).time
    slow_fwd = with_params(h100, attn_mask_eff=0.3)
    assert attention_time(bwd, slow_fwd).time == attention_time(bwd, h100).time


def test_a_wider_kernel_loses_more_to_the_mask():
    """attn_mask_wide slows the head-dim-256 kernel only, masked only."""
    h100 = load_gpu("h100")
    wide = with_params(h100, attn_mask_wide=0.5)
    for d, moves in ((128, False), (96, False), (256, True)):
        t0, t1 = attention_time(_op(d), h100).time, attention_time(_op(d), wide).time
        assert (t1 > 1.2 * t0) if moves else (t1 == t0)
    plain = Attention("a", 1, 32, 32, 8192, 8192, 256, True, "bf16")
    assert attention_time(plain, wide).time == attention_time(plain, h100).time


def test_masked_dropout_draws_at_its_own_cost():
    h200 = load_gpu("h200")
    more = with_params(h200, attn_mask_bwd_dropout_ops=10.0)
    masked = _op(backward=True, dropout=True)
    assert attention_time(masked, more).time > 1.2 * attention_time(masked, h200).time
    causal = Attention("a", 1, 32, 32, 8192, 8192, 128, True, "bf16", backward=True,
                       dropout=True)  # fmt: skip
    assert attention_time(causal, more).time == attention_time(causal, h200).time


def test_the_mask_conversion_is_charged_near_what_the_probe_measured():
    """SDPA's two fills and where, as the layer lists them, against the kernels the probe kept
    apart (detail.mask_us) beside each masked forward: PyTorch's generic (non-vectorized)
    elementwise kernel, within 35% (the vectorized one was charged at 30-63% of it)."""
    cfg = load_model("mistral-7b")
    for gpu, folder in GPUS:
        spec = load_gpu(gpu)
        rows = json.loads((RESULTS / folder / "attention_masked_train.json").read_text())["rows"]
        for r in rows:
            op = op_from_dict(r["op"])
            if op.backward or op.dropout:
                continue
            sc = Scenario(mode="prefill", batch=op.batch, seq=op.q_len, impl="eager")
            ops = [o for o in build_ops(cfg, sc) if o.name.startswith("L0/attn/mask_")]
            if op.q_len < 4096:  # inside Mistral's window HF passes no mask
                assert not ops
                continue
            t = sum(op_time(o, spec).time for o in ops)
            assert abs(t / (r["detail"]["mask_us"] * 1e-6) - 1) < 0.35, (gpu, r["name"])


def test_a_single_query_and_unmasked_calls_keep_their_models():
    """The mask's new parameters move masked calls of several queries only: a masked decode
    (one query, the split-KV kernel) and unmasked calls take none of them."""
    h200 = load_gpu("h200")
    moved = with_params(h200, attn_mask_eff=0.2, attn_mask_bwd_eff=0.2, attn_mask_wide=0.3,
                        attn_mask_dropout_ops=15.0, attn_mask_bwd_dropout_ops=15.0)  # fmt: skip
    for op in (Attention("a", 8, 16, 16, 1, 8192, 256, False, "bf16", mask=True),
               Attention("a", 1, 32, 32, 4096, 4096, 256, True, "bf16", dropout=True),
               Attention("a", 1, 32, 32, 4096, 4096, 256, True, "bf16", backward=True,
                         dropout=True)):  # fmt: skip
        assert attention_time(op, moved).time == attention_time(op, h200).time
    fwd = _op(dropout=True)
    assert attention_time(fwd, moved).time > 1.5 * attention_time(fwd, h200).time


def test_a_sliding_windows_boolean_mask_is_made_additive_in_the_querys_dtype():
    """SDPA turns a boolean mask into where(mask, 0, -inf) first, as the probe's kernels show
    (two fills, a where): past the window only, over batch x queries x keys."""
    cfg = load_model("mistral-7b")
    past = {o.name: o for o in build_ops(cfg, Scenario(mode="prefill", batch=2, seq=8192,
                                                         impl="eager"))}  # fmt: skip
    where = past["L0/attn/mask_where"]
    assert where.numel == 2 * 8192 * 8192 and where.out_dtype == "bf16"
    assert {"L0/attn/mask_zero", "L0/attn/mask_neg_inf"} <= set(past)
    inside = {o.name for o in build_ops(cfg, Scenario(mode="prefill", seq=2048, impl="eager"))}
    assert "L0/attn/mask_where" not in inside


def test_the_h100s_rerun_after_the_fit_is_held_out_and_within_ten_percent():
    """attention_masked_train_held.json: the probe run again on an H100 after the fit (its
    predictions committed first), 16 shapes more, every row held out."""
    data = json.loads((RESULTS / "h100-sxm5-80gb" / "attention_masked_train_held.json").read_text())
    assert data["split"] == "held-out"
    spec = load_gpu("h100")
    errs = [abs(attention_time(op_from_dict(r["op"]), spec).time / (r["measured_ms"] * 1e-3) - 1)
            for r in data["rows"]]  # fmt: skip
    assert len(errs) == 72
    assert statistics.median(errs) < 0.06
