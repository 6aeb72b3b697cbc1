"""``alter_table``: a schema or table-property change, a commit of its own with no data file.

The new version is worked out under the lock at begin, from the version the latest state holds
then, and written as the instant's ``schemas`` block with its deltacommit: it exists from the
instant's completion on, and a crash at any step before leaves the old version (the block of an
instant that did not complete is never read, and recovery deletes it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from indexes import FILES_SCHEMA, SCHEMAS, MetadataChanges, TableVersion, column_stats_schema
from timeline import Lease, TimelineView

from ..._context import CommitMetadata, TableContext, check_property_change, check_schema, latest_version
from ..._results import Operation
from ..._schema import Change, Shape, apply_changes, schema_changed
from .._protocol import Pending
from ._base import DataWrite, LockPolicy, Recorded, Written


def shape_of(version: TableVersion) -> Shape:
    key = version.record_key
    return Shape(schema=version.schema, partition_by=tuple(version.partition_by),
                 record_key=tuple(key) if isinstance(key, list) else key,
                 sort_by=tuple(version.sort_by), properties=dict(version.properties),
                 last_column_id=version.last_column_id)


def next_versions(context: TableContext, view: TimelineView,
                  changes: Sequence[Change]) -> list[TableVersion]:
    """Under the lock: the version ``changes`` make of the latest one, preceded by version 0
    when the table never stored one (a table from before versions: its first change records
    the ids ``assign_ids`` gave its ``table.json`` schema).

    Raises:
        SchemaEvolutionError, InvalidOptionError: a change refused (nothing is written).
    """
    resolved = context.metadata_at(view, None, (SCHEMAS,))
    current = latest_version(resolved.versions, context.base_version)
    before = shape_of(current)
    after = apply_changes(before, changes)
    check_schema(after.schema)
    properties = check_property_change(dict(before.properties), dict(after.properties))
    number = current.version + 1
    key = after.record_key
    new = TableVersion(
        version=number, schema_id=number if schema_changed(before, after) else current.schema_id,
        arrow_schema=after.schema.serialize().to_pybytes(), properties=properties,
        partition_by=list(after.partition_by),
        record_key=list(key) if isinstance(key, tuple) else key, sort_by=list(after.sort_by),
        last_column_id=after.last_column_id, instant="", changes=[c.describe() for c in changes])
    return ([] if resolved.versions else [current]) + [new]


def stamped(versions: Sequence[TableVersion], instant_time: str) -> list[TableVersion]:
    """``versions`` with the new ones (all but a version 0) naming the instant that made them."""
    return [v if v.version == 0 else msgspec.structs.replace(v, instant=instant_time) for v in versions]


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
    #: Worked out at admission, under the lock.
    versions: list[TableVersion] = field(default_factory=list)

    def lock_policy(self, *, elsewhere: bool = False) -> LockPolicy:
        return LockPolicy.HELD

    def admit(self, context: TableContext, view: TimelineView) -> None:
        super().admit(context, view)
        self.versions = next_versions(context, view, self.alterations)

    def write_files(self, context: TableContext, pending: Pending) -> Written:
        return Written()

    def check(self, context: TableContext, view: TimelineView, pending: Pending, written: Written) -> None:
        """Nothing: the lock was held since admission, so nothing committed in between."""

    def changes(self, context: TableContext, view: TimelineView, pending: Pending,
                written: Written) -> Recorded:
        return Recorded(statuses=[], files=FILES_SCHEMA.empty_table(),
                        stats=column_stats_schema(context.schema).empty_table(), segments=[],
                        deltas_added=[], rows_deleted=0)

    def record(self, context: TableContext, view: TimelineView, pending: Pending, written: Written, *,
               lease: Lease, extra: dict[str, str] | None,
               retries: int) -> tuple[MetadataChanges, CommitMetadata]:
        changes, metadata = super().record(context, view, pending, written, lease=lease,
                                           extra=extra, retries=retries)
        versions = stamped(self.versions, pending.instant.time)
        return (dataclasses.replace(changes, versions=versions),
                msgspec.structs.replace(metadata, schema_version=versions[-1].version))
