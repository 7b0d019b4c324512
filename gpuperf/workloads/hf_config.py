"""Hugging Face config.json -> ModelConfig, one small mapping per model family.

Each family reads the keys its transformers configuration class defines, under the same names and
with the same defaults where a key is absent (src/transformers/models/<family>/
configuration_<family>.py), and the per-layer rules its modeling file applies (which layers slide,
which layers of an MoE model stay dense). What a family can hold that ModelConfig cannot express
is refused with an InputError that names the key (falcon's alibi, an unknown activation).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from gpuperf.errors import InputError

if TYPE_CHECKING:
    from gpuperf.workloads.config import ModelConfig

# transformers.activations.ACT2FN names -> ModelConfig.hidden_act
ACTIVATIONS = {
    "silu": "silu", "swish": "silu",
    "gelu": "gelu", "gelu_python": "gelu",
    "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
    "gelu_accurate": "gelu_tanh", "gelu_python_tanh": "gelu_tanh",
    "relu": "relu", "relu2": "relu2",
}  # fmt: skip
_MISSING: Any = object()


class _Reader:
    """Typed reads from one config dict; every error names the key and the file."""

    def __init__(self, d: dict[str, Any], source: str, mtype: str, prefix: str = "") -> None:
        self.d, self.source, self.mtype, self.prefix = d, source, mtype, prefix

    def fail(self, key: str, what: str) -> InputError:
        return InputError(f"{self.source}: {self.prefix + key!r} {what}")

    def get(self, *keys: str, default: Any = _MISSING) -> Any:
        """The first key that is set (not null); `default` when none is, else 'missing'."""
        for k in keys:
            if self.d.get(k) is not None:
                return self.d[k]
        if default is _MISSING:
            raise InputError(f"{self.source}: missing {self.prefix + keys[0]!r} "
                             f"(model_type {self.mtype or '?'})")  # fmt: skip
        return default

    def alias(self, native: str, generic: str, default: Any = _MISSING) -> Any:
        """A family key that its config class maps a generic name onto (attribute_map: GPT-2's
        n_layer for num_hidden_layers): given both, the generic one is set last and wins, as in
        PretrainedConfig; missing, the family's own key is named."""
        if self.d.get(generic) is not None:
            return self.d[generic]
        return self.get(native, default=default)

    def opt(self, key: str, default: Any) -> Any:
        """A key whose null means "none" (q_lora_rank, sliding_window): `default` only if absent."""
        return self.d.get(key, default)

    def flag(self, key: str, default: bool) -> bool:
        """A JSON boolean; a string such as "false" is refused, not read as true."""
        v = self.d.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise self.fail(key, f"must be true or false, not {v!r}")
        return v

    def num(self, *keys: str, default: float) -> float:
        """A finite JSON number (not a string, not a boolean)."""
        v = self.get(*keys, default=default)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise self.fail(keys[0], f"must be a number, not {v!r}")
        return float(v)

    def rope(self, *keys: str, default: float) -> float:
        """A RoPE setting: a top-level key, else inside rope_parameters (transformers 5), whose
        per-layer-type form ({"full_attention": {...}}) gives the full-attention value."""
        if any(self.d.get(k) is not None for k in keys):
            return self.num(*keys, default=default)
        rp = self.d.get("rope_parameters")
        if isinstance(rp, dict) and isinstance(rp.get("full_attention"), dict):
            rp = rp["full_attention"]
        if isinstance(rp, dict) and rp.get(keys[-1]) is not None:
            return _Reader(rp, self.source, self.mtype, "rope_parameters.").num(keys[-1], default=0)
        return default

    def act(self, key: str, default: str) -> str:
        """The MLP activation, normalised to ModelConfig.hidden_act."""
        v = self.get(key, default=default)
        if not isinstance(v, str) or v.lower() not in ACTIVATIONS:
            raise self.fail(key, f"{v!r} is not modelled (known: {', '.join(ACTIVATIONS)})")
        return ACTIVATIONS[v.lower()]

    def layers(self) -> int:
        """num_hidden_layers when it is a usable count, else 0 (ModelConfig then refuses it)."""
        from gpuperf.workloads.config import MAX_LAYERS

        L = self.get("num_hidden_layers", "n_layer")
        ok = isinstance(L, int) and not isinstance(L, bool) and 0 < L <= MAX_LAYERS
        return L if ok else 0

    def indices(self, key: str, n: int) -> set[int]:
        """A list of layer indices, each in [0, n)."""
        v = self.get(key, default=[])
        ok = isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
        if not ok or any(not 0 <= i < n for i in v):
            raise self.fail(key, f"must be a list of layer indices in [0, {n}), not {v!r}")
        return set(v)

    def count(self, *keys: str, default: int, low: Literal[0, 1] = 1) -> int:
        """An integer of at least `low`: a period (decoder_sparse_step), a number of experts, an
        expert's width. 0 is no MoE model's number of experts, nor its experts' width (which
        ModelConfig would read as "the dense width"): refused here, naming the key."""
        v = self.get(*keys, default=default)
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            what = "a positive" if low else "a non-negative"
            raise self.fail(keys[0], f"must be {what} integer, not {v!r}")
        return v

    def layer_types(self, n: int) -> tuple[int, ...] | None:
        """The sliding layers named by layer_types, None when the config has none."""
        v = self.d.get("layer_types")
        if v is None:
            return None
        kinds = ("sliding_attention", "full_attention")
        if not isinstance(v, list) or len(v) != n or any(t not in kinds for t in v):
            raise self.fail("layer_types", f"must name {' or '.join(kinds)} for each of the {n} "
                            "layers")  # fmt: skip
        return tuple(i for i, t in enumerate(v) if t == "sliding_attention")


def _window(window: Any, layers: tuple[int, ...] | range) -> dict[str, Any]:
    """sliding_window / sliding_layers; no window (null) means no sliding layer."""
    if window is None or not layers:
        return {"sliding_window": 0, "sliding_layers": ()}
    return {"sliding_window": window, "sliding_layers": tuple(layers)}


def _shape(f: _Reader, max_pos: int, **defaults: Any) -> dict[str, Any]:
    """The keys every Llama-style config has; `defaults` for those the family may omit."""
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "intermediate_size", "vocab_size")  # fmt: skip
    optional = {"num_key_value_heads": None, "head_dim": None, **defaults}
    kw = {k: f.get(k, default=optional.get(k, _MISSING)) for k in keys}
    kw["max_position_embeddings"] = f.get("max_position_embeddings", default=max_pos)
    kw["attention_dropout"] = f.num("attention_dropout", default=0.0)
    return kw


_MAX_POS = {"llama": 2048, "granite": 4096, "mistral": 131072, "mixtral": 131072, "qwen2": 32768,
            "qwen2_moe": 32768, "qwen3": 32768, "qwen3_moe": 32768}  # fmt: skip


def _llama_like(f: _Reader) -> dict[str, Any]:
    """llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe."""
    t = f.mtype
    kw = _shape(f, _MAX_POS[t], **({"head_dim": 128} if t == "qwen3" else {}))
    L = f.layers()
    qkv_bias_key = "qkv_bias" if t == "qwen2_moe" and "qkv_bias" in f.d else "attention_bias"
    kw |= dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        hidden_act=f.act("hidden_act", "silu"),
        qkv_bias=f.flag(qkv_bias_key, t in ("qwen2", "qwen2_moe")),  # Qwen2: q, k, v biased
        linear_bias=f.flag("mlp_bias", False),
        qk_norm=t.startswith("qwen3"),
        rope_theta=f.rope("rope_theta", default=1e6 if t == "mixtral" else 10000.0),
    )
    if t in ("mistral", "mixtral"):  # every layer slides when a window is set
        kw |= _window(f.opt("sliding_window", 4096 if t == "mistral" else None), range(L))
    elif t.startswith("qwen"):  # the window only counts with use_sliding_window
        window = f.opt("sliding_window", 4096) if f.flag("use_sliding_window", False) else None
        first = f.get("max_window_layers", default=28)
        if t == "qwen3_moe":  # Qwen3MoeAttention: every layer
            layers: Any = range(L)
        elif (layers := f.layer_types(L)) is None:
            q2moe = t == "qwen2_moe"  # transformers 5: the even layers below max_window_layers
            layers = tuple(
                i for i in range(L) if (i % 2 == 0 and i < first if q2moe else i >= first)
            )
        kw |= _window(window, layers)
    if t == "mixtral":
        kw |= dict(
            num_experts=f.count("num_local_experts", default=8),
            num_experts_per_tok=f.count("num_experts_per_tok", default=2),
            norm_topk_prob=True,  # MixtralSparseMoeBlock renormalises the top-k weights
        )
    elif t in ("qwen2_moe", "qwen3_moe"):
        q2 = t == "qwen2_moe"
        step, only = f.count("decoder_sparse_step", default=1), f.indices("mlp_only_layers", L)
        shared = f.count("shared_expert_intermediate_size", default=5632, low=0) if q2 else 0
        kw |= dict(
            num_experts=f.count("num_experts", default=60 if q2 else 128),
            num_experts_per_tok=f.count("num_experts_per_tok", default=4 if q2 else 8),
            moe_intermediate_size=f.count("moe_intermediate_size", default=1408 if q2 else 768),
            shared_intermediate_size=shared,
            shared_expert_gate=q2 and bool(shared),
            norm_topk_prob=f.flag("norm_topk_prob", False),
            # Qwen2MoeDecoderLayer: sparse unless listed in mlp_only_layers or off the step
            dense_layers=tuple(i for i in range(L) if i in only or (i + 1) % step),
        )
    return kw


def _gemma(f: _Reader) -> dict[str, Any]:
    """gemma, gemma2, gemma3_text (and gemma3's text_config)."""
    if f.mtype == "gemma":  # Gemma 1: Gemma2's norms and MLP, no post-norms, caps or windows
        kw = _shape(f, 8192, head_dim=256)
        return kw | dict(
            tie_word_embeddings=f.flag("tie_word_embeddings", True),
            hidden_act=f.act("hidden_act", "gelu_pytorch_tanh"),  # GemmaMLP: ACT2FN[hidden_act]
            qkv_bias=f.flag("attention_bias", False),
            embed_scale=True,
            norm_weight_fp32=True,  # GemmaRMSNorm: output * (1.0 + weight.float())
            rope_theta=f.rope("rope_theta", default=10000.0),
        )
    g3 = f.mtype != "gemma2"
    defaults = {"num_key_value_heads": 4, "head_dim": 256}
    if g3:  # Gemma3 config.json files leave these to Gemma3TextConfig's defaults
        defaults |= {"num_attention_heads": 8, "vocab_size": 262208}
    kw = _shape(f, 131072 if g3 else 8192, **defaults)
    L = f.layers()
    cap = f.opt("attn_logit_softcapping", None if g3 else 50.0)
    final = f.opt("final_logit_softcapping", None if g3 else 30.0)
    if (layers := f.layer_types(L)) is None:  # all but every 2nd (Gemma2) or pattern-th layer
        every = f.count("sliding_window_pattern", "_sliding_window_pattern", default=6) if g3 else 2
        layers = tuple(i for i in range(L) if (i + 1) % every)
    kw |= dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", True),
        hidden_act=f.act("hidden_activation", "gelu_pytorch_tanh"),
        qkv_bias=f.flag("attention_bias", False),
        qk_norm=g3,
        sandwich_norm=True,
        embed_scale=True,
        norm_weight_fp32=True,  # Gemma2RMSNorm / Gemma3RMSNorm: output * (1.0 + weight.float())
        attn_softcap=0.0 if cap is None else cap,
        final_softcap=0.0 if final is None else final,
        rope_theta=f.rope("rope_theta", default=1e6 if g3 else 10000.0),
        **_window(f.opt("sliding_window", 4096), layers),
    )
    return kw


def _phi3(f: _Reader) -> dict[str, Any]:
    kw = _shape(f, 4096)
    kw |= dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        hidden_act=f.act("hidden_act", "silu"),
        qkv_fused=True,  # Phi3Attention.qkv_proj, Phi3MLP.gate_up_proj
        gate_up_fused=True,
        rotary_frac=f.rope("partial_rotary_factor", default=1.0),
        rope_split=True,  # apply_rotary_pos_emb: cat([rotated, q_pass]) at any rotary fraction
        rope_theta=f.rope("rope_theta", default=10000.0),
        hidden_dropout=f.num("resid_pdrop", default=0.0),
        **_window(f.opt("sliding_window", None), range(f.layers())),
    )
    return kw


def _falcon(f: _Reader) -> dict[str, Any]:
    if f.flag("alibi", False):
        raise f.fail("alibi", "is true: alibi positions are not modelled")
    h, heads = f.get("hidden_size", "n_embed"), f.get("num_attention_heads", "n_head")
    new = f.flag("new_decoder_architecture", False)
    parallel = f.flag("parallel_attn", True)
    # FalconAttention: num_kv_heads with the new architecture, else one (multi_query) or all
    kv = f.count("num_kv_heads", "n_head_kv", default=heads) if new else None
    n_ln = f.count("num_ln_in_parallel_attn", default=2 if new else 1)
    kv_heads = kv or (1 if f.flag("multi_query", True) else heads)
    return dict(
        hidden_size=h,
        num_hidden_layers=f.get("num_hidden_layers", "n_layer"),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        # FalconAttention without the new architecture passes its one K/V head to SDPA as it is,
        # with the causal mask always built (allow_is_causal_skip=False): the math backend
        sdpa_math=not new and kv_heads != heads,
        sdpa_mask=True,
        kv_broadcast=new and kv_heads != heads,
        kv_list_index=kv_heads != heads,  # _split_heads: K and V picked by a list index
        intermediate_size=f.get("ffn_hidden_size", default=4 * h),
        vocab_size=f.get("vocab_size"),
        max_position_embeddings=f.get("max_position_embeddings", default=2048),
        tie_word_embeddings=f.flag("tie_word_embeddings", True),
        mlp="plain",
        hidden_act=f.act("activation", "gelu"),
        norm="layernorm",
        linear_bias=f.flag("bias", False),
        qkv_fused=True,  # FalconAttention.query_key_value
        parallel_residual=parallel or new,
        shared_input_norm=parallel and n_ln != 2,  # FalconDecoderLayer: input_layernorm only
        rope_theta=f.rope("rope_theta", default=10000.0),
        attention_dropout=f.num("attention_dropout", default=0.0),
        hidden_dropout=f.num("hidden_dropout", default=0.0),
    )


def _starcoder2(f: _Reader) -> dict[str, Any]:
    """Starcoder2: LayerNorms, a plain GELU MLP, biases on every linear (use_bias), GQA, RoPE, a
    window on every layer."""
    kw = _shape(f, 4096)
    bias = f.flag("use_bias", True)
    return kw | dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", True),
        mlp="plain",  # Starcoder2MLP: c_proj(act(c_fc(x)))
        hidden_act=f.act("hidden_act", "gelu_pytorch_tanh"),
        norm="layernorm",
        qkv_bias=bias,
        linear_bias=bias,
        rope_theta=f.rope("rope_theta", default=10000.0),
        hidden_dropout=f.num("residual_dropout", default=0.0),
        **_window(f.opt("sliding_window", None), range(f.layers())),
    )


def _olmo2(f: _Reader) -> dict[str, Any]:
    """OLMo-2: Llama's attention and MLP with RMSNorms on the blocks' outputs only (before each
    residual add) and over each token's whole q and k projections."""
    kw = _shape(f, 4096)
    return kw | dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        hidden_act=f.act("hidden_act", "silu"),
        qkv_bias=f.flag("attention_bias", False),
        pre_norm=False,
        sandwich_norm=True,
        qk_norm=True,
        qk_norm_full=True,
        rope_fp32=True,  # Olmo2RotaryEmbedding returns fp32 cos/sin; q, k cast back after
        norm_scale_fp32=True,  # Olmo2RMSNorm: (self.weight * hidden_states).to(input_dtype)
        rope_theta=f.rope("rope_theta", default=10000.0),
    )


def _phi(f: _Reader) -> dict[str, Any]:
    """Phi-1/1.5/2: one LayerNorm feeding attention and MLP in parallel, partial rotary, a plain
    GELU MLP, biases on every linear."""
    if f.flag("qk_layernorm", False):
        raise f.fail("qk_layernorm", "is true: Phi's q/k LayerNorms are not modelled")
    kw = _shape(f, 2048)
    return kw | dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        mlp="plain",  # PhiMLP: fc2(act(fc1(x)))
        hidden_act=f.act("hidden_act", "gelu_new"),
        norm="layernorm",
        qkv_bias=True,
        linear_bias=True,
        parallel_residual=True,
        shared_input_norm=True,  # PhiDecoderLayer: input_layernorm only
        lm_head_bias=True,  # PhiForCausalLM.lm_head = nn.Linear(..., bias=True)
        rotary_frac=f.rope("partial_rotary_factor", default=0.5),
        rope_theta=f.rope("rope_theta", default=10000.0),
        hidden_dropout=f.num("resid_pdrop", default=0.0),
        attention_dropout=f.num("attention_dropout", default=0.0),
    )


def _granite(f: _Reader) -> dict[str, Any]:
    """Granite: Llama with constant multipliers on the embeddings, on each block's output before
    its residual add and on the logits (the attention's is SDPA's scale: no kernel)."""
    kw = _llama_like(f)
    for key in ("embedding_multiplier", "residual_multiplier", "logits_scaling"):
        f.num(key, default=1.0)  # a number where given (read for the check)
    return kw | dict(embed_scale=True, residual_scale=True, logit_scale=True)


def _nemotron(f: _Reader) -> dict[str, Any]:
    kw = _shape(f, 4096)
    kw |= dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        mlp="plain",  # NemotronMLP: down(act(up(x)))
        hidden_act=f.act("hidden_act", "relu2"),
        norm="layernorm",  # NemotronLayerNorm1P: a LayerNorm with weight + 1
        norm_weight_plus1=True,
        qkv_bias=f.flag("attention_bias", False),
        linear_bias=f.flag("mlp_bias", False),
        rotary_frac=f.rope("partial_rotary_factor", default=0.5),
        rope_theta=f.rope("rope_theta", default=10000.0),
    )
    return kw


_BLOCK_TYPES = {"mamba": "M", "attention": "*", "mlp": "-", "moe": "E"}


def _nemotron_h(f: _Reader) -> dict[str, Any]:
    """Nemotron-H and Nemotron 3 (NemotronHConfig): a hybrid of Mamba-2 mixers, attention without
    position encoding, squared-ReLU MLPs and MoE layers (sigmoid routing with a score bias, a
    shared expert; LatentMoE's narrower experts), one block per layer after an RMSNorm."""
    L = f.layers()
    pattern = f.get("hybrid_override_pattern", default="")
    if not pattern and isinstance(types := f.d.get("layers_block_type"), list):
        pattern = "".join(_BLOCK_TYPES.get(t, "?") for t in types)
    if not isinstance(pattern, str) or not pattern:
        raise f.fail("hybrid_override_pattern", f"must name each layer's block, not {pattern!r}")
    if f.flag("attention_bias", False) or f.flag("mlp_bias", False) or f.flag("use_bias", False):
        raise f.fail("use_bias", "is true: biases in a hybrid's layers are not modelled")
    kw = _shape(f, 4096, head_dim=128, intermediate_size=21504)
    kw |= dict(
        num_hidden_layers=L or len(pattern),
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        mlp="plain",
        hidden_act=f.act("mlp_hidden_act", "relu2"),
        positions="none",
        layer_pattern=pattern,
        mamba_heads=f.count("mamba_num_heads", default=128) if "M" in pattern else 0,
        mamba_head_dim=f.count("mamba_head_dim", default=64) if "M" in pattern else 0,
        ssm_state_size=f.count("ssm_state_size", default=128) if "M" in pattern else 0,
        mamba_groups=f.count("n_groups", "mamba_n_groups", default=8),
        conv_kernel=f.count("conv_kernel", "mamba_d_conv", default=4),
        ssm_chunk=f.count("chunk_size", "mamba_chunk_size", default=128),
    )
    if "E" not in pattern:
        return kw
    shared = f.count("n_shared_experts", default=1, low=0)
    return kw | dict(
        num_experts=f.count("n_routed_experts", default=8),
        num_experts_per_tok=f.count("num_experts_per_tok", default=2),
        moe_intermediate_size=f.count("moe_intermediate_size", default=7688),
        shared_intermediate_size=shared
        * f.count("moe_shared_expert_intermediate_size", default=7688),  # fmt: skip
        moe_latent_size=f.opt("moe_latent_size", 0) or 0,
        router="sigmoid",
        router_groups=f.count("n_group", default=1),
        router_topk_groups=f.count("topk_group", default=1),
        router_bias=True,  # e_score_correction_bias
        norm_topk_prob=f.flag("norm_topk_prob", True),
    )


def _deepseek(f: _Reader) -> dict[str, Any]:
    """deepseek_v2, deepseek_v3: MLA attention, routed + shared experts, first layers dense."""
    v3 = f.mtype == "deepseek_v3"
    if f.flag("attention_bias", False):
        raise f.fail("attention_bias", "is true: MLA projection biases are not modelled")
    kw = _shape(f, 4096 if v3 else 2048)
    kw["head_dim"] = None  # config.json's head_dim is the rope part; ModelConfig derives it
    L = f.layers()
    nope, rope = f.get("qk_nope_head_dim", default=128), f.get("qk_rope_head_dim", default=64)
    ints = all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (nope, rope))
    kw |= dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        hidden_act=f.act("hidden_act", "silu"),
        q_lora_rank=f.opt("q_lora_rank", 1536) or 0,  # null: DeepSeek-V2-Lite's plain q_proj
        kv_lora_rank=f.get("kv_lora_rank", default=512),
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=f.get("v_head_dim", default=128),
        rotary_frac=rope / (nope + rope) if ints else 1.0,
        rope_theta=f.rope("rope_theta", default=10000.0),
    )
    if f.opt("n_routed_experts", 0) is None:  # DeepSeek's modeling code: null, no MoE layer
        return kw
    experts = f.count("n_routed_experts", default=256 if v3 else 64)
    router = "sigmoid" if v3 else "softmax"  # what DeepseekV3TopkRouter / DeepseekV2Moe run
    if f.get("scoring_func", default=router) != router:
        raise f.fail("scoring_func", f"must be {router!r} for {f.mtype} (transformers runs it)")
    if v3:  # DeepSeek-V3's MoEGate runs noaux_tc alone (NotImplementedError for the others)
        if (method := f.get("topk_method", default="noaux_tc")) != "noaux_tc":
            raise f.fail("topk_method", f"{method!r} is not modelled (deepseek_v3: noaux_tc)")
        groups = f.count("n_group", default=8), f.count("topk_group", default=4)
    elif (method := f.get("topk_method", default="greedy")) == "group_limited_greedy":
        groups = f.count("n_group", default=_MISSING), f.count("topk_group", default=_MISSING)
    elif method == "greedy":
        groups = 1, 1
    else:
        raise f.fail("topk_method", f"{method!r} is not modelled (greedy, group_limited_greedy)")
    width = f.count("moe_intermediate_size", default=2048 if v3 else 1407)
    shared = f.opt("n_shared_experts", 1 if v3 else 2)  # null: none
    shared = 0 if shared is None else f.count("n_shared_experts", default=shared, low=0)
    first = f.count("first_k_dense_replace", default=3 if v3 else 0, low=0)
    freq = f.count("moe_layer_freq", default=1)  # DeepSeek's own modeling code; HF reads only first
    kw |= dict(
        num_experts=experts,
        num_experts_per_tok=f.count("num_experts_per_tok", default=8 if v3 else _MISSING),
        moe_intermediate_size=width,
        shared_intermediate_size=shared * width,  # HF builds the shared experts as one MLP
        dense_layers=tuple(i for i in range(L) if i < first or i % freq),
        router=router,
        router_groups=groups[0],
        router_topk_groups=groups[1],
        router_bias=v3,  # DeepseekV3TopkRouter.e_score_correction_bias
        norm_topk_prob=f.flag("norm_topk_prob", v3),
    )
    return kw


def _gpt_oss(f: _Reader) -> dict[str, Any]:
    """GPT-OSS: GQA attention with biases and a learned sink logit per head, full and
    128-token sliding-window layers alternating, routed experts only (top-k over a biased
    router, softmax over the k), each expert a clamped SwiGLU with biases, RMSNorms."""
    kw = _shape(f, 131072, head_dim=64)
    L = f.layers()
    if (layers := f.layer_types(L)) is None:  # GptOssConfig: the even layers slide
        layers = tuple(range(0, L, 2))
    return kw | dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        hidden_act=f.act("hidden_act", "silu"),
        linear_bias=f.flag("attention_bias", True),  # q, k, v, o and the experts' projections
        attn_sinks=True,  # (the eager path's bf16 scores with the sinks appended: not traced)
        rope_theta=f.rope("rope_theta", default=150000.0),
        num_experts=f.count("num_local_experts", default=128),
        num_experts_per_tok=f.count("num_experts_per_tok", "experts_per_token", default=4),
        moe_intermediate_size=f.count("intermediate_size", default=2880),
        router_bias=True,  # GptOssTopKRouter.bias
        norm_topk_prob=True,  # the softmax runs over the k chosen logits
        **_window(f.opt("sliding_window", 128), layers),
    )


def _gpt2(f: _Reader) -> dict[str, Any]:
    # GPT2Config and GPTBigCodeConfig map the generic names onto n_* (attribute_map), and a
    # generic key given beside its n_* key is set last (PretrainedConfig's kwargs): it wins.
    h = f.alias("n_embd", "hidden_size")
    return dict(
        hidden_size=h,
        num_hidden_layers=f.alias("n_layer", "num_hidden_layers"),
        num_attention_heads=f.alias("n_head", "num_attention_heads"),
        intermediate_size=f.get("n_inner", "intermediate_size", default=4 * h),
        vocab_size=f.get("vocab_size"),
        max_position_embeddings=f.alias("n_positions", "max_position_embeddings"),
        tie_word_embeddings=f.flag("tie_word_embeddings", True),
        mlp="plain",
        hidden_act=f.act("activation_function", "gelu_new"),
        norm="layernorm",
        positions="learned",
        linear_bias=True,
        qkv_fused=True,  # GPT2Attention.c_attn
        attention_dropout=f.num("attn_pdrop", default=0.1),  # GPT2Config's defaults
        hidden_dropout=f.num("resid_pdrop", default=0.1),
    )


def _gpt_bigcode(f: _Reader) -> dict[str, Any]:
    kw = _gpt2(f)
    kw |= dict(
        num_key_value_heads=1 if f.flag("multi_query", True) else None,
        max_position_embeddings=f.alias("n_positions", "max_position_embeddings", default=1024),
        hidden_act=f.act("activation_function", "gelu_pytorch_tanh"),
        attention_dropout=f.num("attn_pdrop", default=0.1),  # GPTBigCodeConfig's defaults
        hidden_dropout=f.num("resid_pdrop", default=0.1),
    )
    return kw


def _gpt_neox(f: _Reader) -> dict[str, Any]:
    kw = _shape(f, 2048)
    kw |= dict(
        tie_word_embeddings=f.flag("tie_word_embeddings", False),
        mlp="plain",
        hidden_act=f.act("hidden_act", "gelu"),
        norm="layernorm",
        linear_bias=True,
        qkv_fused=True,  # GPTNeoXAttention.query_key_value
        qkv_per_head=True,
        parallel_residual=f.flag("use_parallel_residual", True),
        rotary_frac=f.rope("rotary_pct", "partial_rotary_factor", default=0.25),
        rope_theta=f.rope("rotary_emb_base", "rope_theta", default=10000.0),
        hidden_dropout=f.num("hidden_dropout", default=0.0),
    )
    return kw


FAMILIES: dict[str, Callable[[_Reader], dict[str, Any]]] = {
    **dict.fromkeys(_MAX_POS, _llama_like),
    "gemma": _gemma, "gemma2": _gemma, "gemma3": _gemma, "gemma3_text": _gemma,
    "granite": _granite, "olmo2": _olmo2, "phi": _phi, "starcoder2": _starcoder2,
    "phi3": _phi3, "falcon": _falcon, "nemotron": _nemotron, "nemotron_h": _nemotron_h,
    "deepseek_v2": _deepseek, "deepseek_v3": _deepseek,
    "gpt2": _gpt2, "gpt_bigcode": _gpt_bigcode, "gpt_neox": _gpt_neox, "gpt_oss": _gpt_oss,
}  # fmt: skip
SUPPORTED_TYPES = tuple(FAMILIES)


def _quantization(qc: Any) -> str:
    """'awq 4-bit' from a config's quantization_config (transformers' quant_method and bits,
    AutoAWQ's w_bit); '' when there is none."""
    from gpuperf.fileio import printable

    if not qc:
        return ""
    if not isinstance(qc, dict):
        return "present"
    method = qc.get("quant_method") or qc.get("quant_type") or "unnamed"
    bits = qc.get("bits", qc.get("w_bit"))
    text = printable(str(method))[:40]
    if isinstance(bits, int) and not isinstance(bits, bool):
        text += f" {bits}-bit"
    return text


def from_hf_dict(d: dict[str, Any], *, name: str, source: str = "") -> ModelConfig:
    """Map a Hugging Face config dict to ModelConfig; InputError names the missing or bad key."""
    from gpuperf.workloads.config import ModelConfig

    mtype = str(d.get("model_type", "")).lower().replace("-", "_")
    source = source or f"preset {name}"
    family = FAMILIES.get(mtype)
    if family is None:
        close = difflib.get_close_matches(mtype, SUPPORTED_TYPES, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise InputError(
            f"{source}: unsupported model_type {mtype or '(missing)'!r}{hint} "
            f"(supported: {', '.join(SUPPORTED_TYPES)})"
        )
    f = _Reader(d, source, mtype)
    if mtype == "gemma3":  # Gemma3ForConditionalGeneration: the decoder is text_config
        text = d.get("text_config", {})
        if not isinstance(text, dict):
            raise f.fail("text_config", "must be an object")
        tie = d.get("tie_word_embeddings")
        f = _Reader({**({"tie_word_embeddings": tie} if tie is not None else {}), **text},
                    source, mtype, "text_config.")  # fmt: skip
    try:
        kw = family(f)
        return ModelConfig(
            name=name,
            model_type=mtype,
            source=source,
            quantization=_quantization(d.get("quantization_config")),
            **kw,
        )
    except TypeError as exc:  # e.g. a string where a number belongs
        raise InputError(f"{source}: malformed config ({exc})") from None
    except InputError as exc:  # ModelConfig's checks name the model; the reader needs the file
        message = str(exc).removeprefix(f"{name}: ").removeprefix(f"{source}: ")
        raise InputError(f"{source}: {message}") from None
