"""Reading: resolving a snapshot (latest or time travel) and reading it."""

from ._file_reader import FileReader
from ._resolve import snapshot, snapshot_at
from ._scanner import Scanner
from ._snapshot import Snapshot

__all__ = ["FileReader", "Scanner", "Snapshot", "snapshot", "snapshot_at"]
