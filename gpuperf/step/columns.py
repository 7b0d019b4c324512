"""A table as plain columns, {column: [one value per row]}, and the few table operations the
predict path needs, without pandas or numpy: `gpuperf predict` would otherwise spend most of its
start importing them. The Python API still hands out DataFrames (`to_frame`).

Sums are added in the order numpy and pandas add them (pairwise like np.sum; a grouped sum as
pandas' groupby does it), so that every number is the same to the last bit, in the JSON and CSV
too, whichever way a table was built.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Sequence
from typing import Any

Columns = dict[str, list[Any]]

_BLOCK = 128  # numpy's PW_BLOCKSIZE


def isna(value: Any) -> bool:
    """None or NaN (what pandas skips in sums, `first` and `nunique`)."""
    return value is None or (isinstance(value, float) and value != value)


def _pairwise(
    a: Sequence[float], lo: int, n: int, live: tuple[int, int] = (0, sys.maxsize)
) -> float:
    """numpy's pairwise summation of a[lo:lo+n] (loops_utils.h.src, same order of additions).
    Values outside a[live[0]:live[1]] are 0.0: a block wholly outside sums to 0.0 unread."""
    if lo + n <= live[0] or lo >= live[1]:
        return 0.0
    if n < 8:
        res = -0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    if n <= _BLOCK:
        r = list(a[lo : lo + 8])
        i, end = 8, n - n % 8
        while i < end:
            for j in range(8):
                r[j] += a[lo + i + j]
            i += 8
        res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        for i in range(end, n):
            res += a[lo + i]
        return res
    half = n // 2
    half -= half % 8
    return _pairwise(a, lo, half, live) + _pairwise(a, lo + half, n - half, live)


def total_within(values: Sequence[float], lo: int, hi: int) -> float:
    """total(values) of floats that are 0.0 outside values[lo:hi], to the bit, reading only the
    blocks of the pairwise sum that reach into [lo, hi)."""
    return 0.0 + _pairwise(values, 0, len(values), (lo, hi)) if values else 0.0


def total(values: Iterable[Any]) -> Any:
    """A column's sum as pandas' Series.sum gives it: NaN counts as 0, floats added pairwise
    (np.sum), integers exactly."""
    vals = [0.0 if isna(v) else v for v in values]
    if all(isinstance(v, int) for v in vals):
        return sum(vals)
    return 0.0 + _pairwise(vals, 0, len(vals)) if vals else 0.0


def div(a: float, b: float) -> float:
    """a / b as numpy divides: ±inf or NaN for a zero divisor instead of an exception."""
    try:
        return a / b
    except ZeroDivisionError:
        if a != a or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


def nrows(cols: Columns) -> int:
    return len(next(iter(cols.values()))) if cols else 0


def take(cols: Columns, rows: Sequence[int]) -> Columns:
    """The rows at these positions, in this order."""
    return {c: [v[i] for i in rows] for c, v in cols.items()}


def nlargest(cols: Columns, n: int, col: str) -> Columns:
    """The n rows with the largest `col`, largest first, ties in table order, NaN last
    (DataFrame.nlargest(n, col))."""
    vals = cols[col]
    order = sorted((i for i, v in enumerate(vals) if not isna(v)), key=lambda i: -vals[i])
    order += [i for i, v in enumerate(vals) if isna(v)]
    return take(cols, order[: max(n, 0)])


def group_sums(values: Sequence[Any], members: Sequence[Sequence[int]], runs: bool) -> list[Any]:
    """Each group's sum of `values` (`members`: each group's rows) as pandas'
    groupby(sort=False).sum() computes it: with `runs` (every group a run of consecutive rows and
    no NaN among the summed columns) np.add.reduceat, the first value plus the rest added
    pairwise; otherwise Kahan-compensated sums that skip NaN (pandas' Cython kernel). Integers
    are summed exactly."""
    if all(isinstance(values[i], int) for m in members for i in m):
        return [sum(values[i] for i in m) for m in members]
    if runs:
        return [values[m[0]] + _pairwise(values, m[0] + 1, len(m) - 1) for m in members]
    out = []
    for m in members:
        s = comp = 0.0
        for i in m:
            v = values[i]
            if isna(v):
                continue
            y = v - comp
            t = s + y
            comp = t - s - y
            if not math.isfinite(comp):  # an infinite value: keep it, not NaN
                comp = 0.0
            s = t
        out.append(s)
    return out


def records(cols: Columns) -> list[dict[str, Any]]:
    """One dict per row (DataFrame.to_dict("records"))."""
    names = list(cols)
    return [dict(zip(names, row, strict=True)) for row in zip(*cols.values(), strict=True)]


def to_frame(cols: Columns) -> Any:
    """A pandas DataFrame of the columns (pandas loads here, and only here)."""
    import pandas as pd

    return pd.DataFrame({c: list(v) for c, v in cols.items()}, columns=list(cols))


def as_columns(table: Any) -> Columns:
    """Plain columns of a DataFrame (numpy values as Python numbers); Columns pass through."""
    if isinstance(table, dict):
        return table
    return {str(c): table[c].tolist() for c in table.columns}


def _csv_field(value: Any) -> Any:
    if isna(value):
        return ""
    if isinstance(value, float):
        return repr(value)  # numpy's astype(str), as pandas writes a float column
    return value


def to_csv(cols: Columns) -> str:
    """CSV text as DataFrame.to_csv(index=False) writes it."""
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(list(cols))
    for row in zip(*cols.values(), strict=True):
        writer.writerow([_csv_field(v) for v in row])
    return buf.getvalue()
