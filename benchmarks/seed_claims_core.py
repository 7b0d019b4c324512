"""The machinery behind benchmarks/seed_claims.py: a claim record, the verdict rule, gpuperf
helpers with caches, and look-ups of committed measurements (benchmarks/results/<gpu>/*.json).

A claim is one number (or word) a seed document states. gpuperf's number comes from `predict`
(an expression over gpuperf's Python API and the helpers below; `call` is its text); a measured
number, when a committed result file holds one, from `measured`. The verdict compares the seed
with the measurement when there is one, else with gpuperf:

- exact claims (datasheet numbers, formulas, arithmetic) hold within 2 % (the seeds round);
- estimate claims (times, throughputs) hold within a factor 1.3 (the seeds write "~");
- max / min claims ("< 3 ms", "> 10x") hold when the reference is on the stated side;
- text claims (a bound, an algorithm) hold when the words match.

The claims themselves are data (seed_claims.toml); this module holds what their `predict` and
`measured` expressions call."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpuperf import api
from gpuperf.dtypes import BYTES
from gpuperf.hardware.loader import load_gpu, load_system
from gpuperf.perfmodel.comm import (
    busbw_factor,
    collective_time,
    double_binary_tree_allreduce,
    ring_allgather,
    ring_allreduce,
    ring_reducescatter,
)
from gpuperf.perfmodel.gemm import is_aligned
from gpuperf.perfmodel.ops import Collective, Elementwise, Gemm, Op, Reduce
from gpuperf.perfmodel.ops_io import op_from_dict
from gpuperf.step.memory import (
    kv_cache_bytes,
    optimizer_bytes_per_param,
    train_activation_bytes_per_layer,
)
from gpuperf.step.run import predict_ops
from gpuperf.workloads import single_op
from gpuperf.workloads.config import load_model
from gpuperf.workloads.dp_ops import grad_bytes

# What the claims' expressions (seed_claims.toml) call: their namespace is this module.
__all__ = [
    "A100",
    "BW",
    "D",
    "GEMMS",
    "Gemm",
    "H",
    "MANUAL_GELU",
    "MANUAL_SOFTMAX",
    "MIB",
    "Pred",
    "S",
    "V",
    "act_ratio",
    "all_grads_ms",
    "allreduce",
    "alltoall_mib",
    "ar_pred",
    "b256",
    "block_us",
    "bubble",
    "busbw",
    "busbw_factor",
    "chain_ms",
    "coll_detail",
    "coll_meas",
    "decode_layer_us",
    "double_binary_tree_allreduce",
    "drop_2049",
    "e2e_ms",
    "exposed_dp_ms",
    "fa2_fraction",
    "gelu_ms",
    "gemm_meas",
    "gemm_ratio",
    "gemm_tflops",
    "gpu",
    "k_meas",
    "k_us",
    "kernel_measured",
    "kv_cache_bytes",
    "kv_ratio",
    "launch_us",
    "layer_grad_bytes",
    "mfu_meas",
    "model",
    "moe_state_gb",
    "ms",
    "op_table_us",
    "op_us",
    "per_sm_tflops",
    "per_step_latency_us",
    "plan",
    "plan_pred",
    "predict",
    "prefill_meas",
    "relu_intensity",
    "ring_allgather",
    "ring_allreduce",
    "ring_reducescatter",
    "rope_us",
    "single",
    "smallest_aligned",
    "softmax_ms",
    "system",
    "tc_fma_per_clock",
    "tokens_meas",
    "train_activation_bytes_per_layer",
    "train_part_ms",
]


ROOT = Path(__file__).resolve().parents[1]


RESULTS = ROOT / "benchmarks" / "results"


Kind = Literal["exact", "estimate", "max", "min", "text"]


Value = float | str


TOL_EXACT = 0.02


TOL_ESTIMATE = 1.3


@dataclass(frozen=True)
class Pred:
    """A reference number and how it was obtained (algorithm picked, convention used...)."""

    value: Value
    detail: str = ""


@dataclass(frozen=True)
class Claim:
    """One numerical claim of a seed document (see the module docstring)."""

    seed: str  # "000"
    where: str  # approximate location: section / line
    quote: str  # the seed's words, briefly, in Chinese
    gloss: str  # English gloss
    claimed: Value | None  # the seed's number in `unit` (None: nothing to compare)
    unit: str
    kind: Kind = "estimate"
    predict: Callable[[], Value | Pred] | None = None  # gpuperf's number
    call: str = ""  # the expression behind `predict`, as it ran
    measured: Callable[[], Pred | None] | None = None  # committed measurement, if any
    reason: str = ""  # why it disagrees (or why it cannot be checked)
    id: str = ""  # "000.01": its row in docs/seed-claims.md


@dataclass(frozen=True)
class Verdict:
    status: Literal["holds", "off", "not checkable"]
    factor: float | None = None  # max(seed/ref, ref/seed) for numeric claims
    against: str = ""  # "measured" or "gpuperf"

    def text(self) -> str:
        if self.status != "off" or self.factor is None:
            return self.status
        return f"off ×{self.factor:.3g}"


def as_pred(value: Value | Pred | None) -> Pred | None:
    if value is None or isinstance(value, Pred):
        return value
    return Pred(value)


def judge(claimed: Value | None, kind: Kind, reference: Value | None, against: str) -> Verdict:
    """The verdict rule (module docstring) for one seed value against one reference."""
    if claimed is None or reference is None:
        return Verdict("not checkable")
    if kind == "text" or isinstance(claimed, str) or isinstance(reference, str):
        same = str(claimed).strip().lower() == str(reference).strip().lower()
        return Verdict("holds" if same else "off", None, against)
    c, r = float(claimed), float(reference)
    if c == r:
        return Verdict("holds", 1.0, against)
    if c <= 0 or r <= 0:
        return Verdict("off", math.inf, against)
    factor = max(c / r, r / c)
    if kind == "max":
        ok = r <= c
    elif kind == "min":
        ok = r >= c
    elif kind == "exact":
        ok = abs(c / r - 1) <= TOL_EXACT
    else:
        ok = factor <= TOL_ESTIMATE
    return Verdict("holds" if ok else "off", factor, against)


def evaluate(claim: Claim) -> tuple[Pred | None, Pred | None, Verdict]:
    """(gpuperf's number, the measured number, the verdict) of one claim."""
    pred = as_pred(claim.predict()) if claim.predict else None
    meas = claim.measured() if claim.measured else None
    if meas is not None:
        return pred, meas, judge(claim.claimed, claim.kind, meas.value, "measured")
    ref = pred.value if pred is not None else None
    return pred, meas, judge(claim.claimed, claim.kind, ref, "gpuperf")


gpu = functools.lru_cache(maxsize=None)(load_gpu)


system = functools.lru_cache(maxsize=None)(load_system)


model = functools.lru_cache(maxsize=None)(load_model)


@functools.cache
def predict(name: str = "llama2-7b", gpu_name: str = "h100", **kw: Any) -> Any:
    """api.predict, cached; fp16 by default because the seeds say FP16."""
    kw.setdefault("dtype", "fp16")
    return api.predict(name, gpu=gpu_name, **kw)


@functools.cache
def op_us(kind: str, gpu_name: str = "h100", **params: Any) -> float:
    """One kernel on its own (api.predict_op), in µs."""
    return api.predict_op(kind, gpu=gpu_name, **params).total_ms * 1e3


def op_table_us(pred: Any, name: str) -> float:
    """The time of the row called `name` in a Prediction's table, in µs."""
    rows = pred.table[pred.table["name"] == name]
    if rows.empty:
        raise KeyError(f"no op {name!r} in the prediction")
    return float(rows["time_ms"].sum()) * 1e3


def allreduce(nbytes: float, ranks: int = 8, sys_name: str = "dgx-h100", **kw: Any) -> Any:
    """collective_time of an all-reduce of `nbytes` on `ranks` GPUs of a system (an OpTime)."""
    sysspec = system(sys_name)
    op = Collective(name="allreduce", coll="allreduce", nbytes=int(nbytes), ranks=ranks)
    return collective_time(op, sysspec.gpu, sysspec, **kw)


def coll_detail(t: Any) -> str:
    d = t.detail
    return f"{d['algo']}/{d['proto']}, busbw {d['busbw_gbps']:.0f} GB/s"


@functools.cache
def _result_files(gpu_dir: str) -> tuple[tuple[str, dict[str, Any]], ...]:
    d = RESULTS / gpu_dir
    if not d.is_dir():
        return ()
    return tuple((p.name, json.loads(p.read_text())) for p in sorted(d.glob("*.json")))


def e2e_ms(
    name: str, gpu_dir: str = "h100-sxm5-80gb", *, cuda_graphs: bool = False, **scenario: Any
) -> Pred | None:
    """Median ms of a whole-model run (e2e*.json) whose scenario matches every given key."""
    for fname, data in _result_files(gpu_dir):
        for run in data.get("runs", []):
            sc = run.get("scenario", {})
            if run.get("model") != name or bool(sc.get("cuda_graphs")) != cuda_graphs:
                continue
            if all(sc.get(k) == v for k, v in scenario.items()) and run.get("measured_ms"):
                dt = sc.get("dtype", "")
                return Pred(float(run["measured_ms"]), f"{fname}, {sc.get('impl')} {dt}")
    return None


def launch_us(key: str, gpu_dir: str = "h100-sxm5-80gb") -> Pred | None:
    for fname, data in _result_files(gpu_dir):
        if key in data.get("launch", {}):
            return Pred(float(data["launch"][key]), f"{fname} launch[{key}]")
    return None


def _op_key(op: Any) -> tuple[str, str, str]:
    return (type(op).__name__, op.shape, str(getattr(op, "dtype", "")))


def op_measured_us(gpu_dir: str, ops: list[Op]) -> Pred | None:
    """Sum of the measured medians (µs) of `ops` in op-level result files; None unless all
    of them were measured (matched by type, shape and dtype)."""
    found: dict[tuple[str, str, str], tuple[float, str]] = {}
    for fname, data in _result_files(gpu_dir):
        for row in data.get("rows", []):
            ms = row.get("measured_ms")
            if not row.get("op") or not ms or row.get("wrong"):
                continue
            try:
                key = _op_key(op_from_dict(row["op"]))
            except Exception:  # a record this version cannot read is not a match
                continue
            found.setdefault(key, (float(ms) * 1e3, fname))
    keys = [_op_key(op) for op in ops]
    note = ""
    if keys and any(k not in found for k in keys):
        # fp16 and bf16 share the tensor-core and HBM rates: a bf16 run stands in for fp16
        keys = [(t, s, "bf16" if d == "fp16" else d) for t, s, d in keys]
        note = ", bf16 for fp16"
    if not keys or any(k not in found for k in keys):
        return None
    files = sorted({found[k][1] for k in keys})
    return Pred(math.fsum(found[k][0] for k in keys), ", ".join(files) + note)


def single(kind: str, **params: Any) -> Op:
    """The Op that api.predict_op(kind, **params) times (to look its measurement up)."""
    from gpuperf.dtypes import parse_dtype
    from gpuperf.workloads import single_op as so

    if "dtype" in params:
        params["dtype"] = parse_dtype(params["dtype"])
    if kind in so.COLLECTIVES:
        return so.collective(kind, **params)
    return getattr(so, kind)(**params)


def kernel_measured(kind: str, gpu_name: str = "h100", **params: Any) -> Pred | None:
    """The committed measurement (µs) of the kernel api.predict_op(kind, ...) predicts."""
    return op_measured_us(gpu(gpu_name).name, [single(kind, **params)])


S, H, F, V = 2048, 4096, 11008, 32000


BLOCK_OPS: dict[str, tuple[str, dict[str, Any]]] = {
    "norm": ("norm", {"fn": "rmsnorm", "rows": S, "cols": H, "dtype": "fp16"}),
    "qkv": ("gemm", {"m": S, "n": 3 * H, "k": H, "dtype": "fp16"}),
    "attn": ("attention", {"batch": 1, "heads": 32, "seq": S, "causal": True, "dtype": "fp16"}),
    "o": ("gemm", {"m": S, "n": H, "k": H, "dtype": "fp16"}),
    "gate": ("gemm", {"m": S, "n": F, "k": H, "dtype": "fp16"}),
    "silu": ("elementwise", {"fn": "silu", "numel": S * F, "dtype": "fp16"}),
    "mul": ("elementwise", {"fn": "mul", "numel": S * F, "dtype": "fp16"}),
    "down": ("gemm", {"m": S, "n": H, "k": F, "dtype": "fp16"}),
}


BLOCK_COUNT = {"norm": 2, "qkv": 1, "attn": 1, "o": 1, "gate": 2, "silu": 1, "mul": 1, "down": 1}


def k_us(key: str) -> float:
    kind, params = BLOCK_OPS[key]
    return op_us(kind, **params)


def k_meas(key: str) -> Pred | None:
    kind, params = BLOCK_OPS[key]
    return kernel_measured(kind, **params)


def call(key: str) -> str:
    kind, params = BLOCK_OPS[key]
    args = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return f"api.predict_op({kind!r}, gpu='h100', {args})"


def rope_us() -> float:
    return op_table_us(predict(mode="prefill", seq=S), "L0/attn/rope")


def block_us(keys: tuple[str, ...] = tuple(BLOCK_OPS)) -> float:
    return sum(k_us(k) * BLOCK_COUNT[k] for k in keys) + (rope_us() if "norm" in keys else 0)


GEMMS = ("qkv", "o", "gate", "down")


def decode_layer_us(kind: str) -> float:
    t = predict(mode="decode", ctx=S).table
    return float(t[(t["layer"] == "L0") & (t["kind"] == kind)]["time_ms"].sum()) * 1e3


def layer_grad_bytes() -> float:
    """fp32 gradient of one Llama-2-7B layer: (attention + MLP + 2 norms) params × 4 B."""
    parts = model("llama2-7b").param_breakdown()
    return (parts["attn"] + parts["mlp"] + parts["norms"]) / 32 * 4


def train_part_ms(part: str, batch: int = 1) -> float:
    t = predict(mode="train", seq=S, batch=batch).table
    opt = t["name"].str.startswith("optimizer/")
    bwd = t["name"].str.contains(r"\.(?:bwd|dgrad|wgrad)$")
    mask = {"fwd": ~opt & ~bwd, "bwd": bwd & ~opt, "opt": opt}[part]
    return float(t[mask]["time_ms"].sum())


@functools.cache
def plan(mb: int, gbs: int) -> Any:
    """The seed's 8×H100 training step as a plan (a Prediction, per GPU): Llama-2-7B, FP16,
    data parallel over one DGX H100 with ZeRO-1, gradient buckets reduced under the backward
    (the seed's "overlapped"; Megatron's own default reduces them after it)."""
    return api.predict(
        "llama2-7b",
        system="dgx-h100",
        mode="train",
        dp=8,
        micro_batch=mb,
        global_batch=gbs,
        zero=1,
        dp_overlap=True,
        dtype="fp16",
    )


def plan_pred(mb: int, gbs: int, value: float) -> Pred:
    r = plan(mb, gbs)
    fit = "fits" if r.fits else "does NOT fit"
    mem = sum(r.memory.values()) / 2**30
    return Pred(value, f"ZeRO-1, micro-batch {mb}; {mem:.0f} GiB/GPU, {fit}")


def prefill_meas() -> Pred | None:
    return e2e_ms("llama2-7b", batch=1, seq=S, mode="prefill")


def tokens_meas(pred: Pred | None, tokens: int) -> Pred | None:
    return None if pred is None else Pred(tokens * 1e3 / float(pred.value), pred.detail)


def b256(tps: bool) -> Pred:
    p = predict(mode="decode", ctx=S, batch=256, cuda_graphs=True)
    mem = sum(p.memory.values()) / 2**30
    return Pred(p.tokens_per_s if tps else p.total_ms, f"needs {mem:.0f} GiB, fits={p.fits}")


def mfu_meas() -> Pred | None:
    p = predict(mode="prefill", seq=S, impl="eager")
    m = prefill_meas()
    return None if m is None else Pred(100 * p.mfu * p.total_ms / float(m.value), m.detail)


D = 4.7e6


BW = 450e9


def ar_pred(nbytes: float, scale: float = 1.0, **kw: object) -> Pred:
    t = allreduce(nbytes, **kw)
    return Pred(t.time * 1e6 * scale, coll_detail(t))


def all_grads_ms() -> Pred:
    nbytes = model("llama2-7b").param_count() * 2  # bf16 gradients, the whole model
    t = allreduce(nbytes)
    return Pred(t.time * 1e3, f"{nbytes / 1e9:.1f} GB of bf16 gradients, " + coll_detail(t))


def exposed_dp_ms() -> Pred:
    r = plan(1, 8)
    return Pred(r.extra["breakdown_ms"]["dp_comm"], "DP reduction left after overlap with backward")


def per_step_latency_us() -> Pred:
    t = allreduce(1 << 20, algo="ring", proto="simple")
    return Pred(t.detail["lat_us"] / 14, f"ring/Simple latency {t.detail['lat_us']:.0f} µs / 14")


MIB = 1 << 20


def per_sm_tflops(name: str, dtype: str) -> float:
    g = gpu(name)
    return g.peak(dtype) / g.sms / 1e12


def tc_fma_per_clock() -> float:
    """A100 dense FP16 FLOP/s / (SMs × clock × 4 tensor cores × 2 FLOP per FMA)."""
    g = gpu("a100")
    return g.peak("fp16") / (g.sms * g.boost_clock_mhz * 1e6 * 4 * 2)


def gemm_tflops(m: int, n: int, k: int) -> float:
    return 2 * m * n * k / (op_us("gemm", "a100", m=m, n=n, k=k, dtype="fp16") * 1e-6) / 1e12


def gemm_meas(m: int, n: int, k: int) -> Pred | None:
    p = kernel_measured("gemm", "a100", m=m, n=n, k=k, dtype="fp16")
    return None if p is None else Pred(2 * m * n * k / (float(p.value) * 1e-6) / 1e12, p.detail)


def busbw(nbytes: int, ranks: int) -> Pred:
    t = allreduce(nbytes, ranks)
    nvls = allreduce(nbytes, ranks, nvls=True)
    return Pred(t.detail["busbw_gbps"], f"{t.detail['algo']}; NVLS {nvls.detail['busbw_gbps']:.0f}")


def coll_meas(nbytes: int, ranks: int) -> Pred | None:
    """busbw of a committed allreduce run of this size (none committed yet: returns None)."""
    p = kernel_measured("allreduce", "h100", nbytes=nbytes, ranks=ranks)
    if p is None:
        return None
    algbw = nbytes / (float(p.value) * 1e-6) / 1e9
    return Pred(algbw * busbw_factor("allreduce", ranks), p.detail)


def relu_intensity(dtype: str) -> float:
    return single_op.elementwise("relu", 1 << 20, dtype).cost().intensity


def gemm_ratio(m: int, n: int, k: int, m2: int, n2: int, k2: int, g: str = "a100") -> float:
    """Throughput of the second shape over the first (FLOP/s ratio)."""
    t1 = op_us("gemm", g, m=m, n=n, k=k, dtype="fp16")
    t2 = op_us("gemm", g, m=m2, n=n2, k=k2, dtype="fp16")
    return (m2 * n2 * k2 / t2) / (m * n * k / t1)


def drop_2049() -> Pred:
    r = gemm_ratio(2048, 2048, 2048, 2049, 2049, 2049)
    return Pred("drop" if r < 0.9 else "no drop", f"2049³ runs at {r:.2f}× the FLOP/s")


N = 16384


A100 = "a100"


def _ew(fn: str, n_in: int) -> Elementwise:
    return Elementwise(name=fn, fn=fn, numel=N * N, n_in=n_in, dtype="fp32")


MANUAL_GELU = [
    _ew("mul_scalar", 1),
    _ew("mul", 2),
    _ew("mul", 2),
    _ew("add", 2),
    _ew("mul_scalar", 1),
    _ew("tanh", 1),
    _ew("add_scalar", 1),
    _ew("mul_scalar", 1),
    _ew("mul", 2),
]


MANUAL_SOFTMAX = [
    Reduce("max", "max", N, N, dtype="fp32"),
    _ew("sub", 1),
    _ew("exp", 1),
    Reduce("sum", "sum", N, N, dtype="fp32"),
    _ew("div", 1),
]


def chain_ms(ops: list) -> float:
    return predict_ops(ops, gpu(A100)).total_ms


def gelu_ms() -> float:
    return op_us("elementwise", A100, fn="gelu", numel=N * N, dtype="fp32") / 1e3


def softmax_ms() -> float:
    return op_us("norm", A100, fn="softmax", rows=N, cols=N, dtype="fp32") / 1e3


def kv_ratio(name: str, kv_heads: int) -> float:
    cfg = model(name)
    alt = dataclasses.replace(cfg, num_key_value_heads=kv_heads)
    return kv_cache_bytes(alt, 1, 1, "fp16") / kv_cache_bytes(cfg, 1, 1, "fp16")


def fa2_fraction() -> Pred:
    """FlashAttention-2 paper's A100 setting: 16k tokens (batch 8 × 2048), hidden 2048, d 128."""
    kw = dict(batch=8, heads=16, seq=2048, head_dim=128, causal=False, dtype="fp16")
    t = op_us("attention", A100, **kw) * 1e-6
    frac = single("attention", **kw).cost().flops / t / gpu(A100).peak("fp16")
    return Pred(100 * frac, "forward")


def smallest_aligned(dtype: str) -> int:
    return next(k for k in range(2, 65) if is_aligned(Gemm("k", m=64, n=64, k=k, dtype=dtype)))


@functools.cache
def train_plan(**parallel: Any) -> Any:
    """api.predict of a Llama-2-7B training step (bf16) on one DGX H100, cached."""
    return api.predict("llama2-7b", system="dgx-h100", mode="train", **parallel)


def bubble(v: int) -> float:
    sched = "interleaved" if v > 1 else "1f1b"
    r = train_plan(pp=4, micro_batch=1, global_batch=8, schedule=sched, virtual_stages=v)
    b = r.extra["breakdown_ms"]
    return b["bubble"] / (b["bubble"] + b["compute"])


def act_ratio(recompute: str) -> float:
    def acts(rc: str) -> float:
        r = train_plan(dp=8, micro_batch=1, global_batch=8, zero=1, recompute=rc)
        return r.memory["activations"]

    return 1 - acts(recompute) / acts("none")


DENSE, EXPERT, TP, PP, DP, EP = 50e9, 950e9, 8, 16, 16, 16


PARAM_B = BYTES["bf16"]


GRAD_B = grad_bytes("bf16", eager=False)


OPTIM_B = optimizer_bytes_per_param(PARAM_B, torch_optim=False)


def moe_state_gb(part: str) -> float:
    """Per-GPU bytes with gpuperf's training conventions (step.memory.stage_memory): ZeRO-1
    shards the optimizer over DP, expert states over dp/ep; here dp/ep = 1 replica per expert,
    so nothing shards their states."""
    dense, expert = DENSE / TP / PP, EXPERT / TP / EP
    if part == "dense_w":
        return PARAM_B * dense / 1e9
    if part == "expert_w":
        return PARAM_B * expert / 1e9
    optim = OPTIM_B * (dense / DP + expert / (DP // EP))
    if part == "optim":
        return optim / 1e9
    return ((PARAM_B + GRAD_B) * (dense + expert) + optim) / 1e9 + 15


def alltoall_mib() -> Pred:
    nbytes = 4096 * 2 * 4096 * 2  # tokens·top_k × hidden × bf16, as comm_ops.expert_alltoall
    from gpuperf.perfmodel.ops import Collective

    s = system("dgx-h100")
    t = collective_time(Collective("a2a", "alltoall", nbytes, 8), s.gpu, s)
    return Pred(nbytes / 2**20, f"takes {t.time * 1e6:.0f} µs on 8 H100s")


def ms(p: Pred | None) -> Pred | None:
    return None if p is None else Pred(float(p.value) / 1e3, p.detail)
