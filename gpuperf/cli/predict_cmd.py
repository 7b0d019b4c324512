"""`gpuperf predict`: a model (default subcommand), a single op, or a collective. Parses, calls
gpuperf.api, renders; no math here. Imports stay light: rich loads only to draw a table, and
pandas not at all (the rows are rendered and written from plain columns)."""

from __future__ import annotations

from typing import Any

import click

from gpuperf.cli.comm_cmds import predict_collective_commands
from gpuperf.cli.common import SIZE, output_options
from gpuperf.cli.ops_grammar import ModelOrOpGroup, op_commands
from gpuperf.cli.plan_opts import plan_options
from gpuperf.cli.scenario_opts import scenario_options

GPU_HELP = "GPU: profile name or alias (h100, a100-40gb), a profile .toml, or auto (detect)."

gpu_option = click.option("--gpu", default=None, metavar="GPU", help=GPU_HELP + " [default: h100]")


def _render(prediction: Any, fmt: str, by: str = "op", top: int | None = None) -> None:
    from gpuperf.reports.tables import render
    from gpuperf.step.columns import nlargest
    from gpuperf.step.result import group

    view = group(prediction.columns, by)  # type: ignore[arg-type]
    if top is not None:
        view = nlargest(view, top, "time_ms")
    render(prediction, fmt, view=view)


@click.group(
    cls=ModelOrOpGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
)
def predict() -> None:
    """Predict how long a model step, a single op or a collective takes on a GPU.

    \b
    Examples:
      gpuperf predict llama2-7b --gpu h100 --seq 2048
      gpuperf predict llama2-70b --mode decode --batch 8 --ctx 4096 --tp 4 --system dgx-h100
      gpuperf predict llama3-70b --mode train --system dgx-h100 --nodes 4 --tp 8 --pp 4 \\
          --global-batch 64 --micro-batch 1
      gpuperf predict llama3-8b --mode train --impl eager --dp 8 --zero 3 --system dgx-h100
      gpuperf predict llama3-8b --mode train --impl compile --recompute op --dp 8 --zero 3 \\
          --system dgx-h100 --global-batch 16 --seq 8192
      gpuperf predict llama3-8b --mode generate --seq 1024 --new-tokens 256 --by kind
      gpuperf predict gemm 8192 4096 11008 --gpu a100
    """


@predict.command(
    "model",
    epilog="Example: gpuperf predict llama2-7b --gpu h100 --seq 2048 --by layer --top 10",
)
@click.argument("model", metavar="MODEL")
@gpu_option
@click.option("--system", default=None, help="Node/cluster profile (dgx-h100, or a .toml).")
@scenario_options
@plan_options
@click.option(
    "--by",
    type=click.Choice(["op", "layer", "kind"]),
    default="op",
    show_default=True,
    help="Rows: op (identical ops of all layers folded, with a count), layer, or kind.",
)
@click.option("--top", type=SIZE, default=None, help="Only the N slowest rows, slowest first.")
@output_options
@click.option(
    "--report",
    "report_path",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="Also write an offline HTML report to this path.",
)
def model_cmd(
    model: str,
    gpu: str | None,
    system: str | None,
    by: str,
    top: int | None,
    fmt: str,
    report_path: str | None,
    **scenario: Any,
) -> None:
    """Predict one step of MODEL (a preset like llama2-7b, or a Hugging Face config.json).

    Example: gpuperf predict llama2-7b --gpu h100 --seq 2048
    """
    from gpuperf import api
    from gpuperf.errors import InputError

    if fmt == "json" and (by != "op" or top is not None):  # the JSON contract: every op row
        raise InputError("--by and --top choose the table's rows (table, csv); --format json "
                         "carries every op, with its layer and kind: drop them")  # fmt: skip
    prediction = api.predict(model, gpu=gpu, system=system, **scenario)
    if report_path is not None:
        from gpuperf.reports.html import write_report  # plotly loads only when asked for

        write_report(prediction, report_path)
    _render(prediction, fmt, by, top)
    if report_path is not None and fmt == "table":
        click.echo(f"report written to {report_path}")


def _run_ops(ops: list, gpu: str | None, fmt: str) -> None:
    """Each op on its own (a sweep's sizes are independent kernels, as a benchmark times them)."""
    from gpuperf import api
    from gpuperf.reports.tables import render
    from gpuperf.step import track_record
    from gpuperf.step.run import predict_ops

    spec = api.resolve_gpu(gpu)
    pred = predict_ops(ops, spec)
    pred.extra["track_record"] = track_record.for_ops(ops, spec)
    render(pred, fmt)


for _cmd in op_commands(_run_ops, [gpu_option, output_options], "predict"):
    predict.add_command(_cmd)


for _cmd in predict_collective_commands():
    predict.add_command(_cmd)
