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
Counting causal attention in full, both pass 100% where it is most of the step (a 7B model's
prefill at 512K tokens): twice what the kernel runs (it skips the masked half) at half the peak.
So does a prefill whose lm_head is most of N (a huge vocabulary): the count charges it for every
token, the step computes the last token's logits only. The step engine warns when they pass
100%, naming the larger of the two (over_peak_cause; step.run.throughput).
"""

from __future__ import annotations

import functools
from typing import Any

from gpuperf.workloads.scenario import plan_modules

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


def _flops_per_key(cfg: Any) -> float:
    """4·H·Q: QKᵀ and P·V for one query and one key in one layer; Q the mean of the query/key
    and value head sizes where they differ (MLA)."""
    q = _head_dim(cfg)
    return 4.0 * cfg.num_attention_heads * (q + (getattr(cfg, "v_head_dim", 0) or q)) / 2


def attention_flops_per_token(cfg: Any, sc: Any) -> float:
    """4·L·H·Q·T: QKᵀ and P·V of one token's forward, full (non-causal) count, with T capped at
    the window in sliding-window layers."""
    return _attention_flops(cfg, _attended(sc))


def _attention_flops(cfg: Any, attended: int) -> float:
    return _flops_per_key(cfg) * cfg.attended_positions(attended)


def decode_attention_flops(cfg: Any, prompt: int, steps: int) -> float:
    """Attention FLOPs of `steps` decode steps after a `prompt`-token prefill, step j attending
    prompt + j keys (at most the window in sliding layers): the sum of attention_flops_per_token
    over the steps, in closed form."""
    full = steps * prompt + steps * (steps + 1) / 2
    window = cfg.sliding_window
    m = min(max(window - prompt, 0), steps)  # steps whose keys still fit in the window
    capped = m * prompt + m * (m + 1) / 2 + (steps - m) * window
    sliding = len(cfg.sliding_layers)
    return _flops_per_key(cfg) * ((cfg.layers - sliding) * full + sliding * capped)


def model_flops_per_token(cfg: Any, sc: Any) -> tuple[float, str]:
    """Model FLOPs per token and the convention's name (module docstring)."""
    return _per_token(cfg, sc.mode, _attended(sc)), CONVENTION


@functools.lru_cache(maxsize=1024)
def _per_token(cfg: Any, mode: str, attended: int) -> float:
    fwd = 2.0 * matmul_params(cfg) + _attention_flops(cfg, attended)
    return 3.0 * fwd if mode == "train" else fwd


def recompute_flops_per_token(cfg: Any, sc: Any) -> float:
    """FLOPs per token that recomputation runs a second time (0 outside training)."""
    if sc.mode != "train" or sc.recompute == "none":
        return 0.0
    attn = attention_flops_per_token(cfg, sc)
    b = cfg.param_breakdown()
    if sc.recompute == "selective":
        return _module_flops_per_token(cfg, plan_modules(sc.recompute_plan), attn, b)
    if sc.recompute == "op":  # torchtitan's per-op policy: the matmuls it does not keep
        from gpuperf.workloads.transformer_train import op_policy_split

        again = op_policy_split(cfg)[1]
        return 2.0 * cfg.layers * sum(n_in * n_out for _, n_in, n_out in again)
    layers = float(cfg.active_param_count()) - b["embed"] - b["pos_embed"] - b["lm_head"]
    if sc.pytorch:  # PyTorch's checkpoint stops before an unneeded down projection
        from gpuperf.workloads.transformer_train import down_output_unneeded

        if down_output_unneeded(cfg) and not cfg.layer_pattern:  # the dense layers' down
            layers -= cfg.blocks("-") * cfg.intermediate * cfg.hidden
    return 2.0 * layers + attn


def _module_flops_per_token(cfg: Any, modules: frozenset[str], attn: float,
                            b: dict[str, int]) -> float:  # fmt: skip
    """The model FLOPs per token of Megatron's recomputed modules: core attention, the dense
    MLPs, the MoE blocks (routed experts a token reaches, shared experts, router), the shared
    experts alone, MLA's up projections; norms and activations count no model FLOPs."""
    out = attn if "core_attn" in modules else 0.0
    if "mlp" in modules:
        out += 2.0 * (b["dense_mlp"] if cfg.is_moe else b["mlp"])
    if "moe" in modules and cfg.is_moe:
        routed = b["mlp"] * cfg.num_experts_per_tok / cfg.num_experts
        out += 2.0 * (routed + b["shared_expert"] + b["router"] + b["moe_latent"])
    elif "shared_experts" in modules:
        out += 2.0 * b["shared_expert"]
    if "mla_up_proj" in modules and cfg.is_mla:
        H = cfg.heads
        q_in = cfg.q_lora_rank or cfg.hidden  # without a q rank: the q projection itself
        q_up = q_in * H * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim)
        kv_up = cfg.kv_lora_rank * H * (cfg.qk_nope_head_dim + cfg.v_head_dim)
        out += 2.0 * cfg.blocks("*") * (q_up + kv_up)
    return out


def over_peak_cause(cfg: Any, sc: Any) -> str:
    """Why MFU/HFU can pass 100% by the convention: what it counts per token that the kernels do
    not run, the larger of the masked half of causal attention (prefill, training) and a
    prefill's lm_head over every token where only the last one's logits are computed."""
    if sc.mode == "decode":  # no masked half, no prompt: the count's attention at the context
        return "PaLM's count charges every cached key of the context in full, at the dense peak"
    causal = attention_flops_per_token(cfg, sc) / 2
    head = 0.0
    if sc.mode in ("prefill", "generate"):
        head = 2.0 * cfg.vocab * cfg.hidden * (1 - 1 / sc.seq)
    if head > causal:
        return (
            "PaLM's count charges the lm_head for every prompt token (its vocabulary of "
            f"{cfg.vocab:,} is most of N), while a prefill computes only the last token's "
            "logits"
        )
    return (
        "PaLM's count includes the masked half of causal attention, which the kernel skips "
        "and which long sequences are mostly made of"
    )
