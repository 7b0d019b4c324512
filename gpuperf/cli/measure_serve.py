"""`gpuperf measure serve MODEL`: the workload through Hugging Face continuous batching on this
GPU, measured beside `gpuperf serve --engine hf` with the same cache, budget and requests."""

from __future__ import annotations

import json
import math
from typing import Any

import click

from gpuperf.cli.common import SIZE, output_options

EXAMPLE = ("Example: gpuperf measure serve llama3.2-1b --isl 512 --osl 128 --requests 64 "
           "-o serve.json")  # fmt: skip


@click.command("serve", epilog=EXAMPLE)
@click.argument("model")
@click.option("--isl", default="512", show_default=True, help="Input tokens (or a distribution).")
@click.option("--osl", default="128", show_default=True, help="Output tokens (or a distribution).")
@click.option("--requests", type=SIZE, default="64", show_default=True, help="Requests.")
@click.option("--rate", type=float, default=None, help="Poisson arrivals/s (default: at once).")
@click.option("--concurrency", type=SIZE, default=None,
              help="A closed loop of this many users (the next request as one ends).")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--layers", type=SIZE, default=None, help="Keep this many layers (a smaller model).")
@click.option("--block-size", type=SIZE, default="256", show_default=True, help="KV block.")
@click.option("--num-blocks", type=SIZE, default="512", show_default=True, help="KV blocks.")
@click.option("--max-batch-tokens", type=SIZE, default="2048", show_default=True,
              help="Token budget per step.")  # fmt: skip
@click.option("--cuda-graphs", is_flag=True, help="Force HF's CUDA graphs on.")
@click.option("--gpu", default=None, help="Profile to predict with (default: detected).")
@click.option("-o", "--save", default=None, help="Write the measured run (JSON) here.")
@click.option("--per-request", is_flag=True, help="Every request, measured beside predicted.")
@output_options
def serve(model: str, isl: str, osl: str, requests: int, rate: float | None,
          concurrency: int | None, seed: int, layers: int | None, block_size: int,
          num_blocks: int, max_batch_tokens: int,
          cuda_graphs: bool, gpu: str | None, save: str | None, per_request: bool,
          fmt: str) -> None:  # fmt: skip
    """Serve random-weight MODEL (a preset or config.json) through transformers' continuous
    batching on this GPU and print measured TTFT, TPOT and wall time beside the simulation.

    Example: gpuperf measure serve llama3.2-1b --isl 512 --osl 128 --requests 64 -o serve.json
    """
    from gpuperf import api
    from gpuperf.cli.measure_cmd import gpu_for_prediction
    from gpuperf.fileio import check_writable, write_text
    from gpuperf.measure.serve_hf import engine_options, replay, run
    from gpuperf.step.serve_load import make_workload, parse_lengths
    from gpuperf.workloads.config import from_hf_dict, hf_config

    config, name, source = hf_config(model)
    if layers is not None:
        config = {**config, "num_hidden_layers": layers}
        name = f"{name}-{layers}l"
    cfg = from_hf_dict(config, name=name, source=source)
    if save is not None:
        check_writable(save)
    work = make_workload(parse_lengths(isl, "--isl"), parse_lengths(osl, "--osl"),
                         requests=requests, rate=rate, concurrency=concurrency,
                         seed=seed)  # fmt: skip
    cb: dict[str, Any] = {"block_size": block_size, "num_blocks": num_blocks,
                          "max_batch_tokens": max_batch_tokens}  # fmt: skip
    if cuda_graphs:
        cb["use_cuda_graph"] = True
    spec = {"config": config, "requests": [[r.arrival, r.prompt, r.output] for r in work.requests],
            "cb": cb, "dtype": "bf16", "seed": seed, "label": work.label,
            "concurrency": work.concurrency}  # fmt: skip
    warnings: list[str] = []
    spec_gpu = gpu_for_prediction(gpu, "cuda", warnings)
    # the simulation's inputs are checked before the GPU run, so a bad one loses no measurement
    api.serve(cfg, gpu=spec_gpu, engine="hf", requests=1, isl=1, osl=1,
              **engine_options(cb, requests))  # fmt: skip
    measured = run(spec)
    if save is not None:
        write_text(save, json.dumps(measured))
    rep = replay(measured, cfg, spec_gpu)
    _render(measured, rep, fmt, warnings, per_request)


def _request_rows(measured: dict, rep: Any) -> list[dict[str, Any]]:
    """Each request: its lengths, measured and predicted TTFT and TPOT (ms)."""
    out = []
    for m, p in zip(measured["requests"], rep.requests(), strict=True):
        n = m["output_tokens"]
        tpot = 1e3 * (m["last_s"] - m["first_s"]) / (n - 1) if n > 1 else None
        out.append({"id": m["id"], "input_tokens": m["input_tokens"], "output_tokens": n,
                    "ttft_ms": 1e3 * (m["first_s"] - m["arrival_s"]),
                    "ttft_ms_predicted": p["ttft_ms"], "tpot_ms": tpot,
                    "tpot_ms_predicted": p["tpot_ms"]})  # fmt: skip
    return out


def _render(measured: dict, rep: Any, fmt: str, warnings: list[str],
            per_request: bool = False) -> None:  # fmt: skip
    from gpuperf.measure.serve_hf import metrics

    m = metrics(measured["requests"])
    p = {k: rep.summary[k] for k in m}
    rows = [{"metric": k, "measured": m[k], "predicted": p[k],
             "error_pct": 100 * (p[k] / m[k] - 1) if m[k] else math.nan} for k in m]  # fmt: skip
    if fmt == "json":
        from gpuperf.fileio import json_safe

        out = {"aggregate": rows, "env": measured.get("env"), "warnings": warnings,
               "requests": measured["requests"], "predicted_requests": rep.requests()}  # fmt: skip
        click.echo(json.dumps(json_safe(out)))
        return
    if fmt == "csv":
        import csv
        import sys

        w = csv.writer(sys.stdout, lineterminator="\n")
        if per_request:
            reqs = _request_rows(measured, rep)
            w.writerow(reqs[0].keys())
            for r in reqs:
                w.writerow("" if v is None else v for v in r.values())
            return
        w.writerow(["metric", "measured", "predicted", "error_pct"])
        for r in rows:
            w.writerow(r.values())
        return
    from rich.table import Table

    from gpuperf.reports.console import console as make_console

    table = Table(title=f"{measured.get('label')}: HF continuous batching, measured vs predicted")
    for h in ("metric", "measured", "predicted", "error"):
        table.add_column(h, justify="left" if h == "metric" else "right")
    for r in rows:
        table.add_row(r["metric"], f"{r['measured']:,.2f}", f"{r['predicted']:,.2f}",
                      f"{r['error_pct']:+.1f}%")  # fmt: skip
    console = make_console()
    if per_request:
        each = Table(title="per request (ms)")
        for h in ("id", "in", "out", "TTFT", "TTFT pred", "TPOT", "TPOT pred"):
            each.add_column(h, justify="right")
        for r in _request_rows(measured, rep):
            cells = [r["ttft_ms"], r["ttft_ms_predicted"], r["tpot_ms"], r["tpot_ms_predicted"]]
            each.add_row(str(r["id"]), str(r["input_tokens"]), str(r["output_tokens"]),
                         *("-" if v is None else f"{v:,.1f}" for v in cells))  # fmt: skip
        console.print(each)
    console.print(table)
    for w in warnings:
        console.print(f"warning: {w}", markup=False, style="yellow")
