"""CLEAN FILES, the plan: what may leave the table now, worked out without the lock.

A file may go when no snapshot the table still promises needs it:

* **removed** files (data files of ``Compacted`` and ``Marked for Delete`` segments, delete deltas
  replaced by horizontal compaction or dropped with their data file), once the commit that
  removed them is older than the retention floor (``_clean_retention``).
* **orphans**: data files and deltas under the table that no metadata record names (live,
  removed or purged), whose writer is decided (not pending, not newer than the newest instant
  seen, older than the newest completed instant) and that no marker of an undecided instant
  claims.
* **expired trash**: files in ``_trash/<T>/`` of a decided clean ``T`` older than
  ``clean.trash_hours`` (``force``: any age), deleted for good.
* **leftovers**: files whose record a completed clean purged, still on storage (that clean died
  between its commit point and deleting them).

Only orphans go to the trash (CarbonData's stale segments); everything else is deleted for good.
The plan also names the ``Compacted`` and ``Marked for Delete`` segments that leave SHOW
SEGMENTS for its history with this clean (:func:`_cleaned_segments`).

Never: a path outside the table (absolute, ``..``), files of external segments, anything in
``_timeline/``, ``_metadata/`` or ``_markers/``, or a name metatxn does not write.

The reads are ordered so that a writer writing and committing meanwhile cannot lose a file:
data files are listed *first*, then the timeline and the markers are read, then the metadata
table is resolved from that timeline. A file in the listing was written after its instant ``T``
was requested, so ``T`` is on that timeline (or archived, so decided): pending (skipped), or
completed (its files are in the metadata resolved from it), or rolled back (only its leftovers
are orphans). A file written after the listing is not in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import (
    DELETES,
    FILES,
    SEGMENTS,
    SegmentEntry,
    SegmentStatus,
    live,
    removed,
    segment_sort_key,
)
from metatxn.timeline import (
    Action,
    InvalidOptionError,
    ObjectNotFoundError,
    Storage,
    TimelineView,
    TxnError,
    check_key,
    parse_time,
)

from .._context import (
    CleanEntry,
    CleanPlan,
    TableContext,
    clean_options,
)
from .._files import (
    DELTA_SUFFIX,
    MARKERS_FOLDER,
    RESERVED_FOLDERS,
    TRASH_FOLDER,
    marker_instant,
    prefixes,
    read_marker,
)
from .._results import CleanReason
from ._clean_retention import HOUR_MS, History, retention_floor

#: Folders that hold no data: never listed as data, never cleaned as orphans.
#: ``_staging/``: a Spark write's own writer stages its files there before they are published
#: under markers (``txn.spark``); a staged file is never a table file.
NOT_DATA = prefixes(RESERVED_FOLDERS)
DATA_SUFFIXES = (".parquet", DELTA_SUFFIX)


@dataclass(frozen=True)
class Planned:
    plan: CleanPlan
    view: TimelineView


def plan_clean(context: TableContext, *, force: bool) -> Planned:
    """What a clean run now would remove (reads only)."""
    storage = context.storage
    now = context.clock()
    options = clean_options(context.properties)
    # 1. List first (see the module docstring for why the order matters).
    listing = storage.list("", recursive=True)
    on_storage = [key for key in listing
                  if key.endswith(DATA_SUFFIXES) and not key.startswith(NOT_DATA)]
    trash = [key for key in listing if key.startswith(f"{TRASH_FOLDER}/")]
    # 2. The timeline and the markers.
    view = context.timeline.load()
    claimed = _claimed(storage, {i.time for i in view.completed()})
    # 3. The metadata table at the latest instant of that timeline.
    metadata = context.metadata_at(view, None, (FILES, SEGMENTS, DELETES))
    assert metadata.files is not None and metadata.deletes is not None
    assert metadata.segments is not None
    history = History(context, view)
    floor = retention_floor(context, view, history, now, options.retain_commits,
                            options.retain_hours, force)

    entries, outside = _removed(metadata.files, metadata.deletes, metadata.segments, history, floor)
    cleared = {e.path for e in entries if e.record == FILES} | outside
    segments = _cleaned_segments(metadata.files, metadata.segments, cleared)
    referenced = set(metadata.files["path"].to_pylist()) | set(metadata.deletes["path"].to_pylist())
    entries += _leftovers(storage, on_storage, metadata.files, metadata.deletes)
    entries += _orphans(storage, view, on_storage, referenced, claimed, metadata.segments)
    entries += _expired_trash(storage, view, trash, now, options.trash_hours * HOUR_MS, force)
    entries.sort(key=lambda entry: entry.path)
    removals = [e.removed_at for e in entries if e.removed_at is not None]
    plan = CleanPlan(files=entries, floor=max(removals, default=None), retained_from=floor,
                     force=force, segments=segments)
    return Planned(plan, view)


# -- candidates ------------------------------------------------------------------------------------


def _inside(path: str) -> bool:
    """A table-relative path in a data folder (never absolute, never ``..``)."""
    if "://" in path or path.startswith(NOT_DATA):
        return False
    try:
        check_key(path)
    except InvalidOptionError:
        return False
    return "/" in path


def _removed(files: pa.Table, deletes: pa.Table, segments: Mapping[str, SegmentEntry],
             history: History, floor: str) -> tuple[list[CleanEntry], set[str]]:
    """The removed files and deltas past retention, and the external files (never cleaned)
    whose removal is past retention too."""
    gone_files = removed(files).select(["path", "segment", "size"]).to_pylist()
    gone_deltas = removed(deletes).select(["path", "file", "size"]).to_pylist()
    if not (gone_files or gone_deltas) or not floor:
        return [], set()
    external = {entry.id for entry in segments.values() if entry.external}
    outside = {row["path"] for row in gone_files if row["segment"] in external}
    reasons = {SegmentStatus.COMPACTED: CleanReason.COMPACTED,
               SegmentStatus.MARKED_FOR_DELETE: CleanReason.MARKED_FOR_DELETE}
    live_files = set(live(files)["path"].to_pylist())
    segment_of = {row["path"]: row["segment"] for row in gone_files}
    candidates: list[tuple[str, int, CleanReason, str]] = []
    for row in gone_files:
        if row["segment"] in external or not _inside(row["path"]):
            continue
        entry = segments.get(row["segment"])
        reason = CleanReason.REMOVED if entry is None else reasons.get(entry.status, CleanReason.REMOVED)
        candidates.append((row["path"], row["size"] or 0, reason, FILES))
    for row in gone_deltas:
        data_file = row["file"]
        if not _inside(row["path"]):  # an external file's deltas are the table's own
            continue
        if data_file in live_files:
            reason = CleanReason.REPLACED_DELTA
        else:
            entry = segments.get(segment_of.get(data_file, ""))
            reason = CleanReason.REMOVED if entry is None else reasons.get(entry.status, CleanReason.REMOVED)
        candidates.append((row["path"], row["size"] or 0, reason, DELETES))
    found = history.removals({path for path, *_ in candidates} | outside, floor)
    return ([CleanEntry(path=path, size=size, reason=reason, removed_at=found[path], record=record)
             for path, size, reason, record in candidates if path in found],
            outside & found.keys())


def _cleaned_segments(files: pa.Table, segments: Mapping[str, SegmentEntry],
                      cleared: set[str]) -> list[str]:
    """The ``Compacted`` and ``Marked for Delete`` segments still shown whose every file record
    not purged yet is ``cleared``: purged by this clean, or an external file removed past
    retention (its record stays: a removed file never joins the table again).

    A purged record keeps only its path, so a segment whose files an earlier clean purged
    (before segments had a history) has no record left and goes now.
    """
    held = files.filter(pc.is_valid(files["deleted"])).select(["path", "segment"]).to_pylist()
    blocked = {row["segment"] for row in held if row["path"] not in cleared}
    return sorted((entry.id for entry in segments.values()
                   if entry.status in (SegmentStatus.COMPACTED, SegmentStatus.MARKED_FOR_DELETE)
                   and entry.visible
                   and entry.id not in blocked), key=segment_sort_key)


def _leftovers(storage: Storage, on_storage: Iterable[str], files: pa.Table,
               deletes: pa.Table) -> list[CleanEntry]:
    """Files on storage whose record is purged: a clean purges at its commit point and deletes
    after it, so one that died in between left them; no snapshot needs them."""
    purged = set()
    for part in (files, deletes):
        purged.update(part.filter(pc.is_null(part["deleted"]))["path"].to_pylist())
    return _still_there(storage, [p for p in on_storage if p in purged and _inside(p)],
                        CleanReason.LEFTOVER)


def _still_there(storage: Storage, paths: Iterable[str], reason: CleanReason) -> list[CleanEntry]:
    """An entry for each of ``paths`` still on storage (another clean may have just deleted it)."""
    found = []
    for path in paths:
        try:
            found.append(CleanEntry(path=path, size=storage.size(path), reason=reason))
        except ObjectNotFoundError:
            continue
    return found


def _claimed(storage: Storage, done: set[str]) -> set[str]:
    """Files named by the markers of instants not completed: a write or a rollback in progress."""
    claimed = set()
    for marker in storage.list(MARKERS_FOLDER):
        if marker_instant(marker) in done:
            continue
        try:
            claimed.add(read_marker(storage, marker))
        except (FileNotFoundError, TxnError):
            continue  # gone, or damaged: a damaged marker names nothing we could trust
    return claimed


def _is_time(text: str) -> bool:
    try:
        parse_time(text)
    except ValueError:
        return False
    return True


def _orphans(storage: Storage, view: TimelineView, on_storage: Iterable[str], referenced: set[str],
             claimed: set[str], segments: Mapping[str, SegmentEntry]) -> list[CleanEntry]:
    last = view.last_completed()
    if last is None:
        return []
    pending = {i.time for i in view.pending()}
    newest = view.max_time() or ""
    outside = tuple(f"{entry.path.strip('/')}/" for entry in segments.values()
                    if entry.external and entry.path)
    candidates = []
    for path in on_storage:
        if path in referenced or path in claimed or not _inside(path) or path.startswith(outside):
            continue
        writer = marker_instant(path)
        if not _is_time(writer) or writer in pending or writer > newest or writer >= last.time:
            continue
        candidates.append(path)
    return _still_there(storage, candidates, CleanReason.ORPHAN)


def _expired_trash(storage: Storage, view: TimelineView, trash: Iterable[str], now: int,
                   keep_ms: int, force: bool) -> list[CleanEntry]:
    if any(i.action == Action.ROLLBACK and i.is_pending for i in view.instants):
        return []  # a rollback in progress may be moving a clean's files back
    newest = view.max_time() or ""
    found = []
    for key in trash:
        parts = key.split("/")
        cleaned_at = parts[1] if len(parts) > 2 else ""
        if not _is_time(cleaned_at) or cleaned_at > newest:
            continue
        instant = view.get(cleaned_at)
        if instant is not None and (instant.is_pending or instant.action != Action.CLEAN):
            continue
        if not force and now - parse_time(cleaned_at) < keep_ms:
            continue
        try:
            size = storage.size(key)
        except ObjectNotFoundError:
            continue
        found.append(CleanEntry(path=key, size=size, reason=CleanReason.EXPIRED_TRASH))
    return found


__all__ = ["CleanEntry", "CleanPlan", "Planned", "plan_clean"]
