"""Reading: resolving a snapshot (latest or time travel) and reading it."""

from ._count import count_rows
from ._file_reader import FileReader, check_columns, check_filter
from ._resolve import AS_OF_FORMS, completion_bound, latest, snapshot, snapshot_at
from ._scanner import DEFAULT_BATCH_SIZE, Scanner
from ._snapshot import Snapshot

__all__ = ["AS_OF_FORMS", "DEFAULT_BATCH_SIZE", "FileReader", "Scanner", "Snapshot",
           "check_columns", "check_filter", "completion_bound", "count_rows", "latest", "snapshot",
           "snapshot_at"]
