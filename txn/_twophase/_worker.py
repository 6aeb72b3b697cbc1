"""The worker's half of a two-phase write: :func:`write_files` writes rows as data files of the
pending instant (a marker before each file, as every writer does) and, on a keyed table, one
record-index log file of its own; it returns a :class:`WrittenFiles` report for the driver's
``PendingWrite.commit``. Record keys stay on the worker: the report names files, not keys."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from metatxn.indexes import RecordIndex
from metatxn.timeline import (
    DuplicateKeyError,
    InvalidOptionError,
    SchemaMismatchError,
    Timeline,
    open_storage,
)

from .._files import DataFileWriter, DataStore, FileStatus
from .._rows import batches as rows_of
from .._rows import describe, index_keys, repeated
from ._ticket import WriteTicket

_FOUND = pa.schema([("file", pa.string()), ("position", pa.int64())])


@dataclass(frozen=True)
class WrittenFiles:
    """One worker's report of its part of a pending write (picklable; hand it to the driver).

    ``files``: the data files written, with their statistics. ``index_part``: on keyed tables,
    the number of the record-index log file the worker wrote (None: none). ``existing``: an
    upsert's rows of the snapshot read that hold the worker's keys (``file``, ``position``):
    the commit deletes them.
    """

    instant: str
    files: tuple[FileStatus, ...] = ()
    index_part: int | None = None
    index_shards: dict[int, int] = field(default_factory=dict)
    existing: pa.Table | None = None

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.files]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)


def _identity(task_id: int | tuple[int, int] | None) -> tuple[int, int]:
    """(task, attempt): names the worker's files and its index log part. None: a random task."""
    if task_id is None:
        return secrets.randbelow(1_000_000), 0
    if isinstance(task_id, tuple) and len(task_id) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in task_id):
        return task_id[0], task_id[1]
    if isinstance(task_id, int) and not isinstance(task_id, bool) and task_id >= 0:
        return task_id, 0
    raise InvalidOptionError(f"task_id must be a non-negative int or (task, attempt), got {task_id!r}")


def _conformed(data: object, schema: pa.Schema, merge: bool = False) -> Iterator[pa.RecordBatch]:
    """The input's non-empty batches with the table's schema (checked as ``Table.append``
    checks its input: column names and types, nulls in non-nullable columns; a merge write's
    fills a nullable column the data lacks with nulls)."""
    if isinstance(data, (pa.Table, pa.RecordBatchReader)) or type(data).__name__ == "DataFrame":
        yield from rows_of(data, schema, fill_missing=merge)
        return
    if not isinstance(data, Iterable):
        raise InvalidOptionError(f"write_files needs record batches, a pyarrow.Table or a "
                                 f"RecordBatchReader, got {type(data).__name__}")
    for batch in data:
        if not isinstance(batch, pa.RecordBatch):
            raise InvalidOptionError(f"write_files: expected pyarrow.RecordBatch items, got "
                                     f"{type(batch).__name__}")
        yield from rows_of(pa.Table.from_batches([batch]), schema, fill_missing=merge)


def _missing(instant_time: str) -> InvalidOptionError:
    return InvalidOptionError(
        f"instant {instant_time} of this write is no longer pending on the timeline (rolled back "
        "after its heartbeat expired?); nothing was written")


def write_files(ticket: WriteTicket, batches: Iterable[pa.RecordBatch] | pa.Table, *,
                task_id: int | tuple[int, int] | None = None) -> WrittenFiles:
    """Write ``batches`` (the table's columns) as data files of the pending write ``ticket``
    names, anywhere the table's storage is reachable; return the report for its commit.

    ``task_id``: the task (and attempt) this is, which names its files and its index log file:
    give distinct ids to concurrent workers (a retried attempt may reuse its task's number with
    another attempt). On a keyed table, the keys are looked up in the snapshot the write read
    and the rows found reported: an append's commit refuses them (``DuplicateKeyError`` naming
    keys from every worker, nothing committed), an upsert's deletes them. Keys must not repeat across workers
    (check them beforehand, or commit with ``check_keys=True``).
    """
    if not isinstance(ticket, WriteTicket):
        raise InvalidOptionError(f"write_files needs a txn.WriteTicket, got {type(ticket).__name__}")
    if ticket.segment is None:
        raise InvalidOptionError(f"a {ticket.operation} writes no data files; it commits deletes only")
    task, attempt = _identity(task_id)
    schema = ticket.table_schema
    storage = open_storage(ticket.uri, ticket.storage_options)
    if ticket.workers_beat:  # the driver's heartbeat does not run: keep the instant alive
        timeline = Timeline(storage)
        instant = timeline.load().get(ticket.instant)
        if instant is None or not instant.is_pending:
            raise _missing(ticket.instant)
        timeline.heartbeat(instant).beat()
    columns = list(ticket.key_columns)
    found: list[pa.Table] = []

    def checked(source: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in source:
            nulls = [c for c in columns if batch.column(c).null_count]
            if nulls:
                raise SchemaMismatchError(f"record key column(s) {nulls} hold nulls; every row of a "
                                          "keyed table needs a key; nothing was written")
            if ticket.probe is not None:
                existing = ticket.probe.find(batch)
                if existing.num_rows:  # an append's keep their keys: its commit names them
                    found.append(existing if ticket.operation == "append"
                                 else existing.select(["file", "position"]))
            yield batch

    source = _conformed(batches, schema, ticket.merge)
    writer = DataFileWriter(
        DataStore(storage), schema, instant_time=ticket.instant, segment=ticket.segment,
        partition_by=list(ticket.partition_by), sort_by=list(ticket.sort_by),
        target_file_bytes=ticket.target_file_bytes, key_columns=columns, schema_id=ticket.schema_id,
        new_token=lambda: f"{task:05d}a{attempt}{secrets.token_hex(4)}")
    statuses = writer.write(checked(source))
    part: int | None = None
    shards: dict[int, int] = {}
    if columns and writer.keys:
        index = RecordIndex(storage, [schema.field(k).type for k in columns], ticket.shards)
        located = writer.key_locations()  # every file's keys and places, built once
        entries = index.entries(index_keys(located.keys, columns), segment=ticket.segment,
                                file=located.file, position=located.position, instant=ticket.instant)
        part = task * 1000 + attempt
        shards = index.write(ticket.instant, entries, part=part)
    return WrittenFiles(instant=ticket.instant, files=tuple(statuses), index_part=part,
                        index_shards=shards,
                        existing=pa.concat_tables(found) if found else None)


def write_index(ticket: WriteTicket, rows: pa.Table, *,
                task_id: int | tuple[int, int] | None = None) -> WrittenFiles:
    """Write the record-index entries of rows a foreign writer wrote for the pending write
    ``ticket`` names (files joined by ``adopt_files(..., index_apart=True)``) as one index log
    file of the instant, anywhere the table's storage is reachable; return the report for its
    commit.

    ``rows``: the key columns, ``file`` (the table-relative path of a file of this write, as
    ``WrittenFiles.paths`` gives it) and ``position`` (the row's number in that file). Every row
    of a key must be in the same call: split the rows by ``ticket.key_hashes(rows)`` modulo a
    node count (``KeyProbe.node_count()``; the table's ``shards`` when the write has no probe),
    and each call holds whole shard nodes. A null key raises SchemaMismatchError, a key that
    repeats among ``rows`` DuplicateKeyError. On a keyed append or upsert the keys are looked up
    in the snapshot the write read and the rows found reported, as :func:`write_files` does;
    the log file is then written in the node layout that lookup resolved. ``task_id`` names the
    log file as for :func:`write_files`.
    """
    if not isinstance(ticket, WriteTicket):
        raise InvalidOptionError(f"write_index needs a txn.WriteTicket, got {type(ticket).__name__}")
    columns = list(ticket.key_columns)
    if not columns:
        raise InvalidOptionError("write_index is for tables with a record key; this one has none")
    missing = [c for c in [*columns, "file", "position"] if c not in rows.column_names]
    if missing:
        raise InvalidOptionError(f"write_index: rows lack column(s) {missing}; expected the key "
                                 f"columns {columns}, 'file' and 'position'")
    task, attempt = _identity(task_id)
    storage = open_storage(ticket.uri, ticket.storage_options)
    if ticket.workers_beat:
        timeline = Timeline(storage)
        instant = timeline.load().get(ticket.instant)
        if instant is None or not instant.is_pending:
            raise _missing(ticket.instant)
        timeline.heartbeat(instant).beat()
    nulls = [c for c in columns if rows[c].null_count]
    if nulls:
        raise SchemaMismatchError(f"record key column(s) {nulls} hold nulls; every row of a keyed "
                                  "table needs a key; nothing was written")
    schema = ticket.table_schema
    keys = index_keys(pa.table([rows[c].cast(schema.field(c).type) for c in columns], names=columns), columns)
    twice = repeated(keys)
    if twice.num_rows:
        raise DuplicateKeyError(
            f"record key {columns} repeats within the DataFrame: {describe(twice, columns)} appear "
            "more than once; nothing was written\nHelp: de-duplicate the data (a Spark DataFrame has "
            "no row order, so metatxn does not pick a winner)")
    probe = ticket.probe
    index = probe._index() if probe is not None else RecordIndex(
        storage, [schema.field(c).type for c in columns], ticket.shards)
    existing = None
    if probe is not None and rows.num_rows:
        found = probe._find_in(index, pa.table([rows[c] for c in columns], names=columns))
        if found.num_rows:
            existing = found if ticket.operation == "append" else found.select(["file", "position"])
    entries = index.entries(keys, segment=ticket.segment or "", file=rows["file"].cast(pa.string()),
                            position=rows["position"].cast(pa.int64()), instant=ticket.instant)
    part = task * 1000 + attempt
    shards = index.write(ticket.instant, entries, part=part)
    return WrittenFiles(instant=ticket.instant, index_part=part if shards else None, index_shards=shards,
                        existing=existing)
