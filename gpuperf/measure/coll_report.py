"""Rows and views of a measured collective sweep (nccl-tests columns beside the prediction)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from gpuperf.errors import GpuperfError
from gpuperf.fileio import json_safe
from gpuperf.perfmodel.ops import P2P, Collective
from gpuperf.perfmodel.ops_io import op_to_dict

Predict = Callable[[Any], float | None]  # op -> predicted seconds

# column -> (header with units, format)
COLUMNS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "bytes": ("size (B)", lambda v: f"{int(v):,}"),
    "count": ("count (elements)", lambda v: f"{int(v):,}"),
    "measured_us": ("time (µs)", lambda v: f"{v:,.1f}"),
    "spread_pct": ("spread (%)", lambda v: f"{v:.1f}"),
    "algbw_gbps": ("algbw (GB/s)", lambda v: f"{v:,.2f}"),
    "busbw_gbps": ("busbw (GB/s)", lambda v: f"{v:,.2f}"),
    "wrong": ("#wrong", lambda v: str(int(v))),
    "time_us": ("predicted (µs)", lambda v: "–" if v is None else f"{v:,.1f}"),
    "error_pct": ("error (%)", lambda v: "–" if v is None else f"{v:+.1f}"),
}


def op_of(raw: dict[str, Any]) -> Collective | P2P:
    """The op a measured row describes (sizes as measured, after rounding to whole chunks)."""
    name = f"{raw['coll']}/{raw['bytes']}"
    if raw["coll"] == "sendrecv":
        return P2P(name=name, nbytes=raw["bytes"], dtype=raw["dtype"])
    return Collective(
        name=name, coll=raw["coll"], nbytes=raw["bytes"], ranks=raw["ranks"], dtype=raw["dtype"]
    )


def predictor(gpu: Any, system: Any, warnings: list[str]) -> Predict:
    """op -> predicted seconds with gpuperf.perfmodel.comm, or None (no GPU profile, no model)."""

    def predict(op: Any) -> float | None:
        if gpu is None:
            return None
        try:
            from gpuperf.perfmodel import comm

            if isinstance(op, P2P):
                return comm.p2p_time(op, gpu, system).time
            return comm.collective_time(op, gpu, system).time
        except (ImportError, AttributeError, GpuperfError, KeyError) as exc:
            msg = f"no prediction: {exc}"
            if msg not in warnings:
                warnings.append(msg)
            return None

    return predict


def finish_row(raw: dict[str, Any], predict: Predict) -> dict[str, Any]:
    """A worker's row plus the op record, the prediction and the error (predicted/measured - 1)."""
    op = op_of(raw)
    pred_s = predict(op)
    row = {"op": op_to_dict(op), "name": op.name, "kind": op.kind, "shape": op.shape, **raw}
    med = raw["measured_ms"]
    row["measured_us"] = med * 1e3
    row["spread_pct"] = 100 * (raw["p90_ms"] - raw["p10_ms"]) / med if med else 0.0
    row["predicted_ms"] = row["time_ms"] = None if pred_s is None else pred_s * 1e3
    row["time_us"] = None if pred_s is None else pred_s * 1e6
    row["error_pct"] = None if pred_s is None or not med else (pred_s * 1e3 / med - 1) * 100
    return row


def render(
    coll: str,
    ranks: int,
    rows: list[dict[str, Any]],
    env: dict[str, Any],
    warnings: list[str],
    fmt: str,
) -> None:
    """Print the sweep as a rich table, one JSON object, or CSV (stdout)."""
    if fmt == "json":
        obj = {"coll": coll, "ranks": ranks, "env": env, "warnings": warnings, "ops": rows}
        sys.stdout.write(json.dumps(json_safe(obj), indent=2, allow_nan=False) + "\n")
        return
    if fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow([COLUMNS[c][0] for c in COLUMNS])
        for r in rows:
            w.writerow(["" if r.get(c) is None else r[c] for c in COLUMNS])
        return
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from gpuperf.reports.console import console as make_console

    where = env.get("gpu") or env.get("cpu") or env.get("device", "")
    backend = env.get("backend", "")
    title = f"{coll} · {ranks} ranks · {rows[0]['dtype']} · {backend} on {where}".replace("  ", " ")
    table = Table(title=title, box=box.SIMPLE_HEAD)
    for _col, (header, _) in COLUMNS.items():
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(*(fmt_(r.get(col)) for col, (_, fmt_) in COLUMNS.items()))
    console = make_console()
    if not console.is_terminal:
        console.width = max(console.width, 140)
    console.print(table)
    for w_ in warnings:
        console.print(Text.assemble(("warning", "bold yellow"), f"    {w_}"))
