"""``txn.ChangeScanner``: the rows a window of instants changed, as a stream of record batches.

Made by ``Table.changes``: the window is planned when the scanner is made (commit metadata only,
no data file), and read each time it is iterated, part by part in completion order. An engine
that reads on workers ships the scanner (it pickles small: no plan) with some of
:meth:`ChangeScanner.parts` to each, and calls :meth:`ChangeScanner.read_part` there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from metatxn.indexes import SnapshotExpiredError
from metatxn.timeline import InvalidOptionError, TxnError

from .._read import DEFAULT_BATCH_SIZE, check_columns, check_filter
from .._results import CHANGE_TYPE, ChangeInstant, ChangeSummary, ChangeType
from ._plan import ChangePart, Window
from ._read import ChangeReader, change_schema

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]


class ChangeScanner:
    """The rows changed by the instants that completed in a window ``(start, end]``.

    Every row carries the table's columns (as of ``end``; older files' columns found by id) and
    ``_change_type`` (``insert``, ``update_preimage``, ``update_postimage``, ``delete``),
    ``_commit_instant`` and ``_commit_time``. Rows come in the completion order of their
    instants; within an instant, deleted rows and pre-images first. Each read of the scanner
    reads the same window again and gives the same rows.

    Example:
        >>> import pyarrow as pa, txn
        >>> t = txn.create_table("memory://doc/changes", pa.schema([("id", pa.int64()),
        ...                      ("v", pa.string())]), record_key="id")
        >>> first = t.append(pa.table({"id": [1, 2], "v": ["a", "b"]})).instant
        >>> _ = t.upsert(pa.table({"id": [2, 3], "v": ["B", "c"]}))
        >>> feed = t.changes(first, columns=["id", "v"])
        >>> feed.to_arrow().select(["id", "v", "_change_type"]).to_pylist()  # doctest: +NORMALIZE_WHITESPACE
        [{'id': 2, 'v': 'b', '_change_type': 'update_preimage'},
         {'id': 2, 'v': 'B', '_change_type': 'update_postimage'},
         {'id': 3, 'v': 'c', '_change_type': 'insert'}]
        >>> [(s.operation, s.inserted, s.updated, s.deleted) for s in feed.summary()]
        [('upsert', 1, 1, 0)]
    """

    def __init__(self, window: Window, reader: ChangeReader, columns: Sequence[str] | None,
                 filter: object, batch_size: object,
                 check_retained: Callable[[], None] | None = None) -> None:
        """Internal: ``Table.changes`` makes it. ``check_retained`` raises
        ``SnapshotExpiredError`` if cleaning expired the window since it was planned."""
        table_schema = reader.schema
        wanted = check_columns(table_schema, columns)
        self._columns = table_schema.names if wanted is None else wanted
        self._schema = change_schema(pa.schema([table_schema.field(n) for n in self._columns]))
        self._filter: ds.Expression | None = check_filter(
            change_schema(table_schema), filter)
        if batch_size is not None and (isinstance(batch_size, bool)
                                       or not isinstance(batch_size, int) or batch_size <= 0):
            raise InvalidOptionError(f"batch_size must be a positive int, got {batch_size!r}")
        self._batch_size = batch_size or DEFAULT_BATCH_SIZE
        self._window = window
        self._reader = reader
        self._check_retained = check_retained

    # -- what it holds ------------------------------------------------------------------------

    @property
    def schema(self) -> pa.Schema:
        """The schema of every batch: the columns asked for, then the three change columns."""
        return self._schema

    @property
    def start(self) -> str:
        """The window's start: a completion time (17 digits), exclusive."""
        return self._window.start

    @property
    def end(self) -> str:
        """The window's end: a completion time (17 digits), inclusive; the offset a consumer
        starts its next window from."""
        return self._window.end

    def instants(self) -> list[ChangeInstant]:
        """The window's instants that change rows, in completion order (table services and
        schema changes, which change none, are not listed)."""
        return list(self._planned().instants)

    def parts(self) -> list[ChangePart]:
        """The window's units of work, in completion order: one per instant, or one per file of
        an instant that only added rows. Give some to each worker with this scanner."""
        return list(self._planned().parts)

    # -- reading ------------------------------------------------------------------------------

    def read_part(self, part: ChangePart) -> Iterator[pa.RecordBatch]:
        """The change rows of one of :meth:`parts`, as batches of :attr:`schema`.

        Raises:
            SnapshotExpiredError: a clean removed a file of the part while it was read.
            CorruptMetadataError: a file of the part is damaged, or an external file changed
                since ADD SEGMENT.
            ObjectNotFoundError: a file of the part is gone (not by cleaning).
        """
        if not isinstance(part, ChangePart):
            raise InvalidOptionError(f"part must be a txn.ChangePart (from ChangeScanner.parts()), "
                                     f"got {type(part).__name__}")
        try:
            yield from self._reader.read(part, self._columns, self._filter, self._batch_size)
        except (FileNotFoundError, TxnError, OSError, pa.ArrowException) as exc:
            if isinstance(exc, SnapshotExpiredError):
                raise
            # A clean since the window was planned: expired, not damaged.
            if self._check_retained is not None:
                self._check_retained()
            else:  # a worker, without the table's handle
                self._reader.check_retained(self.start)
            raise

    def _planned(self) -> Window:
        """The plan, which a scanner unpickled on a worker does not carry."""
        if not self._window.planned:
            raise InvalidOptionError(
                "this ChangeScanner was unpickled without its plan: a worker reads the parts it "
                "is given with read_part(part); to_batches, to_arrow, count_rows, summary, "
                "instants and parts need the scanner Table.changes made")
        return self._window

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        for part in self._planned().parts:
            yield from self.read_part(part)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self._schema, self.to_batches())

    def to_arrow(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self._schema)

    def to_pandas(self, **options: Any) -> pd.DataFrame:
        """The change rows as a pandas DataFrame (``options`` go to ``pyarrow.Table.to_pandas``)."""
        return self.to_arrow().to_pandas(**options)

    def count_rows(self) -> int:
        """How many change rows the window holds (matching the filter)."""
        counting = self._counting()
        return sum(batch.num_rows for batch in counting.to_batches())

    def summary(self) -> list[ChangeSummary]:
        """Per instant of the window, its change rows (matching the filter) counted by kind
        (``updated``: rows updated, each one pre-image and one post-image)."""
        counting = self._counting()
        counts: dict[str, Counter[str]] = {}
        for part in self._planned().parts:
            held = counts.setdefault(part.instant, Counter())
            for batch in counting.read_part(part):
                held.update(dict(zip(*_value_counts(batch[CHANGE_TYPE]), strict=True)))
        return [ChangeSummary(instant=i.instant, completed_at=i.completed_at,
                              operation=i.operation,
                              inserted=counts[i.instant][ChangeType.INSERT],
                              updated=counts[i.instant][ChangeType.UPDATE_POSTIMAGE],
                              deleted=counts[i.instant][ChangeType.DELETE])
                for i in self._window.instants]

    def _counting(self) -> ChangeScanner:
        """This window with no table column (only the change columns are built)."""
        scanner = ChangeScanner.__new__(ChangeScanner)
        scanner.__dict__.update(self.__dict__)  # not copy.copy: pickling leaves the plan out
        scanner._columns = []
        scanner._schema = change_schema(pa.schema([]))
        return scanner

    # -- pickling: what a worker needs to read parts ------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_window"] = msgspec.structs.replace(self._window, parts=[], instants=[],
                                                   planned=False)
        state["_check_retained"] = None
        return state

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The change rows as an Arrow C stream (``pa.table(feed)``, ``duckdb.sql``, Polars)."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def __repr__(self) -> str:
        return (f"txn.ChangeScanner(({self.start}, {self.end}], {len(self._window.instants)} "
                f"instants)")


def _value_counts(column: pa.Array) -> tuple[list[str], list[int]]:
    counts = pc.value_counts(column)
    return counts.field("values").to_pylist(), counts.field("counts").to_pylist()
