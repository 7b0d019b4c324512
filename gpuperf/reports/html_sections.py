"""The report's HTML that is not a figure: headline cards, the sortable op table, the scenario,
the hardware profile with its sources, assumptions and units, the measurement environment."""

from __future__ import annotations

import math
from html import escape
from typing import Any

import pandas as pd

from gpuperf.reports.html_data import ReportItem, achieved_tflops, fold_ops
from gpuperf.reports.html_figures import kind_color
from gpuperf.reports.tables import num
from gpuperf.step.result import SUMMED
from gpuperf.step.track_record import line as track_line


def _e(value: Any) -> str:
    return escape(str(value), quote=True)


def _pct(value: Any) -> str:
    return "–" if value is None or value != value else f"{100 * float(value):.1f}%"


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f}"


# ------------------------------------------------------------------------------- headline


def _card(key: str, value: str, unit: str = "", detail: str = "", cls: str = "card") -> str:
    small = f"<small>{_e(unit)}</small>" if unit else ""
    d = f'<div class="d">{detail}</div>' if detail else ""
    return (
        f'<div class="{cls}"><div class="k">{_e(key)}</div>'
        f'<div class="v">{value}{small}</div>{d}</div>'
    )


def _fits(r: Any) -> str:
    if not getattr(r, "memory", None):
        return ""
    need = sum(r.memory.values())
    ok = getattr(r, "fits", True)
    pill = (
        '<span class="pill ok">fits</span>' if ok else '<span class="pill bad">does not fit</span>'
    )
    return f"{_gib(need)} of {_gib(r.memory_capacity)} GiB {pill}"


def _compute_share(item: ReportItem) -> float | None:
    t = item.table
    if not item.has_predicted or "bound" not in t:
        return None
    busy = t["time_ms"].sum()
    return float(t.loc[t["bound"] == "compute", "time_ms"].sum() / busy) if busy > 0 else None


def headline_cards(items: list[ReportItem]) -> str:
    """One row of big numbers for one GPU; one card per GPU when several."""
    if len(items) > 1:
        best = min(items, key=lambda it: it.result.total_ms)
        cards = []
        for it in items:
            r = it.result
            lines = [
                f"{num(r.tokens_per_s)} tokens/s" if r.tokens_per_s else "",
                f"MFU {_pct(r.mfu)}" if r.mfu is not None else "",
                _fits(r),
            ]
            tag = " · fastest" if it is best else ""
            cards.append(
                _card(
                    it.label + tag,
                    num(r.total_ms),
                    "ms",
                    "<br>".join(x for x in lines if x),
                    "card gpu",
                )
            )
        return f'<div class="cards">{"".join(cards)}</div>'
    it = items[0]
    r, extra = it.result, getattr(it.result, "extra", {}) or {}
    cards = []
    if it.is_sweep:
        cards.append(_card("ops", f"{len(it.table):,}"))
        if it.has_measured:
            err = it.table["error_pct"].abs().median() if "error_pct" in it.table else math.nan
            cards.append(_card("measured, summed", num(it.table["measured_ms"].sum()), "ms"))
            cards.append(_card("median |error|", num(err), "%", "prediction vs measurement"))
    else:
        detail = f"GPU busy {num(extra['gpu_busy_ms'])} ms" if "gpu_busy_ms" in extra else ""
        cards.append(_card("step time", num(r.total_ms), "ms", detail))
        if "ttft_ms" in extra:
            cards.append(
                _card(
                    "first token",
                    num(extra["ttft_ms"]),
                    "ms",
                    f"then {num(extra['tpot_ms'])} ms per token",
                )
            )
        if r.tokens_per_s:
            cards.append(_card("throughput", num(r.tokens_per_s), "tokens/s"))
        if r.mfu is not None:
            cards.append(
                _card(
                    "MFU",
                    f"{100 * r.mfu:.1f}",
                    "%",
                    f"HFU {_pct(r.hfu)}" if r.hfu is not None else "",
                )
            )
        if getattr(r, "memory", None):
            cards.append(_card("memory / GPU", _gib(sum(r.memory.values())), "GiB", _fits(r)))
        share = _compute_share(it)
        if share is not None:
            cards.append(_card("compute-bound", f"{100 * share:.0f}", "%", "of kernel time"))
        if "host_bound" in extra and extra["host_bound"] > 0.005:
            cards.append(
                _card(
                    "waiting on host",
                    f"{100 * extra['host_bound']:.0f}",
                    "%",
                    "launches, host work",
                )
            )
    return f'<div class="cards">{"".join(cards)}</div>'


def warnings_html(items: list[ReportItem]) -> str:
    out = []
    for it in items:
        prefix = f"<b>{_e(it.label)}</b>: " if len(items) > 1 else ""
        out += [f'<div class="warning">{prefix}{_e(w)}</div>' for w in it.result.warnings or []]
    return f'<div class="warnings">{"".join(out)}</div>' if out else ""


# ------------------------------------------------------------------------------- op table

# column -> (header with units, numeric?, formatter)
_COLS: dict[str, tuple[str, bool, Any]] = {
    "name": ("op", False, str),
    "count": ("count", True, lambda v: f"×{int(v)}"),
    "layer": ("layers", False, str),
    "kind": ("kind", False, str),
    "shape": ("shape", False, str),
    "dtype": ("dtype", False, str),
    "flops": ("GFLOP", True, lambda v: num(v / 1e9)),
    "bytes": ("MB", True, lambda v: num(v / 1e6)),
    "intensity": ("intensity (FLOP/B)", True, num),
    "bound": ("bound", False, str),
    "time_ms": ("predicted (ms)", True, num),
    "t_math_ms": ("math (ms)", True, num),
    "t_mem_ms": ("memory (ms)", True, num),
    "t_overhead_ms": ("overhead (ms)", True, num),
    "t_comm_ms": ("comm (ms)", True, num),
    "share": ("share (%)", True, None),
    "measured_ms": ("measured (ms)", True, num),
    "error_pct": ("error (%)", True, lambda v: "–" if v != v else f"{v:+.1f}"),
    "tflops": ("TFLOP/s", True, num),
    "gbps": ("GB/s", True, num),
}
_SUMMED = (*SUMMED, "measured_ms")


def _cell(col: str, value: Any) -> str:
    header, numeric, fmt = _COLS[col]
    if not numeric:
        text = "" if value is None or value != value else str(value)
        if col == "bound":
            return f'<td class="b-{_e(text)}">{_e(text)}</td>'
        if col == "kind":
            dot = f'<span class="dot" style="background:{kind_color(text)}"></span>'
            return f"<td>{dot}{_e(text)}</td>"
        return f"<td>{_e(text)}</td>"
    v = float(value) if value is not None else math.nan
    key = "" if v != v else f"{v:.6g}"
    if col == "share":
        pct = 0.0 if v != v else 100 * v
        shown = (
            "–" if v != v else f'{pct:.1f}<span class="bar" style="width:{pct * 0.4:.1f}px"></span>'
        )
        return f'<td class="n" data-v="{key}">{shown}</td>'
    return f'<td class="n" data-v="{key}">{_e(fmt(v) if v == v else "–")}</td>'


_DETAIL = ("t_math_ms", "t_mem_ms", "t_overhead_ms", "t_comm_ms")


def _view(item: ReportItem, table: pd.DataFrame, detail: bool) -> pd.DataFrame:
    t = table.copy() if detail else table.drop(columns=[c for c in _DETAIL if c in table])
    main = "measured_ms" if item.has_measured else "time_ms"
    if main in t:
        t["tflops"] = achieved_tflops(t["flops"], t[main])
        t["gbps"] = t["bytes"] / (t[main].where(t[main] > 0) * 1e-3) / 1e9
    if item.is_sweep and "share" in t:
        t = t.drop(columns="share")
    drop = [c for c in ("t_comm_ms", "error_pct", "measured_ms") if c in t and t[c].isna().all()]
    drop += [c for c in ("t_comm_ms",) if c in t and not t[c].fillna(0).any()]
    if "dtype" in t and t["dtype"].nunique() <= 1:
        drop.append("dtype")  # one dtype: it is in the title
    if "count" in t and (t["count"] == 1).all():
        drop.append("count")
    if "layer" in t and (t["layer"].fillna("") == "").all():
        drop.append("layer")
    if "time_ms" in t and t["time_ms"].isna().all():
        drop += [c for c in ("time_ms", "t_math_ms", "t_mem_ms", "t_overhead_ms") if c in t]
    return t[[c for c in _COLS if c in t.columns and c not in drop]]


def op_table(item: ReportItem, table: pd.DataFrame, table_id: str, detail: bool = False) -> str:
    """A sortable table of ops (click a header), a sum row at the bottom; `detail` adds the
    predicted time's parts (math, memory, overhead)."""
    view = _view(item, table, detail)
    cols = list(view.columns)
    head = "".join(f'<th class="{"n" if _COLS[c][1] else ""}">{_e(_COLS[c][0])}</th>' for c in cols)
    body = "\n".join(
        "<tr>" + "".join(_cell(c, v) for c, v in zip(cols, row, strict=True)) + "</tr>"
        for row in view.itertuples(index=False)
    )
    foot = []
    for c in cols:
        if c == "name":
            foot.append(f"<td>sum of {len(table):,} rows</td>")
        elif c in _SUMMED and not item.is_sweep:
            foot.append(f'<td class="n">{_e(_COLS[c][2](view[c].sum()))}</td>')
        else:
            foot.append("<td></td>")
    return (
        f'<div class="scroll"><table class="data sortable" id="{table_id}"><thead><tr>{head}'
        f"</tr></thead><tbody>\n{body}\n</tbody><tfoot><tr>{''.join(foot)}</tr></tfoot></table>"
        "</div>"
    )


def tables_html(items: list[ReportItem]) -> str:
    """Per GPU: the folded table (identical ops across layers in one row), and every kernel."""
    parts = []
    for i, it in enumerate(items):
        folded = fold_ops(it.table)
        inner = op_table(it, folded, f"ops-{i}")
        if len(folded) < len(it.table):
            inner += (
                f"<details><summary>Every kernel ({len(it.table):,} rows, in launch order)"
                f"</summary>{op_table(it, it.table, f'kernels-{i}', True)}</details>"
            )
        if len(items) > 1:
            open_ = " open" if i == 0 else ""
            inner = f"<details{open_}><summary>{_e(it.label)}</summary>{inner}</details>"
        parts.append(inner)
    return "\n".join(parts)


# --------------------------------------------------------------------- scenario and hardware


def kv_table(pairs: list[tuple[str, Any]], cls: str = "kv") -> str:
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in pairs)
    return f'<table class="{cls}">{rows}</table>'


def scenario_html(item: ReportItem) -> str:
    r = item.result
    sc = getattr(r, "scenario", None) or {}
    pairs: list[tuple[str, Any]] = [("model", r.model or "–"), ("GPU", r.gpu or "–")]
    pairs += [(k, "–" if v is None else v) for k, v in sc.items()]
    extra = getattr(r, "extra", {}) or {}
    for key, label in (("kernels", "kernels"), ("dispatch_us", "host cost per kernel (µs)")):
        if key in extra:
            pairs.append((label, num(extra[key]) if key != "kernels" else f"{extra[key]:,}"))
    return kv_grid(pairs)


def kv_grid(pairs: list[tuple[str, Any]]) -> str:
    """Short key/value pairs as a grid of small tiles (a scenario reads at a glance)."""
    tiles = "".join(
        f'<div class="kvt"><div class="k">{_e(k)}</div><div class="v">{_e(v)}</div></div>'
        for k, v in pairs
    )
    return f'<div class="kvgrid">{tiles}</div>'


_SPEC_ROWS = (
    ("display_name", "name", str),
    ("arch", "architecture", str),
    ("compute_capability", "compute capability", str),
    ("sms", "SMs", str),
    ("boost_clock_mhz", "boost clock (MHz)", lambda v: f"{v:,.0f}"),
    ("hbm_bytes", "HBM capacity (GiB)", lambda v: _gib(v)),
    ("hbm_bw", "HBM bandwidth (GB/s)", lambda v: f"{v / 1e9:,.0f}"),
    ("l2_bytes", "L2 cache (MiB)", lambda v: f"{v / 2**20:,.0f}"),
    ("smem_per_sm_bytes", "shared memory per SM (KiB)", lambda v: f"{v / 2**10:,.0f}"),
    ("nvlink_bw", "NVLink per direction (GB/s)", lambda v: f"{v / 1e9:,.0f}"),
    ("pcie_bw", "PCIe per direction (GB/s)", lambda v: f"{v / 1e9:,.0f}"),
)


def hardware_html(item: ReportItem) -> str:
    """Every number of the profile the prediction used, with the source the profile cites."""
    spec = item.spec
    if spec is None:
        return f'<p class="note">{_e(item.label)}: no hardware profile loaded.</p>'
    src = dict(getattr(spec, "sources", {}) or {})
    rows = []
    for field_name, label, fmt in _SPEC_ROWS:
        value = getattr(spec, field_name, None)
        if value is None:
            continue
        rows.append((label, fmt(value), src.get(field_name, "")))
    for dtype, peak in spec.peak_flops.items():
        rows.append(
            (
                f"dense {dtype} peak (TFLOP/s)",
                f"{peak / 1e12:,.1f}",
                src.get(f"peak_flops.{dtype}", ""),
            )
        )
    body = []
    for i, (k, v, s) in enumerate(rows):
        if i and s and s == rows[i - 1][2]:
            cell = ""  # the cell above spans it
        else:
            span = 1
            while s and i + span < len(rows) and rows[i + span][2] == s:
                span += 1
            cell = f"<td class='s' rowspan='{span}'>{_e(s)}</td>"
        body.append(f"<tr><th>{_e(k)}</th><td class='n'>{_e(v)}</td>{cell}</tr>")
    body = "".join(body)
    params = getattr(spec, "params", None)
    model_rows = ""
    if params is not None:
        from dataclasses import fields

        pairs = [(f.name, getattr(params, f.name)) for f in fields(params) if f.name != "extra"]
        model_rows = (
            "<details><summary>Model parameters (efficiencies and latencies the time model "
            f"uses)</summary>{kv_table(pairs)}</details>"
        )
    path = f'<p class="note">profile file: <code>{_e(spec.path)}</code></p>' if spec.path else ""
    return (
        f'<table class="data src"><thead><tr><th>field</th><th class="n">value</th>'
        f"<th>source</th></tr></thead><tbody>{body}</tbody></table>{path}{model_rows}"
    )


def assumptions_html(items: list[ReportItem]) -> str:
    conventions = sorted({it.result.mfu_convention for it in items if it.result.mfu_convention})
    lines = [
        "Times are predicted per kernel from an analytical model (roofline with tile/wave "
        "quantization, FlashAttention IO, streaming-bandwidth efficiency), never looked up.",
        "A GEMM of M×N×K counts 2·M·N·K FLOPs. Bytes are the HBM traffic of one kernel "
        "(inputs read once, outputs written once); intensity = FLOPs ÷ bytes.",
        "Achieved FLOP/s on the roofline = FLOPs ÷ kernel time (predicted, or measured median).",
        "Peaks are dense datasheet numbers (2:4 sparsity halved away); ridge = peak ÷ HBM "
        "bandwidth.",
        "Step time simulates the host issuing kernels in order: when kernels are shorter than "
        "the launch cost, the GPU waits on the host.",
        "Units: ms (10⁻³ s), TFLOP/s (10¹² FLOP/s), GB/s and MB (10⁹ and 10⁶ bytes, as vendors "
        "and nccl-tests use), GiB (2³⁰ bytes) for memory capacities.",
    ]
    lines += [f"MFU convention: {c}." for c in conventions]
    lines.append(
        "Ops identical across layers (same position, same shape) are folded into one "
        "point and one table row, with a count; their times add up."
    )
    for it in items:  # how sure each prediction is (gpuperf.step.track_record)
        record = (getattr(it.result, "extra", None) or {}).get("track_record")
        if not isinstance(record, dict) or not record.get("basis"):
            continue
        try:  # a saved file's record (report --from) may be anyone's: drawn only when whole
            text = track_line(record)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        who = f"{it.label}: " if len(items) > 1 else ""
        lines.append(f"Accuracy, {who}{text}.")
    return '<ul class="assume">' + "".join(f"<li>{_e(x)}</li>" for x in lines) + "</ul>"


def env_html(items: list[ReportItem]) -> str:
    parts = []
    for it in items:
        if not it.env:
            continue
        title = f"<h3>{_e(it.label)}</h3>" if len(items) > 1 else ""
        pairs = [(k, v) for k, v in it.env.items() if not isinstance(v, dict | list)]
        parts.append(title + kv_table(pairs))
    return "".join(parts)
