"""Result records of measurements: one JSON file per sweep, and the measured-vs-predicted table.

File format (benchmarks/accuracy.py re-predicts each row from "op" with the current model):
    {"env": {...}, "kind": "gemm", "rows": [{"op": op_to_dict(op), "name", "kind", "shape",
     "flops", "bytes", "measured_ms", "p10_ms", "p90_ms", "n", "tflops", "gbps", "check_err",
     "predicted_ms", "method", "detail", "samples_ms"}]}
"predicted_ms" is the model's prediction at measurement time, informative only.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from gpuperf.fileio import check_writable, json_safe, write_text
from gpuperf.measure.kernels import Measurement
from gpuperf.perfmodel.ops import Op
from gpuperf.perfmodel.ops_io import op_to_dict


def measurement_row(m: Measurement, predicted_ms: float | None = None) -> dict[str, Any]:
    """The JSON record of one measured op."""
    cost = m.op.cost()
    t = m.timing
    return {
        "op": op_to_dict(m.op),
        "name": m.op.name,
        "kind": m.op.kind,
        "shape": m.op.shape,
        "dtype": getattr(m.op, "dtype", ""),
        "flops": cost.flops,
        "bytes": cost.bytes,
        "measured_ms": t.median_s * 1e3,
        "p10_ms": t.p10_s * 1e3,
        "p90_ms": t.p90_s * 1e3,
        "n": t.n,
        "tflops": m.tflops,
        "gbps": m.gbps,
        "check_err": m.check_err,
        "predicted_ms": predicted_ms,
        "method": t.method,
        "detail": m.detail,
        "samples_ms": [s * 1e3 for s in t.samples],
    }


class ResultsFile:
    """A results file rewritten (atomically) after every row, so a failure loses nothing done;
    first written with the first row (a run that measures nothing leaves an old file as it was)."""

    def __init__(self, path: str | os.PathLike[str], env: dict[str, Any], kind: str) -> None:
        self.path = check_writable(path)
        self.data: dict[str, Any] = {"env": env, "kind": kind, "rows": []}

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.data["rows"]

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self.write()

    def write(self) -> None:
        """Rewrite the file (atomic rename) with everything added so far."""
        write_text(self.path, json.dumps(json_safe(self.data), indent=1, allow_nan=False))


def pct_peak(m: Measurement, gpu: Any) -> float | None:
    """Measured rate as a fraction of the datasheet peak: FLOP/s for GEMM and attention, HBM
    bandwidth for everything else. None without a GPU profile."""
    if gpu is None:
        return None
    if m.op.kind in ("gemm", "attention"):
        try:
            return m.tflops * 1e12 / gpu.peak(m.op.dtype)
        except Exception:
            return None
    return m.gbps * 1e9 / gpu.hbm_bw if gpu.hbm_bw else None


@dataclass
class MeasureResult:
    """What `gpuperf measure` renders: a Prediction-like table (reports.tables.render) + env."""

    table: Any  # pandas DataFrame
    env: dict[str, Any]
    gpu: str = ""
    model: str = ""
    scenario: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    total_ms: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return json_safe(
            {
                "gpu": self.gpu,
                "total_ms": self.total_ms,
                "measured_total_ms": float(self.table["measured_ms"].sum()),
                "warnings": self.warnings,
                "env": self.env,
                "ops": [
                    {k: (v.item() if hasattr(v, "item") else v) for k, v in rec.items()}
                    for rec in self.table.to_dict("records")
                ],
            }
        )


def measured_table(ops: list[Op], ms: list[Measurement], gpu: Any, prediction: Any | None) -> Any:
    """One row per measured op: the prediction columns (NaN without one) and the measured ones."""
    import pandas as pd

    n = len(ms)
    if prediction is not None:
        table = prediction.table.iloc[:n].copy()
    else:
        table = pd.DataFrame(
            {
                "name": [op.name for op in ops[:n]],
                "kind": [op.kind for op in ops[:n]],
                "shape": [op.shape for op in ops[:n]],
                "dtype": [getattr(op, "dtype", "") for op in ops[:n]],
                "flops": [op.cost().flops for op in ops[:n]],
                "bytes": [op.cost().bytes for op in ops[:n]],
                "intensity": [op.cost().intensity for op in ops[:n]],
                "bound": [""] * n,
                "time_ms": [math.nan] * n,
                "share": [math.nan] * n,
            }
        )
    measured = [m.timing.median_s * 1e3 for m in ms]
    table["measured_ms"] = measured
    table["spread_pct"] = [m.timing.spread_pct for m in ms]
    table["tflops"] = [m.tflops for m in ms]
    table["gbps"] = [m.gbps for m in ms]
    table["pct_peak"] = [pct_peak(m, gpu) for m in ms]
    table["check_err"] = [m.check_err for m in ms]
    table["error_pct"] = (table["time_ms"] / table["measured_ms"] - 1.0) * 100.0
    table["backend"] = [m.detail.get("backend", m.detail.get("kernel", "")) for m in ms]
    return table.reset_index(drop=True)
