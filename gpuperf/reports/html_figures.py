"""The report's plotly figures: roofline, where the time goes, memory, GPUs side by side.

Each builder takes ReportItems (html_data) and returns a plotly Figure (or None when there is
nothing to draw) plus notes for the page. plotly is imported here, and this module is imported
only when a report is written, never on the predict path.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpuperf.reports.html_data import ReportItem, strip_layer
from gpuperf.reports.tables import num

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
KIND_COLORS = {
    "gemm": "#2563eb",
    "attention": "#9333ea",
    "elementwise": "#f59e0b",
    "norm": "#10b981",
    "softmax": "#ec4899",
    "embedding": "#64748b",
    "copy": "#94a3b8",
    "reduce": "#14b8a6",
    "collective": "#ef4444",
    "p2p": "#f97316",
}
BOUND_COLORS = {"compute": "#2563eb", "memory": "#f59e0b", "latency": "#ef4444", "comm": "#a855f7"}
MEMORY_COLORS = {
    "weights": "#2563eb",
    "kv_cache": "#9333ea",
    "activations": "#f59e0b",
    "gradients": "#10b981",
    "optimizer": "#ef4444",
}
GPU_COLORS = ("#0ea5e9", "#f43f5e", "#84cc16", "#8b5cf6", "#f59e0b", "#14b8a6", "#64748b")
_SPARE = ("#0891b2", "#be185d", "#4d7c0f", "#7c3aed", "#b45309")


def kind_color(kind: str) -> str:
    if kind in KIND_COLORS:
        return KIND_COLORS[kind]
    return _SPARE[sum(map(ord, kind)) % len(_SPARE)]


def layout(fig: go.Figure, height: int, **kw: Any) -> go.Figure:
    base: dict[str, Any] = {
        "template": "plotly_white",
        "height": height,
        "margin": {"l": 70, "r": 30, "t": 40, "b": 60},
        "font": {"family": FONT, "size": 13, "color": "#1e293b"},
        "hoverlabel": {"font": {"family": FONT}},
        "legend": {"bgcolor": "rgba(255,255,255,0.8)", "traceorder": "normal"},
        "modebar": {"bgcolor": "rgba(0,0,0,0)", "color": "#cbd5e1", "activecolor": "#2563eb"},
    }
    fig.update_layout(**{**base, **kw})
    return fig


# ----------------------------------------------------------------------------- time breakdown


def _time_col(item: ReportItem) -> str:
    return "time_ms" if item.has_predicted else "measured_ms"


def kind_figure(items: list[ReportItem]) -> go.Figure:
    """Time by op kind, longest on top: bars coloured by kind for one GPU; one bar per GPU (and
    per measurement, hatched) when several."""
    fig = go.Figure()
    order: list[str] | None = None
    single = len(items) == 1
    for i, it in enumerate(items):
        cols = [
            c for c in ("time_ms", "measured_ms") if c in it.table and it.table[c].notna().any()
        ]
        for col in cols:
            grouped = it.table.groupby("kind", sort=False)[col]
            by = grouped.sum()
            if col == "measured_ms":  # a kind only partly measured has no measured total
                by = by.where(grouped.count() == grouped.size())
            if order is None:
                order = list(by.sort_values().index)
            total = it.table[col].sum()
            share = 100 * by.values / total if total else by.values * 0
            what = "predicted" if col == "time_ms" else "measured"
            name = what if single else f"{it.label} {what}"
            color = [kind_color(k) for k in by.index] if single else GPU_COLORS[i % len(GPU_COLORS)]
            fig.add_bar(
                y=by.index,
                x=by.values,
                orientation="h",
                name=name,
                marker={"color": color, "pattern": {"shape": "/" if col == "measured_ms" else ""}},
                text=[
                    f"{num(v)} ms · {p:.0f}%" if v == v else ""
                    for v, p in zip(by.values, share, strict=True)
                ],
                textposition="outside",
                cliponaxis=False,
                customdata=share,
                hovertemplate="%{y}: %{x:,.4g} ms (%{customdata:.1f}%)<extra>" + name + "</extra>",
            )
    bars = len(fig.data)
    layout(
        fig,
        110 + 30 * len(order or []) * max(1, bars),
        barmode="group",
        showlegend=bars > 1,
        xaxis={"title": "time (ms)"},
        yaxis={"categoryorder": "array", "categoryarray": order or []},
        margin={"l": 90, "r": 90, "t": 30, "b": 50},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "traceorder": "normal"},
    )
    return fig


def position_figure(item: ReportItem) -> go.Figure:
    """Treemap of time by position in a layer (layer number dropped: L0..L31 added up)."""
    col = _time_col(item)
    t = item.table
    pos = t.assign(_pos=t["name"].map(strip_layer))
    leaves = pos.groupby("_pos", sort=False).agg(
        time=(col, "sum"), kind=("kind", "first"), count=("name", "size")
    )
    leaves = leaves[leaves["time"] > 0]
    total = float(leaves["time"].sum())
    nodes: dict[str, dict[str, Any]] = {}
    for path, row in leaves.iterrows():
        parts = str(path).split("/")
        for depth in range(1, len(parts) + 1):
            node = "/".join(parts[:depth])
            entry = nodes.setdefault(
                node,
                {
                    "parent": "/".join(parts[: depth - 1]),
                    "label": parts[depth - 1],
                    "value": 0.0,
                    "color": "#e2e8f0",
                    "text": "#334155",
                    "count": 0,
                },
            )
            entry["value"] += float(row["time"])
            if depth == len(parts):
                entry["color"] = kind_color(str(row["kind"]))
                entry["text"] = "white"
                entry["count"] = int(row["count"])
    ids = list(nodes)
    fig = go.Figure(
        go.Treemap(
            ids=ids,
            labels=[nodes[n]["label"] for n in ids],
            parents=[nodes[n]["parent"] for n in ids],
            values=[nodes[n]["value"] for n in ids],
            branchvalues="total",
            marker={"colors": [nodes[n]["color"] for n in ids], "line": {"color": "white"}},
            customdata=[[100 * nodes[n]["value"] / total, nodes[n]["count"]] for n in ids],
            texttemplate="<b>%{label}</b><br>%{value:,.3g} ms<br>%{customdata[0]:.1f}%",
            hovertemplate="<b>%{id}</b><br>%{value:,.4g} ms · %{customdata[0]:.1f}% of kernel "
            "time<br>×%{customdata[1]} kernels<extra></extra>",
            textfont={"color": [nodes[n]["text"] for n in ids]},
            tiling={"pad": 2},
        )
    )
    return layout(fig, 440, margin={"l": 10, "r": 10, "t": 10, "b": 10})


# PlanResult.breakdown keys -> legend names
_PLAN_PARTS = {
    "compute": "compute kernels",
    "host": "waiting on the host",
    "tp_comm": "exposed TP communication",
    "cp_comm": "exposed CP communication",
    "ep_comm": "exposed EP communication",
    "pp_comm": "exposed PP communication",
    "dp_comm": "exposed DP communication",
    "bubble": "pipeline bubble",
    "optimizer": "optimizer step",
}
_STEP_ORDER = (
    "compute",
    "memory",
    "latency",
    "comm",
    "other",
    "compute kernels",
    "optimizer step",
    "exposed communication",
    "exposed TP communication",
    "exposed EP communication",
    "exposed PP communication",
    "exposed DP communication",
    "pipeline bubble",
    "waiting on the host",
)
_PART_COLORS = {
    "other": "#94a3b8",
    "compute kernels": "#2563eb",
    "waiting on the host": "#cbd5e1",
    "optimizer step": "#10b981",
    "exposed communication": "#a855f7",
    "exposed TP communication": "#a855f7",
    "exposed EP communication": "#c084fc",
    "exposed PP communication": "#7e22ce",
    "exposed DP communication": "#d8b4fe",
    "pipeline bubble": "#64748b",
}


def _seg(value: float, parts: dict[str, float]) -> str:
    total = sum(parts.values())
    if not total or value < 0.1 * total:  # too narrow for a label; the hover has it
        return ""
    return f"{num(value)} ms · {100 * value / total:.0f}%"


def step_figure(items: list[ReportItem]) -> go.Figure | None:
    """What each step's time is: kernels by what bounds them, host wait, and, for parallel runs,
    exposed communication and the pipeline bubble (from result.extra)."""
    rows: list[tuple[str, dict[str, float]]] = []
    for it in items:
        extra = getattr(it.result, "extra", {}) or {}
        if "plan" in extra and "breakdown_ms" in extra:  # a plan: the parts of its step
            parts = {_PLAN_PARTS.get(k, k): float(v) for k, v in extra["breakdown_ms"].items()}
            rows.append((it.label, {k: v for k, v in parts.items() if v > 0}))
            continue
        if it.is_sweep or not it.has_predicted:
            continue
        t = it.table
        parts = {b or "other": float(v) for b, v in t.groupby("bound")["time_ms"].sum().items()}
        for key, label in (
            (("exposed_comm_ms", "comm_exposed_ms"), "exposed communication"),
            (("bubble_ms", "pipeline_bubble_ms"), "pipeline bubble"),
        ):
            value = next((extra[k] for k in key if isinstance(extra.get(k), int | float)), None)
            if value:
                parts[label] = float(value)
        rest = float(it.result.total_ms) - sum(parts.values())
        if rest > 1e-3 * float(it.result.total_ms):
            parts["waiting on the host"] = rest
        rows.append((it.label, parts))
    if not rows:
        return None
    fig = go.Figure()
    present = {k for _, p in rows for k in p}
    labels = [k for k in _STEP_ORDER if k in present] + sorted(present - set(_STEP_ORDER))
    for label in labels:
        values = [p.get(label, 0.0) for _, p in rows]
        bound = label in ("compute", "memory", "latency", "comm")
        fig.add_bar(
            y=[name for name, _ in rows],
            x=values,
            orientation="h",
            name=f"{label}-bound kernels" if bound else label,
            marker={"color": BOUND_COLORS.get(label) or _PART_COLORS.get(label, "#94a3b8")},
            text=[_seg(v, p) for v, (_, p) in zip(values, rows, strict=True)],
            textposition="inside",
            insidetextanchor="middle",
            textangle=0,
            textfont={"color": "white"},
            hovertemplate="%{x:,.4g} ms<extra>%{fullData.name}</extra>",
        )
    return layout(
        fig,
        120 + 50 * len(rows),
        barmode="stack",
        yaxis={"autorange": "reversed", "automargin": True},
        xaxis={"title": "time (ms)"},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "traceorder": "normal"},
        margin={"l": 110, "r": 30, "t": 40, "b": 50},
    )


# ------------------------------------------------------------------------------------- memory


def memory_figure(items: list[ReportItem]) -> go.Figure | None:
    """Per-GPU memory by kind (stacked, GiB) against the GPU's capacity."""
    rows = [(it.label, it.result) for it in items if getattr(it.result, "memory", None)]
    if not rows:
        return None
    fig = go.Figure()
    kinds = list(dict.fromkeys(k for _, r in rows for k, v in r.memory.items() if v))
    for kind in kinds:
        fig.add_bar(
            y=[name for name, _ in rows],
            x=[r.memory.get(kind, 0.0) / 2**30 for _, r in rows],
            orientation="h",
            name=kind.replace("_", " "),
            marker={"color": MEMORY_COLORS.get(kind, kind_color(kind))},
            hovertemplate="%{x:,.3g} GiB<extra>%{fullData.name}</extra>",
        )
    caps = [r.memory_capacity / 2**30 for _, r in rows]
    fig.add_scatter(
        y=[name for name, _ in rows],
        x=caps,
        mode="markers+text",
        marker={"symbol": "line-ns", "size": 44, "line": {"width": 3, "color": "#dc2626"}},
        text=[f"capacity {c:,.0f} GiB" for c in caps],
        textposition="top center",
        textfont={"color": "#dc2626", "size": 11},
        name="GPU capacity",
        hovertemplate="capacity %{x:,.1f} GiB<extra></extra>",
    )
    need = max(sum(r.memory.values()) / 2**30 for _, r in rows)
    return layout(
        fig,
        130 + 60 * len(rows),
        barmode="stack",
        yaxis={"autorange": "reversed"},
        xaxis={"title": "memory per GPU (GiB)", "range": [0, max(need, *caps) * 1.12]},
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0, "traceorder": "normal"},
        margin={"l": 110, "r": 30, "t": 40, "b": 50},
    )


# ----------------------------------------------------------------------------- GPU comparison


def compare_figure(items: list[ReportItem]) -> go.Figure | None:
    """Step time, tokens/s and MFU: one bar per GPU."""
    items = [it for it in items if not it.is_sweep]  # a sweep's total means nothing
    if len(items) < 2:
        return None
    metrics = [("step time (ms)", lambda r: r.total_ms)]
    if any(getattr(it.result, "tokens_per_s", None) for it in items):
        metrics.append(("tokens/s", lambda r: r.tokens_per_s))
    if any(getattr(it.result, "mfu", None) for it in items):
        metrics.append(("MFU (%)", lambda r: 100 * r.mfu if r.mfu else None))
    fig = make_subplots(rows=1, cols=len(metrics), subplot_titles=[m[0] for m in metrics])
    names = [it.label for it in items]
    colors = [GPU_COLORS[i % len(GPU_COLORS)] for i in range(len(items))]
    for col, (title, get) in enumerate(metrics, start=1):
        values = [get(it.result) for it in items]
        fig.add_bar(
            x=names,
            y=values,
            marker={"color": colors},
            text=[num(v) for v in values],
            textposition="outside",
            cliponaxis=False,
            showlegend=False,
            hovertemplate="%{x}: %{y:,.4g}<extra>" + title + "</extra>",
            row=1,
            col=col,
        )
    fig.update_yaxes(rangemode="tozero")
    return layout(fig, 380, margin={"l": 60, "r": 20, "t": 50, "b": 90})
