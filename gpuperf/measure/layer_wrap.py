"""A Hugging Face model's decoder layers as torchtitan runs its blocks: checkpointed (whole, or
by its per-op policy) and compiled, each in place. Used by whole-model runs (model_worker) and
benchmarks/device/compile_train_probe.py.

torchtitan (models/llama3/infra/parallelize.py) wraps each block in activation checkpointing,
then `torch.compile`s it, then shards it (FSDP2); this does the first two and leaves sharding to
the caller. The per-op policy keeps the outputs of matmuls but every second one, of SDPA and of
max (`_save_list`), and recomputes everything else (gpuperf.workloads.transformer_train,
op_policy_recomputed, is the model of it).
"""

from __future__ import annotations

import collections
from typing import Any

RECOMPUTE = ("none", "op", "full")


def op_policy() -> Any:  # noqa: ANN401 (a context_fn for torch.utils.checkpoint)
    """torchtitan's per-op selective checkpointing as a context_fn (module docstring)."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    ops = torch.ops.aten
    save = {ops.mm.default, ops.max.default}
    for name in ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
                 "_scaled_dot_product_cudnn_attention"):  # fmt: skip
        if hasattr(ops, name):
            save.add(getattr(ops, name).default)

    def context_fn() -> Any:  # noqa: ANN401
        meta: dict[str, int] = collections.defaultdict(int)

        def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
            key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
            if func == ops.mm.default:
                meta[key] += 1
            keep = func in save and not (func == ops.mm.default and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context_fn


def wrap_layers(model: Any, recompute: str = "none", compile_layers: bool = False,
                backend: str = "inductor") -> None:  # fmt: skip
    """Checkpoint (recompute: none, op or full) and/or compile each decoder layer of `model`
    (a transformers causal LM) in place."""
    import torch
    from torch.utils.checkpoint import checkpoint

    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute must be one of {RECOMPUTE}, got {recompute!r}")

    class Checkpointed(torch.nn.Module):
        def __init__(self, layer: Any, context_fn: Any) -> None:  # noqa: ANN401
            super().__init__()
            self.layer, self.context_fn = layer, context_fn

        def forward(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ANN401
            extra = {"context_fn": self.context_fn} if self.context_fn else {}
            return checkpoint(self.layer, *args, use_reentrant=False, **extra, **kwargs)

    from gpuperf.measure.hf_causal import decoder_layers

    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        if recompute != "none":
            layer = Checkpointed(layer, op_policy() if recompute == "op" else None)
        if compile_layers:
            layer = torch.compile(layer, backend=backend)
        layers[i] = layer
