"""Sweep parsing guards: bad factors, huge sweeps and empty lists are one-line InputErrors."""

import pytest

from gpuperf.errors import InputError
from gpuperf.units import MAX_POINTS, parse_sweep


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1K:1G:xabc", "not a number"),
        ("1K:1G:x1", "finite number > 1"),
        ("1K:4K:xinf", "finite number > 1"),  # collapsed to one point before
        ("1K:4K:xnan", "finite number > 1"),
        ("1:99999999999999999999999:x2", "too large"),
        ("1:1G:+1", "more than"),
        ("1K:1G:x1.0000001", "points"),
        (",", "lists no size"),
        ("1K:1G", "START:STOP"),
        ("1G:1K:x2", "ends before"),
    ],
)
def test_bad_sweeps(text, match):
    with pytest.raises(InputError, match=match):
        parse_sweep(text, "bytes")


def test_good_sweeps():
    assert parse_sweep("1K:1M:x4", "bytes") == [1024, 4096, 16384, 65536, 262144, 1048576]
    assert parse_sweep("128:512:+128", "n") == [128, 256, 384, 512]
    assert parse_sweep("1K,4K", "n") == [1024, 4096]
    assert len(parse_sweep(f"1:{MAX_POINTS}:+1", "n")) == MAX_POINTS


def test_sizes_are_exact_integers_and_sweeps_do_not_repeat():
    from gpuperf.units import parse_size

    assert parse_size("9007199254740993", "seq") == 9007199254740993  # not through a float
    assert parse_size("1.5K") == 1536
    with pytest.raises(InputError, match="whole number"):
        parse_size("1.0001K")
    assert parse_sweep("1:2:x1.1", "m") == [1, 2]  # 1.1 rounds to 1: not a second row
    assert parse_sweep("1:10:x1.1", "m") == list(range(1, 11))
