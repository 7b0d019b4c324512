"""The scenario options shared by `gpuperf predict MODEL` and `gpuperf report MODEL`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from gpuperf.cli.common import SIZE
from gpuperf.cli.ops_grammar import dtype_option, scales_option, weight_dtype_option


def _dtype_or_none(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    from gpuperf.dtypes import parse_dtype

    return None if value is None else parse_dtype(value, what=f"--{param.name}".replace("_", "-"))


SCENARIO_OPTIONS: list[Callable[..., Any]] = [
    click.option(
        "--mode",
        type=click.Choice(["prefill", "decode", "generate", "train"]),
        default="prefill",
        show_default=True,
        help="prefill: batch×seq tokens; decode: 1 token/sequence at --ctx; generate: prefill + "
        "--new-tokens decode steps; train: fwd+bwd+AdamW.",
    ),
    click.option("--batch", type=SIZE, default="1", show_default=True, help="Sequences."),
    click.option(
        "--seq",
        type=SIZE,
        default=None,
        help="Prefill, generate, train: tokens per sequence.  [default: 2048]",
    ),
    click.option("--ctx", type=SIZE, default=None, help="Decode: KV context.  [default: 2048]"),
    click.option(
        "--new-tokens", type=SIZE, default=None, help="Generate: tokens generated.  [default: 128]"
    ),
    dtype_option(),
    click.option(
        "--kv-dtype", default=None, callback=_dtype_or_none, help="KV cache (default: --dtype)."
    ),
    click.option(
        "--impl",
        type=click.Choice(["fused", "eager", "compile"]),
        default="fused",
        show_default=True,
        help="fused kernels (flash attention, fused norms; Megatron, serving engines), eager "
        "PyTorch (one kernel per op), or compile: PyTorch training with each layer "
        "torch.compile'd (torchtitan; fused layer kernels, PyTorch's loss, AdamW, DDP/FSDP2).",
    ),
    click.option(
        "--cuda-graphs", is_flag=True, help="Replay the step as a CUDA graph (cheap launches)."
    ),
    click.option(
        "--attn",
        type=click.Choice(["flash", "math"]),
        default="flash",
        show_default=True,
        help="flash: one fused attention kernel; math: scores materialized, softmax, then P·V.",
    ),
    weight_dtype_option(),
    scales_option("--fp8-scales"),
    click.option(
        "--mla",
        type=click.Choice(["auto", "naive", "absorbed"]),
        default="auto",
        show_default=True,
        help="MLA models (DeepSeek): naive (expanded K/V, Hugging Face) or absorbed (FlashMLA); "
        "auto: what --impl runs.",
    ),
    click.option(
        "--kv-lengths",
        type=click.Choice(["new", "seen"]),
        default="new",
        show_default=True,
        help="Eager decode: new: each step's kv length is new to the process (cuDNN's SDPA plans "
        "it, as in a first generate); seen: a warmed-up process (no plans).",
    ),
]


def scenario_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --mode --batch --seq --ctx --new-tokens --dtype --kv-dtype --impl --cuda-graphs
    --attn --weight-dtype --fp8-scales --mla --kv-lengths."""
    for deco in reversed(SCENARIO_OPTIONS):
        func = deco(func)
    return func
