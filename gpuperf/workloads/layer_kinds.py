"""Which layers of a model are alike: an MoE model's dense layers (DeepSeek's first three), a
model's sliding-window layers (Gemma's five of six, Mistral's all) and a hybrid's blocks
(Nemotron-H's Mamba-2, attention, MLP and MoE layers) run other kernels than the rest. The step
engine costs one layer of each kind and repeats it over each run of alike layers.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from gpuperf.workloads.config import ModelConfig


class LayerKind(NamedTuple):
    """What sets a layer's kernels apart: routed experts, a sliding attention window, and in a
    hybrid model (layer_pattern) the one block it holds: mamba, attn, mlp or moe ("" for
    attention and an MLP)."""

    moe: bool = False
    sliding: bool = False
    block: str = ""


BLOCK_NAMES = {"M": "mamba", "*": "attn", "-": "mlp", "E": "moe"}


@functools.lru_cache(maxsize=256)
def layer_kinds(cfg: ModelConfig) -> tuple[LayerKind, ...]:
    """The kind of every layer, first to last."""
    if cfg.layer_pattern:
        return tuple(LayerKind(c == "E", False, BLOCK_NAMES[c]) for c in cfg.layer_pattern)
    dense, sliding = set(cfg.dense_layers), set(cfg.sliding_layers)  # sliding: window > 0
    return tuple(LayerKind(cfg.is_moe and i not in dense, i in sliding) for i in range(cfg.layers))


@functools.lru_cache(maxsize=1024)
def kind_runs(cfg: ModelConfig, first: int, n: int) -> tuple[tuple[int, int, LayerKind], ...]:
    """The layers [first, first + n) as runs of alike layers: (first layer, count, kind)."""
    kinds = layer_kinds(cfg)[first : first + n]
    runs: list[tuple[int, int, LayerKind]] = []
    for i, kind in enumerate(kinds):
        if runs and runs[-1][2] == kind:
            start, count, _ = runs[-1]
            runs[-1] = (start, count + 1, kind)
        else:
            runs.append((first + i, 1, kind))
    return tuple(runs)
