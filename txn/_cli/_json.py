"""``--json``: what each command prints for machines.

The output is one JSON document on stdout, indented, with keys in a fixed order. Times are
ISO-8601 strings with their UTC offset; instant times stay the timeline's 17-digit strings (they
are identities, accepted back wherever an instant is); sizes and counts are integers in bytes and
rows. Fields are only ever added, never renamed or removed.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterable
from datetime import date, datetime, time
from decimal import Decimal
from typing import Any

import msgspec
import pyarrow as pa

from metatxn.indexes import field_id, nested_fields
from metatxn.timeline import Instant
from txn import (
    ChangeSummary,
    CleanResult,
    Commit,
    HistoryEntry,
    SchemaVersion,
    Segment,
    StreamInfo,
    Table,
    ValidationReport,
)


def emit(document: object) -> None:
    """Print ``document`` on stdout as JSON."""
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False, default=_scalar) + "\n")
    sys.stdout.flush()


def _scalar(value: object) -> object:
    """The JSON form of values ``json`` does not know (partition values, times)."""
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)  # exact: a float would round it
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def segment(s: Segment) -> dict[str, Any]:
    return dataclasses.asdict(s)


def instant(i: Instant, entry: HistoryEntry | None = None) -> dict[str, Any]:
    """One instant of ``metatxn timeline``, then what it did (``entry``, its ``Table.history()``
    entry: every ``txn.HistoryEntry`` field but the three above; null where it did not complete)."""
    done = msgspec.structs.asdict(entry) if entry is not None else dict.fromkeys(_ENTRY_FIELDS)
    return {"time": i.time, "action": i.action, "state": i.state, "completed_at": i.completed_at,
            **{name: _plain(done[name]) for name in _ENTRY_FIELDS}}


#: What ``metatxn timeline --json`` adds to each instant, in ``txn.HistoryEntry``'s order.
_ENTRY_FIELDS = tuple(f for f in HistoryEntry.__struct_fields__
                      if f not in ("instant", "completed_at", "action"))


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


def change_summary(s: ChangeSummary) -> dict[str, Any]:
    """One instant of ``metatxn changes``: ``instant``, ``completed_at``, ``operation``,
    ``inserted``, ``updated`` (post-images) and ``deleted`` rows."""
    return msgspec.structs.asdict(s)


def stream(i: StreamInfo) -> dict[str, Any]:
    return dataclasses.asdict(i)


def commit(c: Commit | None) -> dict[str, Any] | None:
    """A commit, with its tuples as lists; None (JSON ``null``) when nothing was committed."""
    return None if c is None else dataclasses.asdict(c)


def clean(result: CleanResult) -> dict[str, Any]:
    return dataclasses.asdict(result)


def validation(report: ValidationReport) -> dict[str, Any]:
    return {"ok": report.ok, "files_checked": report.files_checked,
            "problems": [dataclasses.asdict(p) for p in report.problems]}


def description(t: Table, version: int) -> dict[str, Any]:
    """What ``metatxn describe`` shows: identity, layout, properties and columns (of schema
    version ``version``, the current one)."""
    return {
        "uri": t.uri,
        "table_id": t.table_id,
        "created_at": t.created_at,
        "partition_by": t.partition_by,
        "record_key": t.record_key,
        "sort_by": t.sort_by,
        "record_index_shards": t.record_index_shards,
        "properties": t.properties,
        "schema": columns(t.schema),
        "version": version,
    }


def columns(fields: Iterable[pa.Field]) -> list[dict[str, Any]]:
    """Each column with its id (None for a column without one) and, for a struct, list or map,
    its nested ``fields`` the same way."""
    described = []
    for f in fields:
        column: dict[str, Any] = {"name": f.name, "type": str(f.type), "nullable": f.nullable,
                                  "id": field_id(f)}
        if children := nested_fields(f.type):
            column["fields"] = columns(children)
        described.append(column)
    return described


def schema_version(v: SchemaVersion) -> dict[str, Any]:
    """One entry of ``metatxn describe --history``: ``instant`` is None for version 0 (the
    table's creation, which ``table.json`` holds)."""
    return {"version": v.version, "instant": v.instant or None, "changes": list(v.changes),
            "schema": columns(v.schema), "properties": v.properties,
            "partition_by": list(v.partition_by), "record_key": v.record_key, "sort_by": list(v.sort_by)}
