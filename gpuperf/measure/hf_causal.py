"""The Hugging Face causal LM class of a config (whole-model runs build Llama, Mistral and Qwen2:
the same module names, so Megatron-style sharding and pipeline stages apply to each; Qwen2 keeps
its q, k and v biases)."""

from __future__ import annotations

from typing import Any

FAMILIES = ("llama", "mistral", "qwen2")


def causal_lm(cfg: Any) -> Any:  # noqa: ANN401 (a transformers config and model)
    """A randomly initialized model of `cfg`'s own class (LlamaForCausalLM, Qwen2ForCausalLM, ...),
    built on the current default device."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return MODEL_FOR_CAUSAL_LM_MAPPING[type(cfg)](cfg)
