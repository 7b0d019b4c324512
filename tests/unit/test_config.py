"""ModelConfig, presets and the HF config.json loader."""

from __future__ import annotations

import json

import pytest

from gpuperf.errors import InputError
from gpuperf.workloads.config import ModelConfig, load_model, preset_names

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
    "llama3.1-405b": 405_853_388_800,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2-7b": 7_615_616_512,
    "gpt3-175b": 174_604_259_328,
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
        "gelu",
        "layernorm",
        "learned",
        True,
    )


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
    with pytest.raises(InputError, match="integer up to"):
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
