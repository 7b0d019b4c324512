"""Errors that carry the CLI's exit code (see ARCHITECTURE: 2 bad input, 3 environment)."""


class GpuperfError(Exception):
    """Base class; the CLI prints the message on one line and exits with `exit_code`."""

    exit_code = 1


class InputError(GpuperfError, ValueError):
    """Bad input from the user: unknown names, malformed files, impossible sizes."""

    exit_code = 2


class EnvironmentUnavailable(GpuperfError, RuntimeError):
    """This machine cannot run it: no GPU, no torch, too few GPUs."""

    exit_code = 3
