"""Snapshots of a table whose files were written under several schema versions: every file is
read by column id, pruned by id-keyed statistics, and time travel reads each instant's schema."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn

ADDR = pa.struct([("city", pa.string()), ("zip", pa.int32())])
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amt", pa.int32()), ("addr", ADDR)])


def first_rows() -> pa.Table:
    return pa.table({"id": [1, 2], "name": ["a", "b"], "amt": pa.array([10, 20], pa.int32()),
                     "addr": pa.array([{"city": "x", "zip": 1}, None], ADDR)}, schema=SCHEMA)


@pytest.fixture
def table(tmp_path: Path) -> txn.Table:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id")
    t.append(first_rows())
    return t


def by_id(t: txn.Table | txn.Snapshot, **kwargs: object) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = t.to_arrow(**kwargs).sort_by("id").to_pylist()  # type: ignore[arg-type]
    return rows


def test_rename_drop_readd_widen_and_nested_add_read_old_files_by_id(table: txn.Table) -> None:
    before = table.snapshot()
    with table.update_schema() as u:
        (u.rename_column("name", "full_name").drop_column("amt").add_column("amt", pa.int64())
         .add_column("addr.country", pa.string()).rename_column("addr.city", "town")
         .alter_column("addr.zip", pa.int64()))
    table.append(pa.table({"id": [3], "full_name": ["c"], "addr": [{"town": "y", "zip": 2 ** 40,
                                                                     "country": "fr"}],
                           "amt": [7]}, schema=table.schema))
    assert by_id(table) == [
        {"id": 1, "full_name": "a", "addr": {"town": "x", "zip": 1, "country": None}, "amt": None},
        {"id": 2, "full_name": "b", "addr": None, "amt": None},
        {"id": 3, "full_name": "c", "addr": {"town": "y", "zip": 2 ** 40, "country": "fr"}, "amt": 7}]
    # The values dropped with the old 'amt' never come back under the new one, and time travel
    # reads the old schema and its rows.
    old = table.snapshot(as_of=before.instant)
    assert old.schema.names == SCHEMA.names
    assert by_id(old) == first_rows().to_pylist()
    assert table.snapshot().to_arrow().schema.field("addr").type == table.schema.field("addr").type


def test_a_filter_on_a_renamed_column_prunes_old_files_by_their_statistics(table: txn.Table) -> None:
    table.rename_column("name", "full_name")
    table.append(pa.table({"id": [3], "full_name": ["c"], "amt": pa.array([30], pa.int32()),
                           "addr": pa.nulls(1, ADDR)}, schema=table.schema))
    snap = table.snapshot()
    old_only = snap.file_table(pc.field("full_name") == "a")
    assert [f["schema_id"] for f in old_only.to_pylist()] == [0]
    assert snap.file_table(pc.field("full_name") == "zz").num_rows == 0
    assert by_id(snap, filter=pc.field("full_name") == "b") == [
        {"id": 2, "full_name": "b", "amt": 20, "addr": None}]
    assert snap.count(pc.field("full_name") >= "b") == 2


def test_an_added_columns_old_files_prune_as_all_null(table: txn.Table) -> None:
    table.add_columns([pa.field("x", pa.int32())])
    table.append(pa.table({"id": [3], "name": ["c"], "amt": pa.array([30], pa.int32()),
                           "addr": pa.nulls(1, ADDR), "x": pa.array([5], pa.int32())},
                          schema=table.schema))
    snap = table.snapshot()
    assert snap.file_table(pc.field("x") == 5)["schema_id"].to_pylist() == [snap.files()[-1].schema_id]
    assert sorted(snap.file_table(pc.field("x").is_null())["schema_id"].to_pylist()) == [0]
    assert [r["id"] for r in by_id(snap, filter=pc.field("x").is_null())] == [1, 2]


def test_a_widened_columns_statistics_prune_in_its_new_type(table: txn.Table) -> None:
    table.alter_column("amt", pa.int64())
    snap = table.snapshot()
    assert snap.file_table(pc.field("amt") > 2 ** 40).num_rows == 0
    assert snap.file_table(pc.field("amt") == 20).num_rows == 1
    assert by_id(snap)[1]["amt"] == 20 and snap.to_arrow().schema.field("amt").type == pa.int64()


def test_the_file_reader_reads_each_files_version_on_a_worker(table: txn.Table) -> None:
    table.rename_column("name", "full_name")
    table.append(pa.table({"id": [3], "full_name": ["c"], "amt": pa.array([30], pa.int32()),
                           "addr": pa.nulls(1, ADDR)}, schema=table.schema))
    snap = table.snapshot()
    reader = pickle.loads(pickle.dumps(snap.file_reader()))
    files = sorted(snap.files(), key=lambda f: f.schema_id)
    assert [f.schema_id for f in files] == [0, 1]
    assert reader.read(files[0], columns=["full_name"]).column("full_name").to_pylist() == ["a", "b"]
    assert reader.read(files[1], filter=pc.field("full_name") == "c").num_rows == 1


def test_a_struct_field_dropped_and_added_again_reads_null_in_old_files(table: txn.Table) -> None:
    """Its new id differs from the old one's; the struct's type alone does not say so."""
    table.drop_columns(["addr.zip"])
    table.add_columns([pa.field("addr.zip", pa.int32())])
    assert [r["addr"] for r in by_id(table)] == [{"city": "x", "zip": None}, None]
    assert table.snapshot().count(pc.field("addr", "zip") == 1) == 0
    table.compact("major")
    assert [r["addr"] for r in by_id(table)] == [{"city": "x", "zip": None}, None]
