"""Snapshots: the live files at one completed instant, pruned and scanned with pyarrow.

A snapshot is built from completed instants only (see ``indexes._metadata_table``); no data
folder is listed. With a ``filter``, each file's column ranges become an Arrow guarantee
expression, and Arrow drops every file whose guarantee contradicts the filter before opening it.

Files with live delete deltas (of completed instants only, like everything else) are scanned
one row group at a time with their deleted positions masked out (``_scan``); the others go
through one Arrow dataset scan.

A filter is bound to the schema before any file is read, so a scan that fails afterwards failed
because of a file: the files are then read again one by one (``raise_for_files``), and the
error names the one at fault (``CorruptMetadataError``, ``ObjectNotFoundError``), or is a
``StorageError`` if each reads on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from indexes import MetadataSnapshot, live
from timeline import InvalidOptionError, StorageError

from .._context import DataFile
from .._files import (
    DATA_FILE_EXPECTED,
    DataStore,
    LiveDeltas,
    check_schema,
    parse_hive_value,
    raise_for_files,
    reading_file,
    scan_file,
)


def _converter(data_type: pa.DataType) -> Callable[[str], object]:
    if pa.types.is_integer(data_type):
        return int
    if pa.types.is_boolean(data_type):
        return lambda raw: raw == "true"
    if pa.types.is_date(data_type):
        return date.fromisoformat
    return lambda raw: raw


def _partition_parser(schema: pa.Schema) -> Callable[[str], dict[str, object]]:
    """Parse Hive partition paths ("day=2026-01-01/region=eu") into typed values."""
    converters = {field.name: _converter(field.type) for field in schema}

    def parse(partition: str) -> dict[str, object]:
        values: dict[str, object] = {}
        if partition:
            for part in partition.split("/"):
                name, _, text = part.partition("=")
                raw = parse_hive_value(text)
                values[name] = None if raw is None else converters[name](raw)
        return values

    return parse


def _guarantee(ranges: dict[str, Any] | None, schema: pa.Schema) -> ds.Expression:
    """What is known of every row of a file, as an expression Arrow can simplify filters with."""
    known = pc.scalar(True)
    for name, stat in (ranges or {}).items():
        if stat is None:
            continue
        field = pc.field(name)
        data_type = schema.field(name).type
        nulls, count = stat["nulls"], stat["count"]
        if count and nulls == count:
            known = known & field.is_null()
            continue
        low, high = stat["min"], stat["max"]
        if low is None or high is None:
            continue
        inside = (field >= pa.scalar(low, data_type)) & (field <= pa.scalar(high, data_type))
        known = known & (inside if nulls == 0 else (inside | field.is_null()))
    return known


class Snapshot:
    """The table as of one completed instant. Cheap to create; reads happen on demand."""

    def __init__(
        self,
        *,
        instant: str | None,
        completed_at: str | None,
        metadata: MetadataSnapshot,
        schema: pa.Schema,
        store: DataStore,
        load_column_stats: Callable[[], pa.Table],
        check_retained: Callable[[], None] = lambda: None,
    ) -> None:
        """``check_retained`` raises ``SnapshotExpiredError`` if a clean since expired this
        snapshot: a read that misses a file asks it before blaming the file."""
        self._check_retained = check_retained
        self._instant = instant
        self._completed_at = completed_at
        self._schema = schema
        self._store = store
        self._load_column_stats = load_column_stats
        assert metadata.files is not None
        # Files keep the metadata table's order (its base's key order, then newer files):
        # sorting ten thousand paths on every read would cost more than the read itself.
        self._files = live(metadata.files)
        self._metadata = metadata
        self._deltas = LiveDeltas.of(store, metadata.deletes)

    @property
    def instant(self) -> str | None:
        """The last completed instant this snapshot includes (None for an empty timeline)."""
        return self._instant

    @property
    def completed_at(self) -> str | None:
        return self._completed_at

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def metadata(self) -> MetadataSnapshot:
        return self._metadata

    def _paths(self) -> list[str]:
        paths: list[str] = self._files["path"].to_pylist()
        return paths

    def _data_files(self, indices: Sequence[int] | None = None) -> list[DataFile]:
        files = self._files if indices is None else self._files.take(pa.array(indices, pa.int64()))
        prefix = self._store.location("")
        parse = _partition_parser(self._schema)
        parsed = {partition: parse(partition) for partition in set(files["partition"].to_pylist())}
        deltas = self._deltas
        return [
            DataFile(prefix + path, segment, rows, size, fmt, deltas.rows(path), dict(parsed[partition]),
                     tuple(prefix + p for p in deltas.paths(path)))
            for path, segment, rows, size, fmt, partition in zip(
                files["path"].to_pylist(), files["segment"].to_pylist(), files["rows"].to_pylist(),
                files["size"].to_pylist(), files["format"].to_pylist(),
                files["partition"].to_pylist(), strict=True)
        ]

    def _check_filter(self, filter: object) -> ds.Expression | None:
        if filter is None:
            return None
        if not isinstance(filter, ds.Expression):
            raise InvalidOptionError(
                f"filter must be a pyarrow.compute.Expression (e.g. pc.field('x') > 3), "
                f"got {type(filter).__name__}"
            )
        try:  # bind it to the schema now: an empty snapshot must not hide a bad filter
            self._schema.empty_table().filter(filter)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidOptionError(f"filter {filter} does not apply to this table: {exc}") from None
        return filter

    def _dataset(self, filter: ds.Expression | None,
                 paths: list[str] | None = None) -> ds.FileSystemDataset:
        paths = self._paths() if paths is None else paths
        guarantees = None
        if filter is not None:
            stats = self._load_column_stats()
            by_path = dict(zip(stats["path"].to_pylist(), stats["columns"].to_pylist(), strict=True))
            guarantees = [_guarantee(by_path.get(path), self._schema) for path in paths]
        return self._store.dataset(paths, self._schema, guarantees)

    def files(self, filter: ds.Expression | None = None) -> list[DataFile]:
        """The live data files; with ``filter``, only those whose ranges can match it."""
        expression = self._check_filter(filter)
        if expression is None:
            return self._data_files()
        dataset = self._dataset(expression)
        position = {self._store.full_path(p): i for i, p in enumerate(self._paths())}
        try:
            kept = [position[f.path] for f in dataset.get_fragments(filter=expression)]
        except (pa.ArrowException, OSError) as exc:  # the filter was checked: not its fault
            raise StorageError(f"listing the data files that can match {expression} failed: "
                               f"{type(exc).__name__}: {exc}") from exc
        return self._data_files(sorted(kept))

    def to_arrow(self, filter: ds.Expression | None = None,
                 columns: Sequence[str] | None = None) -> pa.Table:
        """The rows of the snapshot, optionally filtered and projected."""
        expression = self._check_filter(filter)
        if columns is not None:
            unknown = [c for c in columns if self._schema.get_field_index(c) < 0]
            if unknown or isinstance(columns, str):
                raise InvalidOptionError(
                    f"columns must be a list of table columns; unknown {unknown or [columns]}, "
                    f"table columns: {self._schema.names}"
                )
            columns = list(columns)
        if self._files.num_rows == 0:
            empty = self._schema.empty_table()
            return empty.select(columns) if columns is not None else empty
        try:
            return self._read(expression, columns)
        except (pa.ArrowException, OSError) as exc:
            self._check_retained()  # a clean since this snapshot was taken: expired, not damaged
            raise_for_files(self._store, self._paths(), self._schema, exc, filter=expression,
                            columns=columns)

    def _read(self, expression: ds.Expression | None, columns: list[str] | None) -> pa.Table:
        return pa.concat_tables(self._read_parts(expression, columns))

    def _read_parts(self, expression: ds.Expression | None, columns: list[str] | None) -> list[pa.Table]:
        paths = self._paths()
        dirty = [p for p in paths if p in self._deltas.by_file]
        if not dirty:
            return [self._scan(expression, paths, lambda d: d.to_table(filter=expression, columns=columns))]
        clean = [p for p in paths if p not in self._deltas.by_file]
        parts = [self._scan(expression, clean, lambda d: d.to_table(filter=expression, columns=columns))] \
            if clean else []
        wanted = columns if columns is not None else self._schema.names
        for path in dirty:
            rows, _ = scan_file(self._store, path, self._schema, filter=expression, columns=wanted,
                                deleted=self._deltas.positions(path))
            parts.append(rows)
        return parts

    def _scan(self, expression: ds.Expression | None, paths: list[str],
              scan: Callable[[ds.FileSystemDataset], Any]) -> Any:
        """``scan`` of a dataset of ``paths``, then a check that every file it opened has the
        table's columns: Arrow reads a missing column as nulls, so another table's Parquet file
        in place of a data file would change rows silently. The scan read those schemas already
        (each fragment keeps it), so the check reads nothing more."""
        dataset = self._dataset(expression, paths)
        result = scan(dataset)
        relative = {self._store.full_path(p): p for p in paths}
        for fragment in (dataset.get_fragments(filter=expression) if expression is not None
                         else dataset.get_fragments()):
            path = relative[fragment.path]
            with reading_file(path, DATA_FILE_EXPECTED):
                check_schema(path, fragment.physical_schema, self._schema)
        return result

    def count(self, filter: ds.Expression | None = None) -> int:
        """The number of live rows (matching ``filter``); without a filter no data file is read."""
        expression = self._check_filter(filter)
        if expression is None:
            deleted = sum(self._deltas.rows(p) for p in self._deltas.by_file)
            return int(pc.sum(self._files["rows"]).as_py() or 0) - deleted
        if self._files.num_rows == 0:
            return 0
        try:
            if self._deltas.by_file:
                return sum(part.num_rows for part in self._read_parts(expression, []))
            return int(self._scan(expression, self._paths(),
                                  lambda d: d.count_rows(filter=expression)))
        except (pa.ArrowException, OSError) as exc:
            self._check_retained()
            raise_for_files(self._store, self._paths(), self._schema, exc, filter=expression,
                            columns=[])

    def __repr__(self) -> str:
        return f"txn.Snapshot(instant={self._instant!r}, files={self._files.num_rows})"
