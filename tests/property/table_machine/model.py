"""The reference model: what the table must hold, worked out without the table.

The model is a list of acknowledged commits in completion order, each with the rows of the
snapshot it produced (keyed: at most one row per key), and the segments of the latest one, each
with its status, merged_to, SHOW SEGMENTS row count and the table rows it holds: deletes,
upserts and updates take rows out of the segments that hold them; DELETE SEGMENT takes its
segments' rows out of the table; a compaction moves its sources' rows, unchanged, to the new
segment (its commit's snapshot holds the same rows as the one before). The streams' records
(last batch id, rows, the segment of the last batch, dropped or not) and the apps' (last
version, rows) move with the acknowledged commits that carry them. Whether a failed write
is nevertheless durable is decided the way a user would: by looking for its instant on the
timeline (a fault on the commit point after it landed leaves a completed instant behind). Every
write tags the rows it writes with a serial number in ``v`` (``serial * 1000 + drawn value``; an
update that sets only ``g`` keeps the old tags), so a row of a failed write is recognisable
wherever it shows up.

Here: the model's values (``Acked`` commits, ``SegmentModel``, ``StreamModel``, an external
``Folder``), ``Expected`` (what one write must do, predicted before it runs and judged by
``Commits._write``), the row helpers and CarbonData's naming of compacted segments. The model's
state lives on the machine (``MachineCore.__init__``); the capability mixins move it.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import fsspec
import pyarrow as pa

import txn
from metatxn.indexes import SegmentStatus, field_id, segment_sort_key

Row = tuple[int, "str | None", int]


Operation = Literal["append", "overwrite", "upsert", "delete", "update", "delete_segments", "compact",
                    "add_segment", "stream", "drop_stream", "transaction", "alter_table", "merge"]


#: Segment statuses whose segments hold table rows (a streaming segment's rows are readable
#: from the commit of their batch on).
HOLDS_ROWS = frozenset({SegmentStatus.SUCCESS, SegmentStatus.STREAMING, SegmentStatus.STREAMING_FINISH})


@dataclass(frozen=True)
class Acked:
    """An acknowledged (durable) commit and the rows of the snapshot it made current."""

    instant: str
    completed_at: str
    operation: str
    serial: int
    rows: tuple[Row, ...]
    #: The table's schema as of this commit (``Commits._record`` stamps the model's).
    shape: Shape = dataclasses.field(default_factory=lambda: BASE)
    #: A transaction: the operations it ran (``Commit.operations``); () for the others.
    operations: tuple[str, ...] = ()


@dataclass(frozen=True)
class SegmentModel:
    """A committed segment as the model sees it (SHOW SEGMENTS must agree)."""

    id: str
    #: The data instant that made it.
    instant: str
    status: str
    #: What SHOW SEGMENTS reports: the rows it was written with (deletes do not change it).
    rows: int
    #: The table's rows it holds now (none unless Success), sorted.
    live: tuple[Row, ...]
    merged_to: str | None = None
    #: Made by a MAJOR compaction (MINOR never merges it again).
    major: bool = False
    #: Added by ADD SEGMENT: the folder (``path``) and its partition folder (``g=a``).
    external: bool = False
    path: str | None = None
    partition: str | None = None


@dataclass
class Folder:
    """A folder of Parquet files the machine wrote outside the table for an AddSegment."""

    #: As given to add_segment (``memory:///external/<run>/<n>``).
    url: str
    #: The write that tagged its rows (``v``).
    serial: int
    rows: tuple[Row, ...]
    #: Its partition folders (``g=a``) in the order the table lists them, with their rows.
    groups: tuple[tuple[str, tuple[Row, ...]], ...]
    #: Its data files (keys of the memory filesystem).
    files: frozenset[str]
    #: new (no add finished yet), added (acknowledged), failed (at a fault), refused.
    state: Literal["new", "added", "failed", "refused"] = "new"
    #: The schema its files were written with (the table's then).
    shape: Shape = dataclasses.field(default_factory=lambda: BASE)


@dataclass(frozen=True)
class Expected:
    """What one write must do, worked out from the model before it runs."""

    operation: Operation
    call: Callable[[txn.Table], object]
    #: The rows of the table if the write commits.
    after: tuple[Row, ...]
    #: rows_added and rows_deleted of its Commit.
    added: int
    deleted: int
    #: Whether it writes a segment.
    segment: bool
    #: It must raise this before it begins (so create no instant) and change nothing.
    refused: type[Exception] | None = None
    #: It matches nothing: it must return None, create no instant and change nothing.
    noop: bool = False
    #: A noop because its producer committed it already (an app's version, a stream's batch).
    replay: bool = False
    #: What it is, for statistics (the operation and its form).
    label: str = ""
    #: The rows its new segment holds (with ``segment``).
    written: tuple[Row, ...] = ()
    #: Which rows of the live segments it deletes.
    removes: Callable[[Row], bool] = lambda row: False
    #: It replaces every live segment (an overwrite).
    replaces: bool = False
    #: The segments it marks ``Marked for Delete`` (DELETE SEGMENT).
    marks: frozenset[str] = frozenset()
    #: ADD SEGMENT: the folder, whose partition folders become segments.
    folder: Folder | None = None
    #: A stream's batch or DROP STREAM: what it does to the stream's segments.
    stream: BatchPlan | None = None
    #: An idempotent write: its app_id and version (recorded if it commits).
    app: tuple[str, int] | None = None
    #: A transaction: the operations it ran, in order (``Commit.operations``); () for the others.
    operations: tuple[str, ...] = ()
    #: A schema or property change: moves the model (its shape, its retention) once it committed.
    on_commit: Callable[[], None] | None = None
    #: A merge write: whether its commit creates a schema version (``Commit.schema_version``);
    #: None: not checked.
    versions: bool | None = None


@dataclass(frozen=True)
class BatchPlan:
    """A stream's batch (``batch_id``) or its DROP STREAM (``batch_id`` None), as the model
    predicts it before it runs."""

    name: str
    batch_id: int | None
    #: The segment the stream's record names (its open segment), if any.
    open: str | None
    #: ``open`` is ``Streaming`` and its data size reached ``streaming.segment.max_size``: the
    #: batch's commit finishes it (``Streaming Finish``) and puts its rows in a new segment.
    full: bool = False
    #: Auto hand-off runs after the commit (if it commits): every ``Streaming Finish`` segment
    #: not in ``busy`` is compacted, one round each, oldest first.
    hands_off: bool = False
    busy: frozenset[str] = frozenset()


@dataclass
class StreamModel:
    """A stream's record as the model has it (SHOW STREAMS must agree)."""

    #: The last committed batch id of this generation (None: none yet).
    last: int | None = None
    #: Rows its batches of this generation committed.
    rows: int = 0
    #: The segment of its last batch (None: none, or an empty batch without an open segment).
    segment: str | None = None
    dropped: bool = False
    #: DROP STREAMs committed: a stream started again after one is a new generation.
    generation: int = 0


@dataclass(frozen=True)
class Column:
    """A column of the model's schema: its id (``PARQUET:field_id``), name and type, and the
    serial of the schema change that added it (0: created with the table)."""

    cid: int
    name: str
    type: pa.DataType
    since: int = 0


#: The ids of the three columns every row of the model has (``Row``): ``k``, ``g``, ``v``.
K, G, V = 1, 2, 3


@dataclass(frozen=True)
class Shape:
    """The model's schema: ordered columns with ids, and the highest id ever given.

    Rows stay ``(k, g, v)`` (by id, whatever their names now); a column added later holds, in a
    row, ``value(column, v)`` when the row was written after it was added (its tag's serial is
    larger: writes conform to the schema current when they run), else null (an old file read by
    id). An update that sets ``v`` sets every added column too, so the rule keeps holding;
    widening keeps the values, a rename keeps them under the new name, a drop removes them.
    """

    columns: tuple[Column, ...]
    last_id: int

    def name(self, cid: int) -> str:
        return next(c.name for c in self.columns if c.cid == cid)

    @property
    def names(self) -> tuple[str, str, str]:
        """The current names of ``k``, ``g`` and ``v``."""
        return self.name(K), self.name(G), self.name(V)

    @property
    def added(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.cid not in (K, G, V))

    def arrow(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type) for c in self.columns])

    @staticmethod
    def value(column: Column, v: int) -> object:
        if v // 1000 < column.since:
            return None
        if pa.types.is_integer(column.type):
            return (v * 7 + column.cid) % 100_000
        if pa.types.is_floating(column.type):
            return v / 4 + column.cid
        return f"{column.cid}:{v}"

    def table(self, rows: Sequence[Row]) -> pa.Table:
        """``rows`` as data of this schema (what a write of them now sends)."""
        by_id = {K: [r[0] for r in rows], G: [r[1] for r in rows], V: [r[2] for r in rows]}
        return pa.table({c.name: pa.array(by_id[c.cid] if c.cid in by_id else
                                          [self.value(c, r[2]) for r in rows], c.type)
                         for c in self.columns}, schema=self.arrow())

    def update_values(self, v: int | None, g: tuple[str | None] | None) -> dict[str, object]:
        """The ``values`` of an update that sets ``v`` and/or ``g`` (None: not set), by the
        current names; setting ``v`` sets every added column to its value of the new ``v``."""
        values: dict[str, object] = {}
        if v is not None:
            values[self.name(V)] = v
            for column in self.added:
                values[column.name] = self.value(column, v)
        if g is not None:
            values[self.name(G)] = g[0]
        return values

    def rows_of(self, table: pa.Table, what: str = "snapshot") -> tuple[Row, ...]:
        """The model rows of ``table`` (a read), checking its schema (names and types, in order)
        and every added column's values against this shape."""
        got = [(f.name, str(f.type)) for f in table.schema]
        want = [(c.name, str(c.type)) for c in self.columns]
        assert got == want, f"{what}: schema {got}, the model has {want}"
        k, g, v = (table[name].to_pylist() for name in self.names)
        for column in self.added:
            values = table[column.name].to_pylist()
            wrong = [(k[i], v[i], values[i]) for i in range(len(v))
                     if values[i] != self.value(column, v[i])]
            assert not wrong, (f"{what}: column {column.name!r} (id {column.cid}, added by write "
                               f"{column.since}) holds (k, v, value) {wrong[:5]}; the model has "
                               f"{[self.value(column, x[1]) for x in wrong[:5]]}")
        return tuple(sorted(zip(k, g, v, strict=True), key=_row_key))

    def check_ids(self, schema: pa.Schema, what: str = "snapshot") -> None:
        got = [(f.name, field_id(f)) for f in schema]
        want = [(c.name, c.cid) for c in self.columns]
        assert got == want, f"{what}: schema (name, id) {got}, the model has {want}"


BASE = Shape(columns=(Column(K, "k", pa.int64()), Column(G, "g", pa.string()),
                      Column(V, "v", pa.int64())), last_id=3)


def _row_key(row: Row) -> tuple[int, str, int]:
    k, g, v = row
    return (k, "\0" if g is None else "\1" + g, v)


def _sort(rows: list[Row]) -> tuple[Row, ...]:
    return tuple(sorted(rows, key=_row_key))


#: Where the external folders of every run live, on fsspec's in-memory filesystem: outside every
#: table (also those on local disk), written and checked without the storage seam.
EXTERNAL_ROOT = "memory:///external"


_external_runs = itertools.count()


def memory_path(url: str) -> str:
    """The key of ``url`` (``memory://x`` or ``memory:///x``) in fsspec's memory filesystem."""
    return str(fsspec.filesystem("memory")._strip_protocol(url))


def _level(segment_id: str) -> int:
    """The compaction level of a segment id: 0 for a load (``7``), n for ``7.n``."""
    _, dot, level = segment_id.partition(".")
    return int(level) if dot else 0


def _merged_name(sources: Sequence[str], segments: dict[str, SegmentModel]) -> str:
    """The id of the segment merging ``sources`` makes: the first id plus ``.1`` for a load, else
    the first's level plus one; a level higher while that id is taken (CarbonData's naming)."""
    first = min(sources, key=segment_sort_key)
    load = first.partition(".")[0]
    level = _level(first) + 1
    while f"{load}.{level}" in segments:
        level += 1
    return f"{load}.{level}"


def _merged(segments: dict[str, SegmentModel], sources: Sequence[str], instant: str, *,
            major: bool) -> dict[str, SegmentModel]:
    """``segments`` once a compaction (``instant``) merged ``sources``: they are Compacted into
    the new segment, which holds their live rows."""
    target = _merged_name(sources, segments)
    rows = _sort([row for i in sources for row in segments[i].live])
    after = dict(segments)
    for i in sources:
        after[i] = dataclasses.replace(segments[i], status=SegmentStatus.COMPACTED, merged_to=target, live=())
    after[target] = SegmentModel(id=target, instant=instant, status=SegmentStatus.SUCCESS, rows=len(rows),
                                 live=rows, major=major)
    return after
