"""``txn.Scanner``: a snapshot's rows as a stream of record batches, memory bounded per batch.

Every read of a snapshot goes through here (``Snapshot.to_arrow`` is the batches gathered into
a table), so an Arrow consumer that pulls batches (DuckDB, Polars, a ``RecordBatchReader``)
gets exactly the rows ``to_arrow`` returns, in the same order, without the table being held in
memory at once.

Planning is the snapshot's (``Snapshot._planned``: the file table pruned by column ranges); the
files are then read in three groups, in this order:

1. files of the snapshot's schema version with no live deletes, not external: one Arrow dataset
   scan, each file's ranges as its guarantee (row groups pruned by Parquet statistics), every
   file's own schema checked against the table's before any of its rows is passed on;
2. clean files of other schema versions: one dataset scan per version, columns projected by id,
   the filter applied after the projection;
3. files with live deletes and external segments' files: one at a time, batch by batch
   (``scan_file_batches``), deleted positions masked out of each batch.

Memory: Arrow's dataset scan reads ahead (batches per file, files at once); the scanner sets
that readahead from ``memory_budget`` and the file table's bytes per row, so a scan holds about
the budget whatever the table's size. The floor is one batch per file read at once (and an
external ORC, CSV or JSON file whole: those formats are read a file at a time).

A failure while reading is diagnosed as ``to_arrow``'s always was: a clean since the snapshot
was taken raises ``SnapshotExpiredError``; otherwise the files of the group being read are read
again one by one and the error names the one at fault. Batches already passed on stay passed
on, as with any stream.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from metatxn.timeline import InvalidOptionError

from .._files import DATA_FILE_EXPECTED, check_schema, raise_for_files, reading_file
from .._schema import same_columns, version_projection
from ._file_reader import check_columns, check_filter

if TYPE_CHECKING:
    from ._snapshot import Snapshot

#: Rows per batch unless asked otherwise (Arrow's own default is 131 072; half keeps a batch
#: of a wide table in a few MiB).
DEFAULT_BATCH_SIZE = 65_536
#: Bytes a scan may hold in decoded batches unless asked otherwise.
DEFAULT_MEMORY_BUDGET = 256 * 1024 * 1024
#: Decoded bytes per row a column of variable width is assumed to take at least (a short
#: string: 4 bytes of offset and a few characters), for the readahead estimate.
_VARIABLE_BYTES = 32
#: Arrow's readahead defaults: the most the scanner asks for.
_MAX_BATCH_READAHEAD, _MAX_FRAGMENT_READAHEAD = 16, 4


def _positive(name: str, value: object, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidOptionError(f"{name} must be a positive int, got {value!r}")
    return value


class Scanner:
    """The rows of a snapshot matching a filter, some columns of them, as record batches.

    Made by ``Snapshot.scanner()`` or ``Table.scanner()``; cheap until iterated (nothing is
    read to make one). Each of :meth:`to_batches`, :meth:`to_reader`, :meth:`to_arrow` and
    ``__arrow_c_stream__`` starts a new scan of the same snapshot, so a scanner can be read any
    number of times and always gives the same rows.

    Example:
        >>> import pyarrow as pa, pyarrow.compute as pc, txn
        >>> t = txn.create_table("memory://doc/scanner", pa.schema([("id", pa.int64())]))
        >>> _ = t.append(pa.table({"id": list(range(10))})); _ = t.delete(pc.field("id") == 3)
        >>> sc = t.scanner(filter=pc.field("id") < 6, batch_size=4)
        >>> [b.num_rows for b in sc.to_batches()], sc.count_rows()
        ([3, 2], 5)
        >>> pa.table(sc)["id"].to_pylist()          # any Arrow consumer: the PyCapsule stream
        [0, 1, 2, 4, 5]
        >>> sc.head(2)["id"].to_pylist()
        [0, 1]
    """

    def __init__(self, snapshot: Snapshot, columns: Sequence[str] | None, filter: object,
                 batch_size: object = None, *, memory_budget: object = None,
                 paths: Sequence[str] | None = None) -> None:
        """Internal: ``Snapshot.scanner`` makes it. ``paths``: read only these files of the
        snapshot (file table ``path`` keys), for an engine that reads the others itself."""
        schema = snapshot.schema
        self._snapshot = snapshot
        self._filter = check_filter(schema, filter)
        self._columns = check_columns(schema, columns)
        self._batch_size = _positive("batch_size", batch_size, DEFAULT_BATCH_SIZE)
        self._budget = _positive("memory_budget", memory_budget, DEFAULT_MEMORY_BUDGET)
        if paths is not None and (isinstance(paths, str)
                                  or not all(isinstance(p, str) for p in paths)):
            raise InvalidOptionError(f"paths must be a list of file table paths, got {paths!r}")
        self._paths = None if paths is None else list(paths)
        self._schema = schema if self._columns is None else pa.schema(
            [schema.field(name) for name in self._columns])

    @property
    def schema(self) -> pa.Schema:
        """The schema of every batch: the snapshot's, projected to ``columns``."""
        return self._schema

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def batch_size(self) -> int:
        """The most rows a batch holds (deletes and the filter make some smaller)."""
        return self._batch_size

    @property
    def memory_budget(self) -> int:
        """Bytes of decoded batches the scan aims to hold at once (readahead included)."""
        return self._budget

    # -- the stream ---------------------------------------------------------------------------

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as record batches of :attr:`schema`, read as they are pulled."""
        return self._batches(self._batch_size, readahead=True)

    def to_reader(self) -> pa.RecordBatchReader:
        """A ``pyarrow.RecordBatchReader`` over a new scan (read as it is pulled)."""
        return pa.RecordBatchReader.from_batches(self._schema, self.to_batches())

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream of a new scan: what DuckDB, Polars, ``pa.table()`` and
        any other Arrow consumer take. Each call starts a new scan of the same snapshot."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def to_arrow(self) -> pa.Table:
        """All the rows as one table (held in memory: prefer the stream for large scans)."""
        return pa.Table.from_batches(list(self.to_batches()), schema=self._schema)

    def count_rows(self, filter: ds.Expression | None = None) -> int:
        """How many rows the scan gives (those that also match ``filter``, if given); without
        any filter, from the metadata table alone."""
        extra = check_filter(self._snapshot.schema, filter)
        combined = extra if self._filter is None else (
            self._filter if extra is None else self._filter & extra)
        if self._paths is None:
            return self._snapshot.count(combined)
        counted = Scanner(self._snapshot, [], combined, self._batch_size,
                          memory_budget=self._budget, paths=self._paths)
        return sum(batch.num_rows for batch in counted.to_batches())

    def head(self, n: int = 5) -> pa.Table:
        """The first ``n`` rows of the scan; reading stops as soon as it has them (no
        readahead: the first file's first batches are all a scan without filter decodes)."""
        wanted = _positive("n", n, 5) if n != 0 else 0
        found: list[pa.RecordBatch] = []
        if wanted:
            batches = self._batches(min(self._batch_size, max(wanted, 1024)), readahead=False)
            try:
                for batch in batches:
                    found.append(batch.slice(0, wanted))
                    wanted -= found[-1].num_rows
                    if not wanted:
                        break
            finally:
                batches.close()  # closes Arrow's scan: no more row groups are read
        return pa.Table.from_batches(found, schema=self._schema)

    def __repr__(self) -> str:
        return (f"txn.Scanner(instant={self._snapshot.instant!r}, columns={self._columns!r}, "
                f"filter={self._filter!r})")

    # -- reading ------------------------------------------------------------------------------

    def _batches(self, batch_size: int, *, readahead: bool
                 ) -> Generator[pa.RecordBatch, None, None]:
        snap = self._snapshot
        if not snap._files.num_rows:
            return
        table = snap._planned(self._filter)
        if self._paths is not None:
            table = table.filter(pc.is_in(table["path"], pa.array(self._paths, pa.string())))
        one_by_one = snap._one_by_one(table)
        clean = table.filter(pc.invert(one_by_one))
        for schema_id in sorted(set(clean["schema_id"].to_pylist())):
            group = clean.filter(pc.equal(clean["schema_id"], schema_id))
            # Without readahead one file at a time: Arrow opens the next file of a dataset
            # while it reads the current one, whatever its readahead is set to.
            for part in [group] if readahead else [group.slice(i, 1)
                                                   for i in range(group.num_rows)]:
                yield from self._diagnosed(part, self._dataset_batches(part, schema_id,
                                                                       batch_size, readahead))
        others = table.filter(one_by_one)
        if others.num_rows:
            yield from self._diagnosed(others, self._one_by_one(others, batch_size))

    def _diagnosed(self, files: pa.Table, batches: Generator[pa.RecordBatch, None, None]
                   ) -> Iterator[pa.RecordBatch]:
        """``batches`` (a read of ``files``, a file table), with a failure turned into the
        error that names its cause (see the module's docstring)."""
        snap = self._snapshot
        try:
            yield from batches
        except (pa.ArrowException, OSError) as exc:
            snap._check_retained()  # a clean since this snapshot was taken: expired, not damaged
            raise_for_files(snap._store, snap._paths(files), snap.schema, exc, filter=self._filter,
                            columns=self._columns, formats=files["format"].to_pylist(),
                            written=snap._written(files))
        finally:
            batches.close()

    def _dataset_batches(self, files: pa.Table, schema_id: int, batch_size: int,
                         readahead: bool) -> Generator[pa.RecordBatch, None, None]:
        """Groups 1 and 2: one dataset scan of ``files``, all written with version
        ``schema_id``; each file's schema checked before any of its rows is passed on."""
        snap = self._snapshot
        schema, expression, columns = snap.schema, self._filter, self._columns
        version = schema if schema_id == snap.schema_id else snap._versions[schema_id]
        written = None if same_columns(version, schema) else version
        if schema_id == snap.schema_id:
            dataset = snap._dataset(expression, files)
        else:
            dataset = snap._store.dataset(snap._paths(files), version)
        ahead = self._readahead(files, batch_size, readahead)
        options = {"batch_size": batch_size, "batch_readahead": ahead.batches,
                   "fragment_readahead": ahead.fragments, "use_threads": True,
                   "fragment_scan_options": ds.ParquetFragmentScanOptions(
                       pre_buffer=ahead.pre_buffer)}
        if written is None:
            scanner = dataset.scanner(columns=columns, filter=expression, **options)
        else:
            scanner = dataset.scanner(columns=version_projection(written, schema), **options)
        relative = {snap._store.full_path(p): p for p in snap._paths(files)}
        checked: set[str] = set()
        for tagged in scanner.scan_batches():
            fragment_path = tagged.fragment.path
            if fragment_path not in checked:
                self._check_fragment(relative[fragment_path], tagged.fragment, version)
                checked.add(fragment_path)
            batch = tagged.record_batch
            if written is not None:
                batch = batch.cast(schema)
                if expression is not None:
                    batch = batch.filter(expression)
                if columns is not None:
                    batch = batch.select(columns)
            if batch.num_rows:
                yield self._conformed(batch)
        # A file whose rows the filter all dropped yields no batch: check it all the same
        # (a missing column would read as nulls and match nothing, silently).
        fragments = (dataset.get_fragments(filter=expression)
                     if expression is not None and written is None else dataset.get_fragments())
        for fragment in fragments:
            if fragment.path not in checked:
                self._check_fragment(relative[fragment.path], fragment, version)

    @staticmethod
    def _check_fragment(path: str, fragment: ds.Fragment, schema: pa.Schema) -> None:
        with reading_file(path, DATA_FILE_EXPECTED):
            check_schema(path, fragment.physical_schema, schema)

    def _one_by_one(self, files: pa.Table, batch_size: int
                    ) -> Generator[pa.RecordBatch, None, None]:
        """Group 3: files with deletes and external files, one at a time."""
        snap = self._snapshot
        reader = snap.file_reader()
        wanted = self._columns if self._columns is not None else snap.schema.names
        for path, file_format, schema_id in zip(snap._paths(files), files["format"].to_pylist(),
                                                files["schema_id"].to_pylist(), strict=True):
            for batch in reader._batches(path, file_format, self._filter, wanted, schema_id,
                                         batch_size):
                if batch.num_rows:
                    yield self._conformed(batch)

    def _conformed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` as :attr:`schema` exactly (field metadata differs between readers)."""
        if batch.schema.equals(self._schema, check_metadata=True) or not len(self._schema):
            return batch
        return pa.RecordBatch.from_arrays(batch.columns, schema=self._schema)

    def _readahead(self, files: pa.Table, batch_size: int, readahead: bool) -> _Readahead:
        """How far Arrow's scan of ``files`` may read ahead to keep about ``memory_budget``
        bytes of decoded batches: batches in flight per file times files in flight times a
        batch's bytes, with a quarter of the budget left for the allocator's slack. Parquet's
        pre-buffering (whole column chunks of a file fetched at once, which saves round trips
        to object stores) only when the files in flight fit in a quarter of the budget too."""
        if not readahead:
            return _Readahead(1, 1, False)
        batch_bytes = batch_size * _row_bytes(self._schema, files, len(self._snapshot.schema))
        slots = max(int(self._budget * 3 // 4 // batch_bytes), 1)
        fragments = min(max(slots // 8, 1), _MAX_FRAGMENT_READAHEAD)
        batches = min(max(slots // fragments, 1), _MAX_BATCH_READAHEAD)
        width = len(self._schema) / max(len(self._snapshot.schema), 1)
        largest = (pc.max(files["size"]).as_py() or 0) * width
        return _Readahead(batches, fragments, fragments * largest <= self._budget // 4)


class _Readahead(NamedTuple):
    batches: int
    fragments: int
    pre_buffer: bool


def _row_bytes(schema: pa.Schema, files: pa.Table, columns: int) -> float:
    """Decoded bytes per row of ``schema`` (the projected columns): fixed-width columns exactly,
    others as their share of the files' stored bytes per row, at least ``_VARIABLE_BYTES``."""
    rows = pc.sum(files["rows"]).as_py() or 0
    stored = (pc.sum(files["size"]).as_py() or 0) / max(rows, 1) / max(columns, 1)
    total = 0.0
    for field in schema:
        try:
            total += field.type.bit_width / 8
        except ValueError:  # not fixed width: strings, lists, structs
            total += max(stored, _VARIABLE_BYTES)
    return max(total, 1.0)
