"""The bytes an eager Hugging Face layer keeps for its backward, counted on small models on
the CPU with autograd's saved-tensor hooks (each storage once, parameters left out), beside
the memory model's count (train_activation_bytes_per_layer + eager_saved_extra): Llama-style
and Gemma-style RMSNorms, post-block norms (Gemma-2, OLMo-2), q/k norms (Qwen3, OLMo-2) and
Falcon-7B's math SDPA with one norm shared by parallel attention and MLP, and the grouped_mm
experts of an MoE layer (Qwen3-MoE)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from gpuperf.step.memory import eager_saved_extra, train_activation_bytes_per_layer  # noqa: E402
from gpuperf.workloads.config import from_hf_dict  # noqa: E402

TOKENS = 128
SMALL = dict(hidden_size=256, intermediate_size=1024, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=512, head_dim=64)  # fmt: skip
CASES = {
    "llama": SMALL,
    "mistral": dict(SMALL, sliding_window=64),  # past its window: the mask SDPA keeps
    "qwen3": SMALL,
    "olmo2": SMALL,
    "gemma2": dict(SMALL, attn_logit_softcapping=None, final_logit_softcapping=None),
    "qwen3_moe": dict(
        SMALL, moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True
    ),  # fmt: skip
    "falcon": dict(
        hidden_size=256,
        num_attention_heads=4,
        vocab_size=512,
        multi_query=True,
        new_decoder_architecture=False,
        parallel_attn=True,
        attention_dropout=0.0,
        hidden_dropout=0.0,
        alibi=False,
        bias=False,
    ),  # fmt: skip
}


def _saved_per_layer_token(model_type: str, kw: dict) -> tuple[float, dict]:
    """Bytes saved for backward per token per layer: the difference between 4 and 2 layers."""
    saved = {}
    for layers in (2, 4):
        cfg = transformers.AutoConfig.for_model(model_type, **kw, num_hidden_layers=layers)
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
        model = model.to(torch.bfloat16).train()
        params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        seen: dict[int, int] = {}

        def pack(t, params=params, seen=seen):  # noqa: ANN001, ANN202
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                seen[storage.data_ptr()] = storage.nbytes()
            return t

        ids = torch.randint(
            0, kw["vocab_size"], (1, TOKENS), generator=torch.Generator().manual_seed(0)
        )
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(input_ids=ids, labels=ids)
        saved[layers] = sum(seen.values())
    return (saved[4] - saved[2]) / 2 / TOKENS, cfg.to_dict()


@pytest.mark.parametrize("model_type", sorted(CASES))
def test_the_memory_model_counts_what_autograd_keeps(model_type):
    measured, config = _saved_per_layer_token(model_type, CASES[model_type])
    cfg = from_hf_dict(config, name=model_type)
    predicted = (train_activation_bytes_per_layer(cfg, 1, TOKENS, "bf16") / TOKENS
                 + eager_saved_extra(cfg, "bf16", TOKENS))  # fmt: skip
    assert predicted == pytest.approx(measured, rel=0.01)
