"""What the table state machine's schema changes found while issue 24 was built, each as a
minimal reproduction kept as a regression test: ADD SEGMENT, validate(), compaction, deletes and
updates, and the listing of files across schema versions (renamed partition column included)."""

from __future__ import annotations

import re
from collections.abc import Callable

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txn
from tests.conftest import FakeClock
from tests.faults import injected
from tests.unit.txn.helpers import Faulty, storage_of, table_on

SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.string()), ("v", pa.int64())])


def _external_folder(uri: str, data: pa.Table) -> str:
    """A Hive-style folder ``g=a/`` of one Parquet file of ``data``, outside the table."""
    url = f"{uri}-external"
    buffer = pa.BufferOutputStream()
    pq.write_table(data, buffer)
    filesystem = fsspec.filesystem("memory")
    filesystem.pipe_file(f"{filesystem._strip_protocol(url)}/g=a/part-0.parquet",
                         buffer.getvalue().to_pybytes())
    return url


def test_add_segment_after_a_rename_takes_the_new_name(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"], record_key="k")
    table.append(pa.table({"k": [1], "g": ["a"], "v": [10]}, schema=SCHEMA))
    table.rename_column("k", "k8")
    folder = _external_folder(memory_uri, pa.table({"k8": [2], "v": [20]}))
    table.add_segment(folder, "parquet", partition="g:string")
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: r["k8"]) == [
        {"k8": 1, "g": "a", "v": 10}, {"k8": 2, "g": "a", "v": 20}]


def test_add_segment_after_add_columns_reads_the_new_column(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"], record_key="k")
    table.append(pa.table({"k": [1], "g": ["a"], "v": [10]}, schema=SCHEMA))
    table.add_columns([pa.field("a", pa.int32())])
    folder = _external_folder(memory_uri, pa.table({"k": [2], "v": [20],
                                                   "a": pa.array([7], pa.int32())}))
    table.add_segment(folder, "parquet", partition="g:string")
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "g": "a", "v": 10, "a": None}, {"k": 2, "g": "a", "v": 20, "a": 7}]


def test_validate_after_add_columns_finds_nothing(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"], record_key="k")
    table.append(pa.table({"k": [1], "g": ["a"], "v": [10]}, schema=SCHEMA))
    table.add_columns([pa.field("a", pa.int32())])
    report = table.validate()
    assert report.ok, [str(p) for p in report.problems]


def test_an_external_segment_reads_after_a_rename_of_the_partition_column(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"])
    folder = _external_folder(memory_uri, pa.table({"k": [2], "v": [20]}))
    table.add_segment(folder, "parquet", partition="g:string")
    table.rename_column("g", "g5")
    assert table.to_arrow().to_pylist() == [{"k": 2, "g5": "a", "v": 20}]


def test_compaction_of_an_old_file_with_deletes_after_add_columns(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"], record_key="k")
    table.append(pa.table({"k": [1, 2], "g": ["a", "a"], "v": [10, 20]}, schema=SCHEMA))
    table.append(pa.table({"k": [3], "g": ["b"], "v": [30]}, schema=SCHEMA))
    table.delete(keys=[1])
    table.add_columns([pa.field("a", pa.int32())])
    table.compact("major")
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 2, "g": "a", "v": 20, "a": None}, {"k": 3, "g": "b", "v": 30, "a": None}]


def test_delete_where_after_renaming_the_partition_column(memory_uri: str) -> None:
    import pyarrow.compute as pc

    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"])
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [10, 20]}, schema=SCHEMA))
    table.rename_column("g", "g5")
    table.delete(where=pc.field("v") >= 20)
    assert table.to_arrow().to_pylist() == [{"k": 1, "g5": "a", "v": 10}]


def test_files_after_renaming_the_partition_column(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"])
    table.append(pa.table({"k": [1], "g": ["a"], "v": [10]}, schema=SCHEMA))
    table.rename_column("g", "g5")
    assert [f.partition for f in table.snapshot().files()] == [{"g5": "a"}]



def _dies_at_its_commit_point(uri: str, clock: FakeClock, call: Callable[[txn.Table], object]) -> None:
    """``call`` on a fresh table of a writer that dies just before its commit point (its
    metadata deltacommit and blocks landed), with the table lock lapsed by the time it returns
    and its heartbeat still live: its instant stays pending, nobody rolls it back yet."""
    faulty = Faulty(storage_of(uri))
    faulty.arm(1, ops={"put_if_absent"}, crash=True,
               match=lambda path: re.fullmatch(r"_timeline/\d{17}_\d{17}\.commit", path) is not None)
    with pytest.raises(Exception) as info:
        call(table_on(uri, faulty, clock=clock))
    assert injected(info.value) is not None
    clock.advance(10_000)


def _short_lease(uri: str, clock: FakeClock) -> txn.Table:
    """A table whose dead writer's lock lapses long before its instant may be rolled back."""
    properties = {"lock.lease_ms": "5000", "heartbeat.timeout_ms": "600000"}
    table = txn.create_table(uri, SCHEMA, properties=properties, clock=clock)
    table.append(pa.table({"k": [1], "g": ["a"], "v": [10]}, schema=SCHEMA))
    return table


def test_validate_ignores_the_version_of_an_alter_that_died_at_its_commit_point(
        table_uri: str, clock: FakeClock) -> None:
    """The dead ``alter_table``'s ``schemas`` block holds a version 1 nobody reads (its instant
    is pending, then rolled back, never forward); the next change creates version 1 again,
    differently. validate() merged the two and reported two records of one version."""
    _short_lease(table_uri, clock)
    _dies_at_its_commit_point(table_uri, clock, lambda t: t.add_columns([pa.field("a", pa.int32())]))
    table = txn.open_table(table_uri, clock=clock)
    assert table.timeline()[-1].state == "inflight"
    table.add_columns([pa.field("b", pa.string())])
    assert table.schema.names == ["k", "g", "v", "b"]
    report = table.validate()
    assert report.ok, [str(p) for p in report.problems]


def test_validate_reads_the_statistics_of_a_dead_merge_write_in_its_own_schema(
        table_uri: str, clock: FakeClock) -> None:
    """A dead merge write's column ``b`` (string) and the next one's column ``a`` (int32) get
    the same column id; the dead one's statistics must not be read in the live schema."""
    _short_lease(table_uri, clock)
    _dies_at_its_commit_point(table_uri, clock, lambda t: t.append(
        pa.table({"k": [2], "g": ["a"], "v": [3], "b": ["x"]}), schema_mode="merge"))
    table = txn.open_table(table_uri, clock=clock)
    table.append(pa.table({"k": [3], "g": ["a"], "v": [3], "a": pa.array([5], pa.int32())}),
                 schema_mode="merge")
    assert table.schema.names == ["k", "g", "v", "a"]
    report = table.validate()
    assert report.ok, [str(p) for p in report.problems]


# -- found by the table machine's random examples while issue 25 was built --------------------

KEYED = pa.schema([("k", pa.int64(), False), ("g", pa.string()), ("v", pa.int64())])


@pytest.mark.parametrize("write", ["append", "upsert", "overwrite"])
def test_a_stale_handle_takes_data_of_the_latest_schema(memory_uri: str, write: str) -> None:
    """A rename committed elsewhere (or by this handle's own alter whose outcome it never
    learned): data with the new names was refused against the names the handle knew (the
    upsert of a renamed key column with a raw KeyError)."""
    t = txn.create_table(memory_uri, KEYED, record_key="k")
    t.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [10, 20]}, schema=KEYED))
    other = txn.open_table(memory_uri)
    other.rename_column("k", "key")
    other.rename_column("v", "value")
    keys = [3, 4] if write == "append" else [2, 3]
    getattr(t, write)(pa.table({"key": keys, "g": ["x", "y"], "value": [0, 0]}))
    expected = {"append": [1, 2, 3, 4], "upsert": [1, 2, 3], "overwrite": [2, 3]}[write]
    found = other.to_arrow()
    assert found.column_names == ["key", "g", "value"]
    assert sorted(found["key"].to_pylist()) == expected
    with pytest.raises(txn.SchemaMismatchError):  # the old names are not the table's any more
        t.append(pa.table({"k": [5], "g": ["e"], "v": [50]}))
