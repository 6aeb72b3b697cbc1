"""Tables: create, open, describe, and read their timeline."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from timeline import (
    Clock,
    CorruptMetadataError,
    Instant,
    ObjectExistsError,
    Storage,
    TableExistsError,
    TableNotFoundError,
    Timeline,
    format_time,
    open_storage,
    system_clock,
)

from ._config import (
    TABLE_CONFIG_PATH,
    TableConfig,
    decode_config,
    describe_schema,
    encode_config,
)
from ._options import check_layout, check_properties, check_schema, timeline_options

#: A source of unique ids (table ids, file ids). Injected so tests are deterministic.
IdFactory = Callable[[], str]


def random_id() -> str:
    return secrets.token_hex(8)


class Table:
    """A metatxn table. Obtain one with :func:`create_table` or :func:`open_table`."""

    def __init__(self, uri: str, storage: Storage, config: TableConfig, *,
                 clock: Clock = system_clock, ids: IdFactory = random_id) -> None:
        self._uri = uri
        self._storage = storage
        self._config = config
        self._clock = clock
        self._ids = ids
        self._schema = config.schema
        self._timeline = Timeline(storage, clock=clock, options=timeline_options(config.properties))

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def partition_by(self) -> list[str]:
        return list(self._config.partition_by)

    @property
    def record_key(self) -> str | list[str] | None:
        """The record key as given at creation: a column name, a list of names, or None."""
        key = self._config.record_key
        return list(key) if isinstance(key, list) else key

    @property
    def record_key_columns(self) -> list[str]:
        return self._config.record_key_columns

    @property
    def sort_by(self) -> list[str]:
        return list(self._config.sort_by)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._config.properties)

    @property
    def table_id(self) -> str:
        return self._config.table_id

    @property
    def created_at(self) -> str:
        """The instant time (17-digit UTC) at which the table was created."""
        return self._config.created_at

    def timeline(self) -> list[Instant]:
        """Every instant of the table, archived and active, by requested time."""
        return self._timeline.history()

    def __repr__(self) -> str:
        return f"txn.Table({self._uri!r})"


def create_table(
    uri: str | os.PathLike[str],
    schema: pa.Schema,
    *,
    partition_by: list[str] | None = None,
    record_key: str | list[str] | None = None,
    sort_by: list[str] | None = None,
    properties: dict[str, str] | None = None,
    storage_options: dict[str, Any] | None = None,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
) -> Table:
    """Create an empty table at ``uri`` and return it.

    Creation is atomic: ``table.json`` is written with put-if-absent, so of two racing creators
    exactly one succeeds.

    Raises:
        TableExistsError: a table is already there.
        InvalidOptionError: the schema, a layout column, a property or the location is not
            acceptable; the message says which and what is expected. Nothing is written.
    """
    checked_schema = check_schema(schema)
    partitions, key, sorts = check_layout(checked_schema, partition_by, record_key, sort_by)
    props = check_properties(properties)
    text = os.fspath(uri)
    storage = open_storage(text, storage_options)
    clock = clock or system_clock
    ids = ids or random_id
    config = TableConfig(
        table_id=ids(),
        created_at=format_time(clock()),
        arrow_schema=checked_schema.serialize().to_pybytes(),
        columns=describe_schema(checked_schema),
        partition_by=partitions,
        record_key=key,
        sort_by=sorts,
        properties=props,
    )
    try:
        storage.put_if_absent(TABLE_CONFIG_PATH, encode_config(config))
    except ObjectExistsError:
        raise TableExistsError(text) from None
    return Table(text, storage, config, clock=clock, ids=ids)


def open_table(
    uri: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
) -> Table:
    """Open the table at ``uri``.

    Raises:
        TableNotFoundError: there is no table there.
        CorruptMetadataError: ``table.json`` cannot be read; the error names the file.
    """
    text = os.fspath(uri)
    storage = open_storage(text, storage_options)
    try:
        data = storage.read(TABLE_CONFIG_PATH)
    except FileNotFoundError:
        raise TableNotFoundError(text, f"{TABLE_CONFIG_PATH} does not exist") from None
    try:
        config = decode_config(data)
    except CorruptMetadataError as exc:
        raise CorruptMetadataError(f"{text.rstrip('/')}/{exc.path}", exc.expected, exc.found) from None
    return Table(text, storage, config, clock=clock or system_clock, ids=ids or random_id)
