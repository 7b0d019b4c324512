"""Model FLOPs per token (the MFU numerator), with the convention named. No pandas, no numpy:
the plan search calls it thousands of times and must not pay for heavy imports."""

from __future__ import annotations

from typing import Any

from gpuperf.workloads.scenario import Scenario


def model_flops_per_token(cfg: Any, scenario: Scenario) -> tuple[float, str]:
    """Model FLOPs per token and the convention's name (MFU numerator).

    train: PaLM (Chowdhery et al. 2022, App. B) 6N + 12·L·H·Q·T, N the (active) parameters, T the
    sequence; attention counted in full (not halved for causal). Inference: 2N (attention excluded).
    """
    n = float(cfg.active_param_count())
    if scenario.mode == "train":
        layers = cfg.num_hidden_layers
        q_width = cfg.num_attention_heads * _head_dim(cfg)
        attn = 12.0 * layers * q_width * scenario.seq
        return 6 * n + attn, "PaLM: 6N + 12·L·H·Q·T per token, N = active params, full attention"
    return 2 * n, "2N per token, N = active params incl. embeddings, attention excluded"


def _head_dim(cfg: Any) -> int:
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
