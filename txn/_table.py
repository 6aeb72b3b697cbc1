"""Tables: the public facade. Each method hands its work to the room that owns it."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.dataset as ds

from metatxn.timeline import Clock, Instant, InvalidOptionError, Storage, system_clock

from . import _changes, _external, _read, _schema, _segments, _streams, _twophase, _write
from ._changes import ChangeScanner
from ._commit import maintain, protocol_of
from ._context import (
    IdFactory,
    TableConfig,
    TableContext,
    check_properties,
    column_list,
    create_context,
    history,
    open_context,
    random_id,
    streaming_enabled,
)
from ._files import hive_folder, typed_value
from ._read import Scanner, Snapshot
from ._results import (
    Commit,
    CommitProperties,
    CompactionKind,
    HistoryEntry,
    MaintenanceReport,
    SchemaVersion,
    Segment,
    StreamProgress,
    ValidationReport,
)
from ._segments import CleanResult
from ._write import TableMerger, Transaction

#: What a write accepts: a pyarrow Table, a RecordBatchReader (streamed) or a pandas DataFrame.
WriteInput: TypeAlias = "pa.Table | pa.RecordBatchReader | Any"


class Table:
    """A metatxn table. Obtain one with :func:`create_table` or :func:`open_table`.

    A ``Table`` is safe to share between threads; every write is one atomic commit on the
    timeline, and any number of processes may write to the same table at once.
    """

    def __init__(self, uri: str, storage: Storage, config: TableConfig, *,
                 clock: Clock = system_clock, ids: IdFactory = random_id,
                 storage_options: dict[str, Any] | None = None) -> None:
        self._context = TableContext(uri, storage, config, clock=clock, ids=ids,
                                     storage_options=storage_options)

    @classmethod
    def _over(cls, context: TableContext) -> Table:
        """The facade over an existing context (the operations' view of the same table)."""
        table = cls.__new__(cls)
        table._context = context
        return table

    # -- what the table is ---------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self._context.uri

    @property
    def schema(self) -> pa.Schema:
        return self._context.schema

    @property
    def partition_by(self) -> list[str]:
        return self._context.partition_by

    @property
    def record_key(self) -> str | list[str] | None:
        """The record key as given at creation: a column name, a list of names, or None."""
        return self._context.record_key

    @property
    def record_key_columns(self) -> list[str]:
        return self._context.record_key_columns

    @property
    def sort_by(self) -> list[str]:
        return self._context.sort_by

    @property
    def record_index_shards(self) -> int | None:
        """Hash shards of the record-level index, fixed at creation (None without a key)."""
        return self._context.config.record_index_shards

    @property
    def properties(self) -> dict[str, str]:
        return self._context.properties

    @property
    def table_id(self) -> str:
        return self._context.config.table_id

    @property
    def created_at(self) -> str:
        """The instant time (17-digit UTC) at which the table was created."""
        return self._context.config.created_at

    @property
    def staged(self) -> bool:
        """Whether the table is staged (``create_table(..., staged=True)``) and not on storage
        yet: it comes to exist with its first commit, or :meth:`publish`."""
        staged = self._context.staged
        return staged is not None and not staged.published

    def publish(self) -> None:
        """Make a staged table exist now, empty (its ``table.json`` is put); nothing for a table
        that exists already. How a staged create whose first write committed nothing (no rows)
        still leaves the table.

        Raises:
            TableExistsError: another creator's table appeared at the location first.
        """
        if self._context.staged is not None:
            self._context.staged.publish()

    def check_layout(self, *, partition_by: list[str] | None = None,
                     record_key: str | list[str] | None = None, sort_by: list[str] | None = None,
                     properties: dict[str, str] | None = None) -> None:
        """Check layout options a writer was given against the table's: ``None`` means not given;
        a given one must be the table's (a write never changes a table's layout, and never
        silently ignores a layout it was asked for). Property values are checked as the table
        would hold them.

        Raises:
            InvalidOptionError: naming the first option that differs, or a value that is not
                acceptable.
        """
        given = properties or {}
        if not isinstance(given, dict):
            check_properties(given)  # raises: not a dict of strings
        check_properties({**self.properties, **given})
        options = (("partition_by", partition_by, self.partition_by, False),
                   ("record_key", record_key, self.record_key_columns, True),
                   ("sort_by", sort_by, self.sort_by, False))
        for option, value, actual, allow_str in options:
            if value is None:
                continue
            wanted = column_list(option, value, allow_str=allow_str)
            if wanted != list(actual):
                raise InvalidOptionError(
                    f"{option} {wanted!r} differs from the table's {actual!r} at {self.uri}; "
                    "nothing was written\nHelp: leave the layout options out to write with the "
                    "table's layout (a write never changes it)")
        for key, value in given.items():
            actual_value = self.properties.get(key)
            if actual_value != value:
                shown = "not set" if actual_value is None else repr(actual_value)
                raise InvalidOptionError(
                    f"table property {key}={value!r} differs from the table's ({shown}) at "
                    f"{self.uri}; nothing was written\nHelp: leave properties out to write "
                    "with the table's own")

    def overwrite_partition(self, partitions: str | Mapping[str, Any] | None) -> dict[str, Any]:
        """The values every new row of an overwrite with ``partitions`` (as for :meth:`overwrite`)
        must hold: a named partition's column -> value of the column's type; empty for the whole
        table (None) or ``"dynamic"``. A distributed writer checks its rows with it before it
        begins.

        Raises:
            InvalidOptionError: ``partitions`` is not acceptable for this table (as :meth:`overwrite`
                refuses it).
        """
        return _write.overwrite_scope(self._context, partitions)[1]

    @property
    def streaming(self) -> bool:
        """Whether the table is a streaming sink (table property ``streaming`` = ``true``): SQL's
        CREATE STREAM writes only into such a table."""
        return streaming_enabled(self._context.properties)

    def partition_folder(self, values: Mapping[str, Any]) -> str:
        """The folder path ``col=value/...`` that holds rows of partition ``values`` (a subset
        of the partition columns, in the table's order), each value rendered as the writer
        names folders (Hive escaping; None is ``__HIVE_DEFAULT_PARTITION__``).

        Raises:
            InvalidOptionError: a key is not a partition column.
        """
        unknown = sorted(set(values) - set(self.partition_by))
        if unknown:
            raise InvalidOptionError(f"{unknown} are not partition columns of {self.uri}; "
                                     f"expected some of {self.partition_by}")
        return "/".join(hive_folder(c, values[c]) for c in self.partition_by if c in values)

    def partition_value(self, column: str, text: str) -> Any:
        """A partition folder's value ``text`` as a value of partition column ``column``'s type
        (``"2026-01-01"`` of a date column: that date), as readers of the folders take it.

        Raises:
            InvalidOptionError: ``column`` is not a partition column, or ``text`` is not a value
                of its type.
        """
        if column not in self.partition_by:
            raise InvalidOptionError(f"{column!r} is not a partition column of {self.uri}; "
                                     f"expected one of {self.partition_by}")
        data_type = self.schema.field(column).type
        try:
            return typed_value(text, data_type)
        except ValueError:
            raise InvalidOptionError(f"partition value {text!r} of column {column!r} is not a "
                                     f"{data_type}") from None

    def trash(self) -> dict[str, int]:
        """Every file in the table's trash (where CLEAN FILES moves files it may still have to
        restore), as the table-relative path CLEAN FILES reports -> its size in bytes."""
        return _segments.trash(self._context)

    def timeline(self) -> list[Instant]:
        """Every instant of the table, archived and active, by requested time."""
        return self._context.timeline.history()

    def history(self, limit: int | None = None) -> list[HistoryEntry]:
        """What each completed instant did, newest completion first: its operation, segment,
        rows, files and bytes added and removed, ``extra``, ``app_id``/``version`` and duration
        (``txn.HistoryEntry``), from what its commit recorded; archived instants included.

        ``limit``: only the newest ``limit`` entries, reading only those instants (not the
        whole archive). Raises ``InvalidOptionError`` unless it is a positive int or None.
        """
        return history(self._context, limit)

    # -- writes --------------------------------------------------------------------------------

    def append(self, data: WriteInput, *, extra: dict[str, str] | None = None,
               app_id: str | None = None, version: int | None = None,
               commit_properties: CommitProperties | None = None,
               schema_mode: str | None = None) -> Commit | None:
        """Load ``data`` as a new segment in one commit.

        Returns None, and commits nothing, when ``data`` holds no rows (as ``upsert`` and
        ``delete`` of nothing do), or when ``app_id`` already committed ``version`` or a later
        one (an idempotent write; every write takes ``app_id`` and ``version``: a producer that
        retries after a failure can never commit the same version twice, even from two
        processes at once).

        Commit options (on every write): ``commit_properties=txn.CommitProperties(extra=...,
        app_id=..., version=...)``, or the same as the keywords ``extra``, ``app_id`` and
        ``version``; not both (``InvalidOptionError``).

        ``schema_mode="merge"`` (also on :meth:`overwrite` and :meth:`upsert`): the table takes
        the data's schema in the same instant as the rows: columns it lacks are added
        (nullable, at the end; new struct fields too) and a column of a wider type widens the
        table's (the widenings :meth:`alter_column` allows); ``Commit.schema_version`` is the
        version it created (None: nothing to change, a plain write). An Arrow column's type
        is the user's declaration (int64 widens an int32 column); a DataFrame's dtype is not
        (int64 is pandas' default): it widens only when a value does not fit the table's type.
        Not offered inside :meth:`transaction` (change the schema first with
        :meth:`update_schema`) nor on streams. Default None: any difference is refused.

        Raises:
            SchemaMismatchError: the data's columns or types differ from the table's, or a
                non-nullable column holds nulls; nothing is written. (A ``RecordBatchReader`` is
                checked as it is read: a bad batch after the first rolls the write back, leaving
                a ``rollback`` instant and the rows as they were.)
            SchemaEvolutionError: (merge) the data would change a record-key or partition
                column's type; nothing is written.
            SchemaChangedError: (merge) another schema change completed while this write ran
                (a keyed write merges again and retries first); nothing is written.
            DuplicateKeyError: (keyed tables) a key of ``data`` is already in the table, or
                appears twice in ``data``; nothing is written.
        """
        options = _write.write_options(self._context, commit_properties, extra=extra,
                                       app_id=app_id, version=version)
        if options is None:
            return None
        commit = _write.append(self._context, data, extra=options.extra, progress=options.progress,
                               schema_mode=schema_mode)
        _segments.after_load(self._context, commit)
        return commit

    def overwrite(self, data: WriteInput, *, extra: dict[str, str] | None = None,
                  app_id: str | None = None, version: int | None = None,
                  partitions: str | Mapping[str, Any] | None = None,
                  commit_properties: CommitProperties | None = None,
                  schema_mode: str | None = None) -> Commit | None:
        """Replace the whole content with ``data`` in one commit (None: ``app_id`` committed
        ``version`` already, see :meth:`append`; ``schema_mode="merge"``: as there).

        ``partitions`` (partitioned tables without a record key) narrows what is replaced:
        ``"dynamic"`` replaces only the partitions ``data``'s rows go to and keeps the others
        (Spark's dynamic partition overwrite, Hudi's ``insert_overwrite``; no rows: nothing is
        committed); a mapping of every partition column to a value replaces that one partition
        (``data`` must hold only its rows; no rows empty it). The default, None, replaces the
        whole table (Hudi's ``insert_overwrite_table``).

        Segments whose every live row is replaced become ``Marked for Delete``; a segment that
        keeps rows in other partitions stays, its rows in the replaced partitions deleted by
        delete deltas. Replaced files stay for time travel until cleaned.

        Raises:
            CommitConflictError: another write committed after this one began (a
                partition-scoped overwrite: one that touched a partition it replaces).
            InvalidOptionError: a bad ``partitions``.
            SchemaMismatchError: a row of ``data`` outside the partition ``partitions`` names.
        """
        options = _write.write_options(self._context, commit_properties, extra=extra,
                                       app_id=app_id, version=version)
        if options is None:
            return None
        return _write.overwrite(self._context, data, extra=options.extra, progress=options.progress,
                                partitions=partitions, schema_mode=schema_mode)

    def upsert(self, data: WriteInput, *, extra: dict[str, str] | None = None,
               app_id: str | None = None, version: int | None = None,
               commit_properties: CommitProperties | None = None,
               schema_mode: str | None = None) -> Commit | None:
        """Keyed tables: replace the rows whose key exists, insert the others, in one commit.

        Replaced rows are deleted by delete deltas (their files are not rewritten); every row of
        ``data`` is written as a new segment. When a key appears more than once in ``data``, its
        last row wins. Returns None (and commits nothing) when ``data`` is empty.
        ``schema_mode="merge"``: the table takes the data's new columns and widenings in the
        same commit, as :meth:`append` describes.

        Raises:
            CommitConflictError: a commit that completed after this upsert read the table changed
                some of the same keys or files; nothing was written, retry.
        """
        options = _write.write_options(self._context, commit_properties, extra=extra,
                                       app_id=app_id, version=version)
        if options is None:
            return None
        return _write.upsert(self._context, data, extra=options.extra, progress=options.progress,
                             schema_mode=schema_mode)

    def delete(self, where: ds.Expression | None = None, *, keys: Any = None,
               extra: dict[str, str] | None = None, app_id: str | None = None,
               version: int | None = None,
               commit_properties: CommitProperties | None = None) -> Commit | None:
        """Delete the rows matching ``where``, or (keyed tables) the rows with these ``keys``.

        Deleted rows are recorded as delete deltas (row positions per data file): the bytes
        written grow with the rows deleted, not with the files they live in. Returns None, and
        commits nothing, when no row matches.

        Raises:
            InvalidOptionError: neither or both of ``where`` and ``keys`` given, or ``keys`` on a
                table without a record key.
            CommitConflictError: a concurrent commit changed the same rows' files or keys.
        """
        options = _write.write_options(self._context, commit_properties, extra=extra,
                                       app_id=app_id, version=version)
        if options is None:
            return None
        return _write.delete(self._context, where, keys=keys, extra=options.extra,
                             progress=options.progress)

    def update(self, where: ds.Expression | None, values: dict[str, Any], *,
               extra: dict[str, str] | None = None, app_id: str | None = None,
               version: int | None = None,
               commit_properties: CommitProperties | None = None) -> Commit | None:
        """Set ``values`` (column -> new value) on the rows matching ``where`` (None: all rows).

        The old rows are deleted by delete deltas and the updated rows written as a new
        segment. Returns None, and commits nothing, when no row matches. Record key columns
        cannot be updated. A value is a constant or a ``pyarrow.compute.Expression`` over the
        row's columns (``{"amt": pc.field("amt") * 2}``), evaluated on the old rows (every
        value sees the row as it was) and cast safely to the column's type.
        """
        options = _write.write_options(self._context, commit_properties, extra=extra,
                                       app_id=app_id, version=version)
        if options is None:
            return None
        return _write.update(self._context, where, values, extra=options.extra,
                             progress=options.progress)

    def merge(self, source: WriteInput, on: str | Sequence[str], *, source_alias: str = "source",
              target_alias: str = "target",
              commit_properties: CommitProperties | None = None) -> TableMerger:
        """A merge of ``source`` (anything ``append`` takes) into the table, matched on the
        ``on`` columns (equal on both sides; a null matches nothing), in deltalake's style::

            (t.merge(updates, on="id")
              .when_matched_update({"amt": pc.field("source.amt")},
                                   predicate=pc.field("source.amt") > pc.field("target.amt"))
              .when_not_matched_insert_all()
              .execute())

        Predicates and values are ``pyarrow.compute.Expression`` over ``"target.<col>"`` and
        ``"source.<col>"`` (the aliases); clauses act in the order added, the first that applies
        to a row wins. ``execute()`` commits once (a ``merge`` instant) and returns a
        ``txn.MergeResult``. See design/merge.md.
        """
        return TableMerger(self._context, source, on, source_alias=source_alias,
                           target_alias=target_alias, commit_properties=commit_properties)

    def add_segment(self, path: str | os.PathLike[str], format: str = "parquet", *,
                    partition: str | None = None,
                    storage_options: dict[str, Any] | None = None,
                    commit_properties: CommitProperties | None = None) -> Commit | None:
        """ADD SEGMENT: register the existing ``format`` files below ``path`` (``parquet``,
        ``orc``, ``csv`` or newline-delimited ``json``; any fsspec URL) as external segments,
        read in place and never converted, moved or deleted, in one commit.

        A partitioned table takes a folder of Hive-style partition folders
        (``day=20211123/hour=12/...``), one segment per partition folder, and ``partition``
        must name the table's partition columns with their types, in order
        (``"day:int, hour:int, type:int"``); an unpartitioned table takes one segment and no
        ``partition``. Row counts and column statistics come from Parquet and ORC footers, and
        from one scan of CSV and JSON files. ``storage_options`` open the folder's filesystem
        (kept by this handle only: the table records no credentials). ``commit_properties``: as
        on :meth:`append` (None returned: its ``app_id`` committed its ``version`` already).

        Raises:
            InvalidOptionError: the path does not exist, holds no data files, or was added
                before; an unknown format; a bad or missing ``partition`` option, or partition
                folders that do not match it. The message quotes what was given and what is
                expected.
            SchemaMismatchError: a file lacks a table column or holds it with another type, or
                differs from its siblings (the file and column are named).
            DuplicateKeyError: (keyed tables) a key repeats within the files or is already in
                the table.
        """
        options = _write.write_options(self._context, commit_properties)
        if options is None:
            return None
        return _external.add_segment(self._context, path, format, partition=partition,
                                     storage_options=storage_options, extra=options.extra,
                                     progress=options.progress)

    def transaction(self, *, commit_properties: CommitProperties | None = None) -> Transaction:
        """Several writes committed as one instant, all or nothing::

            with t.transaction() as tx:
                tx.delete(keys=[1, 2])
                tx.append(data)

        Operations: ``tx.append(data)``, ``tx.upsert(data)``, ``tx.delete(where=None, *,
        keys=None)``, ``tx.update(where, values)``, ``tx.delete_rows({DataFile.path:
        positions})`` and ``tx.overwrite(data, partitions=None)`` (only as the first operation;
        partition-scoped, as the only one). Each sees the snapshot the transaction read at its
        first operation plus its own earlier operations; an operation that raises stages
        nothing. Leaving the block without an exception commits (``tx.result``: the
        ``txn.Commit``, operation ``"transaction"``, ``operations`` the names in order; None
        when nothing changed); an exception leaves the table as it was. Staged rows are held
        in memory until the commit. ``commit_properties``: as on :meth:`append`; an
        idempotent transaction whose ``app_id`` committed its ``version`` (found when it is
        created) ignores its operations and commits nothing.

        Raises (at the commit):
            CommitConflictError: a commit that completed after the transaction's snapshot wrote a
                key or data file the transaction read or wrote; nothing was written. A
                compaction meanwhile is not a conflict: the operations are replayed on the
                compacted table.
        """
        context = self._context
        return _write.Transaction(context, _write.write_options(context, commit_properties),
                                  after_load=lambda commit: _segments.after_load(context, commit))

    # -- streams -------------------------------------------------------------------------------

    def stream(self, name: str) -> _streams.Stream:
        """Start (or resume) stream ``name`` on this streaming table (``streaming=true``).

        ``s.write(batch_id, data)`` commits each batch exactly once into the stream's open
        ``Streaming`` segment; a batch id at or below the last committed one is skipped.

        Raises:
            InvalidOptionError: the table is not a streaming table, or the name is not a
                non-empty string.
        """
        return _streams.Stream(self._context, name)

    def stream_generation(self, name: str) -> int:
        """The generation of stream ``name`` its next batch belongs to: 0 for a stream never
        started, one more after each DROP STREAM. A producer fixes it when it starts and writes
        its batches with it (:class:`txn.StreamProgress`), so a drop fences it off.

        Raises:
            InvalidOptionError: the name is not a non-empty string.
        """
        return _streams.generation(self._context, name)

    def streams(self) -> list[_streams.StreamInfo]:
        """SHOW STREAMS: every stream not dropped (``Running`` while open in this process,
        else ``Stopped``), then every idempotent producer (``app_id``)."""
        return _streams.streams(self._context)

    def drop_stream(self, name: str) -> Commit:
        """DROP STREAM: ``name`` leaves SHOW STREAMS and its open segment becomes ``Streaming
        Finish``, in one commit. Starting a stream of the same name later begins afresh.

        Raises:
            StreamNotFoundError: no stream of that name (or it was dropped).
        """
        return _streams.drop_stream(self._context, name)

    # -- schema evolution and table properties -------------------------------------------------

    def add_columns(self, fields: Sequence[pa.Field] | pa.Schema, after: str | None = None) -> Commit:
        """Add nullable columns, in one commit: at the end, or the first after ``after`` and
        each next one after the one before. A dotted name (``"addr.country"``) adds a field to
        a struct column. Old files read the new columns as nulls.

        Raises:
            SchemaEvolutionError: a name that exists, a NOT NULL field (no defaults), a parent
                that is not a struct; nothing is written.
        """
        return _write.alter_table(self._context, _write.add_columns(fields, after))

    def drop_columns(self, names: Sequence[str]) -> Commit:
        """Drop columns (or struct fields), in one commit. Files are not rewritten: the values
        stay in them, unread; a column added later under a dropped name reads as null in them.

        Raises:
            SchemaEvolutionError: a record-key or partition column, an unknown column, or the
                last column; nothing is written.
        """
        names = _write.column_names(names, "drop_columns")
        return _write.alter_table(self._context, [_schema.DropColumn(n) for n in names])

    def rename_column(self, name: str, new_name: str) -> Commit:
        """Rename a column (``"addr.city"``: a struct field), in one commit. Old files are read
        by column id, so their values keep their column; record-key, partition and sort columns
        may be renamed (partition folders keep the name they were written with).

        Raises:
            SchemaEvolutionError: an unknown column, or a name that exists.
        """
        return _write.alter_table(self._context, [_schema.RenameColumn(name, new_name)])

    def alter_column(self, name: str, type: pa.DataType | None = None, *,
                     nullable: bool | None = None) -> Commit:
        """Widen a column's type (int8 -> int16 -> int32 -> int64, float32 -> float64, a
        decimal's precision up at the same scale, date32 -> timestamp) and/or make it nullable
        (``nullable=True``), in one commit. Old files are cast when read.

        Raises:
            SchemaEvolutionError: narrowing or any other type change, a record-key or partition
                column's type, or NOT NULL added; the message lists the allowed widenings.
        """
        return _write.alter_table(self._context, [_schema.AlterColumn(name, type=type, nullable=nullable)])

    def set_properties(self, values: Mapping[str, str]) -> Commit:
        """Set table properties (the bounds of design/properties.md apply), in one commit.
        Handles that have not refreshed keep the old values until their next read of the
        latest state; ``record_index.shards`` is fixed at creation.

        Raises:
            InvalidOptionError: a value out of bounds, or a fixed property.
        """
        values = check_properties(values) if isinstance(values, dict) else values
        return _write.alter_table(self._context, [_schema.SetProperties(values)])

    def unset_properties(self, keys: Sequence[str], *, missing_ok: bool = False) -> Commit:
        """Remove table properties (their defaults apply again), in one commit.

        Raises:
            InvalidOptionError: a key that is not set (unless ``missing_ok``).
        """
        return _write.alter_table(self._context, [_schema.UnsetProperties(keys, missing_ok=missing_ok)])

    def update_schema(self) -> _write.SchemaUpdate:
        """Several schema and property changes as one commit::

            with t.update_schema() as u:
                u.add_column("discount", pa.decimal128(15, 2)).rename_column("amt", "amount")

        The changes apply in order when the block ends without an exception; ``u.commit`` is
        the commit.
        """
        return _write.SchemaUpdate(self._context)

    def schema_history(self) -> list[SchemaVersion]:
        """Every version of the table's schema and properties, oldest first."""
        return _write.schema_history(self._context)

    # -- segment maintenance -------------------------------------------------------------------

    def compact(self, kind: str = CompactionKind.MINOR, *,
                segments: Sequence[str | int] | None = None) -> Commit | None:
        """Merge segments into one, CarbonData-style; returns the commit, or None when there is
        nothing to compact.

        ``kind``: ``"minor"`` (by count per level: table property
        ``compaction.level_threshold``, default ``"4,3"``), ``"major"`` (by size: segments
        together under ``compaction.major.size_mb``, default 1024) or ``"custom"`` (exactly
        ``segments``). The sources become ``Compacted`` with ``merged_to`` the new segment
        (``x.1``, ``x.2``, ...); their rows, less those deleted by delete deltas, are rewritten
        sorted by ``sort_by``, with their column statistics and record-index entries, in one
        commit. Appends never conflict with it.

        Raises:
            InvalidOptionError: an unknown ``kind``, or ``segments`` with a kind other than
                custom, or a segment that cannot be compacted (its status is named).
            SegmentNotFoundError: a custom segment id that does not exist.
            CommitConflictError: a delete, update, upsert or DELETE SEGMENT changed a source
                segment while the compaction ran; nothing was written.
        """
        return _segments.compact(self._context, kind, segments=segments)

    def begin_compaction(self, kind: str = CompactionKind.MINOR, *,
                         segments: Sequence[str | int] | None = None) -> _twophase.PendingCompaction | None:
        """Begin one round of a compaction whose rows are rewritten elsewhere (Spark executors,
        other workers), committed once by the returned :class:`txn.PendingCompaction`; None when
        there is nothing to compact.

        The same round :meth:`compact` runs: the same ``kind`` and ``segments``, selection,
        target name (``pending.target``), admission and conflict rule. Read the live rows of
        ``pending.files()`` with ``pending.file_reader()``, write them with
        ``txn.write_files(pending.ticket, ...)``, then ``pending.commit(reports)``; leaving the
        ``with`` block without a commit, or by an exception, aborts it and deletes what the
        workers wrote. ``"minor"`` and ``"close_streaming"`` may find more after a round:
        begin again until None, as :meth:`compact` does.

        Raises:
            InvalidOptionError, SegmentNotFoundError: as :meth:`compact`, nothing begun.
        """
        return _twophase.begin_compaction(self._context, kind, segments=segments)

    def delete_segments(self, ids: Sequence[str | int] | None = None, *,
                        before: datetime | None = None) -> Commit:
        """DELETE SEGMENT: mark segments ``Marked for Delete`` in one commit; readers stop seeing
        them at once, and CLEAN FILES removes their files later.

        ``ids``: all or nothing (one id that cannot be deleted refuses the whole request).
        ``before``: every ``Success`` or ``Streaming Finish`` segment loaded before this moment
        (naive means UTC). The commit's ``segments_removed`` lists what was marked.

        Raises:
            SegmentNotFoundError: an id that does not exist (or was already deleted), or no
                segment loaded before ``before``.
            InvalidOptionError: neither or both of ``ids`` and ``before``, or a segment whose
                status forbids it (``Compacted``, ``Streaming``, a load still running).
            CommitConflictError: a running compaction is merging one of the segments, or one
                changed while the delete ran; nothing was written.
        """
        return _segments.delete_segments(self._context, ids, before=before)

    def clean(self, *, dry_run: bool = False, force: bool = False) -> CleanResult:
        """CLEAN FILES: remove what no retained snapshot needs; returns what was removed.

        As in CarbonData, the files of ``Compacted`` and ``Marked for Delete`` segments and
        replaced delete deltas are deleted for good once no snapshot within
        ``clean.retain_commits`` commits and ``clean.retain_hours`` hours needs them, and those
        segments then leave :meth:`segments` for its history; files of no segment (orphans of
        failed writes) go to the table's trash, kept ``clean.trash_hours``. ``force`` ignores
        retention (time travel before the last commit then expires) and empties the trash, but
        never touches what a running writer or the current snapshot needs. ``dry_run`` changes
        nothing. External files are never removed. The result tells freed bytes
        (``freed_bytes``) from bytes moved to the trash (``trashed_bytes``).
        """
        return _segments.clean(self._context, dry_run=dry_run, force=force)

    def maintain(self) -> MaintenanceReport:
        """Run the table services that are due now: a metadata compaction (once
        ``metadata.compact_after`` commits completed since the last), the metadata table's
        cleaning, archival of the timelines and the sweep of leftover markers.

        Each is an instant of its own: writers go on committing while it runs, and readers use
        its result only once it completed. Writers also start it after their commits (table
        property ``maintenance.mode``: ``inline``, the default, ``async`` or ``manual``, where
        only this method runs it). A compaction already running elsewhere is not waited for:
        the report says it was skipped.
        """
        return maintain(self._context, protocol_of(self._context))

    # -- two-phase writes (distributed writers) ------------------------------------------------

    def begin_write(self, operation: str = "append", *, read_instant: str | Snapshot | None = None,
                    partitions: str | Mapping[str, Any] | None = None,
                    commit_properties: CommitProperties | None = None,
                    stream_progress: StreamProgress | None = None, schema_mode: str | None = None,
                    data_schema: pa.Schema | None = None) -> _twophase.PendingWrite:
        """Begin a write whose data files are written elsewhere (Spark executors, Ray or Dask
        workers, other processes), committed once by the returned :class:`txn.PendingWrite`.

        ``operation``: ``append``, ``overwrite``, ``upsert``, ``delete``, ``update`` or ``merge``
        (an engine's MERGE: committed as ``update`` is, new rows and deletes by position, and
        recorded as a merge, whose change feed shows deletes and inserts on unkeyed tables).
        ``read_instant``: the snapshot the caller planned from (``Snapshot.instant``, a
        ``Snapshot``, ``KeyProbe.read_instant``; None: the latest); the commit is checked for
        conflicts against every commit completed after it, as a local write is. ``partitions``:
        an overwrite's scope, as for :meth:`overwrite`. ``commit_properties``: ``extra`` and an
        idempotent ``app_id``/``version`` (when that version committed already, nothing begins
        and ``PendingWrite.skipped`` is True). ``stream_progress``: the write is a stream's batch
        (:class:`txn.StreamProgress`), committed exactly once in the same way; the commit moves
        the stream's record to it.

        ``schema_mode="merge"`` (append, overwrite, upsert; not a stream's batch) with
        ``data_schema`` (the data's ``pyarrow.Schema``): the table takes its new columns and
        widenings in the write's own instant, as :meth:`append` describes. The new version is
        worked out under the lock at begin; ``pending.ticket`` carries its schema and
        ``schema_id``, which the workers write, and the commit creates it
        (``SchemaChangedError`` if another schema change completed meanwhile: begin again).

        Begins the instant now (its segment allocated, its heartbeat beating). Hand
        ``pending.ticket`` to the workers (:func:`txn.write_files`), then
        ``pending.commit(reports, deletes={path: positions})``; leaving the ``with`` block
        without a commit, or by an exception, aborts it and deletes what the workers wrote.
        """
        return _twophase.begin_write(self._context, operation, read_instant=read_instant,
                                     partitions=partitions, commit_properties=commit_properties,
                                     progress=_twophase.stream_progress(stream_progress),
                                     schema_mode=schema_mode, data_schema=data_schema)

    def already_committed(self, commit_properties: CommitProperties | None = None, *,
                          stream_progress: StreamProgress | None = None) -> bool:
        """Whether ``commit_properties``' ``app_id`` committed its ``version`` (or a later one)
        already, or the stream of ``stream_progress`` its batch: a write with them would commit
        nothing. Ask before work a replay need not do (``begin_write`` checks again, under the
        lock).

        Raises:
            StreamDroppedError: ``stream_progress``'s generation is one the stream has left.
        """
        return _twophase.already_done(self._context, commit_properties,
                                      _twophase.stream_progress(stream_progress))

    def key_probe(self, read_instant: str | Snapshot | None = None) -> _twophase.KeyProbe:
        """A picklable probe that finds the live rows of record keys in the snapshot
        ``read_instant`` names (None: the latest), on any worker: ``probe.find(rows)`` returns
        the keys found with ``file`` and ``position``; ``probe.refuse(found)`` is the keyed
        append's check (DuplicateKeyError). Begin the write with
        ``read_instant=probe.read_instant`` so conflicts are checked from that snapshot on."""
        return _twophase.key_probe(self._context, read_instant)

    # -- reads ---------------------------------------------------------------------------------

    def snapshot(self, as_of: str | datetime | None = None) -> Snapshot:
        """The table as of the latest completed instant, or as of ``as_of``.

        ``as_of`` is an instant time from the timeline (the snapshot then includes that instant
        and everything that completed before it), a ``datetime`` (everything completed at or
        before it, to the millisecond; naive means UTC), or an ISO-8601 date or timestamp string
        (``"2026-01-01"``: its midnight; ``"2026-01-01 10:00:00"``, ``"2026-01-01T10:00:00Z"``,
        ``"2026-01-01T10:00:00.123+02:00"``), read as that ``datetime`` (UTC unless it carries
        an offset). Anything else raises ``InvalidOptionError`` naming these forms. Snapshots
        follow completion order, so resolving the same ``as_of`` again later gives the same rows.
        """
        return _read.snapshot(self._context, as_of)

    def to_arrow(self, filter: ds.Expression | None = None, columns: list[str] | None = None,
                 as_of: str | datetime | None = None) -> pa.Table:
        """The rows of the snapshot ``as_of`` (the latest when None; an instant time, a
        ``datetime`` or an ISO-8601 date or timestamp string: see :meth:`snapshot`)."""
        return self.snapshot(as_of).to_arrow(filter=filter, columns=columns)

    def count(self, filter: ds.Expression | None = None,
              as_of: str | datetime | None = None) -> int:
        """The number of live rows of the snapshot ``as_of`` (the latest when None; see
        :meth:`snapshot`) matching ``filter``: ``snapshot(as_of).count(filter)``.

        Without a filter no data file is read, and the latest snapshot's count is kept per
        process until another instant completes: asking again, through this handle or any
        other of the same table, costs one listing of the timeline.
        """
        return _read.count_rows(self._context, filter, as_of)

    def to_pandas(self, filter: ds.Expression | None = None, columns: list[str] | None = None,
                  as_of: str | datetime | None = None) -> Any:
        """The rows as a ``pandas.DataFrame`` (``Snapshot.to_pandas`` of :meth:`snapshot`)."""
        return self.snapshot(as_of).to_pandas(filter=filter, columns=columns)

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream of the latest snapshot's rows (resolved at each call):
        ``duckdb.sql("select count(*) from t")``, ``pa.table(t)`` and ``pl.DataFrame(t)``
        read the table lazily, deletes applied. A consumer that asks twice may see a commit
        made in between: pin one with ``t.snapshot()`` or ``txn.duckdb.register``."""
        return self.snapshot().__arrow_c_stream__(requested_schema)

    def scanner(self, columns: list[str] | None = None, filter: ds.Expression | None = None,
                batch_size: int | None = None, *, as_of: str | datetime | None = None,
                memory_budget: int | None = None) -> Scanner:
        """A lazy scan of the latest snapshot (or the one as of ``as_of``), record batch by
        record batch with bounded memory: see ``Snapshot.scanner`` and :class:`txn.Scanner`."""
        return self.snapshot(as_of).scanner(columns, filter, batch_size,
                                            memory_budget=memory_budget)

    def changes(self, start: str | datetime, end: str | datetime | None = None, *,
                columns: list[str] | None = None, filter: ds.Expression | None = None,
                batch_size: int | None = None) -> ChangeScanner:
        """The rows changed by the instants that completed after ``start`` and up to ``end``:
        Hudi's incremental query, Delta's change data feed (design/changes.md).

        ``start`` (exclusive) and ``end`` (inclusive) are what ``as_of`` accepts (an instant
        time, meaning its completion; a ``datetime``; an ISO-8601 string); ``start`` may also be
        ``"earliest"``; ``end`` defaults to the newest completed instant. Instants count by
        *completion* time, so a write that began before another but completed after it is in the
        window holding its completion: consecutive windows (the next one starting at the last
        one's ``end``) see every change exactly once.

        Each row has ``columns`` of the table (all by default, in the schema as of ``end``) and
        ``_change_type`` (``insert``, ``update_preimage``, ``update_postimage``, ``delete``),
        ``_commit_instant`` and ``_commit_time``; ``filter`` may use both. Table services
        (compaction, hand-off, clean) and schema changes emit no rows. The window is planned
        now from commit metadata only; rows are read when the scanner is iterated, only from the
        files and delete deltas the window's instants wrote or deleted from.

        Raises:
            InvalidOptionError: a bound of another form, an instant not completed, ``end``
                before ``start``, unknown ``columns`` or a ``filter`` that does not apply.
            SnapshotExpiredError: cleaning removed what changes after ``start`` need (the
                message names the oldest instant a window may start at; the table property
                ``changes.retain_commits`` keeps more).
        """
        return _changes.changes(self._context, start, end, columns=columns, filter=filter,
                                batch_size=batch_size)

    def lookup(self, keys: Any) -> pa.Table:
        """Where the rows with these record keys live, from the record-level index.

        ``keys``: for a one-column key a list or pyarrow array of values; for any key a pyarrow
        Table with the key columns (or a list of tuples). Returns the keys found, with
        ``segment``, ``file`` (table-relative path) and ``position`` (row number in the file).
        """
        return _write.lookup(self._context, keys)

    def segments(self, *, history: bool = False) -> list[Segment]:
        """SHOW SEGMENTS: every segment, newest first; loads still running are ``Insert In Progress``.

        A ``Compacted`` or ``Marked for Delete`` segment leaves the list once CLEAN FILES removed
        its files. ``history=True`` (CarbonData's SHOW HISTORY SEGMENTS) lists those too, after
        the others, each with its final status and ``cleaned`` / ``cleaned_instant`` set.
        """
        return _segments.segments(self._context, history=history)

    def partitions(self) -> list[dict[str, object]]:
        """SHOW PARTITIONS: the partition values that hold live data, sorted."""
        return _segments.partitions(self._context)

    def validate(self) -> ValidationReport:
        """Compare the metadata table with what is on storage and report every disagreement."""
        return _segments.validate(self._context)

    def __repr__(self) -> str:
        return f"txn.Table({self._context.uri!r})"


def create_table(
    uri: str | os.PathLike[str],
    schema: pa.Schema,
    *,
    partition_by: list[str] | None = None,
    record_key: str | list[str] | None = None,
    sort_by: list[str] | None = None,
    properties: dict[str, str] | None = None,
    storage_options: dict[str, Any] | None = None,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
    data: WriteInput | None = None,
    staged: bool = False,
) -> Table:
    """Create a table at ``uri`` and return it: empty, or holding ``data`` as its first commit.

    Creation is atomic: ``table.json`` is written with put-if-absent, so of two racing creators
    exactly one succeeds.

    ``data`` (what :meth:`Table.append` takes) makes the create staged, as a create-table
    transaction: the table appears together with the commit that loads ``data`` (its
    ``table.json`` is put under the table lock at that commit's commit point) and not before.
    If the load fails (a schema mismatch, a duplicate key, a crash), there is no table at
    ``uri`` afterwards and the location can be created again; of two staged creators of one
    location exactly one commits, the other's write rolls back with TableExistsError. ``data``
    of no rows creates the empty table. See design/protocol.md, "Staged create".

    ``staged=True`` without ``data``: nothing is written now; the table returned exists with its
    first commit (any write on it), or when :meth:`Table.publish` is called (empty), and not
    before (``Table.staged`` says which). An engine's create-table-as-select stages the create
    this way, so a failed load leaves no table.

    Raises:
        TableExistsError: a table is already there (or, with ``data``, appeared before the
            load committed).
        InvalidOptionError: the schema, a layout column, a property or the location is not
            acceptable; the message says which and what is expected. Nothing is written.
        SchemaMismatchError, DuplicateKeyError: ``data`` cannot be loaded (as for
            :meth:`Table.append`); no table is created.
    """
    context = create_context(uri, schema, partition_by=partition_by, record_key=record_key,
                             sort_by=sort_by, properties=properties,
                             storage_options=storage_options, clock=clock, ids=ids,
                             staged=staged or data is not None)
    table = Table._over(context)
    if data is not None:
        assert context.staged is not None
        if table.append(data) is None:
            context.staged.publish()  # no rows: the empty table
    return table


def open_table(
    uri: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
) -> Table:
    """Open the table at ``uri``.

    Raises:
        TableNotFoundError: there is no table there.
        CorruptMetadataError: ``table.json`` cannot be read; the error names the file.
    """
    return Table._over(open_context(uri, storage_options, clock=clock, ids=ids))
