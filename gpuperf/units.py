"""Parsing sizes and sweeps from the command line; formatting numbers for people.

Sizes: plain integers, or a suffix K, M, G, T (binary: 4K = 4096, as nccl-tests and GEMM sizes use),
KiB/MiB/GiB/TiB (binary) or KB/MB/GB/TB (decimal, 1e3). Sweeps: START:STOP:xFACTOR (geometric) or
START:STOP:+STEP (arithmetic), both ends included; a comma list (1K,4K,1M) also works.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from gpuperf.errors import InputError

_BINARY = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_DECIMAL = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}
MAX_VALUE = 2**62  # no size, count or length gpuperf models comes near this
MAX_POINTS = 10_000  # a sweep longer than this is a typo, not a benchmark
_SIZE_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


# The longest time a measured row may state: a day, in ms (beyond it, a unit mix-up or a typo;
# sums of such rows overflow a report's shares).
MAX_MEASURED_MS = 86_400_000.0
# The shortest: a nanosecond (no kernel is timed below a microsecond; 5e-324 ms is 0 s).
MIN_MEASURED_MS = 1e-6
MEASURED_MS_RULE = "measured_ms must be a number of milliseconds from a nanosecond (1e-6) to a day"


def is_measured_ms(v: object) -> bool:
    """A measured time in ms that a results row may hold: a number from a nanosecond to a day
    (None, a row not measured, is the caller's to allow). calibrate and report read rows alike."""
    return (not isinstance(v, bool) and isinstance(v, int | float)
            and MIN_MEASURED_MS <= v <= MAX_MEASURED_MS)  # fmt: skip


def parse_size(text: str | int, what: str = "size") -> int:
    """Parse '4096', '4K', '1GiB', '16MB' into a positive int; raise InputError otherwise."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.match(str(text))
        if not m:
            raise InputError(f"{what}: {text!r} is not a size (examples: 4096, 4K, 1M, 1GiB)")
        number, suffix = m.group(1), m.group(2).upper()
        if suffix in _DECIMAL:
            mult = _DECIMAL[suffix]
        else:
            suffix = suffix.removesuffix("IB").removesuffix("I")
            if suffix not in _BINARY:
                raise InputError(f"{what}: unknown unit in {text!r} (use K, M, G, T, KiB, MB, ...)")
            mult = _BINARY[suffix]
        if len(number) > 30:
            raise InputError(f"{what}: {text!r} is too large (at most {MAX_VALUE})")
        exact = Fraction(number) * mult  # exact: 9007199254740993 stays itself
        if exact.denominator != 1:
            raise InputError(f"{what}: {text!r} is not a whole number")
        value = int(exact)
    if isinstance(value, bool):
        raise InputError(f"{what} must be an integer, got {text!r}")
    if value <= 0:
        raise InputError(f"{what} must be positive, got {text!r}")
    if value > MAX_VALUE:
        raise InputError(f"{what}: {text!r} is too large (at most {MAX_VALUE})")
    return value


def parse_sweep(text: str | int, what: str = "size") -> list[int]:
    """Parse a single size, a comma list, or START:STOP:xF / START:STOP:+S into a list of sizes."""
    if isinstance(text, int):
        return [parse_size(text, what)]
    text = str(text).strip()
    if "," in text:
        out = [parse_size(part, what) for part in text.split(",") if part.strip()]
        if not out:
            raise InputError(f"{what}: {text!r} lists no size")
        return out
    if ":" not in text:
        return [parse_size(text, what)]
    parts = text.split(":")
    if len(parts) != 3:
        raise InputError(f"{what}: sweep {text!r} must be START:STOP:xFACTOR or START:STOP:+STEP")
    start, stop = parse_size(parts[0], what), parse_size(parts[1], what)
    step = parts[2].strip()
    if stop < start:
        raise InputError(f"{what}: sweep {text!r} ends before it starts")
    out: list[int] = []
    if step[:1] in ("x", "*"):
        try:
            factor = float(step[1:])
        except ValueError:
            raise InputError(f"{what}: sweep factor in {text!r} is not a number") from None
        if not 1 < factor < math.inf:
            raise InputError(f"{what}: sweep factor in {text!r} must be a finite number > 1")
        points = math.floor(math.log(stop / start) / math.log(factor) + 1e-9) + 1
        if points > MAX_POINTS:
            raise InputError(f"{what}: sweep {text!r} has {points} points; at most {MAX_POINTS}")
        v = float(start)
        while v <= stop * (1 + 1e-9):
            if not out or int(round(v)) != out[-1]:  # x1.1 from 1 would repeat 1
                out.append(int(round(v)))
            v *= factor
    elif step[:1] == "+":
        inc = parse_size(step[1:], what)
        if (stop - start) // inc + 1 > MAX_POINTS:
            raise InputError(f"{what}: sweep {text!r} has more than {MAX_POINTS} points")
        out = list(range(start, stop + 1, inc))
    else:
        raise InputError(f"{what}: sweep step {step!r} must start with x (factor) or + (step)")
    return out


def fmt_bytes(n: float) -> str:
    """Human capacity in binary units: '13.5 GiB'."""
    for unit, div in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= div:
            v = n / div
            return f"{v:.3g} {unit}" if abs(v) < 1000 else f"{v:.0f} {unit}"
    return f"{n:.0f} B"
