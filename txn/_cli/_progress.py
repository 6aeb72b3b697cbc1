"""Progress bars on a terminal while a long command runs; nothing at all otherwise.

The library reports how far its long loops have come (files checked by validate, moved by CLEAN
FILES, footers read by ADD SEGMENT, files read and rows rewritten by a compaction) to a watcher
set for the duration of the call (``txn._context.watched``): the bar shows the current step with
its count, and a spinner with the time elapsed before the first report. Where an operation draws
a bar of its own (ADD SEGMENT's scans of large CSV and JSON folders, over the bytes), it is drawn
beside this one: both use rich's console on stdout, which renders live displays together.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich import get_console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from .._context import watched
from ._render import terminal


@contextmanager
def working(description: str) -> Iterator[None]:
    """Show ``description`` and the library's progress while the block runs, when stdout is a
    terminal; the bar is erased when the block ends (its result is printed instead)."""
    if not terminal():
        yield
        return
    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn(), console=get_console(), transient=True)
    task = bar.add_task(description, total=None)

    def report(what: str, done: int, total: int) -> None:
        bar.update(task, description=f"{description}: {what}", completed=done, total=total)

    with bar, watched(report):
        yield
