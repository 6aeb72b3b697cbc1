"""Creating and opening a table's context: ``table.json``, its checks, and the location."""

from __future__ import annotations

import logging
import os
from typing import Any

import pyarrow as pa

from metatxn.timeline import (
    Clock,
    CorruptMetadataError,
    InvalidOptionError,
    LocalStorage,
    ObjectExistsError,
    Storage,
    TableExistsError,
    TableNotFoundError,
    format_time,
    open_storage,
    system_clock,
)

from ._config import (
    FORMAT_VERSION,
    TABLE_CONFIG_PATH,
    TableConfig,
    decode_config,
    describe_schema,
    encode_config,
)
from ._options import (
    check_layout,
    check_properties,
    check_schema,
    record_index_shards,
    stored_property_warnings,
)
from ._staged import StagedCreate
from ._table_context import IdFactory, TableContext, random_id

log = logging.getLogger("metatxn")


def create_context(
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
    staged: bool = False,
) -> TableContext:
    """Create an empty table at ``uri`` (see :func:`txn.create_table`).

    ``staged``: write nothing now; ``table.json`` is put with the table's first commit
    (:class:`StagedCreate`), so the table appears with that commit and not before.
    """
    text = _location(uri, "create_table")
    checked_schema = check_schema(schema)
    partitions, key, sorts = check_layout(checked_schema, partition_by, record_key, sort_by)
    props = check_properties(properties)
    storage = open_storage(text, storage_options)
    _check_new_location(storage, text)
    clock = clock or system_clock
    ids = ids or random_id
    config = TableConfig(
        format_version=FORMAT_VERSION,
        table_id=ids(),
        created_at=format_time(clock()),
        arrow_schema=checked_schema.serialize().to_pybytes(),
        columns=describe_schema(checked_schema),
        partition_by=partitions,
        record_key=key,
        sort_by=sorts,
        properties=props,
        record_index_shards=record_index_shards(props, key),
    )
    # Built before table.json is written: whatever it refuses leaves nothing on storage.
    context = TableContext(text, storage, config, clock=clock, ids=ids,
                           storage_options=storage_options)
    if staged:
        context.staged = StagedCreate(storage, text, encode_config(config))
        context.staged.check()
        return context
    try:
        storage.put_if_absent(TABLE_CONFIG_PATH, encode_config(config))
    except ObjectExistsError:
        raise TableExistsError(text) from None
    return context


def open_context(
    uri: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
) -> TableContext:
    """Open the table at ``uri`` (see :func:`txn.open_table`)."""
    text = _location(uri, "open_table")
    storage = open_storage(text, storage_options)
    try:
        data = storage.read(TABLE_CONFIG_PATH)
    except FileNotFoundError:
        raise TableNotFoundError(text, f"{TABLE_CONFIG_PATH} does not exist") from None
    config_path = f"{text.rstrip('/')}/{TABLE_CONFIG_PATH}"
    try:
        config = decode_config(data)
    except CorruptMetadataError as exc:
        raise CorruptMetadataError(f"{text.rstrip('/')}/{exc.path}", exc.expected, exc.found) from None
    try:  # table.json damaged, or made before the bounds of design/properties.md
        for warning in stored_property_warnings(config.properties):
            log.warning("%s: %s (see design/properties.md)", config_path, warning)
    except InvalidOptionError as exc:
        raise CorruptMetadataError(config_path, "table properties metatxn can read (see "
                                   "design/properties.md)", str(exc)) from None
    return TableContext(text, storage, config, clock=clock or system_clock, ids=ids or random_id,
                        storage_options=storage_options)


def _location(uri: object, function: str) -> str:
    """The table location as text; anything but a non-empty str or path is InvalidOptionError."""
    text = os.fspath(uri) if isinstance(uri, os.PathLike) else uri
    if not isinstance(text, str) or not text:
        raise InvalidOptionError(
            f"{function}: the table location must be a non-empty path or URL (a str or "
            f"os.PathLike), got {uri!r} ({type(uri).__name__})")
    return text


def _check_new_location(storage: Storage, text: str) -> None:
    """A local table goes in a folder: refuse a location that is a file or lies below one."""
    if not isinstance(storage, LocalStorage):
        return
    path = storage.root
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        where = "is a file" if path == storage.root else f"lies below the file {str(path)!r}"
        raise InvalidOptionError(
            f"table location {text!r} {where}; expected a folder, or a path that does not exist yet")
