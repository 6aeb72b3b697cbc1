"""``alter_table``: a schema or table-property change, a commit of its own with no data file.

The new version is worked out under the lock at begin, from the version the latest state holds
then, and written as the instant's ``schemas`` block with its deltacommit: it exists from the
instant's completion on, and a crash at any step before leaves the old version (the block of an
instant that did not complete is never read, and recovery deletes it).
"""

from __future__ import annotations

from dataclasses import dataclass

from metatxn.indexes import FILES_SCHEMA, column_stats_schema
from metatxn.timeline import TimelineView

from ..._context import TableContext
from ..._results import Operation
from ..._schema import Change
from .._protocol import Pending
from ._base import DataWrite, LockPolicy, Recorded, Written
from ._versions import next_versions


@dataclass(kw_only=True)
class AlterTable(DataWrite):
    """``alter_table``: add, drop, rename or widen columns, relax NOT NULL, set or unset table
    properties; one commit for any number of them.

    Segments: none. Lock: held from begin to commit (a few small files), so two changes never
    race and the version it builds on is the latest. Admission: every change checked against
    that version (``SchemaEvolutionError`` / ``InvalidOptionError``: nothing written).
    Conflicts: none. It adds no file and touches no key, so no data write conflicts with it
    either: a write of the older version that commits after it keeps its files' ``schema_id``
    and readers project them (design/schema-evolution.md, "Conflict rules"). Records: the new
    version(s) as the ``schemas`` block, ``CommitMetadata.schema_version``.
    """

    operation: Operation = Operation.ALTER_TABLE
    alterations: tuple[Change, ...]

    def lock_policy(self, *, elsewhere: bool = False) -> LockPolicy:
        return LockPolicy.HELD

    def admit(self, context: TableContext, view: TimelineView) -> None:
        super().admit(context, view)
        self.versions = next_versions(context, view, self.alterations)  # recorded by DataWrite

    def write_files(self, context: TableContext, pending: Pending) -> Written:
        return Written()

    def check(self, context: TableContext, view: TimelineView, pending: Pending, written: Written) -> None:
        """Nothing: the lock was held since admission, so nothing committed in between."""

    def changes(self, context: TableContext, view: TimelineView, pending: Pending,
                written: Written) -> Recorded:
        return Recorded(statuses=[], files=FILES_SCHEMA.empty_table(),
                        stats=column_stats_schema(context.schema).empty_table(), segments=[],
                        deltas_added=[], rows_deleted=0)
