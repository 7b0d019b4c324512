"""Model FLOPs (the MFU numerator) and recomputed FLOPs (HFU adds them), one convention for
every mode. No pandas, no numpy: the plan search calls it for every plan.

PaLM's (Chowdhery et al. 2022, App. B): a forward pass costs 2N + 4·L·H·Q·T per token, a training
step three times that (6N + 12·L·H·Q·T), with N the active parameters that multiply (the input
embedding's lookup does no FLOPs; the lm_head, or a tied embedding used as one, counts once),
L layers, H heads of Q dimensions, and T the keys each query attends, counted in full (not halved
for causal masks): the sequence in prefill and training, the context in decode. It is Megatron's
72·B·s·l·h²(1 + s/6h + V/12lh) (Korthikanti et al. 2022) for a GPT, so MFU compares with theirs.
HFU adds what recomputation runs again: the attention core (selective) or each layer's forward
(full; Hugging Face's gradient checkpointing) — so HFU ≥ MFU, equal without recomputation.
"""

from __future__ import annotations

from typing import Any

CONVENTION = "PaLM: 2N + 4·L·H·Q·T per token, ×3 in training; N without the input embedding"


def _head_dim(cfg: Any) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def _attended(sc: Any) -> int:
    return sc.ctx + 1 if sc.mode == "decode" else sc.seq


def matmul_params(cfg: Any) -> float:
    """Active parameters that multiply activations: all but the input (and position) embedding,
    unless tied (then it is the lm_head too)."""
    n = float(cfg.active_param_count())
    b = cfg.param_breakdown()
    if not cfg.tie_word_embeddings:
        n -= b["embed"]
    return n - b["pos_embed"]


def attention_flops_per_token(cfg: Any, sc: Any) -> float:
    """4·L·H·Q·T: QKᵀ and P·V of one token's forward, full (non-causal) count; with Q the mean
    of the query/key and value head sizes where they differ (MLA), and T capped at the window
    in sliding-window layers."""
    q = _head_dim(cfg)
    d = (q + (getattr(cfg, "v_head_dim", 0) or q)) / 2
    t = _attended(sc)
    layers = cfg.num_hidden_layers
    window = getattr(cfg, "sliding_window", 0)
    if window:
        sliding = len(cfg.sliding_layers)
        span = (layers - sliding) * t + sliding * min(t, window)
    else:
        span = layers * t
    return 4.0 * cfg.num_attention_heads * d * span


def model_flops_per_token(cfg: Any, sc: Any) -> tuple[float, str]:
    """Model FLOPs per token and the convention's name (module docstring)."""
    fwd = 2.0 * matmul_params(cfg) + attention_flops_per_token(cfg, sc)
    return (3.0 * fwd if sc.mode == "train" else fwd), CONVENTION


def recompute_flops_per_token(cfg: Any, sc: Any) -> float:
    """FLOPs per token that recomputation runs a second time (0 outside training)."""
    if sc.mode != "train" or sc.recompute == "none":
        return 0.0
    attn = attention_flops_per_token(cfg, sc)
    if sc.recompute == "selective":
        return attn
    b = cfg.param_breakdown()
    layers = float(cfg.active_param_count()) - b["embed"] - b["pos_embed"] - b["lm_head"]
    return 2.0 * layers + attn
