"""One progress display for long runs with several named phases (backtest policies, offline schedule)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


@contextmanager
def phase_progress(console: Console) -> Iterator[Callable[[str, float, float], None]]:
    """Yields ``progress(name, done, total)``: the first call for a name adds its bar."""
    with Progress(TextColumn("[bold]{task.description:<14}"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                  TimeElapsedColumn(), console=console) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(name: str, done: float, total: float) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(name, total=max(total, 1e-9))
            bar.update(tasks[name], completed=done)

        yield progress
