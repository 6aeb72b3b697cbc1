"""The archived timeline: terminal instants folded out of ``_timeline/`` into a few larger files.

Each archive file ``_timeline/archive/<first>_<last>.archive`` holds whole instants (time, action,
state, completion time and completion metadata) in completion order. Archive files are written
under the table lock with a plain put; they are not commit points. Archival writes the archive
file first and removes the active files second, so a crash in between leaves an instant in both
places, and readers de-duplicate by instant time (the active copy wins). When there are more than
a configured number of archive files they are merged into one, again write-then-delete.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ._errors import CorruptMetadataError
from ._storage import Storage

ARCHIVE_FOLDER = "_timeline/archive"
ARCHIVE_SUFFIX = ".archive"


class ArchivedInstant(msgspec.Struct, frozen=True, kw_only=True):
    time: str
    action: str
    state: str
    completed_at: str | None = None
    metadata: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))


class ArchiveFile(msgspec.Struct, frozen=True, kw_only=True, tag="archive", tag_field="kind"):
    format_version: int = 1
    instants: list[ArchivedInstant] = msgspec.field(default_factory=list)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ArchiveFile)


def archive_files(storage: Storage) -> list[str]:
    return [p for p in storage.list(ARCHIVE_FOLDER) if p.endswith(ARCHIVE_SUFFIX)]


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


def merge_archives(storage: Storage, *, max_files: int) -> None:
    """Fold all archive files into one when there are more than ``max_files``.

    A damaged archive file is left as it is (reading the history names it, and validation
    reports it); the others are still merged, so the number of files stays bounded.
    """
    paths = archive_files(storage)
    if len(paths) <= max_files:
        return
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
        return
    kept = write_archive(storage, merged.values())
    for path in readable:
        if path != kept:
            storage.delete(path)
