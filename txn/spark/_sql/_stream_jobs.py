"""The streaming jobs ``CREATE STREAM`` started in this process, by name.

CarbonData keeps its StreamSQL jobs in the driver's memory only (``StreamJobManager``): other
drivers cannot see them and a restart forgets them. So does this registry. What outlives the
process is each sink table's own record of the stream (its batches, rows and open segment),
which SHOW STREAMS shows beside the jobs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ._catalog import TableName

RUNNING = "RUNNING"
FAILED = "FAILED"
STOPPED = "STOPPED"


@dataclass(frozen=True)
class Job:
    """A query started by CREATE STREAM."""

    name: str
    #: The ``StreamingQuery``.
    query: Any
    source: TableName
    sink: TableName
    started: datetime

    @property
    def job_id(self) -> str:
        return str(self.query.id)

    @property
    def status(self) -> str:
        """``RUNNING`` while the query is active, then ``FAILED`` (it raised) or ``STOPPED``."""
        if self.query.isActive:
            return RUNNING
        return FAILED if self.query.exception() is not None else STOPPED


_JOBS: dict[str, Job] = {}
_LOCK = threading.Lock()
# Held across a whole CREATE STREAM (check, start, record), as CarbonData's synchronized
# StreamJobManager.startStream: two sessions starting one name at once must not both start.
_STARTING = threading.Lock()


def _key(name: str) -> str:
    return name.lower()  # stream names are identifiers: case-insensitive


@contextmanager
def starting() -> Iterator[None]:
    """Hold while checking a name is free, starting its query and :func:`add`-ing it."""
    with _STARTING:
        yield


def find(name: str) -> Job | None:
    with _LOCK:
        return _JOBS.get(_key(name))


def add(job: Job) -> None:
    with _LOCK:
        _JOBS[_key(job.name)] = job


def remove(name: str) -> None:
    with _LOCK:
        _JOBS.pop(_key(name), None)


def jobs() -> list[Job]:
    with _LOCK:
        return list(_JOBS.values())
