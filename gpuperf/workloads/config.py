"""ModelConfig: the shape of a decoder-only Transformer, loaded from a preset or a HF config.json.

Presets are Hugging Face config.json files (gpuperf/workloads/presets/*.json), so a preset and a
user's own file go through the same loader (gpuperf.workloads.hf_config). Field names follow
transformers where they exist (hidden_size, num_key_value_heads, ...); short read-only aliases
(hidden, layers, heads, kv_heads, intermediate, vocab) keep the op builders readable.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, get_args

from gpuperf.errors import InputError, shown
from gpuperf.workloads.hashed import field_hash
from gpuperf.workloads.hf_config import SUPPORTED_TYPES, from_hf_dict

__all__ = ["SUPPORTED_TYPES", "ModelConfig", "from_hf_dict", "hf_config", "load_model"]

Mlp = Literal["gated", "plain"]  # gated: down(act(gate(x)) * up(x)); plain: down(act(up(x)))
Act = Literal["silu", "gelu", "gelu_tanh", "gelu_new", "relu", "relu2"]
NormKind = Literal["rmsnorm", "layernorm"]
Positions = Literal["rope", "learned", "none"]  # none: no position encoding (Nemotron-H)
Router = Literal["softmax", "sigmoid"]

PRESET_DIR = Path(__file__).parent / "presets"


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelConfig:
    """A decoder-only Transformer. num_experts == 0 means a dense MLP."""

    name: str
    model_type: str = "llama"
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None  # None -> MHA (= num_attention_heads)
    head_dim: int | None = None  # None -> hidden_size // num_attention_heads (MLA: nope + rope)
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    mlp: Mlp = "gated"
    hidden_act: Act = "silu"
    norm: NormKind = "rmsnorm"
    positions: Positions = "rope"
    rotary_frac: float = 1.0  # fraction of head_dim that RoPE rotates (GPT-NeoX 0.25)
    qkv_bias: bool = False  # bias on q, k, v only (Qwen2)
    linear_bias: bool = False  # bias on every linear layer (GPT-2, GPT-NeoX)
    qkv_fused: bool = False  # the HF module is one q/k/v linear (Phi-3 qkv_proj, GPT-2 c_attn)
    gate_up_fused: bool = False  # the HF module is one gate/up linear (Phi-3 gate_up_proj)
    qk_norm: bool = False  # RMSNorm over each head of q and k (Qwen3, Gemma3)
    sandwich_norm: bool = False  # norms after attention and after the MLP too (Gemma2/3)
    pre_norm: bool = True  # a norm before each block (OLMo-2: the blocks' outputs only)
    qk_norm_full: bool = False  # q/k norms over the whole projection, not each head (OLMo-2)
    # RoPE's cos and sin stay fp32: q and k rotate in fp32 and are cast back (OLMo-2).
    rope_fp32: bool = False
    embed_scale: bool = False  # embeddings times a constant (Gemma's sqrt(hidden), Granite's)
    # Each block's output times a constant before its residual add (Granite's
    # residual_multiplier): one kernel each.
    residual_scale: bool = False
    logit_scale: bool = False  # the logits times a constant (Granite: / logits_scaling)
    lm_head_bias: bool = False  # the lm_head Linear has a bias (Phi-1/2: fused into its GEMM)
    # A learned logit per head that joins each softmax row (GPT-OSS's attention sinks): its
    # parameters; the fused kernels fold it into their softmax (no kernel of its own).
    attn_sinks: bool = False
    # Gemma's RMSNorm scales by (1 + weight) in fp32 and casts back after it; Llama's casts back,
    # then scales in the model's dtype (eager kernels only: their bytes differ).
    norm_weight_fp32: bool = False
    # OLMo-2's RMSNorm: (weight * x) in fp32, then the cast back (Gemma's order, no + 1).
    norm_scale_fp32: bool = False
    parallel_residual: bool = False  # GPT-NeoX / Falcon: x + attn(ln1(x)) + mlp(ln2(x))
    shared_input_norm: bool = False  # parallel_residual with one norm for both (Falcon-7B)
    sliding_window: int = 0  # tokens a sliding layer attends to (0: none)
    sliding_layers: tuple[int, ...] = ()  # indices of the layers that use the window
    attn_softcap: float = 0.0  # cap * tanh(scores / cap) (Gemma2; 0: none)
    final_softcap: float = 0.0  # cap * tanh(logits / cap) after the lm_head (Gemma2; 0: none)
    # The fused q/k/v projection is laid out per head, [.., heads, 3 · head_dim], and chunked
    # along head_dim (GPTNeoXAttention): its backward concatenates the three gradients there.
    qkv_per_head: bool = False
    # HF hands SDPA keys and values with fewer heads than the queries and no enable_gqa, with a
    # mask (Falcon-7B's multi-query attention): only PyTorch's math backend takes them, in fp32.
    sdpa_math: bool = False
    # HF builds the causal mask even where SDPA's is_causal would do (Falcon:
    # allow_is_causal_skip=False): a prefill runs SDPA's masked kernel over the whole square.
    sdpa_mask: bool = False
    # HF broadcasts K and V to every query head before SDPA, as copies, and caches them so
    # (Falcon's new decoder architecture: FalconAttention._split_heads flattens the broadcast).
    kv_broadcast: bool = False
    # FalconAttention._split_heads with fewer K/V heads than query heads picks K and V with a
    # Python list index: each a host-to-device copy of the index, then an index kernel.
    kv_list_index: bool = False
    # HF's apply_rotary_pos_emb slices the rotated part and cats it back to the rest even when
    # RoPE rotates the whole head (Phi-3): one more copy per tensor.
    rope_split: bool = False
    # NemotronLayerNorm1P: layer_norm(x, weight + 1.0, bias): one small add before each norm.
    norm_weight_plus1: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0  # width of one routed expert (0: intermediate_size)
    shared_intermediate_size: int = 0  # width of the shared-expert MLP (0: none)
    shared_expert_gate: bool = False  # sigmoid gate on the shared expert (Qwen2-MoE)
    dense_layers: tuple[int, ...] = ()  # layers of an MoE model with a dense MLP
    router: Router = "softmax"
    router_groups: int = 1  # group-limited routing: experts in router_groups groups,
    router_topk_groups: int = 1  # of which each token may use router_topk_groups
    router_bias: bool = False  # a per-expert score-correction bias (DeepSeek-V3)
    norm_topk_prob: bool = False  # renormalise the top-k routing weights
    # LatentMoE (Nemotron 3 Super): tokens are projected to this width before the routed experts
    # and back after them; the experts' weights live in it (0: none).
    moe_latent_size: int = 0
    # Hybrid models (Nemotron-H, Nemotron 3): each layer is one block after one norm, named by
    # hybrid_override_pattern: M a Mamba-2 mixer, * attention, - an MLP, E an MoE layer
    # ("": every layer is attention and an MLP). The Mamba-2 mixer's shape follows.
    layer_pattern: str = ""
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    ssm_state_size: int = 0
    mamba_groups: int = 1  # B and C are shared by the heads of a group
    conv_kernel: int = 4  # the causal depthwise convolution's width
    ssm_chunk: int = 128  # the SSD scan's chunk length (Megatron-Core and vLLM: 128)
    q_lora_rank: int = 0  # MLA (DeepSeek-V2/V3): 0 = plain q projection
    kv_lora_rank: int = 0  # 0: not MLA
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # Dropout in training (0 in inference): on the attention probabilities, and on each block's
    # output before the residual add (GPT-2's attn_pdrop / resid_pdrop; 0 for modern LLMs).
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    rope_theta: float = 10000.0
    # The checkpoint's quantization_config ("awq 4-bit"): noted, not applied; a prediction warns
    # (quantization_warning) unless the scenario picks a weight format itself.
    quantization: str = ""
    source: str = ""  # where it was loaded from (preset name or file path)

    def __hash__(self) -> int:  # the engine's caches hash it per plan: once per object
        return field_hash(self)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.type == "bool" and not isinstance(getattr(self, f.name), bool):
                raise InputError(f"{self.name}: {f.name} must be true or false, "
                                 f"got {shown(getattr(self, f.name))}")  # fmt: skip
        for f in ("hidden_size", "num_attention_heads", "intermediate_size"):
            _positive(self, f)
        _positive(self, "num_hidden_layers", top=MAX_LAYERS)
        _positive(self, "vocab_size")
        _positive(self, "max_position_embeddings")
        for attr, kind in (("mlp", Mlp), ("hidden_act", Act), ("norm", NormKind),
                           ("positions", Positions), ("router", Router)):  # fmt: skip
            allowed = get_args(kind)
            if getattr(self, attr) not in allowed:
                raise InputError(f"{self.name}: {attr} must be one of {allowed}, "
                                 f"got {shown(getattr(self, attr))}")  # fmt: skip
        if self.num_key_value_heads is None:
            object.__setattr__(self, "num_key_value_heads", self.num_attention_heads)
        self._check_mla()
        _positive(self, "num_key_value_heads")
        if self.head_dim is None:
            if self.hidden_size % self.num_attention_heads:
                raise InputError(
                    f"{self.name}: num_attention_heads ({self.num_attention_heads}) must divide "
                    f"hidden_size ({self.hidden_size}) unless head_dim is given"
                )
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        _positive(self, "head_dim")
        if self.num_attention_heads % self.num_key_value_heads:  # type: ignore[operator]
            raise InputError(
                f"{self.name}: num_key_value_heads ({self.num_key_value_heads}) must divide "
                f"num_attention_heads ({self.num_attention_heads})"
            )
        self._check_hybrid()
        self._check_moe()
        _positive(self, "sliding_window", zero=True)
        _layer_list(self, "sliding_layers")
        if self.sliding_layers and not self.sliding_window:
            raise InputError(f"{self.name}: sliding_layers need a sliding_window > 0")
        if self.shared_input_norm and not self.parallel_residual:
            raise InputError(f"{self.name}: shared_input_norm needs parallel_residual")
        _number(self, "rotary_frac", 0, 1, low_open=True)
        _number(self, "attn_softcap", 0, 1e300)
        _number(self, "final_softcap", 0, 1e300)
        for attr in ("attention_dropout", "hidden_dropout"):
            _number(self, attr, 0, 1, high_open=True)
        _number(self, "rope_theta", 0, 1e300, low_open=True, high_open=True)

    def _check_mla(self) -> None:
        mla = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        for attr in mla:
            _positive(self, attr, zero=True)
        if not self.kv_lora_rank:
            if extra := [a for a in mla if getattr(self, a)]:
                raise InputError(f"{self.name}: {extra[0]} needs kv_lora_rank > 0 (MLA)")
            return
        for attr in mla[2:]:
            _positive(self, attr)
        qk = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.head_dim is None:  # what HF's eager/SDPA attention sees: qk heads, all heads
            object.__setattr__(self, "head_dim", qk)
        if self.head_dim != qk or self.num_key_value_heads != self.num_attention_heads:
            raise InputError(
                f"{self.name}: an MLA model has head_dim = qk_nope_head_dim + qk_rope_head_dim "
                f"({qk}) and num_key_value_heads = num_attention_heads "
                f"({self.num_attention_heads}), got {self.head_dim} and {self.num_key_value_heads}"
            )

    def _check_hybrid(self) -> None:
        p, L = self.layer_pattern, self.num_hidden_layers
        if not isinstance(p, str) or (p and (len(p) != L or set(p) - set(BLOCKS))):
            raise InputError(f"{self.name}: layer_pattern must name one block per layer "
                             f"({L}) from {''.join(BLOCKS)!r}, got {shown(p)}")  # fmt: skip
        mamba = ("mamba_heads", "mamba_head_dim", "ssm_state_size")
        for attr in (*mamba, "moe_latent_size"):
            _positive(self, attr, zero=True)
        for attr in ("mamba_groups", "conv_kernel", "ssm_chunk"):
            _positive(self, attr)
        if "M" in p:
            for attr in mamba:
                _positive(self, attr)
            if self.mamba_heads % self.mamba_groups:
                raise InputError(f"{self.name}: mamba_groups ({self.mamba_groups}) must divide "
                                 f"mamba_heads ({self.mamba_heads})")  # fmt: skip
        elif extra := [a for a in mamba if getattr(self, a)]:
            raise InputError(f"{self.name}: {extra[0]} needs Mamba layers (M in layer_pattern)")
        if p and ("E" in p) != (self.num_experts > 0):
            raise InputError(f"{self.name}: layer_pattern has {'no' if self.num_experts else 'an'}"
                             " MoE layer (E) but num_experts is "
                             f"{self.num_experts}")  # fmt: skip
        if p and (self.dense_layers or self.sliding_layers):
            raise InputError(f"{self.name}: layer_pattern names each layer's block; dense_layers "
                             "and sliding_layers do not apply")  # fmt: skip
        if self.moe_latent_size and not self.num_experts:
            raise InputError(f"{self.name}: moe_latent_size needs num_experts > 0")

    def _check_moe(self) -> None:
        for attr in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                     "shared_intermediate_size"):  # fmt: skip
            _positive(self, attr, zero=True)  # a fraction of an expert is a typo
        _positive(self, "router_groups")
        _positive(self, "router_topk_groups")
        _layer_list(self, "dense_layers")
        if not self.num_experts:
            moe_only = ("num_experts_per_tok", "moe_intermediate_size", "shared_intermediate_size",
                        "shared_expert_gate", "dense_layers", "router_bias")  # fmt: skip
            if extra := [a for a in moe_only if getattr(self, a)]:
                raise InputError(f"{self.name}: {extra[0]} needs num_experts > 0")
            return
        if len(set(self.dense_layers)) >= self.num_hidden_layers:
            raise InputError(
                f"{self.name}: every one of its {self.num_hidden_layers} layers has a dense MLP "
                "(first_k_dense_replace / mlp_only_layers / dense_layers): no layer is routed"
            )
        if not 1 <= self.num_experts_per_tok <= self.num_experts:
            raise InputError(
                f"{self.name}: num_experts_per_tok ({self.num_experts_per_tok}) must be between 1 "
                f"and num_experts ({self.num_experts})"
            )
        if self.shared_expert_gate and not self.shared_intermediate_size:
            raise InputError(f"{self.name}: shared_expert_gate needs shared_intermediate_size > 0")
        g, tg = self.router_groups, self.router_topk_groups
        if self.num_experts % g or tg > g or self.num_experts_per_tok > tg * self.num_experts // g:
            raise InputError(
                f"{self.name}: router_groups ({g}) must divide num_experts ({self.num_experts}), "
                f"and router_topk_groups ({tg}) of them must hold num_experts_per_tok "
                f"({self.num_experts_per_tok}) experts"
            )

    # Short aliases used by the op builders.
    @property
    def hidden(self) -> int:
        return self.hidden_size

    @property
    def layers(self) -> int:
        return self.num_hidden_layers

    @property
    def heads(self) -> int:
        return self.num_attention_heads

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads  # type: ignore[return-value]

    @property
    def hd(self) -> int:
        return self.head_dim  # type: ignore[return-value]

    @property
    def intermediate(self) -> int:
        return self.intermediate_size

    @property
    def vocab(self) -> int:
        return self.vocab_size

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def attended_positions(self, tokens: int) -> int:
        """Keys all layers hold for a query at `tokens` positions (or cache for them): `tokens`
        per layer, at most the window in sliding-window layers."""
        sliding = len(self.sliding_layers)
        full = self.blocks("*") - sliding
        return full * tokens + sliding * min(tokens, self.sliding_window)

    def unlike_llama(self) -> list[str]:
        """How a layer of this model differs from a Llama layer (RMSNorm, a gated SiLU MLP, full
        RoPE, separate q/k/v and gate/up weights, no extra norms, full causal attention): empty
        when it does not. The traced eager kernels hold for Llama layers only."""
        why = []
        if self.is_moe:
            why.append("MoE (routing is data dependent)")
        if self.is_mla:
            why.append("MLA attention")
        if self.norm != "rmsnorm" or self.mlp != "gated" or self.positions != "rope":
            why.append(f"{self.norm}/{self.mlp}/{self.positions} (needs rmsnorm/gated/rope)")
        if self.hidden_act != "silu":
            why.append(f"activation {self.hidden_act} (needs silu)")
        if self.rotary_frac < 1:
            why.append(f"partial rotary ({self.rotary_frac:g})")
        if self.parallel_residual:
            why.append("parallel residual")
        if self.qkv_fused or self.gate_up_fused:
            why.append("fused q/k/v or gate/up weights")
        if self.qk_norm or self.sandwich_norm:
            why.append("q/k or sandwich norms")
        if self.sliding_layers or self.attn_softcap:
            why.append("sliding windows or attention softcap")
        if self.residual_scale or self.rope_fp32 or self.rope_split or not self.pre_norm:
            why.append("scaled residuals, RoPE in fp32 or split, or norms after the blocks only")
        if self.attn_sinks:
            why.append("attention sinks")
        if self.kv_list_index or self.norm_weight_plus1 or self.norm_scale_fp32:
            why.append("K/V picked by a list index, or norm weights + 1 or scaled in fp32")
        return why

    @property
    def expert_intermediate(self) -> int:
        """Width of one routed expert."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is routed (0 for a dense model)."""
        if self.layer_pattern:
            return self.layer_pattern.count("E")
        return self.layers - len(self.dense_layers) if self.is_moe else 0

    def blocks(self, block: str) -> int:
        """Layers holding `block` (a BLOCKS letter): attention (*) and dense MLPs (-) are in
        every layer of a model without a layer_pattern (dense MLPs in its dense layers)."""
        if self.layer_pattern:
            return self.layer_pattern.count(block)
        if block == "*":
            return self.layers
        if block == "-":
            return self.layers - self.moe_layers
        return self.moe_layers if block == "E" else 0

    @property
    def mamba_inner(self) -> int:
        """Width of a Mamba-2 mixer's x (and z): heads × head_dim."""
        return self.mamba_heads * self.mamba_head_dim

    @property
    def mamba_conv_dim(self) -> int:
        """Channels of the Mamba-2 convolution: x, B and C."""
        return self.mamba_inner + 2 * self.mamba_groups * self.ssm_state_size

    @property
    def mamba_state_numel(self) -> int:
        """A sequence's state in one Mamba-2 layer: the SSM state and the convolution's window."""
        ssm = self.mamba_heads * self.mamba_head_dim * self.ssm_state_size
        return ssm + (self.conv_kernel - 1) * self.mamba_conv_dim

    @property
    def family(self) -> str:
        return self.model_type

    def param_breakdown(self) -> dict[str, int]:
        return dict(_param_breakdown(self))

    def _attn_params(self) -> int:
        """One layer's attention projections (MLA: its low-rank factors and their norms)."""
        h, H = self.hidden, self.heads
        if self.is_mla:  # HF DeepseekV2Attention / DeepseekV3Attention
            r, kv_r, v = self.q_lora_rank, self.kv_lora_rank, self.v_head_dim
            nope, rope = self.qk_nope_head_dim, self.qk_rope_head_dim
            # q_a_proj, q_a_layernorm, q_b_proj (q_proj without a q rank); kv_a, its norm, kv_b
            q = h * r + r + r * H * (nope + rope) if r else h * H * (nope + rope)
            kv = h * (kv_r + rope) + kv_r + kv_r * H * (nope + v)
            return q + kv + H * v * h  # o_proj
        q, kv = H * self.hd, self.kv_heads * self.hd
        attn = h * (q + 2 * kv) + q * h
        if self.qkv_bias or self.linear_bias:
            attn += q + 2 * kv
        return attn + (h if self.linear_bias else 0) + (H if self.attn_sinks else 0)

    def _mamba_params(self) -> int:
        """One Mamba-2 mixer (Megatron-Core's MambaMixer, HF NemotronHMamba2Mixer): in_proj to
        z, x, B, C and dt; the convolution (with bias); dt_bias, A_log and D per head; the gated
        norm's weight; out_proj."""
        h, di, H, conv = self.hidden, self.mamba_inner, self.mamba_heads, self.mamba_conv_dim
        return h * (di + conv + H) + conv * (self.conv_kernel + 1) + 3 * H + di + di * h

    def _mlp_params(self, width: int, hidden: int = 0) -> int:
        """One MLP (or one expert) of `width` over `hidden` inputs (default: the model's)."""
        h, gated = hidden or self.hidden, self.mlp == "gated"
        n = (3 if gated else 2) * h * width
        return n + ((2 * width if gated else width) + h if self.linear_bias else 0)

    def _breakdown(self) -> dict[str, int]:
        """Parameters by part: embed, pos_embed, attn, mlp (dense MLP, or every routed expert),
        dense_mlp (the dense layers of an MoE model), moe_latent (LatentMoE's projections),
        shared_expert, router, mamba (the Mamba-2 mixers of a hybrid), norms, lm_head."""
        h, L, E = self.hidden, self.layers, self.num_experts
        n_moe = self.moe_layers
        shared_w = self.shared_intermediate_size
        shared = self._mlp_params(shared_w) if shared_w else 0
        pre = 0 if not self.pre_norm else 1 if self.shared_input_norm else 2
        per_layer_norms = 1 if self.layer_pattern else pre + (2 if self.sandwich_norm else 0)
        latent = self.moe_latent_size
        norm = h * (2 if self.norm == "layernorm" else 1)
        qk = (self.heads + self.kv_heads) * self.hd if self.qk_norm_full else 2 * self.hd
        return {
            "embed": self.vocab * h,
            "pos_embed": self.max_position_embeddings * h if self.positions == "learned" else 0,
            "attn": self.blocks("*") * self._attn_params(),
            "mamba": self.blocks("M") * self._mamba_params(),
            "mlp": n_moe * E * self._mlp_params(self.expert_intermediate, latent)
            if self.is_moe
            else self.blocks("-") * self._mlp_params(self.intermediate),
            "dense_mlp": self.blocks("-") * self._mlp_params(self.intermediate)
            if self.is_moe
            else 0,
            "moe_latent": n_moe * 2 * h * latent,  # the projections into the latent and back
            "shared_expert": n_moe * (shared + (h if self.shared_expert_gate else 0)),
            "router": n_moe * (h * E + (E if self.router_bias else 0)),
            "norms": (per_layer_norms * L + 1) * norm
            + (self.blocks("*") * qk if self.qk_norm else 0),
            "lm_head": (0 if self.tie_word_embeddings else self.vocab * h)
            + (self.vocab if self.lm_head_bias else 0),
        }

    def param_count(self) -> int:
        """Total parameters, every expert included, embeddings included (as HF num_parameters())."""
        return sum(self.param_breakdown().values())

    def active_param_count(self) -> int:
        """Parameters that touch one token: top_k of the routed experts, all shared and dense
        parts (all of a dense model)."""
        if not self.is_moe:
            return self.param_count()
        b = self.param_breakdown()
        b["mlp"] = b["mlp"] // self.num_experts * self.num_experts_per_tok
        return sum(b.values())

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def quantization_warning(cfg: ModelConfig, dtype: str, weight_dtype: str | None,
                         train: bool) -> str | None:  # fmt: skip
    """What a prediction says of a quantized checkpoint run in a 2-byte (or wider) format: the
    quantization is not read from config.json, so the weights are costed in `dtype`."""
    if not cfg.quantization or weight_dtype is not None or dtype in ("fp8", "int8"):
        return None
    bits = re.search(r"(\d+)-bit", cfg.quantization)
    if train:
        how = "training a quantized checkpoint (QLoRA) is not modelled"
    elif "fp8" in cfg.quantization:
        how = "pass --dtype fp8 (dtype='fp8') to model fp8 weights"
    elif bits and bits.group(1) in ("4", "8"):
        wd = "int4" if bits.group(1) == "4" else "int8"
        how = f"pass --weight-dtype {wd} (weight_dtype='{wd}') to model {bits.group(1)}-bit weights"
    else:
        how = "--weight-dtype int4/int8 or --dtype fp8 model quantized weights"
    return (
        f"{cfg.source or cfg.name} has a quantization_config ({cfg.quantization}) that "
        f"gpuperf does not read: the weights are predicted in {dtype}; {how}"
    )


MAX_SIZE = 2**31  # a width, count or length beyond this is a typo, and its sums overflow floats
MAX_LAYERS = 4096  # 30x the deepest published LLM; the per-op table lists every layer
BLOCKS = "M*-E"  # layer_pattern's blocks: Mamba-2, attention, MLP, MoE


def _positive(cfg: ModelConfig, attr: str, zero: bool = False, top: int = MAX_SIZE) -> None:
    """An integer (not a bool, not a float), positive (or zero where `zero`), at most `top`."""
    value = getattr(cfg, attr)
    low = 0 if zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= top:
        what = "a non-negative" if zero else "a positive"
        raise InputError(f"{cfg.name}: {attr} must be {what} integer up to {top}, "
                         f"got {shown(value)}")  # fmt: skip


def _number(cfg: ModelConfig, attr: str, low: float, high: float, *, low_open: bool = False,
            high_open: bool = False) -> None:  # fmt: skip
    """A finite number (not a bool) in [low, high], ends open where asked."""
    v = getattr(cfg, attr)
    ok = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v)
    if not ok or v < low or v > high or (low_open and v == low) or (high_open and v == high):
        span = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise InputError(f"{cfg.name}: {attr} must be a number in {span}, got {shown(v)}")


def _layer_list(cfg: ModelConfig, attr: str) -> None:
    """Layer indices: sorted, unique, each in [0, num_hidden_layers); a list becomes a tuple."""
    v = getattr(cfg, attr)
    if isinstance(v, list):
        v = tuple(v)
        object.__setattr__(cfg, attr, v)
    L = cfg.num_hidden_layers
    ok = isinstance(v, tuple) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
    if not ok or any(not 0 <= i < L for i in v) or list(v) != sorted(set(v)):
        raise InputError(f"{cfg.name}: {attr} must be sorted, unique layer indices in "
                         f"[0, {L}), got {shown(v)}")  # fmt: skip


@functools.lru_cache(maxsize=256)
def _param_breakdown(cfg: ModelConfig) -> tuple[tuple[str, int], ...]:
    """ModelConfig.param_breakdown, computed once per config (the plan search asks it often)."""
    return tuple(cfg._breakdown().items())


@functools.lru_cache(maxsize=1)
def _preset_names() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in PRESET_DIR.glob("*.json")))


def preset_names() -> list[str]:
    """Names of the bundled presets, sorted."""
    return list(_preset_names())


@functools.lru_cache(maxsize=64)
def _preset(name: str) -> dict[str, Any]:
    """A bundled preset's config dict, read once (presets ship with the package)."""
    return _read_json(PRESET_DIR / f"{name}.json")


def load_model(spec: str) -> ModelConfig:
    """A preset name (case-insensitive) or the path of a Hugging Face config.json."""
    data, name, source = hf_config(spec)
    return from_hf_dict(data, name=name, source=source)


def hf_config(spec: str) -> tuple[dict[str, Any], str, str]:
    """(the Hugging Face config dict, a name, where it came from) of a preset or a file: what a
    real run builds the model from."""
    if not isinstance(spec, str) or not spec.strip():  # Path("") is ".", the current folder
        raise InputError("the model name is empty; give a preset "
                         f"({', '.join(preset_names()[:3])}, ...: gpuperf models list) or the "
                         "path of a Hugging Face config.json")  # fmt: skip
    names = {n.lower(): n for n in preset_names()}
    key = spec.strip().lower()
    if key in names:
        return dict(_preset(names[key])), names[key], ""
    from gpuperf.fileio import printable

    # os.path's tests, not Path's: False for a name that cannot exist (a NUL byte, too long)
    path = Path(spec).expanduser()
    if os.path.isdir(path) and os.path.isfile(path / "config.json"):
        path = path / "config.json"
    if path.suffix == ".json" or os.path.exists(path):
        data = _read_json(path)
        name = data.get("_name_or_path") or (
            path.parent.name if path.name == "config.json" else path.stem
        )
        return data, printable(str(name).split("/")[-1]) or path.stem, str(path)
    close = difflib.get_close_matches(key, list(names), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise InputError(
        f"unknown model {shown(spec)}{hint} (presets: {', '.join(preset_names())}; "
        "or give the path of a Hugging Face config.json)"
    )


def _read_json(path: Path) -> dict[str, Any]:
    from gpuperf.fileio import read_json_object

    return read_json_object(path, "model config")
