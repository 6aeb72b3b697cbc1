"""``table.json``: what a table is, written once when it is created.

The file lives at ``_timeline/table.json`` and is created with put-if-absent, which makes
creating a table atomic and lets exactly one of two racing creators win.
"""

from __future__ import annotations

import msgspec
import pyarrow as pa

from metatxn.timeline import TIMELINE_FOLDER, CorruptMetadataError, Storage

TABLE_CONFIG_PATH = f"{TIMELINE_FOLDER}/table.json"
#: The format new tables are created with, and the newest this version reads. A table keeps the
#: format it was created with (``table.json`` is never rewritten): format 1 tables are written
#: the format-1 way, so processes of earlier versions keep reading them (design/storage.md).
#: 2: a small write is requested started (its plan in its inflight file, no requested file).
FORMAT_VERSION = 2


class ColumnDescription(msgspec.Struct, frozen=True, kw_only=True):
    """A human-readable copy of one column; the Arrow schema bytes are the source of truth."""

    name: str
    type: str
    nullable: bool


class TableConfig(msgspec.Struct, frozen=True, kw_only=True, tag="table", tag_field="kind"):
    """``table.json`` (format versions 1 and 2 alike). New fields get defaults; fields are only
    appended."""

    #: Set at creation (``FORMAT_VERSION``); a file without it is of the first format.
    format_version: int = 1
    table_id: str
    created_at: str
    #: The Arrow schema, IPC-serialised (base64 in JSON).
    arrow_schema: bytes
    columns: list[ColumnDescription]
    partition_by: list[str] = msgspec.field(default_factory=list)
    #: The record key as the user gave it: one column name, a list of names, or None.
    record_key: str | list[str] | None = None
    sort_by: list[str] = msgspec.field(default_factory=list)
    properties: dict[str, str] = msgspec.field(default_factory=dict)
    #: Hash shards of the record-level index, fixed when a keyed table is created (None when the
    #: table has no record key). Fixed because a key's shard must never change.
    record_index_shards: int | None = None

    @property
    def schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.arrow_schema))

    @property
    def record_key_columns(self) -> list[str]:
        if self.record_key is None:
            return []
        return [self.record_key] if isinstance(self.record_key, str) else list(self.record_key)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(TableConfig)


def encode_config(config: TableConfig) -> bytes:
    return _encoder.encode(config)


def describe_schema(schema: pa.Schema) -> list[ColumnDescription]:
    return [ColumnDescription(name=f.name, type=str(f.type), nullable=f.nullable) for f in schema]


def decode_config(data: bytes, *, path: str = TABLE_CONFIG_PATH) -> TableConfig:
    """Decode and check ``table.json``.

    Raises:
        CorruptMetadataError: the bytes are not a table config this version can read.
    """
    expected = f"a JSON table config (kind 'table', format_version <= {FORMAT_VERSION})"
    try:
        config = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise CorruptMetadataError(path, expected, str(exc)) from None
    if config.format_version > FORMAT_VERSION:
        raise CorruptMetadataError(
            path, expected,
            f"format_version {config.format_version}: written by a newer metatxn; upgrade to read it",
        )
    try:
        schema = config.schema
    except (pa.ArrowInvalid, OSError, ValueError) as exc:
        raise CorruptMetadataError(path, "an Arrow IPC schema in 'arrow_schema'", str(exc)) from None
    named = {f.name for f in schema}
    for group, columns in (("partition_by", config.partition_by),
                           ("record_key", config.record_key_columns), ("sort_by", config.sort_by)):
        missing = [c for c in columns if c not in named]
        if missing:
            raise CorruptMetadataError(path, f"{group} columns that exist in the schema",
                                       f"unknown {missing}")
    return config


def read_config(storage: Storage) -> TableConfig:
    return decode_config(storage.read(TABLE_CONFIG_PATH))
