"""One real eager decoder layer, run end to end and compared with the prediction of its ops.

A plain-PyTorch reimplementation of Hugging Face transformers' LlamaDecoderLayer forward (SDPA
attention, DynamicCache), kernel for kernel as gpuperf.workloads.transformer_layers.eager_layer
lists them: RMSNorm as cast, pow, mean, add eps, rsqrt, mul, cast, mul weight; q/k/v as separate
nn.Linear; RoPE with rotate_half; torch.cat of the KV cache and the new K/V (DynamicCache.update);
SDPA (is_causal in prefill, enable_gqa=True as HF passes when there is no mask); o_proj; residual
add; gate, silu, up, mul, down; residual add. It does not import transformers.

Two timings, each one layer per call (gpuperf.measure.timing.time_fn):
- with host dispatch: the eager call issued back to back, as layers of a model are, no L2 flush
  (the host issues each kernel while the GPU may wait for it);
- GPU time (CUDA only): the same layer captured in a CUDA graph and replayed with L2 flushed, so
  the host is out of the way.
The per-kernel host cost of this bare layer is measured too (host clock of one call from an idle
GPU, over its kernel count). It is lower than Hugging Face's own: HF's Python (module hooks,
cache objects, mask logic) costs 17-43 µs per kernel on an H100 host
(benchmarks/results/h100-sxm5-80gb/e2e_hf_run2.json host_probe), a bare loop 7-17 µs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.measure.kernels import WrongResult, rel_err, torch_dtype
from gpuperf.measure.timing import Budget, Timing, time_fn
from gpuperf.perfmodel.ops import Op
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.scenario import Scenario

RMS_EPS = 1e-5  # Llama 2's rms_norm_eps; the value does not change the kernels or their time
# Relative error of the residual branch against fp64: about 40 roundings in a row (bf16 keeps 8
# bits: ~1.2% measured on CPU), far below what a wrong layer gives (a missing causal mask or a
# wrong RoPE sign: tens of percent).
LAYER_TOLERANCE = {"bf16": 5e-2, "fp16": 1e-2, "fp32": 1e-4}
# Aten ops that only make a new tensor header (no kernel) but are not marked as views.
_NO_KERNEL = frozenset(
    {"aten::_unsafe_view", "aten::_reshape_alias", "aten::detach", "aten::lift_fresh"}
)
LAYER_DTYPES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True, slots=True)
class LayerShape:
    """Sizes of one layer call: `batch` sequences of q_len new tokens after `past` cached ones."""

    batch: int
    q_len: int
    past: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    inter: int
    qkv_bias: bool
    linear_bias: bool
    theta: float
    dtype: str

    @property
    def kv_len(self) -> int:
        return self.past + self.q_len


def layer_shape(cfg: ModelConfig, sc: Scenario) -> LayerShape:
    """The layer of `cfg` run as `sc` (prefill or decode); InputError for other layer kinds."""
    why = cfg.unlike_llama()
    if sc.dtype not in LAYER_DTYPES or sc.kv != sc.dtype:
        why.append(f"dtype {sc.dtype}/kv {sc.kv} (needs one of {', '.join(LAYER_DTYPES)})")
    if sc.mode not in ("prefill", "decode"):
        why.append(f"mode {sc.mode} (needs prefill or decode)")
    if why:
        raise InputError(f"the whole-layer run covers Llama-style layers only: {cfg.name} has "
                         + "; ".join(why))  # fmt: skip
    decode = sc.mode == "decode"
    return LayerShape(
        batch=sc.batch,
        q_len=1 if decode else sc.seq,
        past=sc.ctx if decode else 0,
        hidden=cfg.hidden,
        heads=cfg.heads,
        kv_heads=cfg.kv_heads,
        head_dim=cfg.hd,
        inter=cfg.intermediate,
        qkv_bias=cfg.qkv_bias or cfg.linear_bias,
        linear_bias=cfg.linear_bias,
        theta=cfg.rope_theta,
        dtype=sc.dtype,
    )


def layer_ops(cfg: ModelConfig, sc: Scenario) -> list[Op]:
    """The predicted kernels of this layer (transformer_layers.eager_layer), names under L0/."""
    from gpuperf.workloads.transformer_layers import eager_layer, make_dims

    ops = eager_layer(cfg, make_dims(cfg, replace(sc, impl="eager", cuda_graphs=False)))
    return [replace(op, name=f"L0/{op.name}") for op in ops]  # type: ignore[call-arg]


@dataclass
class EagerLayer:
    """Random weights and inputs of one layer on a device; `run()` is one forward."""

    shape: LayerShape
    mods: dict[str, Any]  # nn.Linear modules by HF name, and the two norm weights
    x: Any  # [batch, q_len, hidden]
    cos: Any  # [batch, q_len, head_dim], the model dtype (LlamaRotaryEmbedding's output)
    sin: Any
    cache_k: Any  # [batch, kv_heads, past, head_dim]
    cache_v: Any

    def run(self) -> Any:
        return forward(self, self.x)


def build_layer(s: LayerShape, device: str, seed: int = 0) -> EagerLayer:
    """Random weights (nn.Linear's default init, norm weights near 1) and inputs on `device`."""
    import torch

    dt = torch_dtype(s.dtype)
    g = torch.Generator(device="cpu").manual_seed(seed)
    torch.manual_seed(seed)
    h, hd = s.hidden, s.head_dim
    kw = {"device": device, "dtype": dt}
    lin = torch.nn.Linear
    mods: dict[str, Any] = {
        "q_proj": lin(h, s.heads * hd, bias=s.qkv_bias, **kw),
        "k_proj": lin(h, s.kv_heads * hd, bias=s.qkv_bias, **kw),
        "v_proj": lin(h, s.kv_heads * hd, bias=s.qkv_bias, **kw),
        "o_proj": lin(s.heads * hd, h, bias=s.linear_bias, **kw),
        "gate_proj": lin(h, s.inter, bias=s.linear_bias, **kw),
        "up_proj": lin(h, s.inter, bias=s.linear_bias, **kw),
        "down_proj": lin(s.inter, h, bias=s.linear_bias, **kw),
    }
    for m in mods.values():
        m.requires_grad_(False)
    for name in ("input_layernorm", "post_attention_layernorm"):
        mods[name] = (1 + 0.1 * torch.randn(h, generator=g)).to(**kw)
    x = torch.randn(s.batch, s.q_len, h, generator=g).to(**kw)
    cache = (s.batch, s.kv_heads, s.past, hd)
    k = torch.randn(cache, generator=g).to(**kw)
    v = torch.randn(cache, generator=g).to(**kw)
    # LlamaRotaryEmbedding: positions past.., fp32 angles, cat(freqs, freqs), cast to the dtype.
    inv = 1.0 / (s.theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    pos = torch.arange(s.past, s.kv_len, dtype=torch.float32)
    emb = torch.cat([torch.outer(pos, inv)] * 2, dim=-1).expand(s.batch, -1, -1)
    return EagerLayer(s, mods, x, emb.cos().to(**kw), emb.sin().to(**kw), k, v)


def _rms_norm(x: Any, weight: Any) -> Any:
    """LlamaRMSNorm.forward: 8 kernels (6 in fp32, where both casts are no-ops)."""
    import torch

    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + RMS_EPS)
    return weight * h.to(dtype)


def _rotate_half(x: Any) -> Any:
    import torch

    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def forward(layer: EagerLayer, x: Any) -> Any:
    """LlamaDecoderLayer.forward (SDPA, DynamicCache without mask), one kernel per predicted op."""
    import torch
    import torch.nn.functional as F

    s, m = layer.shape, layer.mods
    b, q_len, hd = x.shape[0], x.shape[1], s.head_dim
    residual = x
    h = _rms_norm(x, m["input_layernorm"])
    q = m["q_proj"](h).view(b, q_len, -1, hd).transpose(1, 2)
    k = m["k_proj"](h).view(b, q_len, -1, hd).transpose(1, 2)
    v = m["v_proj"](h).view(b, q_len, -1, hd).transpose(1, 2)
    cos, sin = layer.cos[:b].unsqueeze(1), layer.sin[:b].unsqueeze(1)
    q = (q * cos) + (_rotate_half(q) * sin)
    k = (k * cos) + (_rotate_half(k) * sin)
    k = torch.cat([layer.cache_k[:b], k], dim=-2)  # DynamicLayer.update
    v = torch.cat([layer.cache_v[:b], v], dim=-2)
    o = F.scaled_dot_product_attention(
        q, k, v, is_causal=q_len > 1, scale=hd**-0.5, enable_gqa=True
    )
    o = o.transpose(1, 2).contiguous().reshape(b, q_len, -1).contiguous()
    h = residual + m["o_proj"](o)
    residual = h
    h = _rms_norm(h, m["post_attention_layernorm"])
    h = m["down_proj"](F.silu(m["gate_proj"](h)) * m["up_proj"](h))
    return residual + h


def reference_delta(layer: EagerLayer, seqs: int = 1) -> tuple[Any, Any]:
    """(layer output - input, its float64 reference) for the first `seqs` sequences.

    The reference is written independently of `forward`: fp64 throughout, RoPE as a rotation of
    (x1, x2) pairs with angles recomputed in fp64, attention as explicit softmax(QKᵀ/√d)V per head
    with the causal mask over absolute positions. Comparing the residual branch (output − input)
    keeps the residual from hiding errors.
    """
    import torch

    s, m = layer.shape, layer.mods
    x = layer.x[:seqs]
    with torch.no_grad():
        out = forward(layer, x)
    f = torch.float64
    xd = x.to(f)

    def lin(name: str, t: Any) -> Any:
        mod = m[name]
        y = t @ mod.weight.to(f).T
        return y + mod.bias.to(f) if mod.bias is not None else y

    def norm(t: Any, w: Any) -> Any:
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + RMS_EPS) * w.to(f)

    hd, half = s.head_dim, s.head_dim // 2
    inv = 1.0 / (s.theta ** (torch.arange(0, hd, 2, dtype=f, device=x.device) / hd))
    ang = torch.arange(s.past, s.kv_len, dtype=f, device=x.device)[:, None] * inv  # [q, hd/2]

    def rope(t: Any) -> Any:  # t: [b, heads, q, hd]
        t1, t2 = t[..., :half], t[..., half:]
        c, sn = ang.cos(), ang.sin()
        return torch.cat([t1 * c - t2 * sn, t2 * c + t1 * sn], dim=-1)

    h = norm(xd, m["input_layernorm"])
    q = rope(lin("q_proj", h).unflatten(-1, (s.heads, hd)).transpose(1, 2))
    k = rope(lin("k_proj", h).unflatten(-1, (s.kv_heads, hd)).transpose(1, 2))
    v = lin("v_proj", h).unflatten(-1, (s.kv_heads, hd)).transpose(1, 2)
    k = torch.cat([layer.cache_k[:seqs].to(f), k], dim=-2)
    v = torch.cat([layer.cache_v[:seqs].to(f), v], dim=-2)
    qpos = torch.arange(s.past, s.kv_len, device=x.device)[:, None]
    masked = torch.arange(s.kv_len, device=x.device)[None, :] > qpos
    o = torch.empty_like(q)
    group = s.heads // s.kv_heads
    for head in range(s.heads):  # one head at a time: the score matrix of a long prefill is big
        kv = head // group
        sc = q[:, head] @ k[:, kv].transpose(-1, -2) / math.sqrt(hd)
        o[:, head] = torch.softmax(sc.masked_fill(masked, -math.inf), dim=-1) @ v[:, kv]
    a = xd + lin("o_proj", o.transpose(1, 2).flatten(2))
    h = norm(a, m["post_attention_layernorm"])
    g = lin("gate_proj", h)
    ref = a + lin("down_proj", g * torch.sigmoid(g) * lin("up_proj", h))
    return out.to(f) - xd, ref - xd


def check_layer(layer: EagerLayer) -> float:
    """Relative error of the first sequence's residual branches against the fp64 reference."""
    out, ref = reference_delta(layer, 1)
    return rel_err(out, ref)


def aten_kernels(fn: Callable[[], Any]) -> list[str]:
    """The aten ops fn() runs, views and other aliasing ops excluded: one per kernel launched.

    A TorchDispatchMode trace (the method transformer_layers' kernel list was checked with)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Trace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if not func.is_view and func.name() not in _NO_KERNEL:
                seen.append(func.name())
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Trace():
        fn()
    return seen


@dataclass
class LayerRun:
    """One layer measured: timings, kernels run, its check, and the rows of the comparison."""

    ops: list[Op]  # the predicted kernels of the layer
    kernels_run: int  # aten kernels the real layer launched
    check_err: float
    eager: Timing  # back-to-back eager calls: with host dispatch
    graph: Timing | None = None  # CUDA graph replay, L2 flushed: GPU time
    host_per_kernel_s: float | None = None  # host clock of one call / kernels
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "kernels_predicted": len(self.ops),
            "kernels_run": self.kernels_run,
            "check_err": self.check_err,
            "host_per_kernel_us": None
            if self.host_per_kernel_s is None
            else self.host_per_kernel_s * 1e6,
            "eager": self.eager.to_dict(with_samples=False),
            "graph": self.graph.to_dict(with_samples=False) if self.graph else None,
            "rows": self.rows,
        }


def measure_layer(
    cfg: ModelConfig, sc: Scenario, device: str, budget: Budget | None = None
) -> LayerRun:
    """Build, check (fp64 reference of the first sequence) and time one eager layer."""
    import torch

    budget = budget or Budget()
    shape = layer_shape(cfg, sc)
    try:
        return _measure(cfg, sc, shape, device, budget)
    except torch.OutOfMemoryError:
        raise EnvironmentUnavailable(f"out of device memory for one layer of {cfg.name}") from None
    finally:
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def _measure(
    cfg: ModelConfig, sc: Scenario, shape: LayerShape, device: str, budget: Budget
) -> LayerRun:
    import torch

    with torch.no_grad():
        layer = build_layer(shape, device)
        err = check_layer(layer)
        if not err <= LAYER_TOLERANCE[shape.dtype]:  # also catches nan
            raise WrongResult(f"eager layer: relative error {err:.3g} against the fp64 reference")
        kernels = len(aten_kernels(layer.run))
        eager = time_fn(layer.run, device, replace(budget, flush_l2=False, graphs=False))
        graph = host = None
        if device.startswith("cuda"):
            host = _host_per_call(layer.run, device) / kernels
            graph = _graph_timing(layer.run, device, replace(budget, graphs=False))
    return LayerRun(layer_ops(cfg, sc), kernels, err, eager, graph, host)


def _host_per_call(fn: Callable[[], Any], device: str, reps: int = 7) -> float:
    """Median host time of one call issued to an idle GPU (the call returns before the GPU ends)."""
    import torch

    times = []
    for _ in range(reps):
        torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    torch.cuda.synchronize(device)
    return sorted(times)[reps // 2]


def _graph_timing(fn: Callable[[], Any], device: str, budget: Budget) -> Timing | None:
    """fn captured once in a CUDA graph, replays timed with L2 flushed; None if not capturable."""
    import torch

    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError:
        torch.cuda.synchronize(device)
        return None
    return time_fn(graph.replay, device, budget)


def compare(run: LayerRun, gpu: Any, sc: Scenario) -> list[dict[str, Any]]:
    """Rows measured vs predicted: GPU time, and with host dispatch simulated (profile's
    host_dispatch_s, and this layer's own measured host cost per kernel). No prediction without
    a GPU profile (gpu None): measured only."""
    from gpuperf.perfmodel.calibrate import with_params
    from gpuperf.step.run import predict_ops

    eager_sc = replace(sc, impl="eager", cuda_graphs=False)
    if gpu is not None:  # the layer replays one shape: the attention plan is cached after call 1
        gpu = with_params(gpu, host_attn_plan_s=0.0)
    rows: list[dict[str, Any]] = []

    def row(what: str, measured: Timing | None, predicted_s: float | None, how: str) -> None:
        m = measured.median_s if measured else None
        rows.append({
            "what": what,
            "measured_ms": None if m is None else m * 1e3,
            "predicted_ms": None if predicted_s is None else predicted_s * 1e3,
            "error_pct": None if m is None or predicted_s is None else (predicted_s / m - 1) * 100,
            "method": how,
        })  # fmt: skip

    pred = predict_ops(run.ops, gpu, eager_sc) if gpu is not None else None
    busy = pred.extra["gpu_busy_ms"] * 1e-3 if pred else None
    row("GPU time", run.graph, busy, "CUDA graph replay, L2 flushed; predicted: sum of op times")
    how = "eager calls back to back"
    if gpu is not None:
        d = gpu.params.host_dispatch_s * 1e6
        how += f"; predicted with the profile's HF-calibrated host costs ({d:.3g} µs/kernel)"
    row("with host dispatch", run.eager, pred.total_ms * 1e-3 if pred else None, how)
    if gpu is not None and run.host_per_kernel_s is not None:
        # The bare layer has no HF per-layer host overhead (host_decode_layer_s): only its own.
        own = with_params(gpu, host_dispatch_s=run.host_per_kernel_s, host_decode_layer_s=0.0)
        t = predict_ops(run.ops, own, eager_sc).total_ms * 1e-3
        us = run.host_per_kernel_s * 1e6
        row("with host dispatch (this layer's host cost)", run.eager, t,
            f"predicted with the {us:.3g} µs/kernel measured for this bare layer")  # fmt: skip
    run.rows = rows
    return rows
