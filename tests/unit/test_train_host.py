"""The host of a Hugging Face checkpointed training step (gpuperf.step.cost: HOST_RECOMPUTE_FACTOR,
HOST_CKPT_LAYER_KERNELS) and benchmarks/train_host_fit.py, which derives both from the probes."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from gpuperf import api
from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel.calibrate import with_params
from gpuperf.perfmodel.ops import Elementwise, Gemm
from gpuperf.step import cost
from gpuperf.step.cost import HostRules, _is_checkpointed_forward
from gpuperf.workloads.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import train_host_fit  # noqa: E402


def _rules(**kw) -> HostRules:  # noqa: ANN003
    return HostRules.of(Scenario(**kw), load_gpu("h100"))


def test_rules_apply_to_eager_checkpointed_training_only() -> None:
    gpu = load_gpu("h100")
    ckpt = _rules(mode="train", impl="eager", recompute="full")
    assert ckpt.recompute == pytest.approx(cost.HOST_RECOMPUTE_FACTOR)
    assert ckpt.ckpt_layer == pytest.approx(
        gpu.params.host_dispatch_s * cost.HOST_CKPT_LAYER_KERNELS
    )
    for kw in ({"mode": "train", "impl": "eager"}, {"mode": "train", "impl": "fused",
               "recompute": "full"}, {"mode": "train", "impl": "eager",
               "recompute": "selective"}, {"mode": "prefill", "impl": "eager"}):  # fmt: skip
        rules = _rules(**kw)
        assert (rules.recompute, rules.ckpt_layer) == (1.0, 0.0), kw


def test_profile_extra_overrides_the_constants() -> None:
    gpu = with_params(load_gpu("h100"), host_recompute_factor=1.5, host_ckpt_layer_kernels=10.0)
    rules = HostRules.of(Scenario(mode="train", impl="eager", recompute="full"), gpu)
    assert rules.recompute == 1.5
    assert rules.ckpt_layer == pytest.approx(10 * gpu.params.host_dispatch_s)


def test_forward_of_a_layer_is_told_from_its_recomputation() -> None:
    fwd = (Elementwise("norm/pow", "pow", 1024), Gemm("attn/q", 64, 64, 64))
    rec = tuple(replace(op, name=op.name + ".recompute") for op in fwd)
    assert _is_checkpointed_forward(fwd)
    assert not _is_checkpointed_forward(rec + fwd)
    assert not _is_checkpointed_forward(())


def test_host_bound_checkpointed_step_pays_the_recomputation_host() -> None:
    """On tiny shapes (host-bound) the checkpointed step's extra time over the plain step is its
    recomputed kernels at the factor and each layer's checkpoint cost; with the factor at 1
    and no layer cost, only the recomputed kernels' launches."""
    kw = {"mode": "train", "impl": "eager", "batch": 1, "seq": 64}
    gpu = load_gpu("h100")
    neutral = with_params(gpu, host_recompute_factor=1.0, host_ckpt_layer_kernels=0.0)
    plain = api.predict("llama3.2-1b", gpu=gpu, **kw)
    ckpt = api.predict("llama3.2-1b", gpu=gpu, recompute="full", **kw)
    base = api.predict("llama3.2-1b", gpu=neutral, recompute="full", **kw)
    n_rec = int(ckpt.table["name"].str.endswith(".recompute").sum())
    layers = 16
    h = gpu.params.host_dispatch_s * 1e3
    assert base.total_ms - plain.total_ms == pytest.approx(n_rec * h, rel=0.05)
    want = n_rec * h * cost.HOST_RECOMPUTE_FACTOR + layers * h * cost.HOST_CKPT_LAYER_KERNELS
    assert ckpt.total_ms - plain.total_ms == pytest.approx(want, rel=0.05)


def test_gpu_bound_checkpointed_step_hides_the_host() -> None:
    """A large step's recomputation runs under the GPU: the host terms change nothing."""
    kw = {"mode": "train", "impl": "eager", "batch": 8, "seq": 4096, "recompute": "full"}
    gpu = load_gpu("h100")
    neutral = with_params(gpu, host_recompute_factor=1.0, host_ckpt_layer_kernels=0.0)
    a = api.predict("llama2-7b", gpu=gpu, **kw).total_ms
    b = api.predict("llama2-7b", gpu=neutral, **kw).total_ms
    assert a == pytest.approx(b, rel=1e-3)


def test_fit_reads_both_depths_of_each_family() -> None:
    path = ROOT / "benchmarks" / "results" / "h200-sxm-141gb" / "train_host.json"
    rows = train_host_fit.pairs(path)
    assert {r["model"] for r in rows} >= {"llama3.2-1b", "gemma-3-1b", "gpt2-xl"}
    for r in rows:
        assert 5 < r["inf_us_per_kernel"] < 200
        assert 0.5 < r["fwd"] < 2  # the forward with autograd costs about the no-grad one


def test_constants_are_the_probes_medians() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_host_fit.py"),
                          "--check"], capture_output=True, text=True, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "12 pairs" in out.stdout
