"""The internal table context every operation works on: configuration, table properties and their
bounds, what is recorded on the timeline, and the public value types operations return."""

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
    "DATA_ACTIONS",
    "LATEST_PARTITIONS",
    "TABLE_CONFIG_PATH",
    "Commit",
    "CommitMetadata",
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
    "completion_map",
    "create_context",
    "decode_config",
    "delete_compaction_threshold",
    "encode_config",
    "open_context",
    "random_id",
    "read_config",
    "target_file_bytes",
]
