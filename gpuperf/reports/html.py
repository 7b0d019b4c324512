"""One self-contained, offline HTML report of a prediction (or several GPUs, or measurements).

>>> from gpuperf import api
>>> from gpuperf.reports.html import write_report
>>> p = api.predict("llama2-7b", gpu="h100", seq=2048)
>>> write_report(p, "report.html")                                  # doctest: +SKIP
>>> several = [api.predict("llama2-7b", gpu=g) for g in ("h100", "a100")]  # doctest: +SKIP
>>> write_report(several, "compare.html")                          # doctest: +SKIP

The page inlines plotly.js once and makes no network request (no CDN, fonts, MathJax or map
tiles), so it opens from disk or an e-mail attachment in any current browser. plotly is imported
only here, lazily, never on the predict path.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as _dt
import os
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

from gpuperf import __version__
from gpuperf.errors import InputError
from gpuperf.fileio import check_writable, write_text
from gpuperf.reports.html_data import ReportItem, join_measured, spec_for

# plotly.js config: no logo link, no MathJax typesetting, no topojson fetch (geo maps).
PLOTLY_CONFIG: dict[str, Any] = {
    "displaylogo": False,
    "responsive": True,
    "typesetMath": False,
    "topojsonURL": "",
    "modeBarButtonsToRemove": ["lasso2d", "select2d"],
    "toImageButtonOptions": {"format": "png", "scale": 2},
}


def write_report(
    results: Any,
    path: str | os.PathLike[str],
    *,
    gpus: Any = None,
    measured: Any = None,
) -> Path:
    """Write the report to `path` and return it.

    results: a Prediction (or a list, one per GPU), or ReportItems (html_data.load_saved).
    gpus: the GpuSpec (or profile name) of each result, when result.gpu cannot be loaded by name.
    measured: measurements to draw beside the predictions (a results file path or dict, a
    DataFrame with name and measured_ms), one per result or one for all.
    """
    if Path(path).is_dir():
        raise InputError(f"{path} is a directory; give a file name like report.html")
    check_writable(path)
    return write_text(path, render_html(results, gpus=gpus, measured=measured))


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _spread(value: Any, n: int, what: str) -> list[Any]:
    """One value for all results, or one per result."""
    if value is None:
        return [None] * n
    values = _as_list(value)
    if len(values) == 1:
        return values * n
    if len(values) != n:
        raise InputError(f"{what}: got {len(values)} for {n} results")
    return values


def items_of(results: Any, gpus: Any = None, measured: Any = None) -> list[ReportItem]:
    """ReportItems from Predictions (or ReportItems), with specs and measurements attached."""
    raw = _as_list(results)
    if not raw:
        raise InputError("nothing to report: no results")
    items: list[ReportItem] = []
    for res, gpu, meas in zip(
        raw, _spread(gpus, len(raw), "gpus"), _spread(measured, len(raw), "measured"), strict=True
    ):
        if isinstance(res, ReportItem):
            item = res
        else:
            spec, notes = spec_for(res, gpu)
            label = spec.name if spec is not None else (res.gpu or "GPU")
            item = ReportItem(res, spec, label, dict(getattr(res, "env", None) or {}), notes)
        if meas is not None:  # on a copy: the caller's result keeps its table
            item = dataclasses.replace(item, result=copy.copy(item.result))
            item.result.table = join_measured(item.table, meas)
        items.append(item)
    _unique_labels(items)
    return items


def is_plan_item(item: ReportItem) -> bool:
    return "plan" in (getattr(item.result, "extra", None) or {})


def _unique_labels(items: list[ReportItem]) -> None:
    seen: dict[str, int] = {}
    for it in items:
        n = seen[it.label] = seen.get(it.label, 0) + 1
        if n > 1:
            it.label = f"{it.label} ({n})"


def _figure_html(fig: Any, name: str) -> str:
    import plotly.io as pio

    return (
        '<div class="figure">'
        + pio.to_html(
            fig,
            full_html=False,
            include_plotlyjs=False,
            include_mathjax=False,
            config=PLOTLY_CONFIG,
            div_id=f"fig-{name}",
        )
        + "</div>"
    )


def _notes(notes: Sequence[str]) -> str:
    return "".join(f'<p class="note">{escape(n)}</p>' for n in notes)


def _section(sid: str, title: str, lede: str, body: str) -> str:
    lede_html = f'<p class="lede">{lede}</p>' if lede else ""
    return f'<section id="{sid}"><h2>{escape(title)}</h2>{lede_html}{body}</section>'


def _title(items: list[ReportItem]) -> tuple[str, str]:
    from gpuperf.reports.tables import title

    first = items[0].result
    parts = title(first).split(" · ")
    if len(items) > 1:
        parts = [p for p in parts if not p.startswith("on ")]
        parts.append("on " + ", ".join(it.label for it in items))
    elif items[0].spec is not None:
        parts = [p for p in parts if not p.startswith("on ")] + [f"on {items[0].spec.display_name}"]
    if items[0].has_measured:
        parts.append("measured")
    head = parts[0] or "gpuperf report"
    return head, " · ".join(parts[1:])


def render_html(results: Any, *, gpus: Any = None, measured: Any = None) -> str:
    """The report as one HTML string (see write_report for the arguments)."""
    from plotly.offline import get_plotlyjs

    from gpuperf.reports import html_figures as figs
    from gpuperf.reports import html_sections as sec
    from gpuperf.reports.html_assets import CSS, SORT_JS
    from gpuperf.reports.html_roofline import roofline_figure

    items = items_of(results, gpus, measured)
    head, sub = _title(items)
    sections: list[tuple[str, str, str]] = []  # (id, nav label, html)

    with_ops = [it for it in items if len(it.table)]
    roof, roof_notes = roofline_figure(with_ops) if with_ops else (None, [])
    if roof is not None:
        lede = (
            "Each point is one op (identical ops of every layer folded into one), at its "
            "arithmetic intensity and the FLOP/s it achieves; the size is its share of the "
            "time. Points under the sloped HBM line are memory-bound, points reaching a flat "
            "ceiling are compute-bound; the gap below the roof is lost to launches, tails and "
            "quantization."
        )
        if any(it.has_measured and it.has_predicted for it in with_ops):
            lede += " Diamonds are measured, joined to their prediction by a line."
        if len(with_ops) > 1:
            lede += " The buttons switch GPU."
        body = _figure_html(roof, "roofline") + _notes(roof_notes)
        sections.append(("roofline", "Roofline", _section("roofline", "Roofline", lede, body)))
    elif roof_notes:
        body = _notes(roof_notes)
        sections.append(("roofline", "Roofline", _section("roofline", "Roofline", "", body)))

    time_body = ""
    step = figs.step_figure(items)
    if step is not None:
        what = (
            "compute, exposed communication, pipeline bubble"
            if any(is_plan_item(it) for it in items)
            else "kernels by what bounds them, and time not in kernels"
        )
        time_body += f"<h3>The step: {what}</h3>" + _figure_html(step, "step")
    if with_ops:
        kind = figs.kind_figure(with_ops)
        pos = figs.position_figure(with_ops[0])
        pos_title = "By position in a layer (all layers added up)"
        if len(with_ops) > 1:
            pos_title += f", {with_ops[0].label}"
        time_body += (
            f'<div class="grid2"><div><h3>By op kind</h3>{_figure_html(kind, "kind")}</div>'
            f"<div><h3>{escape(pos_title)}</h3>{_figure_html(pos, 'position')}</div></div>"
        )
    if time_body:
        section = _section("time", "Where the time goes", "", time_body)
        sections.append(("time", "Where the time goes", section))

    mem = figs.memory_figure(items)
    if mem is not None:
        lede = (
            "Per GPU: weights, KV cache, activations, and for training gradients and "
            "optimizer states, against the GPU's memory."
        )
        sections.append(
            ("memory", "Memory", _section("memory", "Memory", lede, _figure_html(mem, "memory")))
        )

    cmp_fig = figs.compare_figure(items)
    if cmp_fig is not None:
        sections.append(
            (
                "compare",
                "GPUs compared",
                _section(
                    "compare",
                    "GPUs compared",
                    "The same workload on each GPU.",
                    _figure_html(cmp_fig, "compare"),
                ),
            )
        )

    lede = (
        "Click a column header to sort. Identical ops of every layer share a row (count); "
        "the per-kernel table is below it."
    )
    if with_ops:
        sections.append(("ops", "Ops", _section("ops", "Ops", lede, sec.tables_html(with_ops))))

    scen = "".join(
        (f"<h3>{escape(it.label)}</h3>" if len(items) > 1 else "") + sec.scenario_html(it)
        for it in items[:1]
        if it.result.scenario or it.result.model
    )
    scen += "<h3>Assumptions and units</h3>" + sec.assumptions_html(items)
    sections.append(
        (
            "scenario",
            "Scenario & assumptions",
            _section("scenario", "Scenario, assumptions and units", "", scen),
        )
    )

    hw = "".join(
        (f"<h3>{escape(it.spec.display_name if it.spec else it.label)}</h3>")
        + sec.hardware_html(it)
        for it in items
    )
    sections.append(
        (
            "hardware",
            "Hardware",
            _section(
                "hardware", "Hardware profile", "Every number the model used, with its source.", hw
            ),
        )
    )

    env = sec.env_html(items)
    if env:
        sections.append(
            (
                "env",
                "Environment",
                _section(
                    "env",
                    "Measurement environment",
                    "Where and with what the measurements ran.",
                    env,
                ),
            )
        )

    nav = "".join(f'<a href="#{sid}">{escape(label)}</a>' for sid, label, _ in sections)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(head)} — {escape(sub)} · gpuperf</title>
<style>{CSS}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head>
<body>
<header class="hero"><div class="wrap">
<div class="eyebrow">gpuperf · roofline report</div>
<h1>{escape(head)}</h1>
<div class="sub">{escape(sub)}</div>
{sec.headline_cards(items)}
{sec.warnings_html(items)}
</div></header>
<nav class="toc"><div class="wrap">{nav}</div></nav>
<main class="wrap">
{"".join(html for _, _, html in sections)}
</main>
<footer>gpuperf {escape(__version__)} · {stamp} · self-contained: no network needed</footer>
<script>{SORT_JS}</script>
</body>
</html>
"""
