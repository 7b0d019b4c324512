"""Validate a model's op list: measure every distinct op of one layer (plus embedding, final norm
and lm_head) and join it with the prediction of the same ops.

Ops without a single PyTorch kernel that does the same work (fused rope, silu_and_mul, MoE
combine, collectives) are listed as skipped with the reason, never replaced by a proxy.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.measure.kernels import Measurement, WrongResult, measure_op
from gpuperf.measure.timing import Budget
from gpuperf.perfmodel.ops import Op

_OTHER_LAYER = re.compile(r"(?:^|/)L([1-9]\d*)(?=/|$)")


@dataclass
class Validation:
    """Distinct ops measured (with their measurements), and the ones skipped with a reason."""

    ops: list[Op] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    skipped: list[tuple[Op, str]] = field(default_factory=list)


def one_layer(ops: list[Op]) -> list[Op]:
    """Layer 0 and everything outside layers, each distinct shape once (first name kept)."""
    seen: set[tuple] = set()
    out: list[Op] = []
    for op in ops:
        if _OTHER_LAYER.search(op.name):
            continue
        key = (type(op), *(getattr(op, s) for s in op.__slots__[1:]))  # all but the name
        if key not in seen:
            seen.add(key)
            out.append(op)
    return out


def validate_ops(
    ops: list[Op],
    device: str,
    budget: Budget | None = None,
    backend: str | None = None,
    on_done: Callable[[Op, Measurement | None], None] | None = None,
) -> Validation:
    """Measure each op; ops that cannot be measured as one kernel are skipped with the reason.

    Out of memory and wrong results stop nothing here: they are skipped rows too, with the
    message, so one bad op does not hide the others.
    """
    v = Validation()
    for op in one_layer(ops):
        try:
            m = measure_op(op, device, budget, backend)
        except (InputError, EnvironmentUnavailable, WrongResult) as exc:
            v.skipped.append((op, str(exc)))
            if on_done:
                on_done(op, None)
            continue
        v.ops.append(op)
        v.measurements.append(m)
        if on_done:
            on_done(op, m)
    return v


def model_ops(model: str, scenario: Any) -> tuple[Any, list[Op]]:
    """(ModelConfig, op list) of MODEL run as `scenario` (a Scenario)."""
    from gpuperf.workloads.config import load_model
    from gpuperf.workloads.transformer import build_ops

    cfg = load_model(model)
    return cfg, build_ops(cfg, scenario)
