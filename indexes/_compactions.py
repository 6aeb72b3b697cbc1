"""Which metadata compactions count as completed, archived ones included.

A record-index run counts only once its compaction completed. A node that no commit touches
keeps its chain's top run for good, so if only the active metadata timeline could vouch for a
compaction, archival could never pass the oldest such top and the active timeline would grow
with every commit (design/record-index.md, "Cleaning and archival"). Instead the active timeline
vouches for the archived compactions too, without reading the archive:

- compaction times grow in the order compactions are requested (each is above every time on
  both timelines), and one runs at a time: a compaction begins only once every older one is
  completed or aborted;
- the newest completed compaction is never archived (``MetadataTable.archive``), and every
  compaction archived is older than it;
- an aborted compaction's runs are deleted before it leaves the active timeline
  (``MetadataTable.archive`` sweeps them).

So a compaction that is not on the active timeline and is older than its newest completed
compaction was archived completed: its runs on storage count. A compaction requested after
the timeline was read is newer than every instant on it, so it never counts by mistake.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from metatxn.timeline import COMPLETED, Action, TimelineView


@dataclass(frozen=True)
class DoneCompactions:
    """``time in done``: whether the metadata compaction of that time completed."""

    #: Completed compactions on the active metadata timeline.
    completed: frozenset[str]
    #: Compactions on the active metadata timeline that are not completed (pending, aborted).
    undecided: frozenset[str] = frozenset()

    @classmethod
    def of(cls, view: TimelineView) -> DoneCompactions:
        compactions = [i for i in view.instants if i.action == Action.COMPACTION]
        return cls(frozenset(i.time for i in compactions if i.state == COMPLETED),
                   frozenset(i.time for i in compactions if i.state != COMPLETED))

    @property
    def newest(self) -> str:
        return max(self.completed, default="")

    def __contains__(self, time: object) -> bool:
        if time in self.completed:
            return True
        return isinstance(time, str) and time < self.newest and time not in self.undecided

    def __iter__(self) -> Iterator[str]:
        """The completed compactions on the active timeline (archived ones are not listed)."""
        return iter(sorted(self.completed))

    def __len__(self) -> int:
        return len(self.completed)
