"""Errors that carry the CLI's exit code (see ARCHITECTURE: 2 bad input, 3 environment)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable


class GpuperfError(Exception):
    """Base class; the CLI prints the message on one line and exits with `exit_code`."""

    exit_code = 1


class InputError(GpuperfError, ValueError):
    """Bad input from the user: unknown names, malformed files, impossible sizes."""

    exit_code = 2


class EnvironmentUnavailable(GpuperfError, RuntimeError):
    """This machine cannot run it: no GPU, no torch, too few GPUs."""

    exit_code = 3


class Interrupted(GpuperfError):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) during a run; what was done is kept."""

    exit_code = 130

    def __init__(self, message: str, signal_name: str = "SIGINT") -> None:
        super().__init__(message)
        self.exit_code = 143 if signal_name == "SIGTERM" else 130


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be so the same clean-up runs (gpuperf.cli.main)."""


def interrupted(exc: BaseException, what: str) -> Interrupted:
    """The Interrupted error for a KeyboardInterrupt (or Terminated) caught during `what`."""
    name = "SIGTERM" if isinstance(exc, Terminated) else "SIGINT"
    return Interrupted(f"{what}: stopped by {name}", name)


def shown(value: object, limit: int = 60) -> str:
    """repr(value) for an error message, at most about `limit` characters: a long value (a
    400-digit integer, a 300-character name) keeps its start and end, and says how long it was."""
    text = repr(value)
    if len(text) <= limit:
        return text
    keep = max(limit // 2 - 8, 4)
    return f"{text[:keep]}…{text[-keep:]} ({len(text)} characters)"


def unknown_argument(name: str, known: Iterable[str]) -> InputError:
    """The error for a keyword argument a function does not take, with the closest it does."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return InputError(f"unknown argument {name!r}{hint}")
