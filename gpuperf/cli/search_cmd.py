"""`gpuperf search MODEL --system S --gpus N`: rank parallel plans by predicted step time."""

from __future__ import annotations

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
@click.option(
    "--global-batch",
    type=SIZE,
    default=None,
    help="Train: sequences over all replicas.  [default: 1024]",
)
@click.option(
    "--seq", type=SIZE, default=None, help="Train, prefill: sequence length.  [default: 4096]"
)
@click.option(
    "--batch",
    type=SIZE,
    default=None,
    help="Prefill, decode: sequences over all replicas.  [default: 1]",
)
@click.option("--ctx", type=SIZE, default=None, help="Decode: KV context.  [default: 4096]")
@click.option("--top", type=SIZE, default="10", show_default=True, help="Plans to show.")
@output_options
def search(model: str, system: str, gpus: int, mode: str, impl: str, global_batch: int | None,
           seq: int | None, batch: int | None, ctx: int | None, top: int,
           fmt: str) -> None:  # fmt: skip
    """Enumerate tp, pp, dp, ep, micro-batch, ZeRO stage and recomputation for MODEL on --gpus
    GPUs of --system; drop plans that do not fit; rank by step time; say why the best wins.
    Each plan is costed by the same engine as `gpuperf predict` (its time there is its time here).

    Example: gpuperf search llama2-70b --system dgx-h100 --gpus 64 --global-batch 1024 --seq 4096
    """
    from gpuperf import api

    res = api.search(model, system=system, gpus=gpus, mode=mode, global_batch=global_batch,
                     seq=seq, batch=batch, ctx=ctx, top=top, impl=impl)  # fmt: skip
    if fmt == "json":
        from gpuperf.reports.tables import render

        render(res, "json")
        return
    rows = [r.summary() for r in res.ranked]
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
        title=f"{res.model} on {gpus} GPUs of {res.system}, {mode}: best plans",
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
