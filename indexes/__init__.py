"""The metadata table: file listings, column statistics, segments and (next) the record index.

It sits between ``txn`` and ``timeline`` (``txn -> indexes -> timeline``). It is a merge-on-read
table of its own under ``_metadata/``, updated under the table lock in the same commit as each
data write, and read by trusting only instants completed on the data timeline.
"""

from ._layout import COLUMN_STATS, FILES, METADATA_FOLDER, PARTITIONS, RECORD_INDEX, SEGMENTS, shard_folder
from ._metadata_table import (
    MetadataChanges,
    MetadataOptions,
    MetadataSnapshot,
    MetadataTable,
    SnapshotExpiredError,
)
from ._records import (
    FILES_SCHEMA,
    column_stats_schema,
    extend_two_phase,
    live,
    merge_two_phase,
    stats_eligible,
    tombstones,
)
from ._segments import (
    COMPACTED,
    INSERT_IN_PROGRESS,
    LIVE_STATUSES,
    MARKED_FOR_DELETE,
    SEGMENTS_SCHEMA,
    STATUS_RANK,
    STREAMING,
    STREAMING_FINISH,
    SUCCESS,
    SegmentEntry,
    merge_segment,
    segment_sort_key,
)

__all__ = [
    "COLUMN_STATS",
    "COMPACTED",
    "FILES",
    "FILES_SCHEMA",
    "INSERT_IN_PROGRESS",
    "LIVE_STATUSES",
    "MARKED_FOR_DELETE",
    "METADATA_FOLDER",
    "PARTITIONS",
    "RECORD_INDEX",
    "SEGMENTS",
    "SEGMENTS_SCHEMA",
    "STATUS_RANK",
    "STREAMING",
    "STREAMING_FINISH",
    "SUCCESS",
    "MetadataChanges",
    "MetadataOptions",
    "MetadataSnapshot",
    "MetadataTable",
    "SegmentEntry",
    "SnapshotExpiredError",
    "column_stats_schema",
    "extend_two_phase",
    "live",
    "merge_segment",
    "merge_two_phase",
    "segment_sort_key",
    "shard_folder",
    "stats_eligible",
    "tombstones",
]


def __dir__() -> list[str]:
    return list(__all__)
