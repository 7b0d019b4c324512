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
from dataclasses import dataclass, replace

from gpuperf.dtypes import BYTES, DType
from gpuperf.perfmodel.ops import Attention, Copy, Elementwise, Gemm, Norm, Op, Reduce, gemm_scales
from gpuperf.workloads import comm_ops
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.groups import SINGLE, Groups
from gpuperf.workloads.hashed import field_hash
from gpuperf.workloads.layer_kinds import LayerKind
from gpuperf.workloads.scenario import Scenario

DENSE = LayerKind()


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
    compiled: bool = False  # PyTorch layers under torch.compile: the fused layer's kernels
    wgemm: DType | None = None  # weight-only GEMM format (int4/int8 weights, bf16 activations)
    scales: str = ""  # fp8: "tensor" or "row" scales; int4: group size ("g128")
    mla: str = "auto"  # MLA form: naive, absorbed, or what the implementation runs (auto)
    moe_imbalance: float = 1.0  # the busiest expert-parallel rank's share over the mean
    ep_dedup: bool = False  # DeepEP/HybridEP: each token sent once per destination GPU and node
    vocab: int = 0  # the lm_head's columns on this GPU (vocab_shard)

    def __hash__(self) -> int:  # the engine's caches hash it per plan: once per object
        return field_hash(self)

    @property
    def rows(self) -> int:
        """Rows of the norms and residual adds: T, or T / tp under sequence parallelism."""
        return -(-self.T // self.g.tp) if self.g.sp else self.T


@functools.lru_cache(maxsize=512)
def _layer_groups(g: Groups) -> Groups:
    """The groups without what a layer's kernels never see (data-parallel and pipeline)."""
    return replace(g, dp=1, dp_nodes=1, edp=1, edp_nodes=1, pp_inter_node=False)


def vocab_shard(vocab: int, tp: int, impl: str, train: bool) -> int:
    """This GPU's columns of the lm_head and of the logits: the vocabulary, padded as the
    implementation pads it, split tp ways. Megatron-LM pads it to a multiple of 128·tp
    (--make-vocab-size-divisible-by 128, its default; _vocab_size_with_padding), so GPT-2's
    50,257 becomes 50,304 on one GPU and the lm_head's GEMMs keep aligned leading dimensions;
    vLLM pads to a multiple of 64 (DEFAULT_VOCAB_PADDING_SIZE) before splitting; Hugging Face
    runs the checkpoint's vocabulary as it is."""
    if impl == "fused":
        unit = 128 * tp if train else 64
        vocab = -(-vocab // unit) * unit
    return -(-vocab // tp)


def make_dims(cfg: ModelConfig, sc: Scenario, g: Groups = SINGLE) -> Dims:
    """One micro-batch of `sc` on one GPU of groups `g` (one Dims object per distinct input: the
    caches keyed on it compare by identity)."""
    return _dims(cfg, g, sc.mode, sc.micro_batch or sc.batch, sc.seq, sc.ctx, sc.dtype, sc.kv,
                 sc.cuda_graphs, sc.impl, sc.attn, sc.weight_dtype, sc.fp8_scales, sc.mla,
                 sc.moe_imbalance, sc.moe_dispatcher != "alltoall")  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _dims(cfg: ModelConfig, g: Groups, mode: str, mb: int, seq: int, ctx: int, dtype: DType,
          kv: DType, cuda_graphs: bool, impl: str, attn: str, weight_dtype: DType | None,
          fp8_scales: str, mla: str, moe_imbalance: float, ep_dedup: bool) -> Dims:  # fmt: skip
    act: DType = "bf16" if BYTES[dtype] == 1 else dtype
    if mode == "decode":
        T, q_len, kv_len = mb, 1, ctx + 1
    else:
        q_len = seq // g.cp
        T, kv_len = mb * q_len, seq
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
        gemm=dtype,
        kv=kv,
        cache=mode != "train",
        decode=mode == "decode",
        # A CUDA graph needs static buffers: HF then decodes on a StaticCache, not a DynamicCache.
        static_cache=mode == "decode" and cuda_graphs and impl == "eager",
        g=g,
        attn=attn,
        train=mode == "train",
        compiled=impl == "compile",
        wgemm=weight_dtype,
        scales=gemm_scales(dtype, weight_dtype, fp8_scales),
        mla=mla,
        moe_imbalance=moe_imbalance,
        ep_dedup=ep_dedup,
        vocab=vocab_shard(cfg.vocab, tp, impl, mode == "train"),
    )


def logits_gathered(d: Dims, eager: bool, train: bool) -> bool:
    """Whether the column-parallel lm_head's logits are gathered whole under tensor parallelism
    (inference, Hugging Face's tp_plan, the eager Megatron-style hooks), or stay split over the
    vocabulary (Megatron's fused training, its vocab-parallel cross-entropy)."""
    return d.g.tp > 1 and (not train or d.g.tp_impl == "dtensor" or eager)


def _ew(name: str, fn: str, numel: int, dt: DType, n_in: int = 1, out: DType | None = None,
        flops: float = 1.0, n_out: int = 1, generic: bool = False) -> Elementwise:  # fmt: skip
    return Elementwise(name, fn, numel, n_in, n_out, dt, out, flops, generic)


def _gemm(ops: list[Op], d: Dims, name: str, m: int, n: int, k: int, batch: int = 1) -> None:
    """A weight GEMM; quantized dtypes first quantize the activation (one kernel, as vLLM);
    weight-only formats read packed weights with bf16 activations."""
    if d.wgemm is not None:
        ops.append(Gemm(name, m, n, k, d.act, batch, d.wgemm, d.scales))
        return
    if BYTES[d.gemm] == 1:
        ops.append(_ew(name + "_quant", "quant", batch * m * k, d.act, out=d.gemm, flops=2.0))
    ops.append(Gemm(name, m, n, k, d.gemm, batch, None, d.scales))


def attention_core(d: Dims, name: str = "attn/core", window: int = 0,
                   dropout: bool = False) -> Attention:  # fmt: skip
    """FlashAttention over the cache; with a sliding `window` the kernel skips the blocks
    outside it, and a decode step reads only the window (vLLM, flash_attn's window_size)."""
    kv = min(d.kv_len, window) if window and d.decode else d.kv_len
    return Attention(name, d.batch, d.heads, d.kv_heads, d.q_len, kv, d.head_dim, True,
                     d.act, d.kv, window=window if window < kv else 0,
                     dropout=dropout)  # fmt: skip


def sliding_sdpa(d: Dims, window: int, name: str = "attn/core",
                 dropout: bool = False) -> Attention:  # fmt: skip
    """Hugging Face's sliding-window attention through SDPA: once the keys outnumber the window
    the window is a dense boolean mask (is_causal off), so the kernel computes every (query,
    key) pair of the square and masks them; a decode step's cache holds the window alone."""
    kv = min(d.kv_len, window) if d.decode else d.kv_len
    if kv < window:
        return attention_core(d, name, dropout=dropout)
    return Attention(name, d.batch, d.heads, d.kv_heads, d.q_len, kv, d.head_dim, d.decode,
                     d.act, d.kv, mask=True, window=window if d.decode else 0,
                     dropout=dropout)  # fmt: skip


def hf_masked_sdpa(cfg: ModelConfig, d: Dims, window: int) -> list[Op]:
    """Hugging Face's attention where it hands SDPA a mask (eager, or compiled: the module's own
    code): a sliding window (sliding_sdpa), or a causal mask built where is_causal would do
    (cfg.sdpa_mask: Falcon), which SDPA makes additive first; [] where SDPA runs causal without
    one (or context parallelism's ring, or the materialized form, runs it). SDPA applies the
    module's attention dropout in training either way; with a mask GQA's K and V reach it
    repeated to every query head."""
    if d.g.cp != 1 or d.attn != "flash":
        return []
    dropout = d.train and cfg.attention_dropout > 0
    if window:
        core = sliding_sdpa(d, window, dropout=dropout)
        ops: list[Op] = bool_mask_ops(d, kv_len=core.kv_len) if core.mask else []
    elif cfg.sdpa_mask:
        core = Attention("attn/core", d.batch, d.heads, d.kv_heads, d.q_len, d.kv_len,
                         d.head_dim, True, d.act, d.kv, mask=True, dropout=dropout)  # fmt: skip
        ops = bool_mask_ops(d)
    else:
        return []
    if core.mask and repeats_kv(d.heads, d.kv_heads):
        # With a mask HF does not use SDPA's GQA (use_gqa_in_sdpa): K and V are repeated to
        # every query head first (one K/V head repeats as a view, as static_cache_attention)
        ops += repeat_kv_ops(d.batch * d.heads * core.kv_len * d.head_dim, d.kv)
        core = replace(core, kv_heads=d.heads)
    return [*ops, core]


def torch_ring(d: Dims, eager: bool) -> bool:
    """Context parallelism with eager kernels runs as PyTorch's ring attention (cp_torch)."""
    return eager and d.g.cp > 1 and d.attn == "flash"


def attention_ops(d: Dims, dropout: bool = False, window: int = 0,
                  eager: bool = False) -> list[Op]:  # fmt: skip
    """The attention of one layer: one fused kernel (flash, which applies dropout inside), the
    materialized form (math; dropout is a kernel of its own), or ring attention (cp > 1:
    Megatron's, or PyTorch's context_parallel where the kernels are eager)."""
    if torch_ring(d, eager):
        from gpuperf.workloads import cp_torch

        return cp_torch.forward(d)
    if d.g.cp > 1:
        return ring_attention(d)
    if d.attn == "math":
        return math_attention(d, dropout, window)
    return [attention_core(d, window=window, dropout=dropout)]


def repeats_kv(heads: int, kv_heads: int) -> bool:
    """Whether Hugging Face's repeat_kv copies K and V to `heads` query heads (with a mask it
    does not use SDPA's GQA): GQA with more than one K/V head; one K/V head repeats as a view
    (the expand's size-1 head dimension merges with the repeats), and MHA needs none."""
    return 1 < kv_heads < heads


def repeat_kv_ops(full: int, kv: DType) -> list[Op]:
    """Hugging Face's repeat_kv of K and V to `full` elements each (every query head): an
    expand and a reshape, which copies through PyTorch's non-vectorized kernel (repeat_kv's
    strided_copy_eff)."""
    return [Elementwise(f"attn/repeat_{t}", "repeat_kv", full, 1, 1, kv, None, 0.0) for t in "kv"]


def contiguous_kv_ops(numel: int, kv: DType, name: str = "{}_contiguous") -> list[Op]:
    """K and V, handed over as transposed views, each made contiguous (`numel` elements): a
    copy through PyTorch's non-vectorized kernel (PyTorch's ring attention, cp_torch; cuDNN's
    SDPA on a paged cache's gathered K and V, serve_steps). `name` formats "k" and "v"."""
    return [Elementwise(name.format(t), "copy", numel, 1, 1, kv, None, 1.0, True) for t in "kv"]


def math_attention(d: Dims, dropout: bool = False, window: int = 0) -> list[Op]:
    """Attention before FlashAttention (Megatron's unfused path, HF's eager attention): K and V
    repeated to every query head (GQA), S = Q Kᵀ as a batched GEMM, one fused scale-mask-softmax
    kernel over the whole score matrix, then P V. The causal half is computed and masked, as is
    a sliding `window`'s outside in prefill; a decode step's cache holds the window alone (as
    attention_core reads it)."""
    bh, hd = d.batch * d.heads, d.head_dim
    kv_len = min(d.kv_len, window) if window and d.decode else d.kv_len
    ops: list[Op] = []
    if d.heads != d.kv_heads:
        full = d.batch * d.heads * kv_len * hd
        ops += repeat_kv_ops(full, d.kv)
    ops.append(Gemm("attn/scores", d.q_len, kv_len, hd, d.act, bh))
    ops.append(Norm("attn/softmax", "softmax", bh * d.q_len, kv_len, d.act))
    if dropout:  # on the probabilities: reads them, writes them and a byte mask (≈ half a write)
        n = bh * d.q_len * kv_len
        ops.append(Elementwise("attn/dropout", "dropout", n, 1, 1, d.act, None, 2.0))
    ops.append(Gemm("attn/context", d.q_len, hd, kv_len, d.act, bh))
    return ops


def sdpa_math_fp32(d: Dims) -> list[Op]:
    """PyTorch's math SDPA (aten _scaled_dot_product_attention_math) on 16-bit inputs, which it
    computes in fp32: q, k and v cast up; q and k each scaled by sqrt(scale); S = Q Kᵀ on CUDA
    cores (fp32, no TF32), k broadcast to every query head; the boolean mask made additive and
    added; _safe_softmax (softmax, a row of -inf where every key is masked: isneginf, all, where);
    P V; the output cast back. Every (query, key) pair is computed; nothing is skipped. One
    query (a decode step) makes the two products matrix-vector kernels (cuBLAS gemv), which
    stream their operand once; at batch 1 the broadcast k and v stay views (no copy)."""
    hd, a = d.head_dim, d.act
    bh = d.batch * d.heads
    n = bh * d.q_len * d.kv_len
    q, kv = bh * d.q_len * hd, d.batch * d.kv_heads * d.kv_len * hd
    expand = d.heads != d.kv_heads and d.batch > 1
    ops: list[Op] = [_ew("attn/math.q_f32", "cast", q, a, out="fp32", flops=0.0)]
    ops += [_ew(f"attn/math.{t}_f32", "cast", kv, a, out="fp32", flops=0.0) for t in "kv"]
    ops += [_ew("attn/math.scale_q", "mul", q, "fp32"), _ew("attn/math.scale_k", "mul", kv, "fp32")]
    if expand:  # matmul expands the broadcast k (and v) to every head: a copy
        ops.append(Copy("attn/math.expand_k", bh * d.kv_len * hd * 4, "fp32"))
    if d.q_len == 1:  # one dot product of head_dim per (head, key)
        ops.append(Reduce("attn/scores", "gemv", bh * d.kv_len, hd, 1, "fp32"))
    else:
        ops.append(Gemm("attn/scores", d.q_len, d.kv_len, hd, "fp32", bh))
    ops += bool_mask_ops(d, "attn/math.mask")
    ops.append(_ew("attn/math.mask_add", "add", n, "fp32", flops=1.0))
    ops.append(Norm("attn/softmax", "softmax", bh * d.q_len, d.kv_len, "fp32"))
    ops.append(_ew("attn/math.isneginf", "isneginf", n, "fp32", out="int8"))
    ops.append(Reduce("attn/math.all_masked", "all", bh * d.q_len, d.kv_len, 1, "int8"))
    ops.append(_ew("attn/math.where", "where", n, "fp32"))
    if expand:
        ops.append(Copy("attn/math.expand_v", bh * d.kv_len * hd * 4, "fp32"))
    if d.q_len == 1:  # one weighted sum over the keys per (head, value dimension)
        ops.append(Reduce("attn/context", "gemv", bh * hd, d.kv_len, 1, "fp32"))
    else:
        ops.append(Gemm("attn/context", d.q_len, hd, d.kv_len, "fp32", bh))
    ops.append(_ew("attn/math.out_cast", "cast", q, "fp32", out=a, flops=0.0))
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


def ring_hide(d: Dims, backward: bool = False, eager: bool = False) -> comm_ops.Hide:
    """Each ring step's transfer hides under the attention of the step before it (PyTorch's
    ring where the kernels are eager: cp_torch.hide)."""
    if torch_ring(d, eager):
        from gpuperf.workloads import cp_torch

        return cp_torch.hide(d, backward)
    sfx = ".bwd" if backward else ""
    hide: comm_ops.Hide = {}
    for step in range(1, d.g.cp):
        prev = "attn/core" if step == 1 else f"attn/core.ring{step - 1}"
        hide[f"attn/ring{step}.p2p{sfx}"] = (prev + sfx,)
    return hide


# Activation kernels by hidden_act: fused "act_and_mul" (gated) names, FLOPs per element.
_ACT_FLOPS = {"silu": 4.0, "gelu": 8.0, "gelu_tanh": 8.0, "gelu_new": 8.0, "relu": 1.0,
              "relu2": 2.0}  # fmt: skip
# transformers' NewGELUActivation (GPT-2's gelu_new) is written in Python, one kernel per
# operation: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))).
_GELU_NEW = (("half_x", "mul", 1), ("cube", "pow", 1), ("scale_cube", "mul", 1),
             ("add_x", "add", 2), ("scale", "mul", 1), ("tanh", "tanh", 1),
             ("add_one", "add", 1), ("mul", "mul", 2))  # fmt: skip


def _fused_act(act: str) -> str:
    """The activation a fused kernel runs: GELU-new is the tanh GELU."""
    return "gelu_tanh" if act == "gelu_new" else act


def _act_ops(name: str, act: str, n: int, a: DType, eager: bool, flops: float) -> list[Op]:
    """The activation of `n` elements: one kernel, or GELU-new's eight in eager PyTorch; fused
    kernels run GELU-new as the tanh GELU it is."""
    if eager and act == "gelu_new":
        return [_ew(f"{name}.{step}", fn, n, a, n_in=k) for step, fn, k in _GELU_NEW]
    return [_ew(name, act if eager else _fused_act(act) + "_fused", n, a, flops=flops)]


def dense_mlp(cfg: ModelConfig, d: Dims, eager: bool, inter: int | None = None,
              prefix: str = "mlp", comm: bool = True) -> list[Op]:  # fmt: skip
    """A dense MLP of width `inter` (this GPU's share): gated (act(gate) · up) or plain (act(up)),
    with the activation the config names. Eager runs Hugging Face's modules (separate gate and up
    GEMMs, or one gate_up GEMM split into strided halves, Phi-3); fused runs one gate_up GEMM and
    one act-and-mul kernel (vLLM)."""
    T, h = d.T, d.hidden
    f = d.inter if inter is None else inter
    act, a = cfg.hidden_act, d.act
    flops = _ACT_FLOPS[act]
    ops: list[Op] = []
    if cfg.mlp == "plain":
        ops += comm_ops.col_in(d, f"{prefix}/up") if comm else []
        _gemm(ops, d, f"{prefix}/up", T, f, h)
        if eager and act == "relu2":  # Nemotron's ReLU²: relu, then square
            ops.append(_ew(f"{prefix}/act", "relu", T * f, a))
            ops.append(_ew(f"{prefix}/act_square", "pow", T * f, a))
        else:
            ops += _act_ops(f"{prefix}/act", act, T * f, a, eager, flops)
    elif eager and cfg.gate_up_fused:  # one gate_up GEMM, then chunk: strided halves
        _gemm(ops, d, f"{prefix}/gate_up", T, 2 * f, h)
        ops.append(_ew(f"{prefix}/act", "act_chunk", T * f, a, flops=flops))
        ops.append(_ew(f"{prefix}/mul", "mul_chunk", T * f, a, n_in=2))
    elif eager:  # HF LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))
        _gemm(ops, d, f"{prefix}/gate", T, f, h)
        ops += _act_ops(f"{prefix}/act", act, T * f, a, True, flops)
        _gemm(ops, d, f"{prefix}/up", T, f, h)
        ops.append(_ew(f"{prefix}/mul", "mul", T * f, a, n_in=2))
    else:
        ops += comm_ops.col_in(d, f"{prefix}/gate_up") if comm else []
        _gemm(ops, d, f"{prefix}/gate_up", T, 2 * f, h)
        fn = "silu_and_mul" if act == "silu" else f"{_fused_act(act)}_and_mul"
        ops.append(_ew(f"{prefix}/act", fn, T * f, a, n_in=2, flops=flops + 1.0))
    _gemm(ops, d, f"{prefix}/down", T, h, f)
    ops += comm_ops.row_out(d, f"{prefix}/down") if comm else []
    return ops


def mlp_block(cfg: ModelConfig, d: Dims, eager: bool, kind: LayerKind) -> list[Op]:
    """The layer's MLP: routed experts (and shared ones) in an MoE layer, else a dense MLP (the
    dense layers of an MoE model use intermediate_size)."""
    if kind.moe:
        from gpuperf.workloads.moe_layers import moe_block

        return moe_block(cfg, d, eager)
    return dense_mlp(cfg, d, eager)


def _qk_norms(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    """Qwen3's and Gemma3's RMSNorm over each head of q and of k (OLMo-2's over all of q, and
    all of k)."""
    if not cfg.qk_norm:
        return []
    a, hd = d.act, d.head_dim
    if cfg.qk_norm_full:  # OLMo-2: one norm over each token's whole q (and k) projection
        q, k = (d.T, d.heads * hd), (d.T, d.kv_heads * hd)
    else:  # (rows, columns)
        q, k = (d.T * d.heads, hd), (d.T * d.kv_heads, hd)
    if eager:
        return eager_norm(cfg, "attn/q_norm", *q, a) + eager_norm(cfg, "attn/k_norm", *k, a)
    return [Norm("attn/q_norm", "rmsnorm", *q, a), Norm("attn/k_norm", "rmsnorm", *k, a)]


def _rotary(cfg: ModelConfig, d: Dims) -> int:
    """Values of each head that RoPE rotates (partial rotary: GPT-NeoX, Nemotron, Phi-3)."""
    return max(2, int(d.head_dim * cfg.rotary_frac) // 2 * 2)


def _window(cfg: ModelConfig, kind: LayerKind) -> int:
    return cfg.sliding_window if kind.sliding else 0


def fused_attention(cfg: ModelConfig, d: Dims, kind: LayerKind) -> list[Op]:
    """The attention block after its norm: projections, RoPE, the cache write, the attention
    kernel, the output projection and their tensor-parallel collectives."""
    T, h, hd = d.T, d.hidden, d.head_dim
    ops: list[Op] = comm_ops.col_in(d, "attn/qkv")  # sequence parallel: gather first
    if cfg.is_mla:
        from gpuperf.workloads.mla_layers import mla_attention

        return ops + mla_attention(cfg, d, False, d.mla)
    _gemm(ops, d, "attn/qkv", T, (d.heads + 2 * d.kv_heads) * hd, h)
    ops += _qk_norms(cfg, d, False)
    if cfg.positions == "rope":
        n = T * (d.heads + d.kv_heads) * _rotary(cfg, d)
        ops.append(_ew("attn/rope", "rope", n, d.act, flops=3.0))
    if d.cache:
        ops.append(Copy("attn/kv_write", T * 2 * d.kv_heads * hd * BYTES[d.kv], d.kv))
    window = _window(cfg, kind)
    # Compiled layers run Hugging Face's attention: SDPA with the mask HF hands it, if any.
    masked = hf_masked_sdpa(cfg, d, window) if d.compiled else []
    ops += masked or attention_ops(d, d.train and cfg.attention_dropout > 0, window)
    _gemm(ops, d, "attn/out", T, h, d.heads * hd)
    return ops + comm_ops.row_out(d, "attn/out")


def hybrid_block(cfg: ModelConfig, d: Dims, kind: LayerKind) -> list[Op]:
    """A hybrid model's one block after its norm (Nemotron-H as Megatron-Core runs it): a
    Mamba-2 mixer, attention, a dense MLP or an MoE block; the next layer's norm adds the
    residual."""
    if kind.block == "mamba":
        from gpuperf.workloads.mamba_layers import mamba_mixer

        return mamba_mixer(cfg, d)
    if kind.block == "attn":
        return fused_attention(cfg, d, kind)
    return mlp_block(cfg, d, False, kind)


def fused_layer(cfg: ModelConfig, d: Dims, kind: LayerKind = DENSE) -> list[Op]:
    """vLLM / Megatron-style layer. Norms fuse the previous residual add unless the residual is
    parallel. Under tensor parallelism the collectives of comm_ops sit between the kernels."""
    h = d.hidden
    # Training with dropout (Megatron's GPT): each block's output goes through a fused
    # bias-dropout-add kernel, so the next norm reads a finished residual.
    drop = d.train and cfg.hidden_dropout > 0
    fused_res = not cfg.parallel_residual and not drop
    norm = f"{kind.block}/norm" if kind.block else "attn/norm"
    ops: list[Op] = [Norm(norm, cfg.norm, d.rows, h, d.act, fused_res)] if cfg.pre_norm else []
    if kind.block:
        return ops + hybrid_block(cfg, d, kind)
    ops += fused_attention(cfg, d, kind)
    if cfg.sandwich_norm:  # Gemma2/3: the attention output is normalized before the residual
        ops.append(Norm("attn/post_norm", cfg.norm, d.rows, h, d.act))
    ops += _residual_scale(cfg, "attn", d.rows * h, d.act)
    if drop:
        ops.append(_ew("attn/bias_dropout_add", "dropout_add", d.rows * h, d.act, n_in=2,
                       flops=3.0))  # fmt: skip
    if not cfg.pre_norm:  # no next norm to fuse the residual add into
        ops.append(_ew("attn/residual", "add", d.rows * h, d.act, n_in=2))
    elif not (cfg.parallel_residual and cfg.shared_input_norm):
        ops.append(Norm("mlp/norm", cfg.norm, d.rows, h, d.act, fused_res))
    ops += mlp_block(cfg, d, False, kind)
    if cfg.sandwich_norm:
        ops.append(Norm("mlp/post_norm", cfg.norm, d.rows, h, d.act))
    ops += _residual_scale(cfg, "mlp", d.rows * h, d.act)
    if drop:
        ops.append(_ew("mlp/bias_dropout_add", "dropout_add", d.rows * h, d.act, n_in=2,
                       flops=3.0))  # fmt: skip
    if not cfg.pre_norm:
        ops.append(_ew("mlp/residual", "add", d.rows * h, d.act, n_in=2))
    if cfg.parallel_residual:
        ops.append(_ew("residual", "add", d.rows * h, d.act, n_in=3, flops=2.0))
    return ops


def eager_norm(cfg: ModelConfig, name: str, rows: int, cols: int, act: DType) -> list[Op]:
    """LlamaRMSNorm in eager PyTorch: to(fp32), pow, mean, add eps, rsqrt, mul, to(dtype), mul w;
    Gemma's (cfg.norm_weight_fp32) multiplies by 1 + w in fp32, then casts back; OLMo-2's
    (cfg.norm_scale_fp32) by w in fp32, then casts back.

    The casts vanish when the model runs in fp32. nn.LayerNorm is one kernel.
    """
    if cfg.norm == "layernorm":
        plus1 = [_ew(f"{name}/weight_plus1", "add", cols, act)] if cfg.norm_weight_plus1 else []
        return [*plus1, Norm(name, "layernorm", rows, cols, act)]
    n = rows * cols
    cast = act != "fp32"
    ops: list[Op] = []
    # The widening cast, x * rsqrt(var) and weight * x run PyTorch's non-vectorized kernel
    # (generic: a broadcast operand; the cast up is its unrolled form); pow and the cast back
    # are vectorized (eager_ew.json records the kernels).
    if cast:
        ops.append(_ew(f"{name}/cast_f32", "cast", n, act, out="fp32", flops=0.0, generic=True))
    ops += [
        _ew(f"{name}/pow", "pow", n, "fp32"),
        Reduce(f"{name}/mean", "mean", rows, cols, 1, "fp32"),
        _ew(f"{name}/add_eps", "add", rows, "fp32"),
        _ew(f"{name}/rsqrt", "rsqrt", rows, "fp32"),
        _ew(f"{name}/mul", "mul", n, "fp32", generic=True),
    ]
    in32 = cfg.norm_weight_fp32 or cfg.norm_scale_fp32  # the weight scales before the cast back
    weight = _ew(f"{name}/mul_weight", "mul", n, "fp32" if in32 else act, generic=True)
    if cfg.norm_weight_fp32:  # 1.0 + self.weight.float(): two small kernels first
        if cast:
            ops.append(_ew(f"{name}/weight_f32", "cast", cols, act, out="fp32", flops=0.0))
        ops.append(_ew(f"{name}/weight_plus1", "add", cols, "fp32"))
    if in32:
        ops.append(weight)
    if cast:
        ops.append(_ew(f"{name}/cast_back", "cast", n, "fp32", out=act, flops=0.0))
    if not in32:
        ops.append(weight)
    return ops


def eager_rope(name: str, d: Dims, heads: int, dim: int | None = None,
               split: bool = False, fp32: bool = False) -> list[Op]:  # fmt: skip
    """x * cos + rotate_half(x) * sin; rotate_half = cat(-x2, x1): 5 kernels per tensor, each
    on a view transposed to [batch, heads, T, head_dim] or a half of it, or with cos/sin
    broadcast over the heads: PyTorch's non-vectorized kernels (generic). Partial rotary
    (`dim` < head_dim), or code that splits at any fraction (`split`: Phi-3), slices the rotated
    part and cats it back to the rest. With fp32 cos and sin (`fp32`: OLMo-2) the products and
    their sum are fp32, then cast back."""
    rot = d.head_dim if dim is None else dim
    n, a = d.T * heads * rot, d.act
    wide = "fp32" if fp32 else None
    ops: list[Op] = [
        _ew(f"{name}/mul_cos", "mul", n, a, out=wide, generic=True),
        _ew(f"{name}/neg", "neg", n // 2, a, generic=True),
        Copy(f"{name}/cat", n * BYTES[a], a, generic=True),
        _ew(f"{name}/mul_sin", "mul", n, a, out=wide, generic=True),
        _ew(f"{name}/add", "add", n, wide or a, n_in=2, generic=True),
    ]
    if fp32:
        ops.append(_ew(f"{name}/cast_back", "cast", n, "fp32", out=a, flops=0.0))
    if rot < d.head_dim or split:
        # torch.cat([q_embed, q_pass]): q_pass a strided slice of a transposed view
        ops.append(Copy(f"{name}/cat_pass", d.T * heads * d.head_dim * BYTES[a], a, generic=True))
    return ops


def bool_mask_ops(d: Dims, name: str = "attn/mask", kv_len: int = 0) -> list[Op]:
    """SDPA given a boolean mask makes it additive first (where(mask, 0, -inf), in the query's
    dtype): the two scalars become tensors on the GPU (two fills), then a where over the mask
    of `kv_len` keys (d.kv_len where 0). The broadcast scalars keep the where off the vectorized
    path: PyTorch's generic elementwise kernel (measured beside the masked SDPA calls of
    attention_masked_train.json: 157 us at 67M elements on an H100, 153 us on an H200)."""
    ops: list[Op] = [_ew(f"{name}_{v}", "fill", 1, d.act, flops=0.0) for v in ("zero", "neg_inf")]
    keys = kv_len or d.kv_len
    ops.append(_ew(f"{name}_where", "where", d.batch * d.q_len * keys, "int8", out=d.act,
                   generic=True))  # fmt: skip
    return ops


def kv_list_index_ops(d: Dims) -> list[Op]:
    """FalconAttention._split_heads of a model with fewer K/V heads than query heads picks K and
    V with a Python list (fused_qkv[..., [-2], :], or qkv[:, :, :, [-2]] in the new decoder
    architecture). Each list becomes an index tensor on the host, copied to the GPU from
    pageable memory (PyTorch waits for that copy: the host stops until the GPU has run what
    was queued before it; not modelled), then an index kernel gathers the K or V head."""
    a = d.act
    picked = d.T * d.kv_heads * d.head_dim * BYTES[a]
    return [
        Copy("attn/k_index_h2d", 8, "int8"),  # type: ignore[arg-type]
        Copy("attn/pick_k", picked, a),  # type: ignore[arg-type]
        Copy("attn/v_index_h2d", 8, "int8"),  # type: ignore[arg-type]
        Copy("attn/pick_v", picked, a),  # type: ignore[arg-type]
    ]


def kv_broadcast_ops(d: Dims) -> list[Op]:
    """FalconAttention._split_heads of the new decoder architecture: the fused q/k/v output is
    viewed as (KV heads, group + 2, head_dim); the queries' slice is flattened into a copy,
    K and V (picked by kv_list_index_ops) are broadcast to the group and flattened into copies
    of every query head's size (what SDPA and the cache then get)."""
    a, hd = d.act, d.head_dim
    q = d.T * d.heads * hd * BYTES[a]
    full = d.T * d.heads * hd
    return [
        Copy("attn/split_q", q, a),  # type: ignore[arg-type]
        Elementwise("attn/expand_k", "repeat_kv", full, 1, 1, a, None, 0.0),  # type: ignore[arg-type]
        Elementwise("attn/expand_v", "repeat_kv", full, 1, 1, a, None, 0.0),  # type: ignore[arg-type]
    ]


def static_cache_attention(d: Dims, math: bool = False) -> list[Op]:
    """HF decode on a StaticCache (what a CUDA graph captures): index_copy_ of the new K and V, then
    SDPA with an explicit mask over the whole cache. With a mask, SDPA cannot use enable_gqa, so
    GQA models first materialize K and V for every query head (repeat_kv: expand + reshape copies).
    The cache is sized ctx + a few steps; kv_len stands for it."""
    hd, kvb = d.head_dim, BYTES[d.kv]
    new = d.batch * d.kv_heads * hd * d.q_len * kvb
    ops: list[Op] = [Copy("attn/cache_k", new, d.kv), Copy("attn/cache_v", new, d.kv)]
    if math:  # PyTorch's math backend takes the cache as it is (sdpa_math_fp32)
        return ops + sdpa_math_fp32(d)
    kv_heads = d.kv_heads
    if d.kv_heads == 1:
        # One K/V head (multi-query) repeats as a view: the expand's size-1 head dimension merges
        # with the repeats (stride 0), so no copy runs, and cuDNN's kernel runs a tile per query
        # head, each reading the one head's keys and values again (measured: GPT-BigCode's
        # StaticCache step, 70 us a layer at 8 x 48 heads x 2,049 keys; family_diag_probe.json;
        # the re-reads come from L2, which the model charges at HBM's rate).
        kv_heads = d.heads
    elif repeats_kv(d.heads, d.kv_heads):
        # One copy kernel per tensor writes heads x kv_len rows; its reads of the kv_heads rows
        # repeat (counted as reads of the full size, an upper bound).
        full = d.batch * d.heads * d.kv_len * hd
        ops += repeat_kv_ops(full, d.kv)
        kv_heads = d.heads
    ops.append(Attention("attn/core", d.batch, d.heads, kv_heads, d.q_len, d.kv_len, hd, False,
                         d.act, d.kv, mask=True))  # fmt: skip
    return ops


def _eager_attention(cfg: ModelConfig, d: Dims, kind: LayerKind) -> list[Op]:
    """HF attention: q/k/v projections (one fused GEMM where the module is one), q/k norms,
    RoPE, the cache update (a sliding layer keeps its window), SDPA, the output projection."""
    T, h, hd, a = d.T, d.hidden, d.head_dim, d.act
    window = _window(cfg, kind)
    if window and d.decode:  # DynamicSlidingWindowLayer: the cache holds the window alone
        d = replace(d, kv_len=min(d.kv_len, window))
    ops: list[Op] = []
    if cfg.qkv_fused:
        _gemm(ops, d, "attn/qkv", T, (d.heads + 2 * d.kv_heads) * hd, h)
    else:
        _gemm(ops, d, "attn/q", T, d.heads * hd, h)
        _gemm(ops, d, "attn/k", T, d.kv_heads * hd, h)
        _gemm(ops, d, "attn/v", T, d.kv_heads * hd, h)
    if cfg.kv_list_index:
        ops += kv_list_index_ops(d)
    if cfg.kv_broadcast and d.heads != d.kv_heads:
        ops += kv_broadcast_ops(d)
        d = replace(d, kv_heads=d.heads)  # RoPE, the cache and SDPA see every head's K and V
    ops += _qk_norms(cfg, d, True)
    if cfg.positions == "rope":
        rot = _rotary(cfg, d)
        split, fp32 = cfg.rope_split, cfg.rope_fp32 and d.act != "fp32"
        ops += eager_rope("attn/rope_q", d, d.heads, rot, split, fp32) + eager_rope(
            "attn/rope_k", d, d.kv_heads, rot, split, fp32
        )
    math = cfg.sdpa_math and d.g.cp == 1 and d.attn == "flash"  # PyTorch's math SDPA
    if d.static_cache:
        ops += static_cache_attention(d, math)
    else:
        # DynamicCache.update: torch.cat([cache, new]) for K and V. HF keeps the cache on by
        # default, in training too (use_cache=True in the config), so the cat runs there as well.
        # Context parallel (PyTorch's ring, run with use_cache=False): no cache; the ring makes
        # K and V contiguous itself (cp_torch).
        if d.g.cp == 1:
            past = d.kv_len - d.q_len
            kv_bytes = d.batch * d.kv_heads * hd * (BYTES[d.kv] * past + BYTES[a] * d.q_len)
            ops.append(Copy("attn/cache_k", kv_bytes, d.kv))
            ops.append(Copy("attn/cache_v", kv_bytes, d.kv))
        if math:
            ops += sdpa_math_fp32(d)
        elif masked := hf_masked_sdpa(cfg, d, window):
            if window and d.decode and d.kv_len >= window:
                # The window is a slice of the concatenated cache: SDPA gets contiguous copies.
                win = d.batch * d.kv_heads * hd * window * BYTES[d.kv]
                ops.append(Copy("attn/window_k", win, d.kv))
                ops.append(Copy("attn/window_v", win, d.kv))
            ops += masked
        else:  # SDPA takes the module's attention dropout in training (GPT-2's attn_pdrop)
            ops += attention_ops(d, d.train and cfg.attention_dropout > 0, eager=True)
    _gemm(ops, d, "attn/out", T, h, d.heads * hd)
    ops += comm_ops.row_out(d, "attn/out")
    return ops


def _eager_dropout(cfg: ModelConfig, d: Dims, name: str) -> list[Op]:
    """nn.Dropout on a block's output in training (GPT-2's resid_pdrop, GPT-NeoX's hidden
    dropout): one kernel writing the output and a byte mask, before the residual add."""
    if not (d.train and cfg.hidden_dropout > 0):
        return []
    return [_ew(name, "dropout", d.T * d.hidden, d.act, flops=2.0)]


def eager_layer(cfg: ModelConfig, d: Dims, kind: LayerKind = DENSE) -> list[Op]:
    """A Hugging Face decoder layer with SDPA and a DynamicCache (GQA via SDPA enable_gqa, no
    repeat_kv): LlamaDecoderLayer and the families built like it."""
    T, h, a = d.T, d.hidden, d.act
    ops: list[Op] = eager_norm(cfg, "attn/norm", T, h, a) if cfg.pre_norm else []
    if cfg.is_mla:
        from gpuperf.workloads.mla_layers import mla_attention

        ops += mla_attention(cfg, d, True, d.mla)
    else:
        ops += _eager_attention(cfg, d, kind)
    ops += _eager_dropout(cfg, d, "attn/resid_dropout")
    if cfg.sandwich_norm:  # Gemma2/3: post_attention_layernorm before the residual add
        ops += eager_norm(cfg, "attn/post_norm", T, h, a)
    if cfg.parallel_residual:
        if not cfg.shared_input_norm:
            ops += eager_norm(cfg, "mlp/norm", T, h, a)
    else:
        ops += _residual_scale(cfg, "attn", T * h, a)
        ops.append(_ew("attn/residual", "add", T * h, a, n_in=2))
        if cfg.pre_norm:
            ops += eager_norm(cfg, "mlp/norm", T, h, a)
    ops += mlp_block(cfg, d, True, kind)
    ops += _eager_dropout(cfg, d, "mlp/resid_dropout")
    if cfg.sandwich_norm:
        ops += eager_norm(cfg, "mlp/post_norm", T, h, a)
    if cfg.parallel_residual:  # mlp_output + attn_output + hidden_states: two adds in Python
        ops.append(_ew("mlp/residual_sum", "add", T * h, a, n_in=2))
    else:
        ops += _residual_scale(cfg, "mlp", T * h, a)
    ops.append(_ew("mlp/residual", "add", T * h, a, n_in=2))
    return ops


def _residual_scale(cfg: ModelConfig, block: str, n: int, a: DType) -> list[Op]:
    """Granite's residual_multiplier: the block's output scaled before the residual add."""
    return [_ew(f"{block}/residual_scale", "mul", n, a)] if cfg.residual_scale else []
