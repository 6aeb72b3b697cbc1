"""Validation of what a user passes to ``create_table``: schema, layout columns and properties.

Every check raises :class:`InvalidOptionError` naming the offending value and what was expected,
before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from metatxn.indexes import MetadataOptions
from metatxn.timeline import InvalidOptionError, TimelineOptions

from .._files import stored_type
from ._compaction import (
    AUTO_PROPERTY,
    LEVEL_THRESHOLD_PROPERTY,
    MAJOR_SIZE_PROPERTY,
    MAX_MAJOR_SIZE_MB,
    MAX_PRESERVE,
    PRESERVE_PROPERTY,
    level_counts,
)

# Types a partition value can take: they print as stable, filesystem-safe folder names
# (txn/_files/_hive.py; a timestamp's folder holds its UTC wall time, exact to the tick).
_PARTITION_TYPES = "integers, strings, dates, timestamps or booleans"
# Record keys must compare exactly: no floats (rounding), nested values or nulls-only columns.
_KEY_TYPES = "integers, strings, binary, dates, timestamps, decimals or booleans"


def _is_partition_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_date(t) or pa.types.is_timestamp(t) or pa.types.is_boolean(t))


def _is_key_type(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_binary(t) or pa.types.is_large_binary(t)
                or pa.types.is_fixed_size_binary(t) or pa.types.is_date(t)
                or pa.types.is_timestamp(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t))


def _is_sortable_type(t: pa.DataType) -> bool:
    return not (pa.types.is_nested(t) or pa.types.is_null(t) or pa.types.is_dictionary(t))


def check_schema(schema: object) -> pa.Schema:
    if not isinstance(schema, pa.Schema):
        raise InvalidOptionError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
    if len(schema) == 0:
        raise InvalidOptionError("schema has no columns; expected at least one")
    seen: set[str] = set()
    for field in schema:
        if not field.name:
            raise InvalidOptionError("schema has a column with an empty name")
        if field.name in seen:
            raise InvalidOptionError(f"schema has column {field.name!r} more than once")
        seen.add(field.name)
        _check_storable(field)
    return schema


def _check_storable(field: pa.Field) -> None:
    """Refuse a column whose values Parquet cannot hold and give back as its type."""
    try:
        pa.nulls(0, stored_type(field.type)).cast(field.type)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        instead = ("a duration, or a struct of months, days and nanoseconds"
                   if pa.types.is_interval(field.type) else "a type Parquet stores")
        raise InvalidOptionError(
            f"schema column {field.name!r} is {field.type}, which Parquet cannot store ({exc}); "
            f"expected {instead}") from None


def column_list(option: str, value: object, *, allow_str: bool) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        if allow_str:
            return [value]
        raise InvalidOptionError(f"{option} must be a list of column names, got the string {value!r}")
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise InvalidOptionError(f"{option} must be a list of column names, got {value!r}")
    columns = list(value)
    duplicates = sorted({c for c in columns if columns.count(c) > 1})
    if duplicates:
        raise InvalidOptionError(f"{option} names {duplicates} more than once")
    return columns


def _check_columns(option: str, columns: list[str], schema: pa.Schema,
                   accepts: Callable[[pa.DataType], bool], kinds: str) -> None:
    for name in columns:
        index = schema.get_field_index(name)
        if index < 0:
            raise InvalidOptionError(
                f"{option} names unknown column {name!r}; the schema has {schema.names}"
            )
        column_type = schema.field(index).type
        if not accepts(column_type):
            raise InvalidOptionError(
                f"{option} column {name!r} has type {column_type}; expected {kinds}"
            )


def check_layout(
    schema: pa.Schema, partition_by: object, record_key: object, sort_by: object
) -> tuple[list[str], str | list[str] | None, list[str]]:
    """Validate the layout columns; return (partition_by, record_key as given, sort_by)."""
    partitions = column_list("partition_by", partition_by, allow_str=False)
    keys = column_list("record_key", record_key, allow_str=True)
    sorts = column_list("sort_by", sort_by, allow_str=False)
    if record_key is not None and not keys:
        raise InvalidOptionError("record_key is an empty list; give a column name or leave it None")
    _check_columns("partition_by", partitions, schema, _is_partition_type, _PARTITION_TYPES)
    _check_columns("record_key", keys, schema, _is_key_type, _KEY_TYPES)
    _check_columns("sort_by", sorts, schema, _is_sortable_type, "a primitive (sortable) type")
    if partitions and len(partitions) == len(schema):
        raise InvalidOptionError(
            f"partition_by {partitions} covers every column; at least one column must hold data"
        )
    overlap = sorted(set(partitions) & set(sorts))
    if overlap:
        raise InvalidOptionError(
            f"sort_by names partition columns {overlap}; a file holds one value of each, "
            "so sorting by them does nothing"
        )
    given_key: str | list[str] | None
    given_key = record_key if isinstance(record_key, str) else (keys or None)
    return partitions, given_key, sorts


def _bool(value: str) -> None:
    if value.lower() not in ("true", "false"):
        raise ValueError("expected 'true' or 'false'")


#: ``maintenance.mode``: who runs table services (metadata compaction, its cleaning, archival)
#: after a commit. Never the commit itself: see design/protocol.md, "Table maintenance".
MAINTENANCE_MODES = ("inline", "async", "manual")


def _one_of(choices: tuple[str, ...]) -> Callable[[str], None]:
    def check(value: str) -> None:
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}")
    return check


def maintenance_mode(properties: dict[str, str]) -> str:
    return properties.get("maintenance.mode", "inline")


class _OutOfBounds(ValueError):
    """A well-formed number outside a property's bounds (a stored table may still hold it)."""


class _WholeNumber:
    """A whole number written in ASCII digits, within ``[low, high]`` (both inclusive).

    ``str.isdigit`` also accepts other scripts' digits ("\uff15", "\u0665") and superscripts,
    which ``int`` then reads or refuses; only ``0-9`` are accepted, so a property reads the same
    everywhere it is parsed. The bounds are the range that keeps a table usable (see
    ``design/properties.md``).
    """

    def __init__(self, low: int, high: int, unit: str = "") -> None:
        self.low, self.high, self.unit = low, high, unit

    def __call__(self, value: str) -> None:
        if not (value.isascii() and value.isdigit()) or len(value) > 30:
            raise ValueError(f"expected {self.describe()}, written in the digits 0-9")
        if not self.low <= int(value) <= self.high:
            raise _OutOfBounds(f"expected {self.describe()}")

    def describe(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return f"a whole number from {self.low:,} to {self.high:,}{unit}"


_SECOND_MS, _HOUR_MS, _DAY_MS = 1_000, 3_600_000, 86_400_000

#: Table properties metatxn understands, with how to check their values. Other keys are kept
#: as user properties, as Delta and Hudi keep unknown table properties. Bounds and the reasons
#: for them: design/properties.md.
KNOWN_PROPERTIES: dict[str, tuple[Callable[[str], object], str]] = {
    "streaming": (_bool, "streams (t.stream) may write this table's streaming segments"),
    "streaming.segment.max_size": (
        _WholeNumber(1_024, 1024 ** 4, "bytes"),
        "a streaming segment past this size is finished and the stream opens a new one"),
    "streaming.auto_handoff": (
        _bool, "finished streaming segments become columnar segments after the commit that finished them"),
    "timeline.archive.trigger": (
        _WholeNumber(2, 10_000, "instants"), "archive once this many instants are active"),
    "timeline.archive.retain": (
        _WholeNumber(1, 9_999, "instants"), "completed instants kept active by archival"),
    "timeline.archive.max_files": (
        _WholeNumber(1, 1_000, "files"), "archive files of one level that merge into one"),
    "lock.lease_ms": (
        _WholeNumber(5 * _SECOND_MS, _HOUR_MS, "ms"),
        "table lock lease in milliseconds, renewed every third of it while held: how long a "
        "killed writer can stall the others"),
    "lock.timeout_ms": (
        _WholeNumber(100, _DAY_MS, "ms"), "how long a writer waits for the table lock"),
    "heartbeat.interval_ms": (
        _WholeNumber(_SECOND_MS, 10 * 60 * _SECOND_MS, "ms"), "writer heartbeat interval in milliseconds"),
    "heartbeat.timeout_ms": (
        _WholeNumber(2 * _SECOND_MS, _DAY_MS, "ms"), "silence after which a pending writer is failed"),
    "metadata.compact_after": (
        _WholeNumber(1, 1_000, "commits"), "compact the metadata table after this many commits"),
    "maintenance.mode": (
        _one_of(MAINTENANCE_MODES),
        "table services after a commit: inline (the writer, after releasing the lock), async "
        "(a background thread), manual (only Table.maintain())"),
    "metadata.retain_commits": (
        _WholeNumber(1, 100_000, "commits"), "time travel reaches back at least this many commits"),
    "write.target_file_bytes": (
        _WholeNumber(1_000, 1024 ** 3, "bytes"), "in-memory bytes buffered per data file"),
    "sort.memory_bytes": (_WholeNumber(1_000, 1024 ** 4, "bytes"), "a sorted load spills beyond this"),
    "record_index.shard_max_entries": (
        _WholeNumber(1_024, 10 ** 12, "entries"),
        "a record-index shard splits in two once it holds this many entries"),
    "record_index.shards": (
        _WholeNumber(1, 1_024, "shards"), "hash shards of the record-level index (keyed tables)"),
    "deletes.compaction.threshold": (
        _WholeNumber(1, 1_000, "delete deltas"),
        "merge a data file's delete deltas once it has more than this many"),
    LEVEL_THRESHOLD_PROPERTY: (
        level_counts, "compaction MINOR: level-1 and level-2 segment counts to merge"),
    MAJOR_SIZE_PROPERTY: (
        _WholeNumber(1, MAX_MAJOR_SIZE_MB, "MB"),
        "compaction MAJOR merges segments together under this size"),
    PRESERVE_PROPERTY: (
        _WholeNumber(0, MAX_PRESERVE, "segments"),
        "compaction leaves the latest this many segments alone"),
    AUTO_PROPERTY: (_bool, "a MINOR compaction runs after every load"),
    "clean.retain_commits": (
        _WholeNumber(1, 100_000, "commits"),
        "CLEAN FILES keeps what time travel to this many latest commits needs"),
    "clean.retain_hours": (
        _WholeNumber(0, 87_600, "hours"),
        "CLEAN FILES keeps what time travel this many hours back needs"),
    "changes.retain_commits": (
        _WholeNumber(1, 100_000, "commits"),
        "the change feed (Table.changes) of at least this many latest data commits stays "
        "readable: CLEAN FILES keeps what it needs"),
    "clean.trash_hours": (
        _WholeNumber(0, 87_600, "hours"),
        "CLEAN FILES keeps orphan files (of no segment) in the table's trash this long"),
}

#: Record-index shards when a keyed table does not choose: tens of millions of keys make shards
#: of a few hundred thousand keys each, small enough to rewrite one in a compaction.
DEFAULT_RECORD_INDEX_SHARDS = 1


def shard_max_entries(properties: dict[str, str]) -> int | None:
    """``record_index.shard_max_entries``, if set (else the index's default)."""
    value = properties.get("record_index.shard_max_entries")
    return int(value) if value is not None else None


def record_index_shards(properties: dict[str, str], record_key: object) -> int | None:
    """The shard count a new table records: None without a record key."""
    if record_key is None:
        if "record_index.shards" in properties:
            raise InvalidOptionError(
                "table property record_index.shards applies only to tables with a record_key"
            )
        return None
    return int(properties.get("record_index.shards", DEFAULT_RECORD_INDEX_SHARDS))

_TIMELINE_PROPERTY_FIELDS = {
    "timeline.archive.trigger": "archive_trigger",
    "timeline.archive.retain": "archive_retain",
    "timeline.archive.max_files": "archive_max_files",
    "lock.lease_ms": "lock_lease_ms",
    "lock.timeout_ms": "lock_timeout_ms",
    "heartbeat.interval_ms": "heartbeat_interval_ms",
    "heartbeat.timeout_ms": "heartbeat_timeout_ms",
}


def check_properties(properties: object) -> dict[str, str]:
    if properties is None:
        return {}
    if not isinstance(properties, dict):
        raise InvalidOptionError(f"properties must be a dict of strings, got {type(properties).__name__}")
    checked: dict[str, str] = {}
    for key, value in properties.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidOptionError(
                f"table property {key!r}={value!r}: keys and values must be strings"
            )
        known = KNOWN_PROPERTIES.get(key)
        if known is not None:
            try:
                known[0](value)
            except ValueError as exc:
                raise InvalidOptionError(f"table property {key}={value!r}: {exc}") from None
        checked[key] = value
    _check_together(checked)
    return checked


def stored_property_warnings(properties: dict[str, str]) -> list[str]:
    """What is wrong with the properties of an existing table's ``table.json``.

    A value that cannot be read (not a whole number in the digits 0-9, not a boolean) raises
    InvalidOptionError: the file is damaged. A readable value outside the bounds new tables
    accept (a table created before the bounds, or edited by hand) is returned as a warning
    instead: refusing to open it would lock its owner out of their data.
    """
    warnings: list[str] = []
    for key, value in properties.items():
        known = KNOWN_PROPERTIES.get(key)
        if known is None:
            continue
        check = known[0]
        try:
            check(value)
        except _OutOfBounds as exc:
            warnings.append(f"table property {key}={value!r} is outside the bounds new tables accept: "
                            f"{exc}")
        except ValueError as exc:
            raise InvalidOptionError(f"table property {key}={value!r}: {exc}") from None
    try:
        _check_together(properties)
    except InvalidOptionError as exc:
        warnings.append(str(exc))
    return warnings


def _check_together(properties: dict[str, str]) -> None:
    """Rules between properties, each checked on the values the table would use (given or
    default)."""
    options = timeline_options(properties)  # archive trigger > retain, heartbeat timeout > interval
    if options.heartbeat_timeout_ms < 2 * options.heartbeat_interval_ms:
        raise InvalidOptionError(
            f"table properties heartbeat.timeout_ms={options.heartbeat_timeout_ms} and "
            f"heartbeat.interval_ms={options.heartbeat_interval_ms}: the timeout must be at least "
            "twice the interval, or one late heartbeat fails a live writer")


def metadata_options(properties: dict[str, str]) -> MetadataOptions:
    """The metadata-table options a table's properties select."""
    overrides: dict[str, Any] = {
        field: int(properties[key]) for key, field in (
            ("metadata.compact_after", "compact_after"), ("metadata.retain_commits", "retain_commits"))
        if key in properties
    }
    return MetadataOptions(**overrides)


@dataclass(frozen=True)
class CleanOptions:
    """What CLEAN FILES keeps (table properties ``clean.*``, design/properties.md)."""

    #: Time travel to the last this many data commits keeps working.
    retain_commits: int = 10
    #: Time travel to any moment of the last this many hours keeps working (Delta: 7 days).
    retain_hours: int = 168
    #: Files moved to ``_trash/`` are deleted for good by a clean this long after.
    trash_hours: int = 24


def clean_options(properties: dict[str, str]) -> CleanOptions:
    """The CLEAN FILES options a table's properties select."""
    defaults = CleanOptions()
    return CleanOptions(
        # A feed of the last N commits starts after the (N+1)-th: it reads the files live then.
        retain_commits=max(int(properties.get("clean.retain_commits", defaults.retain_commits)),
                           int(properties.get("changes.retain_commits", -1)) + 1),
        retain_hours=int(properties.get("clean.retain_hours", defaults.retain_hours)),
        trash_hours=int(properties.get("clean.trash_hours", defaults.trash_hours)),
    )


def streaming_enabled(properties: dict[str, str]) -> bool:
    return properties.get("streaming", "false").lower() == "true"


def streaming_max_bytes(properties: dict[str, str]) -> int:
    """``streaming.segment.max_size``: a streaming segment past it is finished (default 1 GiB)."""
    return int(properties.get("streaming.segment.max_size", str(1024 ** 3)))


def streaming_auto_handoff(properties: dict[str, str]) -> bool:
    return properties.get("streaming.auto_handoff", "true").lower() == "true"


def delete_compaction_threshold(properties: dict[str, str]) -> int:
    """Horizontal compaction: a data file may keep at most this many delete deltas."""
    return int(properties.get("deletes.compaction.threshold", "1"))


def target_file_bytes(properties: dict[str, str]) -> int:
    return int(properties.get("write.target_file_bytes", str(128 * 1024 * 1024)))


def timeline_options(properties: dict[str, str]) -> TimelineOptions:
    """The timeline options a table's properties select."""
    overrides: dict[str, Any] = {
        field: int(properties[key]) for key, field in _TIMELINE_PROPERTY_FIELDS.items()
        if key in properties
    }
    return TimelineOptions(**overrides)


#: Properties fixed when a table is created: a change would misplace what is already stored.
FIXED_PROPERTIES: Final = {
    "record_index.shards": "a record key's shard must never change (the index would lose it)",
}


def check_property_change(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """Check ``after``, a table's properties once a change commits, against the bounds and
    against ``before``: a handle that has not refreshed still judges with the old values.

    Raises:
        InvalidOptionError: naming the property and the rule.
    """
    checked = check_properties(after)
    for key, why in FIXED_PROPERTIES.items():
        if before.get(key) != after.get(key):
            raise InvalidOptionError(f"table property {key} is fixed when the table is created: {why}")
    # Handles that have not refreshed, and heartbeats already beating, keep the old values: a
    # handle with the old timeout must not roll back a writer beating at the new interval, nor
    # one with the new timeout a writer still beating at the old interval.
    old, new = timeline_options(before), timeline_options(after)
    if old.heartbeat_timeout_ms < 2 * new.heartbeat_interval_ms:
        raise InvalidOptionError(
            f"table property heartbeat.interval_ms={new.heartbeat_interval_ms}: handles that "
            f"have not refreshed still use heartbeat.timeout_ms={old.heartbeat_timeout_ms}, which "
            "must be at least twice the interval; raise the timeout in an earlier change")
    if new.heartbeat_timeout_ms < 2 * old.heartbeat_interval_ms:
        raise InvalidOptionError(
            f"table property heartbeat.timeout_ms={new.heartbeat_timeout_ms}: writers running now "
            f"beat every heartbeat.interval_ms={old.heartbeat_interval_ms}, and the timeout must be "
            "at least twice that; lower the interval in an earlier change")
    return checked
