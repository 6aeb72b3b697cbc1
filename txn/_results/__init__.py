"""The public value types: what operations return (commits, listings, reports), the options a
commit takes, and the vocabulary their fields use. The lowest room: it imports no other."""

from ._changes import (
    CHANGE_COLUMNS,
    CHANGE_TYPE,
    COMMIT_INSTANT,
    COMMIT_TIME,
    ChangeInstant,
    ChangeSummary,
    ChangeType,
)
from ._commit_properties import CommitProperties, StreamProgress, commit_properties
from ._commits import Commit, CompactionKind, MergeResult, Operation
from ._display import load_time_taken, segment_size
from ._history import HistoryEntry
from ._listings import DataFile, Segment
from ._services import CleanReason, MaintenanceReport
from ._validation import Problem, ProblemKind, ValidationReport
from ._versions import SchemaVersion

__all__ = [
    "CHANGE_COLUMNS",
    "CHANGE_TYPE",
    "COMMIT_INSTANT",
    "COMMIT_TIME",
    "ChangeInstant",
    "ChangeSummary",
    "ChangeType",
    "CleanReason",
    "Commit",
    "CommitProperties",
    "CompactionKind",
    "DataFile",
    "HistoryEntry",
    "MaintenanceReport",
    "MergeResult",
    "Operation",
    "Problem",
    "ProblemKind",
    "SchemaVersion",
    "Segment",
    "StreamProgress",
    "ValidationReport",
    "commit_properties",
    "load_time_taken",
    "segment_size",
]
