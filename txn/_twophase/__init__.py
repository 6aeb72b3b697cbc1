"""The two-phase write for distributed writers: the driver begins a write and commits it once
(:class:`PendingWrite`); workers anywhere write its data files with a picklable ticket
(:func:`write_files`), or a foreign writer's files join it (:func:`adopt_files`); a compaction
whose rows workers rewrite is begun and committed the same way (:class:`PendingCompaction`)."""

from ._compaction import PendingCompaction
from ._compaction import begin as begin_compaction
from ._driver import (
    OPERATIONS,
    PendingWrite,
    already_done,
    begin_write,
    key_probe,
    read_state,
    stream_progress,
)
from ._staging import adopt_files
from ._ticket import KeyProbe, WriteTicket
from ._worker import WrittenFiles, write_files, write_index

__all__ = [
    "OPERATIONS",
    "KeyProbe",
    "PendingCompaction",
    "PendingWrite",
    "WriteTicket",
    "WrittenFiles",
    "adopt_files",
    "already_done",
    "begin_compaction",
    "begin_write",
    "key_probe",
    "read_state",
    "stream_progress",
    "write_files",
    "write_index",
]
