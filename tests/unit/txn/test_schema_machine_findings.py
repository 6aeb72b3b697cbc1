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
