"""`gpuperf search MODEL --system S --gpus N`: rank parallel plans by predicted step time."""

from __future__ import annotations

import json
from typing import Any

import click

from gpuperf.cli.common import SIZE, output_options

COLUMNS = {
    "label": "plan",
    "step_time_s": "step (s)",
    "tokens_per_s": "tok/s",
    "tflops_per_gpu": "TFLOP/s/GPU",
    "mfu_pct": "MFU %",
    "bubble_pct": "bubble %",
    "comm_pct": "comm %",
    "memory_gib": "GiB/GPU",
}


def _row(r: Any) -> dict[str, Any]:
    b = r.breakdown
    comm = sum(v for k, v in b.items() if k.endswith("_comm"))
    return {
        "label": r.label(),
        "step_time_s": r.step_time,
        "tokens_per_s": r.tokens_per_s,
        "tflops_per_gpu": r.tflops_per_gpu,
        "mfu_pct": 100 * r.mfu,
        "bubble_pct": 100 * b.get("bubble", 0.0) / r.step_time,
        "comm_pct": 100 * comm / r.step_time,
        "memory_gib": r.memory_total / 2**30,
    }


def _cell(key: str, value: Any) -> str:
    if key == "label":
        return value
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


@click.command(
    "search",
    epilog="Example: gpuperf search llama2-70b --system dgx-h100 --gpus 64 --mode train "
    "--global-batch 1024 --seq 4096",
)
@click.argument("model")
@click.option("--system", required=True, help="System profile (dgx-h100) or a .toml.")
@click.option("--gpus", type=SIZE, required=True, help="GPUs to spread the model over.")
@click.option(
    "--mode", type=click.Choice(["train", "prefill", "decode"]), default="train", show_default=True
)
@click.option("--impl", type=click.Choice(["fused", "eager"]), default="fused", show_default=True,
              help="fused (Megatron / vLLM kernels) or eager PyTorch.")  # fmt: skip
@click.option("--global-batch", type=SIZE, default="1024", show_default=True, help="Train: seqs.")
@click.option("--seq", type=SIZE, default="4096", show_default=True, help="Sequence length.")
@click.option("--batch", type=SIZE, default="1", show_default=True,
              help="Inference: sequences over all replicas.")  # fmt: skip
@click.option("--ctx", type=SIZE, default="4096", show_default=True, help="Decode: KV context.")
@click.option("--top", type=SIZE, default="10", show_default=True, help="Plans to show.")
@output_options
def search(model: str, system: str, gpus: int, mode: str, impl: str, global_batch: int, seq: int,
           batch: int, ctx: int, top: int, fmt: str) -> None:  # fmt: skip
    """Enumerate tp, pp, dp, ep, micro-batch, ZeRO stage and recomputation for MODEL on --gpus
    GPUs of --system; drop plans that do not fit; rank by step time; say why the best wins.
    Each plan is costed by the same engine as `gpuperf predict` (its time there is its time here).

    Example: gpuperf search llama2-70b --system dgx-h100 --gpus 64 --global-batch 1024 --seq 4096
    """
    from gpuperf.hardware.loader import load_system
    from gpuperf.step.search import search as run_search
    from gpuperf.workloads.config import load_model

    cfg, sys_spec = load_model(model), load_system(system)
    res = run_search(cfg, sys_spec, gpus, mode=mode, global_batch=global_batch, seq=seq,
                     batch=batch, ctx=ctx, top=top, impl=impl)  # fmt: skip
    rows = [_row(r) for r in res.ranked]
    if fmt == "json":
        out = {
            "model": cfg.name,
            "system": sys_spec.name,
            "gpus": gpus,
            "evaluated": res.evaluated,
            "fitting": res.fitting,
            "plans_per_s": res.plans_per_s,
            "why": res.why,
            "plans": [{**row, **r.to_dict()} for row, r in zip(rows, res.ranked, strict=True)],
        }
        click.echo(json.dumps(out, default=str))
        return
    if fmt == "csv":
        import csv
        import sys

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(COLUMNS.values())
        for row in rows:
            w.writerow(row[k] for k in COLUMNS)
        return
    from rich.table import Table

    from gpuperf.reports.console import table_console

    table = Table(
        caption="comm %: exposed TP/CP/EP/PP/DP communication",
        title=f"{cfg.name} on {gpus} GPUs of {sys_spec.name}, {mode}: best plans",
    )
    for key, header in COLUMNS.items():
        table.add_column(
            header, justify="left" if key == "label" else "right", no_wrap=key == "label"
        )
    for row in rows:
        table.add_row(*(_cell(k, row[k]) for k in COLUMNS))
    console = table_console()
    console.print(table)
    for line in res.why:
        console.print(line, markup=False)
    console.print(
        f"{res.evaluated} plans evaluated, {res.fitting} fit ({res.plans_per_s:,.0f} plans/s)",
        markup=False,
    )
