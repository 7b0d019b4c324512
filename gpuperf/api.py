"""The Python API: what the CLI calls, and what notebooks call.

>>> from gpuperf import api
>>> p = api.predict("llama2-7b", gpu="h100", mode="prefill", seq=2048)
>>> p.total_ms, p.tokens_per_s, p.mfu                       # doctest: +SKIP
>>> p.table.sort_values("time_ms").tail()                   # doctest: +SKIP
>>> api.predict_op("gemm", gpu="a100", m=8192, n=8192, k=8192).total_ms  # doctest: +SKIP

Models and GPUs may be names ("llama2-7b", "h100"), paths (a config.json, a profile .toml), or
the loaded objects (ModelConfig, GpuSpec, SystemSpec). Nothing here imports torch.
"""

from __future__ import annotations

import difflib
import inspect
import os
from typing import TYPE_CHECKING, Any

from gpuperf.dtypes import parse_dtype
from gpuperf.errors import InputError, shown, unknown_argument
from gpuperf.units import MAX_VALUE
from gpuperf.workloads.scenario import MODES, PARALLEL_FIELDS

if TYPE_CHECKING:
    from gpuperf.hardware.spec import GpuSpec, SystemSpec
    from gpuperf.step.result import Prediction
    from gpuperf.workloads.config import ModelConfig

    GpuLike = str | os.PathLike[str] | GpuSpec
    SystemLike = str | os.PathLike[str] | SystemSpec
    ModelLike = str | os.PathLike[str] | ModelConfig

DEFAULT_GPU = "h100"
# Parallel options, as Scenario names them (the CLI's --tp ... --nvls).
PARALLEL = PARALLEL_FIELDS


def _of_type(value: Any, what: str, cls_name: str) -> Any:
    """`value` when it is the loaded object (by class name: no import), else InputError."""
    if type(value).__name__ != cls_name:
        raise InputError(f"{what} must be a name, a path or a {cls_name}, got {value!r}")
    return value


def resolve_gpu(gpu: GpuLike | None, system: SystemSpec | None = None) -> GpuSpec:
    """A GpuSpec from a name, alias, path, "auto", or a GpuSpec; None means the system's GPU
    (or h100 without a system)."""
    if gpu is None:
        return system.gpu if system is not None else resolve_gpu(DEFAULT_GPU)
    if isinstance(gpu, str | os.PathLike):
        from gpuperf.hardware.loader import load_gpu

        return load_gpu(os.fspath(gpu))
    return _of_type(gpu, "gpu", "GpuSpec")


def resolve_system(system: SystemLike | None) -> SystemSpec | None:
    if system is None:
        return None
    if not isinstance(system, str | os.PathLike):
        return _of_type(system, "system", "SystemSpec")
    from gpuperf.hardware.loader import load_system

    return load_system(os.fspath(system))


def resolve_model(model: ModelLike) -> ModelConfig:
    if isinstance(model, str | os.PathLike):
        from gpuperf.workloads.config import load_model

        return load_model(os.fspath(model))
    return _of_type(model, "model", "ModelConfig")


def _dtype(value: str | None, what: str) -> Any:
    weights = what == "weight_dtype"
    return None if value is None else parse_dtype(value, weights=weights, what=what)


def predict(
    model: ModelLike,
    gpu: GpuLike | None = None,
    mode: str = "prefill",
    batch: int = 1,
    seq: int | None = None,
    ctx: int | None = None,
    new_tokens: int | None = None,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    impl: str = "fused",
    cuda_graphs: bool = False,
    attn: str = "flash",
    weight_dtype: str | None = None,
    fp8_scales: str = "tensor",
    mla: str = "auto",
    kv_lengths: str = "new",
    system: SystemLike | None = None,
    nodes: int | None = None,
    **parallel: Any,
) -> Prediction:
    """Predict one step of `model` on `gpu`, or on every GPU of a parallel plan (per GPU).

    mode: prefill (batch × seq tokens), decode (one token per sequence against a KV cache of ctx),
    generate (an answer of new_tokens to a prompt of seq: the prefill samples the first token,
    new_tokens - 1 decode steps the rest; extra has ttft_ms and tpot_ms), or
    train (forward + backward + AdamW over batch × seq); seq and ctx default to 2048,
    new_tokens to 128, and a size the mode does not use is refused. impl "eager" issues one
    kernel per PyTorch op (unfused); "compile" (training) runs PyTorch's framework around
    torch.compile'd layers (torchtitan's recipe; recompute="op" is its per-op checkpointing);
    cuda_graphs replays the step as a graph (cheap launches); attn "math" materializes the
    attention scores.
    weight_dtype "int4"/"int8": weight-only quantized GEMMs with `dtype` activations;
    fp8_scales "tensor"/"row": how dtype="fp8" GEMMs scale; mla "naive"/"absorbed": the
    attention form of an MLA model (auto: what `impl` runs); kv_lengths "new" (each eager
    decode step meets a kv length the process has not met: cuDNN plans it) or "seen" (a
    warmed-up process: no plans).
    parallel: the Scenario's tp, pp, dp, cp, ep, micro_batch,
    global_batch, zero, recompute, recompute_modules (with recompute="selective": Megatron's
    --recompute-modules, e.g. ("layernorm", "moe_act")), sequence_parallel, tp_impl,
    tp_overlap, tp_allreduce,
    schedule, virtual_stages, nvls (see gpuperf.workloads.scenario). gpu=None means h100, or
    the GPU of `system`; nodes counts nodes of `system`. One GPU is the plan whose degrees are
    all 1.

    Example:
        >>> p = predict("llama2-7b", gpu="h100", mode="decode", batch=1, ctx=4096)
        >>> round(p.total_ms, 1), p.extra["host_bound"]     # doctest: +SKIP
        >>> predict("llama3-70b", mode="train", system="dgx-h100", nodes=4, tp=8, pp=4,
        ...         global_batch=64, micro_batch=1).extra["breakdown_ms"]  # doctest: +SKIP
    """
    from gpuperf.step.plan import place
    from gpuperf.step.run import predict as run_predict
    from gpuperf.workloads.scenario import Scenario

    unknown = sorted(set(parallel) - set(PARALLEL))
    if unknown:
        raise unknown_argument(unknown[0], [*inspect.signature(predict).parameters, *PARALLEL])
    if nodes is not None and (not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1):
        raise InputError(f"nodes must be a positive integer, got {nodes!r}")
    sizes = mode_sizes(mode, {"seq": seq, "ctx": ctx, "new_tokens": new_tokens}, PREDICT_SIZES)
    gpu_spec, sys_spec = hardware(gpu, system)
    cfg = resolve_model(model)
    scenario = Scenario(
        mode=mode,  # type: ignore[arg-type]
        batch=batch,
        **{k: PREDICT_DEFAULTS[k] if v is None else v for k, v in sizes.items()},
        dtype=_dtype_required(dtype),
        kv_dtype=_dtype(kv_dtype, "kv_dtype"),
        impl=impl,  # type: ignore[arg-type]
        cuda_graphs=cuda_graphs,
        attn=attn,  # type: ignore[arg-type]
        weight_dtype=_dtype(weight_dtype, "weight_dtype"),
        fp8_scales=fp8_scales,  # type: ignore[arg-type]
        mla=mla,  # type: ignore[arg-type]
        kv_lengths=kv_lengths,  # type: ignore[arg-type]
        **parallel,
    )
    return run_predict(cfg, scenario, place(cfg, scenario, gpu_spec, sys_spec, nodes))


# predict's sizes where the caller gives none, and the modes each one applies to.
PREDICT_DEFAULTS = {"seq": 2048, "ctx": 2048, "new_tokens": 128}
PREDICT_SIZES = {"seq": ("prefill", "generate", "train"), "ctx": ("decode",),
                  "new_tokens": ("generate",)}  # fmt: skip


def mode_sizes(mode: Any, sizes: dict[str, Any], applies: dict[str, tuple[str, ...]]
               ) -> dict[str, Any]:  # fmt: skip
    """`sizes` back, after an InputError for one given (not None) to a mode it does not apply to
    (`--mode train --ctx 100`): predict and search refuse it alike. An unknown mode is left to
    the caller's own check."""
    if not (isinstance(mode, str) and mode in MODES):
        return sizes
    for name, value in sizes.items():
        if value is not None and mode not in applies[name]:
            *rest, last = applies[name]
            modes = f"{', '.join(rest)} and {last}" if rest else last
            flag = "--" + name.replace("_", "-")
            raise InputError(f"{name} ({flag}) applies to mode {modes}, not {mode}")
    return sizes


def for_mode(kw: dict[str, Any]) -> dict[str, Any]:
    """predict's keyword arguments `kw` without the sizes its mode does not use: for callers that
    replay a recorded scenario holding every size (a decode run's seq)."""
    mode = kw.get("mode", "prefill")
    return {k: v for k, v in kw.items() if k not in PREDICT_SIZES or mode in PREDICT_SIZES[k]}


def _dtype_required(value: Any) -> Any:
    if not isinstance(value, str):
        raise InputError(f"dtype must be a name such as bf16, got {value!r}")
    return parse_dtype(value)


def hardware(gpu: GpuLike | None, system: SystemLike | None) -> tuple[GpuSpec, SystemSpec | None]:
    """The GPU and system named, the GPU checked against the system's own: every command that
    takes --gpu beside --system refuses another GPU than the system's."""
    sys_spec = resolve_system(system)
    gpu_spec = resolve_gpu(gpu, sys_spec)
    _check_gpu_in_system(gpu_spec, sys_spec)
    return gpu_spec, sys_spec


def _check_gpu_in_system(gpu: GpuSpec, system: SystemSpec | None) -> None:
    """A system's GPUs are its own: another GPU is refused, a calibrated profile of the same
    chip (same architecture, SMs and memory) is allowed."""
    if system is None or gpu is system.gpu:
        return
    own = system.gpu
    if not gpu.same_chip(own):
        raise InputError(
            f"{system.name} is built of {own.name}; --gpu {gpu.name} is another GPU "
            "(drop --gpu, or describe a system of those GPUs in a .toml)"
        )


OP_KINDS = ("gemm", "attention", "elementwise", "norm", "copy")


# predict_op's size arguments: integers only (a bool is not a size, nor is a float).
_OP_SIZES = frozenset(("m", "n", "k", "numel", "rows", "cols", "nbytes", "batch", "heads", "seq",
                       "head_dim", "kv_heads", "kv_len", "ranks"))  # fmt: skip


def predict_op(
    kind: str, gpu: GpuLike | None = None, system: SystemLike | None = None, **params: Any
) -> Prediction:
    """Predict one kernel on its own (no host overhead): the time a CUDA-event benchmark reports.

    kind and params (as gpuperf.workloads.single_op builds them):
      gemm: m, n=m, k=m, dtype                       attention: batch, heads, seq, head_dim=128,
      elementwise: fn (add|mul|relu|silu|gelu), numel    kv_heads, kv_len, causal, dtype
      norm: fn (rmsnorm|layernorm|softmax), rows, cols   copy: nbytes
      allreduce|allgather|reducescatter|alltoall|broadcast: nbytes, ranks, dtype (needs a system
      for the link model, e.g. system="dgx-h100")

    Example:
        >>> p = predict_op("gemm", gpu="h100", m=8192, n=8192, k=8192)
        >>> p.table.loc[0, ["time_ms", "bound"]]            # doctest: +SKIP
        >>> predict_op("allreduce", system="dgx-h100", nbytes=1 << 30, ranks=8)  # doctest: +SKIP
    """
    from gpuperf.step import track_record
    from gpuperf.step.run import predict_ops
    from gpuperf.workloads import single_op

    builders = {k: getattr(single_op, k) for k in OP_KINDS}
    if not isinstance(kind, str):
        raise InputError(f"op kind must be a name such as 'gemm', got {shown(kind)}")
    if kind in single_op.COLLECTIVES:
        params = {"coll": kind, **params}
        builder = single_op.collective
    elif kind in builders:
        builder = builders[kind]
    else:
        choices = [*OP_KINDS, *single_op.COLLECTIVES]
        close = difflib.get_close_matches(kind, choices, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise InputError(f"unknown op kind {kind!r}{hint} (expected one of: {', '.join(choices)})")
    if "dtype" in params:
        params["dtype"] = parse_dtype(params["dtype"])
    try:
        inspect.signature(builder).bind(**params)
    except TypeError as exc:
        raise InputError(f"{kind}: {exc}") from None
    for key, value in params.items():
        if key in _OP_SIZES and not (key == "kv_heads" and value is None):
            if not isinstance(value, int) or isinstance(value, bool):  # m=True, m=-5.0, nan
                raise InputError(f"{kind}: {key} must be an integer, got {shown(value)}")
            if not 0 < value <= MAX_VALUE:
                raise InputError(f"{kind}: {key} must be positive (at most 2^62), got {value}")
        elif key == "causal" and not isinstance(value, bool):
            raise InputError(f"{kind}: causal must be True or False, got {shown(value)}")
    op = builder(**params)
    gpu_spec, sys_spec = hardware(gpu, system)
    if op.kind == "collective":
        single_op.group(sys_spec, None, op.ranks)  # the ranks fit the GPU or system (as the CLI)
    pred = predict_ops([op], gpu_spec, None, sys_spec)
    pred.extra["track_record"] = track_record.for_ops([op], gpu_spec)
    return pred


# search's sizes where the caller gives none, and the modes each one applies to.
SEARCH_DEFAULTS = {"global_batch": 1024, "seq": 4096, "batch": 1, "ctx": 4096}
_SEARCH_SIZES = {"global_batch": ("train",), "seq": ("train", "prefill"),
                 "batch": ("prefill", "decode"), "ctx": ("decode",)}  # fmt: skip
SEARCH_MODES = ("train", "prefill", "decode")
# What a search enumerates (step.search.plan_specs), so a caller cannot set it.
SEARCH_CHOOSES = ("tp", "pp", "dp", "ep", "micro_batch", "zero", "recompute", "schedule",
                  "virtual_stages")  # fmt: skip
MAX_SEARCH_GPUS = 65536


def search(
    model: ModelLike,
    system: SystemLike,
    gpus: int,
    mode: str = "train",
    global_batch: int | None = None,
    seq: int | None = None,
    batch: int | None = None,
    ctx: int | None = None,
    top: int = 10,
    impl: str = "fused",
    dtype: str = "bf16",
    attn: str = "flash",
    grad_dtype: str = "auto",
    optimizer: str = "auto",
    dp_overlap: bool | None = None,
    tp_overlap: bool = False,
    moe_dispatcher: str = "alltoall",
    ep_overlap: bool = False,
    moe_imbalance: float = 1.0,
    **unknown: Any,
) -> Any:
    """Rank the parallel plans (tp, pp, dp, ep, micro-batch, ZeRO stage, recomputation,
    schedule) of `model` on `gpus` GPUs of `system` by step time; plans that do not fit are
    dropped. Sizes by mode: train splits `global_batch` (default 1024) sequences of `seq` (4096)
    over the replicas; prefill `batch` (1) sequences of `seq`; decode `batch` sequences against
    a KV cache of `ctx` (4096). A size the mode does not use is refused. Returns a
    gpuperf.step.search.SearchResult: .ranked (the `top` fastest), .why, .best (the fastest plan
    as `predict` predicts it: the same step time).

    dtype, attn, grad_dtype, optimizer, dp_overlap, tp_overlap, moe_dispatcher, ep_overlap
    and moe_imbalance are held over every plan, as `predict` takes them, where the plan has what
    each needs: dp_overlap dp > 1, tp_overlap tp > 1, the MoE options ep > 1 (ep_overlap also
    recomputation other than full); the other plans run without. A plan of expert parallelism
    below moe_imbalance cannot be that uneven and is not searched.

    Example:
        >>> r = search("llama2-70b", system="dgx-h100", gpus=64, global_batch=1024, seq=4096)
        >>> r.ranked[0].label(), r.best.total_ms                    # doctest: +SKIP
        >>> search("qwen3-30b-a3b", system="dgx-h100", gpus=16, dtype="fp8",
        ...        moe_dispatcher="hybridep", ep_overlap=True)      # doctest: +SKIP
    """
    from gpuperf.step.search import search as run_search

    if unknown:  # the CLI's "No such option": the plan's degrees are what search chooses
        name = sorted(unknown)[0]
        if name in SEARCH_CHOOSES:
            raise InputError(f"search chooses {name} itself (with the other degrees, micro-batch, "
                             "ZeRO stage and recomputation): drop it")  # fmt: skip
        raise unknown_argument(name, inspect.signature(search).parameters)
    if not isinstance(mode, str) or mode not in SEARCH_MODES:
        raise InputError(f"unknown mode {shown(mode)}; expected one of: {', '.join(SEARCH_MODES)}")
    if not isinstance(impl, str) or impl not in ("fused", "eager", "compile"):
        raise InputError(f"unknown impl {shown(impl)}; expected one of: fused, eager, compile")
    sizes = {"global_batch": global_batch, "seq": seq, "batch": batch, "ctx": ctx}
    for name, value in mode_sizes(mode, sizes, _SEARCH_SIZES).items():
        if value is not None:
            _whole(name, value, MAX_VALUE)
    _whole("gpus", gpus, MAX_SEARCH_GPUS)
    _whole("top", top, MAX_VALUE)
    sizes = {k: SEARCH_DEFAULTS[k] if v is None else v for k, v in sizes.items()}
    sys_spec = resolve_system(system)
    if sys_spec is None:
        raise InputError("search needs a system (e.g. system='dgx-h100'): its nodes and links")
    cfg = resolve_model(model)
    held = dict(dtype=_dtype_required(dtype), attn=attn, grad_dtype=grad_dtype,
                optimizer=optimizer, dp_overlap=dp_overlap, tp_overlap=tp_overlap,
                moe_dispatcher=moe_dispatcher, ep_overlap=ep_overlap,
                moe_imbalance=moe_imbalance)  # fmt: skip
    return run_search(cfg, sys_spec, gpus, mode=mode, top=top, impl=impl,
                      fixed=_search_held(cfg, mode, impl, held, gpus), **sizes)  # fmt: skip


def _search_held(cfg: ModelConfig, mode: str, impl: str, held: dict[str, Any],
                 gpus: int) -> dict[str, Any]:  # fmt: skip
    """The options search holds over its plans (those not at their defaults), refused as predict
    refuses them: on a probe plan with the degrees each needs."""
    from gpuperf.workloads.scenario import Scenario

    defaults = inspect.signature(search).parameters
    held = {k: v for k, v in held.items() if not _same(v, defaults[k].default)}
    moe = [k for k in ("moe_dispatcher", "ep_overlap", "moe_imbalance") if k in held]
    if moe and not cfg.is_moe:
        raise InputError(f"{cfg.name} has no experts: {moe[0]} applies to mixture-of-experts "
                         "models")  # fmt: skip
    if "tp_overlap" in held and (mode != "train" or impl != "fused"):
        raise InputError("tp_overlap overlaps sequence parallelism's collectives, which "
                         "search's plans run in fused training only (mode='train', "
                         "impl='fused')")  # fmt: skip
    probe = dict(mode=mode, impl=impl, **held)
    if "tp_overlap" in held:
        probe.update(tp=2)
    if moe or "dp_overlap" in held:
        probe.update(dp=64, ep=64 if moe else 1)
    Scenario(**probe)
    imb = held.get("moe_imbalance")
    if cfg.is_moe and isinstance(imb, int | float) and not isinstance(imb, bool):
        top = max(e for e in range(1, min(cfg.num_experts, gpus) + 1) if cfg.num_experts % e == 0)
        if imb > top:  # the busiest of ep ranks receives at most ep times the mean
            raise InputError(f"moe_imbalance {imb:g} exceeds every plan's ep (at most {top} of "
                             f"{cfg.name}'s {cfg.num_experts} experts on {gpus} GPUs): the "
                             "busiest of ep ranks receives at most ep times the mean")  # fmt: skip
    return held


def _same(value: Any, default: Any) -> bool:
    """`value` is the default (1 is 1.0, but True is not 1 and None is not False)."""
    if isinstance(value, bool) or isinstance(default, bool) or value is None or default is None:
        return value is default
    if isinstance(value, int | float) and isinstance(default, int | float):
        return value == default
    return type(value) is type(default) and value == default


def _whole(name: str, value: Any, limit: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= limit:
        raise InputError(f"{name} must be a whole number from 1 to {limit:,}, got {shown(value)}")


def serve(
    model: ModelLike,
    gpu: GpuLike | None = None,
    system: SystemLike | None = None,
    engine: str | os.PathLike[str] = "vllm",
    tp: int = 1,
    isl: str | int | None = None,
    osl: str | int | None = None,
    requests: int | None = None,
    rate: float | None = None,
    concurrency: int | None = None,
    trace: str | os.PathLike[str] | None = None,
    seed: int | None = None,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    weight_dtype: str | None = None,
    progress: Any = None,
    **engine_options: Any,
) -> Any:
    """Simulate serving `model` on one replica of `tp` GPUs under continuous batching.

    engine: "hf", "vllm", "sglang", "trtllm" or an engine .toml; engine_options override its
    fields (token_budget, max_seqs, block_size, mem_fraction, chunked_prefill, mixed_prefill,
    cuda_graphs, batch_wait_iters, batch_wait_tokens, step_overhead, per_seq). isl/osl: token
    counts or distributions ("uniform:256:1024", "normal:512:64", "lognormal:512:256"),
    default 512 and 128, drawn with `seed` (default 0); not with a `trace` (its own lengths).
    Arrivals: `requests` all at once, Poisson at `rate` requests/s, a closed loop of
    `concurrency` users, or a JSONL `trace`. Returns a
    gpuperf.step.serve_run.ServeReport (.summary: TTFT/TPOT/E2E percentiles in ms, tokens/s...).

    Example:
        >>> r = serve("llama3-8b", gpu="h100", engine="vllm", isl=512, osl=128, rate=10.0)
        >>> r.summary["ttft_p50_ms"], r.summary["output_tokens_per_s"]  # doctest: +SKIP
    """
    from gpuperf.step.serve_run import run_serve

    gpu_spec, sys_spec = hardware(gpu, system)
    return run_serve(
        resolve_model(model), gpu_spec, sys_spec, engine, tp=tp, isl=isl, osl=osl,
        requests=requests, rate=rate, concurrency=concurrency, trace=trace, seed=seed,
        dtype=_dtype_required(dtype), kv_dtype=_dtype(kv_dtype, "kv_dtype"),
        weight_dtype=_dtype(weight_dtype, "weight_dtype"), progress=progress, **engine_options,
    )  # fmt: skip


def serve_plan(
    model: ModelLike,
    slo: str,
    gpu: GpuLike | None = None,
    system: SystemLike | None = None,
    engine: str | os.PathLike[str] = "vllm",
    gpus: int | None = None,
    tp: int | None = None,
    isl: str | int | None = None,
    osl: str | int | None = None,
    requests: int | None = None,
    seed: int | None = None,
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    weight_dtype: str | None = None,
    progress: Any = None,
    **engine_options: Any,
) -> Any:
    """The highest request rate that meets `slo` ("ttft=500ms,tpot=50ms"; p90 unless a key
    says ttft_p99 ...) on one replica of `tp` GPUs (default 1), or with `gpus` (not with `tp`:
    the search picks it), the best split of them into tensor-parallel replicas and the Pareto
    frontier of tokens/s per GPU against tokens/s per user. Each rate is simulated with
    `requests` (default 300) Poisson arrivals. Returns a gpuperf.step.serve_run.ServePlan.

    Example:
        >>> p = serve_plan("llama3-70b", "ttft=1s,tpot=60ms", system="dgx-h100", gpus=8)
        >>> p.best.tp, p.best.rate                                  # doctest: +SKIP
    """
    from gpuperf.step.serve_run import plan_serving

    gpu_spec, sys_spec = hardware(gpu, system)
    if gpus is not None:
        _whole("gpus", gpus, 4096)
    return plan_serving(
        resolve_model(model), gpu_spec, sys_spec, engine, slo, gpus=gpus, tp=tp, isl=isl,
        osl=osl, requests=requests, seed=seed, dtype=_dtype_required(dtype),
        kv_dtype=_dtype(kv_dtype, "kv_dtype"), weight_dtype=_dtype(weight_dtype, "weight_dtype"),
        progress=progress, **engine_options,
    )  # fmt: skip
