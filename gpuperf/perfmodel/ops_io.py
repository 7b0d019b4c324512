"""Op <-> dict, so that a measured op can be re-predicted later with the current model.

`op_to_dict(op)` gives {"type": "Gemm", <every dataclass field>}; `op_from_dict` rebuilds an equal
op (round-trip exact: `op_from_dict(op_to_dict(op)) == op`), and raises InputError on unknown
types or fields, so old result files fail loudly rather than silently dropping a field.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from gpuperf.errors import InputError
from gpuperf.perfmodel import ops
from gpuperf.perfmodel.ops import Op

OP_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        ops.Gemm,
        ops.Attention,
        ops.Elementwise,
        ops.Reduce,
        ops.Norm,
        ops.Embedding,
        ops.Copy,
        ops.Collective,
        ops.P2P,
    )
}


def op_to_dict(op: Op) -> dict[str, Any]:
    """{"type": class name, field: value, ...} with JSON-friendly values."""
    name = type(op).__name__
    if name not in OP_TYPES:
        raise InputError(f"not an op: {op!r}")
    out: dict[str, Any] = {"type": name}
    for f in dataclasses.fields(op):
        out[f.name] = getattr(op, f.name)
    return out


def op_from_dict(d: dict[str, Any]) -> Op:
    """The op that op_to_dict(op) described."""
    if not isinstance(d, dict) or "type" not in d:
        raise InputError(f"op record needs a 'type' key, got {d!r}")
    typename = d["type"]
    cls = OP_TYPES.get(typename)
    if cls is None:
        close = difflib.get_close_matches(str(typename), OP_TYPES, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise InputError(f"unknown op type {typename!r}{hint}")
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {k: v for k, v in d.items() if k != "type"}
    unknown = set(kwargs) - names
    if unknown:
        raise InputError(f"{typename} has no field(s) {', '.join(sorted(unknown))}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise InputError(f"bad {typename} record: {exc}") from None
