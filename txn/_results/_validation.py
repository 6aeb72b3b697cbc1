"""What ``Table.validate()`` reports."""

from __future__ import annotations

from dataclasses import dataclass

from metatxn.timeline import Vocabulary


class ProblemKind(Vocabulary):
    """What is wrong, in a :class:`Problem`."""

    #: A file named by the metadata is not on storage.
    MISSING_FILE = "missing file"
    #: A file that cannot be decoded as what it should be.
    DAMAGED_FILE = "damaged file"
    #: A file storage failed to read.
    UNREADABLE_FILE = "unreadable file"
    #: A data file or delete delta on storage that no committed instant or pending write names.
    UNREFERENCED_FILE = "unreferenced file"
    SIZE_MISMATCH = "size mismatch"
    ROW_COUNT_MISMATCH = "row count mismatch"
    MISSING_COLUMN_STATS = "missing column stats"
    MISSING_DELETE_DELTA = "missing delete delta"
    BAD_DELETE_DELTA = "bad delete delta"
    ORPHAN_DELETE_DELTA = "orphan delete delta"
    MISSING_EXTERNAL_FILE = "missing external file"
    CHANGED_EXTERNAL_FILE = "changed external file"
    DEAD_SEGMENT = "dead segment"
    SEGMENT_ROW_COUNT = "segment row count"
    DUPLICATE_KEY = "duplicate key"
    RECORD_INDEX_ENTRY = "record index entry"
    EXPIRED_INSTANT = "expired instant"
    PENDING_ROLLBACK = "pending rollback"
    ARCHIVAL_BLOCKED = "archival blocked"
    #: A record of the ``schemas`` partition that breaks the versions' rules (numbering, ids).
    BAD_SCHEMA_VERSION = "bad schema version"


@dataclass(frozen=True)
class Problem:
    """One disagreement between the metadata table and storage."""

    kind: ProblemKind
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}: {self.detail}"


@dataclass(frozen=True)
class ValidationReport:
    """What :meth:`Table.validate` found; ``ok`` when there are no problems."""

    problems: list[Problem]
    files_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            return f"ok: {self.files_checked} files agree with the metadata table"
        return "\n".join(str(p) for p in self.problems)
