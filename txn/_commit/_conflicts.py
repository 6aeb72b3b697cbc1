"""Optimistic concurrency: does a write overlap a commit that completed after it read the table?

Run under the table lock, just before the commit point. The concurrent set is every data commit
that completed after the snapshot the write read (``read_at``). Overlap is judged on two things
a commit records:

* files: the data files it wrote delete deltas for or removed (``deltas_added``,
  ``files_removed``), against the data files this write deletes rows from;
* keys: the record-index entries it wrote, read from its own log blocks in the shards this write
  touches, against this write's keys: those it writes entries for and those it read without
  writing (a delete by keys asks for keys it may not find; an insert of one of them completed
  meanwhile must fail the delete, or the key outlives a delete acknowledged after it). Only
  the concurrent commits' blocks in those shards are read, never the table. If cleaning
  already folded such a block into a base (many commits completed while this write ran), the
  keys are looked up in the latest index instead, entries still carrying their writer's
  instant: an entry a concurrent commit wrote is either still there or was replaced by a later
  concurrent commit, which is then reported.

Appends to an unkeyed table touch neither, so they never conflict.

A merge that scanned the table (``check_read``) also conflicts with any concurrent commit that
added or replaced rows and is not a blind append: Delta's write-serializable rule. Such a commit
read the table too, and rows it added may be rows the merge would have matched.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import segment_sort_key
from metatxn.timeline import CommitConflictError, DuplicateKeyError, TimelineView

from .._context import (
    ACTION_OF,
    DATA_ACTIONS,
    INSERTS,
    CommitMetadata,
    TableContext,
)
from .._files import partition_of
from .._results import Operation
from .._rows import describe

if TYPE_CHECKING:
    from ._writes import Merge

COMPACT_ACTION = ACTION_OF[Operation.COMPACT]


class CompactedMeanwhileError(CommitConflictError):
    """The only commits this write overlapped are compactions: it can be planned again against
    the compacted table and retried, so a table service never fails a user's write."""


@dataclass(frozen=True)
class Overlap:
    instant: str
    operation: str
    files: list[str]
    keys: pa.Table


def overlaps(context: TableContext, view: TimelineView, *, instant_time: str, read_at: str | None,
             keys: pa.Table | None, files: Set[str]) -> list[Overlap]:
    """The concurrent commits that touched ``files`` or ``keys`` (index key columns)."""
    found: list[Overlap] = []
    if not files and (keys is None or keys.num_rows == 0):
        return found  # touches nothing another commit could have touched (an unkeyed append)
    index = context.metadata.record_index
    others = [other for other in view.completed_after(read_at or "")
              if other.action in DATA_ACTIONS and other.time != instant_time]
    if not others:
        return found  # nothing committed meanwhile: no key hashed (a million-row load: 0.1 s)
    our_shards = set(index.shard_ids(keys).tolist()) if index is not None and keys is not None \
        and keys.num_rows else set()
    folded: dict[str, tuple[str, list[str]]] = {}
    listing: list[str] | None = None  # the index's log files, listed once for every instant
    for other in others:
        metadata = context.timeline.read_metadata(other, CommitMetadata)
        touched = {d.file for d in metadata.deltas_added} | set(metadata.files_removed)
        common_files = sorted(files & touched)
        common_keys = pa.table({})
        shards = our_shards & set(metadata.index_shards)
        if index is not None and keys is not None and shards:
            try:
                if listing is None:
                    listing = index.log_listing()
                common_keys = index.written_among(other.time, keys, listing)
            except FileNotFoundError:
                folded[other.time] = (metadata.operation, common_files)
                continue
        if common_files or common_keys.num_rows:
            found.append(Overlap(other.time, metadata.operation, common_files, common_keys))
    if folded and keys is not None:
        found += _folded_overlaps(context, view, keys, folded)
    return sorted(found, key=lambda overlap: overlap.instant)


def _folded_overlaps(context: TableContext, view: TimelineView, keys: pa.Table,
                     folded: dict[str, tuple[str, list[str]]]) -> list[Overlap]:
    """Overlaps with commits whose index blocks were already folded into bases."""
    last = view.last_completed()
    assert last is not None and last.completed_at is not None
    completed = {i.time: i.completed_at or "" for i in view.completed()}
    entries = context.metadata.lookup_keys(keys, completed, last.completed_at, instants=True)
    found = []
    for time, (operation, common_files) in folded.items():
        common_keys = entries.filter(pc.equal(entries["instant"], time)).select(keys.column_names)
        if common_files or common_keys.num_rows:
            found.append(Overlap(time, operation, common_files, common_keys))
    return found


def check(context: TableContext, view: TimelineView, *, operation: str, instant_time: str,
          read_at: str | None, keys: pa.Table | None, files: Set[str]) -> None:
    """Raise if this write overlaps a concurrent commit.

    Raises:
        DuplicateKeyError: an append inserts a key a concurrent commit wrote.
        CommitConflictError: any other write overlapped; it must be retried.
    """
    found = overlaps(context, view, instant_time=instant_time, read_at=read_at, keys=keys, files=files)
    if not found:
        return
    first = found[0]
    columns = context.record_key_columns
    if operation not in INSERTS and all(o.operation == Operation.COMPACT for o in found):
        raise CompactedMeanwhileError(
            f"{operation} {instant_time}: compaction(s) {[o.instant for o in found]} rewrote rows it "
            "had read while it ran; nothing was written\nHelp: plan the write again")
    if operation in INSERTS:
        raise DuplicateKeyError(
            f"{operation} {instant_time}: record key(s) {describe(first.keys, columns)} were written "
            f"by {first.operation} {first.instant}, which completed after this {operation} read the "
            "table; "
            "nothing was written\nHelp: use upsert to replace existing keys")
    what = []
    if first.files:
        what.append(f"data file(s) {first.files[:3]}{' and more' if len(first.files) > 3 else ''}")
    if first.keys.num_rows:
        what.append(f"{first.keys.num_rows} record key(s) {describe(first.keys, columns)}")
    others = f" (and {len(found) - 1} other commit(s))" if len(found) > 1 else ""
    raise CommitConflictError(
        f"{operation} {instant_time} conflicts with {first.operation} {first.instant}{others}, which "
        f"completed after this {operation} read the table at {read_at or 'its creation'} and also "
        f"changed {' and '.join(what)}; nothing was written\n"
        f"Help: retry the {operation}: it will read the table as it is now")


def _blind(metadata: CommitMetadata) -> bool:
    """Whether a commit only added rows without reading any (an append, ADD SEGMENT, a stream
    batch, or a transaction of those): it can be ordered after a write that did not see it."""
    if metadata.operation == Operation.TRANSACTION:
        return bool(metadata.operations) and all(o in INSERTS for o in metadata.operations)
    return metadata.operation in INSERTS


def check_read(context: TableContext, view: TimelineView, *, operation: str, instant_time: str,
               read_at: str | None) -> None:
    """Raise if a commit that completed after ``read_at`` added or replaced rows and is not a
    blind append (an update, upsert, merge, overwrite, transaction reading the table): a write
    that scanned the table (an unkeyed merge's inserts depend on what it did not find) would
    otherwise commit as if those rows did not exist. Compactions only move rows (see
    ``CompactedMeanwhileError``); a delete adds none (its overlap is by file, in :func:`check`).

    Raises:
        CommitConflictError: naming the other commit.
    """
    for other in view.completed_after(read_at or ""):
        if other.action not in DATA_ACTIONS or other.time == instant_time \
                or other.action == COMPACT_ACTION:
            continue
        metadata = context.timeline.read_metadata(other, CommitMetadata)
        if _blind(metadata) or not (metadata.files_added or metadata.files_removed):
            continue
        raise CommitConflictError(
            f"{operation} {instant_time} conflicts with {metadata.operation} {other.time}, which "
            f"completed after this {operation} read the table at {read_at or 'its creation'} and "
            f"added or replaced rows it may have matched (only blind appends are ordered after "
            "it); nothing was written\n"
            f"Help: retry the {operation}: it will read the table as it is now")


def check_partitions(context: TableContext, view: TimelineView, *, instant_time: str,
                     partitions: Set[str], canonical: Callable[[str], str]) -> None:
    """Raise if a data commit that completed after partition-scoped overwrite ``instant_time``
    began added files to, deleted rows of or removed files of a partition it replaces
    (``partitions``, Hive paths as ``canonical`` names them): the overwrite would silently replace
    that commit's effect. Commits to other partitions pass, and so do compactions (they only
    moved rows the overwrite reads under the lock).

    Raises:
        CommitConflictError: naming the other commit and the partitions both touched.
    """
    levels = len(context.partition_by)
    for other in view.completed_after(instant_time):
        if other.action not in DATA_ACTIONS or other.time == instant_time or other.action == COMPACT_ACTION:
            continue
        metadata = context.timeline.read_metadata(other, CommitMetadata)
        touched = {canonical(s.partition) for s in metadata.files_added} | {
            canonical(partition_of(path, levels))
            for path in [d.file for d in metadata.deltas_added] + list(metadata.files_removed)}
        common = sorted(touched & partitions)
        if common:
            raise CommitConflictError(
                f"overwrite {instant_time} of partition(s) {common[:3]}"
                f"{' and more' if len(common) > 3 else ''} conflicts with {metadata.operation} "
                f"{other.time}, which completed after it began and changed them; nothing was "
                "written\nHelp: rerun the overwrite against the new state of the table")


def check_merge(context: TableContext, view: TimelineView, *, instant_time: str,
                read_at: str | None, merge: Merge) -> None:
    """Raise if a commit that completed while compaction ``instant_time`` ran changed its sources.

    A delete, update or upsert that wrote delete deltas for (or removed) a source file, a DELETE
    SEGMENT, overwrite or other compaction that replaced a source segment: the other commit wins
    and the compaction writes nothing. Appends never touch existing segments, so they pass.

    Raises:
        CommitConflictError: naming the other commit and what it changed.
    """
    files = set(merge.files)
    sources = set(merge.sources)
    for other in view.completed_after(read_at or ""):
        if other.action not in DATA_ACTIONS or other.time == instant_time:
            continue
        metadata = context.timeline.read_metadata(other, CommitMetadata)
        touched = sorted(files & ({d.file for d in metadata.deltas_added} | set(metadata.files_removed)))
        replaced = sorted(sources & (set(metadata.segments_removed) | set(metadata.segments_merged)))
        if not touched and not replaced:
            continue
        what = (f"segment(s) {replaced}" if replaced else
                f"data file(s) {touched[:3]}{' and more' if len(touched) > 3 else ''}")
        raise CommitConflictError(
            f"compaction {instant_time} of segment(s) {sorted(sources, key=segment_sort_key)} into "
            f"{merge.target} conflicts with {metadata.operation} {other.time}, which completed while "
            f"it ran and changed {what}; the {metadata.operation} wins and the compaction wrote "
            "nothing\nHelp: run the compaction again: it will read the table as it is now")
