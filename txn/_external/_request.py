"""What an ADD SEGMENT asks for, checked before anything is read: the folder as a URL, the
format, and the ``partition`` option against the table's partition columns.

The option keeps CarbonData's form, ``'day:int, hour:int, type:int'``: every partition column of
the table, in order, with its SQL type. Values (``day=20211123``) are not an option: they come
from the folders below ``path``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from metatxn.timeline import InvalidOptionError

from .._files import EXTERNAL_FORMATS, canonical_url
from ._listing import ListedFile

#: SQL type names of the partition option, as Spark and Hive spell them, and their Arrow types.
_SQL_TYPES: Final[dict[str, pa.DataType]] = {
    "tinyint": pa.int8(), "byte": pa.int8(),
    "smallint": pa.int16(), "short": pa.int16(),
    "int": pa.int32(), "integer": pa.int32(),
    "bigint": pa.int64(), "long": pa.int64(),
    "float": pa.float32(), "real": pa.float32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "string": pa.string(), "varchar": pa.string(),
    "date": pa.date32(),
}
#: One item of the partition option: ``name:type``, the type possibly ``decimal(p, s)``.
_ITEM: Final = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([A-Za-z]+(?:\s*\(\s*\d+\s*(?:,\s*\d+\s*)?\))?)\s*$")
#: Commas that separate items (not the one inside ``decimal(p, s)``).
_SEPARATOR: Final = re.compile(r",(?![^()]*\))")


@dataclass(frozen=True)
class AddRequest:
    """A checked ADD SEGMENT request."""

    #: The folder as a URL (``file:///...`` for a local path), no trailing slash.
    url: str
    format: str
    storage_options: dict[str, Any]


def sql_type_name(data_type: pa.DataType) -> str:
    """How the partition option names ``data_type`` (the first of its SQL spellings)."""
    if pa.types.is_decimal(data_type):
        return f"decimal({data_type.precision},{data_type.scale})"
    if pa.types.is_large_string(data_type):
        return "string"
    if pa.types.is_timestamp(data_type):
        return "timestamp"
    for name, known in _SQL_TYPES.items():
        if known == data_type:
            return name
    return str(data_type)


def _arrow_type(name: str) -> pa.DataType | None:
    text = re.sub(r"\s+", "", name.lower())
    found = re.fullmatch(r"decimal\((\d+),(\d+)\)", text)
    if found:
        return pa.decimal128(int(found.group(1)), int(found.group(2)))
    if text == "timestamp":
        return pa.timestamp("us")
    return _SQL_TYPES.get(text)


def _same_type(given: pa.DataType, table: pa.DataType) -> bool:
    if pa.types.is_timestamp(given) and pa.types.is_timestamp(table):
        return True
    if pa.types.is_string(given) and (pa.types.is_string(table) or pa.types.is_large_string(table)):
        return True
    return bool(given == table)


def check_request(table_uri: str, schema: pa.Schema, partition_by: Sequence[str], path: Any,
                  file_format: Any, partition: Any, storage_options: Any) -> AddRequest:
    """Check the options of an ADD SEGMENT before anything is read.

    Raises:
        InvalidOptionError: a missing or empty path, an unknown format, a ``partition`` option
            on an unpartitioned table, none on a partitioned one, or one that is not the table's
            partition columns in the form ``name:type, ...``.
    """
    url = _url(path)
    check_outside(table_uri, url)
    if not isinstance(file_format, str) or file_format.lower() not in EXTERNAL_FORMATS:
        raise InvalidOptionError(
            f"add_segment format {file_format!r} is not supported; expected one of "
            f"{', '.join(EXTERNAL_FORMATS)}")
    if storage_options is not None and not isinstance(storage_options, dict):
        raise InvalidOptionError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    check_partition_option(schema, partition_by, partition, url)
    return AddRequest(url, file_format.lower(), dict(storage_options or {}))


def check_outside(table_uri: str, url: str) -> None:
    """Refuse a folder inside the table, or one that holds it: the table's own files must not
    become external files (read twice, and deleted by CLEAN FILES under the segment's feet)."""
    table_url = _url(table_uri)
    if url == table_url or url.startswith(table_url + "/") or table_url.startswith(url + "/"):
        where = "holds" if table_url.startswith(url + "/") else "is inside"
        raise InvalidOptionError(
            f"add_segment path {url!r} {where} the table at {table_uri!r}; expected a folder "
            "of existing data apart from the table (the table's own files are its to manage)")


def check_targets(table_uri: str, url: str, files: Sequence[ListedFile],
                  targets: Mapping[str, str]) -> None:
    """Refuse files of the folder at ``url`` that are, once symbolic links are followed
    (``targets``: each file's URL -> the URL of the file it names), a file of the table, the
    same file twice, or no regular file at all (a link to a folder, which the walk did not follow).
    Each would be read twice, or read from under the table's own cleaning."""
    table_url = _url(table_uri)
    seen: dict[str, str] = {}
    for listed in files:
        target = targets[listed.url]
        if target == table_url or target.startswith(table_url + "/"):
            raise InvalidOptionError(
                f"add_segment: {listed.url} links to {target}, inside the table at {table_uri!r}; "
                "expected files of existing data apart from the table (the table's own files are "
                "its to manage); nothing was added")
        if listed.special:
            raise InvalidOptionError(
                f"add_segment: {listed.url} below {url!r} is not a regular file (it names "
                f"{target}: a folder, which the walk does not follow, or nothing); expected the "
                "data files themselves, or add a linked folder on its own; nothing was added")
        if target in seen:
            raise InvalidOptionError(
                f"add_segment: {listed.url} and {seen[target]} below {url!r} are one file, "
                f"{target} (a symbolic link); expected each file once; nothing was added")
        seen[target] = listed.url


def _url(path: Any) -> str:
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path.strip():
        raise InvalidOptionError(f"add_segment needs the path of the folder to add; got {path!r}")
    try:
        return canonical_url(path.strip())
    except (ValueError, ImportError) as exc:  # an unknown protocol, or its library missing
        raise InvalidOptionError(f"add_segment path {path!r} names no filesystem fsspec can open: "
                                 f"{exc}") from None


def check_partition_option(schema: pa.Schema, partition_by: Sequence[str], partition: Any,
                           url: str) -> None:
    """Check the ``partition`` option against the table's partition columns (CarbonData's rule:
    required for a partitioned table, forbidden for another, the same names and types in order)."""
    expected = ",".join(f"{name}:{sql_type_name(schema.field(name).type)}" for name in partition_by)
    if not partition_by:
        if partition is not None:
            raise InvalidOptionError(
                f"invalid option partition={partition!r}: the table is not partitioned; expected "
                "no partition option (the whole folder becomes one segment)")
        return
    if partition is None:
        raise InvalidOptionError(
            f"partition option is required when adding a segment to a partitioned table; expected "
            f"partition={expected!r}, with {url!r} holding folders "
            f"{'/'.join(f'{name}=<value>' for name in partition_by)}")
    if not isinstance(partition, str):
        raise InvalidOptionError(f"invalid partition option {partition!r}: expected a string "
                                 f"like {expected!r}")
    given: list[tuple[str, pa.DataType]] = []
    for item in _SEPARATOR.split(partition):
        found = _ITEM.match(item)
        arrow_type = _arrow_type(found.group(2)) if found else None
        if found is None or arrow_type is None:
            raise InvalidOptionError(
                f"invalid partition option {partition!r}: expected the partition columns with "
                f"their types, 'name:type, ...' ({expected!r} for this table), not values; the "
                "values come from the folder names below the path")
        given.append((found.group(1), arrow_type))
    names = [name for name, _ in given]
    if names != list(partition_by) or not all(
            _same_type(data_type, schema.field(name).type) for name, data_type in given):
        raise InvalidOptionError(
            f"partition option {partition!r} is not the table's partitioning: the table is "
            f"partitioned by {expected!r}, and the option must name the same columns with the "
            "same types, in order")
