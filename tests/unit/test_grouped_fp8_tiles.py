"""torch._scaled_grouped_mm's tile, by PyTorch's own rule (ScaledGroupMM.cu), and the wide tile's
slowdown with slow accumulation, checked on the H100's measured fp8 grouped GEMMs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from gpuperf.hardware.loader import load_gpu
from gpuperf.perfmodel.gemm_grouped import (
    FP8_SLOW_ACCUM_TILE,
    LARGE_TILE,
    SMALL_TILE,
    forward_tile,
)
from gpuperf.perfmodel.ops import GroupedGemm
from gpuperf.perfmodel.ops_io import op_from_dict
from gpuperf.perfmodel.roofline import op_time

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
H100 = load_gpu("h100")


@pytest.mark.parametrize(
    ("m", "n", "k", "tile", "wide"),
    [
        (128, 4096, 4096, SMALL_TILE, False),  # M <= 128
        (4096, 128, 4096, SMALL_TILE, False),  # N <= 128
        (2048, 2048, 512, FP8_SLOW_ACCUM_TILE, False),  # two of M, N, K reach 2048
        (512, 4096, 2048, FP8_SLOW_ACCUM_TILE, False),
        (4096, 1536, 1024, LARGE_TILE, True),  # only M: the wide 128x256 tile
        (520, 1536, 2048, LARGE_TILE, True),
        (136, 2047, 2047, LARGE_TILE, True),
    ],
)
def test_the_tile_follows_pytorchs_rule(m, n, k, tile, wide):
    assert forward_tile("fp8", m, n, k) == (tile, wide)


def test_the_wide_tile_runs_at_its_own_share_of_the_rate():
    """The same experts at 512 rows each (wide tile) and at 2,048 (two of M, N, K reach 2,048):
    per FLOP the wide one is about 1/wide_eff slower."""
    wide = GroupedGemm("e", tokens=8192, topk=8, experts=128, n=1536, k=2048, dtype="fp8")
    plain = GroupedGemm("e", tokens=32768, topk=8, experts=128, n=1536, k=2048, dtype="fp8")
    assert op_time(wide, H100).detail["tile"] == "128x256"
    assert op_time(plain, H100).detail["tile"] == "128x128"
    ratio = 4 * op_time(wide, H100).time / op_time(plain, H100).time
    eff = H100.params.extra["grouped_gemm_fp8_wide_eff"]
    assert 0.7 / eff < ratio < 1.3 / eff


def _rows(gpu: str):
    data = json.loads((RESULTS / gpu / "grouped_gemm_fp8.json").read_text())
    bf16 = {r["name"].rsplit("/", 1)[0]: r for r in data["rows"] if r["dtype"] == "bf16"}
    for r in data["rows"]:
        if r["dtype"] == "fp8":
            yield r, bf16[r["name"].rsplit("/", 1)[0]]


@pytest.mark.parametrize("gpu", ["h100-sxm5-80gb", "h200-sxm-141gb"])
def test_the_rule_finds_exactly_the_measured_slow_shapes(gpu):
    """fp8's grouped kernel beats its bf16 twin on every shape but those the rule puts on the
    wide tile, and loses to it on each of those (grouped_gemm_fp8.json of each GPU; the H200's
    was measured after the rule was written)."""
    spec = load_gpu(gpu)
    rows = list(_rows(gpu))
    assert len(rows) == 78
    wide = []
    for fp8, bf16 in rows:
        op = op_from_dict(fp8["op"])
        got = op_time(op, spec).detail["tile"] == "128x256"
        assert got == (fp8["tflops"] < bf16["tflops"]), fp8["name"]
        if got:
            wide.append(fp8["measured_ms"] / (op_time(op, spec).time * 1e3))
    assert len(wide) == 10
    assert 0.75 < statistics.median(wide) < 1.25  # modelled, not 2.6-3.1x off
