"""Clocks and instant-time generation.

Everything that needs the time takes a :data:`Clock` (epoch milliseconds) so tests can drive it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ._instant import format_time, parse_time

#: A source of wall-clock time in epoch milliseconds.
Clock = Callable[[], int]


def system_clock() -> int:
    """The machine's wall clock in epoch milliseconds."""
    return time.time_ns() // 1_000_000


def next_time(now_ms: int, after: str | None) -> str:
    """The instant time for ``now_ms``, bumped to be strictly greater than ``after``.

    Taking the maximum with ``after + 1 ms`` keeps instant times strictly increasing when the
    clock steps backwards or two instants fall in the same millisecond; the cost is that the
    time then runs ahead of the wall clock until the wall clock catches up.
    """
    candidate = now_ms
    if after is not None:
        candidate = max(candidate, parse_time(after) + 1)
    return format_time(candidate)
