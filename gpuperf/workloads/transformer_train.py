"""Training step after the forward: loss, backward kernels, AdamW.

Fused (Megatron-LM / Transformer Engine style): every forward GEMM gives a dgrad GEMM
(dX[T, k] = dY[T, n] @ Wᵀ) and a wgrad GEMM (dW[k, n] = Xᵀ @ dY); FlashAttention backward; fused
norm and activation backward kernels; fused cross-entropy; one fused multi-tensor AdamW kernel over
all parameters (mixed precision: 16-bit params and grads, fp32 master weights, m and v), the cast of
the master weights back to 16 bits, and zeroing the grad buffer.

Eager (HF transformers + torch.autograd + torch.optim.AdamW(foreach=True)): the backward kernels in
the order autograd runs them for LlamaDecoderLayer, checked with a dispatch-mode trace (73 kernels
per layer for GQA: 10 MLP, 17 post-attention norm + residual, 29 attention, 17 input norm +
residual). The optimizer is the 8 _foreach ops of torch's multi-tensor AdamW (the default on
CUDA), in the parameters' dtype, one foreach Op each (each really launches ~params/(320·65536)
multi_tensor_apply kernels: their bytes and a fixed cost per launch, gpuperf.perfmodel.membound).
"""

from __future__ import annotations

from dataclasses import replace

from gpuperf.dtypes import BYTES, DType
from gpuperf.perfmodel.ops import (
    P2P,
    Attention,
    Collective,
    Copy,
    Elementwise,
    Gemm,
    GroupedGemm,
    Norm,
    Op,
    Reduce,
    Scan,
)
from gpuperf.workloads import comm_ops, cp_torch
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.moe_layers import MOE_SUM, router_gathered
from gpuperf.workloads.scenario import plan_modules
from gpuperf.workloads.transformer_layers import Dims, _ew, logits_gathered


def gemm_backward(g: Gemm) -> list[Op]:
    """dgrad then wgrad of C[m, n] = A[m, k] @ W[k, n], scaled as the forward's (fp8)."""
    return [
        Gemm(g.name + ".dgrad", g.m, g.k, g.n, g.dtype, g.batch, scales=g.scales),
        Gemm(g.name + ".wgrad", g.k, g.n, g.m, g.dtype, g.batch, scales=g.scales, wgrad=True),
    ]


def fused_backward(op: Op) -> list[Op]:
    """The backward kernels of one fused forward kernel (empty when autograd needs none)."""
    if isinstance(op, Gemm):
        return gemm_backward(op)
    if isinstance(op, GroupedGemm):  # dX = dY @ Wᵀ per expert, then each expert's dW
        return [replace(op, name=op.name + ".dgrad", n=op.k, k=op.n),
                replace(op, name=op.name + ".wgrad", wgrad=True)]  # fmt: skip
    if isinstance(op, Reduce) and op.name.endswith(MOE_SUM):
        # The un-permute's backward: the output gradient spread to each routed copy, times its
        # routing weight, and the weights' gradients (reads the copies back): one pass over them.
        return [Copy(op.name + ".bwd", op.rows * op.cols * BYTES[op.dtype], op.dtype)]
    if isinstance(op, Attention):
        return [replace(op, name=op.name + ".bwd", backward=True)]
    if isinstance(op, Norm):
        return [replace(op, name=op.name + ".bwd", backward=True)]
    if isinstance(op, Scan):  # the scan's last forward kernel stands for its whole backward
        from gpuperf.workloads.mamba_layers import scan_backward_of

        return scan_backward_of(op) if op.kernel == "chunk_scan" else []
    if isinstance(op, Elementwise):
        if op.fn in ("quant", "add"):  # residual adds pass gradients through unchanged
            return []
        if op.name.startswith(_NO_GRAD):  # the math SDPA's mask work has no gradient
            return []
        if op.fn in ("dropout", "dropout_add"):  # the gradient times the saved mask
            return [Elementwise(op.name + ".bwd", "dropout_bwd", op.numel, 1, 1, op.dtype,
                                None, 1.0)]  # fmt: skip
        if op.fn == "rope":  # the inverse rotation, same shape
            return [replace(op, name=op.name + ".bwd")]
        # Reads the output grad and the saved inputs, writes one grad per input.
        return [
            Elementwise(
                op.name + ".bwd",
                op.fn + "_bwd",
                op.numel,
                op.n_in + 1,
                op.n_in,
                op.dtype,
                op.out_dtype,
                2 * op.flops_per_elem,
            )  # fmt: skip
        ]
    if isinstance(op, Copy):
        return [] if op.name.startswith(_NO_GRAD) else [replace(op, name=op.name + ".bwd")]
    if isinstance(op, P2P):  # ring attention: K/V and their gradients travel back
        return [replace(op, name=op.name + ".bwd", nbytes=2 * op.nbytes)]
    if isinstance(op, Collective) and op.coll == "alltoall":  # MoE dispatch/combine, mirrored
        return [replace(op, name=op.name + ".bwd")]
    # Tensor-parallel collectives are placed by layer_backward (comm_ops); Reduce (top-k
    # indices) needs no gradient; Embedding is handled by the caller.
    return []


def eager_norm_backward(cfg: ModelConfig, name: str, rows: int, cols: int, a: str) -> list[Op]:
    """Autograd of LlamaRMSNorm's 8 eager kernels: 16 kernels (weight grad, then input grad);
    Gemma's (norm_weight_fp32) and OLMo-2's (norm_scale_fp32) scale in fp32 after the cast
    back's gradient and cast the weight's gradient back to the weight's dtype (17). No casts
    when the model runs in fp32."""
    if cfg.norm == "layernorm":
        return [Norm(name + ".bwd", "layernorm", rows, cols, a, backward=True)]  # type: ignore[arg-type]
    n, f = rows * cols, "fp32"
    cast = a != f
    g32 = cfg.norm_weight_fp32 or cfg.norm_scale_fp32
    w = f if g32 else a
    bwd_x = _ew(f"{name}/mul_weight.bwd_x", "mul", n, w, 2, generic=True)
    bwd_w = _ew(f"{name}/mul_weight.bwd_w", "mul", n, w, 2)
    weight: list[Op] = [bwd_x, bwd_w] if g32 else [bwd_w, bwd_x]  # autograd's operand order
    weight.append(Reduce(f"{name}/weight.grad", "sum", cols, rows, 1, w))  # type: ignore[arg-type]
    if g32 and cast:
        weight.append(_ew(f"{name}/weight.grad_cast", "cast", cols, f, out=a, flops=0.0))
    cast_back = (
        [_ew(f"{name}/cast_back.bwd", "cast", n, a, out=f, flops=0.0, generic=True)] if cast else []
    )
    first = cast_back + weight if g32 else weight + cast_back
    tail = [_ew(f"{name}/cast_f32.bwd", "cast", n, f, out=a, flops=0.0)] if cast else []
    return [
        *first,
        _ew(f"{name}/mul.bwd_x", "mul", n, f, 2, generic=True),
        _ew(f"{name}/mul.bwd_r", "mul", n, f, 2),
        Reduce(f"{name}/rsqrt.grad_sum", "sum", rows, cols, 1, f),  # type: ignore[arg-type]
        _ew(f"{name}/rsqrt.bwd_pow", "pow", rows, f),
        _ew(f"{name}/rsqrt.bwd_mul", "mul", rows, f, 2),
        _ew(f"{name}/rsqrt.bwd_scale", "mul", rows, f),
        _ew(f"{name}/mean.bwd", "div", n, f, out=f, generic=True),
        _ew(f"{name}/pow.bwd_pow", "pow", n, f),
        _ew(f"{name}/pow.bwd_mul", "mul", n, f, 2),
        _ew(f"{name}/pow.bwd_mul2", "mul", n, f, 2),
        _ew(f"{name}/grad_add", "add", n, f, 2),
        *tail,
    ]


def _eager_rope_backward(name: str, n: int, a: str) -> list[Op]:
    # d(x*cos + cat(-x2, x1)*sin): mul, neg, two slice_backward (zero-fill + copy), add, mul, add.
    # On the same transposed views and broadcast cos/sin as the forward: non-vectorized.
    return [
        _ew(f"{name}/mul_sin.bwd", "mul", n, a, generic=True),
        _ew(f"{name}/neg.bwd", "neg", n // 2, a, generic=True),
        _ew(f"{name}/slice1.bwd", "slice_backward", n, a, generic=True),
        _ew(f"{name}/slice2.bwd", "slice_backward", n, a, generic=True),
        _ew(f"{name}/cat.bwd_add", "add", n, a, 2, generic=True),
        _ew(f"{name}/mul_cos.bwd", "mul", n, a, generic=True),
        _ew(f"{name}/grad_add", "add", n, a, 2, generic=True),
    ]


def _fp32_rope_casts(name: str, n: int, a: str, wide: bool) -> list[Op]:
    """The casts autograd adds around a RoPE computed in fp32 (OLMo-2): none otherwise."""
    if not wide:
        return []
    return [_ew(f"{name}/cast_back.bwd", "cast", n, a, out="fp32", flops=0.0),
            _ew(f"{name}/mul_cos.bwd_cast", "cast", n, "fp32", out=a, flops=0.0),
            _ew(f"{name}/mul_sin.bwd_cast", "cast", n, "fp32", out=a, flops=0.0)]  # fmt: skip


def _pass_slices_backward(name: str, rot: int, whole: int | None, a: str) -> list[Op]:
    """Partial rotary (GPT-NeoX, Nemotron): q[..., :rot] and q[..., rot:] each reach q's gradient
    through slice_backward (a zero-filled q-sized tensor, the slice's gradient copied into its
    strided place), then the two are added. None without a pass-through part (`whole` None)."""
    if not whole:
        return []
    ops = [_ew(f"{name}/rot_slice.bwd_fill", "fill", whole, a, 0),
           _ew(f"{name}/rot_slice.bwd", "slice_backward", rot, a, generic=True)]  # fmt: skip
    if whole > rot:  # split at full rotary (Phi-3): the empty pass part's slice costs nothing
        ops.append(_ew(f"{name}/pass_slice.bwd_fill", "fill", whole, a, 0))
        ops.append(_ew(f"{name}/pass_slice.bwd", "slice_backward", whole - rot, a, generic=True))
    return [*ops, _ew(f"{name}/slices.bwd_add", "add", whole, a, 2)]


_MATH = ("attn/scores", "attn/softmax", "attn/context", "attn/repeat_", "attn/math.")
# Kernels that make SDPA's additive mask from a boolean one, that find the math SDPA's fully
# masked rows, or that copy a list index to the GPU: no gradient.
_NO_GRAD = ("attn/math.mask_", "attn/mask_", "attn/math.isneginf", "attn/k_index_h2d",
            "attn/v_index_h2d")  # fmt: skip


def _fwd_gemm(layer: list[Op], name: str) -> Gemm:
    return next(op for op in layer if op.name == name)  # type: ignore[return-value]


def _eager_norms(layer: list[Op]) -> dict[str, tuple[int, int]]:
    """The eager RMSNorms among a layer's kernels (eager_norm's pow, mean and rsqrt under one
    name): name -> (rows, cols)."""
    rows = {op.name[: -len("/rsqrt")]: op.numel for op in layer
            if isinstance(op, Elementwise) and op.name.endswith("/rsqrt")}  # fmt: skip
    out = {}
    for op in layer:
        name = op.name[: -len("/pow")]
        if op.name.endswith("/pow") and name in rows and isinstance(op, Elementwise):
            out[name] = (rows[name], op.numel // rows[name])
    return out


# Forward GEMMs that read the same input as a sibling run before them in backward: autograd
# sums their input gradients (one add each), named as traced on Llama.
_SHARED_INPUT = {"attn/k": ("attn/kv.grad_add", "attn/v"), "attn/q": ("attn/q.grad_add", "attn/k"),
                 "mlp/gate": ("mlp/grad_add", "mlp/up")}  # fmt: skip


# The eager RoPE each projection's output goes through (its gradient is cloned before the GEMM).
_ROPE_OF = {"attn/q": "attn/rope_q", "attn/k": "attn/rope_k"}


_QKV = frozenset({"attn/qkv", "attn/q", "attn/k", "attn/v"})


def bias_grad(cfg: ModelConfig, op: Op, a: DType) -> list[Op]:
    """A biased nn.Linear's bias gradient in eager autograd: the output gradient summed over
    the tokens, a column reduction of its own (GPT-2's and GPT-NeoX's every projection, Qwen2's
    q, k and v; none for the lm_head)."""
    if not isinstance(op, Gemm) or op.batch > 1 or not op.name.startswith(("attn/", "mlp/")):
        return []  # the lm_head, and math attention's batched score products, have no bias
    if not (cfg.linear_bias or (cfg.qkv_bias and op.name in _QKV)):
        return []
    return [Reduce(op.name + ".bias_grad", "sum", op.n, op.m, 1, a)]


def _gqa_grad_sums(d: Dims) -> list[Op]:
    """SDPA with enable_gqa: the K and V gradients summed over each query group (none for MHA)."""
    if d.heads == d.kv_heads:
        return []
    kv_n, group = d.batch * d.kv_heads * d.kv_len * d.head_dim, d.heads // d.kv_heads
    return [_ew("attn/core.dk_sum", "sum", kv_n, d.act, group),
            _ew("attn/core.dv_sum", "sum", kv_n, d.act, group)]  # fmt: skip


def _derived_backward(cfg: ModelConfig, d: Dims, layer: list[Op]) -> list[Op]:
    """A layer's eager backward derived from its forward kernels by the fused rules, with what
    autograd adds around them as traced on Llama (the same module code in every family): each
    eager RMSNorm's and each eager RoPE's kernels, a product's two gradient products (one
    kernel per input), the gradient adds where a residual joins and
    where q/k/v or gate/up read one input, the clones of q's and k's gradients before their
    GEMMs, and the per-group sums of K and V gradients of SDPA's enable_gqa (of Falcon's
    broadcast, where K and V reach SDPA at every head). The KV cache's cat has no backward
    kernel (its gradient is a view)."""
    norms, done = _eager_norms(layer), set()
    ropes = {op.name.rpartition("/")[0]: op.numel for op in layer
             if isinstance(op, Elementwise) and op.name.endswith("/mul_cos")}  # fmt: skip
    whole = {op.name.rpartition("/")[0]: op.nbytes // BYTES[d.act] for op in layer
             if isinstance(op, Copy) and op.name.endswith("/cat_pass")}  # fmt: skip
    # RoPE in fp32 (OLMo-2): the cast back's gradient widens, and each product's gradient is
    # cast back to the input's dtype (three casts per tensor)
    wide = {op.name.rpartition("/")[0] for op in layer if op.name.endswith("/cast_back")
            and op.name.rpartition("/")[0] in ropes}  # fmt: skip
    names = {op.name for op in layer}
    ring = _is_torch_ring(layer)
    a, first_residual = d.act, None
    out: list[Op] = []
    for op in reversed(layer):
        name = op.name.rpartition("/")[0]
        if name in norms or name in ropes:
            if name not in done:  # its last kernel comes first: its backward, once
                done.add(name)
                out += (eager_norm_backward(cfg, name, *norms[name], a) if name in norms
                        else _eager_rope_backward(name, ropes[name], a)
                        + _pass_slices_backward(name, ropes[name], whole.get(name), a)
                        + _fp32_rope_casts(name, ropes[name], a, name in wide))  # fmt: skip
            continue
        if op.name in ("attn/cache_k", "attn/cache_v"):
            continue
        if ring and (op.name.startswith(cp_torch.PREFIX) or op.name.startswith("attn/core.")):
            continue  # PyTorch's ring attention: its backward comes whole at attn/core
        if isinstance(op, Elementwise) and op.fn == "add" and op.name.endswith("/residual"):
            # The skip's gradient joins the branch's once the branch's backward is done: the
            # next residual met (the first one's, at the layer's end).
            if first_residual is None:
                first_residual = op
            else:
                out.append(_ew(op.name + ".bwd", "add", op.numel, a, 2))
            continue
        rope = _ROPE_OF.get(op.name)
        if isinstance(op, Gemm) and rope in ropes:  # the rotated gradient, made contiguous
            out.append(Copy(op.name + ".grad_clone", ropes[rope] * BYTES[a], a))  # type: ignore[arg-type]
        if isinstance(op, Elementwise) and op.fn == "mul" and op.n_in == 2:  # MulBackward0
            ends = ("bwd_act", "bwd_up") if op.name == "mlp/mul" else ("bwd_a", "bwd_b")
            out += [_ew(f"{op.name}.{e}", "mul", op.numel, op.dtype, 2) for e in ends]
            continue
        if op.name in ("attn/expand_k", "attn/expand_v"):  # a broadcast's gradient: a sum
            kv_n, group = op.numel // (d.heads // d.kv_heads), d.heads // d.kv_heads
            out.append(_ew(op.name + ".bwd", "sum", kv_n, a, group))
            continue
        if op.name == "attn/qkv" and cfg.qkv_per_head:  # chunk's backward: a cat of strided rows
            out.append(Copy("attn/qkv.grad_cat", op.m * op.n * BYTES[a], a, generic=True))  # type: ignore[arg-type]
        if ring and op.name == "attn/core":
            out += cp_torch.backward(d)
        else:
            out += fused_backward(op) + bias_grad(cfg, op, a)
        if (isinstance(op, Attention) and op.name == "attn/core" and op.kv_heads < op.heads
                and not (cfg.kv_broadcast or ring)):  # fmt: skip
            out += _gqa_grad_sums(d)  # (K and V repeated before a masked SDPA: the repeat's)
        shared = _SHARED_INPUT.get(op.name)
        if isinstance(op, Gemm) and shared and shared[1] in names:
            out.append(_ew(shared[0], "add", op.m * op.k, a, 2))
    if first_residual is not None:
        out.append(_ew(first_residual.name + ".bwd", "add", first_residual.numel, a, 2))
    return out


def _is_torch_ring(layer: list[Op]) -> bool:
    return any(op.name.startswith(cp_torch.PREFIX) for op in layer)


def _attention_backward(d: Dims, layer: list[Op]) -> list[Op]:
    """The backward of a layer's attention: flash (or ring) attention's, or the materialized
    form's; PyTorch's ring attention (cp_torch) as its own code runs it."""
    if _is_torch_ring(layer):
        return cp_torch.backward(d)
    attn = [op for op in layer if isinstance(op, Attention | P2P) or op.name.startswith(_MATH)]
    return [b for op in reversed(attn) for b in fused_backward(op)]


def eager_layer_backward(cfg: ModelConfig, d: Dims, layer: list[Op]) -> list[Op]:
    """Autograd's kernels for one eager Llama layer, in the order it runs them."""
    if cfg.unlike_llama():
        # Not traced: derive from the forward kernels with the fused rules, but each eager
        # RMSNorm (transformer_layers.eager_norm: the same module code in every family) by
        # autograd's kernels for it, as traced on Llama's.
        return _derived_backward(cfg, d, layer)
    T, h, a = d.T, d.hidden, d.act
    g = {n: _fwd_gemm(layer, f"{n}") for n in ("mlp/down", "mlp/up", "mlp/gate", "attn/out",
                                                 "attn/v", "attn/k", "attn/q")}  # fmt: skip
    f = d.inter
    ops: list[Op] = gemm_backward(g["mlp/down"])
    ops += [_ew("mlp/mul.bwd_act", "mul", T * f, a, 2), _ew("mlp/mul.bwd_up", "mul", T * f, a, 2)]
    ops += gemm_backward(g["mlp/up"])
    ops.append(_ew("mlp/act.bwd", "silu_backward", T * f, a, 2, flops=6.0))
    ops += gemm_backward(g["mlp/gate"])
    ops.append(_ew("mlp/grad_add", "add", T * h, a, 2))
    ops += eager_norm_backward(cfg, "mlp/norm", T, h, a)
    ops.append(_ew("attn/residual.bwd", "add", T * h, a, 2))
    ops += gemm_backward(g["attn/out"])
    ops += _attention_backward(d, layer)  # PyTorch's ring sums the GQA gradients per step
    ops += [] if _is_torch_ring(layer) else _gqa_grad_sums(d)
    ops += _eager_rope_backward("attn/rope_k", T * d.kv_heads * d.head_dim, a)
    ops += _eager_rope_backward("attn/rope_q", T * d.heads * d.head_dim, a)
    ops += gemm_backward(g["attn/v"]) + bias_grad(cfg, g["attn/v"], a)
    ops.append(Copy("attn/k.grad_clone", T * d.kv_heads * d.head_dim * 2, a))  # type: ignore[arg-type]
    ops += gemm_backward(g["attn/k"]) + bias_grad(cfg, g["attn/k"], a)
    ops.append(_ew("attn/kv.grad_add", "add", T * h, a, 2))
    ops.append(Copy("attn/q.grad_clone", T * d.heads * d.head_dim * 2, a))  # type: ignore[arg-type]
    ops += gemm_backward(g["attn/q"]) + bias_grad(cfg, g["attn/q"], a)
    ops.append(_ew("attn/q.grad_add", "add", T * h, a, 2))
    ops += eager_norm_backward(cfg, "attn/norm", T, h, a)
    ops.append(_ew("mlp/residual.bwd", "add", T * h, a, 2))
    return ops


def loss_ops(cfg: ModelConfig, d: Dims, eager: bool) -> tuple[list[Op], list[Op]]:
    """Cross-entropy over every token's logits: (forward kernels, backward kernels). Under TP the
    logits stay split over the vocabulary (Megatron's vocab-parallel cross-entropy): three
    all-reduces of one fp32 per token (the max, the sum of exponentials, the target logit)."""
    # DTensor, and the eager Megatron-style hooks, gather the logits first (epilogue).
    split = 1 if logits_gathered(d, eager, True) else d.g.tp
    # gathered: the whole vocabulary (as the implementation pads it), else this rank's shard
    whole = cfg.vocab if eager else d.vocab * d.g.tp
    T, V, a = d.T, (whole if split == 1 else d.vocab), d.act
    if not eager:
        fwd: list[Op] = [Norm("loss/ce", "softmax", T, V, a)]  # type: ignore[arg-type]
        for part in ("max", "sum", "target") if split > 1 else ():
            fwd.append(Collective(f"loss/ce.allreduce_{part}", "allreduce", T * 4, d.g.tp,
                                  "fp32", d.g.tp_nodes))  # fmt: skip
        return fwd, [_ew("loss/ce.bwd", "ce_bwd", T * V, a, flops=3.0)]
    # LlamaForCausalLM loss: logits.float(), pad + clone the shifted labels, log_softmax, nll.
    fwd = [
        # logits.float(): a widening cast, PyTorch's unrolled (non-vectorized) copy
        _ew("loss/logits_f32", "cast", T * V, a, out="fp32", flops=0.0, generic=True),
        _ew("loss/pad_labels", "pad", T, "fp32"),
        Copy("loss/labels_clone", T * 8, "fp32"),
        Norm("loss/log_softmax", "softmax", T, V, "fp32"),
        Reduce("loss/nll", "nll", T, 1, 1, "fp32"),
    ]
    bwd: list[Op] = [
        _ew("loss/ones_like", "fill", 1, "fp32", 0),
        _ew("loss/nll.bwd", "nll_backward", T * V, "fp32", 0),
        _ew("loss/log_softmax.bwd", "log_softmax_backward", T * V, "fp32", 2, flops=3.0),
        _ew("loss/logits_f32.bwd", "cast", T * V, "fp32", out=a, flops=0.0),
    ]
    return fwd, bwd


def optimizer_ops(params: float, d: Dims, eager: bool) -> list[Op]:
    """AdamW over `params` parameters (see the module docstring)."""
    P = max(1, int(params))
    if not eager:
        state = "fp64" if d.act == "fp64" else "fp32"
        ops = [_ew("optimizer/adamw", "adamw", P, state, 4, flops=12.0, n_out=3)]
        if BYTES[d.act] < 4:  # the fp32 master weights are cast back to the 16-bit parameters
            ops.append(_ew("optimizer/param_cast", "cast", P, "fp32", out=d.act, flops=0.0))
        ops.append(_ew("optimizer/zero_grad", "fill", P, d.act, 0, flops=0.0))
        return ops
    # torch/optim/adamw.py _multi_tensor_adamw, non-capturable: weight decay, lerp m, v*beta2,
    # addcmul g*g (g read twice from the same address: once from memory), sqrt v, / bias
    # correction, + eps, addcdiv into the params. Each a _foreach op (multi_tensor_apply).
    steps = [("decay", "mul", 1), ("m_lerp", "lerp", 2), ("v_scale", "mul", 1),
             ("v_addcmul", "addcmul", 2), ("v_sqrt", "sqrt", 1), ("bias_corr", "div", 1),
             ("eps", "add", 1), ("update", "addcdiv", 3)]  # fmt: skip
    # Its states take the parameters' dtype: a model held in bf16 (HF with dtype=bf16) steps
    # in bf16, an fp32 model in fp32.
    return [replace(_ew(f"optimizer/{n}", fn, P, d.act, k), foreach=True) for n, fn, k in steps]


def layer_backward(
    cfg: ModelConfig, d: Dims, eager: bool, layer: list[Op], recompute: str = "none"
) -> tuple[list[Op], dict[str, tuple[str, ...]]]:
    """One layer's backward kernels (relative names, in the order they run) and which of its
    collectives hide under which kernels. Recomputation runs first: the whole forward of the
    layer (full; Hugging Face's gradient checkpointing), or the materialized attention (selective:
    the score matrix, softmax and P·V that FlashAttention's backward recomputes anyway)."""
    hide: dict[str, tuple[str, ...]] = {}
    if eager:
        ops = eager_layer_backward(cfg, d, layer)
        ops, hide = _eager_tp_backward(d, ops)
    else:
        ops = []
        for op in reversed(layer):
            back = fused_backward(op)
            if (isinstance(op, Gemm) and op.name in _COLUMN_GEMMS and len(back) == 2
                    and (op.name != "mlp/router" or router_gathered(cfg, d))):  # fmt: skip
                back, h = comm_ops.col_in_backward(d, back[0], back[1])
                hide.update(h)
            elif isinstance(op, Collective) and op.coll == "reducescatter":
                back = comm_ops.row_out_backward(d, op.name.rsplit(".", 1)[0])
            ops += back
    from gpuperf.workloads.transformer_layers import ring_hide

    hide.update(ring_hide(d, backward=True, eager=eager))
    redo: list[Op] = []
    if recompute == "full":
        redo = list(layer)
        if eager or d.compiled:
            redo = _early_stop(cfg, redo)
        for p2p, under in ring_hide(
            d, eager=eager
        ).items():  # the recomputed ring hides as the forward's
            hide[p2p + ".recompute"] = tuple(u + ".recompute" for u in under)
    elif recompute.startswith("selective"):
        redo = recomputed_modules(cfg, layer, plan_modules(recompute))
    elif recompute == "op":
        redo = op_policy_recomputed(cfg, d, layer)
    redo = [replace(op, name=op.name + ".recompute") for op in redo]  # type: ignore[call-arg]
    return redo + ops, hide


# What a dense layer's forward may compute after the last tensor its backward saves: the
# residual add, Falcon's sum of the parallel attention and MLP outputs, Granite's scaling by its
# residual multiplier (a Python float: its backward saves nothing).
_AFTER_LAST_SAVED = frozenset({"mlp/down", "mlp/residual", "mlp/residual_sum",
                               "mlp/residual_scale", "residual"})  # fmt: skip


def down_output_unneeded(cfg: ModelConfig) -> bool:
    """Whether nothing the backward saves is computed from a dense layer's MLP down projection:
    its output goes straight into the residual (no post-norm, as Gemma-2's; no dropout, whose
    mask the recomputation would rebuild from it). The one rule for where PyTorch's checkpoint
    stops (_early_stop); an MoE layer's experts are not a dense down projection, and an MoE
    model's dense layers (DeepSeek's first ones) follow it."""
    return cfg.pre_norm and not cfg.sandwich_norm and not cfg.hidden_dropout > 0


def _early_stop(cfg: ModelConfig, redo: list[Op]) -> list[Op]:
    """PyTorch's checkpoint without reentrancy (torch.utils.checkpoint, use_reentrant=False: Hugging
    Face's gradient checkpointing since transformers 5, and torchtitan's) stops recomputing once
    every tensor the backward saved is rebuilt: where nothing saved is made from a dense layer's
    MLP down projection (down_output_unneeded), the down projection and what follows it (the
    residual add, and under tensor parallelism the down projection's own collectives) do not
    run again; a post-norm or a dropout after it saves a tensor made from its output, and the
    whole layer runs again. Megatron's full recompute runs the whole layer."""
    if not down_output_unneeded(cfg):
        return redo
    at = [i for i, op in enumerate(redo) if op.name == "mlp/down" and isinstance(op, Gemm)]
    if not at:
        return redo

    # What runs after it is left out too (the residual add, its collectives), but not what
    # the backward saved that happens to come later in the list: torchao's float8 casts,
    # appended after the layer's kernels, the down projection's own included.
    def unneeded(op: Op) -> bool:
        return op.name in _AFTER_LAST_SAVED or (
            op.name.startswith("mlp/down.") and isinstance(op, Collective)
        )

    after = [op for op in redo[at[-1] + 1 :] if not unneeded(op)]
    return redo[: at[-1]] + after


def op_policy_matmuls(cfg: ModelConfig) -> list[tuple[str, int, int, bool]]:
    """The matmuls of one PyTorch decoder layer's forward, in order: each nn.Linear as the model
    defines it (Hugging Face's and torchtitan's Llama: q, k, v, o, gate, up, down; one q/k/v or
    gate/up Linear where the module is one), with its input's and its output's width per token
    and whether it has a bias (then it runs as addmm, not mm)."""
    q, kv = cfg.heads * cfg.hd, cfg.kv_heads * cfg.hd
    f, h = cfg.intermediate, cfg.hidden
    qb, lb = cfg.qkv_bias or cfg.linear_bias, cfg.linear_bias
    attn = [("attn/qkv", h, q + 2 * kv, qb)] if cfg.qkv_fused else [
        ("attn/q", h, q, qb), ("attn/k", h, kv, qb), ("attn/v", h, kv, qb)]  # fmt: skip
    if cfg.mlp != "gated":
        mlp = [("mlp/up", h, f, lb)]
    elif cfg.gate_up_fused:
        mlp = [("mlp/gate_up", h, 2 * f, lb)]
    else:
        mlp = [("mlp/gate", h, f, lb), ("mlp/up", h, f, lb)]
    return [*attn, ("attn/out", q, h, lb), *mlp, ("mlp/down", f, h, lb)]


def op_policy_split(
    cfg: ModelConfig,
) -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]:
    """(kept, run again): the layer's matmuls under torchtitan's per-op policy. It keeps the
    output of every aten.mm but every second one, counting mm alone; a biased Linear runs as
    aten.addmm, which the policy neither keeps nor counts, so it always runs again."""
    kept, again, n = [], [], 0
    for name, n_in, n_out, biased in op_policy_matmuls(cfg):
        if not biased:
            n += 1
        (kept if not biased and n % 2 else again).append((name, n_in, n_out))
    # the recomputation stops once what the backward saved is rebuilt (_early_stop): where
    # nothing needs the down projection's output, it does not run again
    if down_output_unneeded(cfg):
        again = [a for a in again if a[0] != "mlp/down"]
    return kept, again


def op_policy_recomputed(cfg: ModelConfig, d: Dims, layer: list[Op]) -> list[Op]:
    """What torchtitan's per-op selective checkpointing (models/llama3/infra/parallelize.py,
    `_save_list` and its policy) runs again in a layer's backward: every kernel of the forward
    but the attention (SDPA's output is kept) and the matmuls, and of the matmuls those the
    policy does not keep (op_policy_split: of a Llama k, o and up). A compiled layer (the fused
    layer's kernels, one QKV and one gate/up GEMM) runs those matmuls as the model's own Linears
    do. The policy keeps max's output too: torchao's float8 amaxes are not run again (its casts
    are)."""
    again = {name for name, _, _ in op_policy_split(cfg)[1]}
    mms = [op for op in eager_layer_gemms(cfg, d) if op.name in again]
    stop = down_output_unneeded(cfg)
    rest = [op for op in layer
            if not isinstance(op, Gemm | Attention | GroupedGemm | Collective)
            and not (isinstance(op, Reduce) and op.fn == "amax")
            and not (stop and op.name in _AFTER_LAST_SAVED)]  # fmt: skip
    return rest + mms


def eager_layer_gemms(cfg: ModelConfig, d: Dims) -> list[Gemm]:
    """The matmuls of one layer as the model's own Linears run them (the eager layer's)."""
    from gpuperf.workloads.transformer_layers import eager_layer

    return [op for op in eager_layer(cfg, d) if isinstance(op, Gemm) and op.batch == 1]


# MLA's up projections as Megatron-Core recomputes them (mla_up_proj): the q and kv up
# projections with the norms fused into them, and the rotary embedding applied after.
_MLA_UP = frozenset({"attn/q_a_norm", "attn/q_b", "attn/q", "attn/kv_a_norm", "attn/kv_b",
                     "attn/rope"})  # fmt: skip


def recomputed_modules(cfg: ModelConfig, layer: list[Op], modules: frozenset[str]) -> list[Op]:
    """The forward kernels of one fused layer that Megatron-Core's selective recomputation
    (--recompute-modules) runs again in the backward, in their order:
    - core_attn: the attention (flash, or the materialized scores, softmax and P·V);
    - layernorm: the norms that stand alone (before an MoE block, and before MLA's down
      projections); Transformer Engine fuses the others into the QKV and fc1 GEMMs
      (LayerNormLinear), where the module has nothing to recompute;
    - mlp: a dense MLP with the norm fused into its fc1; moe: a whole MoE block (router,
      permutation, the all-to-alls, experts, shared experts), its stand-alone norm apart;
    - moe_act: the routed experts' activation; shared_experts: the shared experts;
    - mla_up_proj: MLA's q and kv up projections (the q projection without a q rank) with the
      norms fused into them, and the rotary embedding.
    Each kernel once, whatever else the modules name (moe holds moe_act and shared_experts)."""
    moe = any(isinstance(op, GroupedGemm) for op in layer)

    def chosen(op: Op) -> bool:
        n = op.name
        if isinstance(op, Attention) or n.startswith(_MATH):
            return "core_attn" in modules
        if n == "mlp/norm" and not moe:  # fused into fc1: part of the MLP
            return "mlp" in modules
        if n in ("mlp/norm", "moe/norm", "attn/norm"):
            alone = moe if n != "attn/norm" else cfg.is_mla
            return "layernorm" in modules and alone
        if n in _MLA_UP:
            return "mla_up_proj" in modules and cfg.is_mla
        if not n.startswith("mlp/"):
            return False
        if moe:
            shared = n.startswith("mlp/shared")
            return ("moe" in modules or (shared and "shared_experts" in modules)
                    or (n == "mlp/act" and "moe_act" in modules))  # fmt: skip
        return "mlp" in modules

    return [op for op in layer if chosen(op)]


# Column-parallel GEMMs of the fused layer (their input gradient is all-reduced under TP).
_COLUMN_GEMMS = frozenset({"attn/qkv", "mlp/gate_up", "mlp/up", "mlp/router", "mamba/in_proj"})


_DTENSOR_COLUMNS = ("attn/q.dgrad", "attn/k.dgrad", "attn/v.dgrad", "mlp/gate.dgrad",
                    "mlp/up.dgrad", "attn/qkv.dgrad", "mlp/gate_up.dgrad")  # fmt: skip
# Megatron-style hooks all-reduce each block's input gradient once (eager layers).
_MEGATRON_COLUMNS = {
    "attn/qkv": ("attn/q.dgrad", "attn/k.dgrad", "attn/v.dgrad", "attn/qkv.dgrad"),
    "mlp/gate_up": ("mlp/gate.dgrad", "mlp/up.dgrad", "mlp/gate_up.dgrad"),
}


def _eager_tp_backward(d: Dims, ops: list[Op]) -> tuple[list[Op], dict[str, tuple[str, ...]]]:
    """Eager (Hugging Face) layers under TP, backward. DTensor all-reduces the input gradient of
    each column-parallel projection (q, k, v, gate, up: five per layer, as Hugging Face's
    tp_plan runs); Megatron-style hooks all-reduce the summed gradient of q/k/v and of gate/up
    (two). Nothing overlaps them."""
    if d.g.tp == 1:
        return ops, {}
    if d.g.tp_impl == "dtensor":
        after = {n: n.removesuffix(".dgrad") for n in _DTENSOR_COLUMNS}
    else:
        after = {"attn/q.grad_add": "attn/qkv", "mlp/grad_add": "mlp/gate_up"}
        if not any(op.name in after for op in ops):  # a derived backward (not Llama's trace):
            after = {}  # after each block's last column-parallel input gradient
            for block, cols in _MEGATRON_COLUMNS.items():
                last = [op.name for op in ops if op.name in cols]
                if last:
                    after[last[-1]] = block
    nbytes = d.T * d.hidden * BYTES[d.act]
    out: list[Op] = []
    for op in ops:
        out.append(op)
        if op.name in after:
            out.append(Collective(f"{after[op.name]}.bwd_allreduce", "allreduce", nbytes,
                                  d.g.tp, d.act, d.g.tp_nodes))  # fmt: skip
    return out, {}


def head_backward(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    """Loss backward, lm_head backward (column-parallel under TP), final-norm backward."""
    T, h, a = d.T, d.hidden, d.act
    ops: list[Op] = loss_ops(cfg, d, eager)[1]
    vocab = d.vocab
    # on the logits the loss saw: gathered (DTensor, eager) or this shard (Megatron's fused)
    n = T * (vocab * d.g.tp if logits_gathered(d, eager, True) else vocab)
    if cfg.final_softcap:  # * cap, tanh, / cap backward (the tanh's reads its output too)
        ops += [_ew("lm_head/softcap_mul.bwd", "mul", n, a),
                _ew("lm_head/softcap_tanh.bwd", "tanh_backward", n, a, 2, flops=3.0),
                _ew("lm_head/softcap_div.bwd", "mul", n, a)]  # fmt: skip
    if cfg.logit_scale:  # the loss gradient times the same constant
        ops.append(_ew("lm_head/logit_scale.bwd", "mul", n, a))
    if eager and d.g.tp > 1 and d.g.tp_impl == "megatron":  # the gather's backward: our slice
        ops.append(Copy("lm_head.slice", T * vocab * BYTES[a], a))
    dgrad, wgrad = gemm_backward(Gemm("lm_head", T, vocab, h, a))  # type: ignore[arg-type]
    ops += comm_ops.col_in_backward(d, dgrad, wgrad)[0]
    if eager:
        ops += eager_norm_backward(cfg, "final_norm", T, h, a)
    else:
        fres = cfg.pre_norm and not cfg.parallel_residual
        ops.append(Norm("final_norm.bwd", cfg.norm, d.rows, h, a, fres, True))  # type: ignore[arg-type]
    return ops


def tail_backward(cfg: ModelConfig, d: Dims) -> list[Op]:
    """The embedding's gradient (scatter-add of the token rows); under sequence parallelism the
    gradient of its reduce-scatter is all-gathered first."""
    T, h, a = d.T, d.hidden, d.act
    # the embedding scale's gradient (Gemma, Granite): the rows' gradient times the constant
    ops: list[Op] = [_ew("embed_scale.bwd", "mul", T * h, a)] if cfg.embed_scale else []
    ops += comm_ops.row_out_backward(d, "embed") if d.g.tp_impl == "megatron" else []
    ops.append(_ew("embed.bwd", "embedding_backward", T * h, a))
    if cfg.positions == "learned":
        ops.append(_ew("pos_embed.bwd", "embedding_backward", T * h, a))
    return ops
