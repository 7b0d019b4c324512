"""Fitting the time model's parameters (ModelParams) to measurements on one GPU.

A calibrated profile holds *parameters* (efficiencies, latencies, ramps), never measured times.
The fit is coordinate descent on the sum of squared log errors log(predicted / measured), each
accuracy class weighted equally so that a sweep with many copies does not drown the attention or
GEMM classes. Every parameter has bounds that keep it physical (an efficiency stays in (0, 1]).

Rows are split into a calibration set and a held-out set by a stable hash of the op's shape
(`is_calibration`), so the accuracy benchmark can report error on shapes the fit never saw.
"""

from __future__ import annotations

import dataclasses
import json
import math
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from gpuperf.hardware.spec import GpuSpec, ModelParams
from gpuperf.perfmodel.attention import masked_call
from gpuperf.perfmodel.gemm_quant import is_rowwise_fp8
from gpuperf.perfmodel.op_classes import MB16, misaligned, op_class  # noqa: F401 (cal.op_class)
from gpuperf.perfmodel.ops import (
    Attention,
    Collective,
    Copy,
    Elementwise,
    Gemm,
    GroupedGemm,
    Op,
    Scan,
)
from gpuperf.perfmodel.ops_io import op_to_dict
from gpuperf.perfmodel.roofline import op_time

# Kernels whose instruction cost per element is fitted (issue_<fn>, gpuperf.perfmodel.membound).
ISSUE_FNS = ("gelu", "silu", "layernorm", "softmax", "generic")
# Fraction of shapes used for calibration; the rest are held out.
CALIBRATION_SHARE = 0.3
# Classes the model knowingly does not predict: they are reported, never fitted (fitting NCCL's
# slow path for misaligned chunks would bend the ring copy tail that aligned calls show).
UNMODELED = frozenset({"collective misaligned"})

# Parameters fitted from op-level measurements, with physical bounds (lo, hi). Order matters a
# little: latency floors first (they dominate tiny kernels), then bandwidth, then compute.
OP_PARAMS: dict[str, tuple[float, float]] = {
    "kernel_floor_s": (0.5e-6, 10e-6),
    "mem_eff": (0.5, 1.0),
    "bytes_for_half_bw": (1e4, 1e8),
    "l2_bw_factor": (1.0, 4.0),
    "gemm_mem_eff": (0.4, 1.0),
    "gemm_eff": (0.4, 1.0),
    "gemm_fill_ksteps": (0.0, 16.0),
    "gemm_misaligned_eff": (0.05, 1.0),
    "gemm_tail_frac": (0.0, 1.0),
    "attn_eff": (0.2, 1.0),
    "attn_fill_blocks": (0.0, 16.0),
    "mma_latency_s": (0.0, 20e-6),
    "strided_copy_eff": (0.1, 1.0),
    "row_latency_s": (0.0, 20e-6),
    # Thread instructions per element of the kernels that can be issue-bound (membound.issue_time):
    # before the extra-read counts, which could otherwise mimic them on one GPU.
    **{f"issue_{fn}": (1.0, 400.0) for fn in ISSUE_FNS},
    "norm_extra_reads": (0.0, 3.0),
    "softmax_extra_reads": (0.0, 4.0),
    "bw_sm_frac": (0.05, 1.0),
    # NCCL collectives (gpuperf.perfmodel.comm): measured / NCCL-modeled bandwidth and latency.
    "comm_floor_s": (1e-6, 1e-4),
    "comm_bw_eff": (0.3, 1.5),
    "comm_lat_scale": (0.3, 10.0),
    "comm_channel_copy_bw": (2e9, 400e9),  # B/s one NCCL channel copies (comm.ring_copy_tail_us)
    # Kernels of their own (gpuperf.perfmodel.gemm_quant, gemm_grouped): fitted after the rest,
    # each on its own kernels' rows only (LATE).
    "gemm_fp8_eff": (0.3, 1.0),
    "gemm_int8_eff": (0.2, 1.0),
    "gemm_cta_bw": (5e9, 500e9),
    "w4_gemm_eff": (0.005, 0.5),
    "w4_mem_eff": (0.1, 1.0),
    "w4_overlap": (0.0, 1.0),
    "w8_gemm_eff": (1e-4, 0.1),
    "w8_mem_eff": (0.005, 1.0),
    "w8_overlap": (0.0, 1.0),
    "grouped_gemm_eff": (0.3, 1.0),
    "grouped_gemm_floor_s": (0.0, 50e-6),
    "grouped_gemm_mem_eff": (0.3, 1.0),
    "grouped_gemm_fp8_eff": (0.3, 1.0),
    "grouped_gemm_fp8_wide_eff": (0.1, 1.0),
    "grouped_wgrad_overlap": (0.0, 1.0),
    "attn_mask_eff": (0.1, 1.0),
    "attn_mask_bwd_eff": (0.1, 1.0),
    "attn_mask_wide": (0.2, 1.5),
    "attn_mask_dropout_ops": (0.1, 20.0),
    "attn_mask_bwd_dropout_ops": (0.1, 20.0),
    "attn_softmax_ops": (0.5, 8.0),
    "attn_bwd_eff": (0.2, 1.0),
    "attn_bwd_softmax_ops": (0.5, 16.0),
    "attn_bwd_fill_blocks": (0.0, 32.0),
    "attn_dropout_ops": (0.0, 16.0),
    "attn_bwd_dropout_ops": (0.0, 16.0),
    "foreach_launch_s": (0.0, 50e-6),
    "issue_dropout": (1.0, 400.0),
    "issue_cat": (1.0, 400.0),
    "ssd_mem_eff": (0.2, 1.0),  # Mamba-2's scan kernels (gpuperf.perfmodel.scan)
    "ssd_math_eff": (0.05, 1.0),
    "ssd_update_rate": (0.2e9, 20e9),  # a decode step's state update: elements/s per SM
}
# Fitted in log space (they span orders of magnitude).
LOG_PARAMS = {
    "gemm_cta_bw",
    "w4_gemm_eff",
    "w8_gemm_eff",
    "w8_mem_eff",
    "kernel_floor_s",
    "bytes_for_half_bw",
    "comm_lat_scale",
    "comm_floor_s",
    "comm_channel_copy_bw",
    *(f"issue_{fn}" for fn in ISSUE_FNS),
    "issue_dropout",
    "issue_cat",
    "attn_softmax_ops",
    "attn_bwd_softmax_ops",
}


@dataclass(frozen=True, slots=True)
class Sample:
    """One measured op: what ran, how long it took (median, seconds), where it came from."""

    op: Op
    measured_s: float
    source: str = ""
    held_out: bool = False  # its file holds shapes kept out of every fit ("split": "held-out")


# Op fields added after the split was first drawn, with their defaults: left out of the hash
# while at the default, so that adding a field does not move old shapes between the sets.
_ADDED_FIELDS = {
    "nodes": 0,
    "inter_node": False,
    "wdtype": None,
    "scales": "",
    "groups": 0,
    "v_head_dim": 0,
    "window": 0,
    "generic": False,
    "foreach": False,
    "dropout": False,
    "wgrad": False,
    "net_bytes": None,
}


def shape_hash(op: Op) -> int:
    d = op_to_dict(op)
    d.pop("name", None)
    for key, default in _ADDED_FIELDS.items():
        if d.get(key, default) == default:
            d.pop(key, None)
    return zlib.crc32(json.dumps(d, sort_keys=True).encode())


def is_calibration(op: Op) -> bool:
    """Stable split: about CALIBRATION_SHARE of shapes calibrate, the rest are held out."""
    return (shape_hash(op) % 1000) < CALIBRATION_SHARE * 1000


def calibrates(sample: Sample) -> bool:
    """Whether a fit may use `sample`: its shape in the calibration split, and its file not one
    measured to check the model (a result file whose top level says "split": "held-out")."""
    return not sample.held_out and is_calibration(sample.op)


def log_errors(samples: Sequence[Sample], gpu: GpuSpec) -> list[float]:
    """log(predicted / measured) per sample."""
    return [math.log(op_time(s.op, gpu).time / s.measured_s) for s in samples]


_FIELDS = frozenset(f.name for f in dataclasses.fields(ModelParams))


def with_params(gpu: GpuSpec, **values: float) -> GpuSpec:
    """`gpu` with some parameters replaced; names that are not ModelParams fields go to `extra`
    (model-specific knobs such as comm_bw_eff, read by gpuperf.perfmodel.comm)."""
    fields = {k: v for k, v in values.items() if k in _FIELDS}
    extra = {k: v for k, v in values.items() if k not in _FIELDS}
    params = dataclasses.replace(gpu.params, **fields)
    if extra:
        params = dataclasses.replace(params, extra={**params.extra, **extra})
    return dataclasses.replace(gpu, params=params)


def reset_fitted(gpu: GpuSpec) -> GpuSpec:
    """`gpu` with every fitted parameter back at its default, so a fit never depends on the
    previous calibration (fixed facts set in the profile, such as attn_exp_overlap, stay)."""
    defaults = ModelParams()
    # the plan is measured, never kept; the pool factor is the fit's (host_pool.moved)
    names = [*OP_PARAMS, *HOST_PARAMS, "host_attn_plan_s", "host_pool_factor"]
    fields = {n: getattr(defaults, n) for n in names if n in _FIELDS}
    extra = {k: v for k, v in gpu.params.extra.items() if k not in names}
    params = dataclasses.replace(gpu.params, **fields, extra=extra)
    return dataclasses.replace(gpu, params=params)


def param_value(params: ModelParams, name: str) -> float:
    return getattr(params, name) if name in _FIELDS else float(params.extra.get(name, math.nan))


def _loss_fn(samples: Sequence[Sample], gpu: GpuSpec) -> Callable[[GpuSpec], float]:
    by_class: dict[str, list[Sample]] = defaultdict(list)
    for s in samples:
        by_class[op_class(s.op)].append(s)
    # Classes with an accuracy target (accuracy.TARGETS) count fully; the rest (tiny kernels,
    # unusual dtypes) a quarter, so they inform the latency terms without dragging the rest.
    from gpuperf.perfmodel.accuracy import TARGETS

    groups = [
        (cls, rows, (1.0 if cls in TARGETS else 0.25) / len(rows)) for cls, rows in by_class.items()
    ]

    def loss(g: GpuSpec) -> float:
        total = 0.0
        for _cls, rows, w in groups:
            for s in rows:
                e = math.log(op_time(s.op, g).time / s.measured_s)
                # Huber-like: quadratic near zero, linear for gross outliers.
                a = abs(e)
                total += w * (e * e if a < 0.5 else a - 0.25)
        return total

    return loss


GRID = 9  # coarse grid points over a parameter's bounds before golden section


def _golden(f: Callable[[float], float], lo: float, hi: float, iters: int = 24) -> float:
    inv = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - inv * (b - a), a + inv * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - inv * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv * (b - a)
            fd = f(d)
    return (a + b) / 2


_PLAIN = ("", "add", "mul", "cast")


def _plain(op: Op) -> bool:
    """A copy-like kernel: it moves bytes and does next to no arithmetic."""
    return op.kind in ("copy", "elementwise") and getattr(op, "fn", "") in _PLAIN


def _big_stream(op: Op) -> bool:
    """A plain streaming kernel big enough that L2 and launch costs do not matter."""
    return _plain(op) and op.cost().bytes >= 256e6


def _link_only(op: Op) -> bool:
    """A large broadcast: its time is the link transfer alone (no ring copy tail, no latency)."""
    return isinstance(op, Collective) and op.coll == "broadcast" and op.nbytes >= 16 * 2**20


# Staged parameters, in order: each stage fits its parameters on the ops that alone define them,
# then holds them, so the mixed regimes cannot trade them against the rest. Full bandwidth from
# large plain streams; then the launch floor, the ramp and the L2 speed-up from the plain kernels
# of every size (a tiny copy or add is the shortest kernel there is); the NCCL link efficiency
# from large broadcasts, before the ring copy tail that the other collectives add to it.
STAGED: tuple[tuple[tuple[str, ...], Callable[[Op], bool]], ...] = (
    (("mem_eff",), _big_stream),
    (("kernel_floor_s", "bytes_for_half_bw", "l2_bw_factor"), _plain),
    (("comm_bw_eff",), _link_only),
)


def _plain_attention(op: Op) -> bool:
    """A fused attention call of several queries without a mask or dropout."""
    return isinstance(op, Attention) and not (op.mask or op.dropout) and op.q_len > 16


def _masked(op: Op) -> bool:
    """A fused attention call on cuDNN's masked kernels (attention.masked_call)."""
    return isinstance(op, Attention) and masked_call(op)


def _quant_dense(op: Op) -> bool:
    """cuBLASLt's fp8 (per-tensor scales) and int8 kernels."""
    return (
        isinstance(op, Gemm)
        and op.dtype in ("fp8", "int8")
        and op.wdtype is None
        and op.scales != "row"
    )


def _fp8_rowwise(op: Op) -> bool:
    return isinstance(op, Gemm) and is_rowwise_fp8(op)


def _weight_only(bits: str) -> Callable[[Op], bool]:
    return lambda op: isinstance(op, Gemm) and op.wdtype == bits


# Kernels of their own, fitted after everything else on their rows alone (and left out of the
# rest of the fit): the formats' parameters cannot bend the bf16 GEMM, memory or attention terms
# they build on. In order: rowwise fp8 takes the fp8 rate the per-tensor kernels set.
LATE: tuple[tuple[tuple[str, ...], Callable[[Op], bool]], ...] = (
    (("gemm_fp8_eff", "gemm_int8_eff"), _quant_dense),
    (("gemm_cta_bw",), _fp8_rowwise),
    (("w4_gemm_eff", "w4_mem_eff", "w4_overlap"), _weight_only("int4")),
    (("w8_gemm_eff", "w8_mem_eff", "w8_overlap"), _weight_only("int8")),
    (
        ("grouped_gemm_mem_eff", "grouped_gemm_eff", "grouped_gemm_floor_s"),
        lambda op: isinstance(op, GroupedGemm) and not op.wgrad and op.dtype != "fp8",
    ),
    # fp8's grouped kernel (torch._scaled_grouped_mm), on the bf16 kernel's floor and bandwidth
    (
        ("grouped_gemm_fp8_eff", "grouped_gemm_fp8_wide_eff"),
        lambda op: isinstance(op, GroupedGemm) and op.dtype == "fp8",
    ),
    # then the experts' weight gradients, on the rate and bandwidth the forward set
    (("grouped_wgrad_overlap",), lambda op: isinstance(op, GroupedGemm) and op.wgrad),
    # The softmax's share of a pair where it, not the matmuls, binds (head_dim 64 and below);
    # then what builds on it: the masked prefill, the backward kernels, dropout inside attention.
    (
        ("attn_softmax_ops",),
        lambda op: _plain_attention(op) and not op.backward and op.head_dim <= 64,
    ),
    (
        ("attn_bwd_eff", "attn_bwd_softmax_ops", "attn_bwd_fill_blocks"),
        lambda op: _plain_attention(op) and op.backward,
    ),
    (
        ("attn_dropout_ops",),
        lambda op: isinstance(op, Attention) and op.dropout and not op.mask and not op.backward,
    ),
    (
        ("attn_bwd_dropout_ops",),
        lambda op: isinstance(op, Attention) and op.dropout and not op.mask and op.backward,
    ),
    # a mask's pace, forward and backward, on the unmasked kernels' terms; then its dropout
    (
        ("attn_mask_eff", "attn_mask_wide"),
        lambda op: _masked(op) and not (op.backward or op.dropout),
    ),
    (("attn_mask_bwd_eff",), lambda op: _masked(op) and op.backward and not op.dropout),
    (("attn_mask_dropout_ops",), lambda op: _masked(op) and not op.backward and op.dropout),
    (("attn_mask_bwd_dropout_ops",), lambda op: _masked(op) and op.backward and op.dropout),
    # torch's _foreach ops (AdamW), and the dropout kernels of eager modules
    (("foreach_launch_s",), lambda op: isinstance(op, Elementwise) and op.foreach),
    (("issue_dropout",), lambda op: isinstance(op, Elementwise) and op.fn == "dropout"),
    (("issue_cat",), lambda op: isinstance(op, Copy) and op.generic),
    # Mamba-2's chunked-scan kernels (a decode step's state update is a kernel apart, not fitted)
    (
        ("ssd_mem_eff", "ssd_math_eff"),
        lambda op: isinstance(op, Scan) and op.kernel != "state_update",
    ),  # fmt: skip
    (("ssd_update_rate",), lambda op: isinstance(op, Scan) and op.kernel == "state_update"),
)


LATE_PARAMS: tuple[str, ...] = tuple(n for stage, _ in LATE for n in stage)
LATE_ROUNDS = 20


def is_late(op: Op) -> bool:
    """Whether `op` is one of the kernels fitted last, on their own (LATE)."""
    return any(select(op) for _, select in LATE)


def _fit_one(
    loss: Callable[[GpuSpec], float],
    gpu: GpuSpec,
    name: str,
    bounds: tuple[float, float],
    log: bool,
    iters: int = 16,
) -> float:
    """The value of parameter `name` within `bounds` that minimizes loss(gpu with it), in log
    space for parameters that span orders of magnitude: a coarse grid finds the basin, golden
    section refines it between the grid points beside the best. (Golden section alone is lost
    where the loss is flat, as it is over the values at which a latency or issue term never binds:
    ties send it to one end.)"""
    lo, hi = (math.log(bounds[0]), math.log(bounds[1])) if log else bounds

    def f(x: float) -> float:
        return loss(with_params(gpu, **{name: math.exp(x) if log else x}))

    grid = [lo + (hi - lo) * i / (GRID - 1) for i in range(GRID)]
    best = min(range(GRID), key=lambda i: f(grid[i]))
    x = _golden(f, grid[max(best - 1, 0)], grid[min(best + 1, GRID - 1)], iters=iters)
    return math.exp(x) if log else x


def _bounds(name: str) -> tuple[tuple[float, float], bool]:
    return OP_PARAMS[name], name in LOG_PARAMS


def fit(
    samples: Sequence[Sample],
    gpu: GpuSpec,
    names: Iterable[str] | None = None,
    rounds: int = 3,
) -> ModelParams:
    """ModelParams for `gpu` that best explain `samples` (coordinate descent, bounded)."""
    names = [n for n in (names or OP_PARAMS) if n in OP_PARAMS]
    samples = [s for s in samples if op_class(s.op) not in UNMODELED]
    if not samples:
        return gpu.params
    late = [s for s in samples if is_late(s.op)]
    samples = [s for s in samples if not is_late(s.op)]
    current = gpu
    for stage, select in STAGED:
        chosen = [s for s in samples if select(s.op)]
        fitted = [n for n in stage if n in names]
        if fitted and len(chosen) >= 3:
            current = _descend(_loss_fn(chosen, gpu), current, fitted, rounds)
            names = [n for n in names if n not in fitted]
    main = [n for n in names if n not in LATE_PARAMS]
    if samples:
        current = _descend(_loss_fn(samples, gpu), current, main, rounds)
    for stage, select in LATE:
        chosen = [s for s in late if select(s.op)]
        fitted = [n for n in stage if n in names]
        if fitted and len(chosen) >= 3:
            # A stage's few parameters can trade along a valley (the attention backward's
            # efficiency against its per-CTA fill): on its few rows, rounds are cheap.
            current = _descend(_loss_fn(chosen, current), current, fitted, max(rounds, LATE_ROUNDS))
    return current.params


def _descend(
    loss: Callable[[GpuSpec], float], gpu: GpuSpec, names: Sequence[str], rounds: int
) -> GpuSpec:
    """Coordinate descent: each of `names` in turn to its best value until a round gains nothing."""
    current, best = gpu, loss(gpu)
    for _ in range(rounds):
        improved = False
        for name in names:
            value = _fit_one(loss, current, name, *_bounds(name))
            trial = with_params(current, **{name: value})
            trial_loss = loss(trial)
            if trial_loss < best - 1e-12:
                current, best, improved = trial, trial_loss, True
        if not improved:
            break
    return current


def params_toml(params: ModelParams, base: str, source: str, names: Iterable[str]) -> str:
    """A user profile that inherits `base` and sets the fitted [model] parameters `names`."""
    names = list(names)
    lines = [f"# Calibrated by gpuperf: {source}", f'base = "{base}"', "", "[model]"]
    lines += [f"{n} = {getattr(params, n):.6g}" for n in names if n in _FIELDS]
    extra = [n for n in names if n not in _FIELDS and n in params.extra]
    if extra:
        lines += ["", "[model.extra]"] + [f"{n} = {params.extra[n]:.6g}" for n in extra]
    return "\n".join(lines) + "\n"


# Whole-model runs of these models calibrate the host-side parameters; the rest are held out.
E2E_CALIBRATION_MODELS = frozenset({"llama2-7b"})
HOST_PARAMS: dict[str, tuple[float, float]] = {
    "sustained_clock_frac": (0.7, 1.0),
    "host_dispatch_s": (1e-6, 100e-6),
    "host_decode_layer_s": (0.0, 3e-3),
    "graph_launch_s": (0.1e-6, 10e-6),
}
LOG_HOST = {"host_dispatch_s", "graph_launch_s"}


def fit_host(runs: Sequence, gpu: GpuSpec, rounds: int = 2) -> ModelParams:
    """The whole-model parameters (sustained clock, host dispatch, eager-decode layer overhead,
    graph replay cost) from whole-model runs, by coordinate descent on their squared log errors.

    `runs` are accuracy.E2ERun records, predicted with gpuperf.api.predict. Each parameter moves
    only the runs it governs (GPU-bound prefill, host-bound eager runs, graph replays), so the
    joint fit is well posed when the runs cover those regimes.
    """
    from gpuperf.perfmodel.accuracy import e2e_table

    if not runs:
        return gpu.params
    current = gpu

    def loss(g: GpuSpec) -> float:
        return float(sum(math.log(r) ** 2 for r in e2e_table(runs, g, with_host=False)["ratio"]))

    best = loss(current)
    for _ in range(rounds):
        for name, bounds in HOST_PARAMS.items():
            value = _fit_one(loss, current, name, bounds, name in LOG_HOST, iters=14)
            trial = with_params(current, **{name: value})
            trial_loss = loss(trial)
            if trial_loss < best:
                current, best = trial, trial_loss
    return current.params
