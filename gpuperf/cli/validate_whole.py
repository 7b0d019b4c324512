"""`gpuperf validate MODEL --nproc N ...`: the whole model as a plan, measured beside predicted."""

from __future__ import annotations

from typing import Any

import click

from gpuperf.errors import InputError
from gpuperf.step.memory import measured_window_bytes


def whole_model(model: str, mode: str, nproc: int | None, parallel: dict[str, Any], iters: int,
                timeout: float, *, impl: str, batch: int, seq: int, ctx: int, dtype: str,
                device: str, gpu: str | None, save: str | None, fmt: str,
                **_: Any) -> None:  # fmt: skip
    """Run MODEL as the plan says under torchrun; print measured beside predicted."""
    from gpuperf import api
    from gpuperf.cli.measure_cmd import gpu_for_prediction, resolve_device
    from gpuperf.measure.model_run import ModelRun, check_devices, implementation, run_model
    from gpuperf.workloads.config import from_hf_dict, hf_config
    from gpuperf.workloads.scenario import Scenario

    data, name, source = hf_config(model)
    cfg = from_hf_dict(data, name=name, source=source or f"preset {name}")
    sc = Scenario(mode=mode, batch=batch, seq=seq, ctx=ctx, dtype=dtype, impl=impl,
                  sequence_parallel=False, **parallel)  # type: ignore[arg-type]  # fmt: skip
    if nproc is not None and nproc != sc.gpus:
        raise InputError(f"--nproc {nproc} but the plan (tp·pp·dp·cp) uses {sc.gpus} GPUs")
    what = implementation(sc)
    if save:
        from gpuperf.fileio import check_writable

        check_writable(save)  # before the run
    dev = resolve_device(device)
    warnings: list[str] = []
    spec = gpu_for_prediction(gpu, dev, warnings)
    pred = None
    if spec is not None:
        keys = ("mode", "batch", "seq", "ctx", "impl", "cuda_graphs", "tp", "dp", "pp",
                "micro_batch", "zero", "tp_impl", "sequence_parallel", "recompute")  # fmt: skip
        kw = api.for_mode({k: getattr(sc, k) for k in keys})
        pred = api.predict(cfg, gpu=spec, dtype=dtype, **kw)
    run = ModelRun(data, sc, dev, iters=iters, timeout_s=timeout, check=what == "megatron")
    check_devices(run)  # a model or device it cannot run: one line, before the progress line
    click.echo(f"running {name} as {what} on {sc.gpus} {dev} rank(s)...", err=True)
    result = run_model(run)
    out = summary(name, sc, what, result, pred)
    out["warnings"] = warnings + (pred.warnings if pred is not None else [])
    if save:
        import json

        from gpuperf.fileio import json_safe, write_text

        write_text(save, json.dumps(json_safe(out), indent=1))
    render(out, fmt)


def summary(name: str, sc: Any, what: str, result: dict[str, Any], pred: Any) -> dict[str, Any]:
    """The measured run and the prediction of the same plan, as one JSON object."""
    from dataclasses import asdict
    from statistics import median

    samples = result["samples_ms"]
    measured = median(samples)
    out: dict[str, Any] = {
        "model": name,
        "implementation": what,
        "plan": sc.label(),
        "scenario": asdict(sc),
        "config": result.get("spec", {}).get("config"),
        "env": result.get("env", {}),
        "world": result.get("world"),
        "measured_ms": measured,
        "samples_ms": samples,
        "spread_pct": 100 * (max(samples) - min(samples)) / measured if measured else None,
        "peak_memory_bytes": result.get("peak_memory_bytes"),
        "check_rel_err": result.get("check_rel_err"),
    }
    if result.get("rank_host_ms"):  # the host's part of each step: the busiest rank's
        out["host_ms"] = median(max(step) for step in result["rank_host_ms"])
        out["rank_host_ms"] = result["rank_host_ms"]
    if pred is not None:
        out.update(
            predicted_ms=pred.total_ms,
            error_pct=100 * (pred.total_ms / measured - 1),
            # what the run holds: its prefill keeps no cache (use_cache=False)
            predicted_memory_bytes=measured_window_bytes(pred),
            predicted_host_ms=pred.extra.get("host_ms"),
            predicted_breakdown_ms=pred.extra.get("breakdown_ms", {}),
            gpu_profile=pred.gpu,
        )
    return out


def render(out: dict[str, Any], fmt: str) -> None:
    import json

    from gpuperf.fileio import json_safe

    if fmt == "json":
        click.echo(json.dumps(json_safe(out)))
        return
    gib = 2**30
    peak = max(out["peak_memory_bytes"] or [0]) / gib
    rows = [
        ("step (ms)", out["measured_ms"], out.get("predicted_ms"), out.get("error_pct")),
        ("host part of a step (ms)", out.get("host_ms"), out.get("predicted_host_ms"), None),
        ("peak memory per GPU (GiB)", peak or None,
         (out.get("predicted_memory_bytes") or 0) / gib or None, None),
    ]  # fmt: skip
    if fmt == "csv":
        click.echo("what,measured,predicted,error (%)")
        for r in rows:
            click.echo(",".join("" if v is None else str(v) for v in r))
        return
    from rich.table import Table

    from gpuperf.reports.console import console as make_console

    table = Table(title=f"{out['model']}, {out['plan']} ({out['implementation']}), "
                  f"{out['scenario']['mode']}: measured vs predicted")  # fmt: skip
    for h in ("what", "measured", "predicted", "error (%)"):
        table.add_column(h, justify="left" if h == "what" else "right")
    for what, m, p, e in rows:
        table.add_row(what, _num(m), _num(p), "–" if e is None else f"{e:+.1f}")
    con = make_console()
    con.print(table)
    notes = [f"{len(out['samples_ms'])} steps, spread {out['spread_pct']:.1f}% "
             f"(slowest rank each step)"]  # fmt: skip
    if out.get("check_rel_err") is not None:
        notes.append(f"logits vs the unsharded model: {out['check_rel_err']:.2%} rel. error")
    if out.get("predicted_breakdown_ms"):
        parts = ", ".join(f"{k} {v:.3g}" for k, v in out["predicted_breakdown_ms"].items())
        notes.append(f"predicted parts (ms): {parts}")
    notes += [f"warning: {w}" for w in out.get("warnings", [])]
    for n in notes:
        con.print(n, markup=False)


def _num(v: Any) -> str:
    return "–" if v is None else f"{v:,.4g}"
