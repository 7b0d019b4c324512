"""The requests a serving simulation replays: lengths and arrival times.

Lengths: a fixed count ("512"), or drawn per request from "uniform:LO:HI", "normal:MEAN:STD"
(rounded, at least 1) or "lognormal:MEAN:STD" (of the lengths themselves, not their log).
Arrivals: all at once (`requests`), Poisson at `rate` requests/s, a closed loop of `concurrency`
users (each sends its next request when its last one ends: what benchmark tools call
concurrency), or a trace (JSONL, one object per line: arrival_s, input_tokens, output_tokens).
Everything random comes from one seeded generator: the same seed gives the same requests.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass

from gpuperf.errors import InputError, shown

MAX_LENGTH = 1 << 22  # tokens of one prompt or one answer
MAX_REQUESTS = 10_000_000


@dataclass(frozen=True, slots=True)
class Lengths:
    """A length distribution (module docstring)."""

    kind: str  # fixed | uniform | normal | lognormal
    a: float
    b: float = 0.0

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return rng.randint(int(self.a), int(self.b))
        if self.kind == "normal":
            x = rng.gauss(self.a, self.b)
        else:  # lognormal with this mean and standard deviation
            s2 = math.log(1 + (self.b / self.a) ** 2)
            x = rng.lognormvariate(math.log(self.a) - s2 / 2, math.sqrt(s2))
        return max(1, min(MAX_LENGTH, round(x)))

    @property
    def mean(self) -> float:
        return (self.a + self.b) / 2 if self.kind == "uniform" else self.a

    @property
    def most(self) -> int:
        """The longest length a draw can give."""
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return int(self.b)
        return MAX_LENGTH if self.b > 0 else max(1, min(MAX_LENGTH, round(self.a)))

    def label(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        return f"{self.kind}:{self.a:g}:{self.b:g}"


def parse_lengths(text: str | int, what: str) -> Lengths:
    """ "512", 512, "uniform:256:1024", "normal:512:64", "lognormal:512:256"."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise InputError(f"{what} must be a token count or a distribution, got {shown(text)}")
    parts = text.strip().split(":")
    try:
        nums = [float(p) for p in parts[1:]] if len(parts) > 1 else [float(parts[0])]
    except ValueError:
        nums = []
    kind = parts[0].lower() if len(parts) > 1 else "fixed"
    need = {"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2}
    if kind not in need or len(nums) != need[kind] or not all(math.isfinite(x) for x in nums):
        raise InputError(
            f"{what} {shown(text)}: give a token count (512) or uniform:LO:HI, normal:MEAN:STD, "
            "lognormal:MEAN:STD"
        )
    if kind in ("fixed", "uniform") and any(x != int(x) for x in nums):
        raise InputError(f"{what} {shown(text)}: token counts are whole numbers")
    if not all(1 <= x <= MAX_LENGTH for x in nums[:1]) or (
        kind == "uniform" and not nums[0] <= nums[1] <= MAX_LENGTH
    ):
        raise InputError(f"{what} {shown(text)}: lengths must be 1 .. {MAX_LENGTH} tokens "
                         "(uniform: LO <= HI)")  # fmt: skip
    if kind in ("normal", "lognormal") and not 0 <= nums[1] <= MAX_LENGTH:
        raise InputError(f"{what} {shown(text)}: the standard deviation must be >= 0")
    return Lengths(kind, *nums)


@dataclass(frozen=True, slots=True)
class Request:
    arrival: float  # s; for a closed loop, the user (0 .. concurrency-1) and no fixed time
    prompt: int
    output: int


@dataclass(frozen=True, slots=True)
class Workload:
    """The requests, in arrival order; closed: a closed loop of `concurrency` users (arrival
    times are then set by the simulation)."""

    requests: tuple[Request, ...]
    concurrency: int = 0
    label: str = ""

    @property
    def closed(self) -> bool:
        return self.concurrency > 0


def count_of(n: object, what: str, limit: int = MAX_REQUESTS) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 0 < n <= limit:
        raise InputError(f"{what} must be a whole number from 1 to {limit:,}, got {shown(n)}")
    return n


def make_workload(isl: Lengths, osl: Lengths, *, requests: int | None = None,
                  rate: float | None = None, concurrency: int | None = None,
                  trace: str | os.PathLike[str] | None = None,
                  seed: int = 0) -> Workload:  # fmt: skip
    """Requests as the options say: exactly one of a trace, a rate, a concurrency or all at
    once (`requests` counts them; with a rate or a concurrency it defaults to 1000 and to 8 per
    user)."""
    given = [k for k, v in (("--trace", trace), ("--rate", rate), ("--concurrency", concurrency))
             if v is not None]  # fmt: skip
    if len(given) > 1:
        raise InputError(f"{given[0]} and {given[1]} both set the arrivals; give one")
    if trace is not None:
        if not isinstance(trace, str | os.PathLike):
            raise InputError(f"--trace must be a file name, got {shown(trace)}")
        if requests is not None:
            raise InputError("--trace sets the requests; drop --requests")
        return read_trace(trace)
    rng = random.Random(seed)
    if concurrency is not None:
        users = count_of(concurrency, "--concurrency", 1 << 20)
        n = count_of(requests if requests is not None else 8 * users, "--requests")
        reqs = tuple(Request(float(i % users), isl.draw(rng), osl.draw(rng)) for i in range(n))
        return Workload(reqs, users, f"{n} requests, {users} concurrent users")
    n = count_of(requests if requests is not None else (1000 if rate is not None else 1),
               "--requests")  # fmt: skip
    if rate is None:
        reqs = tuple(Request(0.0, isl.draw(rng), osl.draw(rng)) for _ in range(n))
        return Workload(reqs, 0, f"{n} requests at once")
    if not isinstance(rate, int | float) or isinstance(rate, bool) or not 1e-6 <= rate <= 1e9:
        raise InputError(f"--rate must be from 1e-6 to 1e9 requests/s, got {shown(rate)}")
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(Request(t, isl.draw(rng), osl.draw(rng)))
    return Workload(tuple(out), 0, f"{n} requests, Poisson at {rate:g}/s")


def read_trace(path: str | os.PathLike[str]) -> Workload:
    """A JSONL trace: {"arrival_s": 0.12, "input_tokens": 512, "output_tokens": 128} per line
    (blank lines skipped); sorted by arrival."""
    from gpuperf.fileio import parse_json, read_text

    text = read_text(path, "trace")
    out = []
    # JSON Lines end lines at "\n" only: str.splitlines would also split a string value
    # holding U+2028, U+0085 or \x1c-\x1e, which JSON allows raw
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        obj = parse_json(line, f"trace {path} line {i}")
        if not isinstance(obj, dict):
            raise InputError(f"trace {path} line {i}: expected a JSON object")
        vals = []
        for key in ("arrival_s", "input_tokens", "output_tokens"):
            v = obj.get(key)
            if key == "arrival_s":
                ok = isinstance(v, int | float) and not isinstance(v, bool) and \
                    math.isfinite(v) and 0 <= v < 1e9  # fmt: skip
            else:
                ok = isinstance(v, int) and not isinstance(v, bool) and 0 < v <= MAX_LENGTH
            if not ok:
                raise InputError(f"trace {path} line {i}: {key} missing or out of range "
                                 f"(got {shown(v)})")  # fmt: skip
            vals.append(v)
        out.append(Request(float(vals[0]), vals[1], vals[2]))
    if not out:
        raise InputError(f"trace {path} has no requests")
    if len(out) > MAX_REQUESTS:
        raise InputError(f"trace {path} has more than {MAX_REQUESTS:,} requests")
    out.sort(key=lambda r: r.arrival)
    return Workload(tuple(out), 0, f"{len(out)} requests from {os.fspath(path)}")
