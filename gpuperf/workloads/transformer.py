"""(ModelConfig, Scenario) -> list[Op]: the kernels of one forward (or training step) of a model.

Names are hierarchical: "embed", "L0/attn/qkv", "L0/attn/core", "L0/mlp/down", "final_norm",
"lm_head"; backward ops add ".dgrad", ".wgrad" or ".bwd" to the forward name. Each Op is one GPU
kernel, so len(ops) is the kernel count (the predictor charges host dispatch per op).

Modes:
- prefill: batch x seq tokens, causal attention, K/V written to the cache, and logits for the LAST
  token of each sequence only (serving semantics: vLLM and HF generate compute next-token logits,
  not logits for every prompt position).
- decode: one token per sequence, attention with q_len=1 over kv_len=ctx+1 (the cache plus the new
  token), logits for every sequence.
- train: forward over batch x seq tokens with logits and cross-entropy for every token, backward
  (dgrad and wgrad for every forward GEMM), then the AdamW step (see transformer_train.py).
- generate: composed by the predictor from one prefill and new_tokens decode steps; build_ops
  raises InputError for it.

Layers are identical, so one layer's ops are built once and copied under each "L{i}/" prefix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields, replace

from gpuperf.dtypes import BYTES, DType
from gpuperf.errors import InputError
from gpuperf.perfmodel.ops import Collective, Copy, Elementwise, Embedding, Gemm, Norm, Op
from gpuperf.workloads import comm_ops
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.transformer_layers import (
    Dims,
    eager_norm,
    logits_gathered,
)


def build_ops(cfg: ModelConfig, sc: Scenario) -> list[Op]:
    """The kernels of one prefill, decode step or training step of `cfg` run as `sc` says, on
    one GPU (the scenario's parallelism is ignored; gpuperf.step runs plans)."""
    from gpuperf.workloads.step_work import build, single_gpu_ops

    if sc.mode == "generate":
        raise InputError("generate is prefill + decode steps; build the two scenarios separately")
    if sc.parallel or sc.microbatches > 1:
        sc = replace(sc, tp=1, pp=1, dp=1, cp=1, ep=1, zero=0, micro_batch=sc.batch,
                     global_batch=None, sequence_parallel=False, tp_overlap=False,
                     tp_allreduce="nccl", tp_impl="megatron", dp_overlap=None,
                     moe_imbalance=1.0, moe_dispatcher="alltoall")  # fmt: skip
    return single_gpu_ops(build(cfg, sc))


def replicate(template: list[Op], layers: int) -> list[Op]:
    """Copy a layer's ops under L0/ ... L{layers-1}/."""
    return name_copies(template, range(layers))


def name_copies(template: list[Op], layer_ids: Iterable[int]) -> list[Op]:
    """Copies of a layer's ops, one per layer id, named "L{id}/" + name."""
    # Ops are frozen slotted dataclasses; filling the slots through their descriptors skips the
    # frozen __init__ and makes an 80-layer model's op list about 40% faster to build.
    rows = []
    for op in template:
        cls = type(op)
        slots = [(getattr(cls, f.name).__set__, getattr(op, f.name)) for f in fields(op)[1:]]
        rows.append((cls, cls.name.__set__, op.name, slots))  # type: ignore[attr-defined]
    new = object.__new__
    out: list[Op] = []
    append = out.append
    for i in layer_ids:
        prefix = f"L{i}/"
        for cls, set_name, name, slots in rows:
            o = new(cls)
            set_name(o, prefix + name)
            for setter, value in slots:
                setter(o, value)
            append(o)
    return out


def prologue(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    """Token embedding (+ learned positions); eager HF also builds positions and RoPE cos/sin."""
    ops: list[Op] = [Embedding("embed", d.T, d.hidden, d.act)]
    if d.g.tp_impl == "megatron":  # vocab-parallel lookup: partial rows summed over tp
        ops += comm_ops.row_out(d, "embed")  # (Hugging Face's tp_plan replicates the embedding)
    if cfg.embed_scale:  # Gemma's * sqrt(hidden), Granite's * embedding_multiplier
        ops.append(Elementwise("embed_scale", "mul", d.T * d.hidden, 1, 1, d.act))
    if cfg.positions == "learned":
        ops.append(Embedding("pos_embed", d.T, d.hidden, d.act))
        ops.append(Elementwise("embed_add", "add", d.T * d.hidden, 2, 1, d.act))
    elif eager:
        # LlamaModel: cache_position = arange, position_ids = +past; LlamaRotaryEmbedding: the
        # positions (and inv_freq, held in the model dtype) to fp32, outer product, cat(freqs,
        # freqs), cos * scale, sin * scale, both cast to the model dtype.
        n = d.q_len * d.head_dim
        cast = d.act != "fp32"
        ops.append(Elementwise("rope_cache/arange", "arange", d.q_len, 0, 1, "fp32"))
        ops.append(Elementwise("rope_cache/positions", "add", d.q_len, 1, 1, "fp32"))
        ops.append(Elementwise("rope_cache/pos_f32", "cast", d.q_len, 1, 1, "fp32"))
        if cast:
            ops.append(Elementwise("rope_cache/inv_freq_f32", "cast", d.head_dim // 2, 1, 1, d.act,
                                   "fp32"))  # fmt: skip
        ops += [
            Elementwise("rope_cache/freqs", "mul", n // 2, 1, 1, "fp32"),
            Copy("rope_cache/cat", n * 4, "fp32"),
            Elementwise("rope_cache/cos", "cos", n, 1, 1, "fp32", None, 8.0),
            Elementwise("rope_cache/cos_scale", "mul", n, 1, 1, "fp32"),
            Elementwise("rope_cache/sin", "sin", n, 1, 1, "fp32", None, 8.0),
            Elementwise("rope_cache/sin_scale", "mul", n, 1, 1, "fp32"),
        ]
        if cast and not cfg.rope_fp32:
            ops.append(Elementwise("rope_cache/cos_cast", "cast", n, 1, 1, "fp32", d.act, 0.0))
            ops.append(Elementwise("rope_cache/sin_cast", "cast", n, 1, 1, "fp32", d.act, 0.0))
    return ops


def final_softcap(cfg: ModelConfig, n: int, a: DType) -> list[Op]:
    """Gemma2's final_logit_softcapping as its modeling code (and vLLM's logits processor) runs
    it: logits / cap, tanh, * cap, three passes over the logits."""
    if not cfg.final_softcap:
        return []
    return [Elementwise("lm_head/softcap_div", "mul", n, 1, 1, a),
            Elementwise("lm_head/softcap_tanh", "tanh", n, 1, 1, a, None, 8.0),
            Elementwise("lm_head/softcap_mul", "mul", n, 1, 1, a)]  # fmt: skip


def epilogue(cfg: ModelConfig, d: Dims, eager: bool, mode: str) -> list[Op]:
    """Final norm, then lm_head: last token per sequence (prefill), every token (decode, train).
    Under tensor parallelism the lm_head is column-parallel over the vocabulary: Megatron's
    fused training keeps the logits split (vocab-parallel cross-entropy); inference, Hugging Face's
    tp_plan and the eager Megatron-style hooks (whose loss is Hugging Face's) gather them."""
    T, h = d.T, d.hidden
    if eager:
        ops = eager_norm(cfg, "final_norm", d.rows, h, d.act)
    else:
        # the last layer's residual add fuses into the final norm (not where it adds its own)
        fres = cfg.pre_norm and not cfg.parallel_residual
        ops = [Norm("final_norm", cfg.norm, d.rows, h, d.act, fres)]
    ops += comm_ops.col_in(d, "lm_head")
    rows = d.batch if mode == "prefill" else T
    if mode == "prefill" and not eager and d.q_len > 1:
        # vLLM gathers the hidden states at each sequence's last position before the lm_head.
        ops.append(Copy("logits_gather", rows * h * BYTES[d.act], d.act))
    vocab = d.vocab
    ops.append(Gemm("lm_head", rows, vocab, h, d.act))
    gathered = logits_gathered(d, eager, mode == "train")
    if gathered:
        nbytes = rows * vocab * d.g.tp * BYTES[d.act]
        ops.append(Collective("lm_head.allgather", "allgather", nbytes, d.g.tp, d.act,
                              d.g.tp_nodes))  # fmt: skip
        if eager and d.g.tp_impl == "megatron":  # torch.cat of the gathered shards
            ops.append(Copy("lm_head.cat", nbytes, d.act))
    # on the logits the model's loss (or sampler) sees: whole once gathered, else this shard
    n = rows * vocab * (d.g.tp if gathered else 1)
    ops += final_softcap(cfg, n, d.act)
    if cfg.logit_scale:  # Granite: logits / logits_scaling
        ops.append(Elementwise("lm_head/logit_scale", "mul", n, 1, 1, d.act))
    return ops
