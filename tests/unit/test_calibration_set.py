"""The live calibration set: what it contains (every op-level parameter constrained on real GPU
profiles), a real run on the CPU with tiny sizes, the host dispatch probe, and `gpuperf calibrate
--device cpu --allow-cpu` end to end (CLI, here because it is this module's caller)."""

from __future__ import annotations

import sys

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

torch = pytest.importorskip("torch")

from gpuperf.cli import main  # noqa: E402
from gpuperf.hardware.loader import load_gpu  # noqa: E402
from gpuperf.measure import calibration as calib  # noqa: E402
from gpuperf.perfmodel import calibrate as cal  # noqa: E402
from gpuperf.perfmodel.ops import Attention, Copy, Gemm  # noqa: E402
from gpuperf.perfmodel.roofline import op_time  # noqa: E402

GPU_OPS = calib.calibration_ops("cuda")


@pytest.mark.parametrize("profile", ["h100", "h200-sxm-141gb", "a100-sxm4-80gb", "l40s"])
def test_gpu_set_constrains_every_single_gpu_parameter(profile):
    """Each op-level parameter moves at least two predicted op times by > 5% between its bounds;
    only the NCCL ones (several GPUs) and the quantized and grouped GEMM kernels' (their own
    sweeps) are left to result files."""
    # From the uncalibrated parameters: what a fresh calibration starts from.
    names = calib.constrained_params(GPU_OPS, cal.reset_fitted(load_gpu(profile)))
    # the live set measures bf16 kernels only; the formats' parameters come from their sweeps'
    # result files (run_sweeps.py --groups gemm_quant,gemm_quant_decode,grouped_gemm)
    expected = set(cal.OP_PARAMS) - calib.MULTI_GPU_PARAMS - set(cal.LATE_PARAMS)
    # the softmax's share of an attention pair is a late stage's, fitted on the live set's three
    # head-dim-64 prefills (its only rows there)
    assert set(names) == expected | {"attn_softmax_ops"}
    late = [op for op in GPU_OPS if cal.is_late(op)]
    assert len(late) >= 3 and all(isinstance(op, Attention) and op.head_dim == 64 for op in late)


def test_constrained_params_by_hand():
    """Copies alone say nothing about GEMM or attention efficiency."""
    h100 = load_gpu("h100")
    names = calib.constrained_params([Copy("c", 2**k) for k in range(12, 31, 2)], h100)
    assert "mem_eff" in names and "kernel_floor_s" in names
    assert not {"gemm_eff", "attn_eff", "gemm_misaligned_eff", "norm_extra_reads"} & set(names)


def test_gpu_set_spans_the_ranges_asked_for():
    gemms = [op for op in GPU_OPS if isinstance(op, Gemm)]
    assert {op.m for op in gemms} >= {1, 8, 32, 128, 512, 2048, 8192}
    assert all(op.dtype == "bf16" for op in gemms)
    assert sum(cal.misaligned(op) for op in gemms) == 3
    copies = sorted(op.nbytes for op in GPU_OPS if isinstance(op, Copy))
    assert copies[1] == 2**20 and copies[-1] == 2**30  # 1 MiB .. 1 GiB (plus a 4 KiB floor)
    att = [op for op in GPU_OPS if isinstance(op, Attention)]
    assert {op.q_len == 1 for op in att} == {True, False}  # decode and prefill
    classes = {cal.op_class(op) for op in GPU_OPS}
    assert classes >= {
        "gemm misaligned",
        "gemm few tokens (M<=32)",
        "gemm LLM layer shapes",
        "gemm bf16/fp16 >=1024",
        "attention prefill",
        "attention decode",
        "memory-bound >=16MB",
        "memory-bound <16MB",
    }
    kinds = {op.kind for op in GPU_OPS}
    assert kinds == {"gemm", "copy", "elementwise", "norm", "softmax", "attention"}


def test_gpu_set_is_deterministic_and_short():
    again = calib.calibration_ops("cuda")
    assert again == GPU_OPS and len({op.name for op in GPU_OPS}) == len(GPU_OPS)
    # Each call is short enough that min_reps never exceeds the budget by much: the longest op is
    # the 8192³ GEMM, 1.1 TFLOP (~1.6 ms on an H100); all together well under a second per pass.
    h100 = load_gpu("h100")
    times = [op_time(op, h100).time for op in GPU_OPS]
    assert max(times) < 5e-3 and sum(times) < 0.05
    b = calib.BUDGET
    per_op_s = (b.warmup_ms + b.rep_ms) * 1e-3 + 5 * max(times)
    assert len(GPU_OPS) * per_op_s < 30  # timed part; setup and checks add to it (≲ 60 s)


def test_cpu_set_runs_for_real():
    lines: list[tuple[int, int, str]] = []
    h100 = load_gpu("h100")
    samples = calib.measure_calibration_set(h100, "cpu", lambda i, n, m: lines.append((i, n, m)))
    ops = calib.calibration_ops("cpu")
    assert [s.op for s in samples] == ops  # nothing skipped on the CPU
    assert all(s.measured_s > 0 and s.source == calib.SOURCE for s in samples)
    assert [i for i, _, _ in lines] == list(range(1, len(ops) + 1))
    assert all(n == len(ops) for _, n, _ in lines) and "base predicts" in lines[0][2]
    # The fit runs on them and stays inside the bounds (numbers are meaningless on a CPU).
    names = calib.constrained_params(ops, h100)
    params = cal.fit(samples, h100, names, rounds=1)
    for name in names:
        lo, hi = cal.OP_PARAMS[name]
        assert lo <= cal.param_value(params, name) <= hi


def test_host_dispatch_probe_runs():
    d = calib.measure_host_dispatch("cpu", calls=2, reps=2)
    assert 0 < d < 0.1  # seconds per kernel


def test_calibrate_cli_refuses_cpu_without_allow(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "-o", str(tmp_path / "x.toml"), "--gpu", "h100", "--device", "cpu"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--allow-cpu" in err and "Traceback" not in err
    assert not (tmp_path / "x.toml").exists()


def test_calibrate_cli_checks_its_output_before_measuring(capsys, tmp_path, monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("measured before checking the output")

    monkeypatch.setattr(calib, "calibration_ops", no_work)
    blocker = tmp_path / "file"
    blocker.write_text("")
    args = ["calibrate", "-o", str(blocker / "p.toml"), "--gpu", "h100", "--device", "cpu",
            "--allow-cpu"]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert "cannot write" in capsys.readouterr().err


def test_calibrate_cli_on_cpu_writes_a_profile(capsys, tmp_path):
    out = tmp_path / "cpu.toml"
    args = ["calibrate", "-o", str(out), "--gpu", "h100", "--device", "cpu", "--allow-cpu"]
    with pytest.raises(SystemExit) as exc:
        main(args)
    stdout, err = capsys.readouterr()
    assert exc.value.code == 0, err
    assert "fits on every op it measures" in err and "host dispatch" in err
    assert f"[1/{len(calib.calibration_ops('cpu'))}]" in err
    data = tomllib.loads(out.read_text())
    assert data["base"] == "h100-sxm5-80gb"
    model = data["model"]
    assert model["host_dispatch_s"] > 0
    assert "comm_bw_eff" not in model  # not constrained by one device's kernels
    # Measured on the host like host_dispatch_s; the CPU's SDPA builds no plan per shape: far
    # below cuDNN's 23-32 ms per new shape (what is left is the noise of a loaded CI host).
    assert 0 <= model["host_attn_plan_s"] < 2e-2
    measured = {"host_dispatch_s", "host_attn_plan_s", "extra"}
    assert set(model) - measured <= set(cal.OP_PARAMS) - calib.MULTI_GPU_PARAMS
    # the profile describes this machine: not the base profile's pool of machines
    assert model["extra"]["host_pool_factor"] == 1
    assert "wrote" in stdout


def test_collective_set_runs_through_torchrun_on_gloo():
    """The multi-GPU part of a live calibration, on 2 CPU ranks (gloo): a Sample per size, with
    the Collective op a fit can predict."""
    from gpuperf.perfmodel.ops import Collective

    seen = []
    samples = calib.measure_collective_set(
        [2], "cpu", lambda i, n, m: seen.append(m), sizes=(4096, 65536), colls=("allreduce",)
    )
    assert [s.op.nbytes for s in samples] == [4096, 65536]
    assert all(isinstance(s.op, Collective) and s.op.ranks == 2 for s in samples)
    assert all(s.measured_s > 0 for s in samples)
    assert seen and "allreduce on 2 ranks: 2 sizes" in seen[0]
    # One GPU, or the CPU: no collective set in a live calibration.
    assert calib.collective_ranks("cpu") == []
