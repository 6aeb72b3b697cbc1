"""Segment maintenance: SHOW SEGMENTS and PARTITIONS, compaction, DELETE SEGMENT, CLEAN FILES,
and checking the metadata table against storage."""

from ._clean import CleanResult, clean
from ._compact import (
    STREAM_FILES_FANOUT,
    BegunCompaction,
    after_load,
    begin_compaction,
    check_kind,
    compact,
    merge_stream_files,
)
from ._delete import delete_segments
from ._show import partitions, segments
from ._trash import trash
from ._validate import validate

__all__ = [
    "STREAM_FILES_FANOUT",
    "BegunCompaction",
    "CleanResult",
    "after_load",
    "begin_compaction",
    "check_kind",
    "clean",
    "compact",
    "delete_segments",
    "merge_stream_files",
    "partitions",
    "segments",
    "trash",
    "validate",
]
