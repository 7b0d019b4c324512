"""Reading and writing the files users point gpuperf at, with one-line errors (exit 2)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from gpuperf.errors import InputError


def write_text(path: str | os.PathLike[str], text: str, *, atomic: bool = False) -> Path:
    """Write `text` to `path` (creating its folder); with `atomic`, through a rename, so a reader
    never sees half a file. An unwritable path is the user's input: InputError."""
    out = Path(path)
    if out.is_dir():
        raise InputError(f"{out} is a directory; give a file name")
    try:
        if out.parent and not out.parent.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
        if atomic:
            tmp = out.with_name(out.name + ".tmp")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, out)
        else:
            out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {out}: {exc.strerror or exc}") from None
    return out


def read_json_object(path: str | os.PathLike[str], what: str = "file") -> dict[str, Any]:
    """A JSON file whose top level is an object; anything else is an InputError naming it."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{what} {p} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what} {p}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {p} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    if not isinstance(data, dict):
        raise InputError(f"{what} {p} must hold a JSON object, not {type(data).__name__}")
    return data


def json_safe(obj: Any) -> Any:
    """A copy fit for strict JSON: string keys, numpy scalars as Python numbers, NaN/inf as None."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and not isinstance(obj, str | bytes):
        obj = obj.item()  # numpy scalars (without importing numpy here)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
