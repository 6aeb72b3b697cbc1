"""Compaction (CarbonData's ``ALTER TABLE t COMPACT 'MINOR' | 'MAJOR' | 'CUSTOM'``).

A compaction is a data instant of its own (action ``compaction``): it reads the live rows of some
``Success`` segments (rows deleted by delete deltas dropped), writes them sorted by ``sort_by`` as
one new segment named CarbonData's way (``0,1,2,3 -> 0.1``), and in one commit marks the sources
``Compacted`` with ``merged_to`` the new segment, tombstones their files and deltas, and writes
column statistics and record-index entries for the new files. Readers switch from the sources'
files to the new ones at the commit point, so every snapshot reads the same rows.

Which segments (``_selection``): MINOR by count per level (``compaction.level_threshold``), MAJOR
by size (``compaction.major.size_mb``), CUSTOM the given ids. MINOR repeats while something is
selected (level 1 may be followed by level 2), as CarbonData's does; MAJOR and CUSTOM run once.

Concurrency, without a lock held while it works: a compaction never conflicts with appends (they
make new segments); segments a running compaction reads are recorded in its plan, so another
compaction skips them and DELETE SEGMENT refuses them; a commit that changed a source while it
ran (a delete, update or upsert touching a source file, DELETE SEGMENT, overwrite) wins, and the
compaction fails with ``CommitConflictError`` at its commit, leaving nothing. The user's write
never fails because of a compaction: one that only overlapped a compaction is planned again
(``_write.commit_planned``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Final

import pyarrow as pa

from indexes import SUCCESS, SegmentEntry, segment_sort_key
from timeline import CommitConflictError, InvalidOptionError, TimelineView

from .._commit import Change, Merge, Pending, Written, commit_change
from .._context import (
    COMPACT,
    DATA_ACTIONS,
    LATEST_PARTITIONS,
    Commit,
    CommitMetadata,
    TableContext,
    WritePlan,
    compaction_options,
    target_file_bytes,
)
from .._files import raise_for_files, scan_file
from .._write import State, latest
from ._selection import check_custom, merged_name, select_major, select_minor

log = logging.getLogger("metatxn")

KINDS: Final = ("minor", "major", "custom", "close_streaming")
#: The ``extra`` key of a compaction's commit that says which kind made the segment.
KIND_KEY: Final = "compaction"


#: A rewrite done elsewhere (Spark's executors): given the planned change, the write phase that
#: writes its rows as the new segment's files.
Rewrite = Callable[[Change], Callable[[Pending], Written]]


def compact(context: TableContext, kind: str = "minor", *,
            segments: Sequence[str | int] | None = None,
            rewrite: Rewrite | None = None) -> Commit | None:
    """Run one compaction (MINOR: as many rounds as find something); see :meth:`txn.Table.compact`.

    ``rewrite`` replaces the local rewrite of the rows (``txn.spark.compact``).
    """
    kind = _check_kind(context, kind, segments)
    if kind == "close_streaming":
        # Streaming segments arrive with streams (``t.stream``); until a stream has finished a
        # segment there is nothing to hand off.
        return None
    last: Commit | None = None
    while True:
        change = latest(context, lambda state: plan(context, state, kind, segments))
        if change is None:
            return last
        assert change.merge is not None
        log.info("compacting segment(s) %s into %s (%s)",
                 sorted(change.merge.sources, key=segment_sort_key), change.merge.target, kind)
        if rewrite is None:
            last = commit_change(context, change, {KIND_KEY: kind})
        else:
            write = rewrite(change)
            last = commit_change(context, dataclasses.replace(change, rows=None), {KIND_KEY: kind},
                                 write=write)
        if kind != "minor":
            return last


def after_load(context: TableContext, load: Commit | None) -> None:
    """Auto compaction (``compaction.auto``, CarbonData's ``AUTO_LOAD_MERGE``): a MINOR compaction
    after a load committed. It runs after the load's commit point, so its failure (logged) never
    fails the load; a conflict with another writer simply leaves the merge to a later load.
    """
    if load is None or not compaction_options(context.properties).auto:
        return
    try:
        compact(context, "minor")
    except Exception:
        log.warning("auto compaction after load %s failed; the load is committed, and a later "
                    "load or compact('minor') merges its segments", load.instant, exc_info=True)


def _check_kind(context: TableContext, kind: object, segments: object) -> str:
    """The kind in lower case (SQL users write ``'MINOR'``); refuses what is not a kind."""
    if not isinstance(kind, str) or kind.lower() not in KINDS:
        raise InvalidOptionError(
            f"compaction kind {kind!r} is not one of {list(KINDS)}\n"
            "Help: compact('minor') merges by count, 'major' by size, 'custom' the given segments")
    kind = kind.lower()
    if kind == "custom" and segments is None:
        raise InvalidOptionError("custom compaction needs segments=[...]: the segment ids to merge")
    if kind != "custom" and segments is not None:
        raise InvalidOptionError(
            f"segments={segments!r} applies only to kind='custom', not {kind!r} (CarbonData: "
            f"custom segments not supported when doing {kind.upper()} compaction)")
    if kind == "close_streaming" and context.properties.get("streaming", "false").lower() != "true":
        raise InvalidOptionError(
            "compaction kind 'close_streaming' applies to streaming tables (table property "
            f"streaming=true); {context.uri} is not one")
    return kind


def plan(context: TableContext, state: State, kind: str,
         ids: Sequence[str | int] | None) -> Change | None:
    """The compaction to run on ``state``, or None when there is nothing to compact."""
    entries = context.metadata_at(state.view, None, LATEST_PARTITIONS).segments or {}
    busy = _busy(context, state.view)
    options = compaction_options(context.properties)
    if kind == "custom":
        assert ids is not None
        chosen = check_custom(entries, list(ids))
        taken = {segment: holder for segment, holder in busy.items() if segment in chosen}
        if taken:
            instant, operation = next(iter(taken.values()))
            doing = "merged by compaction" if operation == COMPACT else f"replaced by {operation}"
            raise CommitConflictError(
                f"custom compaction of segment(s) {chosen}: segment(s) {sorted(taken)} are being "
                f"{doing} {instant}, which is still running; nothing was written\n"
                "Help: wait for it to complete, then compact what is left")
    else:
        free = [e for e in entries.values() if e.id not in busy]
        if kind == "minor":
            chosen = select_minor(free, options.level_threshold, preserve=options.preserve_segments,
                                  major_results=_major_results(context, state.view, free))
        else:
            chosen = select_major(free, options.major_size_bytes, preserve=options.preserve_segments)
        if len(chosen) < 2:
            return None
    return _change(context, state, kind, {i: entries[i] for i in chosen}, entries)


def _change(context: TableContext, state: State, kind: str, sources: dict[str, SegmentEntry],
            entries: Mapping[str, SegmentEntry]) -> Change:
    ordered = sorted(sources, key=segment_sort_key)
    target = merged_name(ordered)
    while target in entries:  # never reuse an id (a bumped level is still a valid x.y)
        number, level = target.split(".")
        target = f"{number}.{int(level) + 1}"
    live_files = state.live_files.filter(
        pa.compute.is_in(state.live_files["segment"], value_set=pa.array(ordered, pa.string())))
    files = live_files["path"].to_pylist()
    deltas = [path for file in files for path in state.deltas.paths(file)]
    rows = sum(live_files["rows"].to_pylist()) - sum(state.deltas.rows(file) for file in files)
    merge = Merge(kind=kind, target=target, sources=sources, files=files, deltas=deltas, rows=rows,
                  size=sum(live_files["size"].to_pylist()))
    return Change(COMPACT, _merged_rows(context, state, files), state.read_at, state.deltas,
                  merge=merge)


def _merged_rows(context: TableContext, state: State, files: list[str]) -> Iterator[pa.RecordBatch]:
    """The live rows of ``files``, sorted by ``sort_by`` across all of them (read lazily: only
    once the compaction's instant has begun).

    One sort over every source row makes the output files' ``sort_by`` ranges disjoint, so a
    filter on a sort column opens as few of them as it can. This holds the sources' live rows in
    memory once (``txn.spark.compact`` rewrites segments larger than one machine wants to hold).
    """
    # Files without delete deltas are decoded together, on every core; the others row group by
    # row group with their deleted positions dropped.
    whole = [path for path in files if not state.deltas.paths(path)]
    parts = []
    if whole:
        try:
            parts.append(context.store.dataset(whole, context.schema).to_table(use_threads=True))
        except (pa.ArrowException, OSError) as exc:  # name the damaged or missing file
            raise_for_files(context.store, whole, context.schema, exc)
    for path in files:
        if state.deltas.paths(path):
            rows, _ = scan_file(context.store, path, context.schema, filter=None,
                                columns=context.schema.names, deleted=state.deltas.positions(path))
            parts.append(rows)
    parts = [part for part in parts if part.num_rows]
    if not parts:
        return
    table = pa.concat_tables(parts)
    if context.sort_by:
        # One contiguous table first: taking rows out of hundreds of chunks is slower than
        # combining them once (about 30% on 200 loads).
        table = table.combine_chunks().sort_by([(column, "ascending") for column in context.sort_by])
    # Batches of a quarter file: the writer cuts a file once it holds its target, so files keep
    # their size and, written in order, disjoint sort ranges.
    per_file = target_file_bytes(context.properties) * table.num_rows // max(1, table.nbytes)
    yield from table.to_batches(max_chunksize=max(1, per_file // 4))


def _busy(context: TableContext, view: TimelineView) -> dict[str, tuple[str, str]]:
    """Segments that pending writes are replacing (a compaction's or DELETE SEGMENT's sources)
    -> (their instant, their operation)."""
    busy: dict[str, tuple[str, str]] = {}
    for instant in view.pending():
        if instant.action in DATA_ACTIONS:
            plan = context.timeline.read_plan(instant, WritePlan)
            for segment in plan.sources:
                busy[segment] = (instant.time, plan.operation)
    return busy


def _major_results(context: TableContext, view: TimelineView,
                   entries: Sequence[SegmentEntry]) -> set[str]:
    """Segments made by a MAJOR compaction (CarbonData flags them ``majorCompacted``; minor
    compaction never merges them again). The kind is in the extra of the commit that made them.
    """
    made = {e.instant: e.id for e in entries if "." in e.id and e.status == SUCCESS}
    if not made:
        return set()
    found: set[str] = set()
    instants = {i.time: i for i in view.completed() if i.time in made}
    if len(instants) < len(made):  # some were archived
        instants.update({i.time: i for i in context.timeline.history()
                         if i.time in made and i.is_completed})
    for time, instant in instants.items():
        if context.timeline.read_metadata(instant, CommitMetadata).extra.get(KIND_KEY) == "major":
            found.add(made[time])
    return found

