"""Keyed writes: Spark's own Parquet writer first, then the record index from what it wrote.

``txn.spark.write`` to an unpartitioned keyed table of types Spark writes back exactly begins
the write, has Spark write the DataFrame into the staging folder (:mod:`._native`) and adopts
the files (``txn.adopt_files(..., index_apart=True)``). One more job then writes the record
index from the files written: the rows checked are exactly the rows written, so the DataFrame
needs no pinning and is evaluated once, by the write.

That job has ``P`` tasks, one per *node range*: the keys whose record-index hash ``h`` has
``h % P == p``. ``P`` is about the session's parallelism and either divides the root shard
count or is a multiple of the finest shard-node count of the index at the snapshot the write
read (``KeyProbe.node_count()``), so each range is made of whole shard nodes. Each task reads
the key columns of every file written (positions are row numbers in file order), keeps the
rows of its range and calls ``txn.write_index``: null and repeated keys refused, the keys
looked up in the snapshot read (a keyed append's existing keys are refused at the commit, an
upsert's become its deletes) through the same ``RecordIndex`` that then writes the task's log
file, in the node layout that lookup resolved.

Why each task reads every file's keys instead of a shuffle of the keys by node range: the
shuffle moves every key from the JVM to Python and back, and again after the exchange; at TPC-H
scale 0.1 (600,000 keys) that job took 5.2 s against 0.5 s for this one (bench/README.md). The
price is that every task reads and hashes every key of the write (key columns only): ``P``
times about 50 ms per million keys, small at the parallelism of a few executors.

A refusal in a task (a null or repeated key) comes back as its report, not as a failed task,
and is raised on the driver as the ``TxnError`` it is; the pending write then rolls back.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import txn

from ._native import write_files

_NO_ROWS = np.zeros(0, dtype=np.int64)


def _range_rows(ticket: txn.WriteTicket, paths: list[str], count: int, part: int) -> pa.Table | None:
    """The rows of node range ``part`` among the files written: key columns, file, position.
    A file holding a null key goes whole to range 0, whose ``write_index`` refuses it."""
    columns = list(ticket.key_columns)
    storage = txn.open_storage(ticket.uri, ticket.storage_options)
    provider = getattr(storage, "arrow_filesystem", None)  # every store Spark writes to has one
    if provider is None:
        raise txn.InvalidOptionError(f"storage {storage.uri!r} offers no pyarrow filesystem to read "
                                     "the written files' keys with")
    filesystem, root = provider()
    pieces = []
    for path in paths:
        keys = pq.read_table(f"{root}/{path}", columns=columns, filesystem=filesystem)
        if any(keys[c].null_count for c in columns):
            mine = np.arange(keys.num_rows) if part == 0 else _NO_ROWS
        else:
            mine = np.flatnonzero(ticket.key_hashes(keys) % np.uint64(count) == np.uint64(part))
        if len(mine):
            chosen = keys.take(pa.array(mine))
            pieces.append(pa.table([*(chosen[c] for c in columns), pa.repeat(pa.scalar(path), len(mine)),
                                    pa.array(mine, pa.int64())], names=[*columns, "file", "position"]))
    return pa.concat_tables(pieces) if pieces else None


def _index_task(ticket: txn.WriteTicket, paths: list[str], count: int,
                parts: Iterator[int]) -> Iterator[bytes]:
    """One node range per element: its index log file and existing keys (a pickled
    ``txn.WrittenFiles``), or the ``TxnError`` that refused its rows (pickled)."""
    from ._write import _task_identity

    for part in parts:
        rows = _range_rows(ticket, paths, count, part)
        if rows is None:
            continue
        try:
            report: Any = txn.write_index(ticket, rows, task_id=(part, _task_identity()[1]))
        except txn.TxnError as error:
            report = error
        yield pickle.dumps(report)


def node_ranges(spark: Any, ticket: txn.WriteTicket) -> int:
    """How many node ranges (tasks) index a write: about the session's parallelism, a divisor
    of the root count or a multiple of the finest node count (each range whole nodes)."""
    wanted = max(1, int(spark.sparkContext.defaultParallelism))
    roots = max(1, ticket.shards)
    if wanted <= roots:
        return max(d for d in range(1, wanted + 1) if roots % d == 0)
    nodes = ticket.probe.node_count() if ticket.probe is not None else roots
    return nodes * -(-wanted // nodes)


def write_keyed(df: Any, pending: txn.PendingWrite) -> list[txn.WrittenFiles]:
    """Write ``df`` into the keyed table of ``pending`` with Spark's writer, then its record
    index (see the module docstring); the reports for ``pending.commit``. Raises the
    ``TxnError`` a task refused the rows with."""
    ticket = pending.ticket
    written = write_files(df, ticket, pending.staging(), index_apart=True)
    if not written.files:
        return [written]
    count = node_ranges(df.sparkSession, ticket)
    payloads = df.sparkSession.sparkContext.parallelize(range(count), count).mapPartitions(
        functools.partial(_index_task, ticket, written.paths, count)).collect()
    reports = [pickle.loads(payload) for payload in payloads]
    refusals = [r for r in reports if isinstance(r, BaseException)]
    if refusals:  # a null key explains a repeat of it too: say that first
        raise min(refusals, key=lambda e: not isinstance(e, txn.SchemaMismatchError))
    return [written, *reports]
