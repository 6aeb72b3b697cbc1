"""Writes that create a table version: ``alter_table``, and data writes with
``schema_mode="merge"``.

The new version is worked out under the lock at begin from the latest one (``next_versions``),
written as the instant's ``schemas`` block with its deltacommit (``with_versions``): it exists
from the instant's completion on, and a crash at any step before leaves the old version.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import pyarrow as pa

from metatxn.indexes import SCHEMAS, MetadataChanges, TableVersion
from metatxn.timeline import SchemaChangedError, TimelineView

from ..._context import CommitMetadata, TableContext, check_property_change, check_schema, latest_version
from ..._schema import Change, Shape, apply_changes, schema_changed


def shape_of(version: TableVersion) -> Shape:
    key = version.record_key
    return Shape(schema=version.schema, partition_by=tuple(version.partition_by),
                 record_key=tuple(key) if isinstance(key, list) else key,
                 sort_by=tuple(version.sort_by), properties=dict(version.properties),
                 last_column_id=version.last_column_id)


def current_version(context: TableContext,
                    view: TimelineView) -> tuple[TableVersion, dict[int, TableVersion]]:
    """The latest version of ``view`` and every stored one (empty: the table never stored one)."""
    resolved = context.metadata_at(view, None, (SCHEMAS,))
    versions = dict(resolved.versions or {})
    return latest_version(versions, context.base_version), versions


def next_versions(context: TableContext, view: TimelineView,
                  changes: Sequence[Change]) -> list[TableVersion]:
    """Under the lock: the version ``changes`` make of the latest one, preceded by version 0
    when the table never stored one (a table from before versions: its first change records
    the ids ``assign_ids`` gave its ``table.json`` schema).

    Raises:
        SchemaEvolutionError, InvalidOptionError: a change refused (nothing is written).
    """
    current, stored = current_version(context, view)
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
    return ([] if stored else [current]) + [new]


def stamped(versions: Sequence[TableVersion], instant_time: str) -> list[TableVersion]:
    """``versions`` with the new ones (all but a version 0) naming the instant that made them."""
    return [v if v.version == 0 else msgspec.structs.replace(v, instant=instant_time) for v in versions]


def with_versions(changes: MetadataChanges, metadata: CommitMetadata, versions: Sequence[TableVersion],
                  instant_time: str) -> tuple[MetadataChanges, CommitMetadata]:
    """The record of an instant that creates ``versions``: its ``schemas`` block and
    ``CommitMetadata.schema_version`` (unchanged when it creates none)."""
    if not versions:
        return changes, metadata
    done = stamped(versions, instant_time)
    return (dataclasses.replace(changes, versions=done),
            msgspec.structs.replace(metadata, schema_version=done[-1].version))


@dataclass(frozen=True)
class WriteSchema:
    """The schema a data write conformed its rows to, captured when it was planned: its files
    are written with it (and record ``schema_id``) whatever version the handle adopts while it
    runs, so a write of the older version committing after an ``alter_table`` stays readable.

    With ``schema_mode="merge"``, ``changes`` make a new version of version ``base`` (the
    latest when it was planned); ``schema`` and ``schema_id`` are then that new version's, which
    the write creates in its own instant (worked out again under the lock at begin).
    """

    schema: pa.Schema
    schema_id: int
    changes: tuple[Change, ...] = ()
    base: int | None = None


def current_schema(context: TableContext) -> WriteSchema:
    """The handle's current schema, as a write planned now conforms to it."""
    schema_id = context.schema_id
    return WriteSchema(context.schema_of(schema_id), schema_id)


def evolved_schema(version: TableVersion, changes: Sequence[Change]) -> WriteSchema:
    """The schema ``changes`` (a merge's, none refused) make of ``version``.

    Raises:
        SchemaEvolutionError: a change refused (a record-key or partition column widened).
    """
    if not changes:
        return WriteSchema(version.schema, version.schema_id)
    after = apply_changes(shape_of(version), changes)
    check_schema(after.schema)
    return WriteSchema(after.schema, version.version + 1, tuple(changes), version.version)


def admit_versions(context: TableContext, view: TimelineView, schema: WriteSchema) -> list[TableVersion]:
    """Under the lock at begin: the versions a merge write creates (none for any other).

    Raises:
        SchemaChangedError: a version completed since the write was planned (its rows were
            conformed to the older one); planned again when the write path retries.
    """
    if not schema.changes:
        return []
    versions = next_versions(context, view, schema.changes)
    if versions[-1].version - 1 != schema.base:
        current, _ = current_version(context, view)
        raise SchemaChangedError(
            f"schema_mode='merge': table version {current.version} (instant {current.instant}) "
            f"completed after this write was planned on version {schema.base}; nothing was written\n"
            "Help: retry the write; it merges into the new version")
    return versions


def check_versions(context: TableContext, view: TimelineView, versions: Sequence[TableVersion],
                   instant_time: str) -> None:
    """Under the lock at commit: a write creating ``versions`` loses to any version completed
    since it began (another ``alter_table`` or merge write), whose ids could clash with its own.

    Raises:
        SchemaChangedError: naming the concurrent instant(s); nothing is written.
    """
    if not versions:
        return
    base = versions[-1].version - 1
    _, stored = current_version(context, view)
    since = sorted((v for v in stored.values() if v.version > base), key=lambda v: v.version)
    if since:
        instants = [v.instant for v in since]
        raise SchemaChangedError(
            f"{instant_time} would create table version {base + 1}, but instant(s) {instants} "
            f"created version(s) {[v.version for v in since]} after it began; nothing was written\n"
            "Help: retry the write; it merges into the new version")
