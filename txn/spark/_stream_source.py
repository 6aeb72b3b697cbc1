"""``spark.readStream.format("metatxn")``: a table's change feed as a Spark stream, exactly once.

PySpark 4.3's Python streaming source (``DataSourceStreamReader``). Its planning hooks
(``initialOffset``, ``latestOffset``, ``partitions``, ``commit``) run in one long-lived Python
worker per query; ``read`` runs in the tasks, on a copy of the reader made by another worker, so
each partition carries everything its task reads with (a pickled ``ChangeScanner`` and one of
its parts, or a snapshot's ``FileReader`` and one of its files).

**Offsets** are positions on the completion order of the timeline (design/spark.md,
"Streaming source"): ``{"bound": B}`` is "after every instant that completed at or before B"
(``ChangeScanner.end``), and ``{"bound": L, "files": k}`` is "inside the first snapshot of the
stream, at L, its first k files (in path order) read". A micro-batch between two offsets reads
the window ``Table.changes(start, end)`` gives for those bounds; completion bounds are fixed
once passed (a write completing later gets a later completion time), so the same two offsets
read the same rows however often Spark replays them, which with Spark's checkpoint is what makes
a query exactly once across restarts.

Every offset ``latestOffset`` returns also records where its micro-batch starts (``"from"``) and
``partitions`` reads from there: Spark logs a batch's end offset before running it, but on a
restart before the first batch completed it asks ``initialOffset`` again for that batch's start,
which for "latest" or the default would be a newer position than the logged batch started at.

**Admission** (``maxFilesPerTrigger``, ``maxRowsPerTrigger``): Spark 4.3's read limits reach
``latestOffset``; whole instants are admitted (whole files of the first snapshot), at least one,
in completion order, while the totals stay within every limit given. ``Trigger.AvailableNow``
reads up to the latest bound when the query started, in micro-batches of those limits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

import txn

from .. import DataFile, FileReader, InvalidOptionError, open_table
from ._change_options import EARLIEST, LATEST, ChangeOptions
from ._changes import arrow_target
from ._types import conform

if TYPE_CHECKING:
    from .. import ChangeInstant, ChangeScanner

#: The completion bound before the table's first instant (``ChangeScanner.start`` of
#: ``"earliest"``).
NO_BOUND = "0" * 17

#: The change types a stream without ``readChangeFeed`` emits: the rows commits added.
ADDED = (str(txn.ChangeType.INSERT), str(txn.ChangeType.UPDATE_POSTIMAGE))


def moment(bound: str) -> str | datetime:
    """The start or end form of ``Table.changes`` that means exactly the completion bound
    ``bound`` (a ``datetime`` is read to the millisecond, as completion times are kept; an instant
    time would name an instant instead)."""
    if bound == NO_BOUND:
        return "earliest"
    found = datetime.strptime(bound[:14], "%Y%m%d%H%M%S")
    return found.replace(microsecond=int(bound[14:]) * 1000, tzinfo=timezone.utc)


def _instant_time(bound: str) -> pa.Scalar:
    return pa.scalar(moment(bound), pa.timestamp("ms", tz="UTC"))


@dataclasses.dataclass(frozen=True)
class Position:
    """Where a stream is: after the instants completed at or before ``bound``; with ``files``,
    inside the stream's first snapshot (at ``bound``), that many of its files read."""

    bound: str
    files: int | None = None

    @classmethod
    def of(cls, offset: dict[str, Any]) -> Position:
        return cls(str(offset["bound"]), offset.get("files"))

    def offset(self) -> dict[str, Any]:
        return {"bound": self.bound} if self.files is None else {"bound": self.bound, "files": self.files}


class ChangePartition(InputPartition):
    """One part of a window of changes, read with its scanner."""

    def __init__(self, scanner: ChangeScanner | None, part: Any) -> None:
        super().__init__(None)
        self.scanner = scanner
        self.part = part


class SnapshotPartition(InputPartition):
    """One file of the stream's first snapshot, read with that snapshot's reader, its rows as
    inserts of the snapshot's last instant."""

    def __init__(self, reader: FileReader, file: DataFile, instant: str, bound: str) -> None:
        super().__init__(None)
        self.reader = reader
        self.file = file
        self.instant = instant
        self.bound = bound


def _limits(limit: ReadLimit, options: ChangeOptions) -> tuple[int | None, int | None]:
    """The (files, rows) caps of one micro-batch: none when Spark asks for everything (a
    ``Trigger.Once``), else the options' (the one Spark hands over is one of them)."""
    if isinstance(limit, ReadAllAvailable):
        return None, None
    files = limit.max_files if isinstance(limit, ReadMaxFiles) else options.max_files
    rows = limit.max_rows if isinstance(limit, ReadMaxRows) else options.max_rows
    return files, rows


def admitted(sizes: Sequence[tuple[int, int]], files: int | None, rows: int | None) -> int:
    """How many of the leading units (each ``(files, rows)``) one micro-batch takes: as many as
    keep within both caps, and at least one."""
    taken = total_files = total_rows = 0
    for unit_files, unit_rows in sizes:
        total_files += unit_files
        total_rows += unit_rows
        if taken and ((files is not None and total_files > files) or
                      (rows is not None and total_rows > rows)):
            break
        taken += 1
    return taken


class ChangeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream of the table at ``uri`` (see the module's docstring)."""

    def __init__(self, uri: str, options: ChangeOptions, schema: Any, *, as_of: bool = False) -> None:
        # Refused by the first offset asked for, not here: PySpark 4.3 loses an error raised while
        # its worker makes the reader (an UnboundLocalError of its own replaces it).
        self._refused = None
        if options.ending is not None:
            self._refused = ("format('metatxn') option endingInstant is for batch reads of changes "
                             "(spark.read); a stream reads on as the table changes")
        elif as_of:
            self._refused = ("format('metatxn') option asOf reads a snapshot; a stream starts at "
                             "option startingInstant")
        self._uri = uri
        self._options = options
        #: The Arrow form of the stream's Spark schema, fixed when the query was defined.
        self._target = arrow_target(schema)
        self._table: txn.Table | None = None
        #: The latest bound when ``Trigger.AvailableNow`` started the query (None: no ceiling).
        self._ceiling: str | None = None
        self._snapshot: tuple[str, Any, list[DataFile]] | None = None
        #: Instants planned already (completed in ``(_planned_from, _planned_to]``, those that
        #: change rows): a window once passed never changes, so each trigger plans only the
        #: instants completed since the last one, not the whole backlog again.
        self._planned: list[ChangeInstant] = []
        self._planned_from: str | None = None
        self._planned_to = NO_BOUND

    def __getstate__(self) -> dict[str, Any]:
        # PySpark pickles the reader with ``read`` into the tasks: without the planner's caches.
        return {**self.__dict__, "_table": None, "_snapshot": None, "_planned": [],
                "_planned_from": None}

    @property
    def table(self) -> txn.Table:
        if self._table is None:
            self._table = open_table(self._uri)
        return self._table

    # -- offsets -----------------------------------------------------------------------------------

    def _latest_bound(self) -> str:
        return self.table.snapshot().completed_at or NO_BOUND

    def _check(self) -> None:
        if self._refused is not None:
            raise InvalidOptionError(self._refused)

    def initialOffset(self) -> dict[str, Any]:
        self._check()
        starting = self._options.starting
        if starting == EARLIEST:
            return Position(NO_BOUND).offset()
        if starting == LATEST:
            return Position(self._latest_bound()).offset()
        if starting is not None:
            return Position(self.table.changes(starting).start).offset()
        # Delta's default: the table as it is, then what changes after.
        snapshot = self.table.snapshot()
        if snapshot.completed_at is None:
            return Position(NO_BOUND).offset()
        return Position(snapshot.completed_at, 0 if snapshot.files() else None).offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._options.max_files is not None:
            return ReadMaxFiles(self._options.max_files)
        if self._options.max_rows is not None:
            return ReadMaxRows(self._options.max_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._ceiling = self._latest_bound()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        self._check()
        at = Position.of(start)
        files, rows = _limits(limit, self._options)
        if at.files is not None:  # inside the first snapshot: whole files of it
            _, _, listing = self._snapshot_at(at.bound)
            rest = listing[at.files:]
            taken = admitted([(1, f.rows - f.deleted_rows) for f in rest], files, rows)
            done = taken >= len(rest)
            end = Position(at.bound, None if done else at.files + taken)
            return {**end.offset(), "from": at.offset()}
        ceiling = self._ceiling
        if ceiling is not None and at.bound >= ceiling:
            return start
        instants, reach = self._instants_after(at.bound, ceiling)
        if reach <= at.bound:
            return start
        taken = admitted([(i.files, i.rows) for i in instants], files, rows) if instants else 0
        # Past the last admitted instant when a limit cut the window; else to the window's end,
        # past the table services after it (they emit nothing), so the stream's start never
        # lags behind what cleaning keeps.
        bound = instants[taken - 1].completed_at if taken < len(instants) else reach
        return {**Position(bound).offset(), "from": at.offset()}

    def _instants_after(self, bound: str, ceiling: str | None) -> tuple[list[ChangeInstant], str]:
        """The instants that change rows and completed after ``bound`` (up to ``ceiling``), in
        completion order, and the completion bound they were planned to."""
        if self._planned_from is None or not self._planned_from <= bound <= self._planned_to:
            self._planned, self._planned_to = [], bound
        if ceiling is None or self._planned_to < ceiling:
            scanner = self.table.changes(moment(self._planned_to),
                                         None if ceiling is None else moment(ceiling))
            self._planned.extend(scanner.instants())
            self._planned_to = max(self._planned_to, scanner.end)
        self._planned = [i for i in self._planned if i.completed_at > bound]
        self._planned_from = bound
        return list(self._planned), self._planned_to

    def commit(self, end: dict[str, Any]) -> None:
        pass  # nothing to release: positions live in Spark's checkpoint, files in the table

    # -- planning and reading ----------------------------------------------------------------------

    def _snapshot_at(self, bound: str) -> tuple[str, Any, list[DataFile]]:
        """The stream's first snapshot (at ``bound``): its instant, reader and files in path
        order (kept: every micro-batch of it asks again)."""
        if self._snapshot is None or self._snapshot[0] != bound:
            snapshot = self.table.snapshot(moment(bound))
            files = sorted(snapshot.files(), key=lambda f: f.path)
            self._snapshot = (bound, snapshot, files)
        return self._snapshot

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if end == start:  # no new offset (its "from" names the batch before: nothing to read)
            return []
        first = Position.of(end.get("from", start))
        last = Position.of(end)
        found: list[InputPartition] = []
        if first.files is not None:
            _, snapshot, listing = self._snapshot_at(first.bound)
            reader = snapshot.file_reader()
            for data_file in listing[first.files:last.files]:
                found.append(SnapshotPartition(reader, data_file, snapshot.instant, first.bound))
        if last.files is None and last.bound > first.bound:
            added = None if self._options.change_feed else pc.field("_change_type").isin(list(ADDED))
            scanner = self.table.changes(moment(first.bound), moment(last.bound), filter=added)
            found.extend(ChangePartition(scanner, part) for part in scanner.parts())
        return found

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, ChangePartition):
            assert partition.scanner is not None
            for batch in partition.scanner.read_part(partition.part):
                yield conform(batch, self._target)
            return
        assert isinstance(partition, SnapshotPartition)
        names = [name for name in self._target.names if name not in txn.CHANGE_COLUMNS]
        rows = partition.reader.read(partition.file, columns=[
            n for n in names if partition.reader.schema.get_field_index(n) >= 0])
        if self._options.change_feed:
            count = rows.num_rows
            inserted = pa.scalar(str(txn.ChangeType.INSERT))
            rows = rows.append_column("_change_type", pa.repeat(inserted, count)) \
                .append_column("_commit_instant", pa.repeat(pa.scalar(partition.instant), count)) \
                .append_column("_commit_time", pa.repeat(_instant_time(partition.bound), count))
        for batch in rows.to_batches():
            yield conform(batch, self._target)
