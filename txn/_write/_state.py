"""The state a write reads: the latest snapshot's metadata, and record keys found in it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import (
    DELETES,
    FILES,
    MAX_BATCH,
    MetadataSnapshot,
    ProducerKind,
    SnapshotExpiredError,
    live,
)
from metatxn.timeline import Action, InvalidOptionError, ObjectNotFoundError, SchemaChangedError, TimelineView

from .._commit import (
    AlreadyCommitted,
    CompactedMeanwhileError,
    DataWrite,
    Progress,
    RowChanges,
    check_generation,
    commit,
    committed,
    in_range,
    producer_record,
)
from .._context import TableContext
from .._files import LiveDeltas, check_external, is_external
from .._results import Commit

log = logging.getLogger("metatxn")

T = TypeVar("T")
W = TypeVar("W", bound=DataWrite)
#: How often a write reads the latest state again when cleaning overtook its read.
_ATTEMPTS = 3


@dataclass(frozen=True)
class State:
    """The latest snapshot's metadata, as a write reads it."""

    view: TimelineView
    read_at: str | None
    metadata: MetadataSnapshot
    live_files: pa.Table
    deltas: LiveDeltas
    #: live path -> ``files.schema_id``, built on first use by :meth:`written`.
    _schema_ids: dict[str, int] | None = field(default=None, compare=False, repr=False)

    def schema_id(self, context: TableContext, path: str) -> int:
        """The ``files.schema_id`` of live file ``path`` (the current one for a path not live)."""
        schema_ids = self._schema_ids
        if schema_ids is None:
            ids = (self.live_files["schema_id"].to_pylist() if "schema_id" in
                   self.live_files.column_names else [0] * self.live_files.num_rows)
            schema_ids = dict(zip(self.live_files["path"].to_pylist(),
                                  (i or 0 for i in ids), strict=True))
            object.__setattr__(self, "_schema_ids", schema_ids)  # frozen: a cache, not state
        return schema_ids.get(path, context.schema_id)

    def written(self, context: TableContext, path: str) -> pa.Schema | None:
        """The schema live file ``path`` was written with when it is not the current one (for
        ``scan_file(..., written=)``), None when it is (or the path is not live)."""
        schema_id = self.schema_id(context, path)
        return None if schema_id == context.schema_id else context.schema_of(schema_id)


def read_state(context: TableContext) -> State:
    view = context.timeline.load()
    last = view.last_completed()
    metadata = context.metadata_at(view, None, (FILES, DELETES))
    assert metadata.files is not None
    if context.store.external is not None:  # what its scans compare the external files with
        context.store.external.remember(metadata.files)
    return State(view, last.completed_at if last else None, metadata, live(metadata.files),
                 LiveDeltas.of(context.store, metadata.deletes))


def find_keys(context: TableContext, state: State, keys: pa.Table) -> pa.Table:
    """The live index entries of ``keys`` (index key columns) in ``state``.

    Raises:
        SnapshotExpiredError: cleaning removed ``state``'s index files meanwhile (many commits
            completed since it was read); callers that read the latest state read it again.
    """
    index = context.metadata.record_index
    assert index is not None
    if state.read_at is None or keys.num_rows == 0:
        return index.schema.empty_table()
    completed = {i.time: i.completed_at or "" for i in state.view.completed()}
    entries = context.metadata.lookup_keys(keys, completed, state.read_at)
    alive = pc.and_(pc.invert(entries["deleted"]),
                    pc.is_in(entries["file"], value_set=state.live_files["path"].combine_chunks()))
    return entries.filter(alive)


def latest(context: TableContext, work: Callable[[State], T], *, attempts: int = _ATTEMPTS) -> T:
    """Run ``work`` on the latest state; again on a fresh one if cleaning overtook it."""
    for attempt in range(attempts):
        try:
            return work(read_state(context))
        except SnapshotExpiredError:
            if attempt == attempts - 1:
                raise
            log.info("the table moved on while a write read it; reading it again")
    raise AssertionError("unreachable")  # pragma: no cover


#: How often a write is planned again when compactions keep completing while it runs.
REPLANS = 3


def commit_planned(context: TableContext, plan: Callable[[State], W | None],
                   extra: dict[str, str] | None, *, attempts: int = _ATTEMPTS,
                   progress: Progress | None = None) -> Commit | None:
    """Plan a write on the latest state and commit it (None: ``plan`` found nothing to do).

    Table services never fail the write: when its only conflict is a compaction that completed
    while it ran (the rows it read were moved to the compacted segment), or a clean that
    completed since it read the table removed a file it needs (a delete delta the compaction
    replaced), it is planned again on the new state and retried, up to :data:`REPLANS` times;
    the returned commit says how often (``Commit.retries``). A merge write
    (``schema_mode="merge"``) that lost to a schema change (``SchemaChangedError``) is planned
    again in the same way: ``plan`` conforms its rows to the new version. A conflict with any
    other writer is the caller's to resolve, as before. ``progress``: the producer's batch this write
    is (set on the planned write); None is
    returned, and nothing written, if it committed already (see :func:`commit_once`).
    """
    read_at: list[str | None] = []

    def remembered(state: State) -> W | None:
        read_at.append(state.read_at)
        planned = plan(state)
        if isinstance(planned, RowChanges):
            check_external_deletes(context, state, planned)
        return planned

    for retries in range(REPLANS + 1):
        read_at.clear()
        try:
            planned = latest(context, remembered, attempts=attempts)
            if planned is None:
                return None
            if progress is not None:
                planned.progress = progress
            return commit_once(context, planned, extra, retries=retries)
        except CompactedMeanwhileError:
            if retries == REPLANS:
                raise
            reason = "a compaction completed while it ran"
        except SchemaChangedError:
            # A merge write lost to a schema change: merged again into the new version.
            if retries == REPLANS:
                raise
            reason = "a schema change completed while it ran"
        except ObjectNotFoundError:
            if retries == REPLANS or not _cleaned_since(context, read_at[-1] if read_at else None):
                raise
            reason = "a clean removed a file of the state it read"
        except SnapshotExpiredError:
            # The same clean, seen by a metadata read after it (each checks the floor after
            # reading): the state it read is no longer retained.
            if retries == REPLANS or not _cleaned_since(context, read_at[-1] if read_at else None):
                raise
            reason = "a clean expired the state it read"
        log.info("write planned again: %s (retry %d of %d)", reason, retries + 1, REPLANS)
    raise AssertionError("unreachable")  # pragma: no cover


def check_external_deletes(context: TableContext, state: State, change: RowChanges) -> None:
    """Refuse to delete rows by position from an external file that is not what ADD SEGMENT
    recorded: the record index and the planned positions describe the file as it was, so a delta
    would delete other rows (``CorruptMetadataError`` naming it). One open and footer read per
    external file the change deletes from; a write into the table's own files pays nothing."""
    external = [path for path in change.deleted if is_external(path)]
    if not external:
        return
    files = state.live_files.filter(pc.is_in(state.live_files["path"],
                                             value_set=pa.array(external, pa.string())))
    check_external(context.store, files["path"].to_pylist(), files["format"].to_pylist())


def app_progress(app_id: object, version: object) -> Progress | None:
    """The producer's batch of an idempotent write (``app_id`` and ``version`` on any write)."""
    if app_id is None and version is None:
        return None
    if not isinstance(app_id, str) or not app_id or not in_range(version):
        raise InvalidOptionError(
            f"an idempotent write needs both app_id (a non-empty string) and version (an int "
            f"from 0 to {MAX_BATCH}, stored as a 64-bit integer); got app_id={app_id!r}, "
            f"version={version!r}; nothing was written")
    assert isinstance(version, int)
    return Progress(ProducerKind.APP, app_id, version)


def already_committed(context: TableContext, progress: Progress | None) -> bool:
    """Whether the producer's batch is in the latest snapshot already (checked before any work;
    the commit checks again under the lock)."""
    if progress is None:
        return False
    record = producer_record(context, context.timeline.load(), progress.kind, progress.name)
    check_generation(record, progress)
    return committed(record, progress)


def commit_once(context: TableContext, write: DataWrite, extra: dict[str, str] | None,
                **options: Any) -> Commit | None:
    """``_commit.commit``, but None (nothing written) when ``write.progress`` is a batch its
    producer committed already, found under the lock at begin or at commit."""
    try:
        done = commit(context, write, extra, **options)
    except AlreadyCommitted as exc:
        log.info("%s: skipped, already committed", exc)
        return None
    if write.versions:  # a merge write: the handle takes the version it created
        context.adopt({v.version: v for v in write.versions})
    return done


def _cleaned_since(context: TableContext, read_at: str | None) -> bool:
    """Whether a clean may have moved files since the state read at ``read_at`` (on the error
    path only): one completed after it, or one still running (its moves precede its commit)."""
    view = context.timeline.load()
    return any(i.action == Action.CLEAN for i in (*view.completed_after(read_at or ""), *view.pending()))
