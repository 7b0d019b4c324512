"""The machinery behind benchmarks/seed_claims.py: a claim record, the verdict rule, gpuperf
helpers with caches, and look-ups of committed measurements (benchmarks/results/<gpu>/*.json).

A claim is one number (or word) a seed document states. gpuperf's number comes from `predict`
(a call into gpuperf's Python API, spelled out in `call`); a measured number, when a committed
result file holds one, from `measured`. The verdict compares the seed with the measurement when
there is one, else with gpuperf:

- exact claims (datasheet numbers, formulas, arithmetic) hold within 2 % (the seeds round);
- estimate claims (times, throughputs) hold within a factor 1.3 (the seeds write "~");
- max / min claims ("< 3 ms", "> 10x") hold when the reference is on the stated side;
- text claims (a bound, an algorithm) hold when the words match.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpuperf import api
from gpuperf.hardware.loader import load_gpu, load_system
from gpuperf.perfmodel.comm import collective_time
from gpuperf.perfmodel.ops import Collective, Op
from gpuperf.perfmodel.ops_io import op_from_dict
from gpuperf.workloads.config import load_model

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

Kind = Literal["exact", "estimate", "max", "min", "text"]
Value = float | str
TOL_EXACT = 0.02
TOL_ESTIMATE = 1.3


@dataclass(frozen=True)
class Pred:
    """A reference number and how it was obtained (algorithm picked, convention used...)."""

    value: Value
    detail: str = ""


@dataclass(frozen=True)
class Claim:
    """One numerical claim of a seed document (see the module docstring)."""

    seed: str  # "000"
    where: str  # approximate location: section / line
    quote: str  # the seed's words, briefly, in Chinese
    gloss: str  # English gloss
    claimed: Value | None  # the seed's number in `unit` (None: nothing to compare)
    unit: str
    kind: Kind = "estimate"
    predict: Callable[[], Value | Pred] | None = None  # gpuperf's number
    call: str = ""  # the exact API call behind `predict`
    measured: Callable[[], Pred | None] | None = None  # committed measurement, if any
    reason: str = ""  # why it disagrees (or why it cannot be checked)


@dataclass(frozen=True)
class Verdict:
    status: Literal["holds", "off", "not checkable"]
    factor: float | None = None  # max(seed/ref, ref/seed) for numeric claims
    against: str = ""  # "measured" or "gpuperf"

    def text(self) -> str:
        if self.status != "off" or self.factor is None:
            return self.status
        return f"off ×{self.factor:.3g}"


def as_pred(value: Value | Pred | None) -> Pred | None:
    if value is None or isinstance(value, Pred):
        return value
    return Pred(value)


def judge(claimed: Value | None, kind: Kind, reference: Value | None, against: str) -> Verdict:
    """The verdict rule (module docstring) for one seed value against one reference."""
    if claimed is None or reference is None:
        return Verdict("not checkable")
    if kind == "text" or isinstance(claimed, str) or isinstance(reference, str):
        same = str(claimed).strip().lower() == str(reference).strip().lower()
        return Verdict("holds" if same else "off", None, against)
    c, r = float(claimed), float(reference)
    if c == r:
        return Verdict("holds", 1.0, against)
    if c <= 0 or r <= 0:
        return Verdict("off", math.inf, against)
    factor = max(c / r, r / c)
    if kind == "max":
        ok = r <= c
    elif kind == "min":
        ok = r >= c
    elif kind == "exact":
        ok = abs(c / r - 1) <= TOL_EXACT
    else:
        ok = factor <= TOL_ESTIMATE
    return Verdict("holds" if ok else "off", factor, against)


def evaluate(claim: Claim) -> tuple[Pred | None, Pred | None, Verdict]:
    """(gpuperf's number, the measured number, the verdict) of one claim."""
    pred = as_pred(claim.predict()) if claim.predict else None
    meas = claim.measured() if claim.measured else None
    if meas is not None:
        return pred, meas, judge(claim.claimed, claim.kind, meas.value, "measured")
    ref = pred.value if pred is not None else None
    return pred, meas, judge(claim.claimed, claim.kind, ref, "gpuperf")


# --- gpuperf helpers (cached: several claims share one prediction) ---


gpu = functools.lru_cache(maxsize=None)(load_gpu)
system = functools.lru_cache(maxsize=None)(load_system)
model = functools.lru_cache(maxsize=None)(load_model)


@functools.cache
def predict(name: str = "llama2-7b", gpu_name: str = "h100", **kw: Any) -> Any:
    """api.predict, cached; fp16 by default because the seeds say FP16."""
    kw.setdefault("dtype", "fp16")
    return api.predict(name, gpu=gpu_name, **kw)


@functools.cache
def op_us(kind: str, gpu_name: str = "h100", **params: Any) -> float:
    """One kernel on its own (api.predict_op), in µs."""
    return api.predict_op(kind, gpu=gpu_name, **params).total_ms * 1e3


def op_table_us(pred: Any, name: str) -> float:
    """The time of the row called `name` in a Prediction's table, in µs."""
    rows = pred.table[pred.table["name"] == name]
    if rows.empty:
        raise KeyError(f"no op {name!r} in the prediction")
    return float(rows["time_ms"].sum()) * 1e3


def allreduce(nbytes: float, ranks: int = 8, sys_name: str = "dgx-h100", **kw: Any) -> Any:
    """collective_time of an all-reduce of `nbytes` on `ranks` GPUs of a system (an OpTime)."""
    sysspec = system(sys_name)
    op = Collective(name="allreduce", coll="allreduce", nbytes=int(nbytes), ranks=ranks)
    return collective_time(op, sysspec.gpu, sysspec, **kw)


def coll_detail(t: Any) -> str:
    d = t.detail
    return f"{d['algo']}/{d['proto']}, busbw {d['busbw_gbps']:.0f} GB/s"


# --- committed measurements ---


@functools.cache
def _result_files(gpu_dir: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    d = RESULTS / gpu_dir
    if not d.is_dir():
        return ()
    return tuple((p.name, json.loads(p.read_text())) for p in sorted(d.glob("*.json")))


def e2e_ms(
    name: str, gpu_dir: str = "h100-sxm5-80gb", *, cuda_graphs: bool = False, **scenario: Any
) -> Pred | None:
    """Median ms of a whole-model run (e2e*.json) whose scenario matches every given key."""
    for fname, data in _result_files(gpu_dir):
        for run in data.get("runs", []):
            sc = run.get("scenario", {})
            if run.get("model") != name or bool(sc.get("cuda_graphs")) != cuda_graphs:
                continue
            if all(sc.get(k) == v for k, v in scenario.items()) and run.get("measured_ms"):
                dt = sc.get("dtype", "")
                return Pred(float(run["measured_ms"]), f"{fname}, {sc.get('impl')} {dt}")
    return None


def launch_us(key: str, gpu_dir: str = "h100-sxm5-80gb") -> Pred | None:
    for fname, data in _result_files(gpu_dir):
        if key in data.get("launch", {}):
            return Pred(float(data["launch"][key]), f"{fname} launch[{key}]")
    return None


def _op_key(op: Any) -> tuple[str, str, str]:
    return (type(op).__name__, op.shape, str(getattr(op, "dtype", "")))


def op_measured_us(gpu_dir: str, ops: list[Op]) -> Pred | None:
    """Sum of the measured medians (µs) of `ops` in op-level result files; None unless all
    of them were measured (matched by type, shape and dtype)."""
    found: dict[tuple[str, str, str], tuple[float, str]] = {}
    for fname, data in _result_files(gpu_dir):
        for row in data.get("rows", []):
            ms = row.get("measured_ms")
            if not row.get("op") or not ms or row.get("wrong"):
                continue
            try:
                key = _op_key(op_from_dict(row["op"]))
            except Exception:  # a record this version cannot read is not a match
                continue
            found.setdefault(key, (float(ms) * 1e3, fname))
    keys = [_op_key(op) for op in ops]
    note = ""
    if keys and any(k not in found for k in keys):
        # fp16 and bf16 share the tensor-core and HBM rates: a bf16 run stands in for fp16
        keys = [(t, s, "bf16" if d == "fp16" else d) for t, s, d in keys]
        note = ", bf16 for fp16"
    if not keys or any(k not in found for k in keys):
        return None
    files = sorted({found[k][1] for k in keys})
    return Pred(math.fsum(found[k][0] for k in keys), ", ".join(files) + note)


def single(kind: str, **params: Any) -> Op:
    """The Op that api.predict_op(kind, **params) times (to look its measurement up)."""
    from gpuperf.dtypes import parse_dtype
    from gpuperf.workloads import single_op as so

    if "dtype" in params:
        params["dtype"] = parse_dtype(params["dtype"])
    if kind in so.COLLECTIVES:
        return so.collective(kind, **params)
    return getattr(so, kind)(**params)


def kernel_measured(kind: str, gpu_name: str = "h100", **params: Any) -> Pred | None:
    """The committed measurement (µs) of the kernel api.predict_op(kind, ...) predicts."""
    return op_measured_us(gpu(gpu_name).name, [single(kind, **params)])
