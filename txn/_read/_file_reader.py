"""``txn.FileReader``: one data file of a snapshot at a time, for engines that read on workers.

An engine (Spark's executors, Ray or Dask tasks, another process) plans on the driver with
``Snapshot.files()`` and gives each worker some of those files and the snapshot's reader; the
reader reads a file exactly as ``Snapshot.to_arrow`` does (it is the same code: the snapshot
reads its files with deletes, and external segments' files, through its own reader): Parquet
files of the table, or an external segment's Parquet, ORC, CSV or JSON file with the partition
values of its folders and the check that it is still the file ADD SEGMENT recorded, the file's
deleted rows dropped, optionally with each row's position in the file.

The reader pickles small: the table's location and storage options, its schema, the snapshot's
delete deltas by data file (paths and row counts, not positions) and the records of its external
files. A worker opens the table's storage once, on first use, and reads a file's delete deltas
when it reads the file. It is a building block: a scan of a whole snapshot (filters across
files, batches of bounded memory) is ``Snapshot``'s own business.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from metatxn.timeline import InvalidOptionError, open_storage

from .._files import (
    DataStore,
    ExternalReader,
    LiveDeltas,
    Positions,
    check_external,
    is_external,
    scan_file,
    scan_file_batches,
)
from .._results import DataFile


def check_filter(schema: pa.Schema, filter: object) -> ds.Expression | None:
    """``filter`` bound to ``schema`` (so any later error reading a file is the file's), or
    ``InvalidOptionError`` saying what a filter must be."""
    if filter is None:
        return None
    if not isinstance(filter, ds.Expression):
        raise InvalidOptionError(
            f"filter must be a pyarrow.compute.Expression (e.g. pc.field('x') > 3), "
            f"got {type(filter).__name__}"
        )
    try:  # bind it to the schema now: an empty snapshot must not hide a bad filter
        schema.empty_table().filter(filter)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidOptionError(f"filter {filter} does not apply to this table: {exc}") from None
    return filter


def check_columns(schema: pa.Schema, columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` as a list of the table's columns, or ``InvalidOptionError`` naming the others."""
    if columns is None:
        return None
    unknown = [c for c in columns if schema.get_field_index(c) < 0]
    if unknown or isinstance(columns, str):
        raise InvalidOptionError(
            f"columns must be a list of table columns; unknown {unknown or [columns]}, "
            f"table columns: {schema.names}"
        )
    return list(columns)


class FileReader:
    """Reads single data files of one snapshot, deletes applied (``Snapshot.file_reader()``).

    Picklable: ship it to workers with the :class:`txn.DataFile` objects they should read (both
    from the same snapshot: the deletes applied are the snapshot's). Safe to share between
    threads once opened.

    Example:
        >>> import pyarrow as pa, pyarrow.compute as pc, pickle, txn
        >>> t = txn.create_table("memory://doc/reader", pa.schema([("id", pa.int64())]))
        >>> _ = t.append(pa.table({"id": [1, 2, 3]})); _ = t.delete(pc.field("id") == 2)
        >>> snap = t.snapshot()
        >>> reader = pickle.loads(pickle.dumps(snap.file_reader()))   # as a worker gets it
        >>> reader.read(snap.files()[0], positions=True).to_pydict()
        {'id': [1, 3], '_position': [0, 2]}
    """

    #: The column ``read(..., positions=True)`` adds: each row's position (row number) in the
    #: file as written, what delete deltas and ``Table.lookup`` count.
    POSITION_COLUMN: ClassVar[str] = "_position"

    def __init__(self, *, uri: str, storage_options: dict[str, Any] | None, schema: pa.Schema,
                 partition_by: Sequence[str], store: DataStore, deltas: LiveDeltas,
                 schema_id: int = 0, versions: Mapping[int, pa.Schema] | None = None) -> None:
        """Internal: made by ``Snapshot.file_reader()`` (``store`` and ``deltas`` are the
        snapshot's, shared with its own reads). ``versions``: the schema of each version
        among the snapshot's files; ``schema`` is version ``schema_id``'s."""
        self._uri = uri
        self._storage_options = storage_options
        self._schema = schema
        self._schema_id = schema_id
        self._versions = dict(versions or {})
        self._partition_by = list(partition_by)
        self._store = store
        self._deltas = deltas
        self._prefix = store.location("")

    # -- pickling: what a worker needs to open the table's storage itself ---------------------

    def __getstate__(self) -> dict[str, Any]:
        external = self._store.external_reader()
        return {"uri": self._uri, "storage_options": self._storage_options,
                "schema": self._schema.serialize().to_pybytes(), "partition_by": self._partition_by,
                "schema_id": self._schema_id,
                "versions": {i: v.serialize().to_pybytes() for i, v in self._versions.items()
                             if i != self._schema_id},
                "external_options": dict(external.options), "recorded": dict(external.recorded),
                "deltas": self._deltas.by_file}

    def __setstate__(self, state: dict[str, Any]) -> None:
        schema = pa.ipc.read_schema(pa.py_buffer(state["schema"]))
        store = DataStore(open_storage(state["uri"], state["storage_options"]),
                          ExternalReader(schema, state["partition_by"], state["external_options"],
                                         state["recorded"]))
        self.__init__(uri=state["uri"], storage_options=state["storage_options"],  # type: ignore[misc]
                      schema=schema, partition_by=state["partition_by"], store=store,
                      deltas=LiveDeltas(store, state["deltas"]), schema_id=state["schema_id"],
                      versions={i: pa.ipc.read_schema(pa.py_buffer(v))
                                for i, v in state["versions"].items()})

    # -- the public reader --------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The table's schema as of the snapshot: what :meth:`read` returns (before ``columns``)."""
        return self._schema

    @property
    def partition_by(self) -> list[str]:
        """The table's partition columns (an external file's values come from its folders)."""
        return list(self._partition_by)

    def read(self, file: DataFile, *, columns: Sequence[str] | None = None,
             filter: ds.Expression | None = None, positions: bool | str = False) -> pa.Table:
        """The live rows of ``file`` (a ``DataFile`` of this snapshot) matching ``filter``.

        ``columns``: the table columns to return (all by default, in the table's order);
        ``filter``: a ``pyarrow.compute.Expression`` over the table's columns (row groups whose
        statistics rule it out are not decoded); ``positions``: add an int64 column of each
        row's position in the file, named :attr:`POSITION_COLUMN` (``True``) or as given (a
        name no table column has).

        Raises:
            InvalidOptionError: a bad ``columns`` or ``filter``, or ``file`` is not this
                table's.
            CorruptMetadataError: the file is not what the table recorded (another file under
                its name, an external file changed since ADD SEGMENT, a page that does not
                decode).
            ObjectNotFoundError: the file, or one of its delete deltas, is gone.
            StorageError: the storage refused the read.
        """
        wanted = check_columns(self._schema, columns)
        expression = check_filter(self._schema, filter)
        rows, found = self._rows(self._key(file), file.format, expression,
                                 self._schema.names if wanted is None else wanted, file.schema_id)
        if positions is False:
            return rows
        name = self.POSITION_COLUMN if positions is True else positions
        if not isinstance(name, str) or not name or self._schema.get_field_index(name) >= 0:
            raise InvalidOptionError(
                f"positions must be True, False or a column name the table does not have "
                f"(its columns: {self._schema.names}), got {positions!r}")
        return rows.append_column(pa.field(name, pa.int64(), nullable=False),
                                  pa.array(found, pa.int64()))

    def deleted_positions(self, file: DataFile) -> np.ndarray:
        """The positions of ``file``'s rows its live delete deltas delete, sorted int64 (empty
        without any): for an engine that reads the file itself and drops them."""
        return self._deltas.positions(self._key(file))

    def check(self, file: DataFile) -> None:
        """Raise ``CorruptMetadataError`` unless ``file``, an external segment's file, is what
        ADD SEGMENT recorded (size, version, rows): before its rows or positions are trusted by
        another reader than this one (an engine's own scan). The table's own files are not
        opened. :meth:`read` checks by itself."""
        check_external(self._store, [self._key(file)], [file.format])

    # -- shared with Snapshot's own reads -----------------------------------------------------

    def _rows(self, key: str, file_format: str, filter: ds.Expression | None,
              columns: Sequence[str], schema_id: int | None = None) -> tuple[pa.Table, Positions]:
        """Internal: the live rows of the file keyed ``key`` (table-relative path, or an
        external file's URL), written with version ``schema_id`` (None: the snapshot's),
        matching ``filter`` (already checked): ``columns`` of them and their positions."""
        return scan_file(self._store, key, self._schema, filter=filter, columns=columns,
                         deleted=self._deltas.positions(key), file_format=file_format,
                         written=self._written(key, schema_id))

    def _batches(self, key: str, file_format: str, filter: ds.Expression | None,
                 columns: Sequence[str], schema_id: int | None, batch_size: int
                 ) -> Iterator[pa.RecordBatch]:
        """Internal: :meth:`_rows` in batches of at most ``batch_size`` rows (fewer where
        deletes or the filter drop some), one decoded at a time (``Scanner``'s reads)."""
        for batch, _ in scan_file_batches(self._store, key, self._schema, filter=filter,
                                          columns=columns, deleted=self._deltas.positions(key),
                                          file_format=file_format,
                                          written=self._written(key, schema_id),
                                          batch_size=batch_size):
            yield batch

    def _written(self, key: str, schema_id: int | None) -> pa.Schema | None:
        """The schema the file keyed ``key`` was written with, None when the snapshot's."""
        if schema_id is None or schema_id == self._schema_id:
            return None
        written = self._versions.get(schema_id)
        if written is None:
            raise InvalidOptionError(
                f"{key}: written with table version {schema_id}, which this snapshot does not "
                "know; expected a DataFile of the snapshot the reader came from")
        return written

    def _key(self, file: DataFile) -> str:
        """The metadata table's key of ``file``: its path within the table, or its URL."""
        if not isinstance(file, DataFile):
            raise InvalidOptionError(f"file must be a txn.DataFile (from Snapshot.files()), got "
                                     f"{type(file).__name__}")
        if file.external and is_external(file.path):
            return file.path
        if not file.external and file.path.startswith(self._prefix):
            return file.path[len(self._prefix):]
        raise InvalidOptionError(f"{file.path!r} is not a data file of the table at {self._uri!r}; "
                                 f"expected a DataFile of its snapshot (Snapshot.files())")

    def __repr__(self) -> str:
        return f"txn.FileReader({self._uri!r})"
