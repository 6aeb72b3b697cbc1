"""``txn.spark.write``: Spark's executors write the data files, this process commits once.

The driver (the caller's process) runs the commit protocol: it begins instant ``T`` (segment
allocated, heartbeat beating) and runs one Spark job. Unpartitioned, unkeyed tables of types
Spark writes back exactly are written by Spark's own Parquet writer (:mod:`._native`). Otherwise
the job is ``mapInArrow`` over the DataFrame: each
task writes its rows with the same :class:`~txn._writer.DataFileWriter` the local path uses
(partition folders, sort, target file size, exact statistics, a marker before each file), and,
on a keyed table, one record-index log file of its own (``<T>.<part>.log.arrow``). It returns
one small row per file and one per index file: record keys never reach the driver. The driver
then deletes what failed or retried task attempts left (files whose markers name ``T`` but that
no successful attempt reported), checks conflicts and commits, like any write. A failed job
rolls ``T`` back.
"""

from __future__ import annotations

import functools
import pickle
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from indexes import FILES, DoneCompactions, RecordIndex
from timeline import (
    DuplicateKeyError,
    InvalidOptionError,
    SchemaMismatchError,
    TableExistsError,
    open_storage,
)

from .._commit import Overwrite, Pending, Progress, RowChanges, Written
from .._context import StagedCreate, TableContext, delete_compaction_threshold, target_file_bytes
from .._files import (
    DataFileWriter,
    DataStore,
    FileStatus,
    LiveDeltas,
    Positions,
    marked_paths,
    scan_file,
    stage_deletes,
)
from .._results import Commit
from .._rows import SHOWN, describe, index_keys
from .._segments import after_load
from .._write import State, already_committed, app_progress, commit_planned, layout_scope
from ._native import write_files, writes_natively
from ._tables import Layout, resolve, save_mode
from ._types import conform, quoted
from ._workers import ensure_workers_run_metatxn

#: A task's report: one row per file or index file. The payload is pickled (same code on both
#: ends, never stored): statistics keep their exact Python types (dates, decimals, bytes).
_RESULT = pa.schema([("kind", pa.string()), ("payload", pa.binary())])
_FOUND = pa.schema([("file", pa.string()), ("position", pa.int64())])


@dataclass(frozen=True)
class _Job:
    """What every task needs to write its part of instant ``instant`` (pickled to executors)."""

    uri: str
    storage_options: dict[str, Any] | None
    schema: bytes
    instant: str
    segment: str
    partition_by: list[str]
    sort_by: list[str]
    key_columns: list[str]
    shards: int
    target_file_bytes: int


def _task_identity() -> tuple[int, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    return (context.partitionId(), context.attemptNumber()) if context is not None else (0, 0)


def _write_task(job: _Job, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One task: write its rows as data files (and an index log file); report them."""
    partition, attempt = _task_identity()
    schema = pa.ipc.read_schema(pa.py_buffer(job.schema))
    storage = open_storage(job.uri, job.storage_options)
    writer = DataFileWriter(
        DataStore(storage), schema, instant_time=job.instant, segment=job.segment,
        partition_by=job.partition_by, sort_by=job.sort_by, target_file_bytes=job.target_file_bytes,
        new_token=lambda: f"{partition:05d}a{attempt}{secrets.token_hex(4)}", key_columns=job.key_columns,
    )
    statuses = writer.write(_refuse_null_keys(conform(batch, schema), job.key_columns) for batch in batches)
    rows = [{"kind": "file", "payload": pickle.dumps(s)} for s in statuses]
    if job.key_columns and writer.keys:
        index = RecordIndex(storage, [schema.field(k).type for k in job.key_columns], job.shards)
        located = writer.key_locations()  # every file's keys and places, built once
        entries = index.entries(index_keys(located.keys, job.key_columns), segment=job.segment,
                                file=located.file, position=located.position, instant=job.instant)
        part = partition * 1000 + attempt
        counts = index.write(job.instant, entries, part=part)
        rows.append({"kind": "index", "payload": pickle.dumps({"part": part, "shards": counts})})
    yield pa.RecordBatch.from_pylist(rows, schema=_RESULT)


def _refuse_null_keys(batch: pa.RecordBatch, key_columns: list[str]) -> pa.RecordBatch:
    nulls = [c for c in key_columns if batch.column(c).null_count]
    if nulls:
        raise SchemaMismatchError(f"record key column(s) {nulls} hold nulls; every row of a keyed "
                                  "table needs a key; nothing was written")
    return batch


@dataclass(frozen=True)
class _Lookup:
    """What a task needs to find existing rows of its keys in the record index."""

    uri: str
    storage_options: dict[str, Any] | None
    key_types: bytes
    key_columns: list[str]
    shards: int
    completed: dict[str, str]
    bound: str
    done: DoneCompactions
    live_files: list[str]


def _find_task(job: _Lookup, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One task: the (file, position) of every live row whose key is among its rows'."""
    types = pa.ipc.read_schema(pa.py_buffer(job.key_types))
    index = RecordIndex(open_storage(job.uri, job.storage_options), list(types.types), job.shards)
    live = pa.array(job.live_files, pa.string())
    for batch in batches:
        keys = index_keys(pa.Table.from_batches([batch]), job.key_columns)
        entries = index.lookup(keys, job.completed, job.bound, job.done)
        alive = entries.filter(pc.and_(pc.invert(entries["deleted"]),
                                       pc.is_in(entries["file"], value_set=live)))
        yield pa.RecordBatch.from_pydict({"file": alive["file"].combine_chunks(),
                                          "position": alive["position"].combine_chunks()}, schema=_FOUND)


def _spark_path(table: TableContext, path: str) -> str:
    return table.store.location(path)


def _check_not_null(df: Any, columns: list[str]) -> None:
    if columns and df.where(" OR ".join(f"{quoted(c)} IS NULL" for c in columns)).limit(1).count():
        raise SchemaMismatchError(f"column(s) {columns} are not nullable, but the DataFrame holds "
                                  "nulls in them; nothing was written")


def _check_keys(df: Any, columns: list[str]) -> None:
    """Keys must be set and unique within the DataFrame (two small Spark jobs)."""
    if df.where(" OR ".join(f"{quoted(c)} IS NULL" for c in columns)).limit(1).count():
        raise SchemaMismatchError(
            f"record key column(s) {columns} hold nulls in the DataFrame; every row of a keyed "
            "table needs a key")
    repeated = df.groupBy(*columns).count().where("count > 1").limit(5).collect()
    if repeated:
        shown = [tuple(r[c] for c in columns) if len(columns) > 1 else r[columns[0]] for r in repeated]
        raise DuplicateKeyError(
            f"record key {columns} repeats within the DataFrame: {shown} appear more than once; "
            "nothing was written\nHelp: de-duplicate the DataFrame (a Spark DataFrame has no row "
            "order, so metatxn does not pick a winner)")


def _find_existing_rows(table: TableContext, df: Any, state: State) -> pa.Table:
    """The live rows whose keys the DataFrame holds, found by the executors."""
    index = table.metadata.record_index
    assert index is not None
    columns = table.record_key_columns
    if state.read_at is None:
        return _FOUND.empty_table()
    job = _Lookup(
        uri=table.uri, storage_options=table.storage_options, key_columns=columns,
        key_types=pa.schema([table.schema.field(c) for c in columns]).serialize().to_pybytes(),
        shards=index.shards, completed={i.time: i.completed_at or "" for i in state.view.completed()},
        bound=state.read_at, done=table.metadata.done_compactions(),
        live_files=state.live_files["path"].to_pylist())
    found = df.select(*columns).mapInArrow(functools.partial(_find_task, job), "file string, position long")
    return found.toArrow()


def run_job(table: TableContext, df: Any, pending: Pending, deleted: dict[str, Positions],
             current: LiveDeltas) -> Written:
    assert pending.segment is not None
    index = table.metadata.record_index
    job = _Job(
        uri=table.uri, storage_options=table.storage_options,
        schema=table.schema.serialize().to_pybytes(), instant=pending.instant.time,
        segment=pending.segment, partition_by=table.partition_by, sort_by=table.sort_by,
        key_columns=table.record_key_columns, shards=index.shards if index is not None else 0,
        target_file_bytes=target_file_bytes(table.config.properties),
    )
    shards: dict[int, int] = {}
    if writes_natively(table.schema, table.partition_by, table.record_key_columns):
        statuses = write_files(table, df, pending.instant.time, pending.segment)
    else:
        results = df.mapInArrow(functools.partial(_write_task, job), "kind string, payload binary").toArrow()
        statuses, parts, shards = collect_reports(results["kind"].to_pylist(), results["payload"].to_pylist())
        _remove_unreported(table, pending.instant.time, {s.path for s in statuses}, parts)
    deltas, replaced = stage_deletes(table.store, pending.instant.time, deleted, current,
                                     delete_compaction_threshold(table.config.properties))
    return Written(statuses=statuses, deltas=deltas, replaced=replaced, index_sizes=shards)


def collect_reports(kinds: list[str],
                    payloads: list[bytes]) -> tuple[list[FileStatus], set[int], dict[int, int]]:
    """The tasks' reports: file statuses, index log parts, index entries per shard."""
    statuses: list[FileStatus] = []
    parts: set[int] = set()
    shards: dict[int, int] = {}
    for kind, payload in zip(kinds, payloads, strict=True):
        if kind == "file":
            statuses.append(pickle.loads(payload))
        else:
            report = pickle.loads(payload)
            parts.add(int(report["part"]))
            for shard, count in report["shards"].items():
                shards[int(shard)] = shards.get(int(shard), 0) + int(count)
    return statuses, parts, shards


def _remove_unreported(table: TableContext, instant_time: str, files: set[str], parts: set[int]) -> None:
    """Delete what task attempts that failed or were retried wrote for ``instant_time``."""
    storage = table.storage
    # Damaged markers are logged and left: the files they may name stay for validate(), and
    # the markers go once the instant is decided.
    named, _ = marked_paths(storage, instant_time)
    for marker, path in named:
        if path.endswith(".parquet") and path not in files:
            storage.delete(path)
            storage.delete(marker)
    index = table.metadata.record_index
    if index is not None:
        reported = {f"{instant_time}.{part}.log.arrow" for part in parts}
        for log in index.logs_of(instant_time):
            if log.rsplit("/", 1)[-1] not in reported:
                storage.delete(log)


def write(df: Any, uri: str, mode: str = "append", *, partition_by: list[str] | None = None,
          record_key: str | list[str] | None = None, sort_by: list[str] | None = None,
          properties: dict[str, str] | None = None, storage_options: dict[str, Any] | None = None,
          extra: dict[str, str] | None = None, app_id: str | None = None,
          version: int | None = None, progress: Progress | None = None,
          partitions: str | Mapping[str, Any] | None = None) -> Commit | None:
    """Write a Spark DataFrame into the table at ``uri`` in one commit, creating the table if
    there is none.

    ``app_id`` and ``version``: an idempotent write, as for :meth:`txn.Table.append` (None when
    ``app_id`` committed ``version`` or a later one). ``progress`` is the same for a stream's
    batch (``txn.spark.write_stream``).

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
    A keyed write refuses a key that repeats within the DataFrame (``DuplicateKeyError``); a
    keyed append also refuses keys already in the table. Returns the commit (None for an
    upsert of no rows, or ``"ignore"`` on an existing table).

    A table this write creates appears with its commit: if the write fails, there is no table
    at ``uri``. If another writer creates the table meanwhile, this write's instant rolls back
    and it writes again into that table, by ``mode`` (``"error"`` raises TableExistsError).
    """
    arguments: dict[str, Any] = {
        "partition_by": partition_by, "record_key": record_key, "sort_by": sort_by,
        "properties": properties, "storage_options": storage_options, "extra": extra,
        "app_id": app_id, "version": version, "progress": progress, "partitions": partitions}
    created: list[StagedCreate] = []
    try:
        commit = _write_once(df, uri, mode, created, **arguments)
        for staged in created:
            staged.publish()  # a write that committed nothing (no rows) creates the empty table
        return commit
    except TableExistsError:
        if save_mode(mode) == "error":
            raise
        # Only a staged create that lost to another creator raises this in the other modes:
        # the table exists now, and this write goes into it as into any existing table.
        return _write_once(df, uri, mode, [], **arguments)


def _write_once(df: Any, uri: str, mode: str, created: list[StagedCreate], *, partition_by: list[str] | None,
                record_key: str | list[str] | None, sort_by: list[str] | None,
                properties: dict[str, str] | None, storage_options: dict[str, Any] | None,
                extra: dict[str, str] | None, app_id: str | None, version: int | None,
                progress: Progress | None, partitions: str | Mapping[str, Any] | None) -> Commit | None:
    mode = save_mode(mode)
    progress = progress or app_progress(app_id, version)
    operation = "append" if mode in ("error", "ignore") else mode
    if partitions is not None and operation != "overwrite":
        raise InvalidOptionError(f"partitions={partitions!r} is for mode='overwrite', not {mode!r}")
    ensure_workers_run_metatxn(df.sparkSession)
    checked: dict[tuple[pa.Schema, tuple[str, ...], tuple[str, ...]],
                  tuple[frozenset[str] | None, dict[str, Any]]] = {}

    def check(schema: pa.Schema, columns: list[str], partition_by: list[str]) -> None:
        nonlocal df
        scope, values = layout_scope(uri, schema, partition_by, columns, partitions)
        df = _checked(df, schema, columns)
        if values:
            _check_in_partition(df, values)
        checked[(schema, tuple(columns), tuple(partition_by))] = scope, values

    # A new table is created only after the DataFrame and ``partitions`` passed the checks for
    # it: a refused write to a new location leaves no table.
    target = resolve(uri, df.schema, mode, Layout(partition_by, record_key, sort_by, properties),
                     storage_options,
                     before_create=lambda schema, columns: check(schema, columns, list(partition_by or [])))
    if target is None:
        return None
    table = target
    if table.staged is not None:
        created.append(table.staged)
    columns = table.record_key_columns
    layout = (table.schema, tuple(columns), tuple(table.partition_by))
    if layout not in checked:  # an existing table, or another writer's new one
        check(table.schema, columns, table.partition_by)
    scope, values = checked[layout]
    if already_committed(table, progress) or (mode == "upsert" and df.isEmpty()):
        return None
    if scope is not None and not values and df.isEmpty():
        return None  # the partitions of no rows: nothing is replaced

    def plan(state: State) -> RowChanges | Overwrite:
        deleted: dict[str, Positions] = {}
        if columns and operation in ("append", "upsert"):
            found = _find_existing_rows(table, df, state)
            if operation == "append" and found.num_rows:
                sample = _sample_keys(table, found)
                raise DuplicateKeyError(
                    f"append: {found.num_rows} record key(s) of the DataFrame already exist in the "
                    f"table, e.g. {describe(sample, columns)}; nothing was written\n"
                    "Help: use mode='upsert' to replace existing keys")
            deleted = _positions_by_file(found)
        if operation == "overwrite":
            return Overwrite(partitions=scope)
        return RowChanges(operation=operation, read_at=state.read_at, current=state.deltas,
                          deleted=deleted)

    # A keyed DataFrame is pinned, so planning and writing it again (when a table service
    # overtook the write) writes the same rows against the new state.
    commit = commit_planned(table, plan, extra, progress=progress, write=lambda change: functools.partial(
        _write_phase, table, df, *_deletes_of(table, change)))
    if operation == "append":
        after_load(table, commit)
    return commit


def _deletes_of(table: TableContext, change: Any) -> tuple[dict[str, Positions], LiveDeltas]:
    if isinstance(change, RowChanges):
        return change.deleted, change.current
    return {}, LiveDeltas(table.store, {})  # an overwrite deletes by position under the lock


def _write_phase(table: TableContext, df: Any, deleted: dict[str, Positions], current: LiveDeltas,
                 pending: Pending) -> Written:
    return run_job(table, df, pending, deleted, current)


def _checked(df: Any, schema: pa.Schema, columns: list[str]) -> Any:
    """``df`` checked for null and repeated keys and nulls in non-nullable columns (small Spark
    jobs); pinned first on keyed tables, so the rows checked are the rows written even when the
    input is not deterministic."""
    if columns:
        df = df.localCheckpoint(eager=True)
        _check_keys(df, columns)
    _check_not_null(df, [f.name for f in schema if not f.nullable and f.name not in columns])
    return df


def _check_in_partition(df: Any, values: dict[str, Any]) -> None:
    """SchemaMismatchError unless every row of ``df`` holds the named partition's ``values``."""
    from pyspark.sql import functions as F

    outside = None
    for column, value in values.items():
        differs = ~F.col(column).eqNullSafe(F.lit(value))
        outside = differs if outside is None else outside | differs
    if outside is not None and not df.where(outside).isEmpty():
        raise SchemaMismatchError(
            f"overwrite of partition {values}: the DataFrame holds rows of other partitions; nothing "
            "was written\nHelp: give only rows of that partition, or use partitions='dynamic'")


def _positions_by_file(found: pa.Table) -> dict[str, Positions]:
    grouped: dict[str, list[int]] = {}
    for file, position in zip(found["file"].to_pylist(), found["position"].to_pylist(), strict=True):
        grouped.setdefault(file, []).append(position)
    return {file: np.array(sorted(p), dtype=np.int64) for file, p in grouped.items()}


def _sample_keys(table: TableContext, found: pa.Table) -> pa.Table:
    """Keys of a few of ``found``'s rows (read back from their data files), for a message."""
    parts = []
    files = table.metadata_at(table.timeline.load(), None, (FILES,)).files
    assert files is not None
    formats = dict(zip(files["path"].to_pylist(), files["format"].to_pylist(), strict=True))
    for file, position in zip(found["file"].to_pylist()[:SHOWN], found["position"].to_pylist()[:SHOWN],
                              strict=True):
        rows, positions = scan_file(table.store, file, table.schema, filter=None,
                                    columns=table.record_key_columns,
                                    file_format=formats.get(file, "parquet"))
        at = int(np.searchsorted(positions, position))
        parts.append(index_keys(rows.slice(at, 1), table.record_key_columns))
    return pa.concat_tables(parts)
