"""Options and helpers shared by the CLI commands."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import click

from gpuperf.errors import InputError
from gpuperf.units import parse_size

FORMATS = ("table", "json", "csv")


def output_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Adds --format table|json|csv (one decorator, every command that prints results)."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="table for people; json (one object on stdout) or csv for machines.",
    )(func)


class Finite(click.FloatRange):
    """A number in a range that is neither NaN nor infinite (click's FloatRange lets NaN past
    its bounds: every comparison with it is false)."""

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        out = super().convert(value, param, ctx)
        if not math.isfinite(out):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return out


class SizeType(click.ParamType):
    """A positive size: 4096, 4K, 1M, 1GiB."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            return parse_size(value, what=param.human_readable_name if param else "size")
        except InputError as exc:
            self.fail(str(exc), param, ctx)


SIZE = SizeType()
# A count (ranks, nodes, heads, lengths): positive, and below what would overflow the arithmetic
# of the op it sizes (the Scenario's own bound).
COUNT = click.IntRange(1, 2**31)
