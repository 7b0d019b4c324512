"""The Hugging Face causal LM of a config, and its decoder layers.

Run whole (one GPU, DDP, FSDP2), a model may be of any family transformers builds as a causal LM
(`can_build`): those runs touch only its decoder layers (`decoder_layers`: checkpointed,
compiled, sharded each). The runs that split modules by name (Megatron-style tensor
parallelism, pipeline stages, Hugging Face's tp_plan as the worker wires it, context
parallelism) build FAMILIES only: Llama, Mistral and Qwen2 share those names (Qwen2 keeps its
q, k and v biases)."""

from __future__ import annotations

from typing import Any

FAMILIES = ("llama", "mistral", "qwen2")
WHOLE = ("single", "ddp", "fsdp")  # model_run's implementations that run the model whole


def causal_lm(cfg: Any) -> Any:  # noqa: ANN401 (a transformers config and model)
    """A randomly initialized model of `cfg`'s own class (LlamaForCausalLM, Qwen2ForCausalLM, ...),
    built on the current default device."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    return MODEL_FOR_CAUSAL_LM_MAPPING[type(cfg)](cfg)


def can_build(model_type: str) -> bool:
    """Whether the installed transformers has a causal LM for config.json's `model_type`."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def whole_refusal(config: dict[str, Any]) -> str | None:
    """Why a whole-model run cannot build this config.json as itself (None: it can): no causal
    LM for its model_type, a multimodal checkpoint (its language model is the text config), or
    a class without PyTorch's SDPA, which the runs use."""
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    kind = config.get("model_type")
    if kind is None:
        return None
    if not can_build(kind):
        return f"transformers {transformers.__version__} has no causal LM for model_type {kind!r}"
    if isinstance(config.get("text_config"), dict):
        text = config["text_config"].get("model_type", "its text model's")
        return (f"{kind!r} is a multimodal checkpoint: give its text config (model_type "
                f"{text}) to run the language model")  # fmt: skip
    cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[kind], None)
    if cls is not None and not getattr(cls, "_supports_sdpa", True):
        return f"{cls.__name__} does not run PyTorch's SDPA, which whole-model runs use"
    return None


def decoder_layers(model: Any) -> Any:  # noqa: ANN401 (a torch.nn.ModuleList)
    """The ModuleList of a causal LM's decoder layers: its base model's `layers` (Llama and most
    families) or `h` (GPT-2, GPT-BigCode, Falcon)."""
    import torch

    base = getattr(model, "base_model", model)
    for name in ("layers", "h"):
        layers = getattr(base, name, None)
        if isinstance(layers, torch.nn.ModuleList):
            return layers
    raise ValueError(f"{type(model).__name__} has no decoder layers as `layers` or `h`")
