"""The lean commit (issue 27): what a small write costs in storage calls, and the handle's latest
state extended from its own commit (``MetadataTable.extend_own``) always equal to a resolution
from storage, whatever wrote in between."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn.indexes import COLUMN_STATS, DELETES, FILES, SCHEMAS, SEGMENTS, STREAMS, MetadataTable
from tests.unit.txn.helpers import SCHEMA, Faulty, rows, storage_of, table_on

ALL = (SCHEMAS, FILES, SEGMENTS, COLUMN_STATS, DELETES, STREAMS)


def _state(table: txn.Table) -> tuple[object, ...]:
    """The latest state as this handle resolves it (its cache, extended from its own commits)."""
    context = table._context
    resolved = context.metadata_at(context.timeline.load(), None, ALL)
    return _comparable(resolved)


def _comparable(resolved: object) -> tuple[object, ...]:
    def rows_of(part: pa.Table | None) -> list[dict[str, object]]:
        return sorted(part.to_pylist(), key=repr) if part is not None else []
    return (rows_of(resolved.files), rows_of(resolved.column_stats), rows_of(resolved.deletes),  # type: ignore[attr-defined]
            dict(resolved.segments or {}), dict(resolved.streams or {}),  # type: ignore[attr-defined]
            resolved.max_load_id, sorted((resolved.versions or {}).items()))  # type: ignore[attr-defined]


def _fresh(uri: str) -> tuple[object, ...]:
    return _state(txn.open_table(uri))


def test_an_unkeyed_small_append_makes_16_storage_calls_and_reads_nothing_back(table_uri: str) -> None:
    txn.create_table(table_uri, SCHEMA).append(rows(range(3)))
    faulty = Faulty(storage_of(table_uri))
    table = table_on(table_uri, faulty)
    table.append(rows(range(3, 6)))  # the handle's first write resolves the table
    faulty.reset()
    table.append(rows(range(6, 9)))
    calls = [(c.op, c.path) for c in faulty.calls]
    assert len(calls) == 16, calls
    # Nothing under _metadata/ is read or listed but the metadata timeline (recovery).
    assert [c for c in calls if c[1].startswith("_metadata/") and c[0] in ("read", "list")] == [
        ("list", "_metadata/_timeline")]
    assert not any(path.endswith(".requested") for _, path in calls)
    assert not any(path.startswith("_timeline/heartbeats/") for _, path in calls)


def test_the_state_a_writer_extends_from_its_own_commits_is_the_one_storage_resolves(
        table_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    extended = []
    extend_own = MetadataTable.extend_own

    def counted(self: MetadataTable, *args: Any) -> object:
        found = extend_own(self, *args)
        extended.append(found is not None)
        return found

    monkeypatch.setattr(MetadataTable, "extend_own", counted)
    keyed = txn.create_table(table_uri, SCHEMA, record_key="id", partition_by=["region"],
                             properties={"metadata.compact_after": "3"})
    other = txn.open_table(table_uri)
    keyed.append(rows(range(10)))
    assert _state(keyed) == _fresh(table_uri)
    for step in range(8):
        keyed.append(rows(range(100 + step * 10, 105 + step * 10), region="us"))
        if step % 3 == 1:
            keyed.delete(pc.field("id") == 100 + step * 10)
        if step % 3 == 2:
            keyed.upsert(rows([1, 2, 200 + step], region="eu"))
        if step == 4:
            other.append(rows(range(500, 503)))  # a commit the writer did not make
        if step == 7:
            keyed.add_columns([pa.field("note", pa.string())])  # a new table version
        assert _state(keyed) == _fresh(table_uri), step
    assert keyed.to_arrow().num_rows == txn.open_table(table_uri).to_arrow().num_rows
    assert keyed.validate().ok
    assert sum(extended) >= 10 and not all(extended), extended  # both paths were taken
