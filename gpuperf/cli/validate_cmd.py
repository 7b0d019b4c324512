"""`gpuperf validate`: measure a model beside its prediction.

Two depths. By default every distinct op of one layer (and, with --impl eager, one whole eager
layer) runs on this GPU. With --nproc (or a parallel degree) the whole model runs as the plan says
under torchrun on the GPUs present (gpuperf.measure.model_run: DDP, FSDP2, DTensor or
Megatron-style TP, Hugging Face's eager kernels) and its step time and peak memory are printed
beside the step engine's prediction of the same plan.
"""

from __future__ import annotations

from typing import Any

import click

from gpuperf.cli.common import COUNT, SIZE, Finite
from gpuperf.cli.measure_cmd import (
    _predict,
    _render,
    common_options,
    gpu_for_prediction,
    progress,
    resolve_device,
)
from gpuperf.cli.ops_grammar import dtype_option
from gpuperf.errors import EnvironmentUnavailable, InputError

EXAMPLES = (
    "\b\nExamples:\n"
    "  gpuperf validate llama3-8b --mode decode --batch 16 --ctx 4096\n"
    "  gpuperf validate llama2-7b --impl eager --mode decode --ctx 2048 --format json\n"
    "  gpuperf validate llama3-8b --impl eager --tp 2 --nproc 2 --mode prefill\n"
    "  gpuperf validate llama-1.1b.json --impl eager --mode train --dp 2 --zero 3 --nproc 2\n"
    "  gpuperf validate llama-1.1b.json --impl compile --recompute op --mode train --seq 4096\n"
    "  gpuperf validate llama3-8b --impl eager --mode train --pp 2 --tp 2 --batch 8 "
    "--micro-batch 1\n"
    "  gpuperf validate llama3-8b --impl eager --mode train --cp 2 --seq 8192 --nproc 2"
)


@click.command(
    help="Measure MODEL beside its prediction. Without --nproc: every distinct op of one layer "
    "(plus embedding, final norm and lm_head); ops with no single PyTorch kernel are listed as "
    "skipped; with --impl eager one whole eager decoder layer also runs end to end. With "
    "--nproc N: the whole model (a Hugging Face model of its family with random weights, eager "
    "or compiled kernels) runs as the plan says under torchrun on N GPUs -- DDP (--dp), FSDP2 "
    "(--dp --zero 3); for Llama, Mistral and Qwen2 also DTensor (--tp --tp-impl dtensor), "
    "Megatron-style TP (--tp), a 1F1B pipeline (--pp, with --micro-batch) or PyTorch's "
    "context parallelism (--cp, ring attention) -- and the step "
    "time (the slowest rank, median of --iters) and peak memory per GPU are printed beside "
    "the prediction.\n\n" + EXAMPLES
)
@click.argument("model")
@click.option(
    "--mode", type=click.Choice(["prefill", "decode", "train"]), default="prefill",
    show_default=True, help="train: whole-model runs only (forward, backward, AdamW).",
)  # fmt: skip
@click.option(
    "--impl",
    type=click.Choice(["fused", "eager", "compile"]),
    default="fused",
    show_default=True,
    help="Kernels as vLLM (fused) or HF eager PyTorch run them; eager adds a whole-layer run; "
    "compile (whole-model training): each decoder layer torch.compile'd, as torchtitan does.",
)
@click.option(
    "--recompute", type=click.Choice(["none", "full", "op"]), default="none", show_default=True,
    help="Train: each decoder layer checkpointed whole (full) or by torchtitan's per-op "
    "policy (op).",
)  # fmt: skip
@click.option("--batch", type=COUNT, default=1, show_default=True,
              help="Sequences (per data-parallel rank).")  # fmt: skip
@click.option("--seq", type=COUNT, default=None,
              help="Prefill, train: tokens per sequence.  [default: 2048]")  # fmt: skip
@click.option("--ctx", type=COUNT, default=None, help="Decode: KV context.  [default: 2048]")
@dtype_option()
@click.option(
    "--nproc",
    type=COUNT,
    default=None,
    help="Run the whole model under torchrun on N GPUs (the plan's tp·pp·dp·cp).",
)
@click.option("--tp", type=SIZE, default="1", show_default=True, help="Tensor-parallel GPUs.")
@click.option("--dp", type=SIZE, default="1", show_default=True, help="Data-parallel GPUs.")
@click.option(
    "--cp", type=SIZE, default="1", show_default=True,
    help="Context-parallel GPUs (PyTorch's context_parallel; prefill and train).",
)  # fmt: skip
@click.option(
    "--pp",
    type=SIZE,
    default="1",
    show_default=True,
    help="Pipeline stages (1F1B in training; Megatron-style TP inside).",
)
@click.option(
    "--micro-batch",
    type=SIZE,
    default=None,
    help="Sequences per micro-batch [default: --batch, one].",
)
@click.option(
    "--zero",
    type=click.Choice(["0", "3"]),
    default="0",
    show_default=True,
    help="0: DDP; 3: FSDP2 (train with --dp).",
)
@click.option(
    "--tp-impl",
    type=click.Choice(["megatron", "dtensor"]),
    default="megatron",
    show_default=True,
    help="megatron: plain collectives; dtensor: HF's tp_plan.",
)
@click.option("--cuda-graphs", is_flag=True, help="Decode: StaticCache replayed as a CUDA graph.")
@click.option(
    "--iters",
    type=COUNT,
    default=10,
    show_default=True,
    help="Timed steps of a whole-model run.",
)
@click.option(
    "--timeout",
    type=Finite(min=1),
    default=900.0,
    show_default=True,
    help="Seconds before a whole-model run is ended.",
)
@common_options
def validate(
    model: str, mode: str, nproc: int | None, tp: int, dp: int, cp: int, pp: int,
    micro_batch: int | None, zero: str, tp_impl: str, cuda_graphs: bool, iters: int,
    timeout: float, recompute: str, **kw: Any,
) -> None:  # fmt: skip
    from gpuperf.api import PREDICT_DEFAULTS, PREDICT_SIZES, mode_sizes

    # predict's rule, over the modes validate runs (it has no generate)
    applies = {k: tuple(m for m in PREDICT_SIZES[k] if m != "generate") for k in ("seq", "ctx")}

    # a size the mode does not use is refused, as predict refuses it
    sizes = mode_sizes(mode, {"seq": kw["seq"], "ctx": kw["ctx"]}, applies)
    kw.update({k: PREDICT_DEFAULTS[k] if v is None else v for k, v in sizes.items()})
    parallel = dict(tp=tp, dp=dp, cp=cp, pp=pp, micro_batch=micro_batch, zero=int(zero),
                    tp_impl=tp_impl, cuda_graphs=cuda_graphs, recompute=recompute)  # fmt: skip
    whole = (
        nproc is not None or tp > 1 or dp > 1 or cp > 1 or pp > 1 or mode == "train" or cuda_graphs
    )
    if not whole:
        if recompute != "none":
            raise InputError("--recompute checkpoints a whole-model training run: add --mode "
                             "train")  # fmt: skip
        _validate_layer(model, mode, **kw)
        return
    from gpuperf.cli.validate_whole import whole_model

    whole_model(model, mode, nproc, parallel, iters, timeout, **kw)


def _validate_layer(
    model: str,
    mode: str,
    *,
    impl: str,
    batch: int,
    seq: int,
    ctx: int,
    dtype: str,
    device: str,
    gpu: str | None,
    backend: str,
    warmup_ms: float,
    rep_ms: float,
    save: str | None,
    fmt: str,
) -> None:
    from gpuperf.measure.env import environment
    from gpuperf.measure.results import MeasureResult, ResultsFile, measured_table, measurement_row
    from gpuperf.measure.timing import Budget
    from gpuperf.measure.validate import model_ops, one_layer, validate_ops
    from gpuperf.workloads.scenario import Scenario

    scenario = Scenario(mode=mode, batch=batch, seq=seq, ctx=ctx, dtype=dtype, impl=impl)  # type: ignore[arg-type]
    cfg, ops = model_ops(model, scenario)
    dev = resolve_device(device)
    warnings: list[str] = []
    spec = gpu_for_prediction(gpu, dev, warnings)
    env = environment(dev)
    saver = ResultsFile(save, env, "validate") if save else None
    if saver is not None:
        saver.data.update(
            model=model,
            scenario={
                "mode": mode,
                "batch": batch,
                "seq": seq,
                "ctx": ctx,
                "dtype": dtype,
                "impl": impl,
            },
        )
    targets = one_layer(ops)
    with progress(len(targets), f"{model}") as advance:

        def done(op: Any, m: Any) -> None:
            if m is not None and saver is not None:
                saver.add(measurement_row(m, None))
            advance(op.name)

        v = validate_ops(
            ops,
            dev,
            Budget(warmup_ms=warmup_ms, rep_ms=rep_ms),
            None if backend == "auto" else backend,
            done,
        )
    for op, why in v.skipped:
        warnings.append(f"skipped {op.name} ({op.shape}): {why}")
    if saver is not None:
        saver.data["skipped"] = [{"name": op.name, "why": why} for op, why in v.skipped]
        saver.write()
    if not v.ops:
        raise EnvironmentUnavailable(f"no op of {model} could be measured: {warnings[0]}")
    prediction = _predict(v.ops, spec, warnings)
    table = measured_table(v.ops, v.measurements, spec, prediction)
    measured_on = env.get("gpu") or env.get("cpu") or dev
    label = f"{measured_on} (measured)" + (f" vs {spec.name} (predicted)" if spec else "")
    result = MeasureResult(table=table, env=env, gpu=label, model=model, warnings=warnings)
    if prediction is not None:
        result.total_ms = float(table["time_ms"].sum())
    if impl != "eager":
        _render(result, fmt)
        return
    budget = Budget(warmup_ms=warmup_ms, rep_ms=rep_ms)
    layer = _whole_layer(cfg, scenario, dev, budget, spec, warnings)
    if saver is not None and layer is not None:
        saver.data["layer"] = layer
        saver.write()
    _render_with_layer(result, layer, fmt)


def _whole_layer(
    cfg: Any, scenario: Any, dev: str, budget: Any, spec: Any, warnings: list[str]
) -> dict[str, Any] | None:
    """Run one eager layer (gpuperf.measure.eager_layer); a layer that cannot run is a warning."""
    from gpuperf.measure.eager_layer import compare, measure_layer
    from gpuperf.measure.kernels import WrongResult

    try:
        run = measure_layer(cfg, scenario, dev, budget)
    except (InputError, EnvironmentUnavailable, WrongResult) as exc:
        warnings.append(f"whole layer not run: {exc}")
        return None
    compare(run, spec, scenario)
    if run.kernels_run != len(run.ops):
        warnings.append(f"whole layer: {run.kernels_run} kernels run, {len(run.ops)} predicted")
    return run.to_json()


_LAYER_COLUMNS = (("what", "whole eager layer"), ("measured_ms", "measured (ms)"),
                  ("predicted_ms", "predicted (ms)"), ("error_pct", "error (%)"),
                  ("method", "how"))  # fmt: skip


def _render_with_layer(result: Any, layer: dict[str, Any] | None, fmt: str) -> None:
    """The op table as usual, then the whole-layer rows: a second table, a "layer" key in the
    JSON object, or (csv: stdout holds the op table only) lines on stderr."""
    import sys

    if fmt == "json":
        from gpuperf.measure.results import MeasureResult

        class _WithLayer(MeasureResult):
            def to_json(self) -> dict[str, Any]:
                return {**super().to_json(), "layer": layer}

        _render(_WithLayer(**{f: getattr(result, f) for f in result.__dataclass_fields__}), fmt)
        return
    _render(result, fmt)
    if layer is None:
        return

    def cell(v: Any, key: str) -> str:
        if v is None:
            return "-"
        return f"{v:+.1f}" if key == "error_pct" else f"{v:.4g}" if isinstance(v, float) else v

    rows = [[cell(r[k], k) for k, _ in _LAYER_COLUMNS] for r in layer["rows"]]
    note = (f"{layer['kernels_run']} kernels run ({layer['kernels_predicted']} predicted), "
            f"check vs fp64 {layer['check_err']:.2%}")  # fmt: skip
    if fmt == "csv":
        for r in rows:
            click.echo(
                "whole layer: "
                + ", ".join(f"{h} {v}" for (_, h), v in zip(_LAYER_COLUMNS, r, strict=True)),
                err=True,
            )
        click.echo(f"whole layer: {note}", err=True)
        return
    from rich import box
    from rich.table import Table

    from gpuperf.reports.console import console as make_console

    table = Table(title=f"one whole eager layer: {note}", box=box.SIMPLE_HEAD)
    for key, header in _LAYER_COLUMNS:
        table.add_column(header, justify="right" if key.endswith(("_ms", "_pct")) else "left")
    for r in rows:
        table.add_row(*r)
    console = make_console(file=sys.stdout)
    if not console.is_terminal:
        console.width = max(console.width, 160)
    console.print(table)
