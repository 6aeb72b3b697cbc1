"""Segment maintenance: SHOW SEGMENTS and PARTITIONS, compaction, DELETE SEGMENT, CLEAN FILES,
and checking the metadata table against storage."""

from ._clean import CleanResult, clean
from ._compact import after_load, compact
from ._delete import delete_segments
from ._show import partitions, segments
from ._validate import validate

__all__ = [
    "CleanResult",
    "after_load",
    "clean",
    "compact",
    "delete_segments",
    "partitions",
    "segments",
    "validate",
]
