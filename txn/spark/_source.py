"""The ``metatxn`` Spark data source: ``df.write.format("metatxn")`` and ``spark.read.format("metatxn")``.

A thin layer over the same paths as ``txn.spark.write`` and ``txn.spark.read``, through PySpark's
Python Data Source API, whose hooks run in Spark's own Python workers, not in the caller's
process (see design/spark.md):

* ``writer()`` (a planning worker) begins a two-phase write (``Table.begin_write``, its
  heartbeat detached); each task writes its files with ``txn.write_files``, as
  ``txn.spark.write``'s tasks do, and beats the instant's heartbeat; ``commit()`` (another
  worker, without Spark) commits once (``PendingWrite.resume(ticket).commit``); ``abort()``
  rolls the instant back unless it completed.
* ``reader()`` resolves the snapshot (option ``asOf``) on the planning worker, one partition per
  data file; tasks read their file with pyarrow and drop deleted positions. With a change option
  (``startingInstant``, ``readChangeFeed``, ...) it reads a window of the change feed instead
  (:mod:`._change_read`).
* ``streamReader()`` (``spark.readStream.format("metatxn")``): the change feed as a stream, exactly
  once (:mod:`._stream_source`; options in :mod:`._change_options`).

Writes create the table where none exists, from the DataFrame's schema and the options
``partitionBy``, ``recordKey``, ``sortBy`` and ``properties.<key>``; ``mergeSchema=true`` (or
``schema_mode=merge``) writes as ``txn.spark.write(..., schema_mode="merge")`` (Spark refuses
``DataFrameWriter.partitionBy`` for every Python data source, so partition columns are an
option). On keyed tables each task refuses keys the table holds already, and ``commit()`` checks
that no key repeats among the tasks' (read back from their index log files: it cannot run
Spark jobs).

What it does not do, and why: modes other than ``append`` and ``overwrite`` raise in Spark before
any hook runs (Spark offers no others to Python sources), so there is no upsert through the
format (use ``txn.spark.write``); reads have no column pruning or filter pushdown (use
``txn.spark.read``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)

import txn

from .. import DataFile, FileReader, InvalidOptionError, open_table
from ._change_options import ChangeOptions, change_options
from ._change_read import ChangeReader, change_schema
from ._located import BY_NAME_WRITE, created_by_catalog, located, location_of, source_options
from ._sql._catalog import set_warehouse
from ._sql._published import publish_warehouse
from ._stream_source import ChangeStreamReader
from ._tables import Layout, layout_of_options, resolve, schema_mode_of_options
from ._types import conform, spark_schema, table_schema
from ._workers import ensure_workers_run_metatxn
from ._write import _task_identity


def _path(options: Mapping[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise InvalidOptionError("format('metatxn') needs the table location: .load(uri) or .save(uri); "
                                 + BY_NAME_WRITE)
    if path.startswith("file:/") and not path.startswith("file://"):
        return path.removeprefix("file:")  # Spark's form of a local path
    return path


def _change_read(options: Mapping[str, str]) -> ChangeOptions | None:
    """The options of a read of changes (a stream's, or a batch read naming any change option),
    checked; None for a snapshot read (``asOf`` or nothing), whose options are not."""
    if all(name.lower() in ("path", "asof") for name in options):
        return None
    if "asof" in (name.lower() for name in options):
        raise InvalidOptionError("format('metatxn') option asOf reads a snapshot; it cannot be "
                                 "combined with the options of a read of changes (startingInstant, "
                                 "endingInstant, readChangeFeed, maxFilesPerTrigger, maxRowsPerTrigger)")
    return change_options(options)


class MetatxnDataSource(DataSource):
    """``format("metatxn")``."""

    def __init__(self, options: Any) -> None:
        # Spark's catalog creating a table adds keys of its own (:mod:`._located`).
        self._in_catalog = created_by_catalog(options)
        super().__init__(source_options(options) if self._in_catalog else options)

    @classmethod
    def name(cls) -> str:
        return "metatxn"

    def schema(self) -> Any:
        table = open_table(_path(self.options))
        changes = _change_read(self.options)
        if changes is not None:
            return spark_schema(change_schema(table, changes))
        # The snapshot's schema: a read as of an older instant has that instant's columns.
        schema = spark_schema(table.snapshot(self.options.get("asof")).schema)
        return located(schema, _path(self.options)) if self._in_catalog else schema

    def _locate(self, schema: Any) -> None:
        """A read of a table of Spark's catalog: its location from the schema (:mod:`._located`)."""
        location = location_of(schema)
        if not self.options.get("path") and location is not None:
            self.options["path"] = location

    def reader(self, schema: Any) -> DataSourceReader:
        self._locate(schema)
        changes = _change_read(self.options)
        if changes is not None:
            return ChangeReader(_path(self.options), changes, schema)
        return _Reader(_path(self.options), self.options.get("asof"), schema)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        self._locate(schema)
        options = {k: v for k, v in self.options.items() if k.lower() != "asof"}
        return ChangeStreamReader(_path(self.options), change_options(options), schema,
                                  as_of=len(options) < len(self.options))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
        return _Writer(_path(self.options), overwrite, layout_of_options(self.options), schema,
                       schema_mode_of_options(self.options))


class _File(InputPartition):
    def __init__(self, file: DataFile | None) -> None:
        super().__init__(file)
        self.file = file


class _Reader(DataSourceReader):
    def __init__(self, uri: str, as_of: str | None, schema: Any) -> None:
        #: The schema Spark asks for (the table's, or one the user gave with ``.schema(...)``).
        self._wanted = schema
        snapshot = open_table(uri).snapshot(as_of)
        #: Pickled with this reader to the tasks: each reads its file through it.
        self._reader: FileReader = snapshot.file_reader()
        self._files = snapshot.files()
        # Checked here as well as by the tasks: a changed external file fails the plan, before
        # any task runs.
        for data_file in self._files:
            self._reader.check(data_file)

    def partitions(self) -> list[InputPartition]:
        return [_File(data_file) for data_file in self._files] or [_File(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _File)
        if partition.file is None:
            return
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = self._reader.schema
        target = to_arrow_schema(self._wanted, timezone="UTC")
        unknown = [name for name in target.names if schema.get_field_index(name) < 0]
        if unknown:
            raise InvalidOptionError(f"the schema given to read names column(s) {unknown} the table "
                                     f"does not have; its columns: {schema.names}")
        yield from self._reader.read(partition.file, columns=target.names).cast(target).to_batches()


@dataclass
class _Reports(WriterCommitMessage):
    report: txn.WrittenFiles


class _Writer(DataSourceArrowWriter):
    """A pending write (``Table.begin_write``) begun on the planning worker: the tasks write with
    its ticket, and another worker commits or aborts it (``PendingWrite.resume``)."""

    def __init__(self, uri: str, overwrite: bool, layout: Layout, schema: Any,
                 schema_mode: str | None = None) -> None:
        mode = "overwrite" if overwrite else "append"
        # Created at once, not staged: commit() runs as a separate step that opens the table by
        # its location (a job that fails leaves the empty table, as before).
        found = resolve(uri, schema, mode, layout, None, staged=False, schema_mode=schema_mode)
        assert found is not None  # append and overwrite never ignore an existing table
        # A merge's schema change is made by the commit, with the rows; the ticket carries the
        # schema after it, which the tasks conform their rows to (missing columns as nulls).
        merge = {"schema_mode": "merge", "data_schema": table_schema(schema)} \
            if schema_mode == "merge" else {}
        # The heartbeat thread cannot follow this writer into the tasks: they beat instead.
        self._ticket = txn.open_table(uri).begin_write(mode, **merge).detach()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Reports:
        schema = self._ticket.table_schema
        return _Reports(txn.write_files(self._ticket, (conform(batch, schema) for batch in iterator),
                                        task_id=_task_identity()))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit once; on a keyed table, after checking that no key repeats among the tasks'
        (``commit()`` cannot run Spark jobs, so the keys come back from the index log files the
        tasks wrote; each task refused keys the table held already, as a local append does)."""
        reports = [m.report for m in messages if isinstance(m, _Reports)]
        txn.PendingWrite.resume(self._ticket).commit(reports, check_keys=True)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Spark may call abort after a commit that raised: only a pending instant is rolled back.
        txn.PendingWrite.resume(self._ticket).abort()


def register(spark: Any, *, warehouse: str | None = None) -> None:
    """Register the ``metatxn`` format with ``spark`` (once per session).

    Its hooks run in Spark's Python workers: they are checked first (WorkerEnvironmentError).
    With ``warehouse`` (a path or URI), :func:`txn.spark.sql` also finds tables by name there:
    ``t`` at ``<warehouse>/t``, ``db.t`` at ``<warehouse>/db.db/t``; and every table there is
    entered in Spark's own catalog under that name, for ``spark.table(name)`` and plain
    ``spark.sql`` (:mod:`._sql._published`).
    """
    ensure_workers_run_metatxn(spark)
    spark.dataSource.register(MetatxnDataSource)
    if warehouse is not None:
        publish_warehouse(spark, set_warehouse(spark, warehouse))
