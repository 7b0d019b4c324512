"""Sweep parsing guards: bad factors, huge sweeps and empty lists are one-line InputErrors."""

import pytest

from gpuperf.errors import InputError
from gpuperf.units import MAX_POINTS, parse_sweep


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1K:1G:xabc", "not a number"),
        ("1K:1G:x1", "must be > 1"),
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
