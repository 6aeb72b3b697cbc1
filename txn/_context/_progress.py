"""How far long work has come (files checked, moved, read; rows rewritten), for whoever watches.

The command line draws progress bars from it. Library calls keep their signatures: a watcher is
set for the duration of a block (:func:`watched`), in a context variable, and the loops of long
operations report through :func:`progress`, which costs nothing when nobody watches.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

#: ``reporter(what, done, total)``: ``done`` of ``total`` steps of ``what`` are finished.
Reporter = Callable[[str, int, int], None]

_WATCHER: ContextVar[Reporter | None] = ContextVar("metatxn_progress", default=None)


@contextmanager
def watched(reporter: Reporter) -> Iterator[None]:
    """Send the progress of work run in this block (on this thread) to ``reporter``."""
    token = _WATCHER.set(reporter)
    try:
        yield
    finally:
        _WATCHER.reset(token)


def progress(what: str, items: Iterable[T], total: int) -> Iterator[T]:
    """``items``, reporting after each one that it is done (one of ``total``)."""
    reporter = _WATCHER.get()
    if reporter is None:
        yield from items
        return
    reporter(what, 0, total)
    for done, item in enumerate(items, 1):
        yield item
        reporter(what, done, total)


def advanced(what: str, done: int, total: int) -> None:
    """Report ``done`` of ``total`` steps of ``what`` (for work that is not one loop)."""
    reporter = _WATCHER.get()
    if reporter is not None:
        reporter(what, done, total)
