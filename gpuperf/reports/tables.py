"""Views of a results table for people (rich), and for machines (one JSON object, CSV).

Works for any Prediction-like result: an object with `.columns` (a Prediction's rows as plain
columns) or `.table` (a DataFrame with the prediction columns, plus measured_ms, spread_pct,
tflops, gbps, error_pct when a measurement joined them) and `.to_json()`; totals, MFU and memory
are shown when the result has them. The rows are handled as plain columns (step.columns), so a
prediction renders without importing pandas; rich loads only for the table format.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

from gpuperf.reports.console import table_console
from gpuperf.step.columns import Columns, as_columns, div, isna
from gpuperf.step.columns import to_csv as columns_csv
from gpuperf.step.columns import total as column_total
from gpuperf.step.track_record import line as track_line
from gpuperf.units import fmt_bytes

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text


def num(value: Any) -> str:
    """About 3 significant digits, never scientific notation: 12,345 · 98.7 · 0.00412."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    v = float(value)
    if v == 0:
        return "0"
    decimals = min(5, max(0, 2 - math.floor(math.log10(abs(v)))))
    return f"{v:,.{decimals}f}"


def _pct(value: Any) -> str:
    return "–" if value is None or value != value else f"{100 * float(value):.1f}"


def _share(value: Any) -> Text:
    from rich.text import Text

    frac = 0.0 if value is None or value != value else float(value)
    bar = "█" * int(round(5 * frac))
    return Text.assemble(f"{100 * frac:5.1f} ", (bar, "cyan"))


_BOUND_STYLE = {"compute": "green", "memory": "yellow", "latency": "red", "comm": "magenta"}


def _bound(value: Any) -> Text:
    from rich.text import Text

    return Text(str(value), style=_BOUND_STYLE.get(str(value), ""))


# column -> (header with units, formatter, right-aligned, summed in the footer)
Fmt = Callable[[Any], Any]
COLUMNS: dict[str, tuple[str, Fmt, bool, bool]] = {
    "name": ("op", str, False, False),
    "count": ("count", lambda v: f"×{int(v)}", True, False),
    "kind": ("kind", str, False, False),
    "shape": ("shape", str, False, False),
    "dtype": ("dtype", str, False, False),
    "flops": ("FLOPs (G)", lambda v: num(v / 1e9), True, True),
    "bytes": ("bytes (MB)", lambda v: num(v / 1e6), True, True),
    "intensity": ("intensity (FLOP/B)", num, True, False),
    "bound": ("bound", _bound, False, False),
    "time_ms": ("time (ms)", num, True, True),
    "pred_tflops": ("TFLOP/s", num, True, False),
    "pred_gbps": ("GB/s", num, True, False),
    "measured_ms": ("measured (ms)", num, True, True),
    "spread_pct": ("spread (%)", num, True, False),
    "tflops": ("measured TFLOP/s", num, True, False),
    "gbps": ("measured GB/s", num, True, False),
    "error_pct": ("error (%)", lambda v: "–" if v != v else f"{v:+.1f}", True, False),
    "share": ("share (%)", _share, False, True),
}


def _is_sweep(result: Any) -> bool:
    """Independent single ops (no scenario): shares of a total mean nothing there."""
    return not getattr(result, "scenario", None)


def rows_of(result: Any, view: Any = None) -> Columns | Any:
    """What a view of `result` shows: `view` if given, else the result's rows — a Prediction's
    plain columns (no DataFrame made), or its `.table`."""
    if view is not None:
        return view
    cols = getattr(result, "columns", None)
    return cols if isinstance(cols, dict) else result.table


def display_columns(result: Any, view: Any = None) -> Columns:
    """The rows and columns the rich table shows: `view` (a grouped table) or the result's rows;
    single-op sweeps get predicted TFLOP/s and GB/s instead of a share of a total."""
    table = dict(as_columns(rows_of(result, view)))
    if _is_sweep(result):
        t_s = [t * 1e-3 for t in table["time_ms"]]
        table["pred_tflops"] = [div(f, t) / 1e12 for f, t in zip(table["flops"], t_s, strict=True)]
        table["pred_gbps"] = [div(b, t) / 1e9 for b, t in zip(table["bytes"], t_s, strict=True)]
        del table["share"]
    if "dtype" in table and len({v for v in table["dtype"] if not isna(v)}) <= 1:
        del table["dtype"]  # one dtype: it is in the title
    if "count" in table and all(v == 1 for v in table["count"]):
        del table["count"]
    if "shape" in table and all(v == "" for v in table["shape"]):
        del table["shape"]  # grouped by layer or kind
    return {c: table[c] for c in COLUMNS if c in table}


def title(result: Any) -> str:
    sc = getattr(result, "scenario", None) or {}
    parts = [getattr(result, "model", "") or ""]
    if sc:
        mode = sc.get("mode", "")
        sizes = f"batch {sc.get('batch')}"
        if mode in ("prefill", "train", "generate"):
            sizes += f" × seq {sc.get('seq')}"
        if mode == "decode":
            sizes += f", ctx {sc.get('ctx')}"
        if mode == "generate":
            sizes += f", +{sc.get('new_tokens')} tokens"
        impl = sc.get("impl", "") + (" + CUDA graphs" if sc.get("cuda_graphs") else "")
        par = " ".join(f"{k}={sc[k]}" for k in ("tp", "pp", "dp", "ep") if sc.get(k, 1) > 1)
        parts += [mode, sizes, sc.get("dtype", ""), impl, par]
    else:
        rows = as_columns(rows_of(result))
        dtypes = dict.fromkeys(rows["dtype"]) if "dtype" in rows else {}
        parts += ["single kernels, each timed on its own", "/".join(map(str, dtypes))]
    parts.append(f"on {getattr(result, 'gpu', '')}")
    return " · ".join(p for p in parts if p)


def rich_table(result: Any, view: Any = None) -> Table:
    from rich import box
    from rich.table import Table

    frame = display_columns(result, view)
    sweep = _is_sweep(result)  # independent kernels: no sum, no total
    table = Table(title=title(result), box=box.SIMPLE_HEAD, show_footer=not sweep)
    for col, values in frame.items():
        header, fmt, right, summed = COLUMNS[col]
        foot = ""
        if col == "name":
            foot = "sum"
        elif summed and col != "share":
            foot = fmt(column_total(values))
        table.add_column(
            header,
            footer=foot,
            justify="right" if right else "left",
            no_wrap=col in ("name", "shape", "share"),
        )
    formatters = [COLUMNS[c][1] for c in frame]
    for row in zip(*frame.values(), strict=True):
        table.add_row(*(f(v) for f, v in zip(formatters, row, strict=True)))
    return table


_PLAN_PARTS = {"tp_comm": "TP comm", "cp_comm": "CP comm", "ep_comm": "EP comm",
               "pp_comm": "PP comm", "dp_comm": "DP comm", "bubble": "bubble"}  # fmt: skip


def accuracy_text(record: dict[str, Any]) -> Text:
    """The footer line of how sure a prediction or simulation is (gpuperf.step.track_record),
    under every command's table."""
    from rich.text import Text

    return Text.assemble(("accuracy   ", "bold"), (track_line(record), "dim"))


def summary_lines(result: Any) -> list[Text]:
    """Totals under the table: time, throughput, MFU, memory, warnings."""
    from rich.text import Text

    lines: list[Text] = []
    extra = getattr(result, "extra", None) or {}
    total = getattr(result, "total_ms", None)
    if total is not None and not _is_sweep(result):
        parts = [f"{num(total)} ms"]
        if "gpu_busy_ms" in extra:
            parts.append(f"GPU busy {num(extra['gpu_busy_ms'])} ms")
        if extra.get("host_bound", 0) > 0.005:
            parts.append(f"waiting on the host {_pct(extra['host_bound'])}%")
        if "kernels" in extra:
            parts.append(f"{extra['kernels']:,} kernels")
        lines.append(Text.assemble(("total      ", "bold"), " · ".join(parts)))
    if "plan" in extra:
        where = f"{extra.get('gpus', 1)} GPUs"
        if extra.get("system"):
            where += f" of {extra['system']} ({extra.get('nodes', 1)} node(s))"
        parts = [f"{extra['plan']} on {where}"]
        parts += [f"{_PLAN_PARTS.get(k, k)} {num(v)} ms"
                  for k, v in extra.get("breakdown_ms", {}).items()
                  if k not in ("compute", "host", "optimizer") and v > 0]  # fmt: skip
        lines.append(Text.assemble(("plan       ", "bold"), " · ".join(parts)))
    if "ttft_ms" in extra:
        lines.append(
            Text.assemble(
                ("latency    ", "bold"),
                f"time to first token {num(extra['ttft_ms'])} ms · "
                f"per output token {num(extra['tpot_ms'])} ms · "
                f"decode {num(extra['decode_tokens_per_s'])} tokens/s",
            )
        )
    tps, mfu = getattr(result, "tokens_per_s", None), getattr(result, "mfu", None)
    if tps is not None or mfu is not None:
        parts = []
        if tps is not None:
            parts.append(f"{num(tps)} tokens/s")
        if mfu is not None:
            parts.append(f"MFU {_pct(mfu)}%")
        hfu = getattr(result, "hfu", None)
        if hfu is not None:
            parts.append(f"HFU {_pct(hfu)}%")
        conv = getattr(result, "mfu_convention", "")
        lines.append(
            Text.assemble(("throughput ", "bold"), " · ".join(parts), (f"  ({conv})", "dim"))
        )
    memory = getattr(result, "memory", None) or {}
    if memory:
        need, cap = sum(memory.values()), getattr(result, "memory_capacity", 0.0)
        fits = getattr(result, "fits", True)
        kinds = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in memory.items() if v)
        sc = getattr(result, "scenario", None) or {}
        if sc.get("mode") == "train" and sc.get("impl") in ("eager", "compile"):  # _at_the_peak
            kinds = ("at AdamW's step: " if not memory.get("activations")
                     else "at the backward's start: ") + kinds  # fmt: skip
        lines.append(
            Text.assemble(
                ("memory     ", "bold"),
                f"{fmt_bytes(need)} of {fmt_bytes(cap)} usable per GPU ",
                ("fits" if fits else "DOES NOT FIT", "green" if fits else "bold red"),
                (f"  ({kinds})", "dim"),
            )
        )
    record = extra.get("track_record")
    if record:
        lines.append(accuracy_text(record))
    for warning in getattr(result, "warnings", None) or []:
        lines.append(Text.assemble(("warning    ", "bold yellow"), warning))
    return lines


def to_json(result: Any) -> str:
    """One JSON object (result.to_json()), NaN written as null."""
    return json.dumps(result.to_json(), indent=2, allow_nan=False, default=str)


def to_csv(table: Columns | Any) -> str:
    """CSV of plain columns or of a DataFrame (the same text either way)."""
    return columns_csv(table) if isinstance(table, dict) else table.to_csv(index=False)


def render(result: Any, fmt: str = "table", *, view: Any = None, file: IO | None = None) -> None:
    """Print `result` as fmt = table (rich, with totals), json (one object) or csv.

    `view` (plain columns or a DataFrame) is what the table and CSV show instead of the result's
    rows (e.g. step.result.group(...)); the JSON always carries every op.
    """
    out = file or sys.stdout
    if fmt == "json":
        out.write(to_json(result) + "\n")
    elif fmt == "csv":
        out.write(to_csv(rows_of(result, view)))
        for warning in getattr(result, "warnings", None) or []:  # rows only on stdout
            sys.stderr.write(f"warning: {warning}\n")
    elif fmt == "table":
        console = table_console(file=out)
        console.print(rich_table(result, view))
        for line in summary_lines(result):
            console.print(line)
    else:
        raise ValueError(f"unknown format {fmt!r}")
