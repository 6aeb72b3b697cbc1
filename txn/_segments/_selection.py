"""Which segments a compaction merges and which a DELETE SEGMENT marks: CarbonData's rules, as pure functions.

Every function here takes segment entries (the ``segments`` partition's records) and returns segment
ids; none reads storage, takes a lock or writes. The caller does the rest: it takes the table lock,
re-reads the entries, selects, commits, and (for compaction) selects again until nothing is left,
as CarbonData's compaction loop does.

The rules port ``CarbonDataMergerUtil`` (MINOR, MAJOR, CUSTOM and ``getMergedLoadName``) and
``SegmentStatusManager.updateDeletionStatus`` (DELETE SEGMENT by id and by date). Where we differ
on purpose, a comment says why. The main differences:

* A bad ``compaction.level_threshold`` is refused, where CarbonData silently uses the default.
* CarbonData's candidates are carbon-format segments; ours are the *native* ones, the Parquet
  segments metatxn wrote itself (not ``external``). Segments added from outside are never merged.
* We have no Partial Success or Marked for Update statuses, so "valid" means Success.
* Errors name every bad id and say what is wrong with each, where CarbonData says
  "Invalid ID is: <ids>" or "does not exist or is not valid".
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Final

from metatxn.indexes import SegmentEntry, SegmentStatus, segment_sort_key
from metatxn.timeline import InvalidOptionError, SegmentNotFoundError

from .._context import (
    DEFAULT_LEVEL_THRESHOLD,
    LEVEL_THRESHOLD_PROPERTY,
    MAX_LEVEL_COUNT,
    parse_level_threshold,
)

__all__ = [
    "DEFAULT_LEVEL_THRESHOLD",
    "LEVEL_THRESHOLD_PROPERTY",
    "MAX_LEVEL_COUNT",
    "check_custom",
    "merged_name",
    "parse_level_threshold",
    "select_delete_before",
    "select_delete_by_id",
    "select_major",
    "select_minor",
]


_NATIVE_FORMAT: Final = "parquet"
_SEGMENT_ID: Final = re.compile(r"\d+(?:\.\d+)?", re.ASCII)
#: The statuses DELETE SEGMENT marks (a running load's Insert In Progress is refused before).
_DELETABLE: Final = frozenset(
    {SegmentStatus.SUCCESS, SegmentStatus.STREAMING_FINISH, SegmentStatus.INSERT_IN_PROGRESS})


# --- shared helpers -------------------------------------------------------------------------------


def _is_native(entry: SegmentEntry) -> bool:
    """A segment metatxn wrote itself: the only kind compaction reads and rewrites.

    CarbonData's counterpart is "carbon format" (columnar_v3 or row_v1); segments added with
    ADD SEGMENT in another format are never compaction candidates.
    """
    return not entry.external and entry.format == _NATIVE_FORMAT


def _level(segment_id: str) -> int:
    """The compaction level of an id: 0 for a load ("7"), n for a merge result ("7.n")."""
    _, dot, suffix = segment_id.partition(".")
    return int(suffix) if dot else 0


def _sort_key(segment_id: str) -> tuple[int, tuple[int, ...], str]:
    """Real ids numerically (2 < 10, 0 < 0.1 < 1); text that is no id (an unknown "abc") after them."""
    if _SEGMENT_ID.fullmatch(segment_id):
        return 0, segment_sort_key(segment_id), ""
    return 1, (), segment_id


def _sorted_ids(ids: Iterable[str]) -> list[str]:
    return sorted(ids, key=_sort_key)


def _shown(segment_id: str) -> str:
    """An id as a message shows it: bare when it is one, quoted when it is not ("", "x")."""
    return segment_id if _SEGMENT_ID.fullmatch(segment_id) else repr(segment_id)


def _valid_after_preserve(entries: Iterable[SegmentEntry], preserve: int) -> list[SegmentEntry]:
    """Native Success segments in ascending id order, less the latest ``preserve`` of them.

    Ports ``getValidLoadDetailsWithRetaining``: "latest" means largest id, so after ``0..3 -> 0.1``
    the order is ``0.1, 4, 5``. Preserve counts every valid segment, MAJOR results and ``x.2``
    included, before MINOR skips any (as CarbonData's pipeline does).
    """
    if isinstance(preserve, bool) or not isinstance(preserve, int) or preserve < 0:
        # CarbonData falls back to 0 for a value outside 0..100; a negative count here is a bug
        # in the caller, so we refuse it. The upper bound belongs to whoever parses the property.
        raise InvalidOptionError(f"preserve must be a whole number >= 0, got {preserve!r}")
    valid = sorted(
        (e for e in entries if _is_native(e) and e.status == SegmentStatus.SUCCESS),
        key=lambda e: segment_sort_key(e.id),
    )
    return valid[: len(valid) - preserve] if preserve else valid


def _brief(ids: Iterable[str], limit: int = 8) -> str:
    """A short, sorted rendering of many ids: all of them, or both ends and a count."""
    ordered = [_shown(i) for i in _sorted_ids(ids)]
    if not ordered:
        return "none"
    if len(ordered) <= limit:
        return ", ".join(ordered)
    head, tail = ordered[: limit // 2], ordered[-(limit // 2 - 1):]
    return f"{', '.join(head)}, ..., {', '.join(tail)} ({len(ordered)} in all)"


def _normalise_ids(ids: Iterable[str | int], action: str) -> list[str]:
    """Ids as strings, duplicates dropped, first-seen order kept; ints become their decimal text.

    CarbonData's grammar reads ``IN (0, 5, 0.1)`` as numbers; Python callers pass ``"0.1"`` or ``3``.
    A float is refused rather than guessed at (``0.10`` and ``0.1`` are different segments, and a
    float cannot tell them apart), and so is a bare string, which would otherwise be read one
    character at a time.
    """
    if isinstance(ids, (str, bytes)):
        raise InvalidOptionError(
            f"segment ids for {action} must be a list of ids, got the string {ids!r}; "
            f"pass [{ids!r}] for one id"
        )
    seen: dict[str, None] = {}
    for raw in ids:
        if isinstance(raw, bool) or not isinstance(raw, (str, int)):
            raise InvalidOptionError(
                f"segment id {raw!r} for {action} is a {type(raw).__name__}; "
                "expected a str such as '3' or '0.1', or an int such as 3"
            )
        seen[str(raw).strip()] = None
    return list(seen)


def _described(entry: SegmentEntry) -> str:
    """An entry's status as an error message shows it, with the detail that explains it."""
    if entry.status == SegmentStatus.COMPACTED and entry.merged_to:
        return f"{SegmentStatus.COMPACTED} into {entry.merged_to}"
    return entry.status


# --- MINOR ----------------------------------------------------------------------------------------




def merged_name(ids: Sequence[str]) -> str:
    """The id of the segment that merging ``ids`` creates: CarbonData's ``getMergedLoadName``.

    The first id plus ``.1`` when it is a load, else its integer part and its level plus one.
    CarbonData takes the first of a list it has sorted; we take the numerically smallest, which
    is the same on the sorted lists the ``select_*`` functions return and cannot go wrong on an
    unsorted one.

    >>> merged_name(["0", "1", "2", "3"])
    '0.1'
    >>> merged_name(["4", "5", "6", "7"])
    '4.1'
    >>> merged_name(["0.1", "4.1", "8.1"])
    '0.2'
    """
    if isinstance(ids, str):
        raise InvalidOptionError(f"merged_name takes a list of segment ids, got the string {ids!r}")
    if not ids:
        raise InvalidOptionError("merged_name needs at least one segment id")
    bad = [i for i in ids if not isinstance(i, str) or not _SEGMENT_ID.fullmatch(i)]
    if bad:
        raise InvalidOptionError(
            f"not segment ids: {', '.join(map(repr, bad))}; expected ids such as '3' or '0.1'"
        )
    first = min(ids, key=segment_sort_key)
    load, dot, suffix = first.partition(".")
    return f"{load}.{int(suffix) + 1}" if dot else f"{first}.1"


def select_minor(
    entries: Iterable[SegmentEntry],
    level_threshold: tuple[int, int],
    *,
    preserve: int = 0,
    major_results: Collection[str] = (),
    max_segment_bytes: int = 0,
) -> list[str]:
    """The segments a MINOR compaction merges next, in ascending id order; ``[]`` if none.

    Ports ``identifySegmentsToBeMerged`` (preserve step) and
    ``identifySegmentsToBeMergedBasedOnSegCount``:

    1. Candidates are native Success segments in ascending numeric id order, less the latest
       ``preserve`` of them (``carbon.numberof.preserve.segments``).
    2. Skipped: Streaming and Streaming Finish segments (not Success, so step 1 drops them),
       ids at level 2 or above (``x.2``, made by CUSTOM or by an earlier level-2 merge), MAJOR
       results, and, when ``max_segment_bytes`` > 0, segments with ``data_size`` at or above it
       (``carbon.minor.compaction.size``).
    3. Loads (no dot) go to the level-1 list, ``x.1`` ids to the level-2 list; the first list to
       reach its count (``level_threshold`` = (L1, L2)) is the answer.

    ``major_results`` holds the ids MAJOR compaction produced: CarbonData flags those entries
    ``majorCompacted``; our entries have no such field, so the caller says which they are.

    A count below 2 disables its level. For L2, CarbonData does the same (1 is read as 0). For
    L1, CarbonData would return a one-segment list that its caller then ignores, which also
    stops the level-2 list from ever being consulted; we skip level 1 instead, so ``"1,3"``
    still merges ``x.1`` segments three at a time. Merging one segment into itself is never a
    MINOR compaction (re-sorting one segment is CUSTOM's job).

    The allowed-days filter (``carbon.allowed.compaction.days``) is not ported.
    """
    level1, level2 = level_threshold
    # Rule 2's size filter: CarbonData applies it only when the limit is set (> 0).
    size_limit = max_segment_bytes if max_segment_bytes > 0 else None
    major = frozenset(major_results)
    wanted = {0: level1 if level1 >= 2 else 0, 1: level2 if level2 >= 2 else 0}
    lists: dict[int, list[str]] = {0: [], 1: []}
    for entry in _valid_after_preserve(entries, preserve):
        level = _level(entry.id)
        if level >= 2 or entry.id in major:
            continue
        if size_limit is not None and entry.data_size >= size_limit:
            continue
        if not wanted[level]:
            continue
        lists[level].append(entry.id)
        if len(lists[level]) == wanted[level]:
            return lists[level]
    return []


# --- MAJOR ----------------------------------------------------------------------------------------


def select_major(entries: Iterable[SegmentEntry], size_limit_bytes: int, *, preserve: int = 0) -> list[str]:
    """The segments a MAJOR compaction merges next, in ascending id order; ``[]`` if fewer than 2.

    Ports ``identifySegmentsToBeMergedBasedOnSize``: a greedy scan of the native Success
    segments (less the latest ``preserve``) in ascending id order, collecting a contiguous group
    while its total ``data_size`` stays below ``size_limit_bytes``
    (``carbon.major.compaction.size``, in bytes here rather than MB):

    * A segment larger than the limit ends the group if it has 2 or more segments, otherwise the
      group is dropped and the scan restarts after that segment.
    * A segment that would bring the total to the limit or above ends the group if it has 2 or
      more segments, otherwise the group restarts with that segment alone.

    Unlike MINOR, MAJOR takes merge results of any level, earlier MAJOR results included.
    A ``data_size`` of 0 (unknown) counts as 0 bytes: CarbonData would measure the index files,
    which a pure function cannot.
    """
    if isinstance(size_limit_bytes, bool) or not isinstance(size_limit_bytes, int) or size_limit_bytes < 1:
        # CarbonData would accept 0 and then never merge anything; a limit that can never be met
        # is a configuration mistake, so we say so instead.
        raise InvalidOptionError(
            f"major compaction size limit must be a positive number of bytes, got {size_limit_bytes!r}"
        )
    group: list[str] = []
    total = 0
    for entry in _valid_after_preserve(entries, preserve):
        size = entry.data_size
        if size > size_limit_bytes:
            if len(group) > 1:
                break
            group, total = [], 0
            continue
        total += size
        if total < size_limit_bytes:
            group.append(entry.id)
        elif len(group) > 1:
            break
        else:
            group, total = [entry.id], size
    return group if len(group) > 1 else []


# --- CUSTOM ---------------------------------------------------------------------------------------


def check_custom(entries: Mapping[str, SegmentEntry], ids: Sequence[str | int]) -> list[str]:
    """Check the ids a CUSTOM compaction was asked to merge; return them sorted numerically.

    Ports ``identitySegmentsToBeMergedBasedOnSpecifiedSegments``: every id must exist and be a
    valid (Success) segment; preserve, allowed-days and size limits do not apply. Duplicates
    collapse. One id is allowed: CarbonData uses that to re-sort an old segment.

    Raises :class:`timeline.SegmentNotFoundError` naming every unknown id and the ids that do
    exist; else :class:`timeline.InvalidOptionError` naming every id that exists but cannot be
    merged, with its status. CarbonData says only "Segment <id> does not exist or is not valid",
    for the first bad id.

    External segments may be named (CarbonData refuses them): CUSTOM is how their rows become a
    native segment, the external files staying where they are.
    """
    wanted = _normalise_ids(ids, "custom compaction")
    if not wanted:
        raise InvalidOptionError("segments must not be empty for custom compaction")
    missing = [i for i in wanted if i not in entries]
    if missing:
        raise SegmentNotFoundError(
            f"custom compaction: no segment{'s' if len(missing) > 1 else ''} {_brief(missing)} "
            f"in this table; its segments are {_brief(entries)}"
        )
    unfit: list[str] = []
    for segment_id in _sorted_ids(wanted):
        entry = entries[segment_id]
        if entry.status != SegmentStatus.SUCCESS:
            unfit.append(f"{segment_id} ({_described(entry)})")
    if unfit:
        raise InvalidOptionError(
            f"custom compaction cannot merge segment{'s' if len(unfit) > 1 else ''} "
            f"{', '.join(unfit)}: only {SegmentStatus.SUCCESS} segments can be merged"
        )
    return _sorted_ids(wanted)


# --- DELETE SEGMENT -------------------------------------------------------------------------------


def select_delete_by_id(
    entries: Mapping[str, SegmentEntry],
    ids: Iterable[str | int],
    live_in_progress: Collection[str] = (),
) -> list[str]:
    """The segments DELETE SEGMENT BY ID marks, sorted numerically; all of ``ids`` or an error.

    Ports ``SegmentStatusManager.updateDeletionStatus``: all or nothing. An id is refused if it is
    unknown or already Marked for Delete (neither counts as found), Compacted, Streaming, or
    Insert In Progress while a load still holds it (``live_in_progress``: the caller knows which
    loads are alive, as CarbonData asks the segment lock). Success, Streaming Finish, stale
    in-progress and external segments can be deleted. Ids may be str (``"0.1"``) or int (``3``);
    duplicates collapse.

    Raises :class:`timeline.SegmentNotFoundError` when any refused id is unknown or already
    deleted, else :class:`timeline.InvalidOptionError`; either way the one message lists every
    refused id with the reason, where CarbonData stops at the first ("Invalid ID is: <ids>").
    """
    wanted = _normalise_ids(ids, "delete segment")
    if not wanted:
        raise InvalidOptionError("segment ids must not be empty for delete segment")
    live = frozenset(live_in_progress)
    refused: list[tuple[str, str]] = []
    not_found = False
    for segment_id in wanted:
        entry = entries.get(segment_id)
        if entry is None:
            refused.append((segment_id, "no such segment"))
            not_found = True
        elif entry.status == SegmentStatus.MARKED_FOR_DELETE:
            refused.append((segment_id, f"already {SegmentStatus.MARKED_FOR_DELETE}"))
            not_found = True
        elif entry.status == SegmentStatus.COMPACTED:
            into = f" (its rows now live in {entry.merged_to})" if entry.merged_to else ""
            refused.append((segment_id, f"{SegmentStatus.COMPACTED}{into}"))
        elif entry.status == SegmentStatus.STREAMING:
            refused.append(
                (segment_id, f"{SegmentStatus.STREAMING}, still being written; finish the stream first"))
        elif entry.status == SegmentStatus.INSERT_IN_PROGRESS and segment_id in live:
            refused.append((segment_id, f"{SegmentStatus.INSERT_IN_PROGRESS}, a load is still writing it"))
        elif entry.status not in _DELETABLE:
            # A status this module does not know: refuse rather than guess.
            refused.append((segment_id, entry.status))
    if refused:
        refused.sort(key=lambda pair: _sort_key(pair[0]))
        listed = "; ".join(f"{_shown(segment_id)}: {reason}" for segment_id, reason in refused)
        message = (
            f"delete segment refused, nothing was deleted. Invalid segment id"
            f"{'s' if len(refused) > 1 else ''}: {listed}. Deletable segments are {SegmentStatus.SUCCESS}, "
            f"{SegmentStatus.STREAMING_FINISH} or abandoned {SegmentStatus.INSERT_IN_PROGRESS} segments"
        )
        raise SegmentNotFoundError(message) if not_found else InvalidOptionError(message)
    return _sorted_ids(wanted)


def select_delete_before(entries: Iterable[SegmentEntry], before_ms: int) -> list[str]:
    """The segments DELETE SEGMENT BY DATE marks: loaded strictly before ``before_ms``, sorted.

    Ports ``SegmentStatusManager.updateDeletionStatus(loadDate)``: every entry whose
    ``load_start_ms`` < ``before_ms`` is marked, skipping Compacted, Streaming, in-progress and
    already Marked for Delete entries; so Success and Streaming Finish ones are marked. A merge
    result is judged by its own start time (when it was compacted), not by its inputs'.

    We differ on in-progress entries: CarbonData also marks *stale* ones (whose load died);
    we skip them all, because telling stale from live needs the caller's lock state and
    recovery removes the dead ones anyway. Nothing matched gives ``[]``: the caller decides
    whether that is an error (CarbonData: "No matching segment found").
    """
    return _sorted_ids(
        e.id for e in entries
        if e.load_start_ms < before_ms and e.status in (SegmentStatus.SUCCESS, SegmentStatus.STREAMING_FINISH)
    )
