"""The result of every prediction: one Prediction object (a per-op table, totals, MFU/HFU and
memory), and `group`, which folds its table by op, layer or kind. Plans and single GPUs alike.

The per-op rows are built when first read, as plain columns (step.columns): the CLI renders and
serialises those without importing pandas; `Prediction.table` is the same rows as a DataFrame,
made on first access. A search or an API call that wants totals alone builds neither.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from gpuperf.fileio import json_safe
from gpuperf.step.columns import (
    Columns,
    as_columns,
    div,
    group_sums,
    isna,
    records,
    to_frame,
    total,
)

if TYPE_CHECKING:
    import pandas as pd

GroupBy = Literal["op", "layer", "kind"]
# fmt: off
COLUMNS = (
    "name", "layer", "kind", "shape", "dtype", "flops", "bytes", "intensity", "bound",
    "time_ms", "t_math_ms", "t_mem_ms", "t_overhead_ms", "t_comm_ms", "overlap_ms", "share",
)
# fmt: on
# Columns that add up when rows are grouped (measured_ms comes from `gpuperf measure`).
SUMMED = (
    "flops",
    "bytes",
    "time_ms",
    "t_math_ms",
    "t_mem_ms",
    "t_overhead_ms",
    "t_comm_ms",
    "overlap_ms",
)  # fmt: skip
ADDITIVE = (*SUMMED, "share", "measured_ms")
_FIELDS = ("total_ms", "tokens_per_s", "mfu", "hfu", "mfu_convention", "memory",
           "memory_capacity", "fits", "warnings", "gpu", "model", "scenario", "extra")  # fmt: skip


class Prediction:
    """A predicted run: one row per op (GPU kernel or collective) in `table`, totals, MFU/HFU and
    memory per GPU.

    total_ms: the step. mfu: model FLOPs / (time × dense peak × GPUs of one replica); hfu the same
    with recomputed FLOPs added (mfu_convention names the count). memory: bytes per GPU by kind;
    memory_capacity: what a framework can fill (fits compares the two). extra: ttft_ms, tpot_ms,
    kernels, gpu_busy_ms, host_bound, breakdown (the parts that add up to total_ms)...
    """

    def __init__(
        self,
        table: pd.DataFrame | None = None,
        total_ms: float = 0.0,
        *,
        build: Callable[[], Columns] | None = None,
        tokens_per_s: float | None = None,
        mfu: float | None = None,
        hfu: float | None = None,
        mfu_convention: str = "",
        memory: dict[str, float] | None = None,
        memory_capacity: float = 0.0,
        fits: bool = True,
        warnings: list[str] | None = None,
        gpu: str = "",
        model: str = "",
        scenario: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        if table is None and build is None:
            raise ValueError("a Prediction needs a table or a way to build one")
        self._table, self._build = table, build
        self._columns: Columns | None = None
        self.total_ms = total_ms
        self.tokens_per_s, self.mfu, self.hfu = tokens_per_s, mfu, hfu
        self.mfu_convention = mfu_convention
        self.memory = dict(memory or {})
        self.memory_capacity, self.fits = memory_capacity, fits
        self.warnings = list(warnings or [])
        self.gpu, self.model = gpu, model
        self.scenario = dict(scenario or {})
        self.extra = dict(extra or {})

    @property
    def columns(self) -> Columns:
        """The per-op rows as plain columns ({column: [value per row]}, COLUMNS order), what the
        CLI renders; once `table` has been read, the DataFrame's (it may have been edited)."""
        if self._table is not None:
            return as_columns(self._table)
        if self._columns is None:
            self._columns = self._build()  # type: ignore[misc]
            self._build = None
        return self._columns

    @property
    def table(self) -> pd.DataFrame:
        """The per-op rows as a pandas DataFrame (built on first access)."""
        if self._table is None:
            self._table = to_frame(self.columns)
            self._columns = None
        return self._table

    @table.setter
    def table(self, value: pd.DataFrame) -> None:
        self._table, self._build, self._columns = value, None, None

    def __repr__(self) -> str:
        return (f"Prediction(model={self.model!r}, gpu={self.gpu!r}, "
                f"total_ms={self.total_ms:.4g}, fits={self.fits})")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The `--format json` object (ARCHITECTURE contract): keys get added, never renamed."""
        return json_safe(
            {
                "gpu": self.gpu,
                "model": self.model,
                "scenario": self.scenario,
                "total_ms": self.total_ms,
                "tokens_per_s": self.tokens_per_s,
                "mfu": self.mfu,
                "hfu": self.hfu,
                "mfu_convention": self.mfu_convention,
                "memory": self.memory,
                "memory_total": sum(self.memory.values()),
                "memory_capacity": self.memory_capacity,
                "fits": self.fits,
                "warnings": self.warnings,
                "extra": self.extra,
                "ops": records(self.columns),
            }
        )


def with_share(table: Columns) -> Columns:
    """Each op's fraction of the time its stream is busy (time_ms over their sum)."""
    times = table["time_ms"]
    busy = total(times)
    table["share"] = [t / busy for t in times] if busy > 0 else [0.0] * len(times)
    return table


def intensity(flops: list[float], nbytes: list[float]) -> list[float]:
    """FLOP per byte, 0 where nothing moves through memory."""
    return [f / b if b > 0 else 0.0 for f, b in zip(flops, nbytes, strict=True)]


_LAYER = re.compile(r"(?:^|/)(L\d+)(?=/|$)")


def layer_of(name: str) -> str:
    """'L3/attn/qkv' -> 'L3'; '' outside a layer."""
    m = _LAYER.search(name)
    return m.group(1) if m else ""


def _strip_layer(name: str) -> str:
    """'prefill/L3/attn/qkv' -> 'prefill/attn/qkv'."""
    return _LAYER.sub("", name, count=1).lstrip("/")


def _layer_key(name: str) -> str:
    """'prefill/L3/attn/qkv' -> 'prefill/L3'; names outside a layer keep their full name."""
    m = _LAYER.search(name)
    return name[: m.end()] if m else name


def _first(values: list[Any], rows: list[int]) -> Any:
    """The first value that is not NaN or None (pandas' groupby first)."""
    return next((values[i] for i in rows if not isna(values[i])), None)


def group(table: Columns | pd.DataFrame, by: GroupBy = "op") -> Any:
    """Fold the per-op table: "op" merges identical ops across layers (name without its layer,
    same shape) into one row with a `count`; "layer" sums each layer; "kind" sums each op kind.
    Rows keep the order of first appearance; `bound` is that of the group's slowest op.
    Plain columns in, plain columns out; a DataFrame in, a DataFrame out."""
    if not isinstance(table, dict):
        return to_frame(group(as_columns(table), by))
    names = table["name"]
    if by == "op":
        label = [_strip_layer(n) for n in names]
        keys = [f"{a}\x00{s}" for a, s in zip(label, table["shape"], strict=True)]
    elif by == "layer":
        keys = label = [_layer_key(n) for n in names]
    elif by == "kind":
        keys = label = list(table["kind"])
    else:
        raise ValueError(f"group by {by!r}: expected op, layer or kind")
    where: dict[Any, int] = {}
    members: list[list[int]] = []
    for i, key in enumerate(keys):
        g = where.setdefault(key, len(members))
        if g == len(members):
            members.append([])
        members[g].append(i)
    add = [c for c in ADDITIVE if c in table]
    # pandas adds runs of rows without NaN with np.add.reduceat, anything else with Kahan sums
    runs = all(m[-1] - m[0] == len(m) - 1 for m in members) and not any(
        isna(v) for c in add for v in table[c]
    )
    times = table["time_ms"]
    slowest = [max(m, key=lambda i: -math.inf if isna(times[i]) else times[i]) for m in members]
    out: Columns = {"name": [label[m[0]] for m in members], "count": [len(m) for m in members]}
    for col, values in table.items():
        if col in add:
            out[col] = group_sums(values, members, runs)
        elif col == "bound":
            out[col] = [values[i] for i in slowest]
        elif col != "name":
            out[col] = [_first(values, m) for m in members]
    if by == "op" and "layer" in table:
        last = [_first(table["layer"], m[::-1]) for m in members]
        out["layer"] = [
            a if a == b else f"{a}-{b}" for a, b in zip(out["layer"], last, strict=True)
        ]
    else:
        out["shape"] = [""] * len(members)
    if by == "layer":  # a layer mixes kinds; ops outside layers keep theirs
        out["kind"] = [
            k if n == 1 else "layer" for k, n in zip(out["kind"], out["count"], strict=True)
        ]
    if by != "op":
        dtypes = table["dtype"]
        out["dtype"] = ["/".join(dict.fromkeys(dtypes[i] for i in m)) for m in members]
    out["intensity"] = intensity(out["flops"], out["bytes"])
    measured = out.get("measured_ms")
    if measured is not None and "error_pct" in out:
        out["error_pct"] = [
            div(100 * (t - m), m) for t, m in zip(out["time_ms"], measured, strict=True)
        ]
    if measured is not None:
        for col, base, scale in (("tflops", "flops", 1e-9), ("gbps", "bytes", 1e-6)):
            if col in out:
                out[col] = [div(x, m) * scale for x, m in zip(out[base], measured, strict=True)]
    return {c: out[c] for c in ("name", "count", *(c for c in table if c != "name"))}
