"""The single-op grammar shared by `gpuperf predict` and `gpuperf measure`.

`predict llama2-7b ...` runs the group's default subcommand (`model`); `predict gemm 4096` runs an
op subcommand. Each op subcommand expands sweeps into a list of Ops and hands them to `run`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import click

from gpuperf.cli.common import COUNT
from gpuperf.dtypes import DTYPES, parse_dtype
from gpuperf.errors import InputError
from gpuperf.perfmodel.ops import Op
from gpuperf.units import MAX_POINTS, parse_sweep
from gpuperf.workloads import single_op

_SIZES = click.argument("sizes", nargs=-1, required=True)
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
RunOps = Callable[..., None]


class ModelOrOpGroup(click.Group):
    """A group whose first argument is either a subcommand (an op) or a model for `default_cmd`."""

    default_cmd = "model"

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = [self.default_cmd, *args]
        return super().resolve_command(ctx, args)


def sweep(what: str) -> Callable[[click.Context, click.Parameter, Any], list[int] | None]:
    """A click callback turning '4K', '1K:1G:x4' or '1K,2K' into a list of ints."""

    def convert(ctx: click.Context, param: click.Parameter, value: Any) -> list[int] | None:
        if value is None:
            return None
        from gpuperf.errors import InputError

        try:
            return parse_sweep(value, what)
        except InputError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None

    return convert


def dtype_option(default: str = "bf16") -> Decorator:
    return click.option(
        "--dtype",
        default=default,
        show_default=True,
        callback=lambda ctx, p, v: parse_dtype(v),
        help=f"Element type: {', '.join(DTYPES)}.",
    )


def _weight_dtype(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--weight-dtype read as the API reads weight_dtype (case and spaces ignored), int4 or int8."""
    if value is None:
        return None
    key = parse_dtype(value, weights=True, what="weight_dtype")
    if key not in WEIGHT_ONLY_CHOICES:
        raise click.BadParameter(f"{value!r} is not one of 'int4', 'int8'.", ctx=ctx, param=param)
    return key


WEIGHT_ONLY_CHOICES = ("int4", "int8")


def weight_dtype_option() -> Decorator:
    return click.option(
        "--weight-dtype",
        metavar="[int4|int8]",
        callback=_weight_dtype,
        default=None,
        help="Weight-only quantization: int4 (group 128) or int8 weights, --dtype activations "
        "(e.g. --weight-dtype int4).",
    )


def scales_option(flag: str) -> Decorator:
    """How --dtype fp8 GEMMs are scaled; `flag`: --scales (gemm op) or --fp8-scales (models)."""
    return click.option(
        flag,
        type=click.Choice(["tensor", "row"]),
        default="tensor",
        show_default=True,
        help="With --dtype fp8: one scale per tensor, or per token and weight row (rowwise).",
    )


def _apply(func: Callable[..., Any], decorators: Sequence[Decorator]) -> Callable[..., Any]:
    for deco in reversed(decorators):
        func = deco(func)
    return func


def grid(*dims: Sequence[int]) -> itertools.product:
    """Every combination of the sweeps; InputError when there are more than MAX_POINTS (the
    cap is on the product, not on each sweep: 10,000 × 10,000 is 10^8 ops)."""
    n = 1
    for d in dims:
        n *= len(d)
    if n > MAX_POINTS:
        sizes = " × ".join(str(len(d)) for d in dims)
        raise InputError(f"the sweeps make {sizes} = {n:,} points; at most {MAX_POINTS:,}")
    return itertools.product(*dims)


def op_commands(run: RunOps, common: Sequence[Decorator], verb: str) -> list[click.Command]:
    """gemm, attention, elementwise, norm and copy subcommands; each calls run(ops, **common_kw)."""
    cmds: list[click.Command] = []

    def gemm_cmd(sizes: tuple[str, ...], dtype: str, weight_dtype: str | None, scales: str,
                 **kw: Any) -> None:  # fmt: skip
        if len(sizes) not in (1, 3):
            raise click.UsageError("gemm takes M (square) or M N K")
        dims = [parse_sweep(s, name) for s, name in zip(sizes, "MNK", strict=False)]
        # --scales tensor is the default, meaningless but harmless beside another dtype; an
        # asked-for --scales row goes through, and single_op.gemm refuses it without fp8
        fmt = {
            "wdtype": weight_dtype,
            "scales": scales if dtype == "fp8" or scales != "tensor" else "",
        }
        if len(dims) == 1:
            ops: list[Op] = [single_op.gemm(m, dtype=dtype, **fmt) for m in dims[0]]
        else:
            ops = [single_op.gemm(m, n, k, dtype, **fmt) for m, n, k in grid(*dims)]
        run(ops, **kw)

    cmds.append(
        click.command(
            "gemm",
            help=f"Matrix product [M,K]x[K,N]. Sizes take 4K, 1M, sweeps like 256:16384:x2.\n\n"
            f"Example: gpuperf {verb} gemm 8192 4096 11008 --dtype fp8 --scales row\n\n"
            f"Weight-only: gpuperf {verb} gemm 1:16:x2 8192 8192 --weight-dtype int4",
        )(
            _apply(
                gemm_cmd,
                [
                    click.argument("sizes", nargs=-1, required=True),
                    dtype_option(),
                    weight_dtype_option(),
                    scales_option("--scales"),
                    *common,
                ],
            )
        )
    )

    def attention_cmd(
        batch: int,
        heads: int,
        kv_heads: int | None,
        seq: list[int],
        kv_len: int | None,
        head_dim: int,
        causal: bool,
        dtype: str,
        **kw: Any,
    ) -> None:
        ops = [
            single_op.attention(
                batch=batch,
                heads=heads,
                kv_heads=kv_heads,
                seq=s,
                kv_len=kv_len,
                head_dim=head_dim,
                causal=causal,
                dtype=dtype,
            )
            for s in seq
        ]
        run(ops, **kw)

    pos = COUNT
    cmds.append(
        click.command(
            "attention",
            help="Fused (flash) attention. --seq queries against --kv-len keys (default: --seq);\n"
            "--seq 1 --kv-len 4096 is a decode step.\n\n"
            f"Example: gpuperf {verb} attention --batch 1 --heads 32 --seq 4096 --causal",
        )(
            _apply(
                attention_cmd,
                [
                    click.option("--batch", type=pos, default=1, show_default=True),
                    click.option("--heads", type=pos, default=32, show_default=True),
                    click.option("--kv-heads", type=pos, default=None, help="Default: --heads."),
                    click.option(
                        "--seq", required=True, callback=sweep("seq"), help="Query length."
                    ),
                    click.option("--kv-len", type=pos, default=None, help="Key length (decode)."),
                    click.option("--head-dim", type=pos, default=128, show_default=True),
                    click.option("--causal/--no-causal", default=False, show_default=True),
                    dtype_option(),
                    *common,
                ],
            )
        )
    )

    def elementwise_cmd(fn: str, numel: list[int], dtype: str, **kw: Any) -> None:
        run([single_op.elementwise(fn, n, dtype) for n in numel], **kw)

    cmds.append(
        click.command(
            "elementwise",
            help=f"A pointwise kernel over --numel elements.\n\n"
            f"Example: gpuperf {verb} elementwise gelu --numel 256M",
        )(
            _apply(
                elementwise_cmd,
                [
                    click.argument("fn", type=click.Choice(list(single_op.ELEMENTWISE_FNS))),
                    click.option("--numel", required=True, callback=sweep("numel")),
                    dtype_option(),
                    *common,
                ],
            )
        )
    )

    def norm_cmd(fn: str, rows: list[int], cols: list[int], dtype: str, **kw: Any) -> None:
        ops = [single_op.norm(fn, r, c, dtype) for r, c in grid(rows, cols)]
        run(ops, **kw)

    cmds.append(
        click.command(
            "norm",
            help=f"A row-wise rmsnorm, layernorm or softmax over [rows, cols].\n\n"
            f"Example: gpuperf {verb} norm rmsnorm --rows 8192 --cols 4096",
        )(
            _apply(
                norm_cmd,
                [
                    click.argument("fn", type=click.Choice(list(single_op.NORM_FNS))),
                    click.option("--rows", required=True, callback=sweep("rows")),
                    click.option("--cols", required=True, callback=sweep("cols")),
                    dtype_option(),
                    *common,
                ],
            )
        )
    )

    def copy_cmd(nbytes: list[int], **kw: Any) -> None:
        run([single_op.copy(n) for n in nbytes], **kw)

    cmds.append(
        click.command(
            "copy",
            help=f"A device-to-device copy of --bytes bytes (read + write).\n\n"
            f"Example: gpuperf {verb} copy --bytes 1G",
        )(
            _apply(
                copy_cmd,
                [
                    click.option("--bytes", "nbytes", required=True, callback=sweep("bytes")),
                    *common,
                ],
            )
        )
    )
    return cmds
