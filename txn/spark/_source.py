"""The ``metatxn`` Spark data source: ``df.write.format("metatxn")`` and ``spark.read.format("metatxn")``.

A thin layer over the same paths as ``txn.spark.write`` and ``txn.spark.read``, through PySpark's
Python Data Source API, whose hooks run in Spark's own Python workers, not in the caller's
process (see design/spark.md):

* ``writer()`` (a planning worker) begins a two-phase write (``Table.begin_write``, its
  heartbeat detached); each task writes its files with ``txn.write_files``, as
  ``txn.spark.write``'s tasks do, and beats the instant's heartbeat; ``commit()`` (another
  worker, without Spark) commits once (``PendingWrite.resume(ticket).commit``); ``abort()``
  rolls the instant back unless it completed.
* ``reader()`` resolves the snapshot (option ``asOf``, or Hudi's ``as.of.instant``) on the
  planning worker; with option ``pushFilters`` (not the default: :class:`_PushingReader` says
  why), ``pushFilters`` keeps the filters :mod:`._pushed` translates exactly (files pruned by
  the metadata table's column ranges, row groups by their statistics, rows filtered exactly)
  and gives Spark back the others; ``partitions()`` packs the remaining files into
  about the session's parallelism of tasks, as Spark packs a file scan; tasks read their files
  with the snapshot's ``txn.FileReader`` (deleted rows dropped, external segments read). With a
  change option (``startingInstant``, ``readChangeFeed``, ...) it reads a window of the change
  feed instead (:mod:`._change_read`).
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
format (use ``txn.spark.write``). Reads have no column pruning: PySpark 4.3 gives Python sources
none (every column of the table, or of a ``.schema(...)`` the user gives, crosses to the JVM),
so ``txn.spark.read`` (Spark's own Parquet scan) stays faster where a query uses few columns
(bench/README.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    Filter,
    InputPartition,
    WriterCommitMessage,
)

import txn

from .. import DataFile, FileReader, InvalidOptionError, Snapshot, open_table
from ._change_options import ChangeOptions, change_options
from ._change_read import ChangeReader, change_schema
from ._located import BY_NAME_WRITE, created_by_catalog, located, location_of, source_options
from ._pushed import columns_typed_alike, translate
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


#: The options naming a snapshot: ``asOf``, and Hudi's ``as.of.instant`` (lower case: Spark's
#: options are case-insensitive).
_AS_OF = ("asof", "as.of.instant")
#: The option that has a snapshot read take Spark's filters (see :class:`_PushingReader`).
_PUSH = "pushfilters"


def _pushes(options: Mapping[str, str]) -> bool:
    value = next((v for k, v in options.items() if k.lower() == _PUSH), "false").strip().lower()
    if value not in ("true", "false"):
        raise InvalidOptionError(f"format('metatxn') option pushFilters must be true or false, "
                                 f"got {value!r}")
    return value == "true"


def _as_of(options: Mapping[str, str]) -> str | None:
    """The snapshot a read names (None: the latest); ``asOf`` and ``as.of.instant`` are one
    option under two names."""
    given = {name.lower(): value for name, value in options.items() if name.lower() in _AS_OF}
    if len(given) > 1:
        raise InvalidOptionError("format('metatxn') options asOf and as.of.instant name the same "
                                 "thing (the snapshot to read); give one of them")
    return next(iter(given.values()), None)


def _change_read(options: Mapping[str, str]) -> ChangeOptions | None:
    """The options of a read of changes (a stream's, or a batch read naming any change option),
    checked; None for a snapshot read (``asOf``/``as.of.instant`` or nothing), whose options
    are not."""
    if all(name.lower() in ("path", _PUSH, *_AS_OF) for name in options):
        return None
    if any(name.lower() in (_PUSH, *_AS_OF) for name in options):
        raise InvalidOptionError("format('metatxn') options asOf (as.of.instant) and pushFilters "
                                 "read a snapshot; they cannot be combined with the options of a "
                                 "read of changes (startingInstant, endingInstant, readChangeFeed, "
                                 "maxFilesPerTrigger, maxRowsPerTrigger)")
    return change_options(options)


class MetatxnDataSource(DataSource):
    """``format("metatxn")``."""

    #: How many tasks a snapshot read aims at (the session's default parallelism, set by
    #: :func:`register` on the class it registers; the hooks run where no session is at hand).
    parallelism: int = os.cpu_count() or 2

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
        schema = spark_schema(table.snapshot(_as_of(self.options)).schema)
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
        reader = _PushingReader if _pushes(self.options) else _Reader
        return reader(_path(self.options), _as_of(self.options), schema, self.parallelism)

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        self._locate(schema)
        options = {k: v for k, v in self.options.items() if k.lower() not in _AS_OF}
        return ChangeStreamReader(_path(self.options), change_options(options), schema,
                                  as_of=len(options) < len(self.options))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
        return _Writer(_path(self.options), overwrite, layout_of_options(self.options), schema,
                       schema_mode_of_options(self.options))


class _Files(InputPartition):
    """Some data files of the snapshot, read one after another by one task."""

    def __init__(self, files: list[DataFile]) -> None:
        super().__init__(len(files))
        self.files = files


#: Spark's own split planning for file scans (``spark.sql.files.maxPartitionBytes`` and
#: ``openCostInBytes`` at their defaults): a file costs its size plus the cost of opening it.
_MAX_SPLIT = 128 << 20
_OPEN_COST = 4 << 20


def plan(files: list[DataFile], parallelism: int) -> list[list[DataFile]]:
    """The files in groups of about ``max(total / parallelism, open cost)`` bytes (at most
    :data:`_MAX_SPLIT`), the biggest first, as Spark packs a file scan's files: many small
    files share a task, and each core gets work when there are fewer files than cores."""
    live = sorted(files, key=lambda f: (-f.size, f.path))
    total = sum(f.size + _OPEN_COST for f in live)
    split = min(_MAX_SPLIT, max(_OPEN_COST, total // max(1, parallelism)))
    groups: list[list[DataFile]] = []
    size = 0
    for data_file in live:
        if groups and groups[-1] and size + data_file.size <= split:
            groups[-1].append(data_file)
        else:
            groups.append([data_file])
            size = 0
        size += data_file.size + _OPEN_COST
    return groups


class _Reader(DataSourceReader):
    """A snapshot read, its files packed into tasks (:func:`plan`); with a filter
    (:class:`_PushingReader`), files pruned by the metadata table's column ranges, then row
    groups by their statistics, and the rows filtered exactly."""

    def __init__(self, uri: str, as_of: str | None, schema: Any, parallelism: int) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        #: The schema Spark asks for (the table's, or one the user gave with ``.schema(...)``).
        self._wanted = to_arrow_schema(schema, timezone="UTC")
        self._parallelism = parallelism
        snapshot = open_table(uri).snapshot(as_of)
        #: Pickled with this reader to the tasks: each reads its files through it.
        self._reader: FileReader = snapshot.file_reader()
        table = self._reader.schema
        unknown = [name for name in self._wanted.names if table.get_field_index(name) < 0]
        if unknown:
            raise InvalidOptionError(f"the schema given to read names column(s) {unknown} the table "
                                     f"does not have; its columns: {table.names}")
        self._typed_alike = columns_typed_alike(spark_schema(table), schema)
        #: The pushed filters translated (None: none), applied to files, row groups and rows.
        self._filter: ds.Expression | None = None
        self._snapshot: Snapshot | None = snapshot  # planning only: not shipped to the tasks

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_snapshot": None}

    def partitions(self) -> list[InputPartition]:
        assert self._snapshot is not None
        files = self._snapshot.files(self._filter)
        # Checked here as well as by the tasks: a changed external file fails the plan, before
        # any task runs.
        for data_file in files:
            if data_file.external:
                self._reader.check(data_file)
        return [_Files(group) for group in plan(files, self._parallelism)] or [_Files([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Files)
        names = self._wanted.names
        for data_file in partition.files:
            rows = self._reader.read(data_file, columns=names, filter=self._filter)
            if rows.num_rows:
                yield from rows.cast(self._wanted).to_batches()


class _PushingReader(_Reader):
    """A snapshot read that takes Spark's filters (option ``pushFilters``).

    Not the default, because of PySpark 4.3: Spark keeps the outcome of ``pushFilters`` (this
    reader and its partitions) on the data source object that every scan of one DataFrame or
    view shares (``PythonScanBuilder.pushFilters`` calls ``PythonDataSourceV2.setReadInfo``), so
    when one query scans it twice with different filters (a self-join, a union, a subquery),
    every scan reads with the filters pushed last and rows go missing. Scans of separate
    ``load()`` calls do not share it.
    """

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Keep the filters translated exactly (:mod:`._pushed`); give Spark back the others."""
        self._filter, rest = translate(filters, self._reader.schema, self._typed_alike)
        yield from rest


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


#: Spark's switch for ``DataSourceReader.pushFilters`` (Spark 4.1+).
PUSHDOWN = "spark.sql.python.filterPushdown.enabled"


def register(spark: Any, *, warehouse: str | None = None) -> None:
    """Register the ``metatxn`` format with ``spark`` (once per session).

    Its hooks run in Spark's Python workers: they are checked first (WorkerEnvironmentError).
    With ``warehouse`` (a path or URI), :func:`txn.spark.sql` also finds tables by name there:
    ``t`` at ``<warehouse>/t``, ``db.t`` at ``<warehouse>/db.db/t``; and every table there is
    entered in Spark's own catalog under that name, for ``spark.table(name)`` and plain
    ``spark.sql`` (:mod:`._sql._published`).

    Turns on ``spark.sql.python.filterPushdown.enabled`` (off by default in Spark 4.x, and
    Spark refuses to read a source whose reader takes filters while it is off): it changes
    nothing for Python sources that take no filters.
    """
    ensure_workers_run_metatxn(spark)
    spark.conf.set(PUSHDOWN, "true")
    # A subclass made here pickles by value (it is no module's attribute): the session's
    # parallelism reaches the planning worker with it.
    source = type(MetatxnDataSource.__name__, (MetatxnDataSource,),
                  {"parallelism": int(spark.sparkContext.defaultParallelism),
                   "__doc__": MetatxnDataSource.__doc__})
    spark.dataSource.register(source)
    if warehouse is not None:
        publish_warehouse(spark, set_warehouse(spark, warehouse))
