"""`gpuperf models`: list the presets and show one model (a preset or a HF config.json). rich and
the model loader load when a command runs, not when `gpuperf --help` lists the commands."""

from __future__ import annotations

import csv
import dataclasses
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
    "mlp": "MLP (activation)",
    "vocab": "vocab",
    "context": "context (tokens)",
    "features": "features",
}
# `models show` lists these always; every other field only when it differs from its default.
CORE_FIELDS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
               "max_position_embeddings", "tie_word_embeddings", "mlp", "hidden_act", "norm",
               "positions", "rope_theta")  # fmt: skip
UNITS = {"max_position_embeddings": "tokens", "sliding_window": "tokens",
         "attn_softcap": "logit cap", "final_softcap": "logit cap",
         "rotary_frac": "of head_dim"}  # fmt: skip


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
        "mlp": f"{cfg.mlp} ({cfg.hidden_act})",
        "vocab": cfg.vocab,
        "context": cfg.max_position_embeddings,
        "features": _features(cfg),
    }


def _features(cfg: ModelConfig) -> str:
    """What sets the model apart from a plain MHA Transformer, in a few short tags."""
    tags = []
    if cfg.is_mla:
        tags.append("MLA")
    elif cfg.kv_heads < cfg.heads:
        tags.append("MQA" if cfg.kv_heads == 1 else "GQA")
    if cfg.is_moe:
        shared = " +shared" if cfg.shared_intermediate_size else ""
        tags.append(f"MoE top-{cfg.num_experts_per_tok}/{cfg.num_experts}{shared}")
    if cfg.sliding_layers:
        n = len(cfg.sliding_layers)
        tags.append(f"window {cfg.sliding_window:,} on {n}/{cfg.layers} layers")
    names = {"qk_norm": "qk-norm", "parallel_residual": "parallel", "sandwich_norm": "sandwich"}
    tags += [tag for attr, tag in names.items() if getattr(cfg, attr)]
    if cfg.attn_softcap:
        tags.append(f"softcap {cfg.attn_softcap:g}")
    if cfg.final_softcap:
        tags.append(f"logit softcap {cfg.final_softcap:g}")
    return ", ".join(tags) or "-"


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
        cells = [[_fmt(r[k]) for k in LIST_COLUMNS] for r in rows]
        columns = zip(LIST_COLUMNS.values(), zip(*cells, strict=True), strict=True)
        widths = [max(len(c) for c in (header, *col)) for header, col in columns]
        for (key, header), width in zip(LIST_COLUMNS.items(), widths, strict=True):
            wraps = key == "features"  # prose; every other cell is a name or a number
            left = key in ("name", "family", "mlp", "features")
            table.add_column(header, justify="left" if left else "right", no_wrap=not wraps,
                             min_width=20 if wraps else width)  # fmt: skip
        for row in cells:
            table.add_row(*row)
        # Never wrap a model name or a number: wider than a narrow terminal beats unreadable.
        need = sum(widths[:-1]) + 20 + 3 * len(widths)
        make_console(width=max(make_console().width, 120, need)).print(table)


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
    features = _features(cfg)
    t = Table(title=f"{cfg.name} ({cfg.source or 'preset'})", box=box.SIMPLE_HEAVY,
              caption=None if features == "-" else features)  # fmt: skip
    t.add_column("field")
    t.add_column("value", justify="right")
    for label, value in _show_rows(cfg, fields):
        t.add_row(label, value)
    console.print(t)
    p = Table(title="Parameters", box=box.SIMPLE_HEAVY)
    p.add_column("part")
    p.add_column("params", justify="right")
    p.add_column("params (B)", justify="right")
    for k, v in {**parts, **totals}.items():
        if v or k in totals:  # a dense model has no router, shared expert, ...
            p.add_row(k, f"{v:,}", f"{v / 1e9:.3f}")
    console.print(p)


def _show_rows(cfg: ModelConfig, fields: dict[str, Any]) -> list[tuple[str, str]]:
    """(label with units, value) for the core fields and every other field that is set;
    `fields` is cfg.as_dict()."""
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    rows = []
    for k, v in fields.items():
        if k in ("name", "source") or (k not in CORE_FIELDS and v == defaults[k]):
            continue
        value = _layers(v) if isinstance(v, tuple) else _fmt(v)
        rows.append((f"{k} ({UNITS[k]})" if k in UNITS else k, value))
    return rows


def _layers(indices: tuple[int, ...]) -> str:
    """Layer indices as runs: (0, 1, 2, 4, 5) -> "0-2, 4-5 (5 layers)"."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = [f"{a}-{b}" if b > a else f"{a}" for a, b in runs]
    if len(text) > 6:
        text = [*text[:5], "…"]
    return f"{', '.join(text)} ({len(indices)} layers)"


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{int(v):,}" if v.is_integer() and abs(v) < 1e15 else f"{v:g}"
    return str(v)


def _csv(rows: list[Row]) -> None:
    writer = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
