"""The file table: a snapshot's live data files as one Arrow table, built from the metadata
table's partitions with Arrow kernels only (no Python object per file).

Columns, in this order (``stats`` only when asked for):

=================  ==========================================================================
``path``           string: the data file's path relative to the table's location (the key of the
                   metadata table's ``files`` partition), or an external segment's file URL
``location``       string: where the file is, the table location joined with ``path`` (what
                   ``DataFile.path`` holds, and what an engine opens); an external segment's
                   file is keyed by its URL, which is its location
``segment``        string: the segment (load) the file belongs to
``partition``      string: its Hive-style partition path (``day=2026-01-01/region=eu``), ``""``
                   when the table is not partitioned
``format``         string: ``parquet`` for files the table wrote; an external segment's format
``rows``           int64: rows in the file, deleted ones included
``size``           int64: bytes
``instant``        string: the instant that wrote the file
``deleted_rows``   int64: rows deleted by the file's live delete deltas (0 without any);
                   ``rows - deleted_rows`` rows are live
``delete_files``   list<string>: locations of the file's live delete deltas (Parquet files of
                   deleted row positions, disjoint), empty without any
``schema_id``      int64: the table version whose schema the file was written with (0: the
                   table's first, and every file written before versions existed); a file of
                   another version than the snapshot's is read by column id
``stats``          struct with one field per column that has statistics (primitive columns),
                   each a struct ``min``, ``max`` (typed like the column; null where unknown),
                   ``nulls``, ``count`` (int64: null values and rows); the whole struct is null
                   for a file without statistics (an external segment's)
=================  ==========================================================================

Rows keep the metadata table's order (its base's key order, then newer files): sorting ten
thousand paths on every read would cost more than the read itself.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import field_id, live

#: The columns of a file table without statistics.
FILE_COLUMNS = ("path", "location", "segment", "partition", "format", "rows", "size", "instant",
                "deleted_rows", "delete_files", "schema_id")


def _located(paths: pa.Array | pa.ChunkedArray, prefix: str) -> pa.Array | pa.ChunkedArray:
    """Table paths joined to the table's location; an external file's key is its location."""
    joined = pc.binary_join_element_wise(pa.scalar(prefix, pa.string()), paths, "")
    return pc.if_else(pc.match_substring(paths, "://"), paths, joined)


def file_table(files: pa.Table, deletes: pa.Table | None, prefix: str, *,
               located: bool = True) -> pa.Table:
    """The file table (without ``stats``) of the live rows ``files`` of the ``files`` partition,
    with the live rows of ``deletes``; ``prefix`` is the table location locations start with.

    ``located=False`` leaves out the ``location`` column and keeps ``delete_files``
    table-relative (planning needs neither; :func:`with_locations` makes them locations).
    """
    paths = files["path"]
    count = files.num_rows
    deleted_rows: pa.Array = pa.array(np.zeros(count, np.int64))
    no_deltas = pa.ListArray.from_arrays(pa.array(np.zeros(count + 1, np.int32)),
                                         pa.array([], pa.string()))
    delete_files: pa.Array = no_deltas
    current = live(deletes) if deletes is not None and deletes.num_rows else None
    if current is not None and current.num_rows and count:
        # One row per data file with deltas, its deltas in the partition's order.
        grouped = (current.select(["file", "path", "rows"])
                   .group_by("file", use_threads=False)
                   .aggregate([("rows", "sum"), ("path", "list")]))
        where = pc.index_in(paths, value_set=grouped["file"])
        deleted_rows = pc.fill_null(pc.take(grouped["rows_sum"], where), 0)
        lists = pc.take(grouped["path_list"], where).combine_chunks()
        # Rebuilt from the offsets alone: a file without deltas (a null list, zero long) gets
        # an empty list.
        delete_files = pa.ListArray.from_arrays(lists.offsets, lists.values)
    table = pa.table({
        "path": paths,
        "segment": files["segment"],
        "partition": files["partition"],
        "format": files["format"],
        "rows": files["rows"],
        "size": files["size"],
        "instant": files["instant"],
        "deleted_rows": deleted_rows,
        "delete_files": delete_files,
        "schema_id": (pc.fill_null(files["schema_id"], 0) if "schema_id" in files.column_names
                      else pa.array(np.zeros(count, np.int64))),
    })
    return with_locations(table, prefix) if located else table


def with_locations(table: pa.Table, prefix: str) -> pa.Table:
    """``table``, built with ``located=False``, with its ``location`` column (second, as
    documented) and its ``delete_files`` as locations."""
    deltas = table["delete_files"].combine_chunks()
    if len(deltas.values):
        index = table.schema.get_field_index("delete_files")
        table = table.set_column(index, table.schema.field(index), pa.ListArray.from_arrays(
            deltas.offsets, _located(deltas.values, prefix)))
    return table.add_column(1, pa.field("location", pa.string()), _located(table["path"], prefix))


def with_stats(table: pa.Table, column_stats: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with its ``stats`` column, taken from the ``column_stats`` partition.

    The partition names each column's statistics by its id; ``stats`` names them by the column
    names of ``schema`` (the snapshot's, with ids). A column of ``schema`` that has no
    statistics there is not in ``stats``.
    """
    partition_type = column_stats.schema.field("columns").type
    names = {str(field_id(f)): f.name for f in schema}
    kept = [i for i in range(partition_type.num_fields) if partition_type.field(i).name in names]
    stats_type = pa.struct([partition_type.field(i).with_name(names[partition_type.field(i).name])
                            for i in kept])
    if table.num_rows == 0 or column_stats.num_rows == 0:
        return table.append_column(pa.field("stats", stats_type), pa.nulls(table.num_rows, stats_type))
    current = live(column_stats)
    paths = table["path"]
    if current.num_rows == table.num_rows and pc.all(pc.equal(current["path"], paths)).as_py():
        # Both partitions add and remove the same keys in the same commits, so their merged
        # rows usually line up: one comparison instead of a hash join.
        stats = current["columns"]
    else:
        stats = pc.take(column_stats["columns"],
                        pc.index_in(paths, value_set=column_stats["path"]))
    if stats_type != partition_type:
        stats = _renamed(stats, kept, stats_type)
    return table.append_column(pa.field("stats", stats_type), stats)


def _renamed(stats: pa.Array | pa.ChunkedArray, kept: list[int],
             stats_type: pa.StructType) -> pa.Array:
    """``stats`` (a struct array) with only the children ``kept``, named as ``stats_type``."""
    array = stats.combine_chunks() if isinstance(stats, pa.ChunkedArray) else stats
    if isinstance(array, pa.ChunkedArray):  # no chunks at all
        return pa.nulls(0, stats_type)
    if not kept:
        return pa.array([{} if valid else None for valid in pc.is_valid(array).to_pylist()],
                        stats_type)
    children = array.flatten()  # offsets and the struct's own nulls applied
    return pa.StructArray.from_arrays([children[i] for i in kept], fields=list(stats_type),
                                      mask=pc.is_null(array))
