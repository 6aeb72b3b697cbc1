"""``txn.spark.write``: Spark's executors write the data files, this process commits once.

Built on the public two-phase write (``Table.begin_write``, ``txn.write_files``): the driver (the
caller's process) begins instant ``T`` (segment allocated, heartbeat beating) and runs one Spark
job. Unpartitioned, unkeyed tables of types Spark writes back exactly are written by Spark's own
Parquet writer (:mod:`._native`, its files adopted with ``txn.adopt_files``). Otherwise the job is
``mapInArrow`` over the DataFrame: each task writes its rows with ``txn.write_files`` (partition
folders, sort, target file size, exact statistics, a marker before each file) and, on a keyed
table, one record-index log file of its own. It returns one small report per task: record keys
never reach the driver. ``PendingWrite.commit`` then deletes what failed or retried task
attempts left (files whose markers name ``T`` but that no successful attempt reported), checks
conflicts and commits, like any write. A failed job rolls ``T`` back.

On a keyed table the existing rows of the DataFrame's keys are found first, by a job of their own
on a ``Table.key_probe()`` of the latest snapshot (before anything begins, so a refused append
leaves the table exactly as it was); the write is begun from that snapshot (``read_instant``).
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

import txn

from ._keyed import write_keyed
from ._native import keyed_natively, write_files, writes_natively
from ._tables import Layout, resolve, save_mode
from ._types import aligned, conform, quoted, table_schema
from ._workers import ensure_workers_run_metatxn

#: A task's report: one row per task. The payload is a pickled ``txn.WrittenFiles`` (same code on
#: both ends, never stored): statistics keep their exact Python types (dates, decimals, bytes).
_RESULT = pa.schema([("payload", pa.binary())])
#: How often a write is planned again when a table service overtook it (as local writes).
REPLANS = 3


def _task_identity() -> tuple[int, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    return (context.partitionId(), context.attemptNumber()) if context is not None else (0, 0)


def _write_task(ticket: txn.WriteTicket, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One task: write its rows as data files (and an index log file); report them."""
    schema = ticket.table_schema
    report = txn.write_files(ticket, (conform(batch, schema) for batch in batches), task_id=_task_identity())
    yield pa.RecordBatch.from_pylist([{"payload": pickle.dumps(report)}], schema=_RESULT)


def _find_task(probe: txn.KeyProbe, keys: bool,
               batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One task: the (file, position) of every live row whose key is among its rows' (and the
    keys, when ``keys``: an append's refusal names them)."""
    for batch in batches:
        found = probe.find(batch)
        yield from (found if keys else found.select(["file", "position"])).to_batches()


def _check_not_null(df: Any, columns: list[str]) -> None:
    if columns and df.where(" OR ".join(f"{quoted(c)} IS NULL" for c in columns)).limit(1).count():
        raise txn.SchemaMismatchError(f"column(s) {columns} are not nullable, but the DataFrame holds "
                                      "nulls in them; nothing was written")


def _check_keys(df: Any, columns: list[str]) -> None:
    """Keys must be set and unique within the DataFrame (two small Spark jobs)."""
    if df.where(" OR ".join(f"{quoted(c)} IS NULL" for c in columns)).limit(1).count():
        raise txn.SchemaMismatchError(
            f"record key column(s) {columns} hold nulls in the DataFrame; every row of a keyed "
            "table needs a key")
    repeated = df.groupBy(*columns).count().where("count > 1").limit(5).collect()
    if repeated:
        shown = [tuple(r[c] for c in columns) if len(columns) > 1 else r[columns[0]] for r in repeated]
        raise txn.DuplicateKeyError(
            f"record key {columns} repeats within the DataFrame: {shown} appear more than once; "
            "nothing was written\nHelp: de-duplicate the DataFrame (a Spark DataFrame has no row "
            "order, so metatxn does not pick a winner)")


def _find_existing_rows(table: txn.Table, df: Any, operation: str) -> tuple[txn.KeyProbe, pa.Table]:
    """The live rows whose keys the DataFrame holds, found by the executors in the latest
    snapshot; an append refuses them (``KeyProbe.refuse``, the check ``Table.append`` makes)."""
    probe = table.key_probe()
    columns = table.record_key_columns
    keyed = operation == "append"
    schema = ", ".join([*(f"{quoted(c)} {table_type}" for c, table_type in
                          _spark_types(df, columns) if keyed), "file string", "position long"])
    found = df.select(*columns).mapInArrow(functools.partial(_find_task, probe, keyed), schema).toArrow()
    if keyed:
        probe.refuse(found)
    return probe, found.select(["file", "position"])


def _spark_types(df: Any, columns: list[str]) -> list[tuple[str, str]]:
    types = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    return [(c, types[c]) for c in columns]


def run_job(table: txn.Table, df: Any,
            pending: txn.PendingWrite | txn.PendingCompaction) -> list[txn.WrittenFiles]:
    """The Spark job that writes ``df`` as the data files of ``pending`` (a write, an SQL
    UPDATE's new rows, or a compaction's rewrite): its reports."""
    ticket = dataclasses.replace(pending.ticket, probe=None)  # the keys were found beforehand
    # The ticket's schema: a merge write's is the table's after its change.
    if writes_natively(ticket.table_schema, table.partition_by, table.record_key_columns):
        return [write_files(df, ticket, pending.staging())]
    results = df.mapInArrow(functools.partial(_write_task, ticket), "payload binary").toArrow()
    return [pickle.loads(payload) for payload in results["payload"].to_pylist()]


def write(df: Any, uri: str, mode: str = "append", *, partition_by: list[str] | None = None,
          record_key: str | list[str] | None = None, sort_by: list[str] | None = None,
          properties: dict[str, str] | None = None, storage_options: dict[str, Any] | None = None,
          extra: dict[str, str] | None = None, app_id: str | None = None,
          version: int | None = None, progress: txn.StreamProgress | None = None,
          partitions: str | Mapping[str, Any] | None = None,
          commit_properties: txn.CommitProperties | None = None,
          schema_mode: str | None = None) -> txn.Commit | None:
    """Write a Spark DataFrame into the table at ``uri`` in one commit, creating the table if
    there is none.

    ``commit_properties`` (a ``txn.CommitProperties``), or ``extra``, ``app_id`` and ``version``
    as separate keywords: the commit's metadata, and an idempotent write, as for
    :meth:`txn.Table.append` (None when ``app_id`` committed ``version`` or a later one).
    ``progress`` (a ``txn.StreamProgress``) is the same for a stream's batch
    (``txn.spark.write_stream``).

    ``mode``: ``"append"`` (a new segment), ``"overwrite"`` (replace the whole content),
    ``"upsert"`` (keyed tables: rows whose key exists replace it through delete deltas), and
    Spark's ``"error"`` (``"errorifexists"``: TableExistsError if a table exists) and
    ``"ignore"`` (do nothing if a table exists; returns None). ``partitions`` (``"overwrite"``
    only): what it replaces, as for :meth:`txn.Table.overwrite` (``"dynamic"``: the partitions
    the DataFrame's rows go to; a mapping of every partition column to a value: that partition).

    Where no table exists, it is created from the DataFrame's schema (every column nullable;
    types that cannot be stored raise InvalidOptionError) with the layout options
    ``partition_by``, ``record_key``, ``sort_by`` and ``properties``. Given for an existing
    table, they must agree with it (InvalidOptionError naming the difference). Otherwise the
    DataFrame's columns and Spark types must be the table's (checked before any task runs).
    ``schema_mode="merge"`` lets the DataFrame's schema differ as :meth:`txn.Table.append`'s
    merge does, in the same commit as the rows: columns the table lacks are added (nullable, in
    the DataFrame's order), a column whose type widens the table's widens it, a narrower one is
    cast up, a nullable column the DataFrame lacks is written as nulls; any other difference is
    refused (SchemaMismatchError, nothing begun). A keyed write refuses a key that repeats
    within the DataFrame (``DuplicateKeyError``); a keyed append also refuses keys already in
    the table. Returns the commit (None for an upsert of no rows, or ``"ignore"`` on an
    existing table).

    A table this write creates appears with its commit: if the write fails, there is no table
    at ``uri``. If another writer creates the table meanwhile, this write's instant rolls back
    and it writes again into that table, by ``mode`` (``"error"`` raises TableExistsError).
    """
    arguments: dict[str, Any] = {
        "partition_by": partition_by, "record_key": record_key, "sort_by": sort_by,
        "properties": properties, "storage_options": storage_options, "extra": extra,
        "app_id": app_id, "version": version, "progress": progress, "partitions": partitions,
        "commit_properties": commit_properties, "schema_mode": schema_mode}
    created: list[txn.Table] = []  # a new table, staged: published if nothing committed
    try:
        commit = _write_once(df, uri, mode, created, **arguments)
        for staged in created:
            staged.publish()  # a write that committed nothing (no rows) creates the empty table
        return commit
    except txn.TableExistsError:
        if save_mode(mode) == "error":
            raise
        # Only a staged create that lost to another creator raises this in the other modes:
        # the table exists now, and this write goes into it as into any existing table.
        return _write_once(df, uri, mode, [], **arguments)


def _write_once(df: Any, uri: str, mode: str, created: list[txn.Table], *, partition_by: list[str] | None,
                record_key: str | list[str] | None, sort_by: list[str] | None,
                properties: dict[str, str] | None, storage_options: dict[str, Any] | None,
                extra: dict[str, str] | None, app_id: str | None, version: int | None,
                progress: txn.StreamProgress | None, partitions: str | Mapping[str, Any] | None,
                commit_properties: txn.CommitProperties | None,
                schema_mode: str | None) -> txn.Commit | None:
    mode = save_mode(mode)
    if schema_mode not in (None, "merge"):
        raise txn.InvalidOptionError(f"schema_mode must be None or 'merge', got {schema_mode!r}")
    operation = "append" if mode in ("error", "ignore") else mode
    if partitions is not None and operation != "overwrite":
        raise txn.InvalidOptionError(f"partitions={partitions!r} is for mode='overwrite', not {mode!r}")
    options = txn.CommitProperties.of(commit_properties, extra=extra, app_id=app_id, version=version)
    ensure_workers_run_metatxn(df.sparkSession)
    # A new table is staged: it appears with the commit, so a DataFrame or ``partitions`` the
    # checks below refuse leaves no table.
    table = resolve(uri, df.schema, mode, Layout(partition_by, record_key, sort_by, properties),
                    storage_options, schema_mode=schema_mode)
    if table is None:
        return None
    if table.staged:
        created.append(table)
    columns = table.record_key_columns
    values = table.overwrite_partition(partitions)
    # A keyed table Spark's writer can write is checked on the files written (``_keyed``):
    # nothing to pin, no check before the write.
    keyed_natively = keyed_natively_for(table, df, schema_mode)
    df = _checked(df, table.schema, columns, keys_later=keyed_natively)
    if values:
        _check_in_partition(df, values)
    if table.already_committed(options, stream_progress=progress) or (mode == "upsert" and df.isEmpty()):
        return None
    if partitions is not None and not values and df.isEmpty():
        return None  # the partitions of no rows: nothing is replaced
    # A keyed DataFrame is pinned, so planning and writing it again (when a table service
    # overtook the write) writes the same rows against the new state.
    for attempt in range(REPLANS + 1):
        read: Any = None
        deletes = None
        if columns and operation in ("append", "upsert") and not keyed_natively:
            read, deletes = _find_existing_rows(table, df, operation)
        merge = {"schema_mode": "merge", "data_schema": table_schema(df.schema)} \
            if schema_mode == "merge" else {}
        with table.begin_write(operation, read_instant=read, partitions=partitions,
                               commit_properties=options, stream_progress=progress,
                               **merge) as pending:
            if pending.skipped:
                return None
            # A merge write's ticket has the table's schema after its change: the rows are
            # given exactly its columns (a column the DataFrame lacks as nulls).
            rows = aligned(df, pending.ticket.table_schema) if merge else df
            reports = write_keyed(rows, pending) if keyed_natively else run_job(table, rows, pending)
            try:
                return pending.commit(reports, deletes=deletes, retries=attempt)
            except txn.TxnError as exc:
                if attempt == REPLANS or not pending.retryable(exc):
                    raise
    raise AssertionError("unreachable")  # pragma: no cover


def keyed_natively_for(table: txn.Table, df: Any, schema_mode: str | None) -> bool:
    """Whether this write to a keyed table goes through Spark's writer (:mod:`._keyed`): its
    layout allows it, and the schema the files get is the table's (a merge write's new schema
    is known only once begun: it keeps the ``mapInArrow`` path)."""
    return schema_mode is None and keyed_natively(table.schema, table.partition_by, table.record_key_columns)


def _checked(df: Any, schema: pa.Schema, columns: list[str], *, keys_later: bool = False) -> Any:
    """``df`` checked for null and repeated keys and nulls in non-nullable columns (small Spark
    jobs); pinned first on keyed tables, so the rows checked are the rows written even when the
    input is not deterministic. ``keys_later``: the keys are checked on the files written
    (:mod:`._keyed`), nothing pinned."""
    if columns and not keys_later:
        df = df.localCheckpoint(eager=True)
        _check_keys(df, columns)
    _check_not_null(df, [f.name for f in schema
                         if not f.nullable and f.name not in columns and f.name in df.columns])
    return df


def _check_in_partition(df: Any, values: dict[str, Any]) -> None:
    """SchemaMismatchError unless every row of ``df`` holds the named partition's ``values``."""
    from pyspark.sql import functions as F

    outside = None
    for column, value in values.items():
        differs = ~F.col(column).eqNullSafe(F.lit(value))
        outside = differs if outside is None else outside | differs
    if outside is not None and not df.where(outside).isEmpty():
        raise txn.SchemaMismatchError(
            f"overwrite of partition {values}: the DataFrame holds rows of other partitions; nothing "
            "was written\nHelp: give only rows of that partition, or use partitions='dynamic'")
