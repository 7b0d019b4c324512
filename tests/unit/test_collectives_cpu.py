"""Collectives: nccl-tests size and busbw conventions, the #wrong check, a real 2-rank gloo run."""

import types

import pytest
import torch

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.measure import collective_worker as cw
from gpuperf.measure.collectives import Launch, check_launch, run_collective
from gpuperf.measure.launch import child_env


def test_bus_factors_are_nccl_tests():  # NVIDIA/nccl-tests doc/PERFORMANCE.md
    assert cw.BUS_FACTOR["allreduce"](8) == pytest.approx(2 * 7 / 8)
    assert cw.BUS_FACTOR["allgather"](4) == pytest.approx(3 / 4)
    assert cw.BUS_FACTOR["reducescatter"](4) == pytest.approx(3 / 4)
    assert cw.BUS_FACTOR["alltoall"](8) == pytest.approx(7 / 8)
    assert cw.BUS_FACTOR["broadcast"](8) == 1.0 and cw.BUS_FACTOR["sendrecv"](2) == 1.0


def test_sizes_follow_nccl_tests_conventions():
    # allgather: the size is the total output; each of 4 ranks sends a quarter.
    assert cw.element_counts("allgather", 1024, 2, 4) == (128, 1024)
    # reducescatter: total input, each rank's chunk rounded down to 16 bytes, as nccl-tests does
    # (500 elements over 3 ranks: 166 each -> 160).
    assert cw.element_counts("reducescatter", 1000, 2, 3) == (480, 960)
    assert cw.element_counts("allgather", 3 * 2**20, 2, 3) == (2**20 // 2, 3 * 2**20)
    count, _ = cw.element_counts("alltoall", 2**30, 4, 3)  # fp32: 4 elements to 16 bytes
    assert count % 3 == 0 and (count // 3 * 4) % 16 == 0
    assert cw.element_counts("allreduce", 1000, 4, 8) == (250, 1000)
    assert cw.element_counts("alltoall", 2, 2, 4) == (4, 8)  # at least one element per rank


@pytest.mark.parametrize("coll", cw.COLLS)
def test_wrong_count_catches_a_collective_that_did_nothing(coll):
    """With 2 ranks, a no-op 'collective' must leave wrong elements (the check can fail)."""
    noop = types.SimpleNamespace(
        all_reduce=lambda *a, **k: None,
        all_gather_into_tensor=lambda out, x: out.fill_(-3),
        reduce_scatter_tensor=lambda out, x: out.fill_(-3),
        all_to_all_single=lambda out, x: out.fill_(-3),
        broadcast=lambda *a, **k: None,
        P2POp=lambda *a: None,
        isend=None,
        irecv=None,
        batch_isend_irecv=lambda ops: [],
    )
    fn, result, expect = cw._setup(torch, noop, coll, 70, 2, 1, torch.bfloat16, "cpu")
    fn()
    if coll == "sendrecv":
        result().fill_(-3)  # what an unwritten receive buffer might hold
    assert int((result() != expect).sum()) > 0


def test_gloo_allreduce_two_ranks_through_torchrun():
    seen = []
    env, rows = run_collective(
        "allreduce",
        [4096, 1 << 16],
        Launch(nproc=2, device="cpu"),
        warmup_ms=1,
        rep_ms=5,
        timeout_s=120,
        on_row=lambda env, row: seen.append(row["bytes"]),
    )
    assert seen == [4096, 1 << 16]
    assert env["backend"] == "gloo" and env["world_size"] == 2
    for row, nbytes in zip(rows, [4096, 1 << 16], strict=True):
        assert row["wrong"] == 0
        assert row["bytes"] == nbytes and row["count"] == nbytes // 2  # bf16
        assert row["algbw_gbps"] == pytest.approx(nbytes / (row["measured_ms"] * 1e-3) / 1e9)
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * (2 - 1) / 2)
        assert row["p10_ms"] <= row["measured_ms"] <= row["p90_ms"]


def test_launch_checks():
    for coll in ("sendrecv", "allreduce"):  # allreduce on one rank exited 0 before
        with pytest.raises(InputError, match="at least 2 ranks, got --nproc 1"):
            check_launch(coll, Launch(nproc=1, device="cpu"))
    for bad in ("localhost:99999", "localhost:0", "localhost:x", ":29500", "host"):
        with pytest.raises(InputError, match="port in 1-65535"):
            check_launch("allreduce", Launch(nproc=2, device="cpu", rdzv_endpoint=bad))
    with pytest.raises(InputError, match="rdzv-endpoint"):
        check_launch("allreduce", Launch(nproc=1, nnodes=2, device="cpu"))
    with pytest.raises(InputError, match="unknown collective"):
        check_launch("allreduse", Launch(device="cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(EnvironmentUnavailable, match="2 GPUs per node requested, 0 present"):
            check_launch("allreduce", Launch(nproc=2, device="cuda"))


def test_child_env_turns_nvls_off_unless_set(monkeypatch):
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    assert child_env()["NCCL_NVLS_ENABLE"] == "0"
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    assert child_env()["NCCL_NVLS_ENABLE"] == "1"
