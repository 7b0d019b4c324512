"""Predicted vs measured over committed result files: per-op classes and whole-model runs.

Result files live in benchmarks/results/<gpu profile>/*.json, written by real runs:
- op sweeps (`gpuperf measure --save`, benchmarks/device/run_sweeps.py): {"env", "rows": [{"op":
  {...}, "measured_ms", ...}]}; each row is re-predicted from "op" with the current model;
- collectives: the same row shape with Collective ops;
- end to end (benchmarks/device/e2e_hf.py): {"env", "launch": {...}, "runs": [{"config", "scenario",
  "measured_ms"}]}.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gpuperf.errors import InputError, shown
from gpuperf.fileio import read_json_object
from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.calibrate import E2E_CALIBRATION_MODELS, Sample, calibrates, op_class
from gpuperf.perfmodel.host_pool import (
    HfStep,
    hf_host,
    hf_steps,
    launch_host,
    ratio,
    scaled,
)
from gpuperf.perfmodel.ops_io import op_from_dict
from gpuperf.perfmodel.roofline import op_time
from gpuperf.step.memory import measured_window_bytes
from gpuperf.step.track_record import e2e_class, plan_class
from gpuperf.units import MEASURED_MS_RULE, is_measured_ms

# Median |predicted/measured - 1| targets on held-out shapes (the project's accuracy issue).
TARGETS: dict[str, float] = {
    "gemm bf16/fp16 >=1024": 0.05,
    "gemm LLM layer shapes": 0.08,
    "gemm few tokens (M<=32)": 0.10,
    "gemm misaligned": 0.20,
    "gemm fp8 LLM shapes (16-8192 tokens)": 0.08,
    "gemm weight-only int4/int8": 0.10,
    "grouped gemm (MoE experts)": 0.10,
    "grouped gemm fp8 (MoE experts)": 0.10,
    "memory-bound >=16MB": 0.10,
    "mamba-2 scan kernels": 0.15,
    "attention prefill": 0.10,
    "attention decode": 0.15,
    "collective >=1MiB": 0.10,
    "data-parallel training (DDP, FSDP2)": 0.10,
    "tensor-parallel prefill": 0.15,
    "tensor-parallel decode, eager": 0.15,
    "tensor-parallel decode, CUDA graph": 0.15,
    "tensor-parallel training": 0.15,
    "pipeline-parallel prefill and training": 0.15,
    "context-parallel prefill and training": 0.15,
    "whole-model prefill": 0.10,
    "whole-model decode": 0.15,
    "training step": 0.15,
    "checkpointed training step": 0.08,
    "MoE whole model (HF), prefill": 0.10,
    "MoE whole model (HF), decode": 0.10,
    "MoE training step (HF)": 0.15,  # the training step's target
    # torch.cuda.max_memory_allocated against the breakdown's total (no issue sets these: a
    # prediction that says fits must fit, so 10%, the capacity rule's margin)
    "peak memory, inference (one GPU, Hugging Face)": 0.10,
    "peak memory, training (one GPU, Hugging Face)": 0.10,
    "peak memory, inference (parallel plans)": 0.10,
    "peak memory, training (parallel plans)": 0.10,
}


@dataclass(frozen=True, slots=True)
class E2ERun:
    """One whole-model run: an HF config, a scenario, the measured median time."""

    model: str
    config: dict[str, Any]
    scenario: dict[str, Any]
    measured_s: float
    source: str
    launch_us: dict[str, float] | None = None  # that machine's tiny kernels, issued (µs)
    attn_plan_s: float | None = None  # that machine's cuDNN plan of a new attention shape
    hf: tuple[HfStep, ...] = ()  # that machine's hf_probe steps (host_pool.hf_steps)
    peak_bytes: float | None = None  # torch.cuda.max_memory_allocated over the run, if taken
    # a decode run whose cache was prefilled inside the peak's window (e2e_hf.py's, whose note
    # names the cache it grew or replayed; gpuperf validate's are built before it)
    cache_in_window: bool = False


def read_json(path: Path) -> dict[str, Any]:
    return read_json_object(path, "results file")


def _list(data: dict[str, Any], key: str, path: Path) -> list[dict[str, Any]]:
    items = data.get(key, [])
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise InputError(f"{path}: '{key}' must be a list of objects")
    return items


def _ms(value: Any, path: Path) -> float | None:
    """A row's measured_ms; None (not measured) is left out; anything else but a time in ms is
    refused, as `gpuperf report --measured` refuses it."""
    if value is None:
        return None
    if not is_measured_ms(value):
        raise InputError(f"{path}: {MEASURED_MS_RULE}, got {shown(value)}")
    return float(value)


def _env_gpu(env: Any) -> str:
    """The GPU a result file's env names ("" when none)."""
    name = (env.get("gpu") or env.get("name")) if isinstance(env, dict) else None
    return name.strip() if isinstance(name, str) else ""


def measured_on(files: Iterable[Path]) -> list[tuple[Path, str, GpuSpec]]:
    """(file, the GPU it names, its built-in profile) of each result file whose env names a GPU
    that has one; files that name none, or an unknown GPU, are left out."""
    from gpuperf.errors import EnvironmentUnavailable
    from gpuperf.hardware.detect import match_profile

    out = []
    for path in files:
        env = read_json(path).get("env")
        name = _env_gpu(env)
        if not name:
            continue
        memory = env.get("gpu_memory_bytes") or env.get("memory_total_bytes") or 0
        if isinstance(memory, bool) or not isinstance(memory, int | float):
            memory = 0
        try:
            out.append((path, name, match_profile(name, float(memory))))
        except EnvironmentUnavailable:
            continue
    return out


def check_measured_on(files: Iterable[Path], gpu: GpuSpec) -> None:
    """InputError for a result file whose env names a GPU other than `gpu`: measurements of one
    GPU never calibrate another. A file that names no GPU, or one without a built-in profile,
    cannot be told apart and is read as `gpu`'s."""
    for path, name, spec in measured_on(files):
        if not spec.same_chip(gpu):
            raise InputError(
                f"{path} was measured on {name} ({spec.name}), not on {gpu.name} (--gpu): "
                "calibrate each GPU from its own results"
            )


def gpu_of(files: Iterable[Path]) -> str:
    """The profile every result file that names a GPU was measured on (calibrate --from without
    --gpu), or InputError when they name none or several."""
    files = list(files)
    names = sorted({spec.name for _, _, spec in measured_on(files)})
    if not names:
        unknown = sorted({n for n in (_env_gpu(read_json(f).get("env")) for f in files) if n})
        if unknown:  # named, but no built-in profile matches
            raise InputError(f"the --from files were measured on {', '.join(map(repr, unknown))}, "
                             "which no built-in GPU profile matches: give --gpu (a profile name "
                             "or a .toml)")  # fmt: skip
        raise InputError("the --from files name no GPU they were measured on: give --gpu")
    if len(names) > 1:
        raise InputError(f"the --from files were measured on {' and '.join(names)}: calibrate "
                         "each GPU from its own results (--gpu picks one)")  # fmt: skip
    return names[0]


def load_samples(files: Iterable[Path]) -> list[Sample]:
    """Every measured op row (with a positive median) in the given result files."""
    out: list[Sample] = []
    for path in files:
        data = read_json(path)
        held_out = data.get("split") == "held-out"
        for i, row in enumerate(_list(data, "rows", path)):
            ms = _ms(row.get("measured_ms"), path)
            if not row.get("op") or not ms or ms <= 0 or row.get("wrong"):
                continue
            try:
                op = op_from_dict(row["op"])
            except InputError as exc:  # the op's own words, and where the reader finds it
                raise InputError(f"{path}: rows[{i}]: {exc}") from None
            out.append(Sample(op, ms / 1e3, path.name, held_out))
    return out


def load_e2e(files: Iterable[Path]) -> list[E2ERun]:
    out = []
    for path in files:
        data = read_json(path)
        launch_us, plan_s = launch_host(data.get("launch"))
        hf = hf_steps(data)
        for run in _list(data, "runs", path):
            # The first runs stepped a fused AdamW; gpuperf's eager training models torch's
            # default foreach AdamW, so those steps are not the modeled scenario.
            if "fused AdamW" in run.get("note", ""):
                continue
            # A run whose file says why it is not the modeled scenario (kept for the record).
            if run.get("excluded"):
                continue
            if _ms(run.get("measured_ms"), path):
                _check_run(run, path)
                out.append(
                    E2ERun(
                        run["model"],
                        run["config"],
                        run["scenario"],
                        run["measured_ms"] / 1e3,
                        path.name,
                        launch_us,
                        plan_s,
                        hf,
                        _peak(run.get("peak_mem_gib"), 2**30, path),
                        "Cache" in run.get("note", ""),
                    )
                )
    return out


def _peak(value: Any, unit: float, path: Path) -> float | None:
    """A run's measured peak memory in bytes (`value` in units of `unit`), if it has one."""
    if value is None:
        return None
    if isinstance(value, list):  # one per rank: the busiest's
        if not value:
            return None
        for v in value:
            _peak(v, unit, path)  # each a number (InputError otherwise)
        value = max(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InputError(f"{path}: a peak memory must be a positive number, got {shown(value)}")
    return float(value) * unit


def _check_run(run: dict[str, Any], path: Path) -> None:
    """A whole-model run as it is read, before any fitting starts: a model name, a config that
    loads (the same rules as a config.json) and a scenario object; InputError naming the file."""
    from gpuperf.workloads.config import from_hf_dict

    model, config, scenario = run.get("model"), run.get("config"), run.get("scenario")
    if not isinstance(model, str) or not isinstance(config, dict):
        raise InputError(f"{path}: a run needs a string 'model' and a 'config' object")
    if not isinstance(scenario, dict) or not isinstance(scenario.get("mode"), str):
        raise InputError(f"{path}: run {shown(model)} needs a 'scenario' object with a mode")
    try:
        from_hf_dict(config, name=model)
        _scenario_of(scenario)
    except InputError as exc:
        raise InputError(f"{path}: run {shown(model)}: {exc}") from None


def _scenario_of(recorded: dict[str, Any]) -> Any:
    """The Scenario a recorded run's scenario describes (its Scenario fields, less the sizes its
    mode does not use, as the replay drops them: api.for_mode; a size of 0 or an unknown mode
    refused as predict refuses them)."""
    from dataclasses import fields

    from gpuperf.api import for_mode
    from gpuperf.workloads.scenario import Scenario

    names = {f.name for f in fields(Scenario)}
    return Scenario(**for_mode({k: v for k, v in recorded.items() if k in names and v is not None}))


@dataclass(frozen=True)
class MultiGpuRun:
    """A whole model run as a parallel plan (validate_multigpu_*.json)."""

    model: str
    config: dict[str, Any]
    scenario: dict[str, Any]
    implementation: str
    measured_ms: float
    source: str
    host: dict[str, float] | None = None  # that machine's host, measured before the runs
    peak_bytes: float | None = None  # the busiest rank's torch.cuda.max_memory_allocated

    @property
    def gpus(self) -> int:
        sc = self.scenario
        return sc["tp"] * sc["dp"] * sc.get("pp", 1) * sc.get("cp", 1)

    @property
    def label(self) -> str:
        what = "decode graphs" if self.scenario.get("cuda_graphs") else self.scenario["mode"]
        return f"{self.model} {self.implementation} x{self.gpus} {what}"


# The runs comm_overlap_cost is fitted on (benchmarks/fit_multigpu.py); the rest are held out.
MULTIGPU_CALIBRATION = {("llama3-8b", "ddp", 2)}


def is_multigpu_calibration(r: MultiGpuRun) -> bool:
    return (r.model, r.implementation, r.gpus) in MULTIGPU_CALIBRATION


# Runs a model was written after (looked at, nothing fitted): neither calibration nor held out.
# PyTorch's context-parallel ring (cp_torch) was modelled after the first CP runs.
MULTIGPU_DEVELOPMENT = {("validate_multigpu_2gpu_cp.json", "cp")}


def multigpu_split(r: MultiGpuRun) -> str:
    """calibration, development or held-out."""
    if is_multigpu_calibration(r):
        return "calibration"
    return "development" if (r.source, r.implementation) in MULTIGPU_DEVELOPMENT else "held-out"


def load_multigpu(files: Iterable[Path]) -> list[MultiGpuRun]:
    """Every finished, not excluded run of the multi-GPU result files."""
    out = []
    for path in files:
        data = read_json(path)
        host = data.get("host") or None
        if host is not None and not isinstance(host, dict):
            raise InputError(f"{path}: 'host' must be an object")
        for run in _list(data, "runs", path):
            if run.get("error") or run.get("excluded") or not _ms(run.get("measured_ms"), path):
                continue
            fields = ("model", "config", "scenario", "implementation", "measured_ms")
            peak = _peak(run.get("peak_memory_bytes"), 1.0, path)
            out.append(MultiGpuRun(*(run[f] for f in fields), path.name, host, peak))
    return out


# The bare-kernel host time (gpuperf.measure.calibration.measure_host_dispatch) of the machine
# whose Hugging Face runs were fitted for a profile's host constants: the live calibration on
# that H200 machine (benchmarks/results/h200-sxm-141gb/live_calibration_1gpu.toml). The profile
# itself describes the pool's median machine, host_pool_factor times slower (host_pool).
PROFILE_HOST_BARE_S = {"h200-sxm-141gb": 9.36375e-06}


# The same machine's tiny eager kernels, issued (e2e_hf.py's launch costs, µs): the mean over the
# result files whose llama2-7b runs were fitted (host_pool.mean_launch, as gpuperf calibrate and
# benchmarks/host_pool.py take it; a test holds them equal).
PROFILE_LAUNCH_US = {
    "h100-sxm5-80gb": {"add": 9.33, "mul": 8.15, "linear": 13.25, "rms_norm": 9.46,
                       "sdpa": 16.74, "cast_fp32": 10.34},
    "h200-sxm-141gb": {"add": 6.04, "mul": 5.24, "linear": 10.01, "rms_norm": 7.46,
                       "sdpa": 12.82, "cast_fp32": 6.10},
}  # fmt: skip


def host_factor(gpu: GpuSpec, launch_us: dict[str, float] | None) -> float | None:
    """How much slower a machine issues kernels than the host `gpu`'s profile describes: its
    ratio to the calibration host (host_pool.ratio) over the profile's host_pool_factor (the
    pool's median host against the same calibration host)."""
    k = ratio(launch_us, PROFILE_LAUNCH_US.get(gpu.name))
    return None if k is None else k / pool_factor(gpu)


def pool_factor(gpu: GpuSpec) -> float:
    """The profile's host over its calibration host (gpuperf.perfmodel.host_pool); 1 when the
    profile describes the calibration host itself."""
    return float(gpu.params.extra.get("host_pool_factor", 1.0))


def calibration_host(gpu: GpuSpec) -> GpuSpec:
    """The profile with the calibration host's per-kernel constants (its own over its
    host_pool_factor): what host_pool's factors multiply."""
    return scaled(gpu, 1 / pool_factor(gpu), gpu.params.host_attn_plan_s)


def on_e2e_host(gpu: GpuSpec, launch_us: dict[str, float] | None,
                attn_plan_s: float | None = None,
                hf: tuple[HfStep, ...] = ()) -> GpuSpec | None:  # fmt: skip
    """The profile with the host of the machine a whole-model run ran on: with hf_probe steps
    in its file, the calibration host's per-kernel constants times their factor
    (host_pool.hf_host); else scaled by host_factor (its tiny kernels); its cuDNN plan time as
    that machine measured it (runs that did not measure it: scaled like the rest). None when the
    machine was not probed."""
    if hf:
        cal = calibration_host(gpu)
        k, _ = hf_host(cal, hf)
        if k is not None:  # the plan: as the machine measured it alone, else the profile's
            return scaled(
                cal, k, gpu.params.host_attn_plan_s if attn_plan_s is None else attn_plan_s
            )
    k = host_factor(gpu, launch_us)
    return None if k is None else scaled(gpu, k, attn_plan_s)


def on_host(gpu: GpuSpec, host: dict[str, float] | None) -> GpuSpec | None:
    """The profile with another machine's host: its per-kernel constants scaled by that host's
    bare dispatch over the profile host's, its cuDNN plan time as measured. None when either
    host is unknown."""
    ref = PROFILE_HOST_BARE_S.get(gpu.name)
    if not host or ref is None or not host.get("host_dispatch_bare_s"):
        return None
    plan = host.get("host_attn_plan_s", gpu.params.host_attn_plan_s)
    return scaled(gpu, host["host_dispatch_bare_s"] / (ref * pool_factor(gpu)), plan)


# The Scenario fields a whole-model run records and its prediction takes.
SCENARIO_KEYS = ("mode", "batch", "seq", "ctx", "impl", "cuda_graphs", "dtype", "tp", "dp", "cp",
                  "pp", "micro_batch", "zero", "tp_impl", "sequence_parallel", "recompute",
                  "recompute_modules", "weight_dtype", "fp8_scales")  # fmt: skip


def predict_multigpu(r: MultiGpuRun, gpu: GpuSpec) -> Any:
    from gpuperf.api import for_mode, predict
    from gpuperf.workloads.config import from_hf_dict

    cfg = from_hf_dict(r.config, name=r.model)
    kw = for_mode({k: r.scenario[k] for k in SCENARIO_KEYS if k in r.scenario})
    return predict(cfg, gpu=gpu, **kw)


def multigpu_class(r: MultiGpuRun) -> str:
    return "one GPU of the multi-GPU host" if r.gpus == 1 else plan_class(r.scenario)


def multigpu_table(runs: Sequence[MultiGpuRun], gpu: GpuSpec) -> pd.DataFrame:
    """Predict each multi-GPU run with the current model."""
    rows = []
    for r in runs:
        p = predict_multigpu(r, gpu)
        here = on_host(gpu, r.host)
        rows.append(
            {
                "host_ratio": predict_multigpu(r, here).total_ms / r.measured_ms if here else None,
                "class": multigpu_class(r),
                "split": multigpu_split(r),
                "name": r.model,
                "shape": r.label,
                "predicted_ms": p.total_ms,
                "measured_ms": r.measured_ms,
                "ratio": p.total_ms / r.measured_ms,
                "source": r.source,
                **memory_columns(  # what model_worker's window holds (measured_window_bytes)
                    p,
                    r.peak_bytes,
                    "parallel plans" if r.gpus > 1 else "one GPU, Hugging Face",
                    measured_window_bytes(p),
                ),
            }
        )
    return pd.DataFrame(rows)


def memory_columns(p: Any, peak_bytes: float | None, where: str,
                   predicted: float | None = None) -> dict[str, Any]:  # fmt: skip
    """A run's peak memory, predicted (the breakdown's total, or `predicted` bytes where the
    run measured more or less than the step) beside measured, and its class."""
    if peak_bytes is None:
        return {"mem_class": None, "mem_ratio": None}
    mode = "training" if p.scenario.get("mode") == "train" else "inference"
    total = sum(p.memory.values()) if predicted is None else predicted
    return {"mem_class": f"peak memory, {mode} ({where})", "mem_ratio": total / peak_bytes}


def memory_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The whole-model runs' peak memory as rows of their own class (every one held out: no
    memory parameter is fitted), for summarize."""
    if table.empty or "mem_class" not in table:
        return pd.DataFrame()
    t = table[table["mem_class"].notna()]
    return pd.DataFrame({"class": t["mem_class"], "split": "held-out", "name": t["name"],
                         "shape": t["shape"], "ratio": t["mem_ratio"].astype(float)})  # fmt: skip


def op_table(samples: Sequence[Sample], gpu: GpuSpec, system: Any = None) -> pd.DataFrame:
    """One row per sample: class, split, predicted, measured, ratio."""
    rows = []
    for s in samples:
        pred = op_time(s.op, gpu, system).time
        rows.append(
            {
                "class": op_class(s.op),
                "split": "calibration" if calibrates(s) else "held-out",
                "name": s.op.name,
                "shape": s.op.shape,
                "predicted_ms": pred * 1e3,
                "measured_ms": s.measured_s * 1e3,
                "ratio": pred / s.measured_s,
                "source": s.source,
            }
        )
    return pd.DataFrame(rows)


def e2e_table(runs: Sequence[E2ERun], gpu: GpuSpec, with_host: bool = True) -> pd.DataFrame:
    """Predict each whole-model run with the current model (gpuperf.api.predict), and with its
    machine's own host where it was probed (`host_ratio`; not with_host: None, as a fit's loss
    needs no more)."""
    from gpuperf.api import for_mode, predict
    from gpuperf.workloads.config import from_hf_dict

    rows = []
    hosts: dict[str, GpuSpec | None] = {}
    for r in runs:
        sc = r.scenario
        cfg = from_hf_dict(r.config, name=r.model)
        kw = {k: sc[k] for k in ("batch", "seq", "ctx") if sc.get(k)}
        kw |= {
            k: sc[k] for k in ("recompute", "weight_dtype", "fp8_scales", "kv_lengths") if sc.get(k)
        }
        kw |= {
            "mode": sc["mode"],
            "impl": sc.get("impl", "eager"),
            "dtype": sc.get("dtype", "bf16"),
            "cuda_graphs": bool(sc.get("cuda_graphs")),
        }
        kw = for_mode(kw)
        p = predict(cfg, gpu=gpu, **kw)
        filled = None  # a decode run's cache, prefilled in the measured window
        if sc["mode"] == "decode" and r.peak_bytes is not None and r.cache_in_window:
            pre = {k: v for k, v in kw.items() if k not in ("ctx", "kv_lengths", "cuda_graphs")}
            filled = predict(cfg, gpu=gpu, **{**pre, "mode": "prefill", "seq": sc["ctx"]})
        if r.source not in hosts:  # one machine per file: its host once
            hosts[r.source] = (
                on_e2e_host(gpu, r.launch_us, r.attn_plan_s, r.hf) if with_host else None
            )
        here = hosts[r.source]
        p_host = predict(cfg, gpu=here, **kw).total_ms if here is not None else None
        label = (
            f"{sc['mode']} b{sc.get('batch')} "
            + (f"ctx{sc['ctx']}" if sc["mode"] == "decode" else f"s{sc.get('seq')}")
            + ({"full": " ckpt", "op": " op-ckpt"}.get(sc.get("recompute", ""), ""))
            + (" fp8" if sc.get("dtype") == "fp8" else "")
            + ("-row" if sc.get("fp8_scales") == "row" else "")
        )
        rows.append(
            {
                "class": e2e_class(sc, cfg.is_moe),
                "split": "calibration" if r.model in E2E_CALIBRATION_MODELS else "held-out",
                "name": r.model,
                "shape": label + (" graph" if sc.get("cuda_graphs") else f" {sc.get('impl')}"),
                "predicted_ms": p.total_ms,
                "measured_ms": r.measured_s * 1e3,
                "ratio": p.total_ms / (r.measured_s * 1e3),
                "host_ratio": None if p_host is None else p_host / (r.measured_s * 1e3),
                "source": r.source,
                **memory_columns(
                    p, r.peak_bytes, "one GPU, Hugging Face", measured_window_bytes(p, filled)
                ),  # fmt: skip
            }
        )
    return pd.DataFrame(rows)


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per class and split: count, median and 90th percentile of |predicted/measured - 1|."""
    if table.empty:
        return pd.DataFrame(columns=["class", "split", "n", "median_err", "p90_err", "target"])
    t = table.assign(err=(table["ratio"] - 1).abs(), logr=np.log(table["ratio"]))
    out = (
        t.groupby(["class", "split"])
        .agg(
            n=("err", "size"),
            median_err=("err", "median"),
            p90_err=("err", lambda e: float(np.quantile(e, 0.9))),
            bias=("logr", lambda x: math.exp(float(np.median(x))) - 1),
        )
        .reset_index()
    )
    out["target"] = out["class"].map(TARGETS)
    return out.sort_values(["class", "split"]).reset_index(drop=True)
