"""The result of every prediction: one Prediction object (a per-op table, totals, MFU/HFU, memory),
and `group`, which folds its table by op, layer or kind. Plans and single GPUs alike.

The table is built when first read: a search or an API call that wants totals alone never pays
for the DataFrame (the step engine keeps per-op arrays until then).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import pandas as pd

from gpuperf.fileio import json_safe

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
        build: Callable[[], pd.DataFrame] | None = None,
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
    def table(self) -> pd.DataFrame:
        if self._table is None:
            self._table = self._build()  # type: ignore[misc]
            self._build = None
        return self._table

    @table.setter
    def table(self, value: pd.DataFrame) -> None:
        self._table, self._build = value, None

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
                "ops": self.table.to_dict("records"),
            }
        )


def with_share(table: pd.DataFrame) -> pd.DataFrame:
    """Each op's fraction of the time its stream is busy (time_ms over their sum)."""
    busy = table["time_ms"].sum()
    table["share"] = table["time_ms"] / busy if busy > 0 else 0.0
    return table


def intensity(flops: pd.Series, nbytes: pd.Series) -> np.ndarray:
    """FLOP per byte, 0 where nothing moves through memory."""
    return np.where(nbytes > 0, flops / nbytes.where(nbytes > 0, 1.0), 0.0)


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


def group(table: pd.DataFrame, by: GroupBy = "op") -> pd.DataFrame:
    """Fold the per-op table: "op" merges identical ops across layers (name without its layer,
    same shape) into one row with a `count`; "layer" sums each layer; "kind" sums each op kind.
    Rows keep the order of first appearance; `bound` is that of the group's slowest op."""
    if by == "op":
        keys = table["name"].map(_strip_layer) + "\x00" + table["shape"].astype(str)
        label = table["name"].map(_strip_layer)
    elif by == "layer":
        keys = label = table["name"].map(_layer_key)
    elif by == "kind":
        keys = label = table["kind"]
    else:
        raise ValueError(f"group by {by!r}: expected op, layer or kind")
    work = table.assign(_key=keys.to_numpy(), _label=label.to_numpy())
    grouped = work.groupby("_key", sort=False)
    add = [c for c in ADDITIVE if c in table.columns]
    out = grouped[add].sum()
    out["count"] = grouped.size()
    slowest = table.loc[grouped["time_ms"].idxmax().to_numpy()].set_index(out.index)
    out["name"] = grouped["_label"].first()
    firsts = [c for c in table.columns if c not in add and c not in ("name",)]
    for col in firsts:
        out[col] = slowest[col] if col == "bound" else grouped[col].first()
    if by == "op" and "layer" in out.columns:
        first, last = out["layer"], grouped["layer"].last()
        out["layer"] = first.where(first == last, first + "-" + last)
    else:
        out["shape"] = ""
    if by == "layer":  # a layer mixes kinds; ops outside layers keep theirs
        out["kind"] = out["kind"].where(out["count"] == 1, "layer")
    if by != "op":
        out["dtype"] = grouped["dtype"].agg(lambda s: "/".join(dict.fromkeys(s)))
    out["intensity"] = intensity(out["flops"], out["bytes"])
    if "measured_ms" in out.columns and "error_pct" in out.columns:
        out["error_pct"] = 100 * (out["time_ms"] - out["measured_ms"]) / out["measured_ms"]
    if "measured_ms" in out.columns:
        for col, scale in (("tflops", 1e-9), ("gbps", 1e-6)):
            if col in out.columns:
                base = "flops" if col == "tflops" else "bytes"
                out[col] = out[base] / out["measured_ms"] * scale
    cols = ["name", "count", *[c for c in table.columns if c != "name"]]
    return out.reset_index(drop=True)[cols]
