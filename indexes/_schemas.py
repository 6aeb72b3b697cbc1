"""Table versions: the schema, layout and properties of each version of a table, as the
``schemas`` partition stores them.

A version is written once, by the instant that creates it, under the table lock (a schema or
property change, or a write with ``schema_mode="merge"``), and never changes, is never
tombstoned and never cleaned: a base at any horizon holds every version up to it, so time travel
to any retained snapshot finds its version. Version 0 is ``table.json``'s and is implicit until
the first change writes it explicitly (with ids assigned).

Stored one row per version: the key ``version`` (int64) and ``record``, the version as msgspec
JSON (binary). A record is a small document read whole, so a JSON blob keeps the format free to
grow (msgspec ignores unknown fields) without an Arrow column per field. Merging keeps one record
per version; two different records of one version cannot come from a correct writer and are
reported as corruption.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

import msgspec
import pyarrow as pa

from metatxn.timeline import CorruptMetadataError

from ._blocks import decoding

SCHEMAS_SCHEMA: Final = pa.schema([
    ("version", pa.int64()),
    #: The ``TableVersion`` as msgspec JSON.
    ("record", pa.binary()),
])


class TableVersion(msgspec.Struct, frozen=True, kw_only=True):
    """One version of a table: its schema (with column ids), layout and properties."""

    #: 0 for ``table.json``'s version, then 1, 2, ... one per change.
    version: int
    #: The version that introduced this schema: a property-only version keeps its predecessor's.
    schema_id: int
    #: The Arrow schema, IPC-serialized, with column ids in its field metadata.
    arrow_schema: bytes
    properties: dict[str, str] = msgspec.field(default_factory=dict)
    #: Names as of this version.
    partition_by: list[str] = msgspec.field(default_factory=list)
    record_key: str | list[str] | None = None
    sort_by: list[str] = msgspec.field(default_factory=list)
    #: The largest column id ever assigned, up to this version (ids are never reused).
    last_column_id: int = 0
    #: The instant that created this version ("" for version 0).
    instant: str = ""
    #: What changed, one human-readable line each ("add column discount decimal128(15, 2)").
    changes: list[str] = msgspec.field(default_factory=list)

    @property
    def schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.arrow_schema))


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(TableVersion)


def versions_to_arrow(versions: Iterable[TableVersion]) -> pa.Table:
    """Rows of ``versions``, sorted by version."""
    ordered = sorted(versions, key=lambda v: v.version)
    return pa.table({"version": pa.array([v.version for v in ordered], pa.int64()),
                     "record": pa.array([_encoder.encode(v) for v in ordered], pa.binary())},
                    schema=SCHEMAS_SCHEMA)


def versions_from_arrow(table: pa.Table, path: str) -> list[TableVersion]:
    """Decode the rows of a block or base read from ``path``.

    Raises:
        CorruptMetadataError: a record does not decode, or its version differs from its key.
    """
    expected = "table version records (msgspec JSON of TableVersion keyed by version)"
    with decoding(path, expected):
        versions = []
        for key, record in zip(table["version"].to_pylist(), table["record"].to_pylist(),
                               strict=True):
            version = _decoder.decode(record)
            if version.version != key:
                raise ValueError(f"the record of version {key} says version {version.version}")
            version.schema  # noqa: B018  (the schema must decode too)
            versions.append(version)
        return versions


def merge_versions(versions: Iterable[TableVersion], path: str,
                   into: dict[int, TableVersion] | None = None) -> dict[int, TableVersion]:
    """Merge records into ``into`` (a fresh dict if None): one per version.

    Raises:
        CorruptMetadataError: two different records of one version (``path``: where the second
            was read).
    """
    merged = {} if into is None else into
    for version in versions:
        held = merged.get(version.version)
        if held is None:
            merged[version.version] = version
        elif held != version:
            raise CorruptMetadataError(
                path, f"one record of table version {version.version} (a version is written "
                "once)", "two different records of it")
    return merged


def latest(versions: Mapping[int, TableVersion] | None) -> TableVersion | None:
    """The highest version, None if there is none."""
    if not versions:
        return None
    return versions[max(versions)]
