"""The one way gpuperf makes a rich Console, and so the one place where text from files is made
safe for a terminal:

- markup is off, so that names from files (a profile's display_name `[/x] oops`, a config called
  `[bold]`) print as written instead of raising MarkupError or vanishing. Styles are given as
  Text or `style=`, never as markup;
- control characters (C0 but the newline, DEL, C1: ESC, CSI, BEL, ...) are dropped from every
  piece of text the console renders, whatever it came from (a name, a `[model.extra]` key of a
  profile, an op name in a results file), so that no escape sequence from a file reaches the
  terminal. rich's own colours are not text and are unaffected.
"""

from __future__ import annotations

import errno
import functools
from typing import TYPE_CHECKING, Any

from gpuperf.fileio import printable

if TYPE_CHECKING:
    from rich.console import Console


@functools.cache
def _console_class() -> type[Console]:
    from rich.console import Console
    from rich.segment import Segment

    class SafeConsole(Console):
        """A Console whose rendered text never carries control characters."""

        def render(self, renderable: Any, options: Any = None) -> Any:
            for seg in super().render(renderable, options):
                if seg.control is None and not seg.text.isprintable():  # fast path: most segments
                    text = printable(seg.text, newlines=True)
                    if text != seg.text:
                        seg = Segment(text, seg.style)
                yield seg

        def on_broken_pipe(self) -> None:
            # rich exits 1 here itself; the CLI's main decides what a closed pipe means (exit 0).
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, "the reader of the console's output went away")

    return SafeConsole


# Columns a table gets when the output is not a terminal (a pipe, a file): rich would take 80 and
# cut the columns to "…"; a terminal keeps its own width.
PIPED_WIDTH = 160


def console(**kw: Any) -> Console:
    return _console_class()(markup=False, highlight=False, **kw)


def table_console(**kw: Any) -> Console:
    """The console a table prints on: at least PIPED_WIDTH columns wide when not a terminal."""
    con = console(**kw)
    if not con.is_terminal:
        con.width = max(con.width, PIPED_WIDTH)
    return con
