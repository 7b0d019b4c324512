"""`gpuperf search MODEL --system S --gpus N`: rank parallel plans by predicted step time."""

from __future__ import annotations

from typing import Any

import click

from gpuperf.cli.common import SIZE, output_options
from gpuperf.cli.ops_grammar import dtype_option
from gpuperf.cli.plan_opts import PLAN_OPTIONS

# predict's options that a search holds over every plan to which each applies (api.search).
HELD = ("grad_dtype", "optimizer", "dp_overlap", "tp_overlap", "moe_dispatcher", "ep_overlap",
        "moe_imbalance")  # fmt: skip

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


def _held_options(func: Any) -> Any:
    for key in reversed(HELD):
        func = PLAN_OPTIONS[key](func)
    return func


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
@click.option("--impl", type=click.Choice(["fused", "eager", "compile"]), default="fused",
              show_default=True,
              help="fused (Megatron / vLLM kernels), eager PyTorch, or compile (training: "
              "torch.compile'd layers in PyTorch's DDP/FSDP2 and pipelines, as torchtitan "
              "runs them; recomputation none, op or full).")  # fmt: skip
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
@dtype_option()
@click.option("--attn", type=click.Choice(["flash", "math"]), default="flash", show_default=True,
              help="flash: one fused attention kernel; math: scores materialized, softmax, "
              "then P·V.")  # fmt: skip
@_held_options
@output_options
def search(model: str, system: str, gpus: int, mode: str, impl: str, global_batch: int | None,
           seq: int | None, batch: int | None, ctx: int | None, top: int, fmt: str,
           **held: Any) -> None:  # fmt: skip
    """Enumerate tp, pp, dp, ep, micro-batch, ZeRO stage and recomputation for MODEL on --gpus
    GPUs of --system; drop plans that do not fit; rank by step time; say why the best wins.
    Each plan is costed by the same engine as `gpuperf predict` (its time there is its time here).
    --dtype, --attn, --grad-dtype, --optimizer, --dp-overlap, --tp-overlap and the MoE options
    hold over every plan that has what each needs (--tp-overlap tp > 1, the MoE options
    ep > 1); plans of an ep below --moe-imbalance are not searched.

    Example: gpuperf search llama2-70b --system dgx-h100 --gpus 64 --global-batch 1024 --seq 4096

    Example: gpuperf search qwen3-30b-a3b --system dgx-h100 --gpus 16 --dtype fp8
    --moe-dispatcher hybridep --ep-overlap
    """
    from gpuperf import api

    res = api.search(model, system=system, gpus=gpus, mode=mode, global_batch=global_batch,
                     seq=seq, batch=batch, ctx=ctx, top=top, impl=impl, **held)  # fmt: skip
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
    record = res.best.extra.get("track_record") if res.best is not None else None
    if record:  # how sure the best plan's prediction is (gpuperf.step.track_record)
        from gpuperf.reports.tables import accuracy_text

        console.print(accuracy_text(record))
