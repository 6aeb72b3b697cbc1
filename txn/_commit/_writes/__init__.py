"""One class per kind of write, and the driver that commits any of them as one instant.

``_base`` holds the interface (:class:`Write`) and the building blocks the kinds share; each
other module is one kind or family; ``_driver`` runs a write through the commit protocol. A new
kind of write is a new :class:`Write` (usually :class:`DataWrite`) subclass; see
design/protocol.md ("The write classes").
"""

from ._alter import AlterTable
from ._base import (
    NEW_SEGMENT,
    NO_SEGMENT,
    SMALL_WRITE_BYTES,
    SMALL_WRITE_DELETES,
    Allocation,
    DataWrite,
    LockPolicy,
    Recorded,
    Write,
    Written,
    layout_names,
    to_commit,
)
from ._compaction import Compaction, Merge, StreamFilesMerge
from ._driver import WrittenBy, begin, commit, finish, run
from ._external import AddSegment, ExternalLoad
from ._overwrite import Overwrite
from ._progress import (
    AlreadyCommitted,
    Progress,
    check_generation,
    committed,
    generation_of,
    in_range,
    producer_record,
)
from ._rows import Append, Delete, MergeInto, RowChanges, Update, Upsert
from ._streams import DropStream, StreamBatch, StreamStep
from ._versions import WriteSchema, admit_versions, current_schema, evolved_schema, next_versions, stamped

__all__ = [
    "NEW_SEGMENT",
    "NO_SEGMENT",
    "SMALL_WRITE_BYTES",
    "SMALL_WRITE_DELETES",
    "AddSegment",
    "Allocation",
    "AlreadyCommitted",
    "AlterTable",
    "Append",
    "Compaction",
    "DataWrite",
    "Delete",
    "DropStream",
    "ExternalLoad",
    "LockPolicy",
    "Merge",
    "MergeInto",
    "Overwrite",
    "Progress",
    "Recorded",
    "RowChanges",
    "StreamBatch",
    "StreamFilesMerge",
    "StreamStep",
    "Update",
    "Upsert",
    "Write",
    "WriteSchema",
    "Written",
    "WrittenBy",
    "admit_versions",
    "begin",
    "check_generation",
    "commit",
    "committed",
    "current_schema",
    "evolved_schema",
    "finish",
    "generation_of",
    "in_range",
    "layout_names",
    "next_versions",
    "producer_record",
    "run",
    "stamped",
    "to_commit",
]
