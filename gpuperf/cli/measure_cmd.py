"""`gpuperf measure`: run the real kernels (and collectives) beside the prediction.

Thin: parses, calls gpuperf.measure, renders. torch is imported only when a command runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import click

from gpuperf.cli.common import COUNT, Finite, output_options
from gpuperf.cli.ops_grammar import dtype_option, op_commands, sweep
from gpuperf.errors import EnvironmentUnavailable, GpuperfError, InputError, interrupted

BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")


def resolve_device(device: str) -> str:
    """'cuda' or 'cpu'; auto means cuda when a GPU is present, else exit 3."""
    from gpuperf.measure.torch_import import import_torch

    torch = import_torch()
    has_cuda = torch.cuda.is_available()
    if device == "cpu":
        return "cpu"
    if not has_cuda:
        raise EnvironmentUnavailable("no CUDA GPU found; use --device cpu")
    return "cuda"


def gpu_for_prediction(gpu: str | None, device: str, warnings: list[str]) -> Any:
    """The GpuSpec to predict with: --gpu, else the detected GPU; None on the CPU."""
    if device == "cpu":
        if gpu:
            warnings.append("--gpu ignored: measurements on the CPU are not predicted")
        return None
    from gpuperf.hardware.loader import load_gpu

    if gpu:
        return load_gpu(gpu)
    try:
        from gpuperf.hardware.detect import detect_gpu, match_profile

        try:
            return detect_gpu(0)
        except EnvironmentUnavailable:
            import torch

            if not torch.cuda.is_available():  # no GPU: torch's call would assert
                raise EnvironmentUnavailable("no CUDA GPU found; pass --gpu NAME") from None
            props = torch.cuda.get_device_properties(0)
            return match_profile(torch.cuda.get_device_name(0), float(props.total_memory))
    except (EnvironmentUnavailable, ImportError) as exc:
        warnings.append(f"no prediction: {exc}")
        return None


def _predict(ops: list[Any], spec: Any, warnings: list[str]) -> Any:
    if spec is None:
        return None
    try:
        from gpuperf.step.run import predict_ops

        return predict_ops(ops, spec)
    except (ImportError, KeyError, NotImplementedError, GpuperfError) as exc:
        warnings.append(f"no prediction: {exc}")
        return None


@contextlib.contextmanager
def progress(total: int, what: str) -> Iterator[Callable[[str], None]]:
    """A rich progress bar on stderr (only on a terminal); yields advance(label)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from gpuperf.reports.console import console as make_console

    console = make_console(stderr=True)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task(what, total=total)

        def advance(label: str) -> None:
            bar.update(task, advance=1, description=f"{what} {label}")

        yield advance


def _render(result: Any, fmt: str) -> None:
    from gpuperf.reports.tables import render

    render(result, fmt)


def run_ops(
    ops: list[Any],
    device: str,
    gpu: str | None,
    backend: str,
    warmup_ms: float,
    rep_ms: float,
    save: str | None,
    fmt: str,
) -> None:
    """Measure each op (stops at the first failure, after rendering and saving what was done)."""
    from gpuperf.measure.env import environment
    from gpuperf.measure.kernels import WrongResult, measure_op
    from gpuperf.measure.results import MeasureResult, ResultsFile, measured_table, measurement_row
    from gpuperf.measure.timing import Budget

    dev = resolve_device(device)
    warnings: list[str] = []
    spec = gpu_for_prediction(gpu, dev, warnings)
    prediction = _predict(ops, spec, warnings)
    env = environment(dev)
    saver = ResultsFile(save, env, ops[0].kind) if save else None
    budget = Budget(warmup_ms=warmup_ms, rep_ms=rep_ms)
    done: list[Any] = []
    failure: GpuperfError | None = None
    with progress(len(ops), "measuring") as advance:
        try:
            for i, op in enumerate(ops):
                try:
                    m = measure_op(op, dev, budget, None if backend == "auto" else backend)
                except (EnvironmentUnavailable, WrongResult, InputError) as exc:
                    failure = exc
                    break
                predicted = float(prediction.table["time_ms"].iloc[i]) if prediction else None
                if saver is not None:
                    saver.add(measurement_row(m, predicted))
                done.append(m)  # after the save: `done` is what the file holds
                advance(op.shape)
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: show and keep what was done
            failure = interrupted(exc, f"measured {len(done)} of {len(ops)}")
    if done:
        measured_on = env.get("gpu") or env.get("cpu") or dev
        label = f"{measured_on} (measured)" + (f" vs {spec.name} (predicted)" if spec else "")
        table = measured_table(ops, done, spec, prediction)
        result = MeasureResult(table=table, env=env, gpu=label, warnings=warnings)
        if prediction is not None:
            result.total_ms = float(table["time_ms"].sum())
        _render(result, fmt)
    if failure is not None:
        if done and saver is not None:
            failure.args = (f"{failure.args[0]} (earlier results saved in {save})",)
        raise failure


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for deco in reversed(
        [
            click.option(
                "--device",
                type=click.Choice(["auto", "cuda", "cpu"]),
                default="auto",
                show_default=True,
                help="auto: the GPU if there is one, else exit 3.",
            ),
            click.option(
                "--gpu", default=None, help="Profile to predict with (default: detected)."
            ),
            click.option(
                "--backend",
                type=click.Choice(BACKENDS),
                default="auto",
                show_default=True,
                help="Attention kernel (SDPA backend).",
            ),
            click.option("--warmup-ms", type=Finite(min=0), default=25.0, show_default=True),
            click.option("--rep-ms", type=Finite(min=0), default=100.0, show_default=True),
            click.option("--save", default=None, help="Write results (JSON) here, row by row."),
            output_options,
        ]
    ):
        func = deco(func)
    return func


@click.group(
    help="Run the real kernels with PyTorch and compare them with the prediction.\n\n"
    "\b\nExamples:\n"
    "  gpuperf measure gemm 4096 --dtype bf16\n"
    "  gpuperf measure attention --heads 32 --seq 4096 --causal --backend flash\n"
    "  gpuperf measure allreduce --bytes 1K:1G:x4 --nproc 8\n"
    "  gpuperf measure copy --bytes 1G --device cpu --format json\n"
    "  gpuperf measure serve llama3.2-1b --isl 512 --osl 128 --requests 64"
)
def measure() -> None:
    pass


for _cmd in op_commands(run_ops, [common_options], "measure"):
    measure.add_command(_cmd)


def _add_serve() -> None:
    from gpuperf.cli.measure_serve import serve as serve_cmd

    measure.add_command(serve_cmd)


_add_serve()


def run_collective_cmd(
    coll: str,
    nbytes: list[int],
    dtype: str,
    nproc: int | None,
    nnodes: int,
    node_rank: int,
    rdzv_endpoint: str | None,
    device: str,
    gpu: str | None,
    system: str | None,
    timeout: float | None,
    warmup_ms: float,
    rep_ms: float,
    save: str | None,
    fmt: str,
) -> None:
    """Launch the collective under torchrun; render rows (kept on timeout), exit 1 on #wrong."""
    from gpuperf.fileio import check_writable
    from gpuperf.measure import coll_report
    from gpuperf.measure.collectives import Launch, run_collective
    from gpuperf.measure.results import ResultsFile

    if save:  # the file is first written when a row lands, after the ranks have started
        check_writable(save)
    dev = resolve_device(device)
    if nproc is None:
        import torch

        nproc = torch.cuda.device_count() if dev == "cuda" else 2
    launch = Launch(
        nproc=nproc, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint, device=dev
    )
    warnings: list[str] = []
    sys_spec = None
    if system and dev == "cuda":
        from gpuperf.hardware.loader import load_system

        sys_spec = load_system(system)
    spec = gpu_for_prediction(gpu or (sys_spec.gpu.name if sys_spec else None), dev, warnings)
    predict = coll_report.predictor(spec, sys_spec, warnings)
    rows: list[dict[str, Any]] = []
    saver: list[ResultsFile] = []

    def on_row(env: dict[str, Any], raw: dict[str, Any]) -> None:
        row = coll_report.finish_row(raw, predict)
        rows.append(row)
        if save:
            if not saver:
                saver.append(ResultsFile(save, env, coll))
            saver[0].add(row)
        advance(f"{raw['bytes']} B")

    failure: GpuperfError | None = None
    env: dict[str, Any] = {}
    with progress(len(nbytes), coll) as advance:
        try:
            env, _ = run_collective(
                coll,
                nbytes,
                launch,
                dtype=dtype,
                warmup_ms=warmup_ms,
                rep_ms=rep_ms,
                timeout_s=timeout,
                on_row=on_row,
            )
        except GpuperfError as exc:
            failure = exc
        except KeyboardInterrupt as exc:  # the workers are gone already (measure.launch)
            failure = interrupted(exc, f"{coll}: measured {len(rows)} of {len(nbytes)} sizes")
    if rows:
        env = env or (saver[0].data["env"] if saver else {})
        coll_report.render(coll, launch.world, rows, env, warnings, fmt)
    if failure is not None:
        raise failure
    wrong = sum(r["wrong"] for r in rows)
    if wrong:
        raise GpuperfError(f"{coll}: {wrong} wrong elements (#wrong); the results are not valid")


def _collective_command(coll: str) -> click.Command:
    def cmd(**kw: Any) -> None:
        run_collective_cmd(coll, **kw)

    deco = [
        click.option(
            "--bytes",
            "nbytes",
            required=True,
            callback=sweep("bytes"),
            help="Size (nccl-tests convention), a sweep like 1K:1G:x4.",
        ),
        dtype_option(),
        click.option(
            "--nproc",
            type=COUNT,
            default=None,
            help="Ranks per node (default: every GPU; 2 on the CPU).",
        ),
        click.option("--nnodes", type=COUNT, default=1, show_default=True),
        click.option("--node-rank", type=click.IntRange(min=0), default=0, show_default=True),
        click.option("--rdzv-endpoint", default=None, help="host:port of node 0 (multi-node)."),
        click.option(
            "--device",
            type=click.Choice(["auto", "cuda", "cpu"]),
            default="auto",
            show_default=True,
            help="cuda: NCCL; cpu: gloo.",
        ),
        click.option("--gpu", default=None, help="Profile to predict with (default: detected)."),
        click.option("--system", default=None, help="System profile (multi-node prediction)."),
        click.option(
            "--timeout",
            type=Finite(min=0, min_open=True),
            default=None,
            help="Seconds; kill every rank and exit 3 past it.",
        ),
        click.option("--warmup-ms", type=Finite(min=0), default=10.0, show_default=True),
        click.option("--rep-ms", type=Finite(min=0), default=50.0, show_default=True),
        click.option("--save", default=None, help="Write results (JSON) here, size by size."),
        output_options,
    ]
    for d in reversed(deco):
        cmd = d(cmd)
    size_rule = {"allgather": "total output", "reducescatter": "total input"}.get(coll, "buffer")
    return click.command(
        coll,
        help=f"Measure {coll} with torchrun (NCCL on GPUs, gloo on CPUs), like nccl-tests: "
        f"#wrong check, algbw and busbw (size = {size_rule}).\n\n"
        f"Example: gpuperf measure {coll} --bytes 1K:1G:x4 --nproc 8",
    )(cmd)


for _coll in ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv"):
    measure.add_command(_collective_command(_coll))
