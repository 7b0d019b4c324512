"""The command line: a thin layer that parses, calls gpuperf.api, and renders.

Subcommands are imported only when invoked, so `gpuperf predict` never pays for torch or plotly.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any, NoReturn

import click

from gpuperf import __version__
from gpuperf.errors import GpuperfError, Terminated
from gpuperf.fileio import NO_ROOM

# command name -> "module:attribute" (a click.Command), imported on first use.
COMMANDS: dict[str, str] = {
    "predict": "gpuperf.cli.predict_cmd:predict",
    "measure": "gpuperf.cli.measure_cmd:measure",
    "validate": "gpuperf.cli.validate_cmd:validate",
    "calibrate": "gpuperf.cli.calibrate_cmd:calibrate",
    "report": "gpuperf.cli.report_cmd:report",
    "search": "gpuperf.cli.search_cmd:search",
    "hw": "gpuperf.cli.hw_cmd:hw",
    "serve": "gpuperf.cli.serve_cmd:serve",
    "models": "gpuperf.cli.models_cmd:models",
}


class StdoutClosed(Exception):
    """The reader of stdout went away (`gpuperf hw list | head -1`): not an error."""


@contextlib.contextmanager
def _reader_may_leave() -> Iterator[None]:
    """A closed stdout as StdoutClosed: click turns a broken pipe into a silent exit 1 itself
    (in its main, around parsing and the command), so it is caught before click sees it."""
    try:
        yield
    except BrokenPipeError as exc:
        if not _stdout_closed():
            raise  # another pipe (a subprocess's): a bug, not the reader of stdout leaving
        raise StdoutClosed() from exc


class LazyGroup(click.Group):
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _reader_may_leave():  # `gpuperf --help | head -1`: the help prints while parsing
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with _reader_may_leave():
            return super().invoke(ctx)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        return getattr(importlib.import_module(module_name), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="gpuperf")
def cli() -> None:
    """Predict, explain and measure how fast Transformer workloads run on GPUs.

    \b
    Examples:
      gpuperf predict llama2-7b --gpu h100 --seq 2048
      gpuperf measure gemm 4096
      gpuperf report llama2-7b --gpu h100 -o report.html
    """


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> None:
    """Entry point: turns library errors into one-line messages and exit codes (0/1/2/3; 130 on
    Ctrl-C, 143 on SIGTERM, which runs the same clean-up as Ctrl-C). A reader of stdout that
    leaves early (`| head`) ends the program quietly with exit 0."""
    if sys.stdout is None:  # started with its stdout closed (`>&-`): Python gives it none
        _cannot_write("standard output is closed")
    old = None
    if threading.current_thread() is threading.main_thread():
        old = signal.signal(signal.SIGTERM, _on_sigterm)
    _replace_unencodable()
    try:
        _main(argv)
    except StdoutClosed:
        _drop_stdout()
        sys.exit(0)
    except OSError as exc:
        if exc.errno not in NO_ROOM:
            raise
        _cannot_write(exc.strerror or str(exc))
    except SystemExit:
        # Output still buffered goes now, while a closed pipe can be told apart; at the
        # interpreter's exit it would print "Exception ignored ... BrokenPipeError".
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _drop_stdout()
        except OSError as exc:
            if exc.errno not in NO_ROOM:
                raise
            _cannot_write(exc.strerror or str(exc))
        raise
    finally:
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _cannot_write(reason: str) -> NoReturn:
    """Writing the output failed for want of room (NO_ROOM: stdout on a full disk, /dev/full)
    or of a stdout at all: the machine's state, not the input or a bug, so one line and exit 3
    (cannot run here), as for -o files (fileio.cannot_write)."""
    _drop_stdout()  # what is left in stdout's buffer would fail again at exit
    click.echo(f"gpuperf: error: cannot write the output: {reason}", err=True)
    sys.exit(3)


def _replace_unencodable() -> None:
    """A terminal or pipe whose encoding lacks a character gpuperf prints (·, µ, ×, ┃ under
    PYTHONIOENCODING=ascii) gets '?' for it, not a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):  # not a text stream (captured, detached): as is
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="replace")  # type: ignore[union-attr]


def _stdout_closed() -> bool:
    """Whether stdout is a pipe nobody reads any more (poll reports an error on its end)."""
    try:
        import select

        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll, or no descriptor: trust the error
        return True


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that what is left in its buffer goes nowhere quietly (the
    recipe in Python's documentation of SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):  # no descriptor (a captured stdout)
        pass


def _one_line(message: str) -> str:
    """An error on one line (click lists a Choice's values one per line)."""
    return " ".join(message.split())


def _main(argv: list[str] | None) -> None:
    try:
        cli.main(args=argv, prog_name="gpuperf", standalone_mode=False)
    except GpuperfError as exc:
        click.echo(f"gpuperf: error: {_one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.NoArgsIsHelpError as exc:  # `gpuperf hw`: the group's help, as -h
        click.echo(exc.ctx.get_help(), color=exc.ctx.color)
        sys.exit(0)
    except click.exceptions.Abort as exc:
        term = isinstance(exc.__cause__ or exc.__context__, Terminated)
        click.echo(f"gpuperf: aborted ({'SIGTERM' if term else 'SIGINT'})", err=True)
        sys.exit(143 if term else 130)
    except click.ClickException as exc:
        click.echo(f"gpuperf: error: {_one_line(exc.format_message())}", err=True)
        sys.exit(2 if isinstance(exc, click.UsageError | click.BadParameter) else exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(0)
