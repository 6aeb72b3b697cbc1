"""Reading the files of external segments (ADD SEGMENT): Parquet, ORC, CSV and JSON folders that
joined the table in place and are never rewritten or moved.

An external file is keyed in the metadata table by its full URL (``file:///data/logs/day=1/
part-0.parquet``, ``s3://bucket/...``), where the table's own files are keyed by table-relative
paths: a key holding ``://`` is external. Its partition values are not in the file but in the
names of its last folders (Hive style, ``day=20211123/hour=12``), one per partition column of the
table, in order: ADD SEGMENT checked that when it recorded the file.

Every external file is read whole, in file order, by pyarrow's reader of its format, so a row's
position (what the record index and delete deltas record) is its ordinal in that read, the same
every time the file is unchanged. So a file is only read as it was added: ADD SEGMENT records its
size, rows and ``version`` (what the storage changes whenever the bytes change: S3's ETag, the
modification time elsewhere), and a reader that opens it, or a keyed write that deletes rows of
it by position, compares them first (:class:`ExternalRecord`); a changed file raises
``CorruptMetadataError`` naming it, and ``validate()`` reports it. CSV files may start with a
header line (Spark writes one only when asked): a first line that names the columns is a header,
anything else is data.

The filesystem of an external URL comes from fsspec, with the table's ``storage_options`` when
the URL has the table's protocol and those given to ``add_segment`` in this process otherwise
(credentials are never written to the table).
"""

from __future__ import annotations

import csv
import io
import os
import posixpath
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import fsspec
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.dataset as ds
import pyarrow.json as pjson
import pyarrow.orc as porc
import pyarrow.parquet as pq

from metatxn.indexes import field_id
from metatxn.timeline import CorruptMetadataError, SchemaMismatchError, TxnError, fsspec_options

from .._schema import same_columns, version_projection
from ._hive import (
    escape_path_name,
    parse_hive_folder,
    partition_folder,
    timestamp_value,
    unescape_path_name,
)

#: The formats ADD SEGMENT reads in place.
EXTERNAL_FORMATS: Final = ("parquet", "orc", "csv", "json")

_FILESYSTEMS: dict[tuple[str, str], Any] = {}
_FILESYSTEMS_LOCK = threading.Lock()


def canonical_url(url: str) -> str:
    """One spelling per location: the filesystem's own protocol name and path (``local://`` and
    ``file:/x`` are ``file:///x``, ``memory://a`` is ``memory:///a``), symbolic links resolved for
    local files, no trailing slash. Files are keyed by it, so one file has one key."""
    protocol = url.split("://", 1)[0] if "://" in url else "file"
    cls = fsspec.get_filesystem_class(protocol)
    path = cls._strip_protocol(url)
    name = cls.protocol if isinstance(cls.protocol, str) else cls.protocol[0]
    if name == "file":
        path = os.path.realpath(os.path.expanduser(path))
    path = path.rstrip("/") or "/"
    return f"{name}://{path}"


def is_external(path: str) -> bool:
    """Whether a ``files`` key names an external segment's file (a URL, not a table path)."""
    return "://" in path


def expected(file_format: str) -> str:
    """What an external file of ``file_format`` should be, for error messages."""
    return f"an external {file_format} file with the table's columns"


def url_filesystem(url: str, options: Mapping[str, Any] | None) -> tuple[Any, str]:
    """The fsspec filesystem of ``url`` (one per protocol and options in this process) and the
    path within it."""
    protocol = url.split("://", 1)[0]
    # A table's options are deltalake's keys; fsspec's filesystem takes its own.
    translated = fsspec_options(url, options)
    key = (protocol, repr(sorted(translated.items())))
    with _FILESYSTEMS_LOCK:
        filesystem = _FILESYSTEMS.get(key)
        if filesystem is None:
            filesystem = fsspec.filesystem(protocol, **translated)
            _FILESYSTEMS[key] = filesystem
    return filesystem, filesystem._strip_protocol(url)


def modified_ms(info: dict[str, Any]) -> int | None:
    """A listing entry's modification time in epoch ms (each fsspec backend names it its way)."""
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        if isinstance(value, (int, float)):
            return int(value * 1000) if value < 1e11 else int(value)
        if isinstance(value, datetime):
            return int(value.timestamp() * 1000)
        if isinstance(value, str):
            try:
                return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
            except ValueError:
                continue
    return None


def file_version(info: Mapping[str, Any]) -> str | None:
    """What a listing entry says changes whenever the file's bytes do, as text: the ETag where
    the storage keeps one (S3, GCS, Azure: a new one for every write, even within one second),
    else the modification time at the storage's full resolution (local disk: nanoseconds on
    kernels with fine-grained timestamps; memory: microseconds). None if it says neither."""
    for key in ("ETag", "etag"):
        value = info.get(key)
        if isinstance(value, str) and value.strip('"'):
            return f"etag:{value.strip(chr(34))}"
    for key in ("mtime", "LastModified", "last_modified", "updated", "modified", "created"):
        value = info.get(key)
        # One spelling whichever call answered (memory's listing gives a float, its info a
        # datetime): seconds as the float's shortest exact text.
        if isinstance(value, datetime):
            return f"{key}:{value.timestamp()!r}"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return f"{key}:{float(value)!r}"
        if isinstance(value, str) and value:
            return f"{key}:{value}"
    return None


class ExternalRecord(msgspec.Struct, frozen=True):
    """What ADD SEGMENT recorded of one external file (its ``files`` record): a reader finding
    anything else finds another file under the same name."""

    size: int
    rows: int
    #: :func:`file_version` when added; None in records written before it was kept.
    version: str | None = None
    #: The modification time (epoch ms) when added: the only stamp of older records.
    modified_ms: int | None = None

    def describe(self) -> str:
        stamp = (f"version {self.version}" if self.version is not None
                 else f"modified at {self.modified_ms} ms" if self.modified_ms is not None else "")
        return ", ".join(part for part in (f"{self.size} bytes", f"{self.rows} rows", stamp) if part)


def external_records(files: pa.Table) -> dict[str, ExternalRecord]:
    """The :class:`ExternalRecord` of every external file among rows ``files`` of the ``files``
    partition (live or removed: time travel reads removed files too)."""
    if not files.num_rows:
        return {}
    external = files.filter(pc.match_substring(files["path"], "://"))
    if not external.num_rows:
        return {}
    columns = {name: (external[name].to_pylist() if name in external.column_names
                      else [None] * external.num_rows)
               for name in ("path", "size", "rows", "version", "modified_ms")}
    return {path: ExternalRecord(size, rows, version, modified)
            for path, size, rows, version, modified in zip(
                columns["path"], columns["size"], columns["rows"], columns["version"],
                columns["modified_ms"], strict=True)
            if size is not None and rows is not None}


def changed_file(url: str, record: ExternalRecord, found: str) -> CorruptMetadataError:
    """The error of an external file found different from its record."""
    return CorruptMetadataError(
        url, f"the external file as ADD SEGMENT recorded it ({record.describe()})",
        f"{found}: it changed outside the table, which reads it in place, so its rows and "
        "positions (delete deltas, the record index) no longer hold; put the file back as it was "
        "added, or delete its segment and add the folder again as a new one")


def partition_values(url: str, schema: pa.Schema, partition_by: Sequence[str]) -> dict[str, Any]:
    """The partition values of external file ``url``, from its last folders' names, typed like
    the table's columns (``None`` for Hive's null folder)."""
    if not partition_by:
        return {}
    folders = posixpath.dirname(url.split("://", 1)[-1]).split("/")[-len(partition_by):]
    values: dict[str, Any] = {}
    for name, folder in zip(partition_by, folders, strict=True):
        found, text = parse_hive_folder(folder, partition_by)
        if found != name:
            raise CorruptMetadataError(url, f"an external file below a {name}=<value> folder",
                                       f"folder {folder!r}")
        values[name] = typed_value(text, schema.field(name).type)
    return values


def partition_renames(versions: Iterable[pa.Schema], schema: pa.Schema,
                      partition_by: Sequence[str]) -> dict[str, str]:
    """Each other name a partition column of ``schema`` (a version) had in ``versions`` -> its
    name in ``schema``, found by column id. Folders keep the names they were written with
    (``day=d1/`` after ``day`` became ``date``); this reads them under the names of now. A
    partition column is never dropped, so its id is in every version; two partition columns
    that swapped names are read by the newest names (the files partition has no other record)."""
    ids = {field_id(schema.field(name)): name for name in partition_by}
    ids.pop(None, None)
    renames: dict[str, str] = {}
    for version in versions:
        for field in version:
            name = ids.get(field_id(field))
            if name is not None and field.name != name and field.name not in partition_by:
                renames[field.name] = name
    return renames


def renamed_partition(partition: str, renames: Mapping[str, str]) -> str:
    """A Hive partition path with its folders' names through ``renames``."""
    if not partition or not renames:
        return partition
    renamed = []
    for folder in partition.split("/"):
        name, _, text = folder.partition("=")
        new = renames.get(unescape_path_name(name), renames.get(name))
        renamed.append(folder if new is None else f"{escape_path_name(new)}={text}")
    return "/".join(renamed)


def canonical_partition(partition: str, schema: pa.Schema) -> str:
    """A Hive partition path (``day=2021-11-23/flag=True``) as the writer names it
    (``flag=true``): folders other writers made for ADD SEGMENT compare equal to the table's own.
    A path whose values do not read as their columns' types is returned as it is."""
    if not partition:
        return partition
    folders = []
    for folder in partition.split("/"):
        name, text = parse_hive_folder(folder, schema.names)
        try:
            value = typed_value(text, schema.field(name).type)
            folders.append(partition_folder(name, value))
        except (KeyError, ValueError, TxnError):
            return partition
    return "/".join(folders)


def partition_of(path: str, levels: int) -> str:
    """The Hive partition path of a data file: the last ``levels`` folders of its path (a table's
    own file, or an external file's URL)."""
    if not levels:
        return ""
    return "/".join(posixpath.dirname(path.split("://", 1)[-1]).split("/")[-levels:])


def typed_value(raw: str | None, data_type: pa.DataType) -> Any:
    """A partition folder's value text as a value of ``data_type`` (``ValueError`` if it is not one)."""
    if raw is None:
        return None
    if pa.types.is_timestamp(data_type):  # Arrow's cast takes no space separator nor offset-free zoned text
        return timestamp_value(raw, data_type)
    try:
        return pa.array([raw], pa.string()).cast(data_type)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise ValueError(f"{raw!r} is not a {data_type}: {exc}") from None


def file_schema(schema: pa.Schema, partition_by: Sequence[str]) -> pa.Schema:
    """The columns an external file holds: the table's, less its partition columns."""
    return pa.schema([field for field in schema if field.name not in partition_by])


class ExternalReader:
    """Reads external files for one table: whole, in file order, as the table's columns."""

    def __init__(self, schema: pa.Schema, partition_by: Sequence[str],
                 options: dict[str, dict[str, Any]] | None = None,
                 recorded: dict[str, ExternalRecord] | None = None) -> None:
        self.schema = schema
        self.partition_by = list(partition_by)
        #: URL prefix -> storage options: the table's own for its protocol (``s3://``), and those
        #: given to add_segment for the folder it added. The longest matching prefix wins.
        self.options: dict[str, dict[str, Any]] = dict(options or {})
        #: URL -> what ADD SEGMENT recorded of it: a file is read only as it was added. A
        #: ``files`` record is written once, so what a snapshot taught the reader stays true.
        self.recorded: dict[str, ExternalRecord] = dict(recorded or {})

    def remember(self, files: pa.Table) -> None:
        """Learn the records of the external files among rows ``files`` of the ``files``
        partition (the snapshot or write state about to open them)."""
        if not files.num_rows:
            return
        external = files.filter(pc.match_substring(files["path"], "://"))
        if external.num_rows and not all(path in self.recorded
                                         for path in external["path"].to_pylist()):
            self.recorded.update(external_records(external))

    def resolve(self, url: str) -> str:
        """The URL of the file ``url`` names, symbolic links followed (local disk: one file under
        every spelling; other filesystems have no links)."""
        return canonical_url(url)

    def check(self, url: str, file_format: str) -> None:
        """Raise ``CorruptMetadataError`` unless external file ``url`` is what ADD SEGMENT
        recorded: its size and version from the storage, and (Parquet, ORC) the footer's rows.
        Without a record, nothing to compare."""
        record = self.recorded.get(url)
        if record is None:
            return
        with self.open(url) as handle:
            self._compare(url, record, handle)
            if file_format == "parquet":
                self._compare_rows(url, record, pq.ParquetFile(handle).metadata.num_rows)
            elif file_format == "orc":
                self._compare_rows(url, record, porc.ORCFile(handle).nrows)

    def _read_checked(self, url: str, record: ExternalRecord, handle: Any, file_format: str,
                      stored: pa.Schema, columns: Sequence[str]) -> pa.Table:
        """``read_format``, the file compared with ``record`` first (rows: from the footer the
        read opens anyway, or after the read for CSV and JSON)."""
        self._compare(url, record, handle)
        if file_format == "parquet":
            parquet = pq.ParquetFile(handle)
            self._compare_rows(url, record, parquet.metadata.num_rows)
            return parquet.read(columns=list(columns), use_threads=False)
        if file_format == "orc":
            orc = porc.ORCFile(handle)
            self._compare_rows(url, record, orc.nrows)
            return _read_orc(orc, columns)
        table = read_format(handle, file_format, stored, columns)
        self._compare_rows(url, record, table.num_rows)
        return table

    def options_for(self, url: str) -> dict[str, Any]:
        """The storage options to open ``url`` with (the longest prefix of it that has some)."""
        matches = [prefix for prefix in self.options if url == prefix or url.startswith(
            prefix if prefix.endswith("/") else prefix + "/")]
        return self.options[max(matches, key=len)] if matches else {}

    def filesystem(self, url: str) -> tuple[Any, str]:
        return url_filesystem(url, self.options_for(url))

    def open(self, url: str) -> Any:
        filesystem, path = self.filesystem(url)
        if url in self.recorded:
            # A listing cached in this process (S3's) would answer for the file as it was:
            # ask the storage, at the open it does anyway.
            filesystem.invalidate_cache(path)
        return filesystem.open(path, "rb")

    def _compare(self, url: str, record: ExternalRecord, handle: Any) -> None:
        """Compare the size and version of the file open as ``handle`` with ``record``."""
        info = getattr(handle, "details", None)  # what s3fs learnt when it opened the file
        if not isinstance(info, dict) or info.get("size") is None:
            # After the open: a file replaced before it is seen replaced, not read.
            filesystem, path = self.filesystem(url)
            info = filesystem.info(path)
        size = int(info.get("size") or 0)
        if record.version is not None:
            stamp = file_version(info)
            same = stamp == record.version
            found = f"{size} bytes, version {stamp}"
        else:  # an older record: the millisecond stamp, where the storage gives one
            modified = modified_ms(info)
            same = record.modified_ms is None or modified is None or modified == record.modified_ms
            found = f"{size} bytes, modified at {modified} ms"
        if size != record.size or not same:
            raise changed_file(url, record, found)

    @staticmethod
    def _compare_rows(url: str, record: ExternalRecord, rows: int) -> None:
        """A rewrite the version cannot show (a clock tick too coarse) may still show in rows."""
        if rows != record.rows:
            raise changed_file(url, record, f"{rows} rows")

    def partition_names(self, schema: pa.Schema) -> list[str]:
        """The partition columns' names in ``schema`` (a version of the table), found by column
        id (a partition column may be renamed, never dropped)."""
        if schema is self.schema or not self.partition_by:
            return self.partition_by
        ids = {field_id(self.schema.field(name)): name for name in self.partition_by}
        names = {field_id(f): f.name for f in schema}
        if None in ids or not all(i in names for i in ids):  # no ids to follow: names as they are
            return self.partition_by
        return [names[i] for i in ids]

    def read(self, url: str, file_format: str, columns: Sequence[str] | None = None, *,
             data: bytes | None = None, schema: pa.Schema | None = None) -> pa.Table:
        """``columns`` (all by default) of every row of external file ``url``, in file order,
        typed like the table; partition columns come from the file's folders. ``data``: the
        file's bytes, when the caller read them already. ``schema``: the table version to read
        the file as (its names and types; the reader's own by default): the one it was added
        under, whose names its columns and partition folders have.

        Raises ``OSError``/``pa.ArrowException``/``ValueError`` for the caller to turn into an
        error naming the file (``reading_file``).
        """
        schema = self.schema if schema is None else schema
        partition_by = self.partition_names(schema)
        wanted = list(schema.names if columns is None else columns)
        stored = file_schema(schema, partition_by)
        from_file = [name for name in wanted if name not in partition_by]
        if data is not None:
            table = read_format(io.BytesIO(data), file_format, stored, from_file)
        else:
            with self.open(url) as handle:
                record = self.recorded.get(url)
                table = read_format(handle, file_format, stored, from_file) if record is None \
                    else self._read_checked(url, record, handle, file_format, stored, from_file)
        folders = partition_values(url, schema, partition_by) if \
            any(name in partition_by for name in wanted) else {}
        for name, value in folders.items():
            if name in wanted:
                field = schema.field(name)
                table = table.append_column(field, pa.repeat(pa.scalar(value, field.type),
                                                             table.num_rows))
        if not wanted:
            return pa.table({"rows": pa.nulls(table.num_rows)}).drop_columns(["rows"])
        fields = [schema.field(name) for name in wanted]
        for field in fields:
            if not field.nullable and table[field.name].null_count:
                raise SchemaMismatchError(
                    f"{url}: column {field.name!r} holds {table[field.name].null_count} null(s), "
                    "where the table's column is not nullable")
        # Cast to nullable fields first: the check above named the column a non-nullable cast
        # would only have refused.
        table = _to_types(table.select(wanted), pa.schema([f.with_nullable(True) for f in fields]))
        return table.cast(pa.schema(fields))

    def scan(self, url: str, file_format: str, *, filter: ds.Expression | None,
             columns: Sequence[str], deleted: np.ndarray | None, schema: pa.Schema | None = None,
             written: pa.Schema | None = None) -> tuple[pa.Table, np.ndarray]:
        """The live rows of ``url`` matching ``filter``: ``columns`` of them and their positions.

        ``schema``: the table version the rows are wanted in (the reader's by default), whose
        names ``filter`` and ``columns`` use; ``written``: the version the file was added under,
        when not ``schema``: it is read by that version's names (columns and partition folders),
        then projected to ``schema`` by column id (``scan_file``'s rule for the table's own files).
        """
        schema = self.schema if schema is None else schema
        if written is not None and not same_columns(written, schema):
            table = self.read(url, file_format, schema=written)
            table = ds.dataset(table).to_table(columns=version_projection(written, schema),
                                               use_threads=False).cast(schema)
        else:
            table = self.read(url, file_format, None if filter is not None else columns,
                              schema=schema)
        keep = np.ones(table.num_rows, dtype=bool)
        if deleted is not None and len(deleted):
            if int(deleted.max()) >= table.num_rows:
                # Deletes name rows the file no longer has: it changed since it was added, and
                # applying the rest would delete other rows.
                raise CorruptMetadataError(
                    url, f"the external file as it was added (row {int(deleted.max())} is deleted)",
                    f"{table.num_rows} rows: it changed outside the table")
            keep[deleted] = False
        if filter is not None:
            match = ds.dataset(table).to_table(columns={"match": filter})["match"]
            keep &= np.asarray(pc.fill_null(match, False).to_numpy(zero_copy_only=False), dtype=bool)
        positions = np.flatnonzero(keep).astype(np.int64)
        if not columns:
            return pa.table({"rows": pa.nulls(len(positions))}).drop_columns(["rows"]), positions
        return table.select(list(columns)).filter(pa.array(keep)), positions


def _to_types(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` cast to ``schema``; timestamps of a finer unit are truncated, as Spark reads
    them (Spark's INT96 and ORC timestamps are nanoseconds to pyarrow, microseconds to Spark)."""
    columns = []
    for field, column in zip(schema, table.columns, strict=True):
        safe = not (pa.types.is_timestamp(field.type) and pa.types.is_timestamp(column.type))
        columns.append(pc.cast(column, field.type, safe=safe))
    return pa.Table.from_arrays(columns, schema=schema)


def read_format(handle: Any, file_format: str, stored: pa.Schema, columns: Sequence[str]) -> pa.Table:
    """``columns`` of every row of one file of ``file_format`` whose columns are ``stored``."""
    if file_format == "parquet":
        return pq.ParquetFile(handle).read(columns=list(columns), use_threads=False)
    if file_format == "orc":
        return _read_orc(porc.ORCFile(handle), columns)
    wanted = pa.schema([stored.field(name) for name in columns])
    data = handle.read()
    if file_format == "csv":
        return _read_csv(data, stored, wanted)
    if file_format == "json":
        return _read_json(data, stored, wanted)
    raise ValueError(f"unknown external format {file_format!r}")


def _read_orc(orc: porc.ORCFile, columns: Sequence[str]) -> pa.Table:
    """``columns`` of every row of an ORC file; without columns, its row count kept (Arrow's ORC
    reader returns no rows when asked for no columns)."""
    if not columns:
        return pa.table({"rows": pa.nulls(orc.nrows)}).drop_columns(["rows"])
    return orc.read(columns=list(columns))


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([field.with_nullable(True) for field in schema])


def _read_json(data: bytes, stored: pa.Schema, wanted: pa.Schema) -> pa.Table:
    if not data.strip():
        return wanted.empty_table()
    try:
        return pjson.read_json(io.BytesIO(data), parse_options=pjson.ParseOptions(
            explicit_schema=_nullable(stored), unexpected_field_behavior="ignore")).select(wanted.names)
    except pa.ArrowInvalid as exc:
        # Arrow's message names the value, not the column: find the column on this error path.
        for field in stored:
            try:
                pjson.read_json(io.BytesIO(data), parse_options=pjson.ParseOptions(
                    explicit_schema=_nullable(pa.schema([field])), unexpected_field_behavior="ignore"))
            except pa.ArrowInvalid:
                raise SchemaMismatchError(f"column {field.name!r} ({field.type}) does not parse: "
                                          f"{exc}") from None
        raise


def json_keys_present(data: bytes, names: Sequence[str]) -> set[str]:
    """Which of ``names`` appear as a key somewhere in a JSON-lines file. (Spark leaves null
    fields out of the objects it writes, so a column is missing only if no object names it.)"""
    return {name for name in names if re.search(rb'"' + re.escape(name.encode()) + rb'"\s*:', data)}


_BOM = b"\xef\xbb\xbf"


def csv_escaped_quotes(data: bytes) -> bool:
    """Whether a CSV file escapes quotes with a backslash (``"a\\"b"``, Spark's default writer)
    rather than doubling them (RFC 4180, what pyarrow reads): a backslash-quote that does not end
    a field cannot be RFC 4180."""
    return re.search(rb'\\"(?![,\r\n]|$)', data) is not None


#: How a CSV file's first line reads: the table's columns in order, other column names, or data.
CSV_EXACT_HEADER, CSV_OTHER_HEADER, CSV_NO_HEADER = "exact", "other", "none"


def _first_line(data: bytes) -> list[str]:
    """The fields of a CSV file's first line (a byte-order mark dropped; quoted commas kept)."""
    first = data.split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", "replace").removeprefix("\ufeff")
    return next(csv.reader([first]), [])


def _header_names(data: bytes, stored: pa.Schema) -> list[str]:
    """The first line's fields as table column names where they name one, whatever their case."""
    lower = {name.lower(): name for name in stored.names}
    return [lower.get(name.strip().lower(), name.strip()) for name in _first_line(data)]


def csv_header(data: bytes, stored: pa.Schema) -> str:
    """Whether a CSV file's first line is a header (Spark writes one only when asked): one that
    names the table's columns in order, one that names some of them among others (read by name),
    or no header (data, read by position). Names match whatever their case, as Spark's do."""
    names = _header_names(data, stored)
    if names == list(stored.names):
        return CSV_EXACT_HEADER
    return CSV_OTHER_HEADER if set(names) & set(stored.names) else CSV_NO_HEADER


def _read_csv(data: bytes, stored: pa.Schema, wanted: pa.Schema) -> pa.Table:
    if not data.strip():
        return wanted.empty_table()
    if data.startswith(_BOM):
        data = data[len(_BOM):]
    header = csv_header(data, stored)
    if header == CSV_OTHER_HEADER:
        names = _header_names(data, stored)
        missing = [name for name in stored.names if name not in names]
        if missing:
            raise SchemaMismatchError(f"column(s) {missing} of the table are missing from the CSV "
                                      f"header {_first_line(data)}")
        read_options = pcsv.ReadOptions(column_names=names, skip_rows=1, use_threads=False)
    else:
        fields = len(_first_line(data))
        if header == CSV_NO_HEADER and fields != len(stored):
            raise SchemaMismatchError(
                f"the first line holds {fields} fields and no header; expected the table's "
                f"{len(stored)} columns {stored.names} in order (or a header line naming them)")
        read_options = pcsv.ReadOptions(column_names=stored.names, use_threads=False,
                                        skip_rows=1 if header == CSV_EXACT_HEADER else 0)
    # Only an empty field is null (Spark's rule; "NA" or "null" are text), and "" is an empty
    # string, as Spark writes them.
    convert = pcsv.ConvertOptions(column_types={f.name: f.type for f in stored},
                                  include_columns=wanted.names, strings_can_be_null=True,
                                  quoted_strings_can_be_null=False, null_values=[""],
                                  true_values=["true", "True", "TRUE"],
                                  false_values=["false", "False", "FALSE"])
    try:
        return pcsv.read_csv(io.BytesIO(data), read_options=read_options, convert_options=convert)
    except pa.ArrowInvalid as exc:
        # Arrow numbers the column; name it, on this error path, by reading one at a time.
        for field in wanted:
            try:
                pcsv.read_csv(io.BytesIO(data), read_options=read_options,
                              convert_options=pcsv.ConvertOptions(
                                  column_types={field.name: field.type}, include_columns=[field.name],
                                  strings_can_be_null=True, quoted_strings_can_be_null=False,
                                  null_values=[""]))
            except pa.ArrowInvalid:
                raise SchemaMismatchError(f"column {field.name!r} ({field.type}) does not parse: "
                                          f"{exc}") from None
        raise


def external_options(table_uri: str, storage_options: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The storage options external files start with: the table's own, for its protocol."""
    protocol = table_uri.split("://", 1)[0].lower() if "://" in table_uri else "file"
    if not storage_options:
        return {}
    # s3:// and s3a:// name the same objects: a table at one reads external files at either.
    protocols = ("s3", "s3a") if protocol in ("s3", "s3a") else (protocol,)
    return {f"{name}://": dict(storage_options) for name in protocols}
