"""The timeline: storage primitives, instants, the table lock, heartbeats and archival.

This package knows nothing of segments, files or indexes. It stores instants whose plans and
commit metadata are opaque JSON payloads chosen by the layers above.

Example:
    >>> from metatxn import timeline
    >>> tl = timeline.Timeline(timeline.open_storage("memory://doc/example"))
    >>> instant = tl.start(tl.request("commit", {"note": "hello"}))
    >>> with tl.lock() as lease:
    ...     done = tl.complete(instant, {"rows": 3}, lease=lease)
    >>> [i.state for i in tl.load().completed()]
    ['completed']
"""

from ._archive import ArchivedInstant, ArchiveFile
from ._archive import read_all as read_archive
from ._arrowfs import makes_folders
from ._clock import Clock, next_time, system_clock
from ._errors import (
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
from ._heartbeat import Heartbeat
from ._instant import (
    ACTIONS,
    COMPLETED,
    INFLIGHT,
    REQUESTED,
    ROLLEDBACK,
    Action,
    Instant,
    State,
    format_time,
    parse_file_name,
    parse_time,
    time_of,
)
from ._layout import ARCHIVE_FOLDER, TIMELINE_FOLDER
from ._local import LocalStorage
from ._lock import Lease, LockRecord, TableLock
from ._memory import MemoryStorage
from ._object import ObjectStorage
from ._open import open_storage
from ._options import fsspec_options
from ._prefixed import PrefixedStorage
from ._storage import Staging, Storage, Temporary, check_key, leftover_temporaries, move
from ._timeline import RollbackPlan, Timeline, TimelineOptions
from ._view import TimelineView
from ._vocabulary import Vocabulary

__all__ = [
    "ACTIONS",
    "ARCHIVE_FOLDER",
    "COMPLETED",
    "INFLIGHT",
    "REQUESTED",
    "ROLLEDBACK",
    "TIMELINE_FOLDER",
    "Action",
    "ArchiveFile",
    "ArchivedInstant",
    "Clock",
    "CommitConflictError",
    "CommitStateUnknownError",
    "CorruptMetadataError",
    "DuplicateKeyError",
    "Heartbeat",
    "IllegalTransitionError",
    "Instant",
    "InvalidOptionError",
    "Lease",
    "LocalStorage",
    "LockLostError",
    "LockRecord",
    "LockTimeoutError",
    "MemoryStorage",
    "MergeCardinalityError",
    "ObjectExistsError",
    "ObjectNotFoundError",
    "ObjectStorage",
    "PrefixedStorage",
    "RollbackPlan",
    "SchemaChangedError",
    "SchemaEvolutionError",
    "SchemaMismatchError",
    "SegmentNotFoundError",
    "Staging",
    "State",
    "Storage",
    "StorageError",
    "StreamDroppedError",
    "StreamNotFoundError",
    "TableExistsError",
    "TableLock",
    "TableNotFoundError",
    "Temporary",
    "Timeline",
    "TimelineOptions",
    "TimelineView",
    "TxnError",
    "Vocabulary",
    "WorkerEnvironmentError",
    "check_key",
    "format_time",
    "fsspec_options",
    "leftover_temporaries",
    "makes_folders",
    "move",
    "next_time",
    "open_storage",
    "parse_file_name",
    "parse_time",
    "read_archive",
    "system_clock",
    "time_of",
]


def __dir__() -> list[str]:
    return list(__all__)
