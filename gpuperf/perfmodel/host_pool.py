"""The host a GPU profile describes: the median machine of the pool its results came from.

Eager PyTorch is host-bound at small batches (decode above all): a step costs about the CPU time
of issuing its kernels plus, on a new kv length, cuDNN's plan of the attention. That CPU time is
the machine's, not the GPU's, and the machines a GPU kind is lent on differ: 14 H100 machines
issued the same tiny kernels 0.93-1.56x as slowly as the one whose Hugging Face runs were
fitted, and 12 planned the same attention in 33-63 ms. A profile fitted on one fast host
predicts every other host's eager steps too fast.

So the fitted host constants are moved to the pool's median host:
- `factor`: the median over the pool's hosts of each one's host factor (the median, over the tiny
  kernels both timed, of its issue time over the calibration host's), which multiplies the
  per-kernel host constants fitted on the calibration host (host_dispatch_s,
  host_decode_layer_s);
- `plan_s`: the median of the cuDNN plan times the pool's hosts measured (host_attn_plan_s).

Every result file that carries a host probe is one host of the pool (e2e_hf.py's `launch`
costs and plan, a serving run's `attn_plan_ms`, sdpa_shape_probe.py's timed SDPA calls). The
numbers are probes of the machines, not fitted to any model run (the hf_probe factor below is
read through the model: the host under which it predicts the probe step).

The tiny kernels rank machines only roughly: Hugging Face's step is mostly Python (module
calls, views, cache bookkeeping) around its kernels, and machines that issued tiny kernels
alike ran the same eager decode step up to 2x apart. Files from e2e_hf.py also carry its
`hf_probe`: a 32-layer Llama at width 256 (kernels of a few µs) decoding eagerly on a
DynamicCache, on new kv lengths and then on the same lengths again. Its step on met lengths is
Hugging Face's host work alone, kernel by kernel; its factor is the k for which the model,
with the calibration host's per-kernel constants times k, predicts that step (hf_factor); the
step on new lengths less it is cuDNN's plan as a Hugging Face step pays it (recorded; the plan
stays the standalone probe's, which every machine of the pool ran). Where three or more
machines carry it, the pool's factor is the median of these instead of the tiny kernels'.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpuperf.fileio import read_json_object
from gpuperf.hardware.spec import GpuSpec, ModelParams

MIN_HOSTS = 3  # fewer probed hosts than this: no pool, the calibration host stays


@dataclass(frozen=True, slots=True)
class HfStep:
    """One hf_probe of a result file: the probe model's eager decode step on kv lengths the
    process had met (s), and cuDNN's plan as that step paid it (s; None when its new lengths were
    not new to the process)."""

    config: dict[str, Any]
    batch: int
    ctx: int
    seen_s: float
    plan_s: float | None


@dataclass(frozen=True, slots=True)
class HostProbe:
    """One machine's probes: its tiny eager kernels' issue time (µs, by kernel), its cuDNN
    plan time of a new attention shape (s), its hf_probe steps; None (or none) for what it did
    not measure."""

    source: str
    launch_us: dict[str, float] | None
    plan_s: float | None
    hf: tuple[HfStep, ...] = ()


@dataclass(frozen=True, slots=True)
class TypicalHost:
    """The pool's median host against the calibration host."""

    factor: float | None  # None: too few hosts timed their launches
    plan_s: float | None  # None: too few hosts timed a plan
    factors: tuple[float, ...]
    plans_s: tuple[float, ...]
    basis: str = "tiny kernels"  # what the factors compare: "tiny kernels" or "hf step"


def _time(v: Any) -> float | None:
    """A measured time: a positive, finite number (not a bool); None for anything else."""
    ok = isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < math.inf
    return float(v) if ok else None


def launch_host(launch: Any) -> tuple[dict[str, float] | None, float | None]:
    """A run file's host (e2e_hf.launch_costs): dispatch per tiny kernel (µs) by kernel name,
    and the cuDNN plan time (s); None for what it did not measure (or measured as no time)."""
    if not isinstance(launch, dict):
        return None, None
    pre = "host_dispatch_us/"
    us = {k[len(pre):]: t for k, v in launch.items()
          if k.startswith(pre) and (t := _time(v)) is not None}  # fmt: skip
    return us or None, _plan_s(launch.get("attn_plan_ms"))


def _plan_s(ms: Any) -> float | None:
    t = _time(ms)
    return None if t is None else t * 1e-3


def attn_plan_s(rows: Sequence[Any]) -> float | None:
    """host_attn_plan_s from SDPA calls timed on the host (sdpa_shape_probe.json rows, or the live
    calibration's): the median host time of the default backend on kv lengths it had not met,
    less the median on lengths it had. The first call of all is left out (one-time start-up).
    None when there are no such rows; rows without a time or a seen_before flag are not calls."""
    calls = [(r["seen_before"], t) for r in rows if isinstance(r, dict)
             and r.get("backend") == "default" and isinstance(r.get("seen_before"), bool)
             and (t := _time(r.get("host_ms"))) is not None]  # fmt: skip
    new = [t for seen, t in calls if not seen][1:]
    seen = [t for s, t in calls if s]
    if not new or not seen:
        return None
    return max(0.0, statistics.median(new) - statistics.median(seen)) / 1e3


def hf_steps(data: Mapping[str, Any]) -> tuple[HfStep, ...]:
    """The hf_probe steps a result file carries (e2e_hf.py: `hf_probe` before its runs,
    `hf_probe_end` after), in order; a probe without a config or a seen-lengths time is skipped.
    A probe's plan counts only where its kv lengths were new to the process (a ctx no earlier
    probe of the file decoded from)."""
    out, met = [], set()
    for key in ("hf_probe", "hf_probe_end"):
        p = data.get(key)
        if not isinstance(p, dict) or not isinstance(p.get("config"), dict):
            continue
        seen, new = _time(p.get("seen_ms")), _time(p.get("new_ms"))
        ctx, batch = p.get("ctx"), p.get("batch", 1)
        if seen is None or not all(type(v) is int and 0 < v < 2**31 for v in (ctx, batch)):
            continue
        plan = (new - seen) * 1e-3 if new is not None and new > seen and ctx not in met else None
        met.add(ctx)
        out.append(HfStep(p["config"], batch, ctx, seen * 1e-3, plan))
    return tuple(out)


def probe_of(data: Mapping[str, Any], source: str) -> HostProbe | None:
    """The host probe a result file carries, if any."""
    launch_us, plan_s = launch_host(data.get("launch"))
    plan_s = plan_s if plan_s is not None else _plan_s(data.get("attn_plan_ms"))
    rows = data.get("rows")
    if plan_s is None and isinstance(rows, list):
        plan_s = attn_plan_s(rows)  # sdpa_shape_probe.json: SDPA calls timed on the host
    hf = hf_steps(data)
    if launch_us is None and plan_s is None and not hf:
        return None
    return HostProbe(source, launch_us, plan_s, hf)


def scaled(gpu: GpuSpec, k: float, plan_s: float | None = None) -> GpuSpec:
    """`gpu` with its per-kernel host constants (dispatch, per decode layer) times k, and its
    cuDNN plan time `plan_s` (default: times k too, as host work)."""
    p = gpu.params
    plan = p.host_attn_plan_s * k if plan_s is None else plan_s
    params = replace(p, host_dispatch_s=p.host_dispatch_s * k,
                     host_decode_layer_s=p.host_decode_layer_s * k,
                     host_attn_plan_s=plan)  # fmt: skip
    return replace(gpu, params=params)


def _hf_step_s(gpu: GpuSpec, step: HfStep, cfg: Any = None) -> float:
    """The model's time for the probe step on `gpu` (s); `cfg`: step.config already read."""
    from gpuperf.api import predict
    from gpuperf.workloads.config import from_hf_dict

    cfg = from_hf_dict(step.config, name="hf_probe") if cfg is None else cfg
    return predict(cfg, gpu=gpu, mode="decode", impl="eager", batch=step.batch, ctx=step.ctx,
                   kv_lengths="seen").total_ms * 1e-3  # fmt: skip


def hf_factor(cal: GpuSpec, step: HfStep, lo: float = 0.1, hi: float = 20.0) -> float | None:
    """The k for which `cal` (a profile with the calibration host's constants), its per-kernel
    host constants times k, predicts the probe step as measured: bisection, the prediction
    rising with k. None when no k in [lo, hi] reaches it (a step faster than the GPU's kernels
    alone, or slower than any host)."""
    from gpuperf.workloads.config import from_hf_dict

    cfg = from_hf_dict(step.config, name="hf_probe")  # read once, predicted ~40 times

    def at(k: float) -> float:
        return _hf_step_s(scaled(cal, k), step, cfg)

    if not at(lo) <= step.seen_s <= at(hi):
        return None
    for _ in range(40):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if at(mid) < step.seen_s else (lo, mid)
    return math.sqrt(lo * hi)


def _factor_or_none(cal: GpuSpec, step: HfStep) -> float | None:
    """hf_factor, or None for a probe whose config the model cannot build (a file's bad data
    skips that probe, as hf_steps skips a malformed one)."""
    from gpuperf.errors import InputError

    try:
        return hf_factor(cal, step)
    except (InputError, OverflowError, ValueError, TypeError):
        return None


def hf_host(cal: GpuSpec, steps: Sequence[HfStep]) -> tuple[float | None, float | None]:
    """One machine's host from its hf_probe steps: the median of their factors against `cal`
    (hf_factor) and of the plans they paid; None where it has none."""
    ks = [k for s in steps if (k := _factor_or_none(cal, s)) is not None]
    plans = [s.plan_s for s in steps if s.plan_s is not None]
    return (statistics.median(ks) if ks else None,
            statistics.median(plans) if plans else None)  # fmt: skip


def probes(files: Iterable[Path]) -> list[HostProbe]:
    """The host probe of every result file that has one (one file, one machine: files of one
    device session may share a machine, which the pool cannot tell)."""
    out = []
    for path in files:
        probe = probe_of(read_json_object(path, "results file"), path.name)
        if probe is not None:
            out.append(probe)
    return out


def ratio(launch_us: Mapping[str, float] | None, ref: Mapping[str, float] | None) -> float | None:
    """How much slower `launch_us`'s machine issues kernels than `ref`'s: the median over the tiny
    kernels both timed of its time over ref's (one kernel alone is noisy: an eager add read 2.0x
    where five others read 1.3-1.7x on one machine)."""
    if not launch_us or not ref:
        return None
    ratios = [launch_us[k] / ref[k] for k in ref if k in launch_us and ref[k] > 0]
    return statistics.median(ratios) if ratios else None


def mean_launch(found: Iterable[HostProbe]) -> dict[str, float] | None:
    """The calibration host's launch costs: the mean over its files of each kernel's."""
    by: dict[str, list[float]] = {}
    for p in found:
        for k, v in (p.launch_us or {}).items():
            by.setdefault(k, []).append(v)
    return {k: statistics.fmean(v) for k, v in by.items()} or None


def typical(found: Iterable[HostProbe], ref_launch: Mapping[str, float] | None,
            cal: GpuSpec | None = None) -> TypicalHost:  # fmt: skip
    """The pool's median host (module docstring) against the calibration host: its launches
    `ref_launch`, and `cal`, the profile with that host's constants, for the hf_probe steps
    (without it, or with fewer than MIN_HOSTS machines that ran them, the tiny kernels and the
    standalone plans)."""
    found = list(found)
    hf = [hf_host(cal, p.hf)[0] for p in found if p.hf] if cal is not None else []
    hf_factors = tuple(sorted(k for k in hf if k is not None))
    basis = "hf step" if len(hf_factors) >= MIN_HOSTS else "tiny kernels"
    if basis == "hf step":
        factors = hf_factors
    else:
        factors = tuple(sorted(f for p in found
                               if (f := ratio(p.launch_us, ref_launch)) is not None))  # fmt: skip
    plans = tuple(sorted(p.plan_s for p in found if p.plan_s is not None))
    return TypicalHost(
        statistics.median(factors) if len(factors) >= MIN_HOSTS else None,
        statistics.median(plans) if len(plans) >= MIN_HOSTS else None,
        factors,
        plans,
        basis,
    )


def moved(params: ModelParams, host: TypicalHost) -> ModelParams:
    """Host constants fitted on the calibration host, moved to the pool's median host: the
    per-kernel ones times its factor, the plan its median. host_pool_factor records the factor
    (1 when nothing moved)."""
    out = replace(params, extra={**params.extra, "host_pool_factor": 1.0})
    if host.factor is not None:
        out = replace(out, host_dispatch_s=out.host_dispatch_s * host.factor,
                      host_decode_layer_s=out.host_decode_layer_s * host.factor,
                      extra={**params.extra, "host_pool_factor": host.factor})  # fmt: skip
    if host.plan_s is not None:
        out = replace(out, host_attn_plan_s=host.plan_s)
    return out
