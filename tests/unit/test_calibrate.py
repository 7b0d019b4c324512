"""Calibration: the split, the classes, and that the fitter recovers known parameters."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from gpuperf.hardware.loader import load_gpu
from gpuperf.hardware.spec import ModelParams
from gpuperf.perfmodel import calibrate as cal
from gpuperf.perfmodel import host_pool
from gpuperf.perfmodel.ops import Attention, Collective, Copy, Elementwise, Gemm
from gpuperf.perfmodel.roofline import op_time

H100 = dataclasses.replace(load_gpu("h100"), params=ModelParams())


def test_split_is_stable_and_about_a_third():
    ops = [Gemm(f"g{i}", 128 * i, 4096, 4096) for i in range(1, 301)]
    first = [cal.is_calibration(o) for o in ops]
    assert first == [cal.is_calibration(dataclasses.replace(o, name="other")) for o in ops]
    share = sum(first) / len(first)
    assert 0.2 < share < 0.4


@pytest.mark.parametrize(
    ("op", "cls"),
    [
        (Gemm("x", 4096, 4096, 4096), "gemm bf16/fp16 >=1024"),
        (Gemm("llama2-7b/t512/L0/attn/qkv", 512, 12288, 4096), "gemm LLM layer shapes"),
        (Gemm("x", 8, 4096, 4096), "gemm few tokens (M<=32)"),
        (Gemm("x", 4096, 4096, 4097), "gemm misaligned"),
        (Gemm("x", 4097, 4096, 4096), "gemm bf16/fp16 >=1024"),  # M is not a leading dim
        (Attention("a", 1, 32, 8, 1, 4096, 128), "attention decode"),
        (Attention("a", 1, 32, 8, 4096, 4096, 128), "attention prefill"),
        (Copy("c", 2**30), "memory-bound >=16MB"),
        (Elementwise("e", "add", 1024, 2), "memory-bound <16MB"),
        (Collective("c", "allreduce", 2**20, 4), "collective >=1MiB"),
        (Collective("c", "allgather", 3 * 2**28, 3), "collective >=1MiB"),  # 256 MiB per rank
        (Collective("c", "allgather", 2**30, 3), "collective misaligned"),
    ],
)
def test_op_classes(op, cls):
    assert cal.op_class(op) == cls


def test_link_efficiency_is_fitted_on_large_broadcasts_only():
    stage = dict((names, select) for names, select in cal.STAGED)[("comm_bw_eff",)]
    assert stage(Collective("b", "broadcast", 2**30, 4))
    assert not stage(Collective("b", "broadcast", 2**20, 4))  # latency still counts
    assert not stage(Collective("a", "allgather", 2**30, 4))  # has the ring copy tail


def _synthetic(truth):
    ops = [Gemm(f"g{m}", m, 8192, 8192) for m in (1, 16, 64, 256, 1024, 2048, 4096, 8192)]
    ops += [Gemm(f"m{m}", m, 4096, 4095) for m in (1024, 4096)]
    ops += [Copy(f"c{n}", 2**n) for n in range(12, 32, 2)]
    ops += [Elementwise(f"e{n}", "add", 2**n, 2) for n in range(10, 29, 3)]
    return [cal.Sample(op, op_time(op, truth).time) for op in ops]


def test_fit_recovers_known_parameters():
    truth = cal.with_params(
        H100, gemm_eff=0.7, mem_eff=0.82, kernel_floor_s=3e-6, gemm_misaligned_eff=0.2
    )
    names = ["kernel_floor_s", "mem_eff", "gemm_eff", "gemm_misaligned_eff"]
    got = cal.fit(_synthetic(truth), H100, names)
    for name in names:
        assert getattr(got, name) == pytest.approx(getattr(truth.params, name), rel=0.05), name


def test_fit_improves_loss_and_keeps_bounds():
    truth = cal.with_params(H100, gemm_eff=0.95, mem_eff=0.99)
    got = cal.fit(_synthetic(truth), H100, ["gemm_eff", "mem_eff"])
    for name in ("gemm_eff", "mem_eff"):
        lo, hi = cal.OP_PARAMS[name]
        assert lo <= getattr(got, name) <= hi


def test_reset_fitted_keeps_facts_and_drops_old_fits():
    g = cal.with_params(H100, attn_exp_overlap=1.0, gemm_eff=0.5, comm_bw_eff=0.7)
    fresh = cal.reset_fitted(g)
    assert fresh.params.attn_exp_overlap == 1.0
    assert fresh.params.gemm_eff == ModelParams().gemm_eff
    assert "comm_bw_eff" not in fresh.params.extra


def test_params_toml_is_a_loadable_profile(tmp_path):
    params = cal.with_params(H100, gemm_eff=0.77, comm_bw_eff=0.9).params
    text = cal.params_toml(params, "h100-sxm5-80gb", "a test", ["gemm_eff", "comm_bw_eff"])
    path = tmp_path / "cal.toml"
    path.write_text(text)
    g = load_gpu(str(path))
    assert g.params.gemm_eff == pytest.approx(0.77)
    assert g.params.extra["comm_bw_eff"] == pytest.approx(0.9)
    assert g.sms == 132  # inherited from the base profile


def test_attention_plan_from_probe_rows():
    rows = [{"backend": "default", "seen_before": False, "host_ms": 500.0}]  # start-up: left out
    rows += [{"backend": "default", "seen_before": False, "host_ms": m} for m in (23, 24, 22)]
    rows += [{"backend": "default", "seen_before": True, "host_ms": m} for m in (0.03, 0.05)]
    rows += [{"backend": "flash", "seen_before": False, "host_ms": 9.0}]  # other backends: no
    assert host_pool.attn_plan_s(rows) == pytest.approx((23 - 0.04) / 1e3)
    assert host_pool.attn_plan_s([r for r in rows if not r["seen_before"]]) is None


def test_calibrate_from_reads_the_sdpa_probe(tmp_path, capsys):
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    from gpuperf.cli import main

    src = Path(__file__).parents[2] / "benchmarks/results/h200-sxm-141gb"
    for name in ("sdpa_shape_probe.json", "e2e_eager_host.json"):
        (tmp_path / name).write_text((src / name).read_text())
    out = tmp_path / "p.toml"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--from", str(tmp_path), "--gpu", "h200", "-o", str(out)])
    assert exc.value.code == 0, capsys.readouterr().err
    model = tomllib.loads(out.read_text())["model"]
    assert model["host_attn_plan_s"] == pytest.approx(0.0236, rel=0.02)  # 23.6 ms, H200 host


def test_calibrate_from_fits_no_row_of_a_held_out_file(tmp_path, capsys):
    """A results file saying "split": "held-out" was measured to check the model: `gpuperf
    calibrate --from` fits none of its rows (not even shapes of the calibration split) and does
    not name it among the files fitted."""
    import json

    from gpuperf.cli import main
    from gpuperf.perfmodel.ops import Gemm
    from gpuperf.perfmodel.ops_io import op_to_dict

    ops = [Gemm(f"g{m}", m, 4096, 4096) for m in range(1024, 1024 + 64 * 40, 64)]
    cal_ops = [op for op in ops if cal.is_calibration(op)]
    assert cal_ops  # some shapes fall in the calibration split
    rows = [{"op": op_to_dict(op), "measured_ms": 1.0} for op in ops]
    env = {"gpu": "NVIDIA H100 80GB HBM3"}
    (tmp_path / "gemm_plain.json").write_text(json.dumps({"env": env, "rows": rows}))
    held = {"env": env, "split": "held-out", "rows": rows}
    (tmp_path / "gemm_held.json").write_text(json.dumps(held))
    out = tmp_path / "p.toml"
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--from", str(tmp_path), "--gpu", "h100", "-o", str(out)])
    err = capsys.readouterr().err
    assert exc.value.code == 0, err
    assert f"fitting {len(cal_ops)} op measurements" in err  # the plain file's alone
    header = out.read_text().splitlines()[0]
    assert "gemm_plain.json" in header and "gemm_held.json" not in header
