"""Shared helpers of the txn behaviour tests: schemas, data builders, storage views and wrappers.

Everything here observes a table through its public surface or through the storage seam (what is
durably on storage); nothing patches private methods.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import txn
from metatxn import timeline
from tests.faults import FaultyStorage
from txn._context import read_config

#: A small "orders" table: a non-nullable key, a partition candidate and a float.
SCHEMA = pa.schema([
    ("id", pa.int64(), False),
    ("region", pa.string()),
    ("day", pa.date32()),
    ("price", pa.float64()),
])

METADATA_PREFIXES = ("_timeline/", "_metadata/", "_markers/", "_trash/")


def rows(ids: range | list[int], *, region: str | None = "eu", day: date = date(2026, 1, 1),
         schema: pa.Schema = SCHEMA) -> pa.Table:
    """Rows of ``SCHEMA`` with the given ids (price = id / 2)."""
    ids = list(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "region": pa.array([region] * len(ids), pa.string()),
        "day": pa.array([day] * len(ids), pa.date32()),
        "price": pa.array([i / 2 for i in ids], pa.float64()),
    }, schema=schema)


def storage_of(uri: str) -> timeline.Storage:
    return timeline.open_storage(uri)


def data_files_on_storage(uri: str) -> list[str]:
    """Every Parquet data file under the table folder (table-relative), metadata excluded."""
    return sorted(k for k in storage_of(uri).list("", recursive=True)
                  if k.endswith(".parquet") and not k.startswith(METADATA_PREFIXES))


def read_data_file(uri: str, relative_path: str) -> pa.Table:
    """Read one data file back with pyarrow, straight from storage."""
    return pq.read_table(pa.BufferReader(storage_of(uri).read(relative_path)))


def relative(table: txn.Table, data_file: txn.DataFile) -> str:
    """The table-relative path of a snapshot's ``DataFile``."""
    prefix = table.uri.rstrip("/") + "/"
    assert data_file.path.startswith(prefix), (data_file.path, prefix)
    return data_file.path[len(prefix):]


def sorted_rows(table: pa.Table, key: str = "id") -> list[dict[str, Any]]:
    """Rows as dicts, ordered by ``key``: tables compare by content, not file order."""
    return sorted(table.to_pylist(), key=lambda r: (r[key] is None, r[key]))


def states(table: txn.Table) -> list[tuple[str, str]]:
    """(action, state) of every instant, by requested time."""
    return [(i.action, i.state) for i in table.timeline()]


class ArrowStorage:
    """Mixin: forward ``arrow_filesystem`` (data files) to the wrapped store."""

    inner: timeline.Storage

    def arrow_filesystem(self) -> Any:
        return self.inner.arrow_filesystem()  # type: ignore[attr-defined]


class Faulty(ArrowStorage, FaultyStorage):
    """``FaultyStorage`` that a table can also write data files through."""


class CountingStorage(ArrowStorage):
    """A storage that records every call (op, path) and forwards it unchanged."""

    def __init__(self, inner: timeline.Storage) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []
        self._mutex = threading.Lock()

    def _log(self, op: str, path: str) -> None:
        with self._mutex:
            self.calls.append((op, path))

    @property
    def uri(self) -> str:
        return self.inner.uri

    def read(self, path: str) -> bytes:
        self._log("read", path)
        return self.inner.read(path)

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._log("put_if_absent", path)
        self.inner.put_if_absent(path, data)

    def put(self, path: str, data: bytes) -> None:
        self._log("put", path)
        self.inner.put(path, data)

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        self._log("list", prefix)
        return self.inner.list(prefix, recursive=recursive)

    def delete(self, path: str) -> None:
        self._log("delete", path)
        self.inner.delete(path)

    def exists(self, path: str) -> bool:
        self._log("exists", path)
        return self.inner.exists(path)

    def size(self, path: str) -> int:
        self._log("size", path)
        return self.inner.size(path)


def table_on(uri: str, storage: timeline.Storage, **kwargs: Any) -> txn.Table:
    """A ``Table`` handle for the table at ``uri`` that does all its I/O through ``storage``."""
    return txn.Table(uri, storage, read_config(storage), **kwargs)


def batch_reader(schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> pa.RecordBatchReader:
    return pa.RecordBatchReader.from_batches(schema, batches)


def priced(ids: list[int] | range, price: float) -> pa.Table:
    """Rows of ``SCHEMA`` with the given ids, all with ``price``."""
    data = rows(ids)
    return data.set_column(data.schema.get_field_index("price"), SCHEMA.field("price"),
                           pa.array([price] * data.num_rows, pa.float64()))


def insert_keys(table: Any, how: str, ids: list[int], price: float, folder: Any) -> Any:
    """An insert of new keys by one of the writes that bring keys: a keyed append, an upsert, a
    stream's batch (the table has ``streaming=true``) or ADD SEGMENT of ``folder``."""
    data = priced(ids, price)
    if how == "append":
        return table.append(data)
    if how == "upsert":
        return table.upsert(data)
    if how == "stream":
        return table.stream("feed").write(0, data)
    assert how == "add_segment", how
    folder.mkdir()
    pq.write_table(data, folder / "part-0.parquet")
    return table.add_segment(folder, "parquet")
