"""Megatron-style tensor parallelism of a Hugging Face Llama (or Mistral, Qwen2) in plain PyTorch
(no DTensor).

Each rank builds the model with its share of the heads and of the MLP width (a config with
heads / tp, kv heads / tp, intermediate / tp), so the kernels are Hugging Face's own on local
shapes. Megatron's conjugate functions (Shoeybi et al. 2019 §3) join the shards: "f" at the entry
of each attention and MLP block (identity forward, all-reduce of the gradient backward) and "g"
after o_proj and down_proj (all-reduce forward, identity backward). The embedding is
vocabulary-parallel (a masked lookup of this rank's rows, then an all-reduce); the lm_head is
column-parallel over the vocabulary ("f" before it: its input gradient is summed over ranks)
and its logits are all-gathered.

`shard_from(full)` copies a whole model's weights into the shards (the correctness check).
The tensor-parallel group is the whole world unless `build` is given one (a pipeline stage's).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

_GROUP: list[Any] = [None]  # the tensor-parallel process group (None: the whole world)


class _Copy(torch.autograd.Function):  # "f": into the tensor-parallel region
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad, group=_GROUP[0])
        return grad


class _Reduce(torch.autograd.Function):  # "g": out of the tensor-parallel region
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dist.all_reduce(x, group=_GROUP[0])
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad


class VocabEmbedding(nn.Module):
    """Rows [start, start + n) of the embedding; other tokens give zeros, summed over ranks."""

    def __init__(self, weight: torch.Tensor, start: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.start = start

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.start
        outside = (local < 0) | (local >= self.weight.shape[0])
        out = nn.functional.embedding(local.masked_fill(outside, 0), self.weight)
        return _Reduce.apply(out.masked_fill(outside.unsqueeze(-1), 0.0))


class _Gather(torch.autograd.Function):  # the vocabulary shards' logits, whole; backward: ours
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        group = _GROUP[0]
        ctx.rank, ctx.n = dist.get_rank(group), x.shape[-1]
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad[..., ctx.rank * ctx.n : (ctx.rank + 1) * ctx.n].contiguous()


def _gather_logits(module: nn.Module, inputs: Any, out: torch.Tensor) -> torch.Tensor:
    return _Gather.apply(out)


def local_config(cfg: Any, tp: int) -> Any:
    """The config of one rank's shard (heads, kv heads and MLP width divided by tp)."""
    import copy

    local = copy.deepcopy(cfg)
    local.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    local.num_attention_heads = cfg.num_attention_heads // tp
    local.num_key_value_heads = max(1, cfg.num_key_value_heads // tp)
    local.intermediate_size = cfg.intermediate_size // tp
    return local


def build(cfg: Any, tp: int, rank: int, device: Any, dtype: Any, group: Any = None) -> nn.Module:
    """A Llama (Mistral, Qwen2) shard with Megatron's collectives (module docstring); `rank` is
    the rank in the tensor-parallel `group`."""
    from gpuperf.measure.hf_causal import causal_lm

    _GROUP[0] = group
    if cfg.num_key_value_heads % tp or cfg.vocab_size % tp:
        raise ValueError("megatron-style TP here needs tp to divide the KV heads and the vocab")
    local_cfg = local_config(cfg, tp)
    local_cfg._attn_implementation = "sdpa"
    with torch.device(device):
        model = causal_lm(local_cfg).to(dtype)
    v = cfg.vocab_size // tp
    emb = model.model.embed_tokens.weight.data[rank * v : (rank + 1) * v].clone()
    model.model.embed_tokens = VocabEmbedding(emb, rank * v)
    head = nn.Linear(cfg.hidden_size, v, bias=False, device=device, dtype=dtype)
    model.lm_head = head
    head.register_forward_pre_hook(lambda mod, args: (_Copy.apply(args[0]),))  # "f"
    head.register_forward_hook(_gather_logits)
    for layer in model.model.layers:
        for block in (layer.self_attn, layer.mlp):
            block.register_forward_pre_hook(_enter, with_kwargs=True)
        for lin in (layer.self_attn.o_proj, layer.mlp.down_proj):
            lin.register_forward_hook(lambda mod, inp, out: _Reduce.apply(out))
    model.config.vocab_size = cfg.vocab_size  # the logits are whole again after the gather
    return model


def _enter(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if "hidden_states" in kwargs:
        return args, {**kwargs, "hidden_states": _Copy.apply(kwargs["hidden_states"])}
    return (_Copy.apply(args[0]), *args[1:]), kwargs


@torch.no_grad()
def shard_from(model: nn.Module, full: nn.Module, tp: int, rank: int) -> None:
    """Copy this rank's slices of `full`'s weights into the shard `model`."""

    def part(w: torch.Tensor, dim: int) -> torch.Tensor:
        return w.chunk(tp, dim=dim)[rank]

    model.model.embed_tokens.weight.copy_(part(full.model.embed_tokens.weight, 0))
    model.lm_head.weight.copy_(part(full.lm_head.weight, 0))
    model.model.norm.weight.copy_(full.model.norm.weight)
    for mine, whole in zip(model.model.layers, full.model.layers, strict=True):
        pairs = [(mine.self_attn, whole.self_attn, n, 0) for n in ("q_proj", "k_proj", "v_proj")]
        pairs += [(mine.mlp, whole.mlp, n, 0) for n in ("gate_proj", "up_proj")]
        pairs += [(mine.self_attn, whole.self_attn, "o_proj", 1)]
        pairs += [(mine.mlp, whole.mlp, "down_proj", 1)]
        for a, b, name, dim in pairs:
            getattr(a, name).weight.copy_(part(getattr(b, name).weight, dim))
            if dim == 0 and getattr(b, name).bias is not None:  # Qwen2's q, k, v biases
                getattr(a, name).bias.copy_(part(getattr(b, name).bias, 0))
        mine.input_layernorm.weight.copy_(whole.input_layernorm.weight)
        mine.post_attention_layernorm.weight.copy_(whole.post_attention_layernorm.weight)
