"""Planning a change feed: which instants a window holds, and which rows of which files each
one changed, from the timeline's commit metadata alone.

A window ``(start, end]`` holds the data instants whose *completion* time falls in it, in
completion order (the order snapshots follow), so a write that began early and completed late is
in exactly one window: the one holding its completion. For each instant the plan lists slices
of files (design/changes.md, "What each operation emits"):

- the data files it added: every row an insert (a keyed upsert's rows are paired with the rows
  they replace when the feed is read);
- each delete delta it wrote: the rows at the delta's positions, less those of the deltas it
  replaced (a horizontal compaction writes the union of a file's deleted positions), deleted;
- each data file it removed (an overwrite, DELETE SEGMENT): the rows live just before it, i.e.
  all rows less those of every delta written on the file before it, deleted.

Table services (compaction, hand-off, clean, rollback, index upkeep) and schema or property
changes emit nothing. Planning reads no data file: the commit metadata of the window's instants
(the newest first, stopping at ``start``) and, only when an instant deleted or removed rows of a
file it did not write, the latest ``files`` and ``deletes`` records of the metadata table
(which keep removed files' records until CLEAN FILES purges them, and a window past that is
refused before it is read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from metatxn.timeline import CorruptMetadataError

from .._context import DATA_ACTIONS, CommitMetadata, TableContext
from .._files import DELTA_SUFFIX, FileStatus, delta_path, is_external
from .._results import ChangeInstant, Operation

#: Operations that change no row: their instants emit nothing (a compaction also covers the
#: hand-off of streaming segments and the merging of a stream's small files).
SILENT: Final = frozenset({Operation.COMPACT, Operation.ALTER_TABLE, Operation.DROP_STREAM})

#: How a part's deleted and inserted rows are labelled.
#: ``none``: deletes and inserts; ``update``: every deleted row a pre-image and every written row
#: a post-image (an update of an unkeyed table); ``keys``: by record key, a key both deleted and
#: written by the instant is an update (pre- and post-image), the others deletes and inserts.
PAIRING_NONE, PAIRING_UPDATE, PAIRING_KEYS = "none", "update", "keys"

#: A delta's row count where the commit that names it does not record it.
UNKNOWN_ROWS: Final = -1

#: A slice's role in its instant.
INSERTED, DELETED = "insert", "delete"


class FileSlice(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """Some rows of one data file that one instant changed."""

    #: The file's key: its path in the table, or an external file's URL.
    key: str
    #: ``insert`` (rows written) or ``delete`` (rows deleted).
    role: str
    format: str = "parquet"
    #: The table version the file was written with.
    schema_id: int = 0
    #: Rows in the file as written.
    rows: int = 0
    #: The deltas whose positions are the rows (a delete by delta); empty: every row of the file.
    only: list[tuple[str, int]] = msgspec.field(default_factory=list)
    #: Deltas whose positions are not the instant's rows: deleted before it, or replaced by it.
    minus: list[tuple[str, int]] = msgspec.field(default_factory=list)
    #: Deltas among ``minus`` that cleaning may have removed: replaced ones, whose positions
    #: their replacement (also in ``minus``) holds; read when present.
    replaced: list[str] = msgspec.field(default_factory=list)
    #: An external file's record at ADD SEGMENT (size, rows, version, modified ms), so a file
    #: changed since is refused, as every read of the table refuses it.
    record: tuple[int, int, str | None, int | None] | None = None


class ChangePart(msgspec.Struct, frozen=True, kw_only=True):
    """A unit of a change feed's work: the changes of one instant (or, for an instant that only
    inserted rows, of one of its files), read by ``ChangeScanner.read_part`` on any process."""

    instant: str
    completed_at: str
    operation: str
    #: Data files and delete deltas it reads.
    files: int
    #: Rows inserted plus rows deleted, before a filter.
    rows: int
    pairing: str = PAIRING_NONE
    slices: list[FileSlice] = msgspec.field(default_factory=list)


class Window(msgspec.Struct, frozen=True, kw_only=True):
    """A window's bounds and what it holds."""

    start: str
    end: str
    parts: list[ChangePart]
    instants: list[ChangeInstant]
    #: False in a scanner unpickled on a worker: the plan stays with the scanner that made it.
    planned: bool = True


_commit = msgspec.json.Decoder(CommitMetadata)


def walk(context: TableContext, start: str, end: str) -> Iterator[tuple[str, str, CommitMetadata]]:
    """``(instant, completed_at, metadata)`` of the data instants completed in ``(start, end]``,
    in completion order (read newest first, down to ``start``).

    Raises:
        CorruptMetadataError: an instant's commit metadata is damaged: its changes are unknown,
            and a feed without them would be partial.
    """
    found = []
    for record in context.timeline.completed_newest_first():
        done = record.completed_at or ""
        if done <= start:
            break
        if done > end or record.action not in DATA_ACTIONS:
            continue
        if record.damaged is not None:
            raise CorruptMetadataError(
                f"instant {record.time} ({record.action})", "commit metadata the change feed can "
                "read (validate() reports the file)", "a damaged completed file")
        try:
            found.append((record.time, done, _commit.decode(record.metadata)))
        except msgspec.DecodeError as exc:
            raise CorruptMetadataError(f"instant {record.time} ({record.action})",
                                       "commit metadata (JSON)", str(exc)) from None
    return reversed(found)


class FileInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a slice needs of a data file's record."""

    format: str = "parquet"
    schema_id: int = 0
    rows: int = 0
    size: int = 0
    version: str | None = None
    modified_ms: int | None = None


class FileRecords:
    """The latest ``files`` and ``deletes`` records, resolved once, when an instant deletes rows
    of a file it did not write (removed files' records included). Looked up in Arrow, one file
    at a time: the partitions grow with the table, a window's lookups with the window."""

    def __init__(self, resolve: Callable[[], tuple[pa.Table, pa.Table]]) -> None:
        self._resolve = resolve
        #: Files the window's instants added, known without the metadata table.
        self.known: dict[str, FileStatus] = {}
        self._tables: tuple[pa.Table, pa.Table] | None = None

    def _load(self) -> tuple[pa.Table, pa.Table]:
        if self._tables is None:
            self._tables = self._resolve()
        return self._tables

    def file(self, key: str) -> FileInfo:
        status = self.known.get(key)
        if status is not None:
            return FileInfo(format=status.format, schema_id=status.schema_id, rows=status.rows,
                            size=status.size, version=status.version,
                            modified_ms=status.modified_ms)
        files = self._load()[0]
        found = files.filter(pc.equal(files["path"], key))
        if not found.num_rows:
            raise CorruptMetadataError(
                key, "a file record in the metadata table's files partition (a data file a "
                "completed commit deleted rows of)", "no record")
        row = found.slice(0, 1).to_pylist()[0]
        return FileInfo(**{name: row[name] for name in FileInfo.__struct_fields__
                           if row.get(name) is not None})

    def deltas(self, key: str, before: str) -> tuple[list[tuple[str, int]], list[str]]:
        """The deltas written on data file ``key`` by instants other than ``before``, and those
        of them that are tombstoned (replaced, or removed with the file).

        Their union is what was deleted of the file just before ``before`` removed it: deltas
        only add positions (a replaced delta's are in its replacement) and none completes
        after the file's removal. A tombstoned one that cleaning removed (a window past the
        floor is refused, so only a replaced one) is covered by its replacement.
        """
        deletes = self._load()[1]
        found = deletes.filter(pc.and_(pc.equal(deletes["file"], key),
                                       pc.not_equal(deletes["instant"], before)))
        rows = found.select(["path", "rows", "deleted"]).to_pylist()
        return ([(r["path"], r["rows"]) for r in rows],
                [r["path"] for r in rows if r["deleted"]])


def _delta_file(delta: str, file: str) -> bool:
    """Whether delete delta ``delta`` belongs to data file ``file``: its name is the file's stem
    (an external file's: a hash of its URL) then ``_<instant>.deletedelta``."""
    return (delta.removesuffix(DELTA_SUFFIX).rsplit("_", 1)[0]
            == delta_path(file, "0").removesuffix(DELTA_SUFFIX).rsplit("_", 1)[0])


def _status_slice(status: FileStatus, role: str, minus: list[tuple[str, int]]) -> FileSlice:
    record = ((status.size, status.rows, status.version, status.modified_ms)
              if is_external(status.path) else None)
    return FileSlice(key=status.path, role=role, format=status.format, schema_id=status.schema_id,
                     rows=status.rows, minus=minus, record=record)


def _record_slice(key: str, record: FileInfo, role: str,
                  only: list[tuple[str, int]], minus: list[tuple[str, int]]) -> FileSlice:
    external = ((record.size, record.rows, record.version, record.modified_ms)
                if is_external(key) else None)
    return FileSlice(key=key, role=role, format=record.format, schema_id=record.schema_id,
                     rows=record.rows, only=only, minus=minus, record=external)


def plan_instant(instant: str, completed_at: str, metadata: CommitMetadata, keyed: bool,
                 records: FileRecords) -> tuple[ChangeInstant | None, list[ChangePart]]:
    """One instant's entry and the parts of its changes (none for a table service or a schema
    change)."""
    if metadata.operation in SILENT:
        return None, []
    added = {status.path: status for status in metadata.files_added}
    own_deltas: dict[str, list[tuple[str, int]]] = {}
    deletes: list[FileSlice] = []
    for delta in metadata.deltas_added:
        if delta.file in added:  # rows it wrote and deleted at once are no change
            own_deltas.setdefault(delta.file, []).append((delta.path, delta.rows))
            continue
        replaced = [(path, UNKNOWN_ROWS) for path in metadata.deltas_removed
                    if _delta_file(path, delta.file)]
        deletes.append(_record_slice(delta.file, records.file(delta.file), DELETED,
                                     [(delta.path, delta.rows)], replaced))
    for path in metadata.files_removed:
        before, tombstoned = records.deltas(path, instant)
        deletes.append(msgspec.structs.replace(
            _record_slice(path, records.file(path), DELETED, [], before), replaced=tombstoned))
    inserts = [_status_slice(status, INSERTED, own_deltas.get(path, []))
               for path, status in added.items()]
    if not deletes and not inserts:
        return None, []
    operation = str(metadata.operation)
    pairing = _pairing(metadata, keyed) if deletes and inserts else PAIRING_NONE
    entry = ChangeInstant(instant=instant, completed_at=completed_at, operation=operation,
                          files=_files(deletes + inserts),
                          rows=metadata.rows_added + metadata.rows_deleted)
    if deletes or pairing != PAIRING_NONE:
        return entry, [ChangePart(instant=instant, completed_at=completed_at, operation=operation,
                                  files=entry.files, rows=entry.rows, pairing=pairing,
                                  slices=deletes + inserts)]
    # Only inserts: a part per file, so an engine reads a large load's files in parallel.
    return entry, [ChangePart(instant=instant, completed_at=completed_at, operation=operation,
                              files=_files([piece]), rows=piece.rows, slices=[piece])
                   for piece in inserts]


def _pairing(metadata: CommitMetadata, keyed: bool) -> str:
    """How an instant that both deleted and wrote rows labels them. An overwrite (alone, or in
    a transaction) and DELETE SEGMENT replace data wholesale: deletes and inserts, as Delta's
    feed shows an overwrite, even where a key happens to come back."""
    if metadata.operation in (Operation.OVERWRITE, Operation.DELETE_SEGMENTS) \
            or Operation.OVERWRITE in metadata.operations:
        return PAIRING_NONE
    if keyed:
        return PAIRING_KEYS
    return PAIRING_UPDATE if metadata.operation == Operation.UPDATE else PAIRING_NONE


def _files(slices: list[FileSlice]) -> int:
    return sum(1 + len(piece.only) + len(piece.minus) for piece in slices)


def plan_window(context: TableContext, start: str, end: str, keyed: bool,
                records: FileRecords) -> Window:
    """Every instant and part of the window ``(start, end]``, in completion order."""
    parts: list[ChangePart] = []
    instants: list[ChangeInstant] = []
    for instant, completed_at, metadata in walk(context, start, end):
        entry, found = plan_instant(instant, completed_at, metadata, keyed, records)
        records.known.update((status.path, status) for status in metadata.files_added)
        if entry is not None:
            instants.append(entry)
            parts.extend(found)
    return Window(start=start, end=end, parts=parts, instants=instants)
