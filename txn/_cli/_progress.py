"""Progress on a terminal while a long command runs; nothing at all otherwise.

The library's operations (compaction, CLEAN FILES, validation, ADD SEGMENT) take no progress
callback, so the command line cannot count their steps: it shows an indeterminate bar with the
time elapsed for the duration of the call. Where an operation draws a bar of its own (ADD
SEGMENT's scans of large CSV and JSON folders, a determinate one over the bytes), it is drawn
inside this one: both use rich's console on stdout, which renders nested live displays together.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich import get_console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from ._render import terminal


@contextmanager
def working(description: str) -> Iterator[None]:
    """Show ``description`` with a spinner and the time elapsed while the block runs, when stdout
    is a terminal; the bar is erased when the block ends (its result is printed instead)."""
    if not terminal():
        yield
        return
    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                   TimeElapsedColumn(), console=get_console(), transient=True)
    with bar:
        bar.add_task(description, total=None)
        yield
