"""The HTML page of a serving plan: the Pareto frontier of tokens/s per GPU against tokens/s
per user over every split and rate, the SLO's best split, offline (plotly.js inlined)."""

from __future__ import annotations

import datetime as _dt
import os
from html import escape
from pathlib import Path
from typing import Any

from gpuperf import __version__
from gpuperf.fileio import check_writable, write_text


def frontier_figure(plan: Any) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for split in plan.splits:
        if not split.points:
            continue
        fig.add_trace(go.Scatter(
            x=[p["tokens_per_s_per_user"] for p in split.points],
            y=[p["tokens_per_s_per_gpu"] for p in split.points],
            mode="markers", name=f"tp{split.tp} x {split.replicas}",
            marker={"symbol": ["circle" if p["meets_slo"] else "circle-open"
                               for p in split.points], "size": 9},
            hovertemplate="%{x:.1f} tok/s per user<br>%{y:.0f} tok/s per GPU"
                          "<extra>%{fullData.name}</extra>",
        ))  # fmt: skip
    front = sorted(plan.frontier, key=lambda p: p["tokens_per_s_per_user"])
    fig.add_trace(go.Scatter(x=[p["tokens_per_s_per_user"] for p in front],
                             y=[p["tokens_per_s_per_gpu"] for p in front], mode="lines",
                             name="Pareto frontier", line={"dash": "dot"}))  # fmt: skip
    fig.update_layout(xaxis_title="output tokens/s per user",
                      yaxis_title="output tokens/s per GPU", template="plotly_white",
                      height=520)  # fmt: skip
    return fig


def render_serve_html(plan: Any) -> str:
    import plotly.io as pio
    from plotly.offline import get_plotlyjs

    from gpuperf.reports.html import PLOTLY_CONFIG
    from gpuperf.reports.html_assets import CSS

    fig = pio.to_html(frontier_figure(plan), full_html=False, include_plotlyjs=False,
                      include_mathjax=False, config=PLOTLY_CONFIG,
                      div_id="fig-frontier")  # fmt: skip
    slo = ", ".join(f"{k.replace('_ms', '')} <= {v:g} ms" for k, v in plan.slo.items())
    rows = []
    for s in plan.splits:
        best = s is plan.best
        cells = [f"tp{s.tp} x {s.replicas}", f"{s.rate:.2f}"]
        if s.summary:
            cells += [f"{s.summary['ttft_p90_ms']:.0f}", f"{s.summary['tpot_p90_ms']:.1f}"]
        else:
            cells += ["-", "-"]
        cells.append(escape(s.why))
        tr = "".join(f"<td>{escape(c) if i < 4 else c}</td>" for i, c in enumerate(cells))
        rows.append(f'<tr class="{"best" if best else ""}">{tr}</tr>')
    table = ("<table><thead><tr><th>split</th><th>requests/s in SLO</th><th>TTFT p90 ms</th>"
             "<th>TPOT p90 ms</th><th>note</th></tr></thead><tbody>" + "".join(rows)
             + "</tbody></table>")  # fmt: skip
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    best = (f"best: tp{plan.best.tp} x {plan.best.replicas} replicas, {plan.best.rate:.2f} "
            "requests/s" if plan.best else "no split meets the SLO")  # fmt: skip
    title = escape(f"{plan.model} on {plan.gpus} x {plan.gpu}, {plan.engine}")
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{CSS}</style><script>{get_plotlyjs()}</script></head><body><main>"
        f"<h1>{title}</h1><p class='lede'>SLO: {escape(slo)}; {escape(best)}. Filled markers "
        "meet the SLO. Simulated by gpuperf serve (continuous batching, each step from the step "
        f"engine).</p><section id='frontier'><h2>Tokens/s per GPU against tokens/s per user</h2>"
        f"<div class='figure'>{fig}</div></section><section id='splits'><h2>Splits</h2>{table}"
        f"</section><footer>gpuperf {escape(__version__)} · {when}</footer></main></body></html>"
    )


def write_serve_report(plan: Any, path: str | os.PathLike[str]) -> Path:
    check_writable(path)
    return write_text(path, render_serve_html(plan))
