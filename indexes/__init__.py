"""The metadata table: file listings, column statistics, segments, delete deltas, table versions
and the record index.

It sits between ``txn`` and ``timeline`` (``txn -> indexes -> timeline``). It is a merge-on-read
table of its own under ``_metadata/``, updated under the table lock in the same commit as each
data write, and read by trusting only instants completed on the data timeline.
"""

from ._column_ids import FIELD_ID, assign_ids, field_id, ids_by_name, last_column_id, nested_fields
from ._compactions import DoneCompactions
from ._keys import key_hash, shard_of
from ._layout import (
    COLUMN_STATS,
    DELETES,
    FILES,
    METADATA_FOLDER,
    PARTITIONS,
    RECORD_INDEX,
    SCHEMAS,
    SEGMENTS,
    STREAMS,
    shard_folder,
)
from ._metadata_table import (
    MetadataChanges,
    MetadataOptions,
    MetadataSnapshot,
    MetadataTable,
    RetentionFloor,
    RetentionSource,
    SnapshotExpiredError,
    retention_floor_of,
)
from ._record_index import RecordIndex, index_schema, key_names, matching, merge_entries
from ._records import (
    DELETES_SCHEMA,
    FILES_SCHEMA,
    column_stats_schema,
    extend_two_phase,
    live,
    merge_two_phase,
    purges,
    removed,
    stats_eligible,
    tombstones,
    without_purged,
)
from ._schemas import SCHEMAS_SCHEMA, TableVersion
from ._segments import (
    LIVE_STATUSES,
    SEGMENTS_SCHEMA,
    STATUS_RANK,
    SegmentEntry,
    SegmentStatus,
    merge_segment,
    segment_sort_key,
)
from ._streams import (
    MAX_BATCH,
    STREAMS_SCHEMA,
    ProducerKind,
    StreamKey,
    StreamRecord,
    StreamStatus,
)

__all__ = [
    "COLUMN_STATS",
    "DELETES",
    "DELETES_SCHEMA",
    "FIELD_ID",
    "FILES",
    "FILES_SCHEMA",
    "LIVE_STATUSES",
    "MAX_BATCH",
    "METADATA_FOLDER",
    "PARTITIONS",
    "RECORD_INDEX",
    "SCHEMAS",
    "SCHEMAS_SCHEMA",
    "SEGMENTS",
    "SEGMENTS_SCHEMA",
    "STATUS_RANK",
    "STREAMS",
    "STREAMS_SCHEMA",
    "DoneCompactions",
    "MetadataChanges",
    "MetadataOptions",
    "MetadataSnapshot",
    "MetadataTable",
    "ProducerKind",
    "RecordIndex",
    "RetentionFloor",
    "RetentionSource",
    "SegmentEntry",
    "SegmentStatus",
    "SnapshotExpiredError",
    "StreamKey",
    "StreamRecord",
    "StreamStatus",
    "TableVersion",
    "assign_ids",
    "column_stats_schema",
    "extend_two_phase",
    "field_id",
    "ids_by_name",
    "index_schema",
    "key_hash",
    "key_names",
    "last_column_id",
    "live",
    "matching",
    "merge_entries",
    "merge_segment",
    "merge_two_phase",
    "nested_fields",
    "purges",
    "removed",
    "retention_floor_of",
    "segment_sort_key",
    "shard_folder",
    "shard_of",
    "stats_eligible",
    "tombstones",
    "without_purged",
]


def __dir__() -> list[str]:
    return list(__all__)
