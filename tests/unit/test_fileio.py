"""File helpers: one-line errors for unwritable paths and malformed JSON; strict-JSON cleaning."""

import json
import math

import numpy as np
import pytest

from gpuperf.errors import InputError
from gpuperf.fileio import json_safe, read_json_object, write_text


def test_write_text_atomic_and_errors(tmp_path):
    p = write_text(tmp_path / "a" / "b.json", "{}", atomic=True)
    assert p.read_text() == "{}" and not (tmp_path / "a" / "b.json.tmp").exists()
    with pytest.raises(InputError, match="is a directory"):
        write_text(tmp_path, "x")
    with pytest.raises(InputError, match="cannot write"):
        write_text("/proc/gpuperf-test/x.json", "x")


@pytest.mark.parametrize(
    ("text", "match"),
    [("[1, 2]", "must hold a JSON object"), ("{", "not valid JSON"), ("", "not valid JSON")],
)
def test_read_json_object_rejects(tmp_path, text, match):
    f = tmp_path / "r.json"
    f.write_text(text)
    with pytest.raises(InputError, match=match):
        read_json_object(f, "results file")
    with pytest.raises(InputError, match="does not exist"):
        read_json_object(tmp_path / "missing.json")


def test_json_safe():
    out = json_safe({1: [np.float32(2.5), math.nan, (np.int64(3), math.inf)], "s": "x"})
    assert out == {"1": [2.5, None, [3, None]], "s": "x"}
    json.dumps(out, allow_nan=False)
