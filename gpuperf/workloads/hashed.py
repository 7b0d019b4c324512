"""The hash of a frozen dataclass, computed once per object.

A dataclass's generated __hash__ hashes every field on every call, and the step engine's caches
hash a model's config and a pass's Dims a few times per plan: tens of thousands of times in a
plan search. `field_hash` gives the same value (the hash of the tuple of compared fields) and
keeps it by the object's identity.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

_HASHES: dict[int, tuple[Any, int]] = {}  # id(obj) -> (obj, its hash); obj kept: ids not reused
_NAMES: dict[type, tuple[str, ...]] = {}
_LIMIT = 65536


def field_hash(obj: Any) -> int:  # noqa: ANN401 (any frozen dataclass)
    """hash((f1, f2, ...)) over `obj`'s compared fields, as dataclass's own __hash__ computes."""
    hit = _HASHES.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    cls = type(obj)
    names = _NAMES.get(cls)
    if names is None:
        names = _NAMES[cls] = tuple(f.name for f in fields(cls) if f.compare)
    h = hash(tuple(getattr(obj, name) for name in names))
    if len(_HASHES) >= _LIMIT:
        _HASHES.clear()
    _HASHES[id(obj)] = (obj, h)
    return h
