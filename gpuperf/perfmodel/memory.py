"""Device memory of a model run: weights, KV cache, activations, gradients, optimizer states.

All numbers are bytes on one GPU with no parallelism (tp = pp = dp = 1, ZeRO-0); sharding is the
parallel planner's job.

Inference: weights at the scenario dtype (fp8/int8: every linear layer at 1 byte, embeddings,
lm_head and norms stay 16-bit, as vLLM loads fp8 checkpoints); KV cache = 2 (K and V) x layers x
kv_heads x head_dim x tokens x batch x bytes (tokens: seq for prefill, ctx + 1 for decode,
seq + new_tokens for generate); activations = the peak transient working set of one layer (the
residual stream and norm output plus the larger of the attention and MLP intermediates; layers run
one after another and free theirs) plus the fp32 logits.

Training: mixed-precision AdamW as in ZeRO (Rajbhandari et al. SC20 §3.1): 16-bit params (2 Psi)
+ 16-bit grads (2 Psi) + fp32 master params, momentum and variance (12 Psi) = 16 Psi bytes. An
fp32 run keeps fp32 params (4 Psi) + grads (4 Psi) + m, v (8 Psi): also 16 Psi. Activations follow
Korthikanti et al. 2022 §4, generalised to GQA and SwiGLU, with FlashAttention (no s^2 tensors; it
keeps O and the fp32 log-sum-exp) and no dropout (modern LLM pre-training runs with dropout 0): per
layer, 16-bit, bytes =
  2 s b (h + h) [two norm inputs] + 2 s b (h + q + 2 kv + q) [QKV input, Q, K, V, O]
  + 2 s b (h + 2 f + f) [MLP input, gate/up outputs, down input; GELU: h + f + f] + 4 s b a [LSE]
which for MHA, a 4h GELU MLP and dropout masks (dropout=True) is Korthikanti's s b h (34).
Plus the logits (16-bit, and an fp32 copy for the loss).
"""

from __future__ import annotations

import math

from gpuperf.dtypes import BYTES, DType
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.scenario import Scenario

KEYS = ("weights", "kv_cache", "activations", "gradients", "optimizer")


def _act_dtype(sc: Scenario) -> DType:
    return "bf16" if BYTES[sc.dtype] == 1 else sc.dtype


def weight_bytes(cfg: ModelConfig, dtype: DType) -> float:
    """Weights at `dtype`; 1-byte dtypes quantize the linear layers only."""
    if BYTES[dtype] > 1:
        return float(cfg.param_count() * BYTES[dtype])
    parts = cfg.param_breakdown()
    linear = parts["attn"] + parts["mlp"]
    return float(linear * BYTES[dtype] + (cfg.param_count() - linear) * 2)


def kv_cache_bytes(cfg: ModelConfig, tokens: int, batch: int, dtype: DType) -> float:
    """K and V for `tokens` positions of `batch` sequences, all layers."""
    return float(2 * cfg.layers * cfg.kv_heads * cfg.hd * tokens * batch * BYTES[dtype])


def train_activation_bytes_per_layer(
    cfg: ModelConfig, batch: int, seq: int, dtype: DType = "bf16", dropout: bool = False
) -> float:
    """Bytes a layer keeps for backward (module docstring); dropout adds 1-byte masks."""
    sb, b = seq * batch, BYTES[dtype]
    h, q, kv, f = cfg.hidden, cfg.heads * cfg.hd, cfg.kv_heads * cfg.hd, cfg.intermediate
    norms = 2 * h
    attn = h + q + 2 * kv + q
    if cfg.is_moe:  # each token's hidden copies and expert intermediates, k times
        k = cfg.num_experts_per_tok
        mlp = h + k * (h + 3 * f) + cfg.num_experts
    else:
        mlp = h + (3 * f if cfg.mlp == "swiglu" else 2 * f)
    total = b * sb * (norms + attn + mlp) + 4 * sb * cfg.heads
    if dropout:  # attention-output and MLP-output dropout masks (Korthikanti: sbh each)
        total += 2 * sb * h
    return float(total)


def inference_activation_bytes(cfg: ModelConfig, sc: Scenario) -> float:
    """Peak transient working set of one layer plus the fp32 logits of this pass."""
    b = BYTES[_act_dtype(sc)]
    T = sc.batch if sc.mode == "decode" else sc.batch * sc.seq
    h, q, kv, f = cfg.hidden, cfg.heads * cfg.hd, cfg.kv_heads * cfg.hd, cfg.intermediate
    attn = q + 2 * kv + q  # QKV output and attention output live together
    if cfg.is_moe:
        k = cfg.num_experts_per_tok
        mlp = k * (h + 3 * f)  # permuted tokens, gate_up output, activation output
    else:
        mlp = 3 * f if cfg.mlp == "swiglu" else 2 * f
    rows = sc.batch if sc.mode in ("prefill", "generate") else T
    return float(b * T * (2 * h + max(attn, mlp)) + 4 * rows * cfg.vocab)


def optimizer_bytes_per_param(param_bytes: int, eager: bool) -> int:
    """AdamW state per parameter, as gpuperf's training op lists step it.

    eager (torch.optim.AdamW on the model's own parameters): m and v in the parameters' dtype.
    fused (mixed precision, Megatron-style): an fp32 master copy when the parameters are narrower
    than fp32, and m and v at least in fp32 (fp64 for an fp64 model).
    """
    if eager:
        return 2 * param_bytes
    master = 4 if param_bytes < 4 else 0
    return master + 2 * max(4, param_bytes)


def memory_breakdown(cfg: ModelConfig, sc: Scenario) -> dict[str, float]:
    """Bytes by kind: weights, kv_cache, activations, gradients, optimizer (0 if not used)."""
    out = dict.fromkeys(KEYS, 0.0)
    act = _act_dtype(sc)
    if sc.mode == "train":
        P = cfg.param_count()
        pb = BYTES[act]
        out["weights"] = float(P * pb)
        out["gradients"] = float(P * pb)
        out["optimizer"] = float(P * optimizer_bytes_per_param(pb, sc.impl == "eager"))
        per_layer = train_activation_bytes_per_layer(cfg, sc.batch, sc.seq, act)
        logits = sc.batch * sc.seq * cfg.vocab * (BYTES[act] + (4 if act != "fp32" else 0))
        out["activations"] = float(cfg.layers * per_layer + logits)
        return out
    out["weights"] = weight_bytes(cfg, sc.dtype)
    tokens = {"prefill": sc.seq, "decode": sc.ctx + 1, "generate": sc.seq + sc.new_tokens}[sc.mode]
    out["kv_cache"] = kv_cache_bytes(cfg, tokens, sc.batch, sc.kv)
    out["activations"] = inference_activation_bytes(cfg, sc)
    return out


def total_bytes(breakdown: dict[str, float]) -> float:
    return math.fsum(breakdown[k] for k in KEYS)
