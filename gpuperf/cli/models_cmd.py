"""`gpuperf models`: list the presets and show one model (a preset or a HF config.json). rich and
the model loader load when a command runs, not when `gpuperf --help` lists the commands."""

from __future__ import annotations

import csv
import json
import sys
from typing import TYPE_CHECKING, Any

import click

from gpuperf.cli.common import output_options
from gpuperf.reports.console import console as make_console

if TYPE_CHECKING:
    from gpuperf.workloads.config import ModelConfig

Row = dict[str, Any]

# key -> header with units
LIST_COLUMNS = {
    "name": "model",
    "family": "family",
    "params_b": "params (B)",
    "active_params_b": "active (B)",
    "layers": "layers",
    "hidden": "hidden",
    "heads": "heads/kv",
    "vocab": "vocab",
    "context": "context (tokens)",
}


@click.group()
def models() -> None:
    """Model presets and Hugging Face config.json files.

    \b
    Examples:
      gpuperf models list
      gpuperf models show llama3-70b
      gpuperf models show ./config.json --format json
    """


def _list_row(cfg: ModelConfig) -> Row:
    return {
        "name": cfg.name,
        "family": cfg.family,
        "params_b": round(cfg.param_count() / 1e9, 3),
        "active_params_b": round(cfg.active_param_count() / 1e9, 3),
        "layers": cfg.layers,
        "hidden": cfg.hidden,
        "heads": f"{cfg.heads}/{cfg.kv_heads}",
        "vocab": cfg.vocab,
        "context": cfg.max_position_embeddings,
    }


@models.command("list")
@output_options
def list_cmd(fmt: str) -> None:
    """List the bundled model presets with their sizes.

    \b
    Examples:
      gpuperf models list
      gpuperf models list --format csv > models.csv
    """
    from gpuperf.workloads.config import load_model, preset_names

    rows = [_list_row(load_model(n)) for n in preset_names()]
    if fmt == "json":
        click.echo(json.dumps({"models": rows}, indent=2))
    elif fmt == "csv":
        _csv(rows)
    else:
        from rich import box
        from rich.table import Table

        table = Table(title="Model presets", box=box.SIMPLE_HEAVY)
        for key, header in LIST_COLUMNS.items():
            table.add_column(header, justify="left" if key in ("name", "family") else "right")
        for r in rows:
            table.add_row(*(_fmt(r[k]) for k in LIST_COLUMNS))
        # Never wrap a model name or a number: wider than a narrow terminal beats unreadable.
        make_console(width=max(make_console().width, 120)).print(table)


@models.command("show")
@click.argument("model")
@output_options
def show_cmd(model: str, fmt: str) -> None:
    """Every field of a model and its parameter count by part.

    MODEL is a preset name (see `gpuperf models list`) or the path of a Hugging Face config.json.

    \b
    Examples:
      gpuperf models show mixtral-8x7b
      gpuperf models show ~/models/my-llama/config.json --format json
    """
    from gpuperf.workloads.config import load_model

    cfg = load_model(model)
    fields = cfg.as_dict()
    parts = cfg.param_breakdown()
    totals = {"total": cfg.param_count(), "active": cfg.active_param_count()}
    if fmt == "json":
        click.echo(json.dumps({"config": fields, "params": {**parts, **totals}}, indent=2))
        return
    if fmt == "csv":
        rows = [{"section": "config", "key": k, "value": v} for k, v in fields.items()]
        rows += [
            {"section": "params", "key": k, "value": v} for k, v in {**parts, **totals}.items()
        ]
        _csv(rows)
        return
    from rich import box
    from rich.table import Table

    console = make_console()
    t = Table(title=f"{cfg.name} ({cfg.source or 'preset'})", box=box.SIMPLE_HEAVY)
    t.add_column("field")
    t.add_column("value", justify="right")
    for k, v in fields.items():
        t.add_row(k, _fmt(v))
    console.print(t)
    p = Table(title="Parameters", box=box.SIMPLE_HEAVY)
    p.add_column("part")
    p.add_column("params", justify="right")
    p.add_column("params (B)", justify="right")
    for k, v in {**parts, **totals}.items():
        p.add_row(k, f"{v:,}", f"{v / 1e9:.3f}")
    console.print(p)


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def _csv(rows: list[Row]) -> None:
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
