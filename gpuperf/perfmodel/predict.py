"""Run the per-op time model over an op list and add it up into a Prediction.

The GPU runs kernels asynchronously behind the CPU that issues them, so the total is not the sum
of kernel times: the host issues kernel i at h_i = i·d (d = per-kernel dispatch cost) and the GPU
starts it at max(h_i, end_{i-1}). When kernels are shorter than d (batch-1 decode in eager
PyTorch) the GPU waits on the host, and the step takes ~n·d however few bytes it moves.
"""

from __future__ import annotations

import functools
import re
from dataclasses import asdict, dataclass, field, replace
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from gpuperf.errors import InputError
from gpuperf.fileio import json_safe
from gpuperf.perfmodel.mfu import model_flops_per_token
from gpuperf.units import fmt_bytes

if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpuperf.hardware.spec import GpuSpec, SystemSpec
    from gpuperf.perfmodel.ops import Op
    from gpuperf.perfmodel.optime import OpTime
    from gpuperf.workloads.scenario import Scenario

GroupBy = Literal["op", "layer", "kind"]
# fmt: off
COLUMNS = (
    "name", "layer", "kind", "shape", "dtype", "flops", "bytes", "intensity", "bound",
    "time_ms", "t_math_ms", "t_mem_ms", "t_overhead_ms", "t_comm_ms", "share",
)
# fmt: on
# Columns that add up when rows are grouped (measured_ms comes from `gpuperf measure`).
SUMMED = ("flops", "bytes", "time_ms", "t_math_ms", "t_mem_ms", "t_overhead_ms", "t_comm_ms")
ADDITIVE = (*SUMMED, "share", "measured_ms")
HOST_BOUND_WARN = 0.3  # warn when the GPU waits on the host this fraction of the time
DECODE_POINTS = 5  # KV-context points at which generate evaluates a decode step


@dataclass
class Prediction:
    """A predicted run: one row per op (GPU kernel) in `table`, totals, MFU and memory."""

    table: pd.DataFrame
    total_ms: float
    tokens_per_s: float | None = None
    mfu: float | None = None  # model FLOPs / (time × dense peak), see mfu_convention
    hfu: float | None = None  # executed (op) FLOPs / (time × dense peak)
    mfu_convention: str = ""
    memory: dict[str, float] = field(default_factory=dict)  # bytes by kind, per GPU
    memory_capacity: float = 0.0  # bytes
    fits: bool = True
    warnings: list[str] = field(default_factory=list)
    gpu: str = ""
    model: str = ""
    scenario: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # ttft_ms, tpot_ms, kernels, host_bound...

    def to_json(self) -> dict[str, Any]:
        """The `--format json` object (ARCHITECTURE contract): keys get added, never renamed."""
        return json_safe(
            {
                "gpu": self.gpu,
                "model": self.model,
                "scenario": self.scenario,
                "total_ms": self.total_ms,
                "tokens_per_s": self.tokens_per_s,
                "mfu": self.mfu,
                "hfu": self.hfu,
                "mfu_convention": self.mfu_convention,
                "memory": self.memory,
                "memory_total": sum(self.memory.values()),
                "memory_capacity": self.memory_capacity,
                "fits": self.fits,
                "warnings": self.warnings,
                "extra": self.extra,
                "ops": self.table.to_dict("records"),
            }
        )


def _op_time(op: Op, gpu: GpuSpec, system: SystemSpec | None) -> OpTime:
    from gpuperf.perfmodel.roofline import op_time

    return op_time(op, gpu, system)


_KEYS: dict[type, attrgetter] = {}


def _shape_key(op: Op) -> tuple:
    """Everything but the name: ops that differ only by layer cost the same."""
    getter = _KEYS.get(type(op))
    if getter is None:
        getter = _KEYS[type(op)] = attrgetter(*op.__slots__[1:])  # slots: name first
    return (type(op), getter(op))


_LAYER = re.compile(r"(?:^|/)(L\d+)(?=/|$)")


def _layer_of(name: str) -> str:
    """'L3/attn/qkv' -> 'L3'; '' outside a layer."""
    m = _LAYER.search(name)
    return m.group(1) if m else ""


def _op_rows(ops: Sequence[Op], gpu: GpuSpec, system: SystemSpec | None) -> dict[str, Any]:
    """Columns (numpy arrays) of the per-op table, share excluded. Identical shapes (the same op
    in every layer) are costed once, then gathered by index."""
    cache: dict[tuple, int] = {}
    uniq: list[tuple] = []
    index = np.empty(len(ops), dtype=np.intp)
    for i, op in enumerate(ops):
        key = _shape_key(op)
        j = cache.get(key)
        if j is None:
            cost, t = op.cost(), _op_time(op, gpu, system)
            j = cache[key] = len(uniq)
            uniq.append(
                (
                    op.kind,
                    op.shape,
                    getattr(op, "dtype", ""),
                    cost.flops,
                    cost.bytes,
                    cost.intensity,
                    t.bound,
                    t.time * 1e3,
                    t.t_math * 1e3,
                    t.t_mem * 1e3,
                    t.t_overhead * 1e3,
                    t.t_comm * 1e3,
                )
            )
        index[i] = j
    names = [op.name for op in ops]
    cols: dict[str, Any] = {"name": names, "layer": [_layer_of(n) for n in names]}
    for col, values in zip(COLUMNS[2:-1], zip(*uniq, strict=True), strict=True):
        cols[col] = np.array(values, dtype=object if isinstance(values[0], str) else float)[index]
    return cols


def simulate_dispatch(times_s: np.ndarray, dispatch_s: float) -> np.ndarray:
    """End time (s) of each kernel when the host issues kernel i at i·dispatch_s (1-based) and the
    GPU runs them in order: end_i = max(h_i, end_{i-1}) + t_i.

    Unrolled, end_i = C_i + max_{j<=i}(h_j - C_{j-1}) with C the prefix sums of t: one cumsum and
    one running max, so thousands of kernels cost microseconds.
    """
    times_s = np.asarray(times_s, dtype=float)
    if times_s.size == 0:
        return times_s
    csum = np.cumsum(times_s)
    if np.ndim(dispatch_s):  # a host cost per kernel
        issue = np.cumsum(dispatch_s)
    else:
        issue = dispatch_s * np.arange(1, times_s.size + 1)
    slack = issue - np.concatenate(([0.0], csum[:-1]))
    return csum + np.maximum.accumulate(slack)


def dispatch_cost(scenario: Scenario | None, gpu: GpuSpec) -> float:
    """Per-kernel host cost: eager dispatch, or graph replay; 0 for independent single ops."""
    if scenario is None:
        return 0.0
    return gpu.params.graph_launch_s if scenario.cuda_graphs else gpu.params.host_dispatch_s


def host_costs(ops: Sequence[Op], scenario: Scenario | None, gpu: GpuSpec) -> np.ndarray | float:
    """Host time before each kernel: the per-kernel cost; in an eager decode step without CUDA
    graphs also host_decode_layer_s at the first kernel of each layer, and host_attn_plan_s at the
    first attention kernel (the step's new kv length: the backend plans that shape once, for all
    layers). A replayed CUDA graph is one launch: its per-kernel cost is a gap on the GPU
    (graph_gap), not host time."""
    if scenario is not None and scenario.cuda_graphs:
        return 0.0
    d = dispatch_cost(scenario, gpu)
    p = gpu.params
    eager_decode = scenario is not None and scenario.impl == "eager" and scenario.mode == "decode"
    if not eager_decode or not (p.host_decode_layer_s or p.host_attn_plan_s):
        return d
    costs = np.full(len(ops), d)
    seen: set[str] = set()
    planned = False
    for i, op in enumerate(ops):
        layer = _layer_of(op.name)
        if layer and layer not in seen:
            seen.add(layer)
            costs[i] += p.host_decode_layer_s
        if not planned and op.kind == "attention":
            planned = True
            costs[i] += p.host_attn_plan_s
    return costs


def graph_gap(scenario: Scenario | None, gpu: GpuSpec) -> float:
    """GPU idle time between two kernels of a replayed CUDA graph (graph_launch_s): the replay
    issues kernels back to back, but each still waits for the previous one to drain and for its
    own launch (0.63-0.70 µs per kernel on an H200: Llama-2-7B decode graphs took 7.55 and
    12.17 ms against 6.48 and 11.01 ms of profiled kernels in 1693 and 1661 kernels,
    static_probe_llama2-7b_b1/b16.json). 0 without graphs: eager launches overlap the GPU."""
    if scenario is None or not scenario.cuda_graphs:
        return 0.0
    return gpu.params.graph_launch_s


@functools.lru_cache(maxsize=64)
def sustained(gpu: GpuSpec) -> GpuSpec:
    """The GPU under sustained load: peaks scaled by params.sustained_clock_frac."""
    frac = gpu.params.sustained_clock_frac
    if frac == 1.0:
        return gpu
    peaks = {k: v * frac for k, v in gpu.peak_flops.items()}
    return replace(gpu, peak_flops=peaks)


def _with_share(table: pd.DataFrame) -> pd.DataFrame:
    """Each op's fraction of the GPU-busy time."""
    busy = table["time_ms"].sum()
    table["share"] = table["time_ms"] / busy if busy > 0 else 0.0
    return table


def _peak(gpu: GpuSpec, dtype: str) -> float | None:
    try:
        return gpu.peak(dtype)  # type: ignore[arg-type]
    except (KeyError, InputError):  # no such rate on this GPU: no MFU, not an error here
        return None


def predict_ops(
    ops: Sequence[Op],
    gpu: GpuSpec,
    scenario: Scenario | None = None,
    system: SystemSpec | None = None,
) -> Prediction:
    """Predict an op list run back to back on one GPU.

    With a `scenario` the kernels are issued by a host at the scenario's dispatch cost (eager or
    CUDA graphs) and the total is the simulated end of the last kernel; without one, the ops are
    independent kernels timed on their own (a sweep), and the total is the sum of their times.
    """
    if not ops:
        raise ValueError("predict_ops needs at least one op")
    # A scenario is a whole run back to back: the GPU's sustained clock applies.
    cols = _op_rows(ops, sustained(gpu) if scenario is not None else gpu, system)
    host = host_costs(ops, scenario, gpu)
    d = dispatch_cost(scenario, gpu)
    host_s = float(np.sum(host)) if np.ndim(host) else d * len(ops)
    times_s = np.asarray(cols["time_ms"]) * 1e-3
    total_s = float(simulate_dispatch(times_s + graph_gap(scenario, gpu), host)[-1])
    busy_s = float(times_s.sum())
    table = _with_share(pd.DataFrame(cols, columns=list(COLUMNS)))
    flops = float(table["flops"].sum())
    dtypes = set(table["dtype"].unique()) - {""}
    peak = _peak(gpu, dtypes.pop()) if len(dtypes) == 1 else None
    host_bound = 1.0 - busy_s / total_s if total_s > 0 else 0.0
    pred = Prediction(
        table=table,
        total_ms=total_s * 1e3,
        hfu=flops / (total_s * peak) if peak and total_s > 0 else None,
        memory_capacity=gpu.hbm_bytes,
        gpu=gpu.name,
        scenario=asdict(scenario) if scenario is not None else {},
        extra={
            "kernels": len(ops),
            "gpu_busy_ms": busy_s * 1e3,
            "host_bound": host_bound,
            "dispatch_us": d * 1e6,
            "host_ms": host_s * 1e3,
        },
    )
    if scenario is not None and host_bound > HOST_BOUND_WARN:
        hint = "" if scenario.cuda_graphs else "; CUDA graphs (--cuda-graphs) remove most of it"
        more = host_s - d * len(ops)  # per-layer and attention-plan host costs
        extra = f", plus {more * 1e3:.3g} ms of other host work" if more > 1e-6 else ""
        pred.warnings.append(
            f"host-bound: the GPU waits {host_bound:.0%} of the time for the host "
            f"({len(ops)} kernels × {d * 1e6:.3g} µs of launches{extra}){hint}"
        )
    return pred


# ---------------------------------------------------------------------------------------- models


def _intensity(flops: pd.Series, nbytes: pd.Series) -> np.ndarray:
    """FLOP per byte, 0 where nothing moves through memory."""
    return np.where(nbytes > 0, flops / nbytes.where(nbytes > 0, 1.0), 0.0)


def _build_ops(cfg: Any, scenario: Scenario) -> list[Op]:
    from gpuperf.workloads.transformer import build_ops

    return build_ops(cfg, scenario)


def _memory(cfg: Any, scenario: Scenario) -> dict[str, float]:
    from gpuperf.perfmodel.memory import memory_breakdown

    return {k: float(v) for k, v in memory_breakdown(cfg, scenario).items()}


def predict_model(
    cfg: Any, gpu: GpuSpec, scenario: Scenario, system: SystemSpec | None = None
) -> Prediction:
    """Predict one step of `scenario` (a whole generation for mode=generate) of model `cfg`.

    Per GPU: with tensor/pipeline parallelism the op list is one GPU's share, and MFU divides the
    model FLOPs of the step by tp·pp GPUs. tokens/s counts the tokens of one data-parallel replica.
    """
    if scenario.mode == "generate":
        pred = _predict_generate(cfg, gpu, scenario, system)
    else:
        pred = predict_ops(_build_ops(cfg, scenario), gpu, scenario, system)
        _throughput(pred, cfg, gpu, scenario, scenario.tokens, scenario.tokens)
    pred.model = getattr(cfg, "name", "") or "model"
    pred.scenario = asdict(scenario)
    longest = {"decode": scenario.ctx + 1, "generate": scenario.seq + scenario.new_tokens}.get(
        scenario.mode, scenario.seq
    )
    limit = getattr(cfg, "max_position_embeddings", None)
    if limit and longest > limit:
        pred.warnings.append(
            f"sequences of {longest} tokens exceed the model's {limit} positions "
            "(max_position_embeddings): the prediction extrapolates"
        )
    pred.memory = _memory(cfg, scenario)
    pred.memory_capacity = gpu.hbm_bytes
    need = sum(pred.memory.values())
    pred.fits = need <= gpu.hbm_bytes
    if not pred.fits:
        parts = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in pred.memory.items() if v)
        pred.warnings.insert(
            0,
            f"does not fit: needs {fmt_bytes(need)} per GPU of {fmt_bytes(gpu.hbm_bytes)} "
            f"({parts})",
        )
    return pred


def _throughput(
    pred: Prediction, cfg: Any, gpu: GpuSpec, sc: Scenario, tokens: int, out_tokens: int
) -> None:
    """tokens/s (out_tokens over the total), MFU (model FLOPs of `tokens` over tp·pp GPUs' dense
    peak), HFU (the ops' FLOPs over one GPU's peak: the op list is one GPU's share)."""
    total_s = pred.total_ms * 1e-3
    pred.tokens_per_s = out_tokens / total_s
    per_token, pred.mfu_convention = model_flops_per_token(cfg, sc)
    peak = _peak(gpu, sc.dtype)
    if peak:
        pred.mfu = per_token * tokens / (total_s * peak * sc.tp * sc.pp)
        pred.hfu = float(pred.table["flops"].sum()) / (total_s * peak)


def decode_weights(first: int, count: int, points: int = DECODE_POINTS) -> tuple[np.ndarray, ...]:
    """Context points and weights so that sum_k w_k f(p_k) ≈ sum_{c=first}^{first+count-1} f(c)
    (f linearly interpolated between the points: exact for f linear in the context)."""
    pts = np.unique(np.linspace(first, first + count - 1, min(points, count)).round().astype(int))
    xs = np.arange(first, first + count)
    if pts.size == 1:
        return pts, np.array([float(count)])
    eye = np.eye(pts.size)
    return pts, np.array([np.interp(xs, pts, eye[k]).sum() for k in range(pts.size)])


def _predict_generate(
    cfg: Any, gpu: GpuSpec, sc: Scenario, system: SystemSpec | None
) -> Prediction:
    """Prefill of `seq`, then `new_tokens` decode steps with the KV context growing from `seq`."""
    pre_sc = replace(sc, mode="prefill")
    pre = predict_ops(_build_ops(cfg, pre_sc), gpu, pre_sc, system)
    pts, w = decode_weights(sc.seq, sc.new_tokens)
    steps = []
    for c in pts:  # each step a decode step: its host costs (e.g. the attention plan) apply
        step_sc = replace(sc, mode="decode", ctx=int(c))
        steps.append(predict_ops(_build_ops(cfg, step_sc), gpu, step_sc, system))
    mid = steps[len(steps) // 2].table
    dec = mid.copy()
    if all(len(s.table) == len(mid) for s in steps):
        for col in SUMMED:
            dec[col] = sum(wk * s.table[col].to_numpy() for wk, s in zip(w, steps, strict=True))
    else:  # the op list changes with the context: scale the middle step
        for col in SUMMED:
            dec[col] = mid[col] * sc.new_tokens
    dec["intensity"] = _intensity(dec["flops"], dec["bytes"])
    dec["shape"] = dec["shape"] + f" ×{sc.new_tokens} steps"
    pre_t = pre.table.copy()
    pre_t["name"] = "prefill/" + pre_t["name"]
    dec["name"] = "decode/" + dec["name"]
    table = _with_share(pd.concat([pre_t, dec], ignore_index=True))
    busy = table["time_ms"].sum()

    decode_ms = float(sum(wk * s.total_ms for wk, s in zip(w, steps, strict=True)))
    total_ms = pre.total_ms + decode_ms
    pred = Prediction(
        table=table,
        total_ms=total_ms,
        gpu=gpu.name,
        extra={
            "ttft_ms": pre.total_ms,
            "tpot_ms": decode_ms / sc.new_tokens,
            "decode_ms": decode_ms,
            "decode_tokens_per_s": sc.batch * sc.new_tokens / (decode_ms * 1e-3),
            "decode_ctx_points": [int(p) for p in pts],
            "kernels": pre.extra["kernels"] + len(mid) * sc.new_tokens,
            "gpu_busy_ms": float(busy),
            "host_bound": 1.0 - float(busy) / total_ms if total_ms > 0 else 0.0,
            "dispatch_us": pre.extra["dispatch_us"],
        },
    )
    out_tokens = sc.batch * sc.new_tokens
    _throughput(pred, cfg, gpu, sc, sc.batch * (sc.seq + sc.new_tokens), out_tokens)
    for w_text in [*pre.warnings, *steps[-1].warnings]:
        if w_text not in pred.warnings:
            pred.warnings.append(w_text)
    return pred


# -------------------------------------------------------------------------------------- grouping


def _strip_layer(name: str) -> str:
    """'prefill/L3/attn/qkv' -> 'prefill/attn/qkv'."""
    return _LAYER.sub("", name, count=1).lstrip("/")


def _layer_key(name: str) -> str:
    """'prefill/L3/attn/qkv' -> 'prefill/L3'; names outside a layer keep their full name."""
    m = _LAYER.search(name)
    return name[: m.end()] if m else name


def group(table: pd.DataFrame, by: GroupBy = "op") -> pd.DataFrame:
    """Fold the per-op table: "op" merges identical ops across layers (name without its layer,
    same shape) into one row with a `count`; "layer" sums each layer; "kind" sums each op kind.
    Rows keep the order of first appearance; `bound` is that of the group's slowest op."""
    if by == "op":
        keys = table["name"].map(_strip_layer) + "\x00" + table["shape"].astype(str)
        label = table["name"].map(_strip_layer)
    elif by == "layer":
        keys = label = table["name"].map(_layer_key)
    elif by == "kind":
        keys = label = table["kind"]
    else:
        raise ValueError(f"group by {by!r}: expected op, layer or kind")
    work = table.assign(_key=keys.to_numpy(), _label=label.to_numpy())
    grouped = work.groupby("_key", sort=False)
    add = [c for c in ADDITIVE if c in table.columns]
    out = grouped[add].sum()
    out["count"] = grouped.size()
    slowest = table.loc[grouped["time_ms"].idxmax().to_numpy()].set_index(out.index)
    out["name"] = grouped["_label"].first()
    firsts = [c for c in table.columns if c not in add and c not in ("name",)]
    for col in firsts:
        out[col] = slowest[col] if col == "bound" else grouped[col].first()
    if by == "op" and "layer" in out.columns:
        first, last = out["layer"], grouped["layer"].last()
        out["layer"] = first.where(first == last, first + "-" + last)
    else:
        out["shape"] = ""
    if by == "layer":  # a layer mixes kinds; ops outside layers keep theirs
        out["kind"] = out["kind"].where(out["count"] == 1, "layer")
    if by != "op":
        out["dtype"] = grouped["dtype"].agg(lambda s: "/".join(dict.fromkeys(s)))
    out["intensity"] = _intensity(out["flops"], out["bytes"])
    if "measured_ms" in out.columns and "error_pct" in out.columns:
        out["error_pct"] = 100 * (out["time_ms"] - out["measured_ms"]) / out["measured_ms"]
    if "measured_ms" in out.columns:
        for col, scale in (("tflops", 1e-9), ("gbps", 1e-6)):
            if col in out.columns:
                base = "flops" if col == "tflops" else "bytes"
                out[col] = out[base] / out["measured_ms"] * scale
    cols = ["name", "count", *[c for c in table.columns if c != "name"]]
    return out.reset_index(drop=True)[cols]
