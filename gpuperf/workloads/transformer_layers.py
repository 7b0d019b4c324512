"""One decoder layer's forward kernels, as a template with names relative to the layer ("attn/qkv").

Two implementations, each Op one GPU kernel:

- fused: what vLLM / TensorRT-LLM run. Fused residual-add + norm, one QKV GEMM, one RoPE kernel,
  KV-cache write (reshape_and_cache), FlashAttention, out-proj, one gate_up GEMM, fused
  SiLU-and-mul, down-proj. The residual add of a layer's output is fused into the next norm.
- eager: PyTorch eager as Hugging Face transformers' modeling_llama runs it (SDPA attention). The
  kernel list was checked against transformers 5.23 with a dispatch-mode trace of a tiny bf16
  LlamaForCausalLM on CPU: 40 kernels per layer in prefill and decode (see tests).

Bias adds never cost a kernel: nn.Linear with bias runs as one addmm, vLLM fuses the bias into the
GEMM epilogue. Parallelism: `Dims` holds per-GPU head and intermediate counts so that tensor
parallelism can divide them later; build_ops uses tp=1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuperf.dtypes import BYTES, DType
from gpuperf.perfmodel.ops import Attention, Copy, Elementwise, Gemm, Norm, Op, Reduce
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Dims:
    """Sizes of one forward pass on one GPU. T: tokens in this pass; q_len/kv_len per sequence."""

    T: int
    batch: int
    q_len: int
    kv_len: int
    hidden: int
    heads: int  # query heads on this GPU
    kv_heads: int
    head_dim: int
    inter: int  # MLP intermediate on this GPU
    act: DType  # activations and weights outside GEMMs
    gemm: DType  # GEMM operands (fp8/int8 when quantized)
    kv: DType  # KV cache
    cache: bool  # inference: writes K and V to a cache
    decode: bool
    static_cache: bool = False  # eager decode on a preallocated StaticCache (CUDA-graph capture)


def make_dims(cfg: ModelConfig, sc: Scenario, tp: int = 1) -> Dims:
    act: DType = "bf16" if BYTES[sc.dtype] == 1 else sc.dtype
    if sc.mode == "decode":
        T, q_len, kv_len = sc.batch, 1, sc.ctx + 1
    else:
        T, q_len, kv_len = sc.batch * sc.seq, sc.seq, sc.seq
    return Dims(
        T=T,
        batch=sc.batch,
        q_len=q_len,
        kv_len=kv_len,
        hidden=cfg.hidden,
        heads=cfg.heads // tp,
        kv_heads=max(1, cfg.kv_heads // tp),
        head_dim=cfg.hd,
        inter=cfg.intermediate // tp,
        act=act,
        gemm=sc.dtype,
        kv=sc.kv,
        cache=sc.mode != "train",
        decode=sc.mode == "decode",
        # A CUDA graph needs static buffers: HF then decodes on a StaticCache, not a DynamicCache.
        static_cache=sc.mode == "decode" and sc.cuda_graphs and sc.impl == "eager",
    )


def _ew(name: str, fn: str, numel: int, dt: DType, n_in: int = 1, out: DType | None = None,
        flops: float = 1.0) -> Elementwise:  # fmt: skip
    return Elementwise(name, fn, numel, n_in, 1, dt, out, flops)


def _gemm(ops: list[Op], d: Dims, name: str, m: int, n: int, k: int, batch: int = 1) -> None:
    """A weight GEMM; quantized dtypes first quantize the activation (one kernel, as vLLM)."""
    if BYTES[d.gemm] == 1:
        ops.append(_ew(name + "_quant", "quant", batch * m * k, d.act, out=d.gemm, flops=2.0))
    ops.append(Gemm(name, m, n, k, d.gemm, batch))


def attention_core(d: Dims, name: str = "attn/core") -> Attention:
    return Attention(name, d.batch, d.heads, d.kv_heads, d.q_len, d.kv_len, d.head_dim, True,
                     d.act, d.kv)  # fmt: skip


def moe_block(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    """Router, top-k, permute, expert GEMMs, activation, combine.

    Uniform routing assumed: each token picks k distinct experts at random, so a pass over T tokens
    touches E·(1 - (1 - k/E)^T) experts on average (all of them once T is large, exactly k when
    T = 1), each with ceil(T·k / touched) rows. Real routing is uneven; the busiest expert sets the
    time, so this is a lower bound on the expert GEMM time.
    """
    E, k, T, h, f = cfg.num_experts, cfg.num_experts_per_tok, d.T, d.hidden, d.inter
    touched = min(E, max(k, math.ceil(E * (1 - (1 - k / E) ** T) - 1e-9)))
    rows = math.ceil(T * k / touched)
    ops: list[Op] = [Gemm("mlp/router", T, E, h, d.act)]
    ops.append(Reduce("mlp/topk", "topk", T, E, k, d.act))
    ops.append(Copy("mlp/permute", T * k * h * BYTES[d.act], d.act))
    if eager:
        _gemm(ops, d, "mlp/experts_gate", rows, f, h, touched)
        _gemm(ops, d, "mlp/experts_up", rows, f, h, touched)
        ops.append(_ew("mlp/act", "silu", touched * rows * f, d.act, flops=4.0))
        ops.append(_ew("mlp/mul", "mul", touched * rows * f, d.act, n_in=2))
    else:
        _gemm(ops, d, "mlp/experts_gate_up", rows, 2 * f, h, touched)
        ops.append(_ew("mlp/act", "silu_and_mul", touched * rows * f, d.act, n_in=2, flops=5.0))
    _gemm(ops, d, "mlp/experts_down", rows, h, f, touched)
    ops.append(_ew("mlp/combine", "moe_combine", T * h, d.act, n_in=k, flops=2.0 * k))
    return ops


def dense_mlp(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    T, h, f = d.T, d.hidden, d.inter
    ops: list[Op] = []
    if cfg.mlp == "gelu":
        _gemm(ops, d, "mlp/up", T, f, h)
        ops.append(_ew("mlp/act", "gelu", T * f, d.act, flops=8.0))
    elif eager:  # HF LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))
        _gemm(ops, d, "mlp/gate", T, f, h)
        ops.append(_ew("mlp/act", "silu", T * f, d.act, flops=4.0))
        _gemm(ops, d, "mlp/up", T, f, h)
        ops.append(_ew("mlp/mul", "mul", T * f, d.act, n_in=2))
    else:
        _gemm(ops, d, "mlp/gate_up", T, 2 * f, h)
        ops.append(_ew("mlp/act", "silu_and_mul", T * f, d.act, n_in=2, flops=5.0))
    _gemm(ops, d, "mlp/down", T, h, f)
    return ops


def fused_layer(cfg: ModelConfig, d: Dims) -> list[Op]:
    """vLLM-style layer. Norms fuse the previous residual add unless the residual is parallel."""
    T, h, hd = d.T, d.hidden, d.head_dim
    fused_res = not cfg.parallel_residual
    ops: list[Op] = [Norm("attn/norm", cfg.norm, T, h, d.act, fused_res)]
    _gemm(ops, d, "attn/qkv", T, (d.heads + 2 * d.kv_heads) * hd, h)
    if cfg.positions == "rope":
        ops.append(_ew("attn/rope", "rope", T * (d.heads + d.kv_heads) * hd, d.act, flops=3.0))
    if d.cache:
        ops.append(Copy("attn/kv_write", T * 2 * d.kv_heads * hd * BYTES[d.kv], d.kv))
    ops.append(attention_core(d))
    _gemm(ops, d, "attn/out", T, h, d.heads * hd)
    ops.append(Norm("mlp/norm", cfg.norm, T, h, d.act, fused_res))
    ops += moe_block(cfg, d, False) if cfg.is_moe else dense_mlp(cfg, d, False)
    if cfg.parallel_residual:
        ops.append(_ew("residual", "add", T * h, d.act, n_in=3, flops=2.0))
    return ops


def eager_norm(cfg: ModelConfig, name: str, rows: int, cols: int, act: DType) -> list[Op]:
    """LlamaRMSNorm in eager PyTorch: to(fp32), pow, mean, add eps, rsqrt, mul, to(dtype), mul w.

    The casts vanish when the model runs in fp32. nn.LayerNorm is one kernel.
    """
    if cfg.norm == "layernorm":
        return [Norm(name, "layernorm", rows, cols, act)]
    n = rows * cols
    cast = act != "fp32"
    ops: list[Op] = []
    if cast:
        ops.append(_ew(f"{name}/cast_f32", "cast", n, act, out="fp32", flops=0.0))
    ops += [
        _ew(f"{name}/pow", "pow", n, "fp32"),
        Reduce(f"{name}/mean", "mean", rows, cols, 1, "fp32"),
        _ew(f"{name}/add_eps", "add", rows, "fp32"),
        _ew(f"{name}/rsqrt", "rsqrt", rows, "fp32"),
        _ew(f"{name}/mul", "mul", n, "fp32"),
    ]
    if cast:
        ops.append(_ew(f"{name}/cast_back", "cast", n, "fp32", out=act, flops=0.0))
    ops.append(_ew(f"{name}/mul_weight", "mul", n, act))
    return ops


def eager_rope(name: str, d: Dims, heads: int) -> list[Op]:
    """x * cos + rotate_half(x) * sin; rotate_half = cat(-x2, x1): 5 kernels per tensor."""
    n = d.T * heads * d.head_dim
    return [
        _ew(f"{name}/mul_cos", "mul", n, d.act),
        _ew(f"{name}/neg", "neg", n // 2, d.act),
        Copy(f"{name}/cat", n * BYTES[d.act], d.act),
        _ew(f"{name}/mul_sin", "mul", n, d.act),
        _ew(f"{name}/add", "add", n, d.act, n_in=2),
    ]


def static_cache_attention(d: Dims) -> list[Op]:
    """HF decode on a StaticCache (what a CUDA graph captures): index_copy_ of the new K and V, then
    SDPA with an explicit mask over the whole cache. With a mask, SDPA cannot use enable_gqa, so
    GQA models first materialize K and V for every query head (repeat_kv: expand + reshape copies).
    The cache is sized ctx + a few steps; kv_len stands for it."""
    hd, kvb = d.head_dim, BYTES[d.kv]
    new = d.batch * d.kv_heads * hd * d.q_len * kvb
    ops: list[Op] = [Copy("attn/cache_k", new, d.kv), Copy("attn/cache_v", new, d.kv)]
    kv_heads = d.kv_heads
    if d.heads != d.kv_heads:
        # One copy kernel per tensor writes heads x kv_len rows; its reads of the kv_heads rows
        # repeat (counted as reads of the full size, an upper bound).
        full = d.batch * d.heads * d.kv_len * hd
        ops.append(Elementwise("attn/repeat_k", "repeat_kv", full, 1, 1, d.kv, None, 0.0))
        ops.append(Elementwise("attn/repeat_v", "repeat_kv", full, 1, 1, d.kv, None, 0.0))
        kv_heads = d.heads
    ops.append(Attention("attn/core", d.batch, d.heads, kv_heads, d.q_len, d.kv_len, hd, False,
                         d.act, d.kv, mask=True))  # fmt: skip
    return ops


def eager_layer(cfg: ModelConfig, d: Dims) -> list[Op]:
    """HF LlamaDecoderLayer with SDPA and a DynamicCache (GQA via SDPA enable_gqa, no repeat_kv)."""
    T, h, hd, a = d.T, d.hidden, d.head_dim, d.act
    ops: list[Op] = eager_norm(cfg, "attn/norm", T, h, a)
    _gemm(ops, d, "attn/q", T, d.heads * hd, h)
    _gemm(ops, d, "attn/k", T, d.kv_heads * hd, h)
    _gemm(ops, d, "attn/v", T, d.kv_heads * hd, h)
    if cfg.positions == "rope":
        ops += eager_rope("attn/rope_q", d, d.heads) + eager_rope("attn/rope_k", d, d.kv_heads)
    if d.static_cache:
        ops += static_cache_attention(d)
    else:
        # DynamicCache.update: torch.cat([cache, new]) for K and V. HF keeps the cache on by
        # default, in training too (use_cache=True in the config), so the cat runs there as well.
        past = d.kv_len - d.q_len
        kv_bytes = d.batch * d.kv_heads * hd * (BYTES[d.kv] * past + BYTES[a] * d.q_len)
        ops.append(Copy("attn/cache_k", kv_bytes, d.kv))
        ops.append(Copy("attn/cache_v", kv_bytes, d.kv))
        ops.append(attention_core(d))
    _gemm(ops, d, "attn/out", T, h, d.heads * hd)
    if cfg.parallel_residual:
        ops += eager_norm(cfg, "mlp/norm", T, h, a)
    else:
        ops.append(_ew("attn/residual", "add", T * h, a, n_in=2))
        ops += eager_norm(cfg, "mlp/norm", T, h, a)
    ops += moe_block(cfg, d, True) if cfg.is_moe else dense_mlp(cfg, d, True)
    n_res = 3 if cfg.parallel_residual else 2
    ops.append(_ew("mlp/residual", "add", T * h, a, n_in=n_res, flops=n_res - 1.0))
    return ops
