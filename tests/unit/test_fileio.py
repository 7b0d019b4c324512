"""File helpers: one-line errors for unwritable paths and malformed JSON; strict-JSON cleaning."""

import json
import math

import numpy as np
import pytest

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.fileio import check_writable, json_safe, read_json_object, write_text


def test_write_text_creates_the_folder_and_refuses_what_it_cannot_write(tmp_path):
    p = write_text(tmp_path / "a" / "b.json", "{}")
    assert p.read_text() == "{}" and sorted(x.name for x in p.parent.iterdir()) == ["b.json"]
    with pytest.raises(InputError, match="is a directory"):
        write_text(tmp_path, "x")
    with pytest.raises(InputError, match="cannot write"):
        write_text("/proc/gpuperf-test/x.json", "x")
    with pytest.raises(InputError, match="cannot write"):  # /proc passes os.access for root
        write_text("/proc/x.json", "x")


@pytest.mark.parametrize("step", ["fsync", "chmod", "replace"])
def test_a_write_that_fails_midway_leaves_the_old_file_whole(tmp_path, monkeypatch, step):
    """The disk fills (or the rename is refused) after the new text went to the temporary: the
    old file keeps its text and mode, the error is one EnvironmentUnavailable (exit 3: the
    machine has no room, the input is fine), the temporary is gone."""
    import os

    out = tmp_path / "profile.toml"
    out.write_text("old = 1\n")
    out.chmod(0o640)
    written = []
    real_fsync = os.fsync

    def fsync(fd):  # the new text reached the temporary before the failure
        written.append(os.pread(fd, 100, 0))
        real_fsync(fd)

    def disk_full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, step, disk_full)
    with pytest.raises(EnvironmentUnavailable, match="No space left"):  # exit 3: no room
        write_text(out, "new = 2\n" * 1000)
    assert written == ([] if step == "fsync" else [b"new = 2\n" * 12 + b"new "])
    assert out.read_text() == "old = 1\n" and (out.stat().st_mode & 0o777) == 0o640
    assert [x.name for x in tmp_path.iterdir()] == ["profile.toml"]  # no temporary left
    monkeypatch.undo()
    write_text(out, "new = 2\n")
    assert out.read_text() == "new = 2\n" and (out.stat().st_mode & 0o777) == 0o640


def test_check_writable_fails_before_the_work(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os_access_writable(ro):  # running as root: permissions do not bind
            pytest.skip("permissions are not enforced for this user")
        with pytest.raises(InputError, match="permission denied"):
            check_writable(ro / "x.html")
    finally:
        ro.chmod(0o700)
    assert check_writable(tmp_path / "new" / "x.html") == tmp_path / "new" / "x.html"


def os_access_writable(path):
    import os

    return os.access(path, os.W_OK)


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


def test_reads_are_bounded_utf8_and_shallow(tmp_path, monkeypatch):
    import gpuperf.fileio as fileio
    from gpuperf.fileio import MAX_JSON_DEPTH, read_json, read_text

    with pytest.raises(InputError, match="larger than"):
        read_text("/dev/zero", "config")  # a device that never ends is not read to the end
    monkeypatch.setattr(fileio, "MAX_INPUT_BYTES", 1000)
    big = tmp_path / "big.json"
    big.write_text(" " * 999 + "1")
    assert read_json(big) == 1  # exactly the limit is read
    big.write_text(" " * 1000 + "1")
    with pytest.raises(InputError, match="larger than"):
        read_json(big)
    monkeypatch.undo()
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"name": "caf\xe9"}')
    with pytest.raises(InputError, match="not UTF-8 text"):
        read_json(latin)
    ok = tmp_path / "ok.json"
    ok.write_text("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    assert read_json(ok) is not None
    for depth in (MAX_JSON_DEPTH + 1, 100_000):  # the second overflows json's own recursion
        ok.write_text("[" * depth + "]" * depth)
        with pytest.raises(InputError, match="nested too deeply"):
            read_json(ok, "results file")
    ok.write_text('{"a": ' * 70 + "1" + "}" * 70)
    with pytest.raises(InputError, match="nested too deeply"):
        read_json_object(ok)
    with pytest.raises(InputError, match="is a directory"):
        read_text(tmp_path)
