"""The one way gpuperf makes a rich Console: markup off, so that names from files (a profile's
display_name `[/x] oops`, a config called `[bold]`) print as written instead of raising
MarkupError or vanishing. Styles are given as Text or `style=`, never as markup."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def console(**kw: Any) -> Console:
    from rich.console import Console

    return Console(markup=False, highlight=False, **kw)
