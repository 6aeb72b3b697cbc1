"""What the table state machine's schema changes found on main (issue 24, wave 2), each as a
minimal reproduction, ``xfail(strict=True)`` until the branch that owns it is merged: then it
passes, the mark must go, and the machine's switch for it (``tests/property/table_machine/
schema.py``) is turned on."""

from __future__ import annotations

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txn

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


@pytest.mark.xfail(strict=True, reason=(
    "add_segment checks the folder against the creation schema (version 0): after "
    "rename_column('k', 'k8') it raises SchemaMismatchError \"column 'k' (int64) of the table is "
    "missing ... the file's columns: ['k8', 'v']\" (readers: external segments across versions)"))
def test_add_segment_after_a_rename_takes_the_new_name(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"], record_key="k")
    table.append(pa.table({"k": [1], "g": ["a"], "v": [10]}, schema=SCHEMA))
    table.rename_column("k", "k8")
    folder = _external_folder(memory_uri, pa.table({"k8": [2], "v": [20]}))
    table.add_segment(folder, "parquet", partition="g:string")
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: r["k8"]) == [
        {"k8": 1, "g": "a", "v": 10}, {"k8": 2, "g": "a", "v": 20}]


@pytest.mark.xfail(strict=True, reason=(
    "after add_columns([a int32]), a folder holding column a is added, but reading it raises "
    "CorruptMetadataError \"... found KeyError: 'Column a does not exist in schema'\" (the "
    "external reader projects with the creation schema; readers: external segments across "
    "versions)"))
def test_add_segment_after_add_columns_reads_the_new_column(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"], record_key="k")
    table.append(pa.table({"k": [1], "g": ["a"], "v": [10]}, schema=SCHEMA))
    table.add_columns([pa.field("a", pa.int32())])
    folder = _external_folder(memory_uri, pa.table({"k": [2], "v": [20],
                                                   "a": pa.array([7], pa.int32())}))
    table.add_segment(folder, "parquet", partition="g:string")
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 1, "g": "a", "v": 10, "a": None}, {"k": 2, "g": "a", "v": 20, "a": 7}]


@pytest.mark.xfail(strict=True, reason=(
    "validate() checks every live file against the current schema: after add_columns([a int32]) "
    "each older file is an 'unreadable file: ... expected a Parquet data file of the table's "
    "schema, found column 'a' missing' (docs: validate() checks of versions)"))
def test_validate_after_add_columns_finds_nothing(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"], record_key="k")
    table.append(pa.table({"k": [1], "g": ["a"], "v": [10]}, schema=SCHEMA))
    table.add_columns([pa.field("a", pa.int32())])
    report = table.validate()
    assert report.ok, [str(p) for p in report.problems]


@pytest.mark.xfail(strict=True, reason=(
    "a folder added by ADD SEGMENT before rename_column('g', 'g5') (its partition column) no "
    "longer reads: CorruptMetadataError \"... found KeyError: 'Column g5 does not exist in "
    "schema'\"; add_columns likewise (readers: external segments across versions)"))
def test_an_external_segment_reads_after_a_rename_of_the_partition_column(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"])
    folder = _external_folder(memory_uri, pa.table({"k": [2], "v": [20]}))
    table.add_segment(folder, "parquet", partition="g:string")
    table.rename_column("g", "g5")
    assert table.to_arrow().to_pylist() == [{"k": 2, "g5": "a", "v": 20}]


@pytest.mark.xfail(strict=True, reason=(
    "after add_columns, compact('major') of a file of the older schema that has a delete delta "
    "raises CorruptMetadataError \"... found column 'a' missing (the table's is int32)\" (it "
    "reads the file with the current schema; readers: compaction)"))
def test_compaction_of_an_old_file_with_deletes_after_add_columns(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"], record_key="k")
    table.append(pa.table({"k": [1, 2], "g": ["a", "a"], "v": [10, 20]}, schema=SCHEMA))
    table.append(pa.table({"k": [3], "g": ["b"], "v": [30]}, schema=SCHEMA))
    table.delete(keys=[1])
    table.add_columns([pa.field("a", pa.int32())])
    table.compact("major")
    assert sorted(table.to_arrow().to_pylist(), key=lambda r: r["k"]) == [
        {"k": 2, "g": "a", "v": 20, "a": None}, {"k": 3, "g": "b", "v": 30, "a": None}]


@pytest.mark.xfail(strict=True, reason=(
    "after rename_column('g', 'g5') (the partition column), delete(where=...) and update over "
    "files written before raise KeyError: 'g'; after add_columns or a rename of another column "
    "they raise CorruptMetadataError \"... found column ... missing\" (readers: update/delete)"))
def test_delete_where_after_renaming_the_partition_column(memory_uri: str) -> None:
    import pyarrow.compute as pc

    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"])
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [10, 20]}, schema=SCHEMA))
    table.rename_column("g", "g5")
    table.delete(where=pc.field("v") >= 20)
    assert table.to_arrow().to_pylist() == [{"k": 1, "g5": "a", "v": 10}]


@pytest.mark.xfail(strict=True, reason=(
    "after rename_column('g', 'g5') (the partition column), Snapshot.files() and t.partitions() "
    "raise KeyError: 'g' (the folder g=a/ is parsed by the current names; readers: partition "
    "folder names through versions)"))
def test_files_after_renaming_the_partition_column(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["g"])
    table.append(pa.table({"k": [1], "g": ["a"], "v": [10]}, schema=SCHEMA))
    table.rename_column("g", "g5")
    assert [f.partition for f in table.snapshot().files()] == [{"g5": "a"}]
