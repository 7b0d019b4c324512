"""ModelConfig, presets and the HF config.json loader."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuperf.errors import InputError
from gpuperf.workloads.config import ModelConfig, from_hf_dict, hf_config, load_model, preset_names

# Exact parameter counts. Llama-2/3, Mistral, Mixtral, GPT-3: modeling-facts.md §8 (computed from
# each model's HF config.json; Mixtral 46.7B/12.9B as Mistral AI publishes). Llama-3.1-405B and
# Qwen2-7B: computed from their config.json (hidden 16384, 126 layers, 128/8 heads, ffn 53248,
# vocab 128256; hidden 3584, 28 layers, 28/4 heads, ffn 18944, vocab 152064, qkv bias), matching the
# "405B" / "7.62B" (7,615,616,512) that the model cards print.
PARAMS = {
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3.1-8b": 8_030_261_248,  # Llama 3's shapes, a longer context
    "llama3.1-70b": 70_553_706_496,
    "llama3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "nemotron-3-nano": 31_577_940_288,
    "qwen2-7b": 7_615_616_512,
    "gpt3-175b": 174_604_259_328,
    # By hand from each config.json (the parts are below in test_moe_and_mla_breakdown_by_hand);
    # the published totals they round to are in PUBLISHED.
    "qwen3-30b-a3b": 30_532_122_624,
    "deepseek-v3": 671_026_419_200,
    "gemma2-9b": 9_241_705_984,
    # 64 x (q 5120*8192 + k, v 5120*1024 + o 8192*5120 + MLP 3*5120*25600 + norms 2*5120 + q/k
    # norms 2*128) + final norm 5120 + untied embedding and lm_head 2*151936*5120
    "qwen3-32b": 32_762_123_264,
    # 16 x (q, o 2048*2048 + k, v 2048*512 + MLP 3*2048*8192 + norms 2*2048) + final norm 2048
    # + tied embedding 128256*2048 (the model card: 1.23B)
    "llama3.2-1b": 1_235_814_400,
    # transformers' GptOssForCausalLM built on the meta device from each config.json
    "gpt-oss-20b": 20_914_757_184,
    "gpt-oss-120b": 116_829_156_672,
}


def test_every_preset_has_a_count():
    assert sorted(PARAMS) == preset_names()


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_param_count_exact(name):
    assert load_model(name).param_count() == PARAMS[name]


def test_mixtral_active_params():
    cfg = load_model("mixtral-8x7b")
    assert cfg.active_param_count() == 12_879_925_248
    assert cfg.num_experts == 8 and cfg.num_experts_per_tok == 2 and cfg.is_moe


def test_dense_active_equals_total():
    cfg = load_model("llama3-8b")
    assert cfg.active_param_count() == cfg.param_count()


def test_derived_fields():
    cfg = load_model("llama2-70b")
    assert (cfg.head_dim, cfg.kv_heads, cfg.heads, cfg.hidden, cfg.layers) == (128, 8, 64, 8192, 80)
    mha = load_model("llama2-7b")
    assert mha.num_key_value_heads == 32
    qwen = load_model("qwen2-7b")
    assert qwen.qkv_bias and not qwen.linear_bias and qwen.kv_heads == 4
    gpt3 = load_model("gpt3-175b")
    assert (gpt3.mlp, gpt3.norm, gpt3.positions, gpt3.tie_word_embeddings) == (
        "plain",
        "layernorm",
        "learned",
        True,
    )
    assert gpt3.hidden_act == "gelu_new" and gpt3.qkv_fused  # one c_attn


def test_case_insensitive_and_suggestions():
    assert load_model("LLAMA2-7B").name == "llama2-7b"
    with pytest.raises(InputError, match="did you mean llama2-7b"):
        load_model("llama2-7")


def test_gpt2_small_from_hf_config(tmp_path):
    # GPT-2 small (openai-community/gpt2 config.json): 124,439,808 parameters.
    cfg_file = tmp_path / "config.json"
    cfg_file.write_text(
        json.dumps(
            {
                "model_type": "gpt2",
                "n_embd": 768,
                "n_layer": 12,
                "n_head": 12,
                "n_positions": 1024,
                "vocab_size": 50257,
            }
        )
    )
    cfg = load_model(str(cfg_file))
    assert cfg.param_count() == 124_439_808
    assert cfg.intermediate_size == 3072


def test_gpt_neox_pythia_410m(tmp_path):
    # EleutherAI/pythia-410m: 405,334,016 parameters (HF num_parameters; untied embed_in/embed_out,
    # biases everywhere, 2 LayerNorms per layer + final).
    path = tmp_path / "pythia.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "gpt_neox",
                "hidden_size": 1024,
                "num_hidden_layers": 24,
                "num_attention_heads": 16,
                "intermediate_size": 4096,
                "vocab_size": 50304,
                "max_position_embeddings": 2048,
                "use_parallel_residual": True,
            }
        )
    )
    cfg = load_model(str(path))
    assert cfg.parallel_residual and cfg.positions == "rope"
    assert cfg.param_count() == 405_334_016
    # GPTNeoXConfig defaults: gelu, rotary_pct 0.25; one query_key_value linear
    assert (cfg.hidden_act, cfg.rotary_frac, cfg.qkv_fused, cfg.mlp) == (
        "gelu",
        0.25,
        True,
        "plain",
    )


def test_bad_files(tmp_path):
    with pytest.raises(InputError, match="nope.json does not exist"):
        load_model(str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="bad.json is not valid JSON"):
        load_model(str(bad))
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    with pytest.raises(InputError, match="missing 'num_hidden_layers'"):
        load_model(str(missing))
    weird = tmp_path / "weird.json"
    weird.write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(InputError, match="unsupported model_type 't5'"):
        load_model(str(weird))


def _cfg(**kw):
    base = dict(
        name="t", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, vocab_size=100,
    )  # fmt: skip
    base.update(kw)
    return ModelConfig(**base)


def test_validation():
    with pytest.raises(InputError, match="must divide hidden_size"):
        _cfg(num_attention_heads=5)
    assert _cfg(num_attention_heads=5, head_dim=16).head_dim == 16
    with pytest.raises(InputError, match="num_key_value_heads"):
        _cfg(num_key_value_heads=3)
    with pytest.raises(InputError, match="positive"):
        _cfg(num_hidden_layers=0)
    with pytest.raises(InputError, match="positive"):
        _cfg(vocab_size="100")
    with pytest.raises(InputError, match="num_experts_per_tok"):
        _cfg(num_experts=2, num_experts_per_tok=3)
    assert _cfg(num_key_value_heads=1).kv_heads == 1  # MQA


@pytest.mark.parametrize("value", ["false", "true", 0, 1])
def test_tie_word_embeddings_must_be_a_json_boolean(value):
    from gpuperf.errors import InputError
    from gpuperf.workloads.config import from_hf_dict, hf_config

    d = {**hf_config("llama3-8b")[0], "tie_word_embeddings": value}
    with pytest.raises(InputError, match="'tie_word_embeddings' must be true or false"):
        from_hf_dict(d, name="x")
    assert from_hf_dict({**d, "tie_word_embeddings": False}, name="x").tie_word_embeddings is False
    assert from_hf_dict({**d, "tie_word_embeddings": True}, name="x").tie_word_embeddings is True


@pytest.mark.parametrize(
    "field, value",
    [("num_local_experts", 7.5), ("num_experts_per_tok", 1.5), ("intermediate_size", 10**400),
     ("num_hidden_layers", 1e12), ("hidden_size", True)],
)  # fmt: skip
def test_sizes_are_bounded_integers(field, value):
    from gpuperf.workloads.config import from_hf_dict, hf_config

    d = {**hf_config("mixtral-8x7b")[0], field: value}
    with pytest.raises(InputError, match=f"{field}'? must be a positive integer"):
        from_hf_dict(d, name="x")


@pytest.mark.parametrize(
    "field, value, match",
    [("rope_theta", "abc", "'rope_theta' must be a number"), ("rope_theta", True, "a number"),
     ("attention_dropout", "0.1", "must be a number"), ("attention_bias", "false", "true or false"),
     ("mlp_bias", 1, "true or false"), ("num_hidden_layers", 2**31 - 1, "integer up to 4096")],
)  # fmt: skip
def test_config_values_are_typed(field, value, match):
    from gpuperf.workloads.config import from_hf_dict, hf_config

    d = {**hf_config("llama3-8b")[0], field: value}
    with pytest.raises(InputError, match=match):
        from_hf_dict(d, name="x")


# --- Hugging Face families: tests/unit/data/hf_configs/*.json are real config.json files of public
# models (each names its source in "_source"); the new presets are real config.json files too.

DATA = Path(__file__).parent / "data" / "hf_configs"


def _hf(name: str) -> dict:
    """A test config or a preset, as the dict its config.json holds."""
    path = DATA / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else hf_config(name)[0]


def _load(name: str, drop: tuple[str, ...] = (), **changes) -> ModelConfig:
    d = {k: v for k, v in _hf(name).items() if k not in drop}
    return from_hf_dict({**d, **changes}, name=name)


def _parts(cfg: ModelConfig) -> dict[str, int]:
    b = cfg.param_breakdown()
    total, active = cfg.param_count(), cfg.active_param_count()
    embedding = b["embed"] + b["lm_head"] + b["pos_embed"]
    return {
        "total": total,
        "active": active,
        "active_no_embed": active - b["embed"],  # without the input lookup table
        "embedding": embedding,
        "non_embedding": total - embedding,
        # what a checkpoint stores: a tied lm_head.weight saved beside the word embeddings
        "stored": total + (b["embed"] if cfg.tie_word_embeddings else 0),
    }


# (config, what, published, relative tolerance, where the published number comes from)
PUBLISHED = [
    ("deepseek-v3", "total", 671e9, 0.002,
     "DeepSeek-V3 model card and report (arXiv 2412.19437): 671B total parameters"),
    ("deepseek-v3", "active_no_embed", 37e9, 0.02,
     "same: 37B activated for each token (DeepSeek counts them without the input embedding)"),
    ("deepseek-v2-lite", "total", 15.7e9, 0.002, "DeepSeek-V2-Lite model card: 15.7B total"),
    ("deepseek-v2-lite", "active_no_embed", 2.4e9, 0.03, "same: 2.4B activated"),
    ("qwen3-30b-a3b", "total", 30.5e9, 0.002, "Qwen3-30B-A3B model card: 30.5B in total"),
    ("qwen3-30b-a3b", "active", 3.3e9, 0.02, "same: 3.3B activated"),
    ("qwen3-30b-a3b", "non_embedding", 29.9e9, 0.002, "same: 29.9B non-embedding"),
    ("qwen3-0.6b", "total", 0.6e9, 0.01, "Qwen3-0.6B model card: 0.6B"),
    ("qwen3-0.6b", "non_embedding", 0.44e9, 0.002, "same: 0.44B non-embedding"),
    ("qwen1.5-moe-a2.7b", "total", 14.3e9, 0.002,
     "Qwen1.5-MoE-A2.7B model card: 14.3B parameters in total"),
    ("qwen1.5-moe-a2.7b", "active", 2.7e9, 0.01, "same: 2.7B activated during runtime"),
    ("mixtral-8x7b", "total", 46.7e9, 0.001,
     "Mistral AI, 'Mixtral of experts' (2023-12-11): 46.7B total parameters"),
    ("mixtral-8x7b", "active", 12.9e9, 0.002, "same: 12.9B parameters per token"),
    ("gemma2-9b", "non_embedding", 8_324_201_984, 0,
     "Gemma 2 report (arXiv 2408.00118) Table 1: 9B non-embedding 8,324,201,984"),
    ("gemma2-9b", "embedding", 917_962_752, 0.001,
     "same: 917,962,752 embedding (their vocabulary is padded to 256,128 rows)"),
    ("gemma-3-1b-pt", "embedding", 302e6, 0.002,
     "Gemma 3 report (arXiv 2503.19786) Table 1: 1B: 302M embedding"),
    ("gemma-3-1b-pt", "non_embedding", 698e6, 0.002, "same: 698M non-embedding"),
    ("gemma-3-4b-pt", "embedding", 675e6, 0.01, "same: 4B: 675M embedding"),
    ("gemma-3-4b-pt", "non_embedding", 3_209e6, 0.001,
     "same: 3,209M non-embedding (the 417M vision encoder is not modelled)"),
    ("phi-3-mini-4k-instruct", "total", 3.8e9, 0.01,
     "Phi-3 report (arXiv 2404.14219): phi-3-mini, a 3.8 billion parameter language model"),
    ("falcon-7b", "stored", 7.22e9, 0.002,
     "tiiuae/falcon-7b model page: 7.22B params, counting the checkpoint's lm_head.weight "
     "beside the word embeddings it is tied to (in memory: 6.92B)"),
    ("falcon-40b", "stored", 41.8e9, 0.002, "tiiuae/falcon-40b model page: 41.8B params, same"),
    ("nemotron-4-15b", "embedding", 3.2e9, 0.02,
     "Nemotron-4 15B report (arXiv 2402.16819) section 2: 3.2B embedding parameters"),
    ("nemotron-4-15b", "non_embedding", 12.5e9, 0.002, "same: 12.5B non-embedding parameters"),
    ("starcoder", "total", 15.5e9, 0.002,
     "StarCoder paper (arXiv 2305.06161): StarCoder is a 15.5B parameter model"),
]  # fmt: skip


@pytest.mark.parametrize("name, what, published, tol, source", PUBLISHED)
def test_param_counts_match_published(name, what, published, tol, source):
    ours = _parts(_load(name))[what]
    assert ours == pytest.approx(published, rel=tol, abs=0), f"{what} {ours:,} vs {source}"


def test_moe_and_mla_breakdown_by_hand():
    # DeepSeek-V3, per layer: q_a 7168*1536 + norm 1536 + q_b 1536*128*192, kv_a 7168*576 +
    # norm 512 + kv_b 512*128*256, o 128*128*7168; 58 MoE layers of 256 experts 3*7168*2048 and
    # one shared expert of 2048, router 256*7168 + a 256 correction bias; 3 dense layers 18432.
    b = load_model("deepseek-v3").param_breakdown()
    attn = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256
    assert b["attn"] == 61 * (attn + 128 * 128 * 7168)
    assert b["mlp"] == 58 * 256 * 3 * 7168 * 2048
    assert b["shared_expert"] == 58 * 3 * 7168 * 2048
    assert b["dense_mlp"] == 3 * 3 * 7168 * 18432
    assert b["router"] == 58 * (7168 * 256 + 256)
    assert b["norms"] == (2 * 61 + 1) * 7168
    # Qwen1.5-MoE: shared expert 3*2048*5632 plus its sigmoid gate (2048) in each of 24 layers
    q = _load("qwen1.5-moe-a2.7b").param_breakdown()
    assert q["shared_expert"] == 24 * (3 * 2048 * 5632 + 2048) and q["router"] == 24 * 2048 * 60
    # Qwen3: q_norm and k_norm of head_dim 128 in each of 28 layers, 2 RMSNorms + the final one
    assert _load("qwen3-0.6b").param_breakdown()["norms"] == (2 * 28 + 1) * 1024 + 28 * 2 * 128
    # Gemma2: four norms per layer (sandwich), no q/k norm
    assert load_model("gemma2-9b").param_breakdown()["norms"] == (4 * 42 + 1) * 3584
    # Falcon-7B: one LayerNorm (weight and bias) feeds attention and MLP
    assert _load("falcon-7b").param_breakdown()["norms"] == (32 + 1) * 2 * 4544


def _config_loads(name):
    return load_model(name) if name in preset_names() else load_model(str(DATA / f"{name}.json"))


FIELDS = {
    "qwen3-0.6b": dict(model_type="qwen3", head_dim=128, kv_heads=8, qk_norm=True,
                       tie_word_embeddings=True, hidden_act="silu", mlp="gated", sliding_window=0,
                       rope_theta=1e6, qkv_bias=False),
    "qwen3-30b-a3b": dict(head_dim=128, qk_norm=True, num_experts=128, num_experts_per_tok=8,
                          moe_intermediate_size=768, expert_intermediate=768, norm_topk_prob=True,
                          dense_layers=(), shared_intermediate_size=0, router="softmax"),
    "qwen1.5-moe-a2.7b": dict(num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
                              shared_intermediate_size=5632, shared_expert_gate=True,
                              qkv_bias=True, norm_topk_prob=False, sliding_window=0),
    "mixtral-8x7b": dict(num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                         expert_intermediate=14336, sliding_window=0, rope_theta=1e6),
    "mistral-7b": dict(kv_heads=8, sliding_window=4096, sliding_layers=tuple(range(32)),
                       norm_weight_fp32=False),
    "qwen2-7b": dict(qkv_bias=True, linear_bias=False, sliding_window=0, hidden_act="silu"),
    "gemma2-9b": dict(hidden_act="gelu_tanh", mlp="gated", head_dim=256, kv_heads=8,
                      tie_word_embeddings=True, sandwich_norm=True, embed_scale=True,
                      norm_weight_fp32=True, qk_norm=False, attn_softcap=50.0, sliding_window=4096,
                      sliding_layers=tuple(range(0, 42, 2))),
    "gemma-3-1b-pt": dict(model_type="gemma3_text", hidden_act="gelu_tanh", qk_norm=True,
                          sandwich_norm=True, embed_scale=True, norm_weight_fp32=True,
                          kv_heads=1, head_dim=256,
                          attn_softcap=0.0, sliding_window=512, rope_theta=1e6,
                          sliding_layers=tuple(i for i in range(26) if (i + 1) % 6)),
    # gemma-3-4b's text_config leaves heads, head_dim and vocabulary to Gemma3TextConfig
    "gemma-3-4b-pt": dict(model_type="gemma3", heads=8, kv_heads=4, head_dim=256, vocab=262208,
                          max_position_embeddings=131072, sliding_window=1024,
                          tie_word_embeddings=True, qk_norm=True),
    "phi-3-mini-4k-instruct": dict(qkv_fused=True, gate_up_fused=True, head_dim=96,
                                   hidden_act="silu", mlp="gated", sliding_window=2047,
                                   sliding_layers=tuple(range(32)), rotary_frac=1.0),
    "falcon-7b": dict(kv_heads=1, head_dim=64, parallel_residual=True, shared_input_norm=True,
                      mlp="plain", hidden_act="gelu", norm="layernorm", linear_bias=False,
                      qkv_fused=True, tie_word_embeddings=True, intermediate=4 * 4544),
    "falcon-40b": dict(kv_heads=8, parallel_residual=True, shared_input_norm=False),
    "minitron-8b-base": dict(model_type="nemotron", hidden_act="relu2", mlp="plain",
                             norm="layernorm", rotary_frac=0.5, heads=48, head_dim=128,
                             kv_heads=8),
    "deepseek-v2-lite": dict(is_mla=True, q_lora_rank=0, kv_lora_rank=512, head_dim=192,
                             kv_heads=16, v_head_dim=128, num_experts=64, num_experts_per_tok=6,
                             moe_intermediate_size=1408, shared_intermediate_size=2 * 1408,
                             dense_layers=(0,), router="softmax", router_groups=1,
                             router_bias=False, norm_topk_prob=False),
    "deepseek-v3": dict(is_mla=True, q_lora_rank=1536, qk_rope_head_dim=64, rotary_frac=64 / 192,
                        router="sigmoid", router_groups=8, router_topk_groups=4, router_bias=True,
                        dense_layers=(0, 1, 2), shared_intermediate_size=2048, moe_layers=58,
                        norm_topk_prob=True, hidden_act="silu"),
    "starcoder": dict(model_type="gpt_bigcode", kv_heads=1, positions="learned",
                      hidden_act="gelu_tanh", mlp="plain", linear_bias=True, qkv_fused=True,
                      tie_word_embeddings=True, attention_dropout=0.1, intermediate=24576),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_family_fields_as_hf_defines_them(name):
    cfg = _config_loads(name)
    assert {k: getattr(cfg, k) for k in FIELDS[name]} == FIELDS[name]


def test_every_family_is_covered():
    from gpuperf.workloads.hf_config import SUPPORTED_TYPES

    assert set(SUPPORTED_TYPES) >= {
        "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma2",
        "gemma3", "gemma3_text", "phi3", "falcon", "nemotron", "deepseek_v2", "deepseek_v3",
        "gpt2", "gpt_neox", "gpt_bigcode",
    }  # fmt: skip


@pytest.mark.parametrize(
    "name, drop, changes, expect",
    [
        # MistralConfig: sliding_window defaults to 4096 (every layer); null means none
        ("mistral-7b", ("sliding_window",), {}, dict(sliding_window=4096)),
        ("mistral-7b", (), {"sliding_window": None}, dict(sliding_window=0, sliding_layers=())),
        # Qwen3Config: head_dim defaults to 128, not hidden / heads (= 64 here)
        ("qwen3-0.6b", ("head_dim",), {}, dict(head_dim=128)),
        # Qwen2/Qwen3: with use_sliding_window, the layers from max_window_layers on slide
        ("qwen2-7b", (), {"use_sliding_window": True, "max_window_layers": 21},
         dict(sliding_window=4096, sliding_layers=tuple(range(21, 28)))),
        ("qwen2-7b", (), {"use_sliding_window": True, "sliding_window": 1024,
                          "layer_types": ["full_attention"] * 27 + ["sliding_attention"]},
         dict(sliding_window=1024, sliding_layers=(27,))),
        # Qwen2-MoE (transformers 5): even layers below max_window_layers slide
        ("qwen1.5-moe-a2.7b", (), {"use_sliding_window": True, "max_window_layers": 6},
         dict(sliding_window=32768, sliding_layers=(0, 2, 4))),
        # Qwen2MoeDecoderLayer: dense where (i + 1) % decoder_sparse_step, or in mlp_only_layers
        ("qwen1.5-moe-a2.7b", (), {"decoder_sparse_step": 2, "mlp_only_layers": [1]},
         dict(dense_layers=(0, 1, *range(2, 24, 2)))),
        # DeepSeek remote code: MoE from first_k_dense_replace on, every moe_layer_freq-th layer
        ("deepseek-v3", (), {"moe_layer_freq": 2},
         dict(dense_layers=(0, 1, 2, *range(3, 61, 2)))),
        ("deepseek-v2-lite", (), {"topk_method": "group_limited_greedy", "n_group": 8,
                                  "topk_group": 3}, dict(router_groups=8, router_topk_groups=3)),
        ("deepseek-v2-lite", ("n_shared_experts", "first_k_dense_replace"), {},
         dict(shared_intermediate_size=2 * 1408, dense_layers=())),  # V2 defaults: 2 shared, 0
        ("deepseek-v3", (), {"n_shared_experts": None}, dict(shared_intermediate_size=0)),
        # Gemma3: the full layers are every sliding_window_pattern-th
        ("gemma-3-1b-pt", (), {"sliding_window_pattern": 2},
         dict(sliding_layers=tuple(range(0, 26, 2)))),
        ("gemma2-9b", ("attn_logit_softcapping",), {}, dict(attn_softcap=50.0)),
        ("gemma2-9b", (), {"attn_logit_softcapping": None}, dict(attn_softcap=0.0)),
        # Falcon: neither new architecture nor multi-query -> one KV head per query head
        ("falcon-7b", (), {"multi_query": False}, dict(kv_heads=71)),
        ("falcon-7b", ("parallel_attn",), {"parallel_attn": False},
         dict(parallel_residual=False, shared_input_norm=False)),
        ("phi-3-mini-4k-instruct", ("sliding_window",), {}, dict(sliding_window=0)),
        ("minitron-8b-base", ("partial_rotary_factor",), {}, dict(rotary_frac=0.5)),
        ("starcoder", ("activation_function", "attn_pdrop"), {"multi_query": False},
         dict(hidden_act="gelu_tanh", attention_dropout=0.1, kv_heads=48)),
        # transformers 5 keeps rope_theta (and partial_rotary_factor) in rope_parameters
        ("qwen2-7b", ("rope_theta",), {"rope_parameters": {"rope_theta": 5e5}},
         dict(rope_theta=5e5)),
        ("phi-3-mini-4k-instruct", (), {"rope_parameters": {"partial_rotary_factor": 0.75}},
         dict(rotary_frac=0.75)),
    ],
)  # fmt: skip
def test_hf_defaults_and_layer_rules(name, drop, changes, expect):
    cfg = _load(name, drop, **changes)
    assert {k: getattr(cfg, k) for k in expect} == expect


def _refused(name, match, drop=(), **changes):
    with pytest.raises(InputError, match=match) as exc:
        _load(name, drop, **changes)
    assert "\n" not in str(exc.value)  # one line


@pytest.mark.parametrize(
    "name, key, value",
    [("qwen1.5-moe-a2.7b", "use_sliding_window", "false"), ("falcon-7b", "parallel_attn", "false"),
     ("falcon-7b", "alibi", "false"), ("gemma-3-1b-pt", "tie_word_embeddings", "false"),
     ("deepseek-v3", "norm_topk_prob", "true"), ("starcoder", "multi_query", "true"),
     ("phi-3-mini-4k-instruct", "tie_word_embeddings", 0)],
)  # fmt: skip
def test_string_booleans_are_refused(name, key, value):
    _refused(name, f"'{key}' must be true or false", **{key: value})


@pytest.mark.parametrize(
    "name, key, value",
    [("qwen3-30b-a3b", "num_experts", 127.5), ("qwen1.5-moe-a2.7b", "num_experts_per_tok", 3.5),
     ("deepseek-v3", "n_routed_experts", 255.5), ("deepseek-v3", "n_shared_experts", 0.5),
     ("qwen3-30b-a3b", "moe_intermediate_size", 767.5)],
)  # fmt: skip
def test_fractional_experts_are_refused(name, key, value):
    _refused(name, f"'{key}' must be a (positive|non-negative) integer", **{key: value})


@pytest.mark.parametrize(
    "name, key, value",
    [("deepseek-v3", "n_routed_experts", 0), ("deepseek-v2-lite", "n_routed_experts", 0),
     ("deepseek-v3", "n_routed_experts", -4), ("qwen3-30b-a3b", "num_experts", 0),
     ("qwen1.5-moe-a2.7b", "num_experts", 0), ("mixtral-8x7b", "num_local_experts", 0),
     ("qwen3-30b-a3b", "num_experts_per_tok", 0), ("deepseek-v3", "moe_intermediate_size", 0),
     ("qwen3-30b-a3b", "moe_intermediate_size", 0), ("deepseek-v3", "n_group", 0),
     ("deepseek-v3", "n_shared_experts", -1), ("deepseek-v3", "first_k_dense_replace", -1)],
)  # fmt: skip
def test_an_moe_family_without_experts_is_refused_naming_the_key(name, key, value):
    # 0 experts (or an expert 0 wide, which ModelConfig reads as the dense width) is no MoE
    _refused(name, f"'{key}' must be a (positive|non-negative) integer, not {value}",
             **{key: value})  # fmt: skip


def test_a_null_routed_expert_count_is_a_dense_deepseek():
    # DeepSeek's modeling code builds a dense MLP in every layer when n_routed_experts is null
    assert _load("deepseek-v2-lite", n_routed_experts=None).is_moe is False


def test_alibi_falcon_is_refused():
    _refused("falcon-7b", "'alibi' is true: alibi positions are not modelled", alibi=True)


@pytest.mark.parametrize(
    "name, key, value",
    [("qwen3-0.6b", "hidden_act", "quick_gelu"), ("gemma2-9b", "hidden_activation", "gelu_10"),
     ("starcoder", "activation_function", "tanh"), ("falcon-7b", "activation", "mish"),
     ("minitron-8b-base", "hidden_act", "relu6"), ("deepseek-v3", "hidden_act", 7)],
)  # fmt: skip
def test_unknown_activation_is_refused(name, key, value):
    _refused(name, f"'{key}' .* is not modelled", **{key: value})


@pytest.mark.parametrize(
    "kw, match",
    [(dict(sliding_window=8, sliding_layers=(0, 2)), r"sliding_layers .* in \[0, 2\)"),
     (dict(sliding_window=8, sliding_layers=(1, 0)), "sorted, unique"),
     (dict(sliding_window=8, sliding_layers=(1, 1)), "sorted, unique"),
     (dict(sliding_layers=(0,)), "need a sliding_window > 0"),
     (dict(num_experts=4, num_experts_per_tok=1, dense_layers=(-1,)), "dense_layers"),
     (dict(dense_layers=(0,)), "dense_layers needs num_experts > 0"),
     (dict(kv_lora_rank=64, qk_nope_head_dim=16, v_head_dim=16), "qk_rope_head_dim must be a"),
     (dict(qk_rope_head_dim=8), "qk_rope_head_dim needs kv_lora_rank"),
     (dict(kv_lora_rank=64, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=16,
           num_key_value_heads=2), "an MLA model has head_dim"),
     (dict(num_experts=6, num_experts_per_tok=2, router_groups=4), "router_groups"),
     (dict(num_experts=8, num_experts_per_tok=4, router_groups=4, router_topk_groups=1),
      "router_groups"),
     (dict(hidden_act="gelu_erf"), "hidden_act must be one of"),
     (dict(mlp="swiglu"), "mlp must be one of"),
     (dict(rotary_frac=0), r"rotary_frac must be a number in \(0, 1\]"),
     (dict(qk_norm="yes"), "qk_norm must be true or false")],
)  # fmt: skip
def test_model_config_validation(kw, match):
    with pytest.raises(InputError, match=match) as exc:
        _cfg(**kw)
    assert "\n" not in str(exc.value)


def test_mla_derives_head_dim_and_kv_heads():
    cfg = _cfg(kv_lora_rank=64, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
    assert (cfg.is_mla, cfg.head_dim, cfg.kv_heads) == (True, 24, 4)


@pytest.mark.parametrize(
    "name, drop, changes, match",
    [("qwen3-30b-a3b", (), {"mlp_only_layers": [48]}, r"'mlp_only_layers' must be .* \[0, 48\)"),
     ("qwen3-0.6b", (), {"layer_types": ["full_attention"] * 27}, "'layer_types' must name"),
     ("gemma2-9b", (), {"layer_types": ["chunked_attention"] * 42}, "'layer_types' must name"),
     ("qwen1.5-moe-a2.7b", (), {"decoder_sparse_step": 0}, "'decoder_sparse_step' must be a pos"),
     ("deepseek-v2-lite", ("num_experts_per_tok",), {}, "missing 'num_experts_per_tok'"),
     ("deepseek-v2-lite", (), {"attention_bias": True}, "MLA projection biases are not modelled"),
     ("deepseek-v2-lite", (), {"scoring_func": "sigmoid"}, "'scoring_func' must be 'softmax'"),
     ("deepseek-v2-lite", (), {"topk_method": "noaux_tc"}, "'topk_method' 'noaux_tc' is not"),
     ("deepseek-v3", (), {"topk_method": "bogus"}, "'topk_method' 'bogus' is not modelled"),
     ("deepseek-v3", (), {"topk_method": "greedy"}, "'topk_method' 'greedy' is not modelled"),
     ("deepseek-v3", (), {"num_key_value_heads": 1}, "an MLA model has head_dim"),
     ("gemma-3-4b-pt", (), {"text_config": []}, "'text_config' must be an object")],
)  # fmt: skip
def test_config_rules_are_refused(name, drop, changes, match):
    _refused(name, match, drop, **changes)


@pytest.mark.parametrize(
    "name, key",
    [("qwen3-0.6b", "hidden_size"), ("qwen3-30b-a3b", "intermediate_size"),
     ("qwen1.5-moe-a2.7b", "vocab_size"), ("gemma2-9b", "num_attention_heads"),
     ("gemma-3-1b-pt", "hidden_size"), ("phi-3-mini-4k-instruct", "num_hidden_layers"),
     ("falcon-7b", "hidden_size"), ("minitron-8b-base", "hidden_size"),
     ("deepseek-v3", "hidden_size"), ("deepseek-v2-lite", "intermediate_size"),
     ("starcoder", "n_embd"), ("mixtral-8x7b", "hidden_size")],
)  # fmt: skip
def test_missing_required_key(name, key):
    _refused(name, f"missing '{key}'", drop=(key,))


def test_gemma3_reads_its_text_config():
    d = _hf("gemma-3-4b-pt")
    d["text_config"] = {k: v for k, v in d["text_config"].items() if k != "num_hidden_layers"}
    with pytest.raises(InputError, match="missing 'text_config.num_hidden_layers'"):
        from_hf_dict(d, name="g")
    assert _load("gemma-3-4b-pt", tie_word_embeddings=False).tie_word_embeddings is False


def test_reexports_and_presets_load():
    from gpuperf.workloads import hf_config as module

    assert from_hf_dict is module.from_hf_dict
    for name in preset_names():
        assert load_model(name).source == f"preset {name}"


@pytest.mark.parametrize("model_type", ["gpt2", "gpt_bigcode"])
def test_gpt2_family_generic_keys_win_over_their_n_aliases(model_type):
    """GPT2Config / GPTBigCodeConfig map num_hidden_layers, hidden_size, num_attention_heads and
    max_position_embeddings onto n_layer, n_embd, n_head, n_positions; given both, the generic
    key is set last and wins (a StarCoder cut to 6 layers by num_hidden_layers is 6 layers)."""
    cfg = from_hf_dict({"model_type": model_type, "n_layer": 40, "num_hidden_layers": 6,
                        "n_embd": 6144, "hidden_size": 1024, "n_head": 48,
                        "num_attention_heads": 16, "n_positions": 8192,
                        "max_position_embeddings": 2048, "vocab_size": 1000},
                       name="cut")  # fmt: skip
    assert (cfg.layers, cfg.hidden, cfg.heads) == (6, 1024, 16)
    assert cfg.max_position_embeddings == 2048
    only_n = from_hf_dict({"model_type": model_type, "n_layer": 40, "n_embd": 6144,
                           "n_head": 48, "n_positions": 8192, "vocab_size": 1000},
                          name="n")  # fmt: skip
    assert (only_n.layers, only_n.hidden, only_n.heads) == (40, 6144, 48)


def test_gemma_starcoder2_and_granite_configs_read_as_their_modeling_code_runs():
    data = Path(__file__).parent / "data" / "hf_configs"
    read = {n: from_hf_dict(json.loads((data / f"{n}.json").read_text()), name=n)
            for n in ("gemma-7b", "starcoder2-7b", "granite-3.1-8b")}  # fmt: skip
    gemma = read["gemma-7b"]  # Gemma 1: Gemma2's (1 + w) norms and scaled embedding, no more
    assert gemma.hd == 256 and gemma.hidden_act == "gelu" and gemma.mlp == "gated"
    assert gemma.norm_weight_fp32 and gemma.embed_scale and not gemma.sandwich_norm
    assert not (gemma.attn_softcap or gemma.final_softcap or gemma.sliding_layers)
    sc2 = read["starcoder2-7b"]
    assert sc2.norm == "layernorm" and sc2.mlp == "plain" and sc2.linear_bias and sc2.qkv_bias
    assert sc2.kv_heads == 4 and sc2.sliding_window == 4096 and len(sc2.sliding_layers) == 32
    granite = read["granite-3.1-8b"]
    assert granite.embed_scale and granite.residual_scale and granite.logit_scale
    assert granite.kv_heads == 8 and granite.tie_word_embeddings
    bad = json.loads((data / "granite-3.1-8b.json").read_text()) | {"residual_multiplier": "x"}
    with pytest.raises(InputError, match="residual_multiplier"):
        from_hf_dict(bad, name="bad")


def test_olmo2_normalizes_the_blocks_outputs_and_whole_q_and_k():
    data = Path(__file__).parent / "data" / "hf_configs" / "olmo2-7b.json"
    cfg = from_hf_dict(json.loads(data.read_text()), name="olmo2-7b")
    assert not cfg.pre_norm and cfg.sandwich_norm and cfg.qk_norm_full and cfg.rope_fp32
    # Olmo2RMSNorm: (weight * x) in fp32, then the cast back; no + 1 (Gemma's)
    from gpuperf.workloads.transformer_layers import eager_norm

    names = [(op.name.rsplit("/", 1)[-1], op.dtype) for op in eager_norm(cfg, "n", 4, 8, "bf16")]
    assert names[-2:] == [("mul_weight", "fp32"), ("cast_back", "fp32")]
    assert not any(n == "weight_plus1" for n, _ in names)


# Parameters as transformers 5.17 counts them (the model built on the meta device from the same
# config.json): the norms, biases, tied embeddings and q/k norm widths all count.
HF_PARAMS = {"olmo2-7b": 7_298_617_344, "granite-3.1-8b": 8_170_848_256,
             "gemma-7b": 8_537_680_896, "starcoder2-7b": 7_173_923_840,
             "phi-2": 2_779_683_840}  # fmt: skip


@pytest.mark.parametrize("name", sorted(HF_PARAMS))
def test_new_families_count_the_parameters_transformers_builds(name):
    data = Path(__file__).parent / "data" / "hf_configs" / f"{name}.json"
    cfg = from_hf_dict(json.loads(data.read_text()), name=name)
    assert cfg.param_count() == HF_PARAMS[name]
