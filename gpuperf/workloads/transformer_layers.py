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

import functools
import math
from dataclasses import dataclass, replace

from gpuperf.dtypes import BYTES, DType
from gpuperf.perfmodel.ops import Attention, Copy, Elementwise, Gemm, Norm, Op, Reduce
from gpuperf.workloads import comm_ops
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.groups import SINGLE, Groups
from gpuperf.workloads.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Dims:
    """Sizes of one forward pass on one GPU. T: tokens in this pass; q_len/kv_len per sequence.
    Under tensor parallelism heads, kv_heads and inter are this GPU's share; under context
    parallelism T and q_len are this GPU's part of each sequence (kv_len stays the whole)."""

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
    g: Groups = SINGLE  # communicator groups (tensor, context, expert parallel)
    attn: str = "flash"  # flash: one fused kernel; math: scores materialized, softmax, P·V
    train: bool = False  # dropout runs in training only

    @property
    def rows(self) -> int:
        """Rows of the norms and residual adds: T, or T / tp under sequence parallelism."""
        return -(-self.T // self.g.tp) if self.g.sp else self.T


@functools.lru_cache(maxsize=512)
def _layer_groups(g: Groups) -> Groups:
    """The groups without what a layer's kernels never see (data-parallel and pipeline)."""
    return replace(g, dp=1, dp_nodes=1, edp=1, edp_nodes=1, pp_inter_node=False)


def make_dims(cfg: ModelConfig, sc: Scenario, g: Groups = SINGLE) -> Dims:
    """One micro-batch of `sc` on one GPU of groups `g`."""
    act: DType = "bf16" if BYTES[sc.dtype] == 1 else sc.dtype
    mb = sc.micro_batch or sc.batch
    if sc.mode == "decode":
        T, q_len, kv_len = mb, 1, sc.ctx + 1
    else:
        q_len = sc.seq // g.cp
        T, kv_len = mb * q_len, sc.seq
    tp = g.tp
    if g.dp > 1 or g.edp > 1 or g.pp_inter_node:
        g = _layer_groups(g)
    return Dims(
        T=T,
        batch=mb,
        q_len=q_len,
        kv_len=kv_len,
        hidden=cfg.hidden,
        heads=cfg.heads // tp,
        # KV heads are split over TP ranks, or replicated when there are fewer than ranks.
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
        g=g,
        attn=sc.attn,
        train=sc.mode == "train",
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


def attention_ops(d: Dims, dropout: bool = False) -> list[Op]:
    """The attention of one layer: one fused kernel (flash, which applies dropout inside), the
    materialized form (math; dropout is a kernel of its own), or ring attention (cp > 1)."""
    if d.g.cp > 1:
        return ring_attention(d)
    if d.attn == "math":
        return math_attention(d, dropout)
    return [attention_core(d)]


def math_attention(d: Dims, dropout: bool = False) -> list[Op]:
    """Attention before FlashAttention (Megatron's unfused path, HF's eager attention): K and V
    repeated to every query head (GQA), S = Q Kᵀ as a batched GEMM, one fused scale-mask-softmax
    kernel over the whole score matrix, then P V. The causal half is computed and masked."""
    bh, hd = d.batch * d.heads, d.head_dim
    ops: list[Op] = []
    if d.heads != d.kv_heads:
        full = d.batch * d.heads * d.kv_len * hd
        ops.append(Elementwise("attn/repeat_k", "repeat_kv", full, 1, 1, d.kv, None, 0.0))
        ops.append(Elementwise("attn/repeat_v", "repeat_kv", full, 1, 1, d.kv, None, 0.0))
    ops.append(Gemm("attn/scores", d.q_len, d.kv_len, hd, d.act, bh))
    ops.append(Norm("attn/softmax", "softmax", bh * d.q_len, d.kv_len, d.act))
    if dropout:  # on the probabilities: reads them, writes them and a byte mask (≈ half a write)
        n = bh * d.q_len * d.kv_len
        ops.append(Elementwise("attn/dropout", "dropout", n, 1, 1, d.act, None, 2.0))
    ops.append(Gemm("attn/context", d.q_len, hd, d.kv_len, d.act, bh))
    return ops


def ring_attention(d: Dims) -> list[Op]:
    """Context parallelism as Megatron-LM / Transformer Engine run it (ring attention with the
    causal load balance of Liu et al. 2023): each rank holds 2 of the 2·cp chunks of every
    sequence (q_len tokens), computes its causal diagonal, then in each of cp - 1 ring steps
    receives the next rank's K and V (P2P, hidden under the step before) and attends half of
    its queries to them or all its queries to half of them. Per rank: 1/cp of the attention."""
    if d.attn == "math":
        from gpuperf.errors import InputError

        raise InputError("ring attention (cp > 1) runs the fused kernel: use attn=flash")
    ops: list[Op] = [Attention("attn/core", d.batch, d.heads, d.kv_heads, d.q_len, d.q_len,
                               d.head_dim, True, d.act, d.kv)]  # fmt: skip
    for step in range(1, d.g.cp):
        ops.append(comm_ops.ring_kv(d, step))
        ops.append(Attention(f"attn/core.ring{step}", d.batch, d.heads, d.kv_heads, d.q_len,
                             d.q_len // 2, d.head_dim, False, d.act, d.kv))  # fmt: skip
    return ops


def ring_hide(d: Dims, backward: bool = False) -> comm_ops.Hide:
    """Each ring step's transfer hides under the attention of the step before it."""
    sfx = ".bwd" if backward else ""
    hide: comm_ops.Hide = {}
    for step in range(1, d.g.cp):
        prev = "attn/core" if step == 1 else f"attn/core.ring{step - 1}"
        hide[f"attn/ring{step}.p2p{sfx}"] = (prev + sfx,)
    return hide


def _touched_experts(cfg: ModelConfig, d: Dims) -> tuple[int, int]:
    """(experts this GPU runs, rows each) under uniform routing: each of the T·ep tokens routed
    to this GPU's experts' group picks k distinct experts of E at random, so a local expert is
    untouched with probability (1 - k/E)^(T·ep)."""
    E, k, T, ep = cfg.num_experts, cfg.num_experts_per_tok, d.T, d.g.ep
    local = E // ep
    touched = min(local, max(-(-k // ep), math.ceil(local * (1 - (1 - k / E) ** (T * ep)) - 1e-9)))
    touched = max(1, touched)
    return touched, math.ceil(T * k / touched)


def moe_block(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    """Router, top-k, permute, expert GEMMs, activation, combine.

    Uniform routing assumed: each token picks k distinct experts at random, so a pass over T tokens
    touches E·(1 - (1 - k/E)^T) experts on average (all of them once T is large, exactly k when
    T = 1), each with ceil(T·k / touched) rows. Real routing is uneven; the busiest expert sets the
    time, so this is a lower bound on the expert GEMM time. Under expert parallelism the token
    copies go to their experts' ranks and back (two all-to-alls) and each rank runs E/ep experts.
    """
    E, k, T, h, f = cfg.num_experts, cfg.num_experts_per_tok, d.T, d.hidden, d.inter
    touched, rows = _touched_experts(cfg, d)
    ops: list[Op] = comm_ops.col_in(d, "mlp/router")
    ops.append(Gemm("mlp/router", T, E, h, d.act))
    ops.append(Reduce("mlp/topk", "topk", T, E, k, d.act))
    ops.append(Copy("mlp/permute", T * k * h * BYTES[d.act], d.act))
    ops += comm_ops.expert_alltoall(d, "mlp/dispatch", T * k)
    if eager:
        _gemm(ops, d, "mlp/experts_gate", rows, f, h, touched)
        _gemm(ops, d, "mlp/experts_up", rows, f, h, touched)
        ops.append(_ew("mlp/act", "silu", touched * rows * f, d.act, flops=4.0))
        ops.append(_ew("mlp/mul", "mul", touched * rows * f, d.act, n_in=2))
    else:
        _gemm(ops, d, "mlp/experts_gate_up", rows, 2 * f, h, touched)
        ops.append(_ew("mlp/act", "silu_and_mul", touched * rows * f, d.act, n_in=2, flops=5.0))
    _gemm(ops, d, "mlp/experts_down", rows, h, f, touched)
    ops += comm_ops.expert_alltoall(d, "mlp/combine", T * k)
    ops.append(_ew("mlp/combine", "moe_combine", T * h, d.act, n_in=k, flops=2.0 * k))
    ops += comm_ops.row_out(d, "mlp/experts_down")
    return ops


def dense_mlp(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    T, h, f = d.T, d.hidden, d.inter
    ops: list[Op] = []
    if cfg.mlp == "plain":
        ops += comm_ops.col_in(d, "mlp/up")
        _gemm(ops, d, "mlp/up", T, f, h)
        ops.append(_ew("mlp/act", "gelu", T * f, d.act, flops=8.0))
    elif eager:  # HF LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))
        _gemm(ops, d, "mlp/gate", T, f, h)
        ops.append(_ew("mlp/act", "silu", T * f, d.act, flops=4.0))
        _gemm(ops, d, "mlp/up", T, f, h)
        ops.append(_ew("mlp/mul", "mul", T * f, d.act, n_in=2))
    else:
        ops += comm_ops.col_in(d, "mlp/gate_up")
        _gemm(ops, d, "mlp/gate_up", T, 2 * f, h)
        ops.append(_ew("mlp/act", "silu_and_mul", T * f, d.act, n_in=2, flops=5.0))
    _gemm(ops, d, "mlp/down", T, h, f)
    ops += comm_ops.row_out(d, "mlp/down")
    return ops


def fused_layer(cfg: ModelConfig, d: Dims) -> list[Op]:
    """vLLM / Megatron-style layer. Norms fuse the previous residual add unless the residual is
    parallel. Under tensor parallelism the collectives of comm_ops sit between the kernels."""
    T, h, hd = d.T, d.hidden, d.head_dim
    # Training with dropout (Megatron's GPT): each block's output goes through a fused
    # bias-dropout-add kernel, so the next norm reads a finished residual.
    drop = d.train and cfg.hidden_dropout > 0
    fused_res = not cfg.parallel_residual and not drop
    ops: list[Op] = [Norm("attn/norm", cfg.norm, d.rows, h, d.act, fused_res)]
    ops += comm_ops.col_in(d, "attn/qkv")
    _gemm(ops, d, "attn/qkv", T, (d.heads + 2 * d.kv_heads) * hd, h)
    if cfg.positions == "rope":
        ops.append(_ew("attn/rope", "rope", T * (d.heads + d.kv_heads) * hd, d.act, flops=3.0))
    if d.cache:
        ops.append(Copy("attn/kv_write", T * 2 * d.kv_heads * hd * BYTES[d.kv], d.kv))
    ops += attention_ops(d, d.train and cfg.attention_dropout > 0)
    _gemm(ops, d, "attn/out", T, h, d.heads * hd)
    ops += comm_ops.row_out(d, "attn/out")
    if drop:
        ops.append(_ew("attn/bias_dropout_add", "dropout_add", d.rows * h, d.act, n_in=2,
                       flops=3.0))  # fmt: skip
    ops.append(Norm("mlp/norm", cfg.norm, d.rows, h, d.act, fused_res))
    ops += moe_block(cfg, d, False) if cfg.is_moe else dense_mlp(cfg, d, False)
    if drop:
        ops.append(_ew("mlp/bias_dropout_add", "dropout_add", d.rows * h, d.act, n_in=2,
                       flops=3.0))  # fmt: skip
    if cfg.parallel_residual:
        ops.append(_ew("residual", "add", d.rows * h, d.act, n_in=3, flops=2.0))
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
        ops += attention_ops(d)
    _gemm(ops, d, "attn/out", T, h, d.heads * hd)
    ops += comm_ops.row_out(d, "attn/out")
    if cfg.parallel_residual:
        ops += eager_norm(cfg, "mlp/norm", T, h, a)
    else:
        ops.append(_ew("attn/residual", "add", T * h, a, n_in=2))
        ops += eager_norm(cfg, "mlp/norm", T, h, a)
    ops += moe_block(cfg, d, True) if cfg.is_moe else dense_mlp(cfg, d, True)
    n_res = 3 if cfg.parallel_residual else 2
    ops.append(_ew("mlp/residual", "add", T * h, a, n_in=n_res, flops=n_res - 1.0))
    return ops
