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

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa

from metatxn.indexes import SegmentEntry, SegmentStatus, segment_sort_key
from metatxn.timeline import CommitConflictError, InvalidOptionError, TimelineView

from .._commit import (
    Compaction,
    Merge,
    Pending,
    StreamFilesMerge,
    WrittenBy,
    begin,
    commit,
    finish,
    protocol_of,
)
from .._context import (
    LATEST_PARTITIONS,
    CommitMetadata,
    TableContext,
    advanced,
    compaction_options,
    target_file_bytes,
)
from .._files import is_external, raise_for_files, read_files, scan_file
from .._results import (
    Commit,
    CompactionKind,
)
from .._write import State, latest
from ._running import held_segments, refuse_held
from ._selection import check_custom, merged_name, select_major, select_minor

log = logging.getLogger("metatxn")

#: The kinds ``compact`` takes (a stream runs STREAM_FILES itself).
KINDS: Final = (CompactionKind.MINOR, CompactionKind.MAJOR, CompactionKind.CUSTOM,
                CompactionKind.CLOSE_STREAMING)
#: The ``extra`` key of a compaction's commit that says which kind made the segment.
KIND_KEY: Final = "compaction"


def compact(context: TableContext, kind: str = CompactionKind.MINOR, *,
            segments: Sequence[str | int] | None = None) -> Commit | None:
    """Run one compaction (MINOR: as many rounds as find something); see :meth:`txn.Table.compact`.

    Each round is :func:`begin_compaction` and the rewrite of its rows here
    (:meth:`BegunCompaction.rewrite`); ``txn.spark.compact`` runs the same rounds through the
    public two-phase form, its rows rewritten by Spark's executors.
    """
    kind = check_kind(context, kind, segments)
    last: Commit | None = None
    rounds = Rounds()
    while True:
        begun = begin_compaction(context, kind, segments, rounds)
        if begun is None:
            return last
        last = begun.rewrite()
        if not repeats(kind):
            return last


def repeats(kind: str) -> bool:
    """Whether a compaction of ``kind`` runs again once a round committed (MINOR may find the
    next level; the hand-off converts one finished streaming segment per round)."""
    return kind in (CompactionKind.MINOR, CompactionKind.CLOSE_STREAMING)


@dataclass
class Rounds:
    """What the rounds of one compaction share: the kind that made each compacted segment, as
    read so far (a commit's metadata is read once per call, not once per round), and how often
    running writes took a source between plan and begin."""

    made_by: dict[str, str] = field(default_factory=dict)
    taken: int = 0


@dataclass
class BegunCompaction:
    """A compaction planned on ``state`` and begun (its instant started, its target segment
    named, no running write holding a source): rewrite its rows here (:meth:`rewrite`), or have
    them written elsewhere and :meth:`finish` it; or :meth:`abort` it."""

    context: TableContext
    kind: str
    planned: Compaction
    state: State
    pending: Pending

    def rewrite(self) -> Commit:
        """Rewrite the sources' live rows here, sorted, and commit (rolled back on failure)."""
        return self.finish(lambda pending: self.planned.write(self.context, pending))

    def finish(self, written: WrittenBy) -> Commit:
        """Commit with what ``written`` gathers (run inside the protocol: its failure rolls the
        instant back); the conflict rule is the compaction's own (``Compaction.check``)."""
        return finish(self.context, self.planned, {KIND_KEY: self.kind}, self.pending, written)

    def abort(self) -> None:
        """Roll the instant back if it is still pending (what it wrote goes with it)."""
        instant = self.context.timeline.load().get(self.pending.instant.time)
        if instant is not None and instant.is_pending:
            self.pending.heartbeat.stop(delete=False)
            protocol_of(self.context)._roll_back_quietly(instant)


def begin_compaction(context: TableContext, kind: str, segments: Sequence[str | int] | None = None,
                     rounds: Rounds | None = None) -> BegunCompaction | None:
    """Plan one round of a compaction of ``kind`` on the latest state and begin it; None when
    there is nothing to compact. ``kind`` is checked (:func:`check_kind`) by the caller.

    A DELETE SEGMENT (or another compaction) that took a source between the plan and the begin
    makes MINOR and MAJOR choose again without it (at most :data:`_REPLANS` times per
    ``rounds``); CUSTOM was asked for exactly these segments and fails
    (``CommitConflictError``).
    """
    rounds = rounds or Rounds()
    read: list[State] = []

    def planned_on(state: State) -> Compaction | None:
        read[:] = [state]
        return plan(context, state, kind, segments, rounds.made_by)

    while True:
        planned = latest(context, planned_on)
        if planned is None:
            return None
        merge = planned.merge
        log.info("compacting segment(s) %s into %s (%s)",
                 sorted(merge.sources, key=segment_sort_key), merge.target, kind)
        try:
            pending = begin(context, planned, {KIND_KEY: kind})
        except _SourcesHeld:
            rounds.taken += 1
            if kind == CompactionKind.CUSTOM or rounds.taken > _REPLANS:
                raise
            continue
        return BegunCompaction(context, kind, planned, read[0], pending)


#: A streaming segment's files are merged FANOUT at a time, by size tier (a tier is a factor of
#: FANOUT in size): a stream of N batches keeps at most FANOUT - 1 files per tier, about
#: (FANOUT - 1) log_FANOUT N files in all, each row rewritten about log_FANOUT N times.
STREAM_FILES_FANOUT: Final = 8
_SMALLEST_TIER_BYTES: Final = 4096


def _tier(size: int) -> int:
    tier = 0
    while size >= _SMALLEST_TIER_BYTES * STREAM_FILES_FANOUT ** (tier + 1):
        tier += 1
    return tier


def merge_stream_files(context: TableContext, segment: str) -> Commit | None:
    """Merge the small files of streaming segment ``segment`` (a table service after a stream's
    batch): FANOUT files of one size tier become one file of the same segment, so a long stream
    keeps few files to read without a batch ever waiting for that work. Files with delete
    deltas are left to the hand-off. Repeats while a tier is full; returns the last merge's
    commit, None when no tier was full. A write that changed one of the
    files meanwhile wins (``CommitConflictError``)."""
    last: Commit | None = None
    for _ in range(_STREAM_FILES_ROUNDS):  # a merge may fill the next tier up
        planned = latest(context, lambda state: _plan_stream_files(context, state, segment))
        if planned is None:
            break
        last = commit(context, planned, {KIND_KEY: STREAM_FILES})
    return last


#: Merges one call makes at most (each fills at most the next tier up).
_STREAM_FILES_ROUNDS: Final = 6


#: The compaction kind of a streaming segment's file merge (in its commit's ``extra``).
STREAM_FILES: Final = CompactionKind.STREAM_FILES


def _plan_stream_files(context: TableContext, state: State, segment: str) -> StreamFilesMerge | None:
    entries = context.metadata_at(state.view, None, LATEST_PARTITIONS).segments or {}
    entry = entries.get(segment)
    if entry is None or entry.status not in (SegmentStatus.STREAMING, SegmentStatus.STREAMING_FINISH):
        return None
    live = state.live_files.filter(pa.compute.equal(state.live_files["segment"], segment))
    tiers: dict[int, list[tuple[str, int, int, str]]] = {}
    for path, size, rows, file_format in zip(live["path"].to_pylist(), live["size"].to_pylist(),
                                             live["rows"].to_pylist(), live["format"].to_pylist(),
                                             strict=True):
        if not state.deltas.paths(path):
            tiers.setdefault(_tier(size), []).append((path, size, rows, file_format))
    full = sorted(t for t, files in tiers.items() if len(files) >= STREAM_FILES_FANOUT)
    if not full:
        return None
    chosen = sorted(tiers[full[0]])[:STREAM_FILES_FANOUT]  # names carry their writer's time
    files = [path for path, *_ in chosen]
    formats = {path: file_format for path, _, _, file_format in chosen}
    merge = Merge(kind=STREAM_FILES, target=segment, sources={}, files=files, deltas=[],
                  rows=sum(rows for _, _, rows, _ in chosen),
                  size=sum(size for _, size, _, _ in chosen), formats=formats)
    return StreamFilesMerge(merge=merge, rows=_merged_rows(context, state, files, formats),
                            read_at=state.read_at, current=state.deltas, admission=_admit(context, merge))


class _SourcesHeld(CommitConflictError):
    """A source of the compaction is held by a running write (seen under the lock at begin)."""


#: How often MINOR and MAJOR choose again when running writes keep taking their sources.
_REPLANS: Final = 3


def _admit(context: TableContext, merge: Merge) -> Callable[[TimelineView], None]:
    """Under the lock at begin: no running write may hold a source (it planned after us)."""

    def admit(view: TimelineView) -> None:
        try:
            refuse_held(context, view, list(merge.sources), refused=f"compaction into {merge.target}",
                        nothing="nothing was written")
        except CommitConflictError as exc:
            raise _SourcesHeld(str(exc)) from None

    return admit


def after_load(context: TableContext, load: Commit | None) -> None:
    """Auto compaction (``compaction.auto``, CarbonData's ``AUTO_LOAD_MERGE``): a MINOR compaction
    after a load committed. It runs after the load's commit point, so its failure (logged) never
    fails the load; a conflict with another writer simply leaves the merge to a later load.
    """
    if load is None or not compaction_options(context.properties).auto:
        return
    try:
        compact(context, CompactionKind.MINOR)
    except Exception:
        log.warning("auto compaction after load %s failed; the load is committed, and a later "
                    "load or compact('minor') merges its segments", load.instant, exc_info=True)


def check_kind(context: TableContext, kind: object, segments: object) -> CompactionKind:
    """The kind in lower case (SQL users write ``'MINOR'``); refuses what is not a kind."""
    if not isinstance(kind, str) or kind.lower() not in KINDS:
        raise InvalidOptionError(
            f"compaction kind {kind!r} is not one of {list(KINDS)}\n"
            "Help: compact('minor') merges by count, 'major' by size, 'custom' the given segments")
    kind = CompactionKind(kind.lower())
    if kind == CompactionKind.CUSTOM and segments is None:
        raise InvalidOptionError("custom compaction needs segments=[...]: the segment ids to merge")
    if kind != CompactionKind.CUSTOM and segments is not None:
        raise InvalidOptionError(
            f"segments={segments!r} applies only to kind='custom', not {kind!r} (CarbonData: "
            f"custom segments not supported when doing {kind.upper()} compaction)")
    if (kind == CompactionKind.CLOSE_STREAMING
            and context.properties.get("streaming", "false").lower() != "true"):
        raise InvalidOptionError(
            "compaction kind 'close_streaming' applies to streaming tables (table property "
            f"streaming=true); {context.uri} is not one")
    return kind


def plan(context: TableContext, state: State, kind: str, ids: Sequence[str | int] | None,
         made_by: dict[str, str] | None = None) -> Compaction | None:
    """The compaction to run on ``state``, or None when there is nothing to compact.

    ``made_by``: compaction instant -> its kind, as read so far (MINOR's rounds share it, so a
    commit's metadata is read once per call, not once per round)."""
    entries = context.metadata_at(state.view, None, LATEST_PARTITIONS).segments or {}
    options = compaction_options(context.properties)
    if kind == CompactionKind.CLOSE_STREAMING:
        # Hand-off: each finished streaming segment becomes a columnar one of its own, one
        # commit each (CarbonData converts them one by one), oldest first.
        held = held_segments(context, state.view)
        finished = sorted((e.id for e in entries.values()
                           if e.status == SegmentStatus.STREAMING_FINISH and e.id not in held),
                          key=segment_sort_key)
        if not finished:
            return None
        return _compaction(context, state, kind, {finished[0]: entries[finished[0]]}, entries)
    if kind == CompactionKind.CUSTOM:
        if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
            raise InvalidOptionError(
                f"segments must be a list of segment ids such as ['0', '1'], got {ids!r}")
        chosen = check_custom(entries, list(ids))
        refuse_held(context, state.view, chosen, refused=f"custom compaction of segment(s) {chosen}",
                    nothing="nothing was written")
    else:
        held = held_segments(context, state.view)
        free = [e for e in entries.values() if e.id not in held]
        if kind == CompactionKind.MINOR:
            chosen = select_minor(free, options.level_threshold, preserve=options.preserve_segments,
                                  major_results=_major_results(context, state.view, free,
                                                               {} if made_by is None else made_by))
        else:
            chosen = select_major(free, options.major_size_bytes, preserve=options.preserve_segments)
        if len(chosen) < 2:
            return None
    return _compaction(context, state, kind, {i: entries[i] for i in chosen}, entries)


def _compaction(context: TableContext, state: State, kind: str, sources: dict[str, SegmentEntry],
            entries: Mapping[str, SegmentEntry]) -> Compaction:
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
    formats = dict(zip(files, live_files["format"].to_pylist(), strict=True))
    merge = Merge(kind=kind, target=target, sources=sources, files=files, deltas=deltas, rows=rows,
                  size=sum(live_files["size"].to_pylist()), formats=formats)
    return Compaction(merge=merge, rows=_merged_rows(context, state, files, formats),
                      read_at=state.read_at, current=state.deltas, admission=_admit(context, merge))


def _merged_rows(context: TableContext, state: State, files: list[str],
                 formats: Mapping[str, str]) -> Iterator[pa.RecordBatch]:
    """The live rows of ``files``, sorted by ``sort_by`` across all of them (read lazily: only
    once the compaction's instant has begun).

    One sort over every source row makes the output files' ``sort_by`` ranges disjoint, so a
    filter on a sort column opens as few of them as it can. This holds the sources' live rows in
    memory once (``txn.spark.compact`` rewrites segments larger than one machine wants to hold).
    """
    # Files without delete deltas are decoded together, on every core; the others row group by
    # row group with their deleted positions dropped.
    # Files of an older schema version are read by column id, one dataset per version, the
    # projection pushed into its scan; all are rewritten in the current version.
    schema = context.schema
    by_version: dict[int, list[str]] = {}
    for path in files:
        if not state.deltas.paths(path) and not is_external(path):
            by_version.setdefault(state.schema_id(context, path), []).append(path)
    advanced("reading files", 0, len(files))
    parts = []
    for schema_id, whole in sorted(by_version.items()):
        written = None if schema_id == context.schema_id else context.schema_of(schema_id)
        try:
            parts.append(read_files(context.store, whole, schema, written=written))
        except (pa.ArrowException, OSError) as exc:  # name the damaged or missing file
            raise_for_files(context.store, whole, schema, exc, written=[written] * len(whole))
    for path in files:
        if state.deltas.paths(path) or is_external(path):
            rows, _ = scan_file(context.store, path, schema, filter=None,
                                columns=schema.names, deleted=state.deltas.positions(path),
                                file_format=formats[path], written=state.written(context, path))
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
    advanced("reading files", len(files), len(files))
    written = 0
    for batch in table.to_batches(max_chunksize=max(1, per_file // 4)):
        yield batch
        written += batch.num_rows
        advanced("rewriting rows", written, table.num_rows)


def _major_results(context: TableContext, view: TimelineView, entries: Sequence[SegmentEntry],
                   made_by: dict[str, str]) -> set[str]:
    """Segments made by a MAJOR compaction (CarbonData flags them ``majorCompacted``; minor
    compaction never merges them again). The kind is in the extra of the commit that made them;
    ``made_by`` caches it per instant.
    """
    made = {e.instant: e.id for e in entries if "." in e.id and e.status == SegmentStatus.SUCCESS}
    unknown = {time for time in made if time not in made_by}
    if unknown:
        instants = {i.time: i for i in view.completed() if i.time in unknown}
        if len(instants) < len(unknown):  # some were archived
            instants.update({i.time: i for i in context.timeline.history()
                             if i.time in unknown and i.is_completed})
        for time, instant in instants.items():
            made_by[time] = context.timeline.read_metadata(instant, CommitMetadata).extra.get(KIND_KEY, "")
    return {segment for time, segment in made.items() if made_by.get(time) == CompactionKind.MAJOR}

