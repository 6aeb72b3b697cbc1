"""Reading a change feed's parts: the rows of each slice, labelled with their change type.

A part is read slice by slice, deletes before inserts (the order the plan lists them), one batch
decoded at a time. A keyed instant that both deleted and wrote rows (an upsert, a transaction,
a keyed update) is read twice: first only its key columns, to find the keys it both deleted and
wrote (an update: pre- and post-image), then every column, labelled from what the first pass
found. Between the passes it holds the instant's key columns and one int64 code per changed
row, besides the batch being read.

The reader pickles small (the table's location and storage options, the schema of each version,
the record key), so an engine ships it with parts to its workers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from metatxn.timeline import InvalidOptionError, open_storage, parse_time

from .._files import (
    DataStore,
    ExternalReader,
    ExternalRecord,
    Positions,
    is_external,
    read_data_file,
    read_positions,
    read_whole_file,
    scan_file_batches,
)
from .._results import CHANGE_TYPE, COMMIT_INSTANT, COMMIT_TIME, ChangeType
from .._rows import key_codes
from ._plan import (
    DELETED,
    INSERTED,
    PAIRING_KEYS,
    PAIRING_UPDATE,
    UNKNOWN_ROWS,
    ChangePart,
    FileSlice,
)
from ._window import expired

#: The types of the change columns.
CHANGE_FIELDS = (pa.field(CHANGE_TYPE, pa.string(), nullable=False),
                 pa.field(COMMIT_INSTANT, pa.string(), nullable=False),
                 pa.field(COMMIT_TIME, pa.timestamp("ms", tz="UTC"), nullable=False))

_LABELS = {  # (role, paired: the key is both deleted and written) -> change type
    (DELETED, False): ChangeType.DELETE, (INSERTED, False): ChangeType.INSERT,
    (DELETED, True): ChangeType.UPDATE_PREIMAGE, (INSERTED, True): ChangeType.UPDATE_POSTIMAGE,
}


def change_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` (the table's columns a feed returns) followed by the change columns."""
    return pa.schema([*schema, *CHANGE_FIELDS])


def commit_time(completed_at: str) -> datetime:
    return datetime.fromtimestamp(parse_time(completed_at) / 1000, tz=timezone.utc)


def _filtered(batch: pa.RecordBatch, filter: ds.Expression, part: ChangePart) -> pa.RecordBatch:
    """``batch``'s rows matching ``filter``; a filter that fails on the values (a cast that
    overflows, a division by zero) is the caller's: ``InvalidOptionError``."""
    try:
        return batch.filter(filter)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise InvalidOptionError(f"filter {filter} failed on the change rows of instant "
                                 f"{part.instant}: {exc}") from None


class ChangeReader:
    """Reads the rows of change parts of one table (``ChangeScanner.read_part``)."""

    def __init__(self, *, uri: str, storage_options: dict[str, Any] | None,
                 versions: Mapping[int, pa.Schema], schema_id: int, partition_by: Sequence[str],
                 record_key: Sequence[str], store: DataStore | None = None,
                 external_options: dict[str, dict[str, Any]] | None = None) -> None:
        """Internal: made by ``Table.changes``. ``versions``: the schema of every table version
        up to the window's end; ``schema_id``: the version whose schema the feed returns."""
        self._uri = uri
        self._storage_options = storage_options
        self._versions = dict(versions)
        self._schema_id = schema_id
        self._partition_by = list(partition_by)
        self._record_key = list(record_key)
        self._external_options = dict(external_options or {})
        self._store = store

    @property
    def schema(self) -> pa.Schema:
        """The table's schema at the window's end (without the change columns)."""
        return self._versions[self._schema_id]

    @property
    def record_key(self) -> list[str]:
        return list(self._record_key)

    def check_retained(self, start: str) -> None:
        """On a worker (no table handle): raise ``SnapshotExpiredError`` if CLEAN FILES reached
        the window that starts at ``start`` since it was planned."""
        error = expired(self._opened().storage, start, start)
        if error is not None:
            raise error

    def __getstate__(self) -> dict[str, Any]:
        return {"uri": self._uri, "storage_options": self._storage_options,
                "versions": {i: v.serialize().to_pybytes() for i, v in self._versions.items()},
                "schema_id": self._schema_id, "partition_by": self._partition_by,
                "record_key": self._record_key, "external_options": self._external_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            uri=state["uri"], storage_options=state["storage_options"],
            versions={i: pa.ipc.read_schema(pa.py_buffer(v)) for i, v in state["versions"].items()},
            schema_id=state["schema_id"], partition_by=state["partition_by"],
            record_key=state["record_key"], external_options=state["external_options"])

    def _opened(self) -> DataStore:
        if self._store is None:  # a worker: open the table's storage once, on first use
            self._store = DataStore(open_storage(self._uri, self._storage_options),
                                    ExternalReader(self.schema, self._partition_by,
                                                   self._external_options))
        return self._store

    # -- reading ------------------------------------------------------------------------------

    def read(self, part: ChangePart, columns: Sequence[str], filter: ds.Expression | None,
             batch_size: int) -> Iterator[pa.RecordBatch]:
        """The change rows of ``part``: ``columns`` (table columns) and the change columns, the
        rows matching ``filter`` (already bound to :func:`change_schema`)."""
        wanted = list(columns)
        reading = self.schema.names if filter is not None else list(dict.fromkeys(
            [*wanted, *(self._record_key if part.pairing == PAIRING_KEYS else [])]))
        paired = self._paired(part, batch_size) if part.pairing == PAIRING_KEYS else None
        output = change_schema(pa.schema([self.schema.field(name) for name in wanted]))
        instant = pa.scalar(part.instant, pa.string())
        moment = pa.scalar(commit_time(part.completed_at), pa.timestamp("ms", tz="UTC"))
        for index, piece in enumerate(part.slices):
            offset = 0
            for batch, _ in self._slice(piece, reading, batch_size):
                rows = batch.num_rows
                if paired is not None:
                    mask = paired[index][offset:offset + rows]
                    offset += rows
                    kinds = pa.array(np.where(mask, _LABELS[piece.role, True],
                                              _LABELS[piece.role, False]), pa.string())
                else:
                    label = _LABELS[piece.role, part.pairing == PAIRING_UPDATE]
                    kinds = pa.repeat(pa.scalar(str(label), pa.string()), rows)
                labelled = pa.RecordBatch.from_arrays(
                    [*batch.columns, kinds, pa.repeat(instant, rows), pa.repeat(moment, rows)],
                    schema=change_schema(batch.schema))
                if filter is not None:
                    labelled = _filtered(labelled, filter, part)
                    if not labelled.num_rows:
                        continue
                yield labelled.select(output.names)

    def _paired(self, part: ChangePart, batch_size: int) -> list[np.ndarray]:
        """Per slice, per row: whether its key is both deleted and written by the instant."""
        keys = [pa.Table.from_batches([b for b, _ in self._slice(piece, self._record_key,
                                                                  batch_size)],
                                      schema=pa.schema([self.schema.field(n)
                                                        for n in self._record_key]))
                for piece in part.slices]
        codes = key_codes(pa.concat_tables(keys)) if keys else np.empty(0, np.int64)
        bounds = np.cumsum([0, *(k.num_rows for k in keys)])
        per_slice = [codes[bounds[i]:bounds[i + 1]] for i in range(len(keys))]
        deleted = [c for c, piece in zip(per_slice, part.slices, strict=True) if piece.role == DELETED]
        written = [c for c, piece in zip(per_slice, part.slices, strict=True) if piece.role == INSERTED]
        both = np.intersect1d(np.concatenate(deleted or [np.empty(0, np.int64)]),
                              np.concatenate(written or [np.empty(0, np.int64)]))
        return [np.isin(c, both) for c in per_slice]

    def _slice(self, piece: FileSlice, columns: Sequence[str], batch_size: int
               ) -> Iterator[tuple[pa.RecordBatch, Positions]]:
        store = self._opened()
        if piece.record is not None:
            store.external_reader().recorded.setdefault(piece.key, ExternalRecord(*piece.record))
        minus = self._positions(store, piece.minus, set(piece.replaced))
        only = None
        if piece.only:
            only = np.setdiff1d(self._positions(store, piece.only), minus, assume_unique=True)
            minus = np.empty(0, np.int64)
        written: pa.Schema | None = None
        if piece.schema_id != self._schema_id:
            written = self._versions.get(piece.schema_id)
            if written is None:
                raise InvalidOptionError(
                    f"{piece.key}: written with table version {piece.schema_id}, which this change "
                    "feed's reader does not know; expected a part of the feed it came from")
        if only is None and not len(minus) and not is_external(piece.key):
            # Every row of one of the table's files (a write's new file): one read of the
            # projected columns, as a snapshot reads a clean file; no position bookkeeping.
            whole = (read_whole_file(store, piece.key, self.schema, columns) if written is None
                     else read_data_file(store, piece.key, self.schema, columns=columns,
                                         written=written))
            offset = 0
            for batch in whole.to_batches(max_chunksize=batch_size):
                yield batch, np.arange(offset, offset + batch.num_rows, dtype=np.int64)
                offset += batch.num_rows
            return
        yield from scan_file_batches(store, piece.key, self.schema, filter=None, columns=columns,
                                     deleted=minus if len(minus) else None,
                                     file_format=piece.format, written=written,
                                     batch_size=batch_size, only=only)

    @staticmethod
    def _positions(store: DataStore, deltas: Sequence[tuple[str, int]],
                   replaced: set[str] | None = None) -> Positions:
        """The union of ``deltas``' positions; a ``replaced`` one that is gone is skipped (its
        replacement, among ``deltas``, holds its positions)."""
        found = []
        for path, rows in deltas:
            try:
                found.append(read_positions(store, path, None if rows == UNKNOWN_ROWS else rows))
            except FileNotFoundError:
                if path not in (replaced or ()):
                    raise
        return np.unique(np.concatenate(found)) if found else np.empty(0, np.int64)



