"""Reading what ADD SEGMENT records of each external file: its schema (checked against its
siblings' and the table's), row count and column statistics, and (keyed tables) its keys.

Parquet and ORC answer from their footers: no data page is read. CSV and JSON have no footer,
so each file is scanned once, with a progress bar on a terminal when the scan is long.
"""

from __future__ import annotations

import datetime
import decimal
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain
from typing import Any, Final

import pyarrow as pa
import pyarrow.orc as porc
import pyarrow.parquet as pq

from metatxn.timeline import (
    CorruptMetadataError,
    InvalidOptionError,
    ObjectNotFoundError,
    SchemaMismatchError,
)

from .._context import progress
from .._files import (
    ColumnStats,
    ExternalReader,
    FileStatus,
    OrcFooterUnreadable,
    column_stats,
    csv_escaped_quotes,
    expected,
    file_schema,
    footer_stats,
    hive_value,
    json_keys_present,
    orc_footer_stats,
    parse_hive_value,
    partition_values,
    reading_file,
)
from ._listing import ListedFile, PartitionFolder

#: CSV and JSON scans longer than this many bytes in all show a progress bar on a terminal.
PROGRESS_BYTES: Final = 64 * 1024 * 1024
_FOOTER_THREADS: Final = 8


@dataclass(frozen=True)
class Inspected:
    """One external file as the commit records it, and its keys (keyed tables), in file order."""

    status: FileStatus
    keys: pa.Table | None


def compatible(found: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a file column of type ``found`` reads as the table's ``wanted`` without loss of
    meaning (Spark and Hive spell some types differently: large strings, INT96 timestamps)."""
    if pa.types.is_dictionary(found):
        found = found.value_type
    if found == wanted:
        return True
    strings = (pa.types.is_string, pa.types.is_large_string, pa.types.is_string_view)
    if any(f(found) for f in strings) and any(f(wanted) for f in strings):
        return True
    binaries = (pa.types.is_binary, pa.types.is_large_binary, pa.types.is_binary_view)
    if any(f(found) for f in binaries) and any(f(wanted) for f in binaries):
        return True
    return bool(pa.types.is_timestamp(found) and pa.types.is_timestamp(wanted))


def check_columns(url: str, found: pa.Schema, stored: pa.Schema) -> None:
    """Raise :class:`SchemaMismatchError` unless file ``url`` with schema ``found`` holds every
    column of ``stored`` (the table's columns less its partition columns) with its type. Extra
    columns are allowed, as CarbonData allows them."""
    for field in stored:
        index = found.get_field_index(field.name)
        if index < 0:
            raise SchemaMismatchError(
                f"add_segment: column {field.name!r} ({field.type}) of the table is missing from "
                f"{url}; the file's columns: {found.names[:20]}; nothing was added")
        kind = found.field(index).type
        if not compatible(kind, field.type):
            raise SchemaMismatchError(
                f"add_segment: column {field.name!r} is {kind} in {url} where the table's is "
                f"{field.type}; nothing was added")


class Inspector:
    """Inspects the files of one ADD SEGMENT."""

    def __init__(self, reader: ExternalReader, file_format: str, key_columns: Sequence[str], *,
                 schema: pa.Schema | None = None, partition_by: Sequence[str] | None = None,
                 schema_id: int = 0) -> None:
        """``schema``, ``partition_by``: the table's current version (the reader's by default),
        which the folder is checked against by name and its files recorded under
        (``schema_id``)."""
        self.reader = reader
        self.format = file_format
        self.schema = reader.schema if schema is None else schema
        self.partition_by = reader.partition_by if partition_by is None else list(partition_by)
        self.schema_id = schema_id
        self.stored = file_schema(self.schema, self.partition_by)
        self.key_columns = list(key_columns)
        self._reference: tuple[str, pa.Schema] | None = None

    def inspect(self, folders: Sequence[PartitionFolder]) -> list[list[Inspected]]:
        """Every file of ``folders``, per folder, in order. Nothing is written.

        Raises:
            SchemaMismatchError: a file lacks a table column or holds it with another type, or
                its schema differs from its siblings' (the file is named).
            InvalidOptionError: a file is not of the format given.
        """
        jobs = [(folder.partition, listed) for folder in folders for listed in folder.files]
        if self.format in ("parquet", "orc"):
            # The first file (in listing order) is the reference its siblings are compared with.
            first = self._footer(*jobs[0])
            with ThreadPoolExecutor(min(_FOOTER_THREADS, len(jobs))) as pool:
                rest = pool.map(lambda job: self._footer(*job), jobs[1:])
                done = list(progress("reading file footers", chain([first], rest), len(jobs)))
        else:
            done = self._scan_all(jobs)
        result: list[list[Inspected]] = []
        position = 0
        for folder in folders:
            result.append(done[position:position + len(folder.files)])
            position += len(folder.files)
        return result

    # -- footers ---------------------------------------------------------------------------------

    def _footer(self, partition: str, listed: ListedFile) -> Inspected:
        # Keys held in the file are read through the same open file: one footer read per file.
        in_file = bool(self.key_columns) and not set(self.key_columns) & set(self.partition_by)
        keys = None
        with self._reading(listed.url), self.reader.open(listed.url) as handle:
            if self.format == "parquet":
                parquet = pq.ParquetFile(handle)
                self._check(listed.url, parquet.schema_arrow)
                self._check_nanoseconds(listed.url, parquet)
                self._check_whole_units(listed.url, parquet)
                rows = parquet.metadata.num_rows
                stats = footer_stats(parquet.metadata, self.stored)
                if in_file:
                    keys = parquet.read(columns=self.key_columns, use_threads=False)
            else:
                orc = porc.ORCFile(handle)
                self._check(listed.url, orc.schema)
                rows, stats = self._orc_stats(handle, listed)
                if in_file:
                    keys = orc.read(columns=self.key_columns)
            if keys is not None:  # nullable: a null key is check_not_null's to name
                keys = keys.cast(pa.schema([self.schema.field(c).with_nullable(True)
                                            for c in self.key_columns]))
        return self._finish(partition, listed, rows, stats, keys=keys)

    def _orc_stats(self, handle: Any, listed: ListedFile) -> tuple[int, dict[str, ColumnStats]]:
        try:
            return orc_footer_stats(handle, listed.size, self.stored)
        except OrcFooterUnreadable:
            table = self.reader.read(listed.url, "orc", self.stored.names,  # one scan instead
                                     schema=self.schema)
            return table.num_rows, column_stats(table)

    def _check(self, url: str, found: pa.Schema) -> None:
        check_columns(url, found, self.stored)
        if self._reference is None:
            self._reference = (url, found)
            return
        sibling, reference = self._reference
        if not found.equals(reference):
            differences = [f"{f.name}: {f.type}" for f in found if reference.get_field_index(f.name) < 0
                           or reference.field(f.name).type != f.type]
            missing = [name for name in reference.names if found.get_field_index(name) < 0]
            raise SchemaMismatchError(
                f"add_segment: {url} has a schema that differs from its sibling {sibling}"
                f"{'; columns of its own: ' + ', '.join(differences) if differences else ''}"
                f"{'; columns it lacks: ' + ', '.join(missing) if missing else ''}; "
                "expected every file of the folder to share one schema; nothing was added")

    # -- scans (CSV, JSON) ---------------------------------------------------------------------

    def _scan_all(self, jobs: list[tuple[str, ListedFile]]) -> list[Inspected]:
        total = sum(listed.size for _, listed in jobs)
        present: set[str] = set()
        with _progress(total, f"scanning {len(jobs)} {self.format} file(s)") as advance:
            done = []
            for partition, listed in jobs:
                done.append(self._scan(partition, listed, present))
                advance(listed.size)
        missing = [name for name in self.stored.names if name not in present]
        if self.format == "json" and missing:
            raise SchemaMismatchError(
                f"add_segment: column(s) {missing} of the table appear in no object of the JSON "
                "files below the path; expected every table column (less partition columns) as a "
                "key of some object (a null may be left out, as Spark leaves it); nothing was added")
        return done

    def _scan(self, partition: str, listed: ListedFile, present: set[str]) -> Inspected:
        with self._reading(listed.url):
            with self.reader.open(listed.url) as handle:
                data = handle.read()
            if self.format == "json":
                present |= json_keys_present(data, self.stored.names)
            if self.format == "csv" and csv_escaped_quotes(data):
                raise InvalidOptionError(
                    f"add_segment: {listed.url} escapes quotes with a backslash (\\\" inside a "
                    "quoted field, Spark's default CSV writer); expected RFC 4180 CSV, where a quote "
                    "inside a quoted field is doubled (\"\"): write it with "
                    "option('escape', '\"'); nothing was added")
            table = self.reader.read(listed.url, self.format, self.stored.names, data=data,
                                     schema=self.schema)
        return self._finish(partition, listed, table.num_rows, column_stats(table),
                            keys=table.select(self.key_columns) if self.key_columns and not any(
                                c in self.partition_by for c in self.key_columns) else None)

    # -- both --------------------------------------------------------------------------------------

    def _finish(self, partition: str, listed: ListedFile, rows: int, stats: dict[str, ColumnStats],
                keys: pa.Table | None = None) -> Inspected:
        self._check_not_null(listed, stats)
        stats = {name: _plain_range(stat) for name, stat in stats.items()}
        values = partition_values(listed.url, self.schema, self.partition_by)
        for name, value in values.items():
            # Through column_stats: a nanosecond timestamp's bounds become plain microseconds.
            bound = column_stats(pa.table({name: pa.array([value], self.schema.field(name).type)}))[name]
            stats[name] = ColumnStats(min=bound.min, max=bound.max, nulls=0 if value is not None else rows,
                                      count=rows)
        # A timestamp is recorded as its folder's text, exact (as the writer records it).
        values = {name: parse_hive_value(hive_value(value)) if isinstance(value, datetime.datetime) else value
                  for name, value in values.items()}
        if self.key_columns and keys is None:
            with self._reading(listed.url):
                keys = self.reader.read(listed.url, self.format, self.key_columns,
                                        schema=self.schema)
        status = FileStatus(path=listed.url, partition=partition, rows=rows, size=listed.size,
                            stats=stats, partition_values=values, format=self.format,
                            modified_ms=listed.modified_ms, version=listed.version,
                            schema_id=self.schema_id)
        return Inspected(status, keys)

    def _check_nanoseconds(self, url: str, parquet: pq.ParquetFile) -> None:
        """Nanosecond timestamps stored as INT64 are not Spark's to read as a timestamp column
        (INT96, Spark's own default, reads as nanoseconds in pyarrow and is fine)."""
        leaves = {parquet.metadata.schema.column(i).path: i
                  for i in range(parquet.metadata.num_columns)}
        for field in self.stored:
            found = parquet.schema_arrow.field(field.name).type
            if not (pa.types.is_timestamp(found) and found.unit == "ns"
                    and pa.types.is_timestamp(field.type) and field.type.unit != "ns"):
                continue
            leaf = leaves.get(field.name)
            if leaf is not None and parquet.metadata.schema.column(leaf).physical_type == "INT64":
                raise SchemaMismatchError(
                    f"add_segment: column {field.name!r} of {url} holds nanosecond timestamps "
                    f"(Parquet INT64 TIMESTAMP(NANOS)) where the table's is {field.type}; Spark "
                    "cannot read them as such; expected microsecond (or INT96) timestamps; "
                    "nothing was added")

    def _check_whole_units(self, url: str, parquet: pq.ParquetFile) -> None:
        """A seconds or milliseconds column must get whole ones: its values would otherwise be
        truncated by this process's reads and kept by Spark's (microseconds), so the two would
        disagree. Reads those columns only, and only where the file's unit is finer."""
        units = ("s", "ms", "us", "ns")
        for field in self.stored:
            found = parquet.schema_arrow.field(field.name).type
            if not (pa.types.is_timestamp(found) and pa.types.is_timestamp(field.type)
                    and field.type.unit in ("s", "ms")
                    and units.index(found.unit) > units.index(field.type.unit)):
                continue
            column = parquet.read(columns=[field.name], use_threads=False).column(0)
            try:
                column.cast(field.type, safe=True)
            except pa.ArrowInvalid:
                raise SchemaMismatchError(
                    f"add_segment: column {field.name!r} of {url} holds {found} values that are "
                    f"not whole {field.type.unit} where the table's is {field.type}; expected "
                    "values that fit the table's type (they would be truncated); nothing was "
                    "added") from None

    def _check_not_null(self, listed: ListedFile, stats: dict[str, ColumnStats]) -> None:
        """A non-nullable column must hold no null: the footer's null count says so, or (no
        count there) a read of the column."""
        for field in self.stored:
            if field.nullable:
                continue
            known = stats.get(field.name)
            if known is None:
                with self._reading(listed.url):
                    self.reader.read(listed.url, self.format, [field.name])
                continue  # the read checked it (the reader refuses nulls in such a column)
            if known.nulls:
                raise SchemaMismatchError(
                    f"add_segment: {listed.url}: column {field.name!r} holds {known.nulls} "
                    "null(s), where the table's column is not nullable; nothing was added")

    def _reading(self, url: str) -> Any:
        return _ReadingExternal(url, self.format)


#: Python types a statistic may have (what the metadata table's records encode).
_PLAIN = (bool, int, float, str, bytes, datetime.date, datetime.datetime, decimal.Decimal)


def _plain_range(stat: ColumnStats) -> ColumnStats:
    """``stat`` with its range unknown if a bound is not a plain value (a footer of an exotic
    type): an unknown range never prunes, a value the records cannot hold fails the commit."""
    if all(bound is None or isinstance(bound, _PLAIN) for bound in (stat.min, stat.max)):
        return stat
    return ColumnStats(min=None, max=None, nulls=stat.nulls, count=stat.count)


class _ReadingExternal:
    """Turns a failure to read an external file into an error naming it: a file that is not of
    the given format (or whose values do not fit the table's types) is the user's input, so it
    is a ``SchemaMismatchError`` or ``InvalidOptionError``, not damage to the table."""

    def __init__(self, url: str, file_format: str) -> None:
        self._inner = reading_file(url, expected(file_format))
        self.url = url
        self.format = file_format

    def __enter__(self) -> None:
        self._inner.__enter__()

    def __exit__(self, kind: Any, error: BaseException | None, trace: Any) -> bool:
        if isinstance(error, SchemaMismatchError) and self.url not in str(error):
            raise SchemaMismatchError(f"add_segment: {self.url}: {error}; nothing was added") from None
        try:
            return bool(self._inner.__exit__(kind, error, trace))
        except (CorruptMetadataError, ObjectNotFoundError) as exc:
            found = getattr(exc, "found", None) or str(exc)
            if "ArrowInvalid" in found and self.format in ("csv", "json"):
                raise SchemaMismatchError(
                    f"add_segment: {self.url} does not hold the table's columns as {self.format}: "
                    f"{found}; nothing was added") from None
            raise InvalidOptionError(
                f"add_segment: {self.url} cannot be read as {self.format}: {found}; expected "
                f"{expected(self.format)}; nothing was added") from None


class _progress:
    """A progress bar over ``total`` bytes on a terminal when the work is long; silent otherwise."""

    def __init__(self, total: int, description: str) -> None:
        self.total = total
        self.description = description
        self._bar: Any = None

    def __enter__(self) -> Callable[[int], None]:
        # rich draws on its console, which writes to stdout: ask whether that is a terminal.
        if self.total < PROGRESS_BYTES or not sys.stdout.isatty():
            return lambda done: None
        from rich.progress import Progress

        self._bar = Progress(transient=True)
        self._bar.__enter__()
        task = self._bar.add_task(self.description, total=self.total)
        return lambda done: self._bar.advance(task, done)

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
