"""Partition folder names: a value rendered as Hive and Spark name the folder, and parsed back.

``<column>=<value>``: the column name and the value are escaped as Hive and Spark escape them
(``escape_path_name``: Spark's ``ExternalCatalogUtils.escapePathName``, Hive's
``FileUtils.escapePathName``): control characters, ``"#%'*/:=?\\``, DEL, ``{``, ``[``, ``]`` and
``^`` become ``%XX`` (uppercase hex); everything else, spaces and non-ASCII letters included, is
kept. NUL, which Spark leaves as it is but no filesystem takes in a name, is ``%00``. Null is
the folder ``__HIVE_DEFAULT_PARTITION__``; the string value equal to that name is written
``%5F_HIVE_DEFAULT_PARTITION__`` so it reads back as itself (Spark writes it, and the empty
string, as null; metatxn keeps both apart, the empty string as ``<column>=``). Dates are
``YYYY-MM-DD``.

Reading (``unescape_path_name``) takes every ``%XX``: a run of escapes that is UTF-8 is
decoded as UTF-8 (folders of metatxn before issue 29 and of pyarrow escape non-ASCII text that
way: ``%C3%BC``), any other as one character per byte, as Spark decodes it.

Timestamps are written as Spark writes them, ``YYYY-MM-DD HH:MM:SS[.fraction]`` with the
fraction's trailing zeros dropped and ``:`` escaped (``ts=2026-01-01 10%3A00%3A00``), so every
folder name is valid on Windows and object stores alike. The folder holds the instant's UTC wall
time: a zoned column's zone is part of the column's type, not of its values (two values of one
instant are one partition whatever zone they were given in), so the text carries no offset and
the value read back is the same instant in the column's zone. Spark, with its session time zone
at UTC, names the same folder. The fraction has as many digits as the column's unit needs
(nanoseconds: nine), so a value reads back to the tick. Reading accepts a ``T`` separator and a
trailing ``Z`` or ``+HH:MM`` offset too (folders other writers made, for ADD SEGMENT).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote

import pyarrow as pa

from metatxn.timeline import InvalidOptionError

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: The characters Spark and Hive escape in a folder name (``ExternalCatalogUtils.charToEscape``
#: off Windows), plus NUL, which no filesystem takes in a name.
ESCAPED_CHARACTERS = frozenset(
    [chr(code) for code in range(0x20)] + list("\"#%'*/:=?\\\x7f{[]^"))
_ESCAPES = {ord(c): f"%{ord(c):02X}" for c in ESCAPED_CHARACTERS}
_ESCAPE_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
#: ``surrogateescape``'s stand-ins for bytes that are no UTF-8 -> the character of that code.
_STRAY_BYTES = {0xDC00 + code: code for code in range(0x80, 0x100)}
#: How a string value equal to ``HIVE_NULL`` is written, so that it is not read back as null.
_HIVE_NULL_LITERAL = "%5F" + HIVE_NULL[1:]
#: The longest partition folder name ``<column>=<value>`` (bytes, UTF-8): NAME_MAX of ext4, XFS,
#: btrfs, APFS and tmpfs. Longer names fail on local disk, so they are refused on every backend.
MAX_PARTITION_FOLDER_BYTES = 255

_EPOCH = datetime(1970, 1, 1)
#: Ticks of each Arrow timestamp unit in a second.
_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?)?"
    r"(Z|[+-]\d{2}:?\d{2})?")


def timestamp_text(ticks: int, unit: str) -> str:
    """The folder text (unescaped) of the UTC wall time ``ticks`` ``unit`` after 1970."""
    per_second = _PER_SECOND[unit]
    seconds, fraction = divmod(ticks, per_second)
    text = (_EPOCH + timedelta(seconds=seconds)).isoformat(sep=" ", timespec="seconds")
    if fraction:
        digits = len(str(per_second)) - 1
        text += "." + f"{fraction:0{digits}d}".rstrip("0")
    return text


def timestamp_ticks(text: str, unit: str) -> int:
    """The inverse of :func:`timestamp_text`: ``ValueError`` if ``text`` is not a timestamp, or
    names a finer tick than ``unit`` holds."""
    found = _TIMESTAMP.fullmatch(text.strip())
    if found is None:
        raise ValueError(f"{text!r} is not a timestamp 'YYYY-MM-DD HH:MM:SS[.fraction]'")
    year, month, day, hour, minute, second, fraction, offset = found.groups()
    moment = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0))
    seconds = (moment - _EPOCH) // timedelta(seconds=1)
    if offset and offset != "Z":
        sign = -1 if offset[0] == "-" else 1
        digits = offset[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    per_second = _PER_SECOND[unit]
    nanos = int((fraction or "").ljust(9, "0"))
    ticks, finer = divmod(nanos, 10**9 // per_second)
    if finer:
        raise ValueError(f"{text!r} is finer than a timestamp in {unit} holds")
    return seconds * per_second + ticks


def _datetime_text(value: datetime) -> str:
    # A pandas Timestamp (what pyarrow gives for nanosecond columns) keeps its nanoseconds apart.
    nanos = int(getattr(value, "nanosecond", 0))
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    micros = (value - _EPOCH) // timedelta(microseconds=1)
    return timestamp_text(micros * 1000 + nanos, "ns")


def escape_path_name(text: str) -> str:
    """``text`` with each character Hive and Spark escape in a folder name as ``%XX``."""
    return text.translate(_ESCAPES)


def _decoded(run: re.Match[str]) -> str:
    # Bytes that are no UTF-8 become one character each, as Spark reads every escape.
    return bytes.fromhex(run.group().replace("%", "")).decode(
        errors="surrogateescape").translate(_STRAY_BYTES)


def unescape_path_name(text: str) -> str:
    """The inverse of :func:`escape_path_name`; it also reads UTF-8 escapes (``%C3%BC``)."""
    return _ESCAPE_RUN.sub(_decoded, text) if "%" in text else text


def hive_value(value: object) -> str:
    """Render a partition value as a folder-name component (Hive escaping).

    The inverse is :func:`parse_hive_value` (then the column's type converts the text).
    """
    if value is None:
        return HIVE_NULL
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return escape_path_name(_datetime_text(value))
    if isinstance(value, date):
        return value.isoformat()
    text = escape_path_name(str(value))
    return _HIVE_NULL_LITERAL if text == HIVE_NULL else text


def parse_hive_value(text: str) -> str | None:
    """The value text of a folder-name component written by :func:`hive_value`; None for null."""
    return None if text == HIVE_NULL else unescape_path_name(text)


def hive_folder(column: str, value: object) -> str:
    """``<column>=<value>``, both escaped (no length check: :func:`partition_folder` checks)."""
    return f"{escape_path_name(column)}={hive_value(value)}"


def parse_hive_folder(folder: str, columns: Collection[str] = ()) -> tuple[str, str | None]:
    """The column name and value text (None for null) of a folder ``<column>=<value>``; a
    folder without ``=`` is all name and an empty value (callers check the name).

    ``columns``: the table's partition columns. Before issue 29 column names were written as
    they are, so ``a%41=x`` of such a table is the column ``a%41``: the unescaped name is taken
    if it is one of ``columns``, else the raw name if that is one."""
    name, _, text = folder.partition("=")
    unescaped = unescape_path_name(name)
    if columns and unescaped not in columns and name in columns:
        unescaped = name
    return unescaped, parse_hive_value(text)


def timestamp_value(raw: str, data_type: pa.TimestampType) -> Any:
    """A timestamp folder's text as a value of ``data_type`` (``ValueError`` if it is not one)."""
    ticks = timestamp_ticks(raw, data_type.unit)
    return pa.array([ticks], pa.int64()).cast(data_type)[0].as_py()


def partition_folder(column: str, value: object) -> str:
    """``<column>=<value>``; ``InvalidOptionError`` if longer than a file name may be."""
    folder = hive_folder(column, value)
    try:
        size = len(folder.encode())
    except UnicodeEncodeError:  # a lone surrogate: no file name can hold it
        raise InvalidOptionError(
            f"partition column {column!r} has the value {value!r}, which is not valid Unicode "
            "text; expected text that encodes as UTF-8") from None
    if size > MAX_PARTITION_FOLDER_BYTES:
        shown = str(value)
        shown = shown if len(shown) <= 40 else f"{shown[:40]}... ({len(shown)} characters)"
        raise InvalidOptionError(
            f"partition column {column!r} has the value {shown!r}, whose folder name "
            f"'{column}=<value>' is {size} bytes once escaped; expected at most "
            f"{MAX_PARTITION_FOLDER_BYTES} bytes, the longest file name filesystems allow\n"
            "Help: partition by a shorter column (a prefix, a bucket or a hash of this one)"
        )
    return folder


def legacy_folder(column: str, value: object) -> str | None:
    """``<column>=<value>`` as metatxn named it before issue 29 (the column as it is, the value
    through ``urllib.parse.quote``, ``:`` kept); None if that is no file name either."""
    try:
        if isinstance(value, datetime):
            text = quote(_datetime_text(value), safe=" -.")
        elif value is None or isinstance(value, (bool, date)):
            text = hive_value(value)
        else:
            text = quote(str(value), safe=" -_.,:;@+~")
            text = _HIVE_NULL_LITERAL if text == HIVE_NULL else text
        folder = f"{column}={text}"
        return folder if len(folder.encode()) <= MAX_PARTITION_FOLDER_BYTES else None
    except UnicodeEncodeError:
        return None


def partition_path(columns: Sequence[str], values: Mapping[str, object],
                   existing: Callable[[str], bool] | None = None) -> str:
    """``<column>=<value>/...`` of ``values`` for the partition ``columns``.

    A folder longer than a file name may be is refused (:func:`partition_folder`) unless the
    table already holds that value in the folder metatxn named before issue 29, which fits
    (``existing``: whether a partition path holds files; asked only on this rare path): then
    that folder is kept, so a table written before issue 29 stays writable."""
    folders: list[str] = []
    for column in columns:
        try:
            folders.append(partition_folder(column, values[column]))
        except InvalidOptionError:
            legacy = legacy_folder(column, values[column])
            if existing is None or legacy is None or not existing("/".join([*folders, legacy])):
                raise
            folders.append(legacy)
    return "/".join(folders)
