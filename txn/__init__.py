"""metatxn: transactional tables over Parquet for Python and PySpark.

The public surface: create and open tables, read their timeline, and the error tree.

Example:
    >>> import pyarrow as pa, txn
    >>> t = txn.create_table("memory://doc/orders", pa.schema([("id", pa.int64())]), record_key="id")
    >>> t.record_key, t.timeline()
    ('id', [])
    >>> txn.create_table("memory://doc/orders", pa.schema([("id", pa.int64())]))
    Traceback (most recent call last):
    ...
    txn.TableExistsError: a metatxn table already exists at 'memory://doc/orders'
    Help: open it with txn.open_table(uri), or choose another location
"""

from metatxn.indexes import ProducerKind, SegmentStatus, SnapshotExpiredError
from metatxn.timeline import (
    Action,
    CommitConflictError,
    CommitStateUnknownError,
    CorruptMetadataError,
    DuplicateKeyError,
    IllegalTransitionError,
    InvalidOptionError,
    LockLostError,
    LockTimeoutError,
    MergeCardinalityError,
    ObjectExistsError,
    ObjectNotFoundError,
    SchemaChangedError,
    SchemaEvolutionError,
    SchemaMismatchError,
    SegmentNotFoundError,
    StorageError,
    StreamDroppedError,
    StreamNotFoundError,
    TableExistsError,
    TableNotFoundError,
    TxnError,
    WorkerEnvironmentError,
)

from ._changes import ChangePart, ChangeScanner
from ._files import open_storage
from ._read import FileReader, Scanner, Snapshot
from ._results import (
    CHANGE_COLUMNS,
    ChangeInstant,
    ChangeSummary,
    ChangeType,
    CleanReason,
    Commit,
    CommitProperties,
    CompactionKind,
    DataFile,
    HistoryEntry,
    MaintenanceReport,
    MergeResult,
    Operation,
    Problem,
    ProblemKind,
    SchemaVersion,
    Segment,
    StreamProgress,
    ValidationReport,
)
from ._segments import CleanResult
from ._streams import Stream, StreamInfo
from ._table import Table, create_table, open_table
from ._twophase import (
    KeyProbe,
    PendingCompaction,
    PendingWrite,
    WriteTicket,
    WrittenFiles,
    adopt_files,
    write_files,
    write_index,
)
from ._write import TableMerger, Transaction

__all__ = [
    "CHANGE_COLUMNS",
    "Action",
    "ChangeInstant",
    "ChangePart",
    "ChangeScanner",
    "ChangeSummary",
    "ChangeType",
    "CleanReason",
    "CleanResult",
    "Commit",
    "CommitConflictError",
    "CommitProperties",
    "CommitStateUnknownError",
    "CompactionKind",
    "CorruptMetadataError",
    "DataFile",
    "DuplicateKeyError",
    "FileReader",
    "HistoryEntry",
    "IllegalTransitionError",
    "InvalidOptionError",
    "KeyProbe",
    "LockLostError",
    "LockTimeoutError",
    "MaintenanceReport",
    "MergeCardinalityError",
    "MergeResult",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "Operation",
    "PendingCompaction",
    "PendingWrite",
    "Problem",
    "ProblemKind",
    "ProducerKind",
    "Scanner",
    "SchemaChangedError",
    "SchemaEvolutionError",
    "SchemaMismatchError",
    "SchemaVersion",
    "Segment",
    "SegmentNotFoundError",
    "SegmentStatus",
    "Snapshot",
    "SnapshotExpiredError",
    "StorageError",
    "Stream",
    "StreamDroppedError",
    "StreamInfo",
    "StreamNotFoundError",
    "StreamProgress",
    "Table",
    "TableExistsError",
    "TableMerger",
    "TableNotFoundError",
    "Transaction",
    "TxnError",
    "ValidationReport",
    "WorkerEnvironmentError",
    "WriteTicket",
    "WrittenFiles",
    "adopt_files",
    "create_table",
    "open_storage",
    "open_table",
    "write_files",
    "write_index",
]


def __dir__() -> list[str]:
    return list(__all__)
