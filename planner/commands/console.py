"""The console a command prints its tables and reports to.

Rich gives a console that is not a terminal 80 columns, which cut tables piped to a file or another program.
Here: the terminal's width where there is one (stdout, or stderr/stdin still on one: ``planner ... | less``),
COLUMNS where set, else wide enough that nothing is cut (a line is as long as its content).
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

FULL_WIDTH = 1000  # no table of the planner's comes near it; rich still trims trailing space


def _attached_terminal_width() -> int | None:
    for fd in (2, 0):
        try:
            if os.isatty(fd):
                return os.get_terminal_size(fd).columns
        except OSError:
            continue
    return None


def out_console(**kwargs: Any) -> Console:
    """``Console(**kwargs)`` on stdout, at the terminal's width or, with none, at full width."""
    console = Console(**kwargs)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(width=_attached_terminal_width() or FULL_WIDTH, **kwargs)
