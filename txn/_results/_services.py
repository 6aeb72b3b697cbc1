"""What the table services report: maintenance, and why CLEAN FILES removes a file."""

from __future__ import annotations

from dataclasses import dataclass

from metatxn.timeline import Vocabulary


class CleanReason(Vocabulary):
    """Why CLEAN FILES removes a file: a plan entry's reason (``CleanEntry.reason``, stored in
    the clean's plan) and the keys of ``CleanResult.reasons``."""

    #: A file of a ``Compacted`` segment past retention.
    COMPACTED = "compacted"
    #: A file of a ``Marked for Delete`` segment past retention.
    MARKED_FOR_DELETE = "marked_for_delete"
    #: A file a commit removed (a rewrite), past retention.
    REMOVED = "removed"
    #: A delete delta an older one replaced (horizontal compaction), past retention.
    REPLACED_DELTA = "replaced_delta"
    #: A file of no segment (CarbonData's stale segment data): moved to the trash.
    ORPHAN = "orphan"
    #: Trash older than ``clean.trash_hours``, deleted for good.
    EXPIRED_TRASH = "expired_trash"
    #: A file whose record a completed clean purged, still on storage: that clean died between
    #: its commit point and deleting it (or the file was put back by hand).
    LEFTOVER = "leftover"
    #: Old files of the metadata table (``CleanResult.reasons`` only: never planned).
    METADATA = "metadata"
    #: Temporaries of writers killed inside a put (``CleanResult.reasons`` only: never planned).
    TEMPORARY = "temporary"


@dataclass(frozen=True)
class MaintenanceReport:
    """What one run of table maintenance (``Table.maintain()``) did."""

    #: The metadata compaction it completed (its instant time), or None.
    compaction: str | None = None
    #: Metadata files cleaning deleted (superseded bases and folded log blocks).
    metadata_files_cleaned: int = 0
    #: Instants moved to the archive, data and metadata timelines together.
    instants_archived: int = 0
    #: Markers of decided instants that were swept.
    markers_swept: int = 0
    #: Why nothing was compacted although it was due, if so (another compaction is running).
    skipped: str | None = None
