"""Column statistics keyed by column id, through a table: the file table still names them by
column, and tables written before ids (statistics keyed by name) read and prune unchanged."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.dataset as ds

import txn
from metatxn import indexes
from metatxn.indexes._blocks import read_block, write_block
from metatxn.indexes._layout import parse_listing, partition_folder
from tests.unit.txn.helpers import SCHEMA, rows, storage_of


def _stats_blocks(uri: str) -> list[str]:
    return [b.path for b in parse_listing(storage_of(uri).list(partition_folder(indexes.COLUMN_STATS)))[1]]


def _kept(table: txn.Table, expression: ds.Expression) -> list[str]:
    return sorted(table.snapshot().file_table(expression)["path"].to_pylist())


def test_blocks_are_keyed_by_id_and_files_record_their_version(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(10)))
    storage = storage_of(table_uri)
    block = read_block(storage, _stats_blocks(table_uri)[0], indexes.column_stats_schema(SCHEMA))
    assert block.schema.metadata == {b"metatxn.stats_key": b"id"}
    assert block.schema.field("columns").type.names == ["1", "2", "3", "4"]
    completed = {i.time: i.completed_at or "" for i in table.timeline() if i.state == "completed"}
    files = indexes.MetadataTable(storage, table.schema).resolve(
        completed, None, partitions=(indexes.FILES,)).files
    assert files is not None and files["schema_id"].to_pylist() == [0]
    stats = table.snapshot().file_table()["stats"]
    assert stats.type.names == ["id", "region", "day", "price"]
    assert stats[0].as_py()["id"] == {"min": 0, "max": 9, "nulls": 0, "count": 10}


def test_statistics_keyed_by_name_still_prune(table_uri: str) -> None:
    """A table whose blocks were written before column ids: children named by column, no
    marker. They are read through version 0's ids (assign_ids of table.json's schema)."""
    table = txn.create_table(table_uri, SCHEMA)
    first = table.append(rows(range(10)))
    table.append(rows(range(100, 110)))
    storage = storage_of(table_uri)
    names = {str(i): name for name, i in indexes.ids_by_name(indexes.assign_ids(SCHEMA)).items()}
    for path in _stats_blocks(table_uri):
        block = read_block(storage, path, indexes.column_stats_schema(SCHEMA))
        columns = block["columns"].combine_chunks()
        old = pa.StructArray.from_arrays(
            columns.flatten(), fields=[f.with_name(names[f.name]) for f in columns.type])
        storage.delete(path)
        write_block(storage, path, pa.table({"path": block["path"], "deleted": block["deleted"],
                                             "columns": old}))
    reopened = txn.open_table(table_uri)
    assert _kept(reopened, ds.field("id") < 5) == sorted(first.paths_added)
    assert reopened.snapshot().file_table()["stats"].type.names == ["id", "region", "day", "price"]
    assert reopened.snapshot().count(ds.field("id") >= 105) == 5
