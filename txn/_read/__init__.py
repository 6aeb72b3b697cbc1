"""Reading: resolving a snapshot (latest or time travel) and reading it."""

from ._resolve import snapshot, snapshot_at
from ._snapshot import Snapshot

__all__ = ["Snapshot", "snapshot", "snapshot_at"]
