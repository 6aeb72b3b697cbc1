"""``Snapshot.deletes()``: the deleted rows as (file, position), the surface an outside engine
applies to the live files it reads itself (issue 25 item 6, design/reader-spec.md)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import txn

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _table(tmp_path: Path) -> txn.Table:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id")
    t.append(pa.table({"id": [1, 2, 3, 4], "name": list("abcd")}))
    t.append(pa.table({"id": [5, 6], "name": list("ef")}))
    return t


def test_no_deletes_is_an_empty_table_of_the_documented_columns(tmp_path: Path) -> None:
    deletes = _table(tmp_path).snapshot().deletes()
    assert deletes.num_rows == 0
    assert deletes.schema == pa.schema([("path", pa.string()), ("location", pa.string()),
                                        ("position", pa.int64())])


def test_live_files_less_deleted_positions_are_the_snapshot(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.delete(keys=[2, 4, 6])
    t.delete(pc.field("id") == 1)  # a second delta on the same file
    snap = t.snapshot()
    deletes = snap.deletes()
    assert deletes.num_rows == 4
    files = snap.file_table(stats=False)
    assert set(deletes["path"].to_pylist()) <= set(files["path"].to_pylist())
    gone = set(zip(deletes["location"].to_pylist(), deletes["position"].to_pylist(), strict=True))
    rows = []
    for location in files["location"].to_pylist():
        read = pq.read_table(location).to_pylist()
        rows += [r for i, r in enumerate(read) if (location, i) not in gone]
    assert sorted(r["id"] for r in rows) == sorted(snap.to_arrow()["id"].to_pylist()) == [3, 5]


def test_time_travel_sees_the_deletes_of_its_own_instant(tmp_path: Path) -> None:
    t = _table(tmp_path)
    before = t.snapshot()
    t.delete(keys=[2])
    assert before.deletes().num_rows == 0
    assert t.snapshot(as_of=before.instant).deletes().num_rows == 0
    assert t.snapshot().deletes()["position"].to_pylist() == [1]
