"""reports/tables.py: number formatting, headers with units, totals, JSON and CSV output."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pandas as pd
import pytest

from gpuperf.reports import tables as T


@pytest.mark.parametrize(
    "value, text",
    [
        (0, "0"),
        (12345.6, "12,346"),
        (98.76, "98.8"),
        (1.234, "1.23"),
        (0.004123, "0.00412"),
        (float("nan"), "–"),
        (None, "–"),
    ],
)
def test_num(value, text):
    assert T.num(value) == text


def _table(**extra_cols):
    base = {
        "name": ["L0/attn/qkv", "L0/mlp/down"],
        "layer": ["L0", "L0"],
        "kind": ["gemm", "gemm"],
        "shape": ["2048×12288×4096", "2048×4096×11008"],
        "dtype": ["bf16", "bf16"],
        "flops": [206e9, 185e9],
        "bytes": [168e6, 152e6],
        "intensity": [1226.0, 1217.0],
        "bound": ["compute", "compute"],
        "time_ms": [0.3, 0.25],
        "share": [0.3 / 0.55, 0.25 / 0.55],
    }
    base.update(extra_cols)
    return pd.DataFrame(base)


def _result(table, **attrs):
    fields = {
        "table": table,
        "total_ms": 0.56,
        "tokens_per_s": 3.66e6,
        "mfu": 0.42,
        "hfu": 0.43,
        "mfu_convention": "2N per token",
        "memory": {"weights": 13.5e9, "kv_cache": 1.5e9},
        "memory_capacity": 80 * 2**30,
        "fits": True,
        "warnings": ["host-bound: test"],
        "gpu": "h100-sxm5-80gb",
        "model": "llama2-7b",
        "scenario": {"mode": "prefill", "batch": 1, "seq": 2048, "dtype": "bf16", "impl": "fused"},
        "extra": {"kernels": 2, "gpu_busy_ms": 0.55, "host_bound": 0.018},
    }
    fields.update(attrs)
    res = SimpleNamespace(**fields)
    res.to_json = lambda: {"total_ms": res.total_ms, "ops": res.table.to_dict("records")}
    return res


def _text(result, fmt="table", **kw):
    buf = io.StringIO()
    T.render(result, fmt, file=buf, **kw)
    return buf.getvalue()


def test_table_has_units_totals_and_summary():
    out = _text(_result(_table()))
    for header in ("time (ms)", "FLOPs (G)", "bytes (MB)", "intensity (FLOP/B)", "share (%)"):
        assert header in out
    assert "llama2-7b · prefill · batch 1 × seq 2048 · bf16 · fused · on h100-sxm5-80gb" in out
    assert "391" in out  # FLOPs footer: 206 + 185 G
    assert "0.550" in out  # time footer
    assert "0.560 ms" in out and "GPU busy 0.550 ms" in out and "waiting on the host 1.8%" in out
    assert "3,660,000 tokens/s" in out and "MFU 42.0%" in out and "HFU 43.0%" in out
    assert "14 GiB of 80 GiB usable per GPU fits" in out
    assert "warning" in out and "host-bound: test" in out
    assert "dtype" not in out.split("\n")[2]  # one dtype: shown in the title, not as a column


def test_measured_columns_are_shown_when_present():
    t = _table(measured_ms=[0.33, 0.24], error_pct=[-9.1, 4.2], tflops=[624.0, 770.0])
    out = _text(_result(t))
    for header in ("measured (ms)", "error (%)", "TFLOP/s"):
        assert header in out
    assert "-9.1" in out and "+4.2" in out


def test_single_op_sweep_shows_predicted_rates_not_share():
    t = _table()
    res = _result(t, scenario={}, memory={}, tokens_per_s=None, mfu=None, hfu=None)
    out = _text(res)
    assert "share" not in out and "TFLOP/s" in out and "GB/s" in out
    assert "sum" not in out and "total" not in out  # independent kernels do not add up
    assert "687" in out  # 206e9 FLOP in 0.3 ms = 687 TFLOP/s


def test_json_is_one_object_and_csv_has_every_column():
    res = _result(_table(error_pct=[float("nan"), 1.0]))
    res.to_json = lambda: {"total_ms": 0.56, "x": float("nan")}
    with pytest.raises(ValueError):  # NaN must not leak out as invalid JSON
        _text(res, "json")
    res = _result(_table())
    obj = json.loads(_text(res, "json"))
    assert obj["total_ms"] == 0.56 and len(obj["ops"]) == 2
    csv = _text(res, "csv")
    assert csv.splitlines()[0].startswith("name,layer,kind,shape,dtype,flops,bytes")
    assert len(csv.splitlines()) == 3
    view = res.table.head(1)
    assert len(_text(res, "csv", view=view).splitlines()) == 2
