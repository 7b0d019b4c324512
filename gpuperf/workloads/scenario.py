"""Scenario: how a model is run (mode, sizes, dtypes, implementation, parallelism)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpuperf.dtypes import DType
from gpuperf.errors import InputError

Mode = Literal["prefill", "decode", "generate", "train"]
Impl = Literal["fused", "eager"]
MODES: tuple[Mode, ...] = ("prefill", "decode", "generate", "train")


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One way of running a model.

    prefill: `batch` sequences of `seq` tokens. decode: one new token per sequence against a KV
    cache of `ctx` tokens. generate: prefill of `seq`, then `new_tokens` decode steps. train:
    forward and backward over `batch` × `seq` tokens plus an AdamW step.
    """

    mode: Mode = "prefill"
    batch: int = 1
    seq: int = 2048
    ctx: int = 2048
    new_tokens: int = 128
    dtype: DType = "bf16"
    kv_dtype: DType | None = None
    impl: Impl = "fused"
    cuda_graphs: bool = False
    # Parallelism (issue: parallel plans); 1 means none.
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InputError(f"unknown mode {self.mode!r}; expected one of: {', '.join(MODES)}")
        if self.impl not in ("fused", "eager"):
            raise InputError(f"unknown impl {self.impl!r}; expected fused or eager")
        for name in ("batch", "seq", "ctx", "new_tokens", "tp", "pp", "dp", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise InputError(f"{name} must be a positive integer, got {value!r}")

    @property
    def kv(self) -> DType:
        return self.kv_dtype or self.dtype

    @property
    def tokens(self) -> int:
        """Tokens processed by one forward pass of this scenario."""
        return self.batch if self.mode == "decode" else self.batch * self.seq
