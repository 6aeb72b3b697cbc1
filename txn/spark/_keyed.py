"""Keyed writes: Spark's own Parquet writer first, then the record index from what it wrote.

``txn.spark.write`` to an unpartitioned keyed table of types Spark writes back exactly begins
the write, has Spark write the DataFrame into the staging folder (:mod:`._native`) and adopts
the files (``txn.adopt_files(..., index_apart=True)``). One more job then reads the written
files' key columns with ``_metadata.file_name`` and ``_metadata.row_index`` (a key-column scan
of files just written: the rows checked are exactly the rows written, so the DataFrame needs no
pinning and is evaluated once), routes each row by its key's record-index hash modulo
``P``, a multiple of the finest shard-node count of the index at the write's snapshot
(``KeyProbe.node_count()``), so each task of the second stage holds whole shard nodes: every
row of a key, and nothing of another task's nodes. Each such task calls ``txn.write_index``:
null and repeated keys refused, the keys looked up in the snapshot read (a keyed append's
existing keys are refused at the commit, an upsert's become its deletes) through the same
``RecordIndex`` that then writes the task's log file, in the node layout that lookup resolved.

Spark's hash partitioning puts a row in partition ``pmod(murmur3(value, 42), P)``, so the value
routed is not ``h % P`` itself but a number Spark's hash sends to that partition
(:func:`partition_values`): one task per node range, none doubled up by a hash collision.

A refusal in a task (a null or repeated key) comes back as its report, not as a failed task,
and is raised on the driver as the ``TxnError`` it is; the pending write then rolls back.
"""

from __future__ import annotations

import functools
import pickle
import posixpath
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import txn

from ._native import write_files
from ._read import native_scan
from ._types import quoted, spark_schema

_FILE, _POSITION, _PART = "__metatxn_file", "__metatxn_position", "__metatxn_part"
#: A task's report (a pickled ``txn.WrittenFiles``) or its refusal (a pickled ``TxnError``).
_RESULT = pa.schema([("payload", pa.binary()), ("refused", pa.bool_())])
_MASK = 0xFFFFFFFF


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_int_hash(value: int, seed: int = 42) -> int:
    """Spark's ``hash(<int>)`` (Murmur3_x86_32.hashInt), what its hash partitioning applies."""
    k = _rotl((value * 0xCC9E2D51) & _MASK, 15) * 0x1B873593 & _MASK
    h = (_rotl(seed ^ k, 13) * 5 + 0xE6546B64) & _MASK
    h ^= 4
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


@functools.lru_cache(maxsize=64)
def partition_values(count: int) -> tuple[int, ...]:
    """For each partition ``p < count``, an int Spark's hash partitioning into ``count``
    partitions sends to ``p``."""
    found: dict[int, int] = {}
    value = 0
    while len(found) < count:
        found.setdefault(spark_int_hash(value) % count, value)
        value += 1
    return tuple(found[p] for p in range(count))


def _route(ticket: txn.WriteTicket, names: list[str], count: int,
           batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each row's file as a number, and the value that routes it to its node range's task."""
    values = np.array(partition_values(count), dtype=np.int32)
    known = pa.array(names, pa.string())
    columns = list(ticket.key_columns)
    for batch in batches:
        valid = np.ones(batch.num_rows, dtype=bool)
        for c in columns:
            if batch.column(c).null_count:
                valid &= batch.column(c).is_valid().to_numpy(zero_copy_only=False)
        hashes = np.zeros(batch.num_rows, dtype=np.uint64)  # a null key: any task refuses it
        hashes[valid] = ticket.key_hashes(batch.filter(pa.array(valid)) if not valid.all() else batch)
        part = (hashes % np.uint64(count)).astype(np.int64)
        yield pa.RecordBatch.from_arrays(
            [*(batch.column(c) for c in columns), pc.index_in(batch.column(_FILE), value_set=known),
             batch.column(_POSITION), pa.array(values[part])],
            names=[*columns, _FILE, _POSITION, _PART])


def _index_task(ticket: txn.WriteTicket, paths: list[str],
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One node range's rows: their index log file, existing keys found, refusals reported."""
    from ._write import _task_identity

    received = [b for b in batches if b.num_rows]
    if not received:
        return
    table = pa.Table.from_batches(received)
    columns = list(ticket.key_columns)
    rows = pa.table([*(table[c] for c in columns), pa.array(paths, pa.string()).take(table[_FILE]),
                     table[_POSITION]], names=[*columns, "file", "position"])
    try:
        report: Any = txn.write_index(ticket, rows, task_id=_task_identity())
        refused = False
    except txn.TxnError as error:
        report, refused = error, True
    yield pa.RecordBatch.from_pylist([{"payload": pickle.dumps(report), "refused": refused}], schema=_RESULT)


def node_partitions(spark: Any, ticket: txn.WriteTicket) -> int:
    """How many tasks index a write: about the session's shuffle partitions, and so that each
    holds whole shard nodes, a divisor of the root count or a multiple of the finest node
    count of the index at the snapshot the write read (``h % P`` then decides the node)."""
    wanted = max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "200")))
    roots = max(1, ticket.shards)
    if wanted <= roots:
        return max(d for d in range(1, wanted + 1) if roots % d == 0)
    nodes = ticket.probe.node_count() if ticket.probe is not None else roots
    return nodes * -(-wanted // nodes)


def write_keyed(df: Any, pending: txn.PendingWrite) -> list[txn.WrittenFiles]:
    """Write ``df`` into the keyed table of ``pending`` with Spark's writer, then its record
    index (see the module docstring); the reports for ``pending.commit``. Raises the
    ``TxnError`` a task refused the rows with."""
    from pyspark.sql import functions as F

    ticket = pending.ticket
    written = write_files(df, ticket, pending.staging(), index_apart=True)
    if not written.files:
        return [written]
    spark = df.sparkSession
    columns = list(ticket.key_columns)
    schema = ticket.table_schema
    count = node_partitions(spark, ticket)
    keys = spark_schema(pa.schema([schema.field(c) for c in columns]))
    routed = ", ".join([*(f"{quoted(f.name)} {f.dataType.simpleString()}" for f in keys.fields),
                        f"{_FILE} int", f"{_POSITION} bigint", f"{_PART} int"])
    names = [posixpath.basename(path) for path in written.paths]
    scan = native_scan(spark, spark_schema(schema), [ticket.root + path for path in written.paths]).select(
        *[F.col(quoted(c)) for c in columns], F.col("_metadata.file_name").alias(_FILE),
        F.col("_metadata.row_index").alias(_POSITION))
    results = (scan.mapInArrow(functools.partial(_route, ticket, names, count), routed)
               .repartition(count, _PART)
               .mapInArrow(functools.partial(_index_task, ticket, written.paths),
                           "payload binary, refused boolean")
               .toArrow())
    reports = [pickle.loads(payload) for payload in results["payload"].to_pylist()]
    refusals = [r for r in reports if isinstance(r, BaseException)]
    if refusals:  # a null key explains a repeat of it too: say that first
        raise min(refusals, key=lambda e: not isinstance(e, txn.SchemaMismatchError))
    return [written, *reports]
