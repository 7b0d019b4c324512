"""How a model is cut over GPUs: layers per pipeline stage, parameters per GPU.

Pipeline stages (Megatron-LM's uneven split): `pp` stages get L // pp layers each and the first
L % pp stages one more; with the interleaved schedule each stage holds `v` chunks of those. The
first stage holds the embedding, the last the final norm and lm_head (and, tied, a copy of the
embedding, as Megatron keeps one there). Tensor parallelism splits every GEMM weight and the
vocabulary tp ways (norms are replicated); expert parallelism gives each GPU E / ep experts,
each split etp ways (tp; 1 under MoE parallel folding).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.layer_kinds import LayerKind, layer_kinds


def stage_layers(layers: int, pp: int) -> list[int]:
    """Layers of each pipeline stage, first stage first."""
    base, extra = divmod(layers, pp)
    return [base + (1 if s < extra else 0) for s in range(pp)]


@dataclass(frozen=True, slots=True)
class Stage:
    """A pipeline stage: its layers [first, first + layers), whether it holds the ends, and how
    many stages of the plan are like it (same layer count and ends: the same work and memory)."""

    index: int
    first: int
    layers: int
    has_embed: bool
    has_head: bool
    count: int = 1


@functools.lru_cache(maxsize=512)
def stages(kinds_of_layers: tuple[LayerKind, ...], pp: int) -> tuple[Stage, ...]:
    """The distinct stages of a pipeline of `pp` stages over layers of these kinds (layer_kinds),
    each the first of its kind (the one with the most micro-batches in flight), with its count:
    stages are alike when their layers and ends are."""
    kinds: dict[tuple[tuple[LayerKind, ...], bool, bool], list] = {}
    first = 0
    for s, n in enumerate(stage_layers(len(kinds_of_layers), pp)):
        key = (kinds_of_layers[first : first + n], s == 0, s == pp - 1)
        if key in kinds:
            kinds[key][1] += 1
        else:
            kinds[key] = [Stage(s, first, n, s == 0, s == pp - 1), 1]
        first += n
    return tuple(replace(st, count=c) for st, c in kinds.values())


@dataclass(frozen=True, slots=True)
class Params:
    """Parameters one GPU holds before ZeRO sharding: dense (replicated over dp) and expert
    (replicated over the expert-data-parallel group), and one layer's dense and expert share
    (the mean over the stage's layers), and of the dense ones those outside the layers (the
    embedding, the final norm, the lm_head)."""

    dense: float
    expert: float
    layer_dense: float
    layer_expert: float
    ends: float = 0.0

    @property
    def total(self) -> float:
        return self.dense + self.expert


def gpu_params(cfg: ModelConfig, stage: Stage, tp: int, ep: int, pp: int,
               etp: int | None = None, whole_embedding: bool = False) -> Params:  # fmt: skip
    """Parameters on one GPU of `stage` of `pp` under tp and ep; each expert split etp ways
    (None: tp; 1: whole experts, MoE parallel folding). whole_embedding: the input embedding
    replicated on every tensor-parallel rank (Hugging Face's tp_plan leaves it out)."""
    etp = etp or tp  # None or 0: as tp
    b = cfg.param_breakdown()
    L = cfg.layers
    final_norm = cfg.hidden * (2 if cfg.norm == "layernorm" else 1)
    norms = (b["norms"] - final_norm) / L
    n = stage.layers
    if cfg.layer_pattern:  # a hybrid: each layer one block after one norm
        per = _block_params(cfg, b, tp, ep, etp)
        layer_kinds_here = layer_kinds(cfg)[stage.first : stage.first + n]
        layer_dense = sum(per[k.block][0] for k in layer_kinds_here) / n + norms
        layer_expert = sum(per[k.block][1] for k in layer_kinds_here) / n
    elif cfg.is_moe:  # routed layers (experts, router, shared expert) and dense ones apart
        m = cfg.moe_layers
        moe = sum(k.moe for k in layer_kinds(cfg)[stage.first : stage.first + n])
        moe_layer = (b["attn"] / L + b["shared_expert"] / m) / tp + norms + b["router"] / m
        dense_layer = (b["attn"] / L + b["dense_mlp"] / max(1, L - m)) / tp + norms
        layer_dense = (moe * moe_layer + (n - moe) * dense_layer) / n
        layer_expert = moe * b["mlp"] / m / ep / etp / n
    else:
        layer_dense, layer_expert = (b["attn"] + b["mlp"]) / L / tp + norms, 0.0
    ends = 0.0
    if stage.has_embed:
        ends += (b["embed"] + b["pos_embed"]) / (1 if whole_embedding else tp)
    if stage.has_head:
        head = b["lm_head"] if b["lm_head"] else (b["embed"] if pp > 1 else 0)
        ends += head / tp + final_norm
    return Params(n * layer_dense + ends, n * layer_expert, layer_dense, layer_expert, ends)


def _block_params(cfg: ModelConfig, b: dict[str, int], tp: int, ep: int,
                  etp: int) -> dict[str, tuple[float, float]]:  # fmt: skip
    """(dense, expert) parameters one GPU holds of one block of each kind of a hybrid model: the
    Mamba-2 mixer, attention and MLP split over tp; an MoE block's router replicated, its shared
    expert and latent projections split over tp, its experts over ep (each over etp)."""

    def each(key: str, block: str) -> float:
        return b[key] / max(1, cfg.blocks(block))

    dense_key = "dense_mlp" if cfg.is_moe else "mlp"
    moe_dense = (each("shared_expert", "E") + each("moe_latent", "E")) / tp + each("router", "E")
    return {"mamba": (each("mamba", "M") / tp, 0.0), "attn": (each("attn", "*") / tp, 0.0),
            "mlp": (each(dense_key, "-") / tp, 0.0),
            "moe": (moe_dense, each("mlp", "E") / ep / etp if cfg.is_moe else 0.0)}  # fmt: skip


@functools.lru_cache(maxsize=1024)
def stage_params(cfg: ModelConfig, pp: int, tp: int, ep: int, etp: int | None = None,
                 tp_impl: str = "megatron") -> tuple[tuple[Stage, Params], ...]:  # fmt: skip
    """Each distinct stage of a `pp`-stage pipeline with the parameters one of its GPUs holds
    (what the step's work and its memory both read); DTensor's tensor parallelism (Hugging
    Face's tp_plan) keeps the input embedding whole on every rank."""
    whole = tp_impl == "dtensor" and tp > 1
    return tuple((st, gpu_params(cfg, st, tp, ep, pp, etp, whole))
                 for st in stages(layer_kinds(cfg), pp))  # fmt: skip
