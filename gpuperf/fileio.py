"""Reading and writing the files users point gpuperf at, with one-line errors (exit 2)."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

from gpuperf.errors import EnvironmentUnavailable, GpuperfError, InputError, shown


def _special(out: Path) -> bool:
    """Whether `out` exists and is not a regular file (/dev/null, a FIFO, a terminal): written
    into as it is, never replaced."""
    try:
        return not stat.S_ISREG(os.stat(out).st_mode)
    except OSError:
        return False


def check_writable(path: str | os.PathLike[str]) -> Path:
    """Fail now, before any work, if `path` cannot be written (a folder, a parent that is a file
    or read-only, a name the file system refuses): the output is checked before the work
    starts. Nothing is created here; a missing folder is made when the file is written. A
    symbolic link is followed: its target is what gets written."""
    out = Path(path)
    if "\0" in str(out):
        raise InputError(f"cannot write {shown(str(out))}: a file name has no NUL bytes")
    if os.path.isdir(out):  # False, not an error, for a name that cannot exist (NUL, too long)
        raise InputError(f"{out} is a directory; give a file name")
    try:
        link = out.is_symlink()
    except OSError:  # a name the file system refuses: the probe below says why
        link = False
    out = Path(os.path.realpath(out)) if link else out
    if _special(out):
        if not os.access(out, os.W_OK):
            raise InputError(f"cannot write {out}: permission denied")
        return out
    parent = out.parent if str(out.parent) else Path(".")
    existing = parent
    while not os.path.exists(existing) and existing != existing.parent:
        existing = existing.parent
    if not os.path.isdir(existing):
        raise InputError(f"cannot write {out}: {existing} is not a folder")
    if not os.access(existing, os.W_OK) or (os.path.exists(out) and not os.access(out, os.W_OK)):
        raise InputError(f"cannot write {out}: permission denied")
    try:  # the folder may pass os.access and still refuse files (/proc as root, a read-only mount)
        fd, probe = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=existing)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    os.close(fd)
    os.unlink(probe)
    return out


# A write that fails for want of room (a full disk or quota, a file past its size limit) is the
# machine's state, not the input: exit 3 (cannot run here), as stdout's write (gpuperf.cli).
NO_ROOM = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def cannot_write(out: Path, exc: OSError) -> GpuperfError:
    """The error for a failed write of `out`: EnvironmentUnavailable when there is no room,
    else InputError (the path the user gave cannot take a file)."""
    cls = EnvironmentUnavailable if exc.errno in NO_ROOM else InputError
    return cls(f"cannot write {out}: {exc.strerror or exc}")


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `path` (creating its folder) through a temporary file in the same folder
    and a rename: a reader never sees half a file, and a failed write leaves the old file as it
    was. A path that is not a regular file (/dev/null, a FIFO) is written into as it is, and a
    symbolic link's target is written. An unwritable path is the user's input: InputError.
    Every file gpuperf writes goes through here."""
    out = check_writable(path)
    if _special(out):
        try:
            with open(out, "w", encoding="utf-8", errors="replace") as f:
                f.write(text)
        except OSError as exc:
            raise cannot_write(out, exc) from None
        return out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent or ".")
    except OSError as exc:  # a folder that looks writable and is not (/proc, a full disk)
        raise cannot_write(out, exc) from None
    try:
        # errors="replace": a name from argv that was not UTF-8 (surrogate escapes) is written
        # as U+FFFD, so that every file gpuperf writes reads back as UTF-8
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if out.exists():
            os.chmod(tmp, out.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except OSError as exc:
        raise cannot_write(out, exc) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


MAX_INPUT_BYTES = 64 * 2**20  # a config, profile or results file larger than this is refused
MAX_JSON_DEPTH = 64  # deeper nesting than any file gpuperf reads or writes


def read_text(path: str | os.PathLike[str], what: str = "file",
              limit: int | None = None) -> str:  # fmt: skip
    """The UTF-8 text of a file a user pointed at, read at most `limit` bytes deep (so /dev/zero
    or a FIFO that never ends is refused, not read until memory runs out)."""
    p = Path(path)
    limit = MAX_INPUT_BYTES if limit is None else limit
    try:
        fifo = stat.S_ISFIFO(os.stat(p).st_mode)
    except (OSError, ValueError):  # open() below says why
        fifo = False
    try:
        # a pipe (<(...)) opened without waiting for a writer: with none, it reads as empty
        opener = _open_pipe if fifo else None
        with open(p, "rb", opener=opener) as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise InputError(f"{what} {p} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{what} {p} is a directory; give a file") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {shown(str(p))}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the name
        name = shown(str(p))
        raise InputError(f"cannot read {what} {name}: a file name has no NUL bytes") from None
    if len(data) > limit:
        raise InputError(f"{what} {p} is larger than {limit / 2**20:.0f} MiB; not read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {p} is not UTF-8 text (byte {exc.start})") from None


def _open_pipe(path: str, flags: int) -> int:
    fd = os.open(path, flags | os.O_NONBLOCK)
    os.set_blocking(fd, True)
    return fd


def parse_json(text: str, what: str) -> Any:
    """JSON text, nested at most MAX_JSON_DEPTH deep, or an InputError naming `what`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} is not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except RecursionError:
        raise InputError(f"{what} is nested too deeply (over {MAX_JSON_DEPTH} levels)") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise InputError(f"{what} is not valid JSON ({exc})") from None
    level = [data]
    for _ in range(MAX_JSON_DEPTH):
        level = [v for x in level if isinstance(x, dict | list)
                 for v in (x.values() if isinstance(x, dict) else x)]  # fmt: skip
        if not level:
            return data
    raise InputError(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")


def read_json(path: str | os.PathLike[str], what: str = "file") -> Any:
    """A JSON file a user pointed at: bounded read, UTF-8, bounded nesting (InputError)."""
    return parse_json(read_text(path, what), f"{what} {path}")


def read_json_object(path: str | os.PathLike[str], what: str = "file") -> dict[str, Any]:
    """A JSON file whose top level is an object; anything else is an InputError naming it."""
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise InputError(f"{what} {path} must hold a JSON object, not {type(data).__name__}")
    return data


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL, C1 (ESC, CSI, BEL, ...)
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def printable(text: str, newlines: bool = False) -> str:
    """`text` from a file without control characters (an ESC from a config's name or a profile's
    display_name would otherwise reach the terminal as an escape sequence); `newlines` keeps
    the newline (text the console lays out)."""
    return (_CONTROL_BUT_NEWLINE if newlines else _CONTROL).sub("", text)


def json_safe(obj: Any) -> Any:
    """A copy fit for strict JSON: string keys, numpy scalars as Python numbers, NaN/inf as None."""
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and not isinstance(obj, str | bytes):
        obj = obj.item()  # numpy scalars (without importing numpy here)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
