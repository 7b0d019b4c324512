"""gpuperf calibrate: fit the time model's parameters to measurements and write a GPU profile."""

from __future__ import annotations

from pathlib import Path

import click

from gpuperf.errors import InputError


@click.command(
    "calibrate",
    help="""Fit the model's parameters (efficiencies, latencies) to measurements; write a profile.

\b
From committed or saved result files (no GPU needed):
  gpuperf calibrate --from benchmarks/results/h100-sxm5-80gb --gpu h100 -o my-h100.toml
On a present GPU (measures a calibration set of kernels first, about a minute):
  gpuperf calibrate -o my-h100.toml
Then: gpuperf predict llama2-7b --gpu my-h100.toml

Only shapes in the calibration split are used, so benchmarks/accuracy.py can report the error on
held-out shapes. The profile inherits the base GPU (base = "...") and sets [model] only.""",
)
@click.option("--from", "sources", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Result files or folders (*.json) to fit, instead of measuring.")  # fmt: skip
@click.option("--gpu", default=None, help="Base profile (default: the detected GPU).")
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="Profile to write (.toml).")  # fmt: skip
@click.option(
    "--all-shapes", is_flag=True, help="Fit on every row, not only the calibration split."
)
def calibrate(sources: tuple[Path, ...], gpu: str | None, output: Path, all_shapes: bool) -> None:
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel import calibrate as cal
    from gpuperf.perfmodel.accuracy import load_e2e, load_samples

    if output.suffix != ".toml":
        raise InputError(f"output {output} must end in .toml")
    if sources:
        files: list[Path] = []
        for s in sources:
            files += sorted(s.glob("*.json")) if s.is_dir() else [s]
        if gpu is None:
            raise InputError("--from needs --gpu (the profile the measurements were taken on)")
        base = load_gpu(gpu)
        samples = load_samples(f for f in files if not f.name.startswith("e2e"))
        runs = load_e2e(f for f in files if f.name.startswith("e2e"))
        used = {s.source for s in samples} | {r.source for r in runs}
        folders = sorted({f.parent.name for f in files})
        source = f"fitted to {', '.join(folders)}: {', '.join(sorted(used))}"
    else:
        from gpuperf.measure.calibration import measure_calibration_set

        base = load_gpu(gpu or "auto")
        samples, runs = measure_calibration_set(base), []
        source = "fitted to a calibration run on this machine"
    if not all_shapes:
        samples = [s for s in samples if cal.is_calibration(s.op)]
        runs = [r for r in runs if r.model in cal.E2E_CALIBRATION_MODELS]
    if not samples and not runs:
        raise InputError("no measurements to fit (no result rows in the calibration split)")
    click.echo(f"fitting {len(samples)} op measurements and {len(runs)} whole-model runs", err=True)
    params = cal.fit(samples, base) if samples else base.params
    fitted = cal.dataclasses.replace(base, params=params)
    if runs:
        params = cal.fit_host(runs, fitted)
    fitted_names = [*cal.OP_PARAMS] if samples else []
    fitted_names += [*cal.HOST_PARAMS] if runs else []
    output.write_text(cal.params_toml(params, base.name, source, fitted_names))
    click.echo(f"wrote {output}")
    for name, lo_hi in {**cal.OP_PARAMS, **cal.HOST_PARAMS}.items():
        value = cal.param_value(params, name)
        click.echo(f"  {name:22s} {value:.4g}   (bounds {lo_hi[0]:g} .. {lo_hi[1]:g})")
