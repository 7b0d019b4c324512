"""Op <-> dict, so that a measured op can be re-predicted later with the current model.

`op_to_dict(op)` gives {"type": "Gemm", <every dataclass field>}; `op_from_dict` rebuilds an equal
op (round-trip exact: `op_from_dict(op_to_dict(op)) == op`), and raises InputError on unknown
types or fields, so old result files fail loudly rather than silently dropping a field.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

from gpuperf.dtypes import BITS, WEIGHT_ONLY
from gpuperf.errors import InputError, shown
from gpuperf.perfmodel import ops
from gpuperf.perfmodel.ops import Op
from gpuperf.units import MAX_VALUE

OP_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        ops.Gemm,
        ops.GroupedGemm,
        ops.Attention,
        ops.Elementwise,
        ops.Reduce,
        ops.Norm,
        ops.Embedding,
        ops.Copy,
        ops.Collective,
        ops.P2P,
        ops.Scan,
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
        raise InputError(f"op record needs a 'type' key, got {shown(d)}")
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
    for f in dataclasses.fields(cls):
        if f.name in kwargs:
            _check_field(typename, f.name, str(f.type), kwargs[f.name])
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise InputError(f"bad {typename} record: {exc}") from None


def _check_field(typename: str, name: str, annotation: str, value: Any) -> None:
    """A field of a record from a file, typed as the dataclass declares it (annotations are
    strings here): sizes are integers in [0, 2^62] (a bool is not one), flags are booleans,
    dtypes are known names, kinds are strings, floats are finite numbers. An 'abc' head count would
    otherwise reach the attention model and fail there."""
    if value is None and annotation.endswith("| None"):
        return
    if annotation == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_VALUE
        want = "an integer in [0, 2^62]"
    elif annotation == "bool":
        ok, want = isinstance(value, bool), "true or false"
    elif annotation == "float":
        ok = (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and (-MAX_VALUE <= value <= MAX_VALUE)
        )
        want = "a finite number"
    elif annotation.startswith("DType"):  # int4 is a weight format: Gemm.wdtype only
        ok = isinstance(value, str) and value in BITS
        ok = ok and (value not in WEIGHT_ONLY or name == "wdtype")
        want = f"a dtype ({', '.join(d for d in BITS if d not in WEIGHT_ONLY)})"
    else:  # str, CollectiveKind, Literal[...]: names; their values are checked downstream
        ok, want = isinstance(value, str), "a string"
    if not ok:
        raise InputError(f"bad {typename} record: {name} must be {want}, got {shown(value)}")
