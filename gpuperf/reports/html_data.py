"""What the HTML report draws, in plain data: one `ReportItem` per GPU, folded op tables, and the
loaders for saved files (a `gpuperf predict --format json` object, a `gpuperf measure --format
json` object, or a measurement results file {"env", "rows"}).

No plotly here; the figures (html_figures) and the page (html) read these objects.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from gpuperf.errors import EnvironmentUnavailable, InputError, shown
from gpuperf.step.result import ADDITIVE
from gpuperf.units import MEASURED_MS_RULE, is_measured_ms

_LAYER_PART = re.compile(r"^L\d+$")


@dataclass
class ReportItem:
    """One result (one GPU) as the report sees it."""

    result: Any  # a Prediction, or a Prediction-like object (table, total_ms, ...)
    spec: Any | None  # GpuSpec, None when the profile cannot be loaded
    label: str  # short name for legends: "h100-sxm5-80gb"
    env: dict[str, Any] = field(default_factory=dict)  # environment of the measurements
    notes: list[str] = field(default_factory=list)  # why something is missing

    @property
    def table(self) -> pd.DataFrame:
        return self.result.table

    @property
    def has_measured(self) -> bool:
        t = self.table
        return "measured_ms" in t.columns and bool(t["measured_ms"].notna().any())

    @property
    def has_predicted(self) -> bool:
        t = self.table
        return "time_ms" in t.columns and bool(t["time_ms"].notna().any())

    @property
    def is_sweep(self) -> bool:
        """Independent single kernels (no scenario): shares of a total mean nothing."""
        return not getattr(self.result, "scenario", None)


def strip_layer(name: str) -> str:
    """'prefill/L3/attn/qkv' -> 'prefill/attn/qkv': the op's position inside a layer."""
    return "/".join(p for p in str(name).split("/") if not _LAYER_PART.match(p))


def fold_ops(table: pd.DataFrame) -> pd.DataFrame:
    """Identical ops across layers (same name without the layer, shape, dtype) folded in one row
    with a `count`; flops, bytes and times summed, NaN kept where no row had a value (a measured
    column that is only partly filled stays honest)."""
    key = table["name"].map(strip_layer) + "\x00" + table["shape"].astype(str)
    if "dtype" in table.columns:  # a sweep may time the same shape in several dtypes
        key = key + "\x00" + table["dtype"].astype(str)
    work = table.assign(_key=key.to_numpy(), _pos=table["name"].map(strip_layer).to_numpy())
    grouped = work.groupby("_key", sort=False)
    summed = [c for c in ADDITIVE if c in table.columns]
    out = grouped[summed].sum(min_count=1)
    out["count"] = grouped.size()
    out["name"] = grouped["_pos"].first()
    for col in ("kind", "shape", "dtype", "bound", "layer"):
        if col in table.columns:
            out[col] = grouped[col].first()
    if "layer" in table.columns:
        last = grouped["layer"].last()
        out["layer"] = out["layer"].where(out["layer"] == last, out["layer"] + "–" + last)
    nbytes = out["bytes"].where(out["bytes"] > 0)
    out["intensity"] = (out["flops"] / nbytes).fillna(0.0)
    if "measured_ms" in out.columns and "time_ms" in out.columns:
        out["error_pct"] = 100 * (out["time_ms"] / out["measured_ms"] - 1)
    return out.reset_index(drop=True)


def achieved_tflops(flops: pd.Series, time_ms: pd.Series) -> pd.Series:
    """flops / time in TFLOP/s; NaN where the time is missing or zero."""
    t = time_ms.where(time_ms > 0)
    return flops / (t * 1e-3) / 1e12


# ------------------------------------------------------------------------------ measured join


def measured_frame(measured: Any) -> pd.DataFrame:
    """A table with at least name, kind, shape, measured_ms from: a DataFrame, a results file
    dict {"rows": [...]}, a measure JSON {"ops": [...]}, or a path to either."""
    # errors name the file where there is one
    where = os.fspath(measured) if isinstance(measured, str | os.PathLike) else "measurements"
    if isinstance(measured, pd.DataFrame):
        frame = measured
    else:
        data = read_json(measured) if isinstance(measured, str | os.PathLike) else measured
        if not isinstance(data, dict):
            raise InputError(f"{where}: expected a JSON object with a 'rows' list, "
                             f"got {type(data).__name__}")  # fmt: skip
        rows = data.get("rows", data.get("ops"))
        if not isinstance(rows, list):
            raise InputError(f"{where}: expected a results file with a 'rows' list")
        for i, row in enumerate(rows):
            _check_row(row, i, where)
        frame = pd.DataFrame(rows)
    if "measured_ms" not in frame.columns or "name" not in frame.columns:
        raise InputError(f"{where}: rows need 'name' and 'measured_ms'")
    # a row not measured is None (NaN once pandas holds it), as _check_row and calibrate allow
    if frame["measured_ms"].map(lambda v: not pd.isna(v) and not is_measured_ms(v)).any():
        raise InputError(f"{where}: {MEASURED_MS_RULE}")
    return frame


def _check_row(row: Any, i: int, where: str) -> None:
    """One measured row: an object with a string name and a positive measured_ms (or null)."""
    if not isinstance(row, dict):
        raise InputError(f"{where}: row {i} is {type(row).__name__}, not an object")
    name, ms = row.get("name"), row.get("measured_ms")
    if not isinstance(name, str):
        raise InputError(f"{where}: row {i} needs a string 'name', got {shown(name)}")
    if ms is not None and not is_measured_ms(ms):
        raise InputError(f"{where}: row {i} ({name[:60]}): {MEASURED_MS_RULE}, got {shown(ms)}")
    for key in ("kind", "shape", "dtype"):
        if key in row and not isinstance(row[key], str | None):
            raise InputError(f"{where}: row {i} ({name[:60]}): {key} must be a string")
    for key in ("flops", "bytes"):  # a count of work: a report divides by it
        v = row.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                              or not 0 <= v < math.inf):  # fmt: skip
            raise InputError(f"{where}: row {i} ({name[:60]}): {key} must be a number >= 0, "
                             f"got {shown(v)}")  # fmt: skip


def join_measured(table: pd.DataFrame, measured: Any) -> pd.DataFrame:
    """The prediction table with measured_ms (and error_pct) joined by op name; rows whose name
    was not measured take the median measurement of the same work: same kind, shape and dtype
    (a sweep of a model's GEMM shapes names them differently from the model's op list)."""
    meas = measured_frame(measured).dropna(subset=["measured_ms"])
    out = table.drop(columns=[c for c in ("measured_ms", "error_pct") if c in table.columns])
    values = out["name"].map(meas.groupby("name")["measured_ms"].median())
    if {"kind", "shape"} <= set(meas.columns) and values.isna().any():
        dtype = "dtype" in meas.columns and "dtype" in out.columns
        work = meas.assign(_k=_work_key(meas, dtype))
        values = values.fillna(
            _work_key(out, dtype).map(work.groupby("_k")["measured_ms"].median())
        )
    out["measured_ms"] = values.astype(float)
    out["error_pct"] = 100 * (out["time_ms"] / out["measured_ms"] - 1)
    return out


def _work_key(t: pd.DataFrame, dtype: bool) -> pd.Series:
    key = t["kind"].astype(str) + "\x00" + t["shape"].astype(str)
    return key + "\x00" + t["dtype"].astype(str) if dtype else key


def measured_frames(sources: Any) -> pd.DataFrame:
    """Several measurement sources (paths, dicts, DataFrames) as one table."""
    return pd.concat([measured_frame(s) for s in sources], ignore_index=True)


# ------------------------------------------------------------------------------ saved files


def read_json(path: str | os.PathLike[str]) -> Any:
    from gpuperf.fileio import read_json as read

    return read(path, "saved file")


def load_saved(path: str | os.PathLike[str], gpu: Any | None = None) -> ReportItem:
    """A ReportItem from a saved JSON file; `gpu` (name or GpuSpec) overrides the GPU the file
    names. Measurement files are re-predicted op by op with the current model when their GPU has
    a profile, so predicted and measured points describe the same ops."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a JSON object")
    if isinstance(data.get("rows"), list):
        return _from_results_file(data, path, gpu)
    if isinstance(data.get("collective"), str):  # predict allreduce ... --format json
        coll = data["collective"]
        raise InputError(f"{path}: a collective's prediction has no FLOPs to place on a "
                         f"roofline; `gpuperf predict {coll} --format table` shows it")  # fmt: skip
    if isinstance(data.get("ops"), list):
        return _from_ops_json(data, path, gpu)
    if isinstance(data.get("runs"), list):
        raise InputError(f"{path}: end-to-end run files have no per-op rows; nothing to draw")
    raise InputError(
        f"{path}: not a results file (expected 'rows' from gpuperf measure --save, "
        "or 'ops' from gpuperf predict/measure --format json)"
    )


def _prediction(**kw: Any) -> Any:
    from gpuperf.step.result import Prediction

    return Prediction(**kw)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


# Fields of a saved prediction and the type each must have when present (null: absent).
_SAVED_TYPES = {"memory": dict, "scenario": dict, "extra": dict, "env": dict, "warnings": list,
                "model": str, "gpu": str, "mfu_convention": str}  # fmt: skip
# Numbers an op row or a prediction carries: finite and not negative when present.
_OP_NUMBERS = ("flops", "bytes", "intensity", "time_ms", "t_math_ms", "t_mem_ms",
               "t_overhead_ms", "t_comm_ms", "overlap_ms", "share", "predicted_ms")  # fmt: skip
_KIND_NAMES = {dict: "object", list: "list", str: "string"}


def _check_saved(data: dict, path: Any) -> None:
    """A saved prediction's fields have the types gpuperf writes (InputError names the first
    that does not)."""
    for key, kind in _SAVED_TYPES.items():
        value = data.get(key)
        if value is not None and not isinstance(value, kind):
            raise InputError(f"{path}: '{key}' must be {'an' if kind is dict else 'a'} "
                             f"{_KIND_NAMES[kind]}, got {shown(value)}")  # fmt: skip
    if not all(isinstance(w, str) for w in data.get("warnings") or []):
        raise InputError(f"{path}: 'warnings' must be a list of strings")
    for key in ("total_ms", "tokens_per_s", "mfu", "hfu", "memory_capacity"):
        _check_number(data.get(key), f"{path}: '{key}'")
    env = data.get("env") or {}
    mem = env.get("gpu_memory_bytes")
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int | float)):
        raise InputError(f"{path}: env.gpu_memory_bytes must be a number, got {shown(mem)}")


def _check_number(value: Any, where: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where} must be a number, got {shown(value)}")
    if not 0 <= value < math.inf:
        raise InputError(f"{where} must be a finite number >= 0, got {shown(value)}")


def _check_ops(rows: list, path: Any) -> None:
    """Op rows: objects with a string name and finite, non-negative numbers."""
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise InputError(f"{path}: op {i} is {type(row).__name__}, not an object")
        name = row.get("name")
        if not isinstance(name, str):
            raise InputError(f"{path}: op rows need 'name' (a string); op {i} has {shown(name)}")
        for key in _OP_NUMBERS:
            _check_number(row.get(key), f"{path}: op {i} ({name[:60]}): {key}")


def _from_ops_json(data: dict, path: Any, gpu: Any | None) -> ReportItem:
    _check_saved(data, path)
    _check_ops(data["ops"], path)
    if not any(isinstance(r.get("time_ms"), int | float) for r in data["ops"]):
        raise InputError(f"{path}: no op has a time_ms; nothing to draw")
    table = _coerce(pd.DataFrame(data["ops"]), path)
    env = data.get("env") or {}
    spec, notes = _spec(gpu or data.get("gpu") or None, env)
    total = _num(data.get("total_ms"))
    if total is None:
        total = float(table["time_ms"].sum(min_count=1)) if "time_ms" in table else math.nan
    result = _prediction(
        table=table,
        total_ms=total,
        tokens_per_s=_num(data.get("tokens_per_s")),
        mfu=_num(data.get("mfu")),
        hfu=_num(data.get("hfu")),
        mfu_convention=data.get("mfu_convention") or "",
        memory={k: float(v) for k, v in (data.get("memory") or {}).items() if _num(v) is not None},
        memory_capacity=_num(data.get("memory_capacity")) or 0.0,
        fits=bool(data.get("fits", True)),
        warnings=list(data.get("warnings") or []),
        gpu=spec.name if spec is not None else str(data.get("gpu") or env.get("gpu") or ""),
        model=data.get("model") or "",
        scenario=data.get("scenario") or {},
        extra=data.get("extra") or {},
    )
    return ReportItem(result, spec, _label(result.gpu, spec), dict(env), notes)


def _from_results_file(data: dict, path: Any, gpu: Any | None) -> ReportItem:
    _check_saved(data, path)
    env = data.get("env") or {}
    rows = data["rows"]
    if not rows:
        raise InputError(f"{path}: the results file has no rows")
    for i, row in enumerate(rows):
        _check_row(row, i, str(path))
    _check_ops(rows, path)
    if not any(row.get("measured_ms") is not None for row in rows):
        raise InputError(f"{path}: no row has a measured_ms; nothing to draw")
    table = _coerce(pd.DataFrame(rows), path)
    spec, notes = _spec(gpu, env)
    repredicted = _repredict(rows, spec) if spec is not None else None
    if repredicted is not None:
        for col in ("time_ms", "t_math_ms", "t_mem_ms", "t_overhead_ms", "bound", "intensity"):
            table[col] = repredicted[col].to_numpy()
        notes.append("predictions recomputed with the current model from each row's op")
    elif "predicted_ms" in table.columns:
        table["time_ms"] = pd.to_numeric(table["predicted_ms"], errors="coerce")
        notes.append("predictions as stored in the file (made when it was measured)")
    if "time_ms" not in table.columns:
        table["time_ms"] = math.nan
    table["error_pct"] = 100 * (table["time_ms"] / table["measured_ms"] - 1)
    busy = table["time_ms"].sum(min_count=1)
    table["share"] = table["time_ms"] / busy if busy and busy > 0 else math.nan
    result = _prediction(
        table=table,
        total_ms=float(table["measured_ms"].sum()),
        gpu=spec.name if spec is not None else str(env.get("gpu", "")),
        model=str(data.get("kind", "")),
        extra={"measured_total_ms": float(table["measured_ms"].sum())},
    )
    label = " ".join(x for x in (_label(result.gpu, spec), str(data.get("kind") or "")) if x)
    return ReportItem(result, spec, label, dict(env), notes)


def _coerce(table: pd.DataFrame, path: Any) -> pd.DataFrame:
    """Columns the report needs, with numbers as floats."""
    for col in ("name", "flops", "bytes"):
        if col not in table.columns:
            raise InputError(f"{path}: op rows need '{col}'")
    for col, default in (("kind", ""), ("shape", ""), ("dtype", ""), ("bound", ""), ("layer", "")):
        if col not in table.columns:
            table[col] = default
        table[col] = table[col].fillna(default).astype(str)
    for col in table.columns:
        if col.endswith("_ms") or col in ("flops", "bytes", "intensity", "share", "error_pct"):
            table[col] = pd.to_numeric(table[col], errors="coerce").astype(float)
    if "intensity" not in table.columns:
        nbytes = table["bytes"].where(table["bytes"] > 0)
        table["intensity"] = (table["flops"] / nbytes).fillna(0.0)
    return table


def _repredict(rows: list[dict], spec: Any) -> pd.DataFrame | None:
    """The current model's prediction for each row's op, or None when a row carries no op (an
    older file); an op record that is there but malformed is the file's error (InputError)."""
    from gpuperf.perfmodel.ops_io import op_from_dict
    from gpuperf.step.run import predict_ops

    if not all(isinstance(r, dict) and isinstance(r.get("op"), dict) for r in rows):
        return None
    ops = [op_from_dict(r["op"]) for r in rows]
    return predict_ops(ops, spec).table


def _spec(gpu: Any | None, env: dict[str, Any]) -> tuple[Any | None, list[str]]:
    """The GpuSpec to draw ceilings from: the one given, else the profile matching env['gpu']."""
    from gpuperf.hardware.spec import GpuSpec

    if isinstance(gpu, GpuSpec):
        return gpu, []
    if gpu:
        from gpuperf.hardware.loader import load_gpu

        return load_gpu(str(gpu)), []
    name = env.get("gpu")
    if not name:
        return None, ["no GPU named in the file and none given (--gpu): no roofline ceilings"]
    from gpuperf.hardware.detect import match_profile

    try:
        return match_profile(str(name), float(env.get("gpu_memory_bytes") or 0)), []
    except EnvironmentUnavailable:
        return None, [f"GPU {name!r} has no built-in profile (pass --gpu): no roofline ceilings"]


def _label(gpu: str, spec: Any | None) -> str:
    return spec.name if spec is not None else (gpu or "GPU")


def spec_for(result: Any, gpu: Any | None = None) -> tuple[Any | None, list[str]]:
    """The GpuSpec of a Prediction (from `gpu`, a name or GpuSpec, or result.gpu)."""
    try:
        return _spec(gpu or getattr(result, "gpu", None) or None, {})
    except InputError as exc:
        return None, [f"no hardware profile for {getattr(result, 'gpu', '')!r}: {exc}"]


def finite(values: Any) -> np.ndarray:
    """Finite floats of an array-like (NaN and inf dropped)."""
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]
