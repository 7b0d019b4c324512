"""Hugging Face serving: cuDNN plans the step's gathered SDPA once per (queries, keys) shape the
process has not met (EngineProfile.plan_new_shapes): a closed loop of fixed lengths meets its
shapes again, a burst never does."""

from __future__ import annotations

import pytest

from gpuperf.errors import InputError
from gpuperf.hardware.loader import load_gpu
from gpuperf.step.serve_engines import load_engine
from gpuperf.step.serve_load import make_workload, parse_lengths
from gpuperf.step.serve_run import Server
from gpuperf.workloads.config import load_model


def _wall(engine, **load) -> float:  # noqa: ANN001, ANN003
    server = Server(load_model("llama3.2-1b"), load_gpu("h200"), None, engine)
    lengths = parse_lengths(128, "--isl"), parse_lengths(16, "--osl")
    return server.run(make_workload(*lengths, **load)).summary["wall_s"]


def test_hf_plans_new_shapes_only():
    assert load_engine("hf").plan_new_shapes
    assert not load_engine("vllm").plan_new_shapes
    with pytest.raises(InputError, match="gather_sdpa"):
        load_engine("vllm", plan_new_shapes=True)


def _plans(**load) -> float:  # noqa: ANN003
    """Plans the simulated run paid: its wall time over the same run planning nothing, in
    plan times."""
    planned = _wall(load_engine("hf"), **load)
    none = _wall(load_engine("hf", plan_new_shapes=False), **load)
    return (planned - none) / load_gpu("h200").params.host_attn_plan_s


def test_a_closed_loop_of_fixed_lengths_meets_its_shapes_again():
    """Four waves of four users with equal lengths (a prefill step and 15 decode steps each)
    repeat the first wave's (queries, keys) pairs: about one wave's steps plan, not four."""
    plans = _plans(requests=16, concurrency=4)
    assert 12 < plans < 24


def test_a_burst_meets_no_shape_twice():
    """All at once the keys grow every step: each of the 16 steps plans."""
    assert abs(_plans(requests=8) - 16) < 1.5
