"""`gpuperf serve MODEL`: throughput and latency of a continuous-batching deployment."""

from __future__ import annotations

import json
import math
from typing import Any

import click

from gpuperf.cli.common import SIZE, Finite, output_options
from gpuperf.cli.ops_grammar import weight_dtype_option

EXAMPLE = ("Example: gpuperf serve llama3-8b --gpu h100 --engine vllm --isl 512 --osl 128 "
           "--rate 10")  # fmt: skip


def _ms(v: float) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.1f}"


ISL_HELP = "Input tokens per request: 512, uniform:LO:HI, normal:MEAN:STD, lognormal:MEAN:STD."
REQUESTS_HELP = ("Requests (alone: all arrive at once; default 1000 with --rate, 8 per user "
                 "with --concurrency).")  # fmt: skip
USERS_HELP = "A closed loop of this many users (each sends its next request when its last ends)."


@click.command("serve", epilog=EXAMPLE)
@click.argument("model")
@click.option("--gpu", default=None, help="GPU profile (h100) or a .toml; default: the system's.")
@click.option("--system", default=None, help="System profile (dgx-h100) or a .toml.")
@click.option("--tp", type=SIZE, default=None,
              help="Tensor-parallel GPUs of a replica [default: 1]; not with --gpus.")  # fmt: skip
@click.option("--engine", default="vllm", show_default=True,
              help="hf, vllm, sglang, trtllm, or an engine .toml (see step/engines).")  # fmt: skip
@click.option("--isl", default=None, help=ISL_HELP + "  [default: 512]")
@click.option("--osl", default=None, help="Output tokens per request (as --isl).  [default: 128]")
@click.option("--requests", type=SIZE, default=None, help=REQUESTS_HELP)
@click.option("--rate", type=float, default=None, help="Poisson arrivals, requests/s.")
@click.option("--concurrency", type=SIZE, default=None, help=USERS_HELP)
@click.option("--trace", default=None,
              help="JSONL of {arrival_s, input_tokens, output_tokens} per request.")  # fmt: skip
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Seed of lengths and arrivals (not with --trace).  [default: 0]",
)
@click.option("--dtype", default="bf16", show_default=True, help="Weights and activations.")
@click.option("--kv-dtype", default=None, help="KV cache format (default: --dtype).")
@weight_dtype_option()
@click.option("--cuda-graphs/--no-cuda-graphs", default=None,
              help="Decode steps as CUDA graphs (default: the engine's).")  # fmt: skip
@click.option("--chunked-prefill/--no-chunked-prefill", default=None,
              help="Split prompts over steps (default: the engine's).")  # fmt: skip
@click.option("--mixed-prefill/--no-mixed-prefill", default=None,
              help="Prefill chunks share steps with decodes (default: the engine's; SGLang "
              "keeps them apart).")  # fmt: skip
@click.option("--token-budget", type=SIZE, default=None, help="Tokens per step (engine's default).")
@click.option("--max-seqs", type=SIZE, default=None, help="Sequences per step (engine's default).")
@click.option("--block-size", type=SIZE, default=None, help="KV block, tokens (engine's default).")
@click.option("--mem-fraction", type=float, default=None,
              help="Share of GPU memory the engine may use (engine's default).")  # fmt: skip
@click.option("--batch-wait-iters", type=click.IntRange(0, 1 << 20), default=None,
              help="Hold prefills back while decodes run for up to this many steps "
              "(TensorRT-LLM's batch_wait_timeout_iters; engine's default).")  # fmt: skip
@click.option("--batch-wait-tokens", type=Finite(0, 1), default=None,
              help="...or until the step's tokens reach this share of the token budget "
              "(TensorRT-LLM's batch_wait_max_tokens_ratio; engine's default). Both above 0 "
              "to hold anything.")  # fmt: skip
@click.option("--new-token-ratio", type=Finite(0, 1), default=None,
              help="Admit a request only while its prompt and answer fit beside this share of "
              "the running requests' answers to come (SGLang's new_token_ratio, decaying; 0: "
              "admit while the prompt fits; engine's default).")  # fmt: skip
@click.option("--slo", default=None,
              help="Latency targets, e.g. ttft=500ms,tpot=50ms (times in ms or s; p90; "
              "ttft_p99=...): find the highest request rate that meets them.")  # fmt: skip
@click.option("--gpus", type=SIZE, default=None,
              help="With --slo: split these GPUs into TP groups and replicas, trying every "
              "TP size (so not with --tp).")  # fmt: skip
@click.option("-o", "--output", default=None,
              help="Write an HTML page: batch and KV cache over time and latencies, or with "
              "--slo the Pareto frontier.")  # fmt: skip
@click.option("--per-request", is_flag=True, help="json: add every request's numbers.")
@output_options
def serve(model: str, gpu: str | None, system: str | None, tp: int | None, engine: str,
          isl: str | None, osl: str | None, requests: int | None, rate: float | None,
          concurrency: int | None, trace: str | None, seed: int | None, dtype: str,
          kv_dtype: str | None,
          weight_dtype: str | None, cuda_graphs: bool | None, chunked_prefill: bool | None,
          mixed_prefill: bool | None, token_budget: int | None,
          max_seqs: int | None, block_size: int | None, mem_fraction: float | None,
          batch_wait_iters: int | None, batch_wait_tokens: float | None,
          new_token_ratio: float | None, slo: str | None,
          gpus: int | None, output: str | None, per_request: bool, fmt: str) -> None:  # fmt: skip
    """Simulate MODEL served by a continuous-batching engine on one replica of --tp GPUs:
    TTFT, TPOT and end-to-end latency percentiles, tokens/s (per GPU, per user), batch size
    and KV-cache occupancy. Each step's time comes from the same engine as `gpuperf predict`.

    TPOT = (E2E - TTFT) / (output tokens - 1); TTFT counts queueing.

    Example: gpuperf serve llama3-8b --gpu h100 --engine vllm --isl 512 --osl 128 --rate 10
    """
    from gpuperf import api
    from gpuperf.cli.measure_cmd import progress

    opts = {"token_budget": token_budget, "max_seqs": max_seqs, "block_size": block_size,
            "mem_fraction": mem_fraction, "chunked_prefill": chunked_prefill,
            "mixed_prefill": mixed_prefill,
            "cuda_graphs": cuda_graphs, "batch_wait_iters": batch_wait_iters,
            "batch_wait_tokens": batch_wait_tokens, "new_token_ratio": new_token_ratio}  # fmt: skip
    opts = {k: v for k, v in opts.items() if v is not None}
    if slo is None and gpus is not None:
        raise click.UsageError("--gpus goes with --slo")
    if per_request and (fmt != "json" or slo is not None):
        raise click.UsageError(
            "--per-request adds every request's numbers to a run's JSON (--format json, not "
            "with --slo); the CSV lists them already"
        )
    if output is not None:
        from gpuperf.fileio import check_writable

        check_writable(output)
    if slo is not None:
        if rate is not None or concurrency is not None or trace is not None:
            raise click.UsageError(
                "--slo searches the rate itself; drop --rate/--concurrency/--trace"
            )
        with progress(1, "splits") as advance:
            plan = api.serve_plan(model, slo, gpu=gpu, system=system, engine=engine, gpus=gpus,
                                  tp=tp, isl=isl, osl=osl, requests=requests, seed=seed,
                                  dtype=dtype, kv_dtype=kv_dtype, weight_dtype=weight_dtype,
                                  progress=lambda i, n: advance(f"{i}/{n}"), **opts)  # fmt: skip
        if output is not None:
            from gpuperf.reports.html_serve import write_serve_report

            write_serve_report(plan, output)
        render_plan(plan, fmt)
        return
    with progress(100, "simulating") as advance:
        state = {"pct": 0}

        def tick(done: int, total: int) -> None:
            pct = int(100 * done / total)
            while state["pct"] < pct:
                state["pct"] += 1
                advance(f"{done:,}/{total:,} requests")

        rep = api.serve(model, gpu=gpu, system=system, engine=engine, tp=tp or 1, isl=isl,
                        osl=osl, requests=requests, rate=rate, concurrency=concurrency, trace=trace,
                        seed=seed, dtype=dtype, kv_dtype=kv_dtype, weight_dtype=weight_dtype,
                        progress=tick,
                        **opts)  # fmt: skip
    if output is not None:
        from gpuperf.reports.html_serve import write_run_report

        write_run_report(rep, output)
    render(rep, fmt, per_request)


def render(rep: Any, fmt: str, per_request: bool = False) -> None:
    """The serving report as a table, one JSON object, or CSV of every request."""
    from gpuperf.fileio import json_safe

    if fmt == "json":
        click.echo(json.dumps(json_safe(rep.to_dict(per_request=per_request))))
        return
    if fmt == "csv":
        import csv
        import sys

        rows = rep.requests()
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(["id", "arrival_s", "input_tokens", "output_tokens", "ttft_ms", "tpot_ms",
                    "e2e_ms"])  # fmt: skip
        for r in rows:
            w.writerow("" if v is None else v for v in r.values())
        return
    from rich.table import Table

    from gpuperf.reports.console import console as make_console

    s = rep.summary
    title = f"{rep.model} on {rep.tp} x {rep.gpu}, {rep.engine.name}: {rep.workload}"
    table = Table(title=title, caption="TPOT = (E2E - TTFT) / (output tokens - 1); TTFT "
                  "includes queueing")  # fmt: skip
    for h in ("latency (ms)", "mean", "p50", "p90", "p99"):
        table.add_column(h, justify="left" if h.startswith("lat") else "right")
    for name in ("ttft", "tpot", "e2e"):
        table.add_row(
            name.upper(), *(_ms(s[f"{name}_{q}_ms"]) for q in ("mean", "p50", "p90", "p99"))
        )
    console = make_console()
    console.print(table)
    lines = [
        f"output {s['output_tokens_per_s']:,.0f} tok/s ({s['output_tokens_per_s_per_gpu']:,.0f} "
        f"per GPU), total {s['total_tokens_per_s']:,.0f} tok/s, {_ms(s['tokens_per_s_per_user'])} "
        f"tok/s per user, {s['requests_per_s']:,.2f} req/s over {s['wall_s']:,.2f} s",
        f"batch {s['mean_batch']:.1f} sequences on average; KV cache {s['kv_cache_tokens']:,} "
        f"tokens, {100 * s['mean_kv_occupancy']:.1f}% used on average, "
        f"{100 * s['peak_kv_occupancy']:.1f}% at peak; {s['steps']:,} steps, "
        f"{s['preemptions']} preemptions",
    ]
    for line in lines:
        console.print(line, markup=False, highlight=False)
    accuracy(console, rep.track_record)
    for w in rep.warnings:
        console.print(f"warning: {w}", markup=False, style="yellow")


def render_plan(plan: Any, fmt: str) -> None:
    """The SLO search: each split's best rate (table, JSON, or CSV of the splits)."""
    from gpuperf.fileio import json_safe

    if fmt == "json":
        click.echo(json.dumps(json_safe(plan.to_dict())))
        return
    head = ["split", "replicas", "tp", "requests_per_s", "output_tokens_per_s_per_gpu",
            "ttft_p90_ms", "tpot_p90_ms", "note"]  # fmt: skip
    rows = []
    for s in plan.splits:
        sm = s.summary or {}
        # one replica of tp GPUs at its best rate (the frontier's points count the same way)
        per_gpu = sm["output_tokens_per_s"] / s.tp if sm else 0.0
        rows.append([f"tp{s.tp} x {s.replicas}", s.replicas, s.tp, s.rate, per_gpu,
                     sm.get("ttft_p90_ms"), sm.get("tpot_p90_ms"), s.why])  # fmt: skip
    if fmt == "csv":
        import csv
        import sys

        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(head)
        for r in rows:  # no number (None, or NaN: no request had the metric): an empty cell
            w.writerow("" if v is None or v != v else v for v in r)
        return
    from rich.table import Table

    from gpuperf.reports.console import console as make_console

    slo = ", ".join(f"{k.replace('_ms', '')} <= {v:g} ms" for k, v in plan.slo.items())
    table = Table(title=f"{plan.model} on {plan.gpus} x {plan.gpu}, {plan.engine}: {slo}")
    for h in ("split", "req/s in SLO", "out tok/s/GPU", "TTFT p90 (ms)", "TPOT p90 (ms)", "note"):
        table.add_column(h, justify="left" if h in ("split", "note") else "right")
    below = []  # notes too long for a cell: whole, under the table
    for r in rows:
        best = plan.best is not None and r[0] == f"tp{plan.best.tp} x {plan.best.replicas}"
        note = r[7]
        if len(note) > 32:
            below.append(f"{r[0]}: {note}")
            note = "see below"
        table.add_row(r[0] + (" *" if best else ""), f"{r[3]:.2f}", f"{r[4]:,.0f}", _ms(r[5]),
                      _ms(r[6]), note)  # fmt: skip
    console = make_console()
    console.print(table)
    for line in below:
        console.print(line, markup=False)
    if plan.best is None:
        console.print("no split meets the SLO at any rate", markup=False)
    else:
        b = plan.best
        console.print(f"best: tp{b.tp} x {b.replicas} replicas, {b.rate:.2f} requests/s within "
                      f"the SLO; Pareto frontier: {len(plan.frontier)} points",
                      markup=False)  # fmt: skip
    accuracy(console, plan.track_record)


def accuracy(console: Any, record: dict[str, Any]) -> None:
    """The footer line of how sure the simulation is (reports.tables.accuracy_text)."""
    from gpuperf.reports.tables import accuracy_text

    if record:
        console.print(accuracy_text(record))
