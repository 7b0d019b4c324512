"""step.columns: the predict path's tables without pandas or numpy give the very numbers and text
pandas and numpy gave (equal to the last bit, not approximately): sums, grouped sums, the top-N
rows, CSV, the decode weights and the dispatch closed form. And Prediction.table is still a
DataFrame, made on first access from the same rows."""

from __future__ import annotations

import io
import math
import random

import numpy as np
import pandas as pd
import pytest

from gpuperf import api
from gpuperf.step import columns as C
from gpuperf.step.dispatch import Timed
from gpuperf.step.generate import decode_weights
from gpuperf.step.result import COLUMNS, Prediction, group

SIZES = [0, 1, 2, 7, 8, 9, 15, 16, 17, 127, 128, 129, 130, 255, 256, 257, 1000, 4099, 9000]


def _floats(rng: random.Random, n: int) -> list[float]:
    return [rng.random() * 10 ** rng.randint(-6, 6) for _ in range(n)]


@pytest.mark.parametrize("n", SIZES)
def test_total_is_numpy_and_pandas_sum_to_the_bit(n):
    vals = _floats(random.Random(n), n)
    assert C.total(vals) == float(np.sum(np.array(vals))) == float(pd.Series(vals).sum())


def test_total_counts_nan_as_zero_and_adds_integers_exactly():
    vals = [1.5, math.nan, 2.25, None]
    assert C.total(vals) == float(pd.Series([1.5, math.nan, 2.25, math.nan]).sum()) == 3.75
    assert C.total([2**60, 1, 2]) == 2**60 + 3
    assert C.total([]) == 0.0


@pytest.mark.parametrize("seed", range(40))
def test_group_sums_are_pandas_groupby_sums_to_the_bit(seed):
    """Both of pandas' ways: np.add.reduceat when groups are runs of rows (and no NaN), the
    Kahan-compensated Cython kernel otherwise (interleaved groups, or NaN to skip)."""
    rng = random.Random(seed)
    n, groups = rng.randint(1, 400), rng.randint(1, 12)
    keys = sorted(rng.randrange(groups) for _ in range(n)) if seed % 2 else [
        rng.randrange(groups) for _ in range(n)
    ]  # fmt: skip
    vals = _floats(rng, n)
    if seed % 5 == 0:
        vals = [math.nan if rng.random() < 0.1 else v for v in vals]
    cols = {"name": [f"k{k}" for k in keys], "kind": ["gemm"] * n, "shape": [""] * n,
            "dtype": ["bf16"] * n, "flops": vals, "bytes": vals[::-1],
            "time_ms": [abs(v) + 1 for v in _floats(rng, n)], "bound": ["memory"] * n}  # fmt: skip
    got = pd.DataFrame(group(cols, "kind" if groups == 1 else "op"))
    want = group(pd.DataFrame(cols), "kind" if groups == 1 else "op")
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_group_of_a_prediction_is_the_same_from_columns_and_from_the_dataframe():
    p = api.predict("llama3-70b", mode="train", system="dgx-h100", nodes=4, tp=8, pp=4)
    for by in ("op", "layer", "kind"):
        got = C.to_frame(group(p.columns, by))
        pd.testing.assert_frame_equal(got, group(p.table, by), check_exact=True)


def test_nlargest_is_dataframe_nlargest_with_ties_in_table_order():
    t = {"name": list("abcdefg"), "time_ms": [1.0, 3.0, 3.0, math.nan, 2.0, 3.0, 0.5]}
    for n in (0, 1, 2, 3, 5, 6, 7, 10):
        got = C.nlargest(t, n, "time_ms")["name"]
        assert got == pd.DataFrame(t).nlargest(n, "time_ms")["name"].tolist(), n


def test_csv_is_pandas_csv():
    t = {"name": ["a,b", 'q"uote', "plain", ""], "count": [1, 2, 3, 4],
         "x": [0.1, 1e16, math.nan, 1234567.0], "y": [math.inf, -0.0, 1e-5, 2.0]}  # fmt: skip
    assert C.to_csv(t) == pd.DataFrame(t).to_csv(index=False)


def test_a_prediction_csv_is_the_csv_of_its_dataframe():
    p = api.predict("llama2-7b", gpu="h100", mode="decode")
    assert C.to_csv(p.columns) == p.table.to_csv(index=False)


def _decode_weights_numpy(first, count, points=5):
    """The numpy code decode_weights replaced."""
    pts = np.unique(np.linspace(first, first + count - 1, min(points, count)).round().astype(int))
    xs = np.arange(first, first + count)
    if pts.size == 1:
        return pts, np.array([float(count)])
    eye = np.eye(pts.size)
    return pts, np.array([np.interp(xs, pts, eye[k]).sum() for k in range(pts.size)])


@pytest.mark.parametrize(
    "first, count, points",
    [(2048, 128, 5), (100, 1, 5), (17, 2, 5), (1, 3, 5), (1000, 7, 3), (4096, 300, 5),
     (5, 1000, 9), (33, 64, 2), (77777, 4099, 5), (8192, 32768, 5)],
)  # fmt: skip
def test_decode_weights_are_the_numpy_weights_to_the_bit(first, count, points):
    pts, w = decode_weights(first, count, points)
    ref_pts, ref_w = _decode_weights_numpy(first, count, points)
    assert pts == ref_pts.tolist() and w == ref_w.tolist()


def test_timed_of_is_the_numpy_closed_form():
    rng = np.random.default_rng(1)
    t, h = rng.exponential(1e-5, 300), rng.exponential(1e-5, 300)
    csum = np.cumsum(t)
    slack = float(np.max(np.cumsum(h) - np.concatenate(([0.0], csum[:-1]))))
    got = Timed.of(list(t), list(h))
    assert (got.gpu, got.host, got.slack) == (float(csum[-1]), float(np.cumsum(h)[-1]), slack)


def test_prediction_table_is_a_dataframe_of_the_same_rows():
    p = api.predict("llama2-7b", gpu="h100")
    rows = C.records(p.columns)
    table = p.table
    assert isinstance(table, pd.DataFrame)
    assert list(table.columns) == list(COLUMNS) and len(table) == len(rows)
    assert table.to_dict("records") == rows
    for col in ("flops", "bytes", "time_ms", "share"):
        assert table[col].dtype == np.float64
    assert p.table is table  # built once


def test_the_dataframe_once_read_is_what_gets_rendered():
    """API users edit the DataFrame; the JSON and the views follow it, as before."""
    p = api.predict("llama2-7b", gpu="h100")
    p.table.loc[0, "time_ms"] = 123.0
    assert p.to_json()["ops"][0]["time_ms"] == 123.0 and p.columns["time_ms"][0] == 123.0


def test_a_prediction_made_from_a_dataframe_renders_without_a_build():
    frame = pd.DataFrame({c: [1.0] if c not in ("name", "layer", "kind", "shape", "dtype",
                                                 "bound") else ["x"] for c in COLUMNS})  # fmt: skip
    p = Prediction(table=frame, total_ms=1.0, gpu="h100")
    from gpuperf.reports.tables import render

    buf = io.StringIO()
    render(p, "csv", file=buf)
    assert buf.getvalue() == frame.to_csv(index=False)
