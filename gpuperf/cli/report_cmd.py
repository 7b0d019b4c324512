"""`gpuperf report`: an offline HTML roofline report of a prediction (one or several GPUs) or of
saved results. Parses, calls gpuperf.api and gpuperf.reports.html, says where the file went."""

from __future__ import annotations

from typing import Any

import click

from gpuperf.cli.plan_opts import plan_options
from gpuperf.cli.scenario_opts import scenario_options
from gpuperf.errors import InputError

EXAMPLES = """
\b
Examples:
  gpuperf report llama2-7b --gpu h100 -o report.html
  gpuperf report llama2-70b --gpu h100,h200,a100 --mode decode --batch 16 --ctx 4096 -o cmp.html
  gpuperf report llama2-7b --seq 2048 --measured gemm_models.json --measured attention.json
  gpuperf report llama2-70b --mode train --system dgx-h100 --nodes 2 --tp 8 --pp 2 --global-batch 16
  gpuperf report --from results/gemm.json -o measured.html
  gpuperf predict llama2-7b --format json > p.json && gpuperf report --from p.json -o p.html
"""


def _gpus(value: str | None) -> list[str]:
    if value is None:
        return []
    names = [g.strip() for g in value.split(",") if g.strip()]
    if not names:
        raise InputError("--gpu: give one GPU or a comma list, e.g. h100,h200")
    return names


@click.command("report", epilog=EXAMPLES, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model", metavar="[MODEL]", required=False)
@click.option(
    "--gpu",
    default=None,
    metavar="GPU[,GPU...]",
    help="GPU profile(s): h100, or h100,h200,a100 to compare [default: h100]. With --from: "
    "the GPU the results ran on, when the file does not say (or to override it).",
)
@click.option(
    "--from",
    "sources",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="A saved results file (gpuperf measure --save) or a gpuperf predict/measure "
    "--format json output; repeat for several.",
)
@click.option(
    "--measured",
    multiple=True,
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Measurements to draw beside the prediction (gpuperf measure --save files), joined "
    "by op name, else by the same kind, shape and dtype; repeat for several.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default="report.html",
    show_default=True,
    help="Where to write the HTML file.",
)
@click.option("--system", default=None, help="Node profile (dgx-h100, or a .toml).")
@scenario_options
@plan_options
def report(
    model: str | None,
    gpu: str | None,
    sources: tuple[str, ...],
    measured: tuple[str, ...],
    output: str,
    system: str | None,
    **scenario: Any,
) -> None:
    """Write a self-contained HTML report (roofline, where the time goes, memory, GPUs
    compared, the op table, hardware sources) that opens offline in any browser.

    MODEL is a preset (llama2-7b) or a Hugging Face config.json; or give --from FILE instead.
    """
    from gpuperf.fileio import check_writable
    from gpuperf.reports.html import write_report

    check_writable(output)  # before any work
    gpus = _gpus(gpu)
    if sources:
        if model is not None:
            raise InputError("give MODEL or --from FILE, not both")
        if measured:
            raise InputError("--measured goes with MODEL; a --from file carries its measurements")
        ctx = click.get_current_context()
        default = click.core.ParameterSource.DEFAULT
        given = [p.opts[0] for p in ctx.command.params
                 if p.name in {"system", *scenario}
                 and ctx.get_parameter_source(p.name) is not default]  # fmt: skip
        if given:  # the file holds its scenario; these would be ignored
            raise InputError(f"{', '.join(given)} would be ignored: a --from file holds its own "
                             "step; drop them, or give MODEL instead of --from")  # fmt: skip
        results = _load(sources, gpus)
    elif model is None:
        raise InputError("give MODEL (e.g. llama2-7b) or --from FILE; see gpuperf report --help")
    else:
        from gpuperf import api

        names: list[str | None] = list(gpus) or [None]
        results = [api.predict(model, gpu=g, system=system, **scenario) for g in names]
    joined = None
    if measured:
        from gpuperf.reports.html_data import measured_frames

        joined = measured_frames(measured)
    path = write_report(results, output, measured=joined)
    size_mb = path.stat().st_size / 1e6
    n = len(results)
    click.echo(f"report written to {path} ({n} result{'s' if n > 1 else ''}, {size_mb:.1f} MB)")


def _load(sources: tuple[str, ...], gpus: list[str]) -> list[Any]:
    from gpuperf.reports.html_data import load_saved

    if len(gpus) > 1 and len(gpus) != len(sources):
        raise InputError(f"--gpu: {len(gpus)} GPUs for {len(sources)} --from files")
    per_file = gpus if len(gpus) > 1 else [gpus[0] if gpus else None] * len(sources)
    return [load_saved(src, g) for src, g in zip(sources, per_file, strict=True)]
