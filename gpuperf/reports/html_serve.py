"""The HTML pages of `gpuperf serve`, offline (plotly.js inlined): a plan's Pareto frontier of
tokens/s per GPU against tokens/s per user over every split and rate with the SLO's best split,
and a run's batch size and KV-cache occupancy over time with its latency distributions."""

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


def _fig(fig: Any, name: str) -> str:
    import plotly.io as pio

    from gpuperf.reports.html import PLOTLY_CONFIG

    return pio.to_html(fig, full_html=False, include_plotlyjs=False, include_mathjax=False,
                       config=PLOTLY_CONFIG, div_id=f"fig-{name}")  # fmt: skip


def _page(title: str, lede: str, body: str, record: dict[str, Any] | None = None) -> str:
    """A whole page; `record`: the simulation's track record (gpuperf.step.track_record), said
    under the lede."""
    from plotly.offline import get_plotlyjs

    from gpuperf.reports.html_assets import CSS
    from gpuperf.step.track_record import line

    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    sure = (f"<p class='accuracy'><b>Accuracy</b>: {escape(line(record))}</p>"
            if record else "")  # fmt: skip
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
        f"<style>{CSS}</style><script>{get_plotlyjs()}</script></head><body><main>"
        f"<h1>{title}</h1><p class='lede'>{lede}</p>{sure}{body}"
        f"<footer>gpuperf {escape(__version__)} · {when}</footer></main></body></html>"
    )


def run_figures(rep: Any) -> tuple[Any, Any]:
    """(batch and KV occupancy over time, TTFT and TPOT distributions) of a serving run."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    sr = rep.result.series
    over = make_subplots(specs=[[{"secondary_y": True}]])
    over.add_trace(go.Scatter(x=sr["t_s"], y=sr["batch"], name="sequences in the step",
                              mode="lines"), secondary_y=False)  # fmt: skip
    over.add_trace(go.Scatter(x=sr["t_s"], y=[100 * k for k in sr["kv"]], name="KV cache used %",
                              mode="lines"), secondary_y=True)  # fmt: skip
    over.update_xaxes(title_text="time (s)")
    over.update_yaxes(title_text="sequences", secondary_y=False)
    over.update_yaxes(title_text="KV cache used (%)", secondary_y=True, range=[0, 100])
    over.update_layout(template="plotly_white", height=420)
    dist = make_subplots(rows=1, cols=2, subplot_titles=("TTFT (ms)", "TPOT (ms)"))
    for col, vals in ((1, rep.result.ttft), (2, rep.result.tpot)):
        xs = sorted(1e3 * v for v in vals)
        ys = [100 * (i + 1) / len(xs) for i in range(len(xs))]
        dist.add_trace(go.Scatter(x=xs, y=ys, mode="lines", showlegend=False), row=1, col=col)
    dist.update_yaxes(title_text="requests (%)", range=[0, 100])
    dist.update_layout(template="plotly_white", height=380)
    return over, dist


def render_run_html(rep: Any) -> str:
    s = rep.summary
    title = escape(f"{rep.model} on {rep.tp} x {rep.gpu}, {rep.engine.name}: {rep.workload}")
    lede = escape(
        f"TTFT p50 {s['ttft_p50_ms']:.1f} ms, TPOT p50 {s['tpot_p50_ms']:.2f} ms, "
        f"{s['output_tokens_per_s']:,.0f} output tok/s ({s['output_tokens_per_s_per_gpu']:,.0f} "
        f"per GPU), mean batch {s['mean_batch']:.1f}, KV cache {s['kv_cache_tokens']:,} tokens. "
        "TPOT = (E2E - TTFT) / (output tokens - 1). Simulated by gpuperf serve."
    )
    over, dist = run_figures(rep)
    body = (f"<section id='time'><h2>Batch and KV cache over time</h2><div class='figure'>"
            f"{_fig(over, 'time')}</div></section><section id='latency'><h2>Latency "
            f"distributions</h2><div class='figure'>{_fig(dist, 'latency')}</div>"
            "</section>")  # fmt: skip
    return _page(title, lede, body, rep.track_record)


def write_run_report(rep: Any, path: str | os.PathLike[str]) -> Path:
    check_writable(path)
    return write_text(path, render_run_html(rep))


def render_serve_html(plan: Any) -> str:
    fig = _fig(frontier_figure(plan), "frontier")
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
    best = (f"best: tp{plan.best.tp} x {plan.best.replicas} replicas, {plan.best.rate:.2f} "
            "requests/s" if plan.best else "no split meets the SLO")  # fmt: skip
    title = escape(f"{plan.model} on {plan.gpus} x {plan.gpu}, {plan.engine}")
    lede = (f"SLO: {escape(slo)}; {escape(best)}. Filled markers meet the SLO. Simulated by "
            "gpuperf serve (continuous batching, each step from the step engine).")  # fmt: skip
    body = (f"<section id='frontier'><h2>Tokens/s per GPU against tokens/s per user</h2>"
            f"<div class='figure'>{fig}</div></section><section id='splits'><h2>Splits</h2>"
            f"{table}</section>")  # fmt: skip
    return _page(title, lede, body, plan.track_record)


def write_serve_report(plan: Any, path: str | os.PathLike[str]) -> Path:
    check_writable(path)
    return write_text(path, render_serve_html(plan))
