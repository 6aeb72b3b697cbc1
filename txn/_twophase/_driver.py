"""The driver's half of a two-phase write: :class:`PendingWrite`.

``Table.begin_write`` reads the snapshot the write is planned from (``read_instant``), begins
instant ``T`` (segment allocated, heartbeat beating) and hands out a :class:`WriteTicket`;
workers write data files with it anywhere (:func:`txn.write_files`, or a foreign writer's files
joined by :func:`txn.adopt_files`); :meth:`PendingWrite.commit` gathers their reports, deletes
what no report names (files of failed or retried attempts), stages the deletes by position and
commits once, conflict-checked against every commit completed after the snapshot read, as a
local write is. This module is the one place the two-phase form meets the commit protocol's
internals (a ``RowChanges`` or ``Overwrite`` write class, the commit driver's ``finish``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa

from metatxn.indexes import (
    DELETES,
    FILES,
    FILES_SCHEMA,
    ProducerKind,
    SnapshotExpiredError,
    TableVersion,
    live,
)
from metatxn.timeline import (
    Action,
    DuplicateKeyError,
    InvalidOptionError,
    ObjectNotFoundError,
    SchemaChangedError,
    TimelineView,
)

from .._commit import (
    AlreadyCommitted,
    CompactedMeanwhileError,
    MergeInto,
    Overwrite,
    Pending,
    Progress,
    RowChanges,
    WriteSchema,
    Written,
    admit_versions,
    check_generation,
    committed,
    current_schema,
    finish,
    producer_record,
    protocol_of,
)
from .._context import ACTION_OF, TableContext, delete_compaction_threshold, open_context, target_file_bytes
from .._files import FileStatus, LiveDeltas, Positions, marked_paths, scan_file, stage_deletes
from .._read import Snapshot
from .._results import Commit, CommitProperties, Operation, StreamProgress
from .._rows import describe, index_keys, repeated
from .._segments import after_load
from .._write import State, already_committed, app_progress, merging, overwrite_scope, write_schema
from .._write._state import check_external_deletes
from ._staging import remove_staging, sweep_staging
from ._ticket import KeyProbe, WriteTicket
from ._worker import WrittenFiles

log = logging.getLogger("metatxn")

#: The kinds of write the two-phase form commits.
OPERATIONS = ("append", "overwrite", "upsert", "delete", "update", "merge")
_OPEN, _DONE, _SKIPPED = "open", "done", "skipped"


def read_state(context: TableContext, read_instant: object) -> State:
    """The snapshot a write was planned from: the latest (None), a :class:`txn.Snapshot`, or the
    time of an instant completed on the active timeline (its completion bounds the snapshot)."""
    view = context.timeline.load()
    if read_instant is None:
        last = view.last_completed()
        bound = last.completed_at if last else None
    elif isinstance(read_instant, (Snapshot, KeyProbe)):
        bound = read_instant.completed_at if isinstance(read_instant, Snapshot) else read_instant.read_at
    elif isinstance(read_instant, str):
        found = [i for i in view.completed() if i.time == read_instant]
        if not found:
            raise InvalidOptionError(
                f"read_instant {read_instant!r} is not a completed instant on the timeline of "
                f"{context.uri}; expected the instant a snapshot was read at (Snapshot.instant, "
                "KeyProbe.read_instant) or None for the latest")
        bound = found[0].completed_at
    else:
        raise InvalidOptionError(f"read_instant must be an instant time (str), a txn.Snapshot, a "
                                 f"txn.KeyProbe or None, "
                                 f"got {type(read_instant).__name__}")
    return state_at(context, view, bound)


def state_at(context: TableContext, view: TimelineView, bound: str | None) -> State:
    """The state of the snapshot bounded by ``bound`` (None: the empty table, before any commit)."""
    metadata = context.metadata_at(view, bound, (FILES, DELETES))
    assert metadata.files is not None
    if bound is None:  # metadata_at reads None as the latest; the write read an empty table
        return State(view, None, metadata, FILES_SCHEMA.empty_table(), LiveDeltas(context.store, {}))
    if context.store.external is not None:  # what its scans compare the external files with
        context.store.external.remember(metadata.files)
    return State(view, bound, metadata, live(metadata.files), LiveDeltas.of(context.store, metadata.deletes))


def _named(view: TimelineView, bound: str | None) -> str | None:
    """The last instant completed at ``bound``: the name a probe gives its snapshot."""
    if bound is None:
        return None
    done = [i for i in view.completed() if (i.completed_at or "") <= bound]
    return max(done, key=lambda i: i.completed_at or "").time if done else None


def key_probe(context: TableContext, read_instant: object = None, state: State | None = None) -> KeyProbe:
    """A picklable probe of the snapshot ``read_instant`` names (the latest: None)."""
    columns = context.record_key_columns
    index = context.metadata.record_index
    if not columns or index is None:
        raise InvalidOptionError(f"a key probe needs a table with a record_key; {context.uri} has none")
    state = state or read_state(context, read_instant)
    return KeyProbe(
        uri=context.uri, storage_options=context.storage_options, key_columns=tuple(columns),
        key_schema=pa.schema([context.schema.field(c) for c in columns]).serialize().to_pybytes(),
        shards=index.shards, read_instant=_named(state.view, state.read_at), read_at=state.read_at,
        completed={i.time: i.completed_at or "" for i in state.view.completed()},
        done=context.metadata.done_compactions(),
        live_files=tuple(state.live_files["path"].to_pylist()))


def stream_progress(value: object) -> Progress | None:
    """The producer's batch a public :class:`txn.StreamProgress` names (None: none given)."""
    if value is None:
        return None
    if not isinstance(value, StreamProgress):
        raise InvalidOptionError(f"stream_progress must be a txn.StreamProgress, got {type(value).__name__}")
    return Progress(ProducerKind.STREAM, value.stream, value.batch_id, value.generation)


def already_done(context: TableContext, properties: CommitProperties | None,
                 progress: Progress | None = None) -> bool:
    """Whether the producer's batch (``properties``' app_id/version, or a stream's) committed."""
    properties = CommitProperties.of(properties)  # refuses anything but a CommitProperties
    if progress is None:
        progress = app_progress(properties.app_id, properties.version)
    return already_committed(context, progress)


def begin_write(context: TableContext, operation: str = "append", *, read_instant: object = None,
                partitions: object = None, commit_properties: CommitProperties | None = None,
                progress: Progress | None = None, schema_mode: object = None,
                data_schema: object = None) -> PendingWrite:
    """See :meth:`txn.Table.begin_write`. ``progress``: a stream's batch (txn.spark's streams)."""
    if operation not in OPERATIONS:
        raise InvalidOptionError(f"begin_write: operation {operation!r}; expected one of {list(OPERATIONS)}")
    schema = _merge_target(context, operation, progress, schema_mode, data_schema)
    properties = CommitProperties.of(commit_properties)  # refuses anything but a CommitProperties
    columns = context.record_key_columns
    if operation == "upsert" and not columns:
        raise InvalidOptionError(f"upsert needs a table with a record_key; {context.uri} has none")
    if partitions is not None and operation != "overwrite":
        raise InvalidOptionError(f"partitions={partitions!r} is for an overwrite, not an {operation}")
    scope, _ = overwrite_scope(context, partitions) if operation == "overwrite" else (None, {})
    progress = progress or app_progress(properties.app_id, properties.version)
    if already_committed(context, progress):
        return PendingWrite(context, operation, None, None, _skipped=True)
    state = read_state(context, read_instant)
    read_at = state.read_at if operation != "overwrite" else None
    versions: list[TableVersion] = []
    try:
        pending = protocol_of(context).begin(
            operation, ACTION_OF[operation], new_segment=operation != "delete", read_at=read_at,
            extra=dict(properties.extra), admit=_admission(context, progress, schema, versions))
    except AlreadyCommitted as exc:
        log.info("%s: skipped, already committed", exc)
        return PendingWrite(context, operation, None, None, _skipped=True)
    probe = (key_probe(context, state=state)
             if columns and operation in ("append", "upsert") and state.read_at is not None else None)
    if versions:  # the workers write the version this write creates
        schema = WriteSchema(versions[-1].schema, versions[-1].schema_id)
    ticket = ticket_for(context, operation, pending, state, probe=probe,
                        scope=tuple(sorted(scope)) if scope is not None else None,
                        extra=dict(properties.extra), progress=progress, schema=schema,
                        versions=tuple(versions), merge=schema_mode is not None)
    return PendingWrite(context, operation, pending, ticket, state=state)


def _merge_target(context: TableContext, operation: str, progress: Progress | None,
                  schema_mode: object, data_schema: object) -> WriteSchema:
    """The schema the write's workers conform to: the current one, or with
    ``schema_mode="merge"`` the latest merged with ``data_schema`` (its new version is worked
    out again under the lock at begin)."""
    if not merging(schema_mode, "begin_write"):
        if data_schema is not None:
            raise InvalidOptionError("begin_write: data_schema is for schema_mode='merge'")
        return write_schema(context)
    if operation not in ("append", "overwrite", "upsert"):
        raise InvalidOptionError(f"begin_write: schema_mode='merge' is for an append, overwrite or "
                                 f"upsert, not an {operation}")
    if progress is not None and progress.kind == ProducerKind.STREAM:
        raise InvalidOptionError("begin_write: schema_mode='merge' is not offered on a stream's "
                                 "batches\nHelp: change the schema first (Table.add_columns)")
    if not isinstance(data_schema, pa.Schema):
        raise InvalidOptionError(f"begin_write: schema_mode='merge' needs data_schema=, the "
                                 f"pyarrow.Schema of the data; got {data_schema!r}")
    return write_schema(context, data_schema)


def ticket_for(context: TableContext, operation: str, pending: Pending, state: State, *,
               schema: WriteSchema | None = None, **recorded: Any) -> WriteTicket:
    """The ticket of ``pending`` (begun from ``state``) for its workers; ``schema``: what they
    write (None: the current schema); ``recorded``: the fields a commit records (``probe``,
    ``scope``, ``extra``, ``progress``, ``versions``)."""
    index = context.metadata.record_index
    schema = schema or current_schema(context)
    return WriteTicket(
        uri=context.uri, storage_options=context.storage_options, operation=operation,
        instant=pending.instant.time, segment=pending.segment,
        schema=schema.schema.serialize().to_pybytes(), schema_id=schema.schema_id,
        partition_by=tuple(context.partition_by),
        sort_by=tuple(context.sort_by), key_columns=tuple(context.record_key_columns),
        shards=index.shards if index is not None else 0,
        target_file_bytes=target_file_bytes(context.properties),
        read_instant=_named(state.view, state.read_at), read_at=state.read_at,
        root=context.store.location(""), **recorded)


def _admission(context: TableContext, progress: Progress | None, schema: WriteSchema,
               versions: list[TableVersion]) -> Any:
    """Under the lock at begin: nothing begins for a producer's batch already committed; a
    merge write works out the version(s) it creates (into ``versions``)."""
    if progress is None and not schema.changes:
        return None

    def admit(view: TimelineView) -> None:
        if progress is not None:
            record = producer_record(context, view, progress.kind, progress.name)
            check_generation(record, progress)
            if committed(record, progress):
                raise AlreadyCommitted(f"{progress.kind} {progress.name!r} committed batch {progress.batch}")
        versions[:] = admit_versions(context, view, schema)

    return admit


class PendingWrite:
    """A write begun on the driver whose data files are written by workers (see
    :meth:`txn.Table.begin_write`). A context manager: it aborts on an exception, and when left
    without a commit."""

    def __init__(self, context: TableContext, operation: str, pending: Pending | None,
                 ticket: WriteTicket | None, *, state: State | None = None, _skipped: bool = False) -> None:
        self._context = context
        self._operation = operation
        self._pending = pending
        self._ticket = ticket
        self._state = state
        self._status = _SKIPPED if _skipped else _OPEN

    @classmethod
    def resume(cls, ticket: WriteTicket) -> PendingWrite:
        """The pending write ``ticket`` names, in another process than the one that began it
        (a Spark data source commits in another worker): commit or abort it from here. Its
        heartbeat is the workers' (:meth:`detach`)."""
        if not isinstance(ticket, WriteTicket):
            raise InvalidOptionError(f"resume needs a txn.WriteTicket, got {type(ticket).__name__}")
        context = open_context(ticket.uri, ticket.storage_options)
        instant = context.timeline.load().get(ticket.instant)
        pending = None
        if instant is not None and instant.is_pending:
            pending = Pending(instant, ticket.segment, context.timeline.heartbeat(instant))
        return cls(context, ticket.operation, pending, ticket)

    # -- what workers need ---------------------------------------------------------------------

    @property
    def skipped(self) -> bool:
        """True when ``commit_properties``' app committed its version already: nothing began,
        there is no ticket, and :meth:`commit` returns None."""
        return self._status == _SKIPPED

    @property
    def ticket(self) -> WriteTicket:
        """What a worker needs (picklable): pass it to :func:`txn.write_files`."""
        if self._ticket is None:
            raise InvalidOptionError("this write was skipped (its app_id committed its version "
                                     "already): it has no ticket; check PendingWrite.skipped")
        return self._ticket

    @property
    def instant(self) -> str | None:
        return self._ticket.instant if self._ticket is not None else None

    def detach(self) -> WriteTicket:
        """Stop the driver's heartbeat (its file stays) and return a ticket whose workers beat it
        each time they start: for a driver that hands the commit to another process."""
        ticket = self.ticket
        if self._pending is not None:
            self._pending.heartbeat.stop(delete=False)
        self._ticket = dataclasses.replace(ticket, workers_beat=True)
        return self._ticket

    def staging(self) -> str:
        """The folder a foreign writer writes this instant's files to (then
        :func:`txn.adopt_files`); staging folders of instants no longer pending are removed
        first."""
        ticket = self.ticket
        sweep_staging(self._context.store, self._context.timeline)
        return ticket.staging

    # -- commit or abort -----------------------------------------------------------------------

    def commit(self, files: Iterable[WrittenFiles] = (), *, deletes: object = None,
               check_keys: bool = False, retries: int = 0, retire: object = None,
               read_by_keys: bool = False) -> Commit | None:
        """Commit the workers' reports ``files`` and the rows ``deletes`` (``{path: positions}``,
        or a table of ``file`` and ``position`` columns; paths as ``Snapshot.files()`` gives them
        or table-relative) as one instant. Data files marked for the instant that no report
        names (failed or retried attempts) are deleted first. Conflicts are checked against
        every commit completed after the snapshot read (``CommitConflictError``; the write is
        rolled back). ``check_keys``: read back the keys the workers wrote and refuse any that
        repeats among them (``DuplicateKeyError``), for inputs not checked beforehand. Returns
        None when the write's ``app_id`` committed its version already. ``retries``: how often
        the engine planned this write again after a table service overtook an earlier attempt
        (``retryable``), recorded as ``Commit.retries`` as a local write records it.
        ``retire`` (keyed tables; as ``deletes``, rows among them): rows deleted whose keys leave
        the table, not rewritten by ``files`` (a MERGE's deleted rows in an ``"update"``): their
        index entries are tombstoned, as a ``"delete"`` tombstones every deleted row's.
        ``read_by_keys`` (a ``"merge"``): the engine found the target's rows by their record
        keys (``KeyProbe``), so concurrent writes conflict with it by key and by file; otherwise
        a merge scanned the table, and any concurrent commit that added or replaced rows, other
        than a blind append, conflicts with it (what it did not find decided its inserts).
        """
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidOptionError(f"retries must be an int >= 0, got {retries!r}; nothing was committed")
        if self._status == _SKIPPED:
            return None
        if self._status != _OPEN:
            raise InvalidOptionError(f"write {self.instant} was committed or aborted already")
        ticket = self.ticket
        context = self._context
        pending = self._pending
        if pending is None:
            raise InvalidOptionError(
                f"instant {ticket.instant} of this write is no longer pending on the timeline (rolled "
                "back after its heartbeat expired?); nothing was written")
        reports = list(files)
        wrong = [r for r in reports if not isinstance(r, WrittenFiles) or r.instant != ticket.instant]
        if wrong:
            raise InvalidOptionError(f"commit: {len(wrong)} report(s) are not txn.WrittenFiles of instant "
                                     f"{ticket.instant}; nothing was committed")
        if ticket.segment is None and any(r.files for r in reports):
            raise InvalidOptionError(f"a {self._operation} writes no data files; nothing was committed")
        state = self._state or state_at(context, context.timeline.load(), ticket.read_at)
        self._state = state
        deleted = self._deleted(state, deletes, reports)
        columns = context.record_key_columns
        retired = deleted if self._operation == "delete" else \
            self._deleted(state, retire, []) if retire is not None else {}
        removed = index_keys(_keys_at(context, state, retired), columns) if columns and retired else None
        statuses, parts, shards = gathered(reports)
        planned: Overwrite | RowChanges
        written_with = WriteSchema(ticket.table_schema, ticket.schema_id)
        if self._operation == "overwrite":
            planned = Overwrite(partitions=frozenset(ticket.scope) if ticket.scope is not None else None,
                                progress=ticket.progress, schema=written_with,
                                versions=list(ticket.versions))
        else:
            # A merge is planned as any row change, with a merge's conflict rules.
            kind = functools.partial(MergeInto, scanned=not read_by_keys) \
                if self._operation == "merge" else functools.partial(RowChanges)
            planned = kind(operation=Operation(self._operation), read_at=state.read_at,
                           current=state.deltas, deleted=deleted, removed_keys=removed,
                           progress=ticket.progress, schema=written_with,
                           versions=list(ticket.versions))
            if deleted:
                check_external_deletes(context, state, planned)

        existing = [r.existing for r in reports if r.existing is not None and r.existing.num_rows]

        def write(begun: Pending) -> Written:
            if existing and self._operation == "append" and ticket.probe is not None:
                ticket.probe.refuse(pa.concat_tables(existing))  # rolled back, as any failed commit
            _remove_unreported(context, begun.instant.time, {s.path for s in statuses}, parts)
            if check_keys:
                _refuse_repeats(context, begun.instant.time, shards)
            if removed is not None and removed.num_rows:
                _write_tombstones(context, begun.instant.time, removed, shards)
            deltas, replaced = stage_deletes(context.store, begun.instant.time, deleted, state.deltas,
                                             delete_compaction_threshold(context.properties))
            return Written(statuses=statuses, deltas=deltas, replaced=replaced, index_sizes=shards)

        self._status = _DONE
        try:
            commit = finish(context, planned, ticket.extra, pending, write, retries=retries)
        except AlreadyCommitted as exc:
            log.info("%s: skipped, already committed", exc)
            return None
        finally:
            quietly(remove_staging, context.store, ticket.instant)
        if planned.versions:  # the handle takes the version the write created
            context.adopt({v.version: v for v in planned.versions})
        if self._operation == "append":
            after_load(context, commit)
        return commit

    def _deleted(self, state: State, deletes: object, reports: list[WrittenFiles]) -> dict[str, Positions]:
        """The rows to delete, by table-relative path: live rows of live files only."""
        found: dict[str, list[Positions]] = {}
        for path, positions in _pairs(deletes, self._context.store.location("")):
            found.setdefault(path, []).append(positions)
        for report in reports:
            if report.existing is not None and report.existing.num_rows and self._operation != "append":
                for path, positions in _pairs(report.existing, ""):
                    found.setdefault(path, []).append(positions)
        if not found:
            return {}
        if self._operation in ("append", "overwrite"):
            raise InvalidOptionError(f"an {self._operation} deletes no rows; use upsert, delete or "
                                     "update to delete rows by position")
        rows = dict(zip(state.live_files["path"].to_pylist(), state.live_files["rows"].to_pylist(),
                        strict=True))
        deleted: dict[str, Positions] = {}
        for path, parts in found.items():
            if path not in rows:
                raise InvalidOptionError(f"deletes name {path!r}, which is not a live data file of the "
                                         "snapshot the write read; nothing was committed")
            positions = np.unique(np.concatenate(parts)).astype(np.int64)
            if len(positions) and (positions[0] < 0 or positions[-1] >= rows[path]):
                raise InvalidOptionError(f"deletes of {path!r}: positions must be from 0 to "
                                         f"{rows[path] - 1}; nothing was committed")
            positions = np.setdiff1d(positions, state.deltas.positions(path)).astype(np.int64)
            if len(positions):
                deleted[path] = positions
        return deleted

    def abort(self) -> None:
        """Roll the instant back and delete what the workers wrote (nothing after a commit)."""
        if self._status != _OPEN:
            return
        self._status = _DONE
        context = self._context
        pending = self._pending
        if pending is None:
            return
        instant = context.timeline.load().get(pending.instant.time)
        if instant is not None and instant.is_pending:
            pending.heartbeat.stop(delete=False)
            protocol_of(context)._roll_back_quietly(instant)
        quietly(remove_staging, context.store, pending.instant.time)

    def retryable(self, error: BaseException) -> bool:
        """Whether a commit that raised ``error`` may be planned again on the new state and
        retried: a table service overtook it (a compaction moved rows it read, or a clean
        removed files of the snapshot it read), as local writes retry themselves."""
        if isinstance(error, (CompactedMeanwhileError, SchemaChangedError)):
            return True  # a merge write begun again merges into the new version
        if not isinstance(error, (ObjectNotFoundError, SnapshotExpiredError)):
            return False
        read_at = self._ticket.read_at if self._ticket is not None else None
        view = self._context.timeline.load()
        return any(i.action == Action.CLEAN for i in (*view.completed_after(read_at or ""), *view.pending()))

    def __enter__(self) -> PendingWrite:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.abort()

    def __repr__(self) -> str:
        return f"PendingWrite({self._operation!r}, instant={self.instant!r}, {self._status})"


def _pairs(deletes: object, prefix: str) -> Iterable[tuple[str, Positions]]:
    """(table-relative path, positions) of ``deletes``: a mapping or a file/position table."""
    if deletes is None:
        return
    if isinstance(deletes, pa.Table):
        if not {"file", "position"} <= set(deletes.column_names):
            raise InvalidOptionError(f"deletes as a table needs columns 'file' and 'position', got "
                                     f"{deletes.column_names}")
        grouped: dict[str, list[int]] = {}
        for file, position in zip(deletes["file"].to_pylist(), deletes["position"].to_pylist(), strict=True):
            grouped.setdefault(file, []).append(position)
        deletes = grouped
    if not isinstance(deletes, Mapping):
        raise InvalidOptionError(f"deletes must be a dict of data file path -> row positions or a "
                                 f"table of file and position, got {type(deletes).__name__}")
    for path, positions in deletes.items():
        if not isinstance(path, str):
            raise InvalidOptionError(f"deletes: a data file path must be a str, got {path!r}")
        try:
            array = np.asarray(positions, dtype=np.int64).reshape(-1)
        except (TypeError, ValueError):
            raise InvalidOptionError(f"deletes of {path!r}: positions must be integers") from None
        yield (path.removeprefix(prefix) if prefix else path), array


def _keys_at(context: TableContext, state: State, deleted: Mapping[str, Positions]) -> pa.Table:
    """The record keys of the rows ``deleted`` names (their index entries are tombstoned)."""
    formats = dict(zip(state.live_files["path"].to_pylist(), state.live_files["format"].to_pylist(),
                       strict=True))
    parts = []
    for path, wanted in deleted.items():
        rows, positions = scan_file(context.store, path, context.schema, filter=None,
                                    columns=context.record_key_columns, deleted=state.deltas.positions(path),
                                    file_format=formats.get(path, "parquet"),
                                    written=state.written(context, path))
        parts.append(rows.filter(pa.array(np.isin(positions, wanted))))
    return pa.concat_tables(parts)


def gathered(reports: Iterable[WrittenFiles]) -> tuple[list[FileStatus], set[int], dict[int, int]]:
    """The workers' reports together: the files they wrote, their index log parts, and the
    index entries they wrote per shard."""
    reports = list(reports)
    shards: dict[int, int] = {}
    for report in reports:
        for shard, count in report.index_shards.items():
            shards[shard] = shards.get(shard, 0) + count
    return ([s for r in reports for s in r.files],
            {r.index_part for r in reports if r.index_part is not None}, shards)


def _remove_unreported(context: TableContext, instant_time: str, files: set[str], parts: set[int]) -> None:
    """Delete what workers that failed or were retried wrote for ``instant_time``: data files
    whose markers name it but no report does, and index log parts no report names."""
    storage = context.storage
    # Damaged markers are logged and left: the files they may name stay for validate(), and
    # the markers go once the instant is decided.
    named, _ = marked_paths(storage, instant_time)
    for marker, path in named:
        if path.endswith(".parquet") and path not in files:
            storage.delete(path)
            storage.delete(marker)
    index = context.metadata.record_index
    if index is not None:
        reported = {f"{instant_time}.{part}.log.arrow" for part in parts}
        for log_file in index.logs_of(instant_time):
            if log_file.rsplit("/", 1)[-1] not in reported:
                storage.delete(log_file)


def _write_tombstones(context: TableContext, instant_time: str, keys: pa.Table,
                      shards: dict[int, int]) -> None:
    """The index entries of deleted rows' keys, as the instant's own log file (``shards``, the
    entries per shard, is updated)."""
    index = context.metadata.record_index
    assert index is not None
    count = keys.num_rows
    entries = index.entries(keys, segment=pa.nulls(count, pa.string()), file=pa.nulls(count, pa.string()),
                            position=pa.nulls(count, pa.int64()), instant=instant_time, deleted=True)
    for shard, written in index.write(instant_time, entries).items():
        shards[shard] = shards.get(shard, 0) + written


def _refuse_repeats(context: TableContext, instant_time: str, shards: Mapping[int, int]) -> None:
    """DuplicateKeyError if a key repeats among the index entries the workers wrote."""
    index = context.metadata.record_index
    if index is None or not shards:
        return
    twice = repeated(index.instant_entries(instant_time, sorted(shards)).select(index.keys))
    if twice.num_rows:
        columns = context.record_key_columns
        raise DuplicateKeyError(
            f"record key {columns} repeats within the DataFrame: {describe(twice, columns)} appear "
            "more than once among the rows the workers wrote; nothing was written\n"
            "Help: de-duplicate the data")


def quietly(step: Any, *args: Any) -> None:
    try:
        step(*args)
    except Exception:
        log.warning("cleaning up after a two-phase write failed; a later write retries", exc_info=True)
