"""The roofline figure: compute ceilings per dtype, the HBM slope, ridge points, and one point per
op (identical ops across layers folded), measured points beside predicted ones."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gpuperf.reports.html_data import ReportItem, achieved_tflops, finite, fold_ops
from gpuperf.reports.html_figures import kind_color, layout

ROOF_DTYPES = ("fp32", "tf32", "bf16", "fp8")  # the ceilings drawn, where the GPU has them


def _ceilings(spec: Any, x_lo: float, x_hi: float, used: set[str]) -> list[go.Scatter]:
    """HBM slope up to the highest ridge, one horizontal ceiling per dtype from its ridge (solid
    for the dtypes the ops use), labelled at its right end; ridge points marked."""
    bw = spec.hbm_bw
    peaks = {d: spec.peak_flops[d] for d in ROOF_DTYPES if d in spec.peak_flops}
    if not peaks or bw <= 0:
        return []
    top = max(peaks.values())
    traces = [
        go.Scatter(
            x=[x_lo, top / bw],
            y=[bw * x_lo / 1e12, top / 1e12],
            mode="lines",
            line={"color": "#0f172a", "width": 2.5},
            name=f"HBM {bw / 1e9:,.0f} GB/s",
            hovertemplate=f"HBM bandwidth {bw / 1e9:,.0f} GB/s<extra></extra>",
        )
    ]
    rx, ry, rtext, labels = [], [], [], []
    for dtype, peak in sorted(peaks.items(), key=lambda kv: kv[1]):
        ridge = peak / bw
        solid = dtype in used or (dtype == "bf16" and "fp16" in used)
        traces.append(
            go.Scatter(
                x=[ridge, x_hi],
                y=[peak / 1e12, peak / 1e12],
                mode="lines",
                line={
                    "color": "#0f172a" if solid else "#94a3b8",
                    "width": 2.5 if solid else 1.5,
                    "dash": "solid" if solid else "dash",
                },
                name=f"{dtype} {peak / 1e12:,.0f} TFLOP/s",
                hovertemplate=f"{dtype} dense peak {peak / 1e12:,.1f} TFLOP/s<extra></extra>",
            )
        )
        rx.append(ridge)
        ry.append(peak / 1e12)
        rtext.append(f"{ridge:,.0f}")
        labels.append(f"{dtype} {peak / 1e12:,.0f} TFLOP/s")
    traces.append(
        go.Scatter(
            x=rx,
            y=ry,
            mode="markers+text",
            marker={"symbol": "circle", "size": 9, "color": "#0f172a"},
            text=rtext,
            textposition="bottom right",
            textfont={"size": 10.5, "color": "#475569"},
            name="ridge points (FLOP/B)",
            hovertemplate="ridge %{x:,.0f} FLOP/byte<br>%{y:,.0f} TFLOP/s<extra></extra>",
        )
    )
    traces.append(
        go.Scatter(
            x=[x_hi] * len(ry),
            y=ry,
            mode="text",
            text=labels,
            textposition="top left",
            textfont={"size": 11, "color": "#334155"},
            showlegend=False,
            hoverinfo="skip",
        )
    )
    return traces


def _sizes(share: pd.Series) -> np.ndarray:
    s = share.fillna(0).to_numpy(dtype=float)
    top = s.max() if s.size and s.max() > 0 else 1.0
    return 7 + 36 * np.sqrt(np.clip(s, 0, None) / top)


_HOVER = (
    "<b>%{customdata[0]}</b> ×%{customdata[1]}<br>%{customdata[2]}<br>"
    "%{customdata[3]} · bound: %{customdata[6]}<br>"
    "FLOPs %{customdata[4]} · bytes %{customdata[5]}<br>"
    "intensity %{x:,.3g} FLOP/B<br>"
    "%{customdata[7]} %{customdata[8]} ms · %{y:,.3g} TFLOP/s<extra></extra>"
)


def _custom(f: pd.DataFrame, which: str, time: pd.Series) -> np.ndarray:
    return np.column_stack(
        [
            f["name"],
            f["count"],
            f["shape"],
            f["kind"],
            [_si(v, "FLOP") for v in f["flops"]],
            [_si(v, "B") for v in f["bytes"]],
            f.get("bound", pd.Series([""] * len(f))).replace("", "–"),
            [which] * len(f),
            [f"{v:,.4g}" for v in time],
        ]
    )


def _si(value: float, unit: str) -> str:
    for p, div in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= div:
            return f"{value / div:,.3g} {p}{unit}"
    return f"{value:,.3g} {unit}"


DTYPE_COLORS = {"fp64": "#0f172a", "fp32": "#64748b", "tf32": "#0ea5e9", "bf16": "#2563eb",
                "fp16": "#9333ea", "fp8": "#f43f5e", "int8": "#f59e0b"}  # fmt: skip


def _groups(f: pd.DataFrame) -> tuple[pd.Series, dict[str, str]]:
    """What colours the points: the op kind, or kind + dtype for a one-kind sweep over dtypes
    (a GEMM sweep in bf16, fp8 and fp32 sits under three different ceilings)."""
    if f["kind"].nunique() == 1 and f["dtype"].nunique() > 1:
        groups = f["kind"] + " " + f["dtype"]
        return groups, {g: DTYPE_COLORS.get(g.split(" ")[-1], kind_color(g)) for g in groups}
    return f["kind"], {k: kind_color(k) for k in f["kind"]}


def _points(item: ReportItem, folded: pd.DataFrame) -> tuple[list[go.Scatter], list[str]]:
    """Predicted points per kind, measured points beside them, joined by a line."""
    traces: list[go.Scatter] = []
    notes: list[str] = []
    drawable = (folded["flops"] > 0) & (folded["intensity"] > 0)
    skipped = folded[~drawable]
    if len(skipped):
        t = skipped["time_ms"].sum() if item.has_predicted else skipped["measured_ms"].sum()
        kinds = ", ".join(sorted(set(skipped["kind"])))
        notes.append(
            f"{int(skipped['count'].sum())} ops with no arithmetic ({kinds}) have no place on a "
            f"FLOP/s axis and are left off: {t:,.3g} ms, pure data movement."
        )
    f = folded[drawable]
    main_col = "time_ms" if item.has_predicted else "measured_ms"
    share = f["share"] if "share" in f and f["share"].notna().any() else f[main_col]
    sizes = _sizes(share)
    main_y = achieved_tflops(f["flops"], f[main_col])
    label = "predicted" if main_col == "time_ms" else "measured"
    groups, colors = _groups(f)
    for kind in dict.fromkeys(groups):
        sel = (groups == kind).to_numpy()
        traces.append(
            go.Scatter(
                x=f["intensity"][sel],
                y=main_y[sel],
                mode="markers",
                name=kind,
                legendgroup=kind,
                marker={
                    "size": sizes[sel],
                    "color": colors[kind],
                    "opacity": 0.82,
                    "line": {"width": 1, "color": "white"},
                },
                customdata=_custom(f[sel], label, f[main_col][sel]),
                hovertemplate=_HOVER,
            )
        )
    if item.has_predicted and item.has_measured:
        m_y = achieved_tflops(f["flops"], f["measured_ms"])
        ok = m_y.notna().to_numpy() & main_y.notna().to_numpy()
        xs, ys = [], []
        for x, y0, y1 in zip(f["intensity"][ok], main_y[ok], m_y[ok], strict=True):
            xs += [x, x, None]
            ys += [y0, y1, None]
        traces.append(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                line={"color": "#0f172a", "width": 1.2},
                name="predicted → measured",
                hoverinfo="skip",
            )
        )
        traces.append(
            go.Scatter(
                x=f["intensity"][ok],
                y=m_y[ok],
                mode="markers",
                name="measured",
                marker={
                    "symbol": "diamond",
                    "size": 11,
                    "color": [colors[k] for k in groups[ok]],
                    "line": {"width": 1.5, "color": "#0f172a"},
                },
                customdata=_custom(f[ok], "measured", f["measured_ms"][ok]),
                hovertemplate=_HOVER,
            )
        )
    return traces, notes


def roofline_figure(items: list[ReportItem]) -> tuple[go.Figure | None, list[str]]:
    """Log-log roofline: ceilings per dtype, HBM slope, ridges, one point per folded op."""
    folded = [fold_ops(it.table) for it in items]
    xs = np.concatenate([finite(f["intensity"][f["intensity"] > 0]) for f in folded] or [[]])
    if xs.size == 0:
        return None, ["no op does arithmetic: nothing to put on a roofline"]
    ridges = [
        it.spec.peak_flops[d] / it.spec.hbm_bw
        for it in items
        if it.spec is not None
        for d in ROOF_DTYPES
        if d in it.spec.peak_flops
    ]
    x_lo = 10 ** math.floor(math.log10(xs.min() / 2))
    x_hi = 10 ** math.ceil(math.log10(max([xs.max(), *ridges]) * 3))
    fig = go.Figure()
    groups: list[int] = []
    notes: list[str] = []
    for it, f in zip(items, folded, strict=True):
        start = len(fig.data)
        used = set(f.loc[f["flops"] > 0, "dtype"].astype(str))
        if it.spec is not None:
            fig.add_traces(_ceilings(it.spec, x_lo, x_hi, used))
        points, more = _points(it, f)
        fig.add_traces(points)
        prefix = f"{it.label}: " if len(items) > 1 else ""
        notes += [prefix + n for n in more + it.notes]
        groups.append(len(fig.data) - start)
    layout(
        fig,
        600,
        xaxis={
            "type": "log",
            "title": "arithmetic intensity (FLOP/byte)",
            "range": [math.log10(x_lo), math.log10(x_hi)],
            "showgrid": True,
            "dtick": 1,
            "tickformat": ",~g",
        },
        yaxis={
            "type": "log",
            "title": "achieved TFLOP/s (FLOPs ÷ time)",
            "exponentformat": "none",
            "showgrid": True,
            "dtick": 1,
            "tickformat": ",~g",
        },
        legend={"itemsizing": "constant", "bgcolor": "rgba(255,255,255,0.85)"},
    )
    if len(items) > 1:
        _gpu_buttons(fig, items, groups)
    return fig, notes


def _gpu_buttons(fig: go.Figure, items: list[ReportItem], groups: list[int]) -> None:
    """One roofline per GPU in one figure, switched by buttons; the first shown."""
    masks = []
    for i in range(len(items)):
        masks.append([j == i for j, n in enumerate(groups) for _ in range(n)])
    for trace, visible in zip(fig.data, masks[0], strict=True):
        trace.visible = visible
    fig.update_layout(
        updatemenus=[
            {
                "type": "buttons",
                "direction": "right",
                "x": 0,
                "y": 1.1,
                "xanchor": "left",
                "showactive": True,
                "buttons": [
                    {"label": it.label, "method": "update", "args": [{"visible": m}]}
                    for it, m in zip(items, masks, strict=True)
                ],
            }
        ],
        margin={"t": 70},
    )
