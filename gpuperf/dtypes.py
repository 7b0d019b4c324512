"""Data types the models know, and their sizes."""

from __future__ import annotations

from typing import Literal, get_args

from gpuperf.errors import InputError, shown

DType = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4"]
DTYPES: tuple[DType, ...] = get_args(DType)

# Bytes per element as stored in memory (tf32 is stored as fp32). int4 is a weight format only
# (two per byte; group scales are counted by the op that reads them).
BYTES: dict[DType, int] = {
    "fp64": 8,
    "fp32": 4,
    "tf32": 4,
    "bf16": 2,
    "fp16": 2,
    "fp8": 1,
    "int8": 1,
}
BITS: dict[DType, int] = {**{k: 8 * v for k, v in BYTES.items()}, "int4": 4}
WEIGHT_ONLY: tuple[DType, ...] = ("int4",)  # formats that only weights are stored in

_ALIASES = {
    "float32": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "double": "fp64",
    "e4m3": "fp8",
    "float8": "fp8",
}


def parse_dtype(text: str, *, weights: bool = False, what: str = "dtype") -> DType:
    """Return the DType named by `text` (case-insensitive, common aliases), or raise InputError.
    Weight-only formats (int4) are refused unless `weights` (a weight_dtype)."""
    if not isinstance(text, str):
        raise InputError(f"dtype must be a name such as bf16, got {shown(text)}")
    key = text.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in BITS:
        raise InputError(f"unknown dtype {text!r}; expected one of: {', '.join(DTYPES)}")
    if not weights:
        refuse_weight_only(key, what)
    return key  # type: ignore[return-value]


def refuse_weight_only(dtype: str, what: str = "dtype") -> None:
    """InputError when `dtype` is a format that only weights are stored in (no kernel takes
    int4 activations)."""
    if dtype in WEIGHT_ONLY:
        raise InputError(
            f"{what} {dtype} is a weight format: kernels take bf16 or fp16 activations, with "
            f"weight_dtype={dtype} (--weight-dtype of predict MODEL, predict gemm and serve; "
            f"api.predict_op's wdtype={dtype})"
        )
