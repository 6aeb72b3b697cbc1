"""Snapshots: the live files at one completed instant, pruned and scanned with pyarrow.

A snapshot is built from completed instants only (see ``indexes._metadata_table``); no data
folder is listed. Planning works on the file table (``_file_table``: one Arrow table of the live
files, their delete deltas and, when a filter needs them, their column ranges), so it costs a few
Arrow kernels whatever the number of files: a ``filter`` prunes files by their ranges in one
vectorised pass (``_prune``), ``count()`` without a filter adds row counts, and the per-file
objects of ``files()`` are made only for the files it returns. Only the files a filter may match
are given to Arrow, each with its ranges as a guarantee expression (which also decides the files
the vectorised pass could not, for filters it only partly understands).

Every read is a :class:`txn.Scanner` (``_scanner``): files with live delete deltas (of
completed instants only, like everything else) are scanned a batch at a time with their deleted
positions masked out; the others go through one Arrow dataset scan per schema version.

A filter is bound to the schema before any file is read, so a scan that fails afterwards failed
because of a file: the files are then read again one by one (``raise_for_files``), and the
error names the one at fault (``CorruptMetadataError``, ``ObjectNotFoundError``), or is a
``StorageError`` if each reads on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from metatxn.indexes import MetadataSnapshot, assign_ids, live
from metatxn.timeline import StorageError

from .._files import (
    DATA_FILE_EXPECTED,
    DataStore,
    LiveDeltas,
    check_schema,
    parse_hive_folder,
    partition_renames,
    raise_for_files,
    reading_file,
    timestamp_value,
)
from .._results import DataFile
from ._file_reader import FileReader, check_filter
from ._file_table import file_table, with_locations, with_stats
from ._prune import prune
from ._scanner import Scanner


def _converter(data_type: pa.DataType) -> Callable[[str], object]:
    if pa.types.is_integer(data_type):
        return int
    if pa.types.is_boolean(data_type):  # as Arrow casts it (external folders: flag=True, flag=1)
        return lambda raw: raw.lower() in ("true", "1")
    if pa.types.is_date(data_type):
        return date.fromisoformat
    if pa.types.is_timestamp(data_type):
        return lambda raw: timestamp_value(raw, data_type)
    return lambda raw: raw


def _partition_parser(schema: pa.Schema, renames: Mapping[str, str] | None = None
                      ) -> Callable[[str], dict[str, object]]:
    """Parse Hive partition paths ("day=2026-01-01/region=eu") into typed values, keyed by the
    names of ``schema`` (``renames``: a folder name of an older version -> the column's name)."""
    converters = {field.name: _converter(field.type) for field in schema}
    known = frozenset(converters) | frozenset(renames or ())

    def parse(partition: str) -> dict[str, object]:
        values: dict[str, object] = {}
        if partition:
            for part in partition.split("/"):
                name, raw = parse_hive_folder(part, known)
                name = (renames or {}).get(name, name)
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


def _external(table: pa.Table) -> pa.ChunkedArray:
    """Which rows of a file table are external segments' files (keyed by URL)."""
    return pc.match_substring(table["path"], "://")


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
        uri: str = "",
        storage_options: dict[str, Any] | None = None,
        partition_by: Sequence[str] = (),
        versions: Mapping[int, pa.Schema] | None = None,
        schema_id: int = 0,
    ) -> None:
        """``versions``: the schema of each ``files.schema_id`` among its files (``schema``'s
        own id included); files of another version than ``schema``'s are read by column id.
        ``check_retained`` raises ``SnapshotExpiredError`` if a clean since expired this
        snapshot: a read that misses a file asks it before blaming the file. ``uri``,
        ``storage_options`` and ``partition_by``: what a :class:`FileReader` shipped to another
        process opens the table with."""
        self._uri = uri
        self._storage_options = storage_options
        self._partition_by = list(partition_by)
        self._reader: FileReader | None = None
        self._check_retained = check_retained
        self._instant = instant
        self._completed_at = completed_at
        self._schema = schema
        self._versions: dict[int, pa.Schema] = dict(versions or {})
        self._schema_id = schema_id
        self._store = store
        self._load_column_stats = load_column_stats
        assert metadata.files is not None
        self._files = live(metadata.files)
        if store.external is not None:  # what its reads compare the external files with
            store.external.remember(metadata.files)
        self._metadata = metadata
        self._table: pa.Table | None = None
        self._with_stats: pa.Table | None = None
        self._live_deltas: LiveDeltas | None = None
        self._rows: int | None = None

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
    def schema_id(self) -> int:
        """The table version whose schema :attr:`schema` is: files whose ``DataFile.schema_id``
        differs were written with another version's (``Table.schema_history()``) and are read
        by column id."""
        return self._schema_id

    @property
    def metadata(self) -> MetadataSnapshot:
        return self._metadata

    @property
    def _deltas(self) -> LiveDeltas:
        """The live delete deltas by data file, their positions read on demand (built once)."""
        if self._live_deltas is None:
            self._live_deltas = LiveDeltas.of(self._store, self._metadata.deletes)
        return self._live_deltas

    def file_reader(self) -> FileReader:
        """The reader of this snapshot's files one at a time, deletes applied: what an engine
        ships to its workers with some of :meth:`files` each (see :class:`txn.FileReader`).
        This snapshot reads its own files with deletes, and external ones, through it."""
        if self._reader is None:
            self._reader = FileReader(uri=self._uri, storage_options=self._storage_options,
                                      schema_id=self._schema_id, versions=self._versions,
                                      schema=self._schema, partition_by=self._partition_by,
                                      store=self._store, deltas=self._deltas)
        return self._reader

    def _file_table(self, *, stats: bool) -> pa.Table:
        """The file table without ``location`` (planning needs none; callers add it to what
        they return), with ``stats`` if asked."""
        if self._table is None:
            self._table = file_table(self._files, self._metadata.deletes, "", located=False)
        if not stats:
            return self._table
        if self._with_stats is None:
            self._with_stats = with_stats(self._table, self._load_column_stats(),
                                          assign_ids(self._schema))
        return self._with_stats

    def file_table(self, filter: ds.Expression | None = None, *, stats: bool = True) -> pa.Table:
        """The live data files as one Arrow table; with ``filter``, only those whose column
        ranges can match it.

        Columns: ``path``, ``location``, ``segment``, ``partition``, ``format``, ``rows``,
        ``size``, ``instant``, ``deleted_rows``, ``delete_files`` and, unless ``stats`` is
        false, ``stats`` (per column ``min``, ``max``, ``nulls``, ``count``); see
        ``txn._read._file_table`` for their meaning. Without ``stats`` and ``filter`` no column
        statistics are read.
        """
        expression = self._check_filter(filter)
        table = self._file_table(stats=stats or expression is not None)
        if expression is not None:
            table = table.filter(self._may_match(expression, table))
            if not stats:
                table = table.drop_columns(["stats"])
        return with_locations(table, self._store.location(""))

    def deletes(self) -> pa.Table:
        """The snapshot's deleted rows: one row per row a live delete delta deletes, for an
        engine that reads the live files itself (``file_table()``) and drops these rows (see
        design/reader-spec.md).

        Columns: ``path`` (string: the data file's key, as in ``file_table()``), ``location``
        (string: where the file is, as ``file_table()``'s ``location``) and ``position``
        (int64: the deleted row's position in the file as written, counted from 0), sorted by
        file in file table order, then position. Only delete deltas of completed instants that
        are live in this snapshot count; a file without any has no rows here. Reads the delete
        delta files (small Parquet files of positions), never a data file.
        """
        table = self._file_table(stats=False)
        with_deletes = table.filter(pc.greater(table["deleted_rows"], 0))
        paths = self._paths(with_deletes)
        positions = [self._deltas.positions(path) for path in paths]
        counts = np.array([len(p) for p in positions], dtype=np.int64)
        keys = pa.array(paths, pa.string())
        take = pa.array(np.repeat(np.arange(len(paths), dtype=np.int64), counts))
        located = with_locations(with_deletes, self._store.location(""))
        return pa.table({
            "path": keys.take(take),
            "location": located["location"].combine_chunks().take(take),
            "position": pa.array(np.concatenate(positions) if positions
                                 else np.empty(0, np.int64), pa.int64()),
        })

    def _may_match(self, expression: ds.Expression, table: pa.Table) -> pa.Array:
        """Which rows of ``table`` (a file table with ``stats``) may hold a row matching
        ``expression``: the vectorised pass, then Arrow on what it kept if it was not exact."""
        stats = table["stats"].combine_chunks() if table.num_rows else None
        pruned = prune(expression, stats, table.num_rows)
        if pruned.exact or not pc.any(pruned.keep).as_py():
            return pruned.keep
        # External files are not Parquet files of the table: what the ranges kept, Arrow is
        # not asked about (their scan applies the filter).
        candidates = pc.indices_nonzero(pc.and_(pruned.keep, pc.invert(_external(table))))
        if len(candidates) == 0:
            return pruned.keep
        kept = table.take(candidates)
        paths: list[str] = kept["path"].to_pylist()
        dataset = self._store.dataset(paths, self._schema, self._guarantees(kept))
        position = {self._store.full_path(p): i for i, p in enumerate(paths)}
        try:
            found = [position[f.path] for f in dataset.get_fragments(filter=expression)]
        except (pa.ArrowException, OSError) as exc:  # the filter was checked: not its fault
            raise StorageError(f"listing the data files that can match {expression} failed: "
                               f"{type(exc).__name__}: {exc}") from exc
        mask = np.asarray(pc.and_(pruned.keep, _external(table)).to_numpy(zero_copy_only=False),
                          dtype=bool).copy()
        mask[candidates.to_numpy()[found]] = True
        return pa.array(mask)

    def _guarantees(self, table: pa.Table) -> list[ds.Expression]:
        """Each file's ranges as an expression (``table``: a file table with ``stats``)."""
        return [_guarantee(ranges, self._schema) for ranges in table["stats"].to_pylist()]

    @staticmethod
    def _paths(table: pa.Table) -> list[str]:
        paths: list[str] = table["path"].to_pylist()
        return paths

    def _data_files(self, table: pa.Table) -> list[DataFile]:
        """``DataFile`` objects of the rows of ``table`` (a file table with ``location``)."""
        parse = _partition_parser(self._schema, partition_renames(
            self._versions.values(), self._schema, self._partition_by))
        parsed = {partition: parse(partition) for partition in set(table["partition"].to_pylist())}
        return [
            DataFile(location, segment, rows, size, fmt, deleted, dict(parsed[partition]),
                     tuple(deltas), external, schema_id)
            for location, segment, rows, size, fmt, deleted, partition, deltas, external, schema_id
            in zip(
                table["location"].to_pylist(), table["segment"].to_pylist(),
                table["rows"].to_pylist(), table["size"].to_pylist(), table["format"].to_pylist(),
                table["deleted_rows"].to_pylist(), table["partition"].to_pylist(),
                table["delete_files"].to_pylist(), _external(table).to_pylist(),
                table["schema_id"].to_pylist(), strict=True)
        ]

    def _check_filter(self, filter: object) -> ds.Expression | None:
        return check_filter(self._schema, filter)

    def _dataset(self, expression: ds.Expression | None, table: pa.Table) -> ds.FileSystemDataset:
        """A dataset of the files of ``table`` (a file table, with ``stats`` if ``expression``
        is given: their ranges become guarantees)."""
        guarantees = self._guarantees(table) if expression is not None else None
        return self._store.dataset(self._paths(table), self._schema, guarantees)

    def files(self, filter: ds.Expression | None = None) -> list[DataFile]:
        """The live data files; with ``filter``, only those whose ranges can match it."""
        return self._data_files(self.file_table(filter, stats=False))

    def scanner(self, columns: Sequence[str] | None = None, filter: ds.Expression | None = None,
                batch_size: int | None = None, *, memory_budget: int | None = None) -> Scanner:
        """A lazy scan of the snapshot: ``columns`` of the rows matching ``filter``, as record
        batches of at most ``batch_size`` rows (65 536 by default), holding about
        ``memory_budget`` bytes (256 MiB by default) of decoded batches at once whatever the
        table's size. Files and row groups the filter cannot match are not read; deleted rows
        never appear. Nothing is read until the scanner is iterated (see :class:`txn.Scanner`).

        Raises:
            InvalidOptionError: a bad ``columns``, ``filter``, ``batch_size`` or
                ``memory_budget`` (before anything is read).
        """
        return Scanner(self, columns, filter, batch_size, memory_budget=memory_budget)

    def _scanner(self, columns: Sequence[str] | None, filter: ds.Expression | None,
                 batch_size: int | None = None, *, paths: Sequence[str] | None = None) -> Scanner:
        """Internal (txn.duckdb, txn.polars): :meth:`scanner` over the files keyed ``paths``
        only (file table ``path`` values; None: all)."""
        return Scanner(self, columns, filter, batch_size, paths=paths)

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream of every row (``scanner()``'s): ``pa.table(snap)``,
        ``duckdb.sql("select * from snap")``, ``pl.from_arrow(snap)`` and any other consumer of
        the protocol read the snapshot lazily, deletes applied. Each call is a new scan."""
        return self.scanner().__arrow_c_stream__(requested_schema)

    def to_arrow(self, filter: ds.Expression | None = None,
                 columns: Sequence[str] | None = None) -> pa.Table:
        """The rows of the snapshot, optionally filtered and projected (``scanner()``'s
        batches in one table)."""
        return self.scanner(columns, filter).to_arrow()

    def to_pandas(self, filter: ds.Expression | None = None,
                  columns: Sequence[str] | None = None) -> Any:
        """The rows as a ``pandas.DataFrame`` (types as pyarrow maps them to pandas)."""
        return self.scanner(columns, filter).to_arrow().to_pandas()

    def _planned(self, expression: ds.Expression | None) -> pa.Table:
        """The file table of the files a read with ``expression`` opens."""
        if expression is None:
            return self._file_table(stats=False)
        table = self._file_table(stats=True)
        return table.filter(self._may_match(expression, table))

    def _written(self, table: pa.Table) -> list[pa.Schema | None]:
        """Per file of ``table``: the schema it was written with, None when the snapshot's."""
        return [None if i == self._schema_id else self._versions.get(i)
                for i in table["schema_id"].to_pylist()]

    def _one_by_one(self, table: pa.Table) -> pa.ChunkedArray:
        """Which files of ``table`` a read opens one at a time (see ``_read_parts``)."""
        return pc.or_(pc.greater(table["deleted_rows"], 0), _external(table))

    def _scan(self, expression: ds.Expression | None, table: pa.Table,
              scan: Callable[[ds.FileSystemDataset], Any]) -> Any:
        """``scan`` of a dataset of the files of ``table``, then a check that every file it
        opened has the table's columns: Arrow reads a missing column as nulls, so another
        table's Parquet file in place of a data file would change rows silently. The scan read
        those schemas already (each fragment keeps it), so the check reads nothing more."""
        dataset = self._dataset(expression, table)
        result = scan(dataset)
        relative = {self._store.full_path(p): p for p in self._paths(table)}
        for fragment in (dataset.get_fragments(filter=expression) if expression is not None
                         else dataset.get_fragments()):
            path = relative[fragment.path]
            with reading_file(path, DATA_FILE_EXPECTED):
                check_schema(path, fragment.physical_schema, self._schema)
        return result

    def count(self, filter: ds.Expression | None = None) -> int:
        """The number of live rows (matching ``filter``); without a filter no data file is read:
        the metadata table's row counts less the rows its delete deltas delete."""
        expression = self._check_filter(filter)
        if expression is None:
            if self._rows is None:  # a snapshot never changes: counted once
                table = self._file_table(stats=False)
                rows = pc.sum(table["rows"]).as_py() or 0
                deleted = pc.sum(table["deleted_rows"]).as_py() or 0
                self._rows = int(rows - deleted)
            return self._rows
        if self._files.num_rows == 0:
            return 0
        table = self._planned(expression)
        if table.num_rows == 0:
            return 0
        try:
            if pc.any(pc.or_(self._one_by_one(table),
                             pc.not_equal(table["schema_id"], self._schema_id))).as_py():
                return sum(batch.num_rows for batch in self.scanner([], expression).to_batches())
            return int(self._scan(expression, table, lambda d: d.count_rows(filter=expression)))
        except (pa.ArrowException, OSError) as exc:
            self._check_retained()
            raise_for_files(self._store, self._paths(table), self._schema, exc, filter=expression,
                            columns=[], formats=table["format"].to_pylist(),
                            written=self._written(table))

    def __repr__(self) -> str:
        return f"txn.Snapshot(instant={self._instant!r}, files={self._files.num_rows})"
