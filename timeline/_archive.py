"""The archived timeline: terminal instants folded out of ``_timeline/`` into a few larger files.

Each archive file ``_timeline/archive/<first>_<last>.archive`` holds whole instants (time, action,
state, completion time and completion metadata) in completion order. Archive files are written
under the table lock with a plain put; they are not commit points. Archival writes the archive
file first and removes the active files second, so a crash in between leaves an instant in both
places, and readers de-duplicate by instant time (the active copy wins).

Archive files are merged in levels, as a log-structured merge tree merges its runs, again
write-then-delete: a file's level is ``log_F(size / LEVEL_UNIT)`` (0 below the unit), and once
the newest ``F`` files (``archive_max_files``) are within one level of each other they become
one file, about one level higher. The band is a whole level wide, as Lucene's merge policy
does it, because archivals differ in size: with whole-number levels, a file just under a
level's boundary followed by one just over it was never merged again. Each archived instant is
so rewritten about once per level, ``log_F`` of the history's size, and the folder holds about
``F - 1`` files per level. Merging everything into one file instead (what this did first)
rewrote the whole history every ``F`` archivals: work that grew with the table, paid by the
writer whose commit ran the archival. The price of levels is the rare merge at the top, which
rewrites most of the history once every ``F ** levels`` archivals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import msgspec

from ._errors import CorruptMetadataError
from ._instant import Action
from ._layout import ARCHIVE_FOLDER
from ._storage import Storage

ARCHIVE_SUFFIX = ".archive"


class ArchivedInstant(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    time: str
    action: Action
    state: str
    completed_at: str | None = None
    metadata: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))
    #: The terminal file's bytes as archival found them, when they could not be decoded and the
    #: instant was past retention (``Timeline.archive``): kept so that nothing is lost
    #: silently; ``metadata`` is then null, and reading it raises naming the file.
    damaged: bytes | None = None


class ArchiveFile(msgspec.Struct, frozen=True, kw_only=True, tag="archive", tag_field="kind"):
    format_version: int = 1
    instants: list[ArchivedInstant] = msgspec.field(default_factory=list)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ArchiveFile)


def archive_files(storage: Storage) -> list[str]:
    return [p for p in storage.list(ARCHIVE_FOLDER) if p.endswith(ARCHIVE_SUFFIX)]


def newest_completion(path: str) -> str:
    """The newest completion time an archive file holds, from its name ``<first>_<last>``: no
    completed instant in it completed after ``last`` (files are named by their sort key, the
    completion time or, for a rolled-back instant, the requested time)."""
    return path.rsplit("/", 1)[-1].removesuffix(ARCHIVE_SUFFIX).rsplit("_", 1)[-1]


def read_archive(storage: Storage, path: str) -> list[ArchivedInstant]:
    try:
        data = storage.read(path)
    except FileNotFoundError:
        return []  # merged away between our listing and this read
    try:
        return _decoder.decode(data).instants
    except msgspec.DecodeError as exc:
        raise CorruptMetadataError(path, "a JSON archive of instants", str(exc)) from None


def read_all(storage: Storage) -> dict[str, ArchivedInstant]:
    """Every archived instant by requested time (duplicates from interrupted merges collapse)."""
    merged: dict[str, ArchivedInstant] = {}
    for path in archive_files(storage):
        instants = read_archive(storage, path)
        if not instants:
            # Archive files are never empty, so it was merged away after our listing; the merged
            # file was written before that delete, so a fresh listing has it.
            return read_all(storage)
        for instant in instants:
            merged[instant.time] = instant
    return merged


def write_archive(storage: Storage, instants: Iterable[ArchivedInstant]) -> str:
    ordered = sorted(instants, key=lambda i: (i.completed_at or i.time, i.time))
    first = ordered[0].completed_at or ordered[0].time
    last = ordered[-1].completed_at or ordered[-1].time
    path = f"{ARCHIVE_FOLDER}/{first}_{last}{ARCHIVE_SUFFIX}"
    # A name can repeat: after a crash part way through deleting archived instants, the retry
    # chooses the survivors, and if the oldest was a rolled-back instant (deleted last) its
    # first_last name is the same. Archived records never change, so keep the union instead of
    # overwriting the records whose active files are already gone.
    existing = read_archive(storage, path)
    if existing:
        union = {i.time: i for i in existing}
        union.update((i.time, i) for i in ordered)
        ordered = sorted(union.values(), key=lambda i: (i.completed_at or i.time, i.time))
    storage.put(path, _encoder.encode(ArchiveFile(instants=ordered)))
    return path


#: Archive files smaller than this are level 0 (an archival of a few dozen small instants).
LEVEL_UNIT = 4096
#: Past this many files, all readable files merge into one whatever their levels: only sizes
#: that defeat the levels (a huge archival among small ones, again and again) get here.
_MOST_FILES_PER_LEVEL_BOUND = 16


def archive_level(size: int, fan_in: int) -> float:
    """The level of an archive file of ``size`` bytes when ``fan_in`` (at least 2) files merge
    into one: ``log_fan_in(size / LEVEL_UNIT)``, 0 below the unit."""
    return math.log(max(size, LEVEL_UNIT) / LEVEL_UNIT, fan_in)


def _merges_everything(paths: list[str], max_files: int) -> bool:
    """``max_files`` 1, or the fallback past the bound: every readable file merges into one."""
    return max_files == 1 or len(paths) > max_files * _MOST_FILES_PER_LEVEL_BOUND


def _due(levels: list[float], max_files: int) -> bool:
    return len(levels) >= max_files and max(levels) - min(levels) < 1.0


def archive_merge_due(storage: Storage, max_files: int) -> bool:
    """Whether :func:`merge_archives` would merge now (tests check that it leaves none due)."""
    paths = archive_files(storage)
    if _merges_everything(paths, max_files):
        return len(paths) > 1
    newest = paths[-max_files:]
    return _due([archive_level(storage.size(path), max_files) for path in newest], max_files)


def merge_archives(storage: Storage, *, max_files: int) -> None:
    """Merge the newest ``max_files`` archive files into one while they are within one level
    of each other (see the module docstring); with ``max_files`` 1, every archival folds
    everything into one.

    A damaged archive file is left as it is (reading the history names it, and validation
    reports it); the readable files of a merge are still merged.
    """
    paths = archive_files(storage)
    if _merges_everything(paths, max_files):
        _merge(storage, paths)
        return
    sizes: dict[str, int] = {}
    while len(paths) >= max_files:
        newest = paths[-max_files:]
        for path in newest:
            if path not in sizes:
                try:
                    sizes[path] = storage.size(path)
                except FileNotFoundError:
                    return  # another archival merged it meanwhile: it decides
        if not _due([archive_level(sizes[path], max_files) for path in newest], max_files):
            return
        merged = _merge(storage, newest)
        if merged is None:
            return
        paths = [*paths[:-max_files], merged[0]]
        sizes[merged[0]] = merged[1]


def _merge(storage: Storage, paths: list[str]) -> tuple[str, int] | None:
    """Merge the readable files of ``paths`` into one (write, then delete the others); return
    it and its size, or None when fewer than two were readable."""
    if len(paths) < 2:
        return None
    merged: dict[str, ArchivedInstant] = {}
    readable = []
    for path in paths:
        try:
            instants = read_archive(storage, path)
        except CorruptMetadataError:
            continue
        readable.append(path)
        merged.update((instant.time, instant) for instant in instants)
    if len(readable) < 2:
        return None
    try:
        kept = write_archive(storage, merged.values())
    except CorruptMetadataError:
        # A damaged leftover of an interrupted merge holds the merged name: leave it all as it
        # is (validation reports the file) rather than fail the archival that got here.
        return None
    for path in readable:
        if path != kept:
            storage.delete(path)
    return kept, storage.size(kept)
