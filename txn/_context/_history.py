"""A table's history (``Table.history``): one entry per completed instant, newest first, built
from what each instant already stores (its commit metadata, a clean's or rollback's own).

Reads only: the timeline (active and archived, lazily, so ``limit`` reads about ``limit``
instants) and, for removed files whose adding commit is outside what was read, the latest
``files`` records of the metadata table. Nothing is written. An instant whose metadata cannot be
decoded is listed with ``operation`` None and a warning: history is for looking, and one damaged
file must not hide the others (``validate()`` reports it).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Mapping

import msgspec

from metatxn.indexes import FILES
from metatxn.timeline import Action, ArchivedInstant, InvalidOptionError, parse_time

from .._results import HistoryEntry
from ._table_context import TableContext
from ._timeline_records import DATA_ACTIONS, CommitMetadata

log = logging.getLogger("metatxn")


class _CleanCounts(msgspec.Struct, frozen=True, kw_only=True, tag="clean", tag_field="kind"):
    """What history reads of a clean's metadata (``_segments``' ``CleanMetadata``, which lives
    in a room above this one; unknown fields are ignored, so it reads every version of it)."""

    moved: list[str] = msgspec.field(default_factory=list)
    deleted: list[str] = msgspec.field(default_factory=list)
    removed: list[str] = msgspec.field(default_factory=list)
    metadata_deleted: list[str] = msgspec.field(default_factory=list)
    temporaries_deleted: list[str] = msgspec.field(default_factory=list)
    bytes: int = 0


class _RollbackCounts(msgspec.Struct, frozen=True, kw_only=True):
    """What history reads of a rollback's metadata (the undo's record: data files deleted)."""

    files_deleted: list[str] = msgspec.field(default_factory=list)


_commit = msgspec.json.Decoder(CommitMetadata)
_clean = msgspec.json.Decoder(_CleanCounts)
_rollback = msgspec.json.Decoder(_RollbackCounts | None)


def history(context: TableContext, limit: int | None = None) -> list[HistoryEntry]:
    """Every completed instant, newest completion first; the newest ``limit`` only when given.

    Raises:
        InvalidOptionError: ``limit`` is not a positive int (or None).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidOptionError(f"history limit must be a positive int or None, got {limit!r}")
    records = list(itertools.islice(context.timeline.completed_newest_first(), limit))
    decoded = [(record, _decode(record)) for record in records]
    sizes = _removed_sizes(context, [m for _, m in decoded if isinstance(m, CommitMetadata)])
    return [_entry(record, metadata, sizes) for record, metadata in decoded]


def _decode(record: ArchivedInstant) -> CommitMetadata | _CleanCounts | _RollbackCounts | None:
    """The instant's metadata; None, with a warning, when it cannot be decoded."""
    if record.damaged is not None:
        log.warning("history: the metadata of instant %s (%s) is damaged; listed without it "
                    "(validate() reports the file)", record.time, record.action)
        return None
    try:
        if record.action in DATA_ACTIONS:
            return _commit.decode(record.metadata)
        if record.action == Action.CLEAN:
            return _clean.decode(record.metadata)
        if record.action == Action.ROLLBACK:
            return _rollback.decode(record.metadata) or _RollbackCounts()
    except msgspec.DecodeError as exc:
        log.warning("history: the metadata of instant %s (%s) does not decode: %s; listed "
                    "without it", record.time, record.action, exc)
        return None
    return _RollbackCounts()  # another action (a savepoint) records no counts


def _removed_sizes(context: TableContext, commits: Iterable[CommitMetadata]) -> dict[str, int | None]:
    """The size of every file the commits removed: from the commit that added it when that
    was read too, else from the latest ``files`` records, which keep removed files until CLEAN
    FILES purges them (None then)."""
    commits = list(commits)
    wanted = {path for c in commits for path in c.files_removed}
    if not wanted:
        return {}
    sizes: dict[str, int | None] = {s.path: s.size for c in commits for s in c.files_added
                                    if s.path in wanted}
    missing = wanted - sizes.keys()
    if missing:
        files = context.metadata_at(context.timeline.load(), None, (FILES,)).files
        if files is not None:
            known = files.select(["path", "size"]).to_pydict()
            sizes.update((p, s) for p, s in zip(known["path"], known["size"], strict=True)
                         if p in missing)
    return sizes


def _total(paths: Iterable[str], sizes: Mapping[str, int | None]) -> int | None:
    found = [sizes.get(path) for path in paths]
    return None if None in found else sum(s for s in found if s is not None)


def _entry(record: ArchivedInstant, metadata: object, sizes: Mapping[str, int | None]) -> HistoryEntry:
    completed_at = record.completed_at or record.time
    bare = HistoryEntry(instant=record.time, completed_at=completed_at, action=record.action,
                        operation=None, duration_ms=parse_time(completed_at) - parse_time(record.time))
    if isinstance(metadata, CommitMetadata):
        return msgspec.structs.replace(
            bare, operation=metadata.operation, operations=tuple(metadata.operations),
            segment=metadata.segment, rows_added=metadata.rows_added,
            rows_deleted=metadata.rows_deleted, files_added=len(metadata.files_added),
            files_removed=len(metadata.files_removed),
            bytes_added=sum(f.size for f in metadata.files_added)
            + sum(d.size for d in metadata.deltas_added),
            bytes_removed=_total(metadata.files_removed, sizes),
            deltas_added=len(metadata.deltas_added),
            segments_removed=tuple(metadata.segments_removed),
            segments_merged=tuple(metadata.segments_merged), extra=dict(metadata.extra),
            app_id=metadata.app_id, version=metadata.app_version,
            schema_version=metadata.schema_version, retries=metadata.retries,
            read_at=metadata.read_at)
    if isinstance(metadata, _CleanCounts):
        removed = (metadata.moved, metadata.deleted, metadata.removed, metadata.metadata_deleted,
                   metadata.temporaries_deleted)
        return msgspec.structs.replace(bare, operation=record.action, bytes_removed=metadata.bytes,
                                       files_removed=sum(len(paths) for paths in removed))
    if isinstance(metadata, _RollbackCounts):
        return msgspec.structs.replace(bare, operation=record.action,
                                       files_removed=len(metadata.files_deleted))
    return bare
