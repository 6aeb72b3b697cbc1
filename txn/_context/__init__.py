"""The internal table context every operation works on: configuration, table properties and their
bounds, what is recorded on the timeline, and the public value types operations return."""

from ._compaction import (
    AUTO_PROPERTY,
    DEFAULT_LEVEL_THRESHOLD,
    LEVEL_THRESHOLD_PROPERTY,
    MAJOR_SIZE_PROPERTY,
    MAX_LEVEL_COUNT,
    PRESERVE_PROPERTY,
    CompactionOptions,
    compaction_options,
    parse_level_threshold,
)
from ._config import TABLE_CONFIG_PATH, TableConfig, decode_config, encode_config, read_config
from ._context import LATEST_PARTITIONS, IdFactory, TableContext, completion_map, random_id
from ._open import create_context, open_context
from ._options import (
    check_layout,
    check_properties,
    column_list,
    delete_compaction_threshold,
    target_file_bytes,
)
from ._records import (
    ACTION_OF,
    COMPACT,
    DATA_ACTIONS,
    Commit,
    CommitMetadata,
    DataFile,
    Problem,
    Segment,
    ValidationReport,
    WritePlan,
)

__all__ = [
    "ACTION_OF",
    "AUTO_PROPERTY",
    "COMPACT",
    "DATA_ACTIONS",
    "DEFAULT_LEVEL_THRESHOLD",
    "LATEST_PARTITIONS",
    "LEVEL_THRESHOLD_PROPERTY",
    "MAJOR_SIZE_PROPERTY",
    "MAX_LEVEL_COUNT",
    "PRESERVE_PROPERTY",
    "TABLE_CONFIG_PATH",
    "Commit",
    "CommitMetadata",
    "CompactionOptions",
    "DataFile",
    "IdFactory",
    "Problem",
    "Segment",
    "TableConfig",
    "TableContext",
    "ValidationReport",
    "WritePlan",
    "check_layout",
    "check_properties",
    "column_list",
    "compaction_options",
    "completion_map",
    "create_context",
    "decode_config",
    "delete_compaction_threshold",
    "encode_config",
    "open_context",
    "parse_level_threshold",
    "random_id",
    "read_config",
    "target_file_bytes",
]
