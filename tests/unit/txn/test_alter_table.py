"""Schema and property changes as commits of their own (``alter_table``): versions, history,
time travel of the schema, refusals that leave the table as it was."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn.indexes import field_id

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amt", pa.int32()),
                    ("day", pa.string())])


def rows(n: int = 3, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n)), "name": [f"n{i}" for i in range(n)],
                     "amt": pa.array(range(n), pa.int32()), "day": ["d1"] * n}, schema=SCHEMA)


@pytest.fixture
def table(tmp_path: Path) -> txn.Table:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id", partition_by=["day"])
    t.append(rows())
    return t


def state(t: txn.Table) -> tuple[object, ...]:
    reopened = txn.open_table(t.uri)
    return (reopened.schema.to_string(show_field_metadata=True), reopened.properties,
            [i.time for i in reopened.timeline() if i.is_completed], len(reopened.schema_history()))


def test_each_change_is_one_commit_and_a_version(table: txn.Table) -> None:
    commit = table.add_columns([pa.field("discount", pa.decimal128(15, 2))])
    assert commit.operation == "alter_table" and commit.schema_version == 1
    assert commit.files_added == 0 and commit.rows_added == 0
    assert table.schema.names == ["id", "name", "amt", "day", "discount"]
    assert field_id(table.schema.field("discount")) == 5
    table.rename_column("name", "full_name")
    table.alter_column("amt", pa.int64())
    table.drop_columns(["discount"])
    table.set_properties({"clean.retain_commits": "20"})
    history = table.schema_history()
    assert [v.version for v in history] == [0, 1, 2, 3, 4, 5]
    assert history[0].instant == "" and history[1].instant == commit.instant
    assert history[2].changes == ("rename column name to full_name",)
    assert history[5].schema.equals(history[4].schema, check_metadata=True)  # a property change
    reopened = txn.open_table(table.uri)
    assert reopened.schema.names == ["id", "full_name", "amt", "day"]
    assert reopened.schema.field("amt").type == pa.int64()
    assert reopened.properties == {"clean.retain_commits": "20"}


def test_snapshot_schema_is_its_instants(table: txn.Table) -> None:
    before = table.snapshot()
    table.add_columns([pa.field("x", pa.int8())])
    after = table.snapshot()
    assert before.schema.names == ["id", "name", "amt", "day"]
    assert after.schema.names == ["id", "name", "amt", "day", "x"]
    assert table.snapshot(as_of=before.instant).schema.names == before.schema.names


def test_layout_follows_renames(table: txn.Table) -> None:
    table.rename_column("id", "key")
    table.rename_column("day", "d")
    reopened = txn.open_table(table.uri)
    assert (reopened.record_key, reopened.partition_by) == ("key", ["d"])


def test_update_schema_groups_changes_into_one_commit(table: txn.Table) -> None:
    with table.update_schema() as u:
        u.add_column("a", pa.int32()).rename_column("a", "b").set_properties({"clean.retain_commits": "30"})
    assert u.commit is not None and u.commit.schema_version == 1
    assert "b" in table.schema.names and table.properties["clean.retain_commits"] == "30"
    with pytest.raises(RuntimeError), table.update_schema() as u:
        u.add_column("c", pa.int32())
        raise RuntimeError("abandoned")
    assert "c" not in txn.open_table(table.uri).schema.names


@pytest.mark.parametrize(("change", "error", "match"), [
    (lambda t: t.alter_column("amt", pa.int16()), txn.SchemaEvolutionError, "narrows"),
    (lambda t: t.drop_columns(["id"]), txn.SchemaEvolutionError, "record-key column"),
    (lambda t: t.drop_columns(["day"]), txn.SchemaEvolutionError, "partition column"),
    (lambda t: t.alter_column("id", pa.int32()), txn.SchemaEvolutionError, "record-key column"),
    (lambda t: t.add_columns([pa.field("x", pa.int8(), nullable=False)]), txn.SchemaEvolutionError,
     "NOT NULL"),
    (lambda t: t.add_columns([pa.field("name", pa.int8())]), txn.SchemaEvolutionError, "exists"),
    (lambda t: t.rename_column("nope", "x"), txn.SchemaEvolutionError, "does not exist"),
    (lambda t: t.drop_columns("name"), txn.InvalidOptionError, "list of column names"),
    (lambda t: t.add_columns(pa.field("x", pa.int8())), txn.InvalidOptionError, "list of pyarrow.Field"),
    (lambda t: t.add_columns([pa.field("x", pa.month_day_nano_interval())]), txn.InvalidOptionError,
     "Parquet"),
    (lambda t: t.set_properties({"clean.retain_commits": "0"}), txn.InvalidOptionError, "retain_commits"),
    (lambda t: t.set_properties({"record_index.shards": "8"}), txn.InvalidOptionError, "fixed"),
    (lambda t: t.set_properties({"heartbeat.interval_ms": "60000"}), txn.InvalidOptionError,
     "heartbeat"),
    # Safe alone, but not with the old timeout (60 s) other handles still judge with ...
    (lambda t: t.set_properties({"heartbeat.interval_ms": "90000", "heartbeat.timeout_ms": "200000"}),
     txn.InvalidOptionError, "have not refreshed still use heartbeat.timeout_ms=60000"),
    # ... nor with the old interval (15 s) running writers still beat at.
    (lambda t: t.set_properties({"heartbeat.interval_ms": "1000", "heartbeat.timeout_ms": "2000"}),
     txn.InvalidOptionError, "writers running now beat every heartbeat.interval_ms=15000"),
    (lambda t: t.unset_properties(["nope"]), txn.InvalidOptionError, "not set"),
])
def test_refusals_leave_the_table_as_it_was(table: txn.Table, change, error, match) -> None:
    before = state(table)
    with pytest.raises(error, match=match):
        change(table)
    assert state(table) == before
    assert not [i for i in txn.open_table(table.uri).timeline() if not i.is_completed]


def test_a_table_from_before_versions_gets_them_on_its_first_change(table: txn.Table) -> None:
    assert [v.version for v in table.schema_history()] == [0]
    table.add_columns([pa.field("x", pa.int8())])
    history = txn.open_table(table.uri).schema_history()
    assert [v.version for v in history] == [0, 1]
    assert [field_id(f) for f in history[0].schema] == [1, 2, 3, 4]


def test_another_handle_sees_the_change_at_its_next_read(table: txn.Table) -> None:
    other = txn.open_table(table.uri)
    assert "x" not in other.schema.names
    table.add_columns([pa.field("x", pa.int8())])
    assert other.snapshot().schema.names[-1] == "x"
    assert other.schema.names[-1] == "x"


def test_an_overwrite_racing_a_schema_change_commits(table: txn.Table) -> None:
    """An alter_table wrote no row: a whole-table overwrite that began before it still commits,
    and its files (of the older version) read under the new schema."""
    with table.begin_write("overwrite") as pending:
        written = txn.write_files(pending.ticket, rows(2, start=10).to_batches())
        table.add_columns([pa.field("x", pa.int8())])
        pending.commit([written])
    assert table.to_arrow().sort_by("id").to_pylist() == [
        {"id": 10, "name": "n0", "amt": 0, "day": "d1", "x": None},
        {"id": 11, "name": "n1", "amt": 1, "day": "d1", "x": None}]


def test_changed_properties_steer_every_handle(table: txn.Table) -> None:
    table.set_properties({"metadata.compact_after": "3", "heartbeat.timeout_ms": "90000"})
    for handle in (table, txn.open_table(table.uri)):
        handle.snapshot()
        context = handle._context
        assert context.metadata.options.compact_after == 3
        assert context.timeline.options.heartbeat_timeout_ms == 90000
    table.unset_properties(["metadata.compact_after"])
    table.snapshot()
    assert table._context.metadata.options.compact_after == 10


@pytest.mark.parametrize("renamed", ["day", "id", "amt"])
def test_a_stale_handle_writes_after_a_layout_column_was_renamed(tmp_path: Path, renamed: str) -> None:
    """A write conformed to the version before the rename (partition, record-key or sort
    column) commits; its rows read under the new name."""
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id", partition_by=["day"],
                         sort_by=["amt"])
    t.append(rows())
    stale = txn.open_table(t.uri)
    stale.snapshot()  # resolved before the rename
    t.rename_column(renamed, "renamed")
    stale.append(rows(2, start=10))
    got = t.to_arrow().sort_by("renamed" if renamed == "id" else "id").to_pylist()
    assert [r["renamed" if renamed == "id" else "id"] for r in got] == [0, 1, 2, 10, 11]
    assert all(r["renamed"] is not None for r in got)
    assert t.validate().ok


def test_a_stale_handle_takes_a_rename_made_elsewhere(table: txn.Table) -> None:
    """A filter on a column renamed by another handle, and the key column's name in lookups,
    follow the latest version: the handle reads it when what it knows does not apply."""
    stale = txn.open_table(table.uri)
    stale.snapshot()
    table.rename_column("name", "full_name")
    table.rename_column("id", "key")
    assert stale.lookup([1]).column_names == ["key", "segment", "file", "position"]
    assert stale.update(pc.field("full_name") == "n1", {"amt": 7}).rows_deleted == 1
    assert stale.delete(pc.field("full_name") == "n0").rows_deleted == 1
    with pytest.raises(txn.InvalidOptionError, match="does not apply"):
        stale.delete(pc.field("nope") == 1)
