"""Plan options for `gpuperf predict MODEL` (--tp/--pp/--dp/--ep/--nodes and training knobs) and
`run_plan`, which predicts a ParallelPlan and renders it. The predict command wires these in."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

PLAN_KEYS = ("nodes", "global_batch", "micro_batch", "zero", "recompute", "sequence_parallel",
             "schedule", "virtual_stages", "nvls")  # fmt: skip

plan_cli_options: list[Callable[..., Any]] = [
    click.option("--nodes", type=click.IntRange(min=1), default=None, help="Nodes of --system."),
    click.option("--global-batch", type=click.IntRange(min=1), default=None,
                 help="Train: sequences per step [default: micro-batch × dp]."),
    click.option("--micro-batch", type=click.IntRange(min=1), default=1, show_default=True),
    click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True,
                 help="ZeRO stage (distributed optimizer = 1)."),
    click.option("--recompute", type=click.Choice(["none", "selective", "full"]),
                 default="none", show_default=True),
    click.option("--sequence-parallel/--no-sequence-parallel", default=None,
                 help="Megatron sequence parallelism [default: on when tp > 1, train]."),
    click.option("--schedule", type=click.Choice(["1f1b", "interleaved"]), default="1f1b",
                 show_default=True),
    click.option("--virtual-stages", type=click.IntRange(min=1), default=1, show_default=True,
                 help="Model chunks per stage (interleaved)."),
    click.option("--nvls/--no-nvls", default=False, show_default=True,
                 help="Allow NVLink SHARP collectives."),
]  # fmt: skip


def wants_plan(tp: int, pp: int, dp: int, ep: int, nodes: int | None) -> bool:
    """True when the predict command should call run_plan instead of the single-GPU path."""
    return max(tp, pp, dp, ep) > 1 or nodes is not None


def run_plan(
    model: str, system: str | None, mode: str, *, tp: int, pp: int, dp: int, ep: int,
    batch: int, seq: int, ctx: int, dtype: str, fmt: str, **plan_kw: Any,
) -> None:  # fmt: skip
    """Predict MODEL under a parallel plan and print the result (table, json or csv)."""
    from gpuperf.errors import InputError
    from gpuperf.hardware.loader import load_system
    from gpuperf.perfmodel.parallel import ParallelPlan, predict_plan
    from gpuperf.workloads.config import load_model

    if system is None:
        raise InputError("--tp/--pp/--dp/--ep/--nodes need --system (e.g. dgx-h100)")
    if mode not in ("train", "prefill", "decode"):
        raise InputError(f"parallel plans support train, prefill and decode, not {mode}")
    sp = plan_kw.get("sequence_parallel")
    plan = ParallelPlan(
        mode=mode, tp=tp, pp=pp, dp=dp, ep=ep, seq=seq, ctx=ctx, dtype=dtype,  # type: ignore[arg-type]
        micro_batch=plan_kw.get("micro_batch") or 1, global_batch=plan_kw.get("global_batch"),
        batch=batch, zero=plan_kw.get("zero") or 0,
        recompute=plan_kw.get("recompute") or "none",
        sequence_parallel=(tp > 1 and mode == "train") if sp is None else sp,
        schedule=plan_kw.get("schedule") or "1f1b", v=plan_kw.get("virtual_stages") or 1,
        nvls=bool(plan_kw.get("nvls")),
    )  # fmt: skip
    result = predict_plan(load_model(model), plan, load_system(system), plan_kw.get("nodes"))
    render_plan(result, fmt)


def render_plan(result: Any, fmt: str) -> None:
    d = result.to_dict()
    if fmt == "json":
        d["total_ms"] = result.step_time * 1e3
        d["ops"] = [{"name": k, "kind": "plan", "time_ms": v * 1e3}
                    for k, v in result.breakdown.items()]  # fmt: skip
        click.echo(json.dumps(d, default=str))
        return
    rows = [(k, v * 1e3, 100 * v / result.step_time) for k, v in result.breakdown.items()]
    if fmt == "csv":
        click.echo("part,time (ms),share (%)")
        for k, ms, pct in rows:
            click.echo(f"{k},{ms},{pct}")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{result.model}, {result.plan.label()} on {result.nodes} node(s) of "
                  f"{result.system} ({result.plan.mode})")  # fmt: skip
    for h in ("part", "time (ms)", "share (%)"):
        table.add_column(h, justify="left" if h == "part" else "right")
    for k, ms, pct in rows:
        table.add_row(k, f"{ms:,.3f}", f"{pct:.1f}")
    con = Console()
    con.print(table)
    mem = ", ".join(f"{k} {v / 2**30:.1f}" for k, v in result.memory.items())
    fit = "fits" if result.fits else "DOES NOT FIT"
    con.print(
        f"step {result.step_time * 1e3:,.2f} ms · {result.tokens_per_s:,.0f} tokens/s · "
        f"{result.tflops_per_gpu:.0f} TFLOP/s per GPU · MFU {100 * result.mfu:.1f}%\n"
        f"memory per GPU (GiB): {mem} = {result.memory_total / 2**30:.1f} of "
        f"{result.memory_capacity / 2**30:.1f} usable: {fit}",
        markup=False,
    )
