"""``Snapshot.schema_id``: the table version whose schema a snapshot reads as (issue 24), what an
engine compares each ``DataFile.schema_id`` with to know which files need a projection."""

from __future__ import annotations

import pyarrow as pa

import txn


def test_snapshot_schema_id_is_the_version_of_its_instant() -> None:
    t = txn.create_table("memory://snapshot-schema-id/t", pa.schema([("id", pa.int64())]))
    t.append(pa.table({"id": [1]}))
    first = t.snapshot()
    assert first.schema_id == 0
    t.add_columns([pa.field("extra", pa.string())])
    t.append(pa.table({"id": [2], "extra": ["x"]}))
    latest = t.snapshot()
    assert latest.schema_id == t.schema_history()[-1].version == 1
    assert sorted(f.schema_id for f in latest.files()) == [0, 1]
    assert t.snapshot(first.instant).schema_id == 0
