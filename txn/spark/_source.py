"""The ``metatxn`` Spark data source: ``df.write.format("metatxn")`` and ``spark.read.format("metatxn")``.

A thin layer over the same paths as ``txn.spark.write`` and ``txn.spark.read``, through PySpark's
Python Data Source API, whose hooks run in Spark's own Python workers, not in the caller's
process (see design/spark.md):

* ``writer()`` (a planning worker) begins the instant; each task writes its files exactly as
  ``txn.spark.write``'s tasks do and beats the instant's heartbeat; ``commit()`` (another
  worker, without Spark) commits once; ``abort()`` rolls the instant back unless it completed.
* ``reader()`` resolves the snapshot (option ``asOf``) on the planning worker, one partition per
  data file; tasks read their file with pyarrow and drop deleted positions.

Writes create the table where none exists, from the DataFrame's schema and the options
``partitionBy``, ``recordKey``, ``sortBy`` and ``properties.<key>`` (Spark refuses
``DataFrameWriter.partitionBy`` for every Python data source, so partition columns are an
option). On keyed tables ``commit()`` checks the keys the tasks wrote to their index log files:
it cannot run Spark jobs.

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
    InputPartition,
    WriterCommitMessage,
)

from timeline import DuplicateKeyError, InvalidOptionError, Timeline, open_storage

from .. import DataFile, FileReader, open_table
from .._commit import Append, Overwrite, Pending, RowChanges, Written, finish, protocol_of
from .._context import ACTION_OF, TableContext, open_context, target_file_bytes
from .._files import LiveDeltas
from .._rows import describe, repeated
from .._write import State, find_keys, latest
from ._sql._catalog import set_warehouse
from ._tables import Layout, layout_of_options, resolve
from ._types import spark_schema
from ._workers import ensure_workers_run_metatxn
from ._write import _Job, _remove_unreported, _write_task, collect_reports


def _path(options: Mapping[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise InvalidOptionError("format('metatxn') needs the table location: .load(uri) or .save(uri)")
    if path.startswith("file:/") and not path.startswith("file://"):
        return path.removeprefix("file:")  # Spark's form of a local path
    return path


class MetatxnDataSource(DataSource):
    """``format("metatxn")``."""

    @classmethod
    def name(cls) -> str:
        return "metatxn"

    def schema(self) -> Any:
        return spark_schema(open_table(_path(self.options)).schema)

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader(_path(self.options), self.options.get("asof"), schema)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
        return _Writer(_path(self.options), overwrite, layout_of_options(self.options), schema)


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
    kinds: list[str]
    payloads: list[bytes]


class _Writer(DataSourceArrowWriter):
    def __init__(self, uri: str, overwrite: bool, layout: Layout, schema: Any) -> None:
        self._uri = uri
        self._mode = "overwrite" if overwrite else "append"
        # Created at once, not staged: commit() runs as a separate step that opens the table by
        # its location (a job that fails leaves the empty table, as before).
        found = resolve(uri, schema, self._mode, layout, None, staged=False)
        assert found is not None  # append and overwrite never ignore an existing table
        table = found
        pending = protocol_of(table).begin(self._mode, ACTION_OF[self._mode], new_segment=True)
        # The heartbeat thread cannot follow this writer into the tasks: they beat instead.
        pending.heartbeat.stop(delete=False)
        assert pending.segment is not None
        self._instant = pending.instant.time
        self._segment = pending.segment
        index = table.metadata.record_index
        self._job = _Job(
            uri=uri, storage_options=None, schema=table.schema.serialize().to_pybytes(),
            instant=self._instant, segment=pending.segment, partition_by=table.partition_by,
            sort_by=table.sort_by, key_columns=table.record_key_columns,
            shards=index.shards if index is not None else 0,
            target_file_bytes=target_file_bytes(table.config.properties))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Reports:
        timeline = Timeline(open_storage(self._uri))
        timeline.heartbeat(timeline.load().get(self._instant) or _missing(self._instant)).beat()
        kinds: list[str] = []
        payloads: list[bytes] = []
        for report in _write_task(self._job, iterator):
            kinds += report.column("kind").to_pylist()
            payloads += report.column("payload").to_pylist()
        return _Reports(kinds, payloads)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        table = open_context(self._uri)
        instant = table.timeline.load().get(self._instant) or _missing(self._instant)
        pending = Pending(instant, self._segment, table.timeline.heartbeat(instant))
        try:
            reports = [m for m in messages if isinstance(m, _Reports)]
            kinds = [k for m in reports for k in m.kinds]
            payloads = [p for m in reports for p in m.payloads]
            statuses, parts, shards = collect_reports(kinds, payloads)
            _remove_unreported(table, self._instant, {s.path for s in statuses}, parts)
            change = self._change(table, shards)
        except BaseException:
            protocol_of(table).roll_back(instant)
            raise
        finish(table, change, None, pending, Written(statuses=statuses, index_sizes=shards))

    def _change(self, table: TableContext, shards: dict[int, int]) -> RowChanges | Overwrite:
        """The change to commit; on a keyed table, after checking the keys the tasks wrote.

        ``commit()`` cannot run Spark jobs, so the keys come back from the index log files the
        tasks wrote for this instant: none may repeat, and an append may not bring a key the
        table already holds (found through the record index, as a local append does).
        """
        replace = self._mode == "overwrite"
        columns = table.record_key_columns
        index = table.metadata.record_index
        if not columns or index is None or not shards:
            return Overwrite() if replace else Append(current=LiveDeltas(table.store, {}))
        keys = index.instant_entries(self._instant, sorted(shards)).select(index.keys)
        twice = repeated(keys)
        if twice.num_rows:
            raise DuplicateKeyError(
                f"record key {columns} repeats within the DataFrame: {describe(twice, columns)} "
                "appear more than once; nothing was written\nHelp: de-duplicate the DataFrame")
        if replace:
            return Overwrite()

        def plan(state: State) -> RowChanges:
            found = find_keys(table, state, keys)
            if found.num_rows:
                raise DuplicateKeyError(
                    f"append: record key(s) {describe(found.select(index.keys), columns)} already "
                    "exist in the table; nothing was written\nHelp: use txn.spark.write(df, uri, "
                    "mode='upsert') to replace existing keys")
            # Commits that complete after this read are checked for the same keys at commit.
            return Append(read_at=state.read_at, current=state.deltas)

        return latest(table, plan)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Spark may call abort after a commit that raised: only a pending instant is rolled back.
        table = open_context(self._uri)
        instant = table.timeline.load().get(self._instant)
        if instant is not None and instant.is_pending:
            protocol_of(table).roll_back(instant)


def _missing(instant_time: str) -> Any:
    raise InvalidOptionError(
        f"instant {instant_time} of this write is no longer pending on the timeline (rolled back "
        "after its heartbeat expired?); nothing was written")


def register(spark: Any, *, warehouse: str | None = None) -> None:
    """Register the ``metatxn`` format with ``spark`` (once per session).

    Its hooks run in Spark's Python workers: they are checked first (WorkerEnvironmentError).
    With ``warehouse`` (a path or URI), :func:`txn.spark.sql` also finds tables by name there:
    ``t`` at ``<warehouse>/t``, ``db.t`` at ``<warehouse>/db.db/t``.
    """
    ensure_workers_run_metatxn(spark)
    spark.dataSource.register(MetatxnDataSource)
    if warehouse is not None:
        set_warehouse(spark, warehouse)
