"""What the table state machine's schema changes found while issue 24 was built, each as a
minimal reproduction kept as a regression test: ADD SEGMENT, validate(), compaction, deletes and
updates, and the listing of files across schema versions (renamed partition column included)."""

from __future__ import annotations

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

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
