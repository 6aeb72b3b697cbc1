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

from indexes import SnapshotExpiredError
from timeline import (
    CommitConflictError,
    CommitStateUnknownError,
    CorruptMetadataError,
    DuplicateKeyError,
    IllegalTransitionError,
    InvalidOptionError,
    LockLostError,
    LockTimeoutError,
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

from ._context import (
    Commit,
    CommitProperties,
    DataFile,
    MaintenanceReport,
    Problem,
    Segment,
    ValidationReport,
)
from ._read import Snapshot
from ._segments import CleanResult
from ._streams import Stream, StreamInfo
from ._table import Table, create_table, open_table
from ._twophase import KeyProbe, PendingWrite, WriteTicket, WrittenFiles, adopt_files, write_files

__all__ = [
    "CleanResult",
    "Commit",
    "CommitConflictError",
    "CommitProperties",
    "CommitStateUnknownError",
    "CorruptMetadataError",
    "DataFile",
    "DuplicateKeyError",
    "IllegalTransitionError",
    "InvalidOptionError",
    "KeyProbe",
    "LockLostError",
    "LockTimeoutError",
    "MaintenanceReport",
    "PendingWrite",
    "Problem",
    "SchemaMismatchError",
    "Segment",
    "SegmentNotFoundError",
    "Snapshot",
    "SnapshotExpiredError",
    "StorageError",
    "Stream",
    "StreamDroppedError",
    "StreamInfo",
    "StreamNotFoundError",
    "Table",
    "TableExistsError",
    "TableNotFoundError",
    "TxnError",
    "ValidationReport",
    "WorkerEnvironmentError",
    "WriteTicket",
    "WrittenFiles",
    "adopt_files",
    "create_table",
    "open_table",
    "write_files",
]


def __dir__() -> list[str]:
    return list(__all__)
