"""gpuperf calibrate: fit the time model's parameters to measurements and write a GPU profile."""

from __future__ import annotations

import math
from pathlib import Path

import click

from gpuperf.errors import InputError
from gpuperf.fileio import check_writable, write_text

PLAN_PROBE = "sdpa_shape_probe.json"  # SDPA calls timed on the fitted machine (host_pool)


@click.command(
    "calibrate",
    help="""Fit the model's parameters (efficiencies, latencies) to measurements; write a profile.

\b
From committed or saved result files (no GPU needed):
  gpuperf calibrate --from benchmarks/results/h100-sxm5-80gb --gpu h100 -o my-h100.toml
On a present GPU (measures a calibration set of kernels first, about a minute; with several GPUs
also NCCL collectives, about two more):
  gpuperf calibrate -o my-h100.toml
Then: gpuperf predict llama2-7b --gpu my-h100.toml

With --from, only shapes in the calibration split are used, so benchmarks/accuracy.py can report
the error on held-out shapes; a live calibration fits on every op it measures, and sets
host_dispatch_s from a loop of bare eager PyTorch kernels (Hugging Face code costs more per
kernel: fit e2e runs with --from for that). host_attn_plan_s, the host time SDPA's default backend
spends on a shape it has not met, is measured live, or read from sdpa_shape_probe.json. With
--from, the host constants fitted on the whole-model runs' machine are then moved to the median
of the machines the files probed (per-kernel costs times host_pool_factor; the plan, their
median), since eager steps are host-bound and machines of one GPU kind differ.
The profile inherits the base GPU (base = "...") and sets [model] only.""",
)
@click.option("--from", "sources", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Result files or folders (*.json) to fit, instead of measuring.")  # fmt: skip
@click.option(
    "--gpu",
    default=None,
    help="Base profile (default: the detected GPU; with --from, the GPU the files name).",
)
@click.option("-o", "--output", required=True, type=click.Path(path_type=Path),
              help="Profile to write (.toml).")  # fmt: skip
@click.option(
    "--all-shapes", is_flag=True, help="Fit on every row, not only the calibration split."
)
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default=None,
              help="Where a live calibration measures.  [default: auto]")  # fmt: skip
@click.option("--no-collectives", is_flag=True,
              help="Live, several GPUs: skip the NCCL collectives (~2 min).")  # fmt: skip
@click.option("--allow-cpu", is_flag=True,
              help="Write a profile fitted on the CPU (meaningless; tests).")  # fmt: skip
def calibrate(
    sources: tuple[Path, ...],
    gpu: str | None,
    output: Path,
    all_shapes: bool,
    device: str | None = None,
    allow_cpu: bool = False,
    no_collectives: bool = False,
) -> None:
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.perfmodel import calibrate as cal
    from gpuperf.perfmodel import host_pool
    from gpuperf.perfmodel.accuracy import check_measured_on, gpu_of, load_e2e, load_samples

    if output.suffix != ".toml":
        raise InputError(f"output {output} must end in .toml")
    check_writable(output)  # before the (minutes of) measuring and fitting
    fit_names: list[str] | None = None  # live: only what the measured ops constrain
    host_s: float | None = None  # live: measured per-kernel host dispatch
    pool: list = []  # --from: the probed machines (gpuperf.perfmodel.host_pool)
    plan_s: float | None = None  # attention plan per new shape (probe file, or measured live)
    if sources:
        live_flags = {"--device": device is not None, "--no-collectives": no_collectives,
                "--allow-cpu": allow_cpu}  # fmt: skip
        if given := [flag for flag, on in live_flags.items() if on]:
            raise InputError(f"{' and '.join(given)} would be ignored: they steer a live "
                             "calibration, and --from fits files measured already")  # fmt: skip
        files: list[Path] = []
        for s in sources:
            files += sorted(s.glob("*.json")) if s.is_dir() else [s]
        if not files:
            raise InputError(f"no result files (*.json) in --from {', '.join(map(str, sources))}")
        base = load_gpu(gpu if gpu is not None else gpu_of(files))  # default: the files' GPU
        check_measured_on(files, base)
        samples = load_samples(f for f in files if not f.name.startswith("e2e"))
        runs = load_e2e(f for f in files if f.name.startswith("e2e"))
        pool = host_pool.probes(files)  # each file with a host probe: one machine of the pool
        used: set[str] = set()
        if any(f.name == PLAN_PROBE for f in files):  # the fitted machine's own cuDNN plan
            used.add(PLAN_PROBE)
            plan_s = next((p.plan_s for p in pool if p.source == PLAN_PROBE), None)
        folders = sorted({f.parent.name for f in files})
        source = f"fitted to {', '.join(folders)}: "  # and the files fitted (below)
    else:
        from gpuperf.measure.calibration import live_calibration

        live = live_calibration(gpu, device or "auto", allow_cpu,
                                lambda line: click.echo(line, err=True),
                                collectives=not no_collectives)  # fmt: skip
        base, samples, runs, all_shapes = live.base, live.samples, [], True
        fit_names, host_s, plan_s = live.fit_names, live.host_dispatch_s, live.host_attn_plan_s
        source = f"fitted to a calibration run on this machine ({live.device})"
    if not all_shapes:
        samples = [s for s in samples if cal.calibrates(s)]
        runs = [r for r in runs if r.model in cal.E2E_CALIBRATION_MODELS]
    if sources:  # the files whose rows the fit reads (a held-out file's none)
        used |= {s.source for s in samples} | {r.source for r in runs}
        source += ", ".join(sorted(used))
    if not samples and not runs:
        raise InputError("no measurements to fit (no result rows in the calibration split)")
    click.echo(f"fitting {len(samples)} op measurements and {len(runs)} whole-model runs", err=True)
    if samples:  # the op fit never starts from a previous calibration; without op rows the
        # written profile keeps its base's op parameters, and so does the host fit below
        base = cal.reset_fitted(base)
    params = cal.fit(samples, base, fit_names) if samples else base.params
    if plan_s is not None:  # measured, not fitted: set before the host fit that depends on it
        params = cal.dataclasses.replace(params, host_attn_plan_s=plan_s)
    fitted = cal.dataclasses.replace(base, params=params)
    if runs:
        eager_decode = any(r.scenario.get("mode") == "decode" and r.scenario.get("impl") == "eager"
                           and not r.scenario.get("cuda_graphs") for r in runs)  # fmt: skip
        if plan_s is None and eager_decode:
            click.echo("warning: no sdpa_shape_probe.json among the sources, so "
                       "host_attn_plan_s is 0 and the eager-decode host fit absorbs the "
                       "attention plan into host_decode_layer_s", err=True)  # fmt: skip
        params = cal.fit_host(runs, fitted)
    fitted_names = [*(fit_names or cal.OP_PARAMS)] if samples else []
    fitted_names += [*cal.HOST_PARAMS] if runs else []
    if runs:  # the fitted host constants: the fitted runs' machine's, or the pool's median
        cal_host = cal.dataclasses.replace(base, params=params)  # the fitted runs' machine
        typical = _pool_host(pool, runs, all_shapes, cal_host, plan_known=plan_s is not None)
        params = host_pool.moved(params, typical)
        fitted_names.append("host_pool_factor")
        if typical.factors or typical.plans_s:
            source += f"; host probes: {', '.join(sorted({p.source for p in pool}))}"
        if typical.plan_s is not None:
            plan_s = typical.plan_s
    if host_s is not None:  # live: this machine's own dispatch (the profile is this machine)
        params = cal.dataclasses.replace(
            params, host_dispatch_s=host_s, extra={**params.extra, "host_pool_factor": 1.0}
        )
        fitted_names += ["host_dispatch_s", "host_pool_factor"]
    if plan_s is not None:
        fitted_names.append("host_attn_plan_s")
    write_text(output, cal.params_toml(params, base.name, source, fitted_names))
    click.echo(f"wrote {output}")
    for name, lo_hi in {**cal.OP_PARAMS, **cal.HOST_PARAMS}.items():
        value = cal.param_value(params, name)
        shown_value = "default" if math.isnan(value) else f"{value:.4g}"  # no rows constrain it
        click.echo(f"  {name:22s} {shown_value}   (bounds {lo_hi[0]:g} .. {lo_hi[1]:g})")


def _pool_host(pool: list, runs: list, all_shapes: bool, cal_host: object,  # noqa: ANN202
               plan_known: bool):  # fmt: skip
    """The pool's median machine against the fitted runs' one, `cal_host` (the profile as
    fitted there; gpuperf.perfmodel.host_pool), saying what moves and why not; nothing moves
    with --all-shapes (the fit already spans the machines), without launch costs in the fitted
    runs' files (unless three machines ran the hf_probe), or with fewer than three probed
    machines. The plan moves only when the fitted machine's own plan was known (else the fit
    absorbed it into host_decode_layer_s)."""
    from dataclasses import replace

    from gpuperf.perfmodel import host_pool

    nothing = host_pool.TypicalHost(None, None, (), ())
    if all_shapes or not pool:
        if all_shapes and pool:
            click.echo("host: not moved to the pool's median machine (--all-shapes fits the "
                       "runs of every machine)", err=True)  # fmt: skip
        return nothing
    fitted = {r.source for r in runs}
    ref = host_pool.mean_launch(p for p in pool if p.source in fitted)
    # The probe step's factor inverts the fitted host model, which holds the plan apart only
    # when the fitted machine's plan was known (else host_decode_layer_s absorbed it).
    typical = host_pool.typical(pool, ref, cal_host if plan_known else None)
    if not plan_known:
        typical = replace(typical, plan_s=None, plans_s=())
    if typical.basis == "hf step":
        click.echo(
            f"host: the median of {len(typical.factors)} machines' Hugging Face probe steps "
            f"costs {typical.factor:.3g}x the fitted runs' host per kernel",
            err=True,
        )
    elif ref is None:
        click.echo("host: per-kernel costs not moved: the fitted runs' files carry no launch "
                   "costs to compare the probed machines with", err=True)  # fmt: skip
    elif typical.factor is None:
        click.echo(f"host: per-kernel costs not moved: {len(typical.factors)} probed machine(s), "
                   f"fewer than {host_pool.MIN_HOSTS}", err=True)  # fmt: skip
    else:
        click.echo(
            f"host: the median of {len(typical.factors)} probed machines issues kernels "
            f"{typical.factor:.3g}x as slowly as the fitted runs' host",
            err=True,
        )
    if typical.plan_s is not None:
        click.echo(f"host: cuDNN plan {1e3 * typical.plan_s:.1f} ms, the median of "
                   f"{len(typical.plans_s)} machines", err=True)  # fmt: skip
    return typical
