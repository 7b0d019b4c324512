"""The predicted time of one op on one GPU, with the terms it came from."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

Bound = Literal["compute", "memory", "latency", "comm"]


@dataclass(frozen=True, slots=True)
class OpTime:
    """Seconds. `time` is the predicted GPU time of the op; the terms say why.

    t_math: FLOPs at the achievable compute rate (after tile/wave quantization);
    t_mem: bytes at the achievable bandwidth; t_overhead: the per-kernel floor;
    t_comm: inter-GPU transfer time (collectives). `bound` names the largest term.
    `detail` carries model internals worth showing (tile, waves, efficiencies).
    """

    time: float
    bound: Bound
    t_math: float = 0.0
    t_mem: float = 0.0
    t_overhead: float = 0.0
    t_comm: float = 0.0
    detail: Mapping[str, float | str] = field(default_factory=dict)
