"""Helpers of the Spark tests: the rows they write, and views of what is on storage.

Tables are observed through their public surface (``to_arrow``, ``snapshot``, ``timeline``,
``lookup``, ``validate``) and through the files on local disk; Spark DataFrames are compared
with pyarrow models after ``toArrow()``.
"""

from __future__ import annotations

import datetime as dt
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa

import txn

#: An "orders" table: a non-nullable id, a partition candidate, a date, a float and an int.
ORDERS = pa.schema([
    ("id", pa.int64(), False),
    ("region", pa.string()),
    ("day", pa.date32()),
    ("price", pa.float64()),
    ("qty", pa.int32()),
])

REGIONS = ("eu", "us", "apac")

#: Folders of a table that hold no data files.
NOT_DATA = ("_timeline", "_metadata", "_markers")

#: One column of every type the Spark tests map (with its Spark type below).
ALL_TYPES = pa.schema([
    ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("f32", pa.float32()), ("f64", pa.float64()), ("dec", pa.decimal128(12, 3)),
    ("s", pa.string()), ("ls", pa.large_string()), ("b", pa.binary()), ("bo", pa.bool_()),
    ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
    ("ts_paris", pa.timestamp("ms", tz="Europe/Paris")), ("ntz", pa.timestamp("us")),
    ("nums", pa.list_(pa.int32())), ("pair", pa.struct([("a", pa.int32()), ("b", pa.string())])),
])

EXPECTED_SPARK_TYPES = {
    "i8": "tinyint", "i16": "smallint", "i32": "int", "i64": "bigint", "f32": "float",
    "f64": "double", "dec": "decimal(12,3)", "s": "string", "ls": "string", "b": "binary",
    "bo": "boolean", "d": "date", "ts": "timestamp", "ts_paris": "timestamp", "ntz": "timestamp_ntz",
    "nums": "array<int>", "pair": "struct<a:int,b:string>",
}


def all_types_rows() -> pa.Table:
    """Three rows of ``ALL_TYPES``: typical values, extremes and empties, and all nulls."""
    utc = dt.timezone.utc
    full = {
        "i8": -128, "i16": 32767, "i32": -(2**31), "i64": 2**63 - 1, "f32": 1.5, "f64": -2.25e300,
        "dec": Decimal("123456789.125"), "s": "héllo", "ls": "wide", "b": b"\x00\xff\x10", "bo": True,
        "d": dt.date(2026, 3, 1), "ts": dt.datetime(2026, 3, 1, 12, 30, 0, 123456, tzinfo=utc),
        "ts_paris": dt.datetime(2026, 7, 1, 22, 0, 0, 5000, tzinfo=utc),
        "ntz": dt.datetime(2026, 3, 1, 23, 59, 59, 999999), "nums": [1, None, 3],
        "pair": {"a": 7, "b": "x"},
    }
    small = {**full, "i8": 127, "i16": -32768, "i32": 2**31 - 1, "i64": -(2**63), "f32": -0.0,
             "f64": float("inf"), "dec": Decimal("-0.001"), "s": "", "b": b"", "bo": False,
             "d": dt.date(1970, 1, 1), "ts": dt.datetime(1900, 1, 1, tzinfo=utc),
             "ntz": dt.datetime(1, 1, 1), "nums": [], "pair": {"a": None, "b": None}}
    return pa.Table.from_pylist([full, small, dict.fromkeys(ALL_TYPES.names)], schema=ALL_TYPES)


def orders(ids: range | list[int], *, price_offset: float = 0.0) -> pa.Table:
    """Rows of ``ORDERS`` for these ids; every 17th qty is null, prices are scrambled."""
    ids = list(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "region": pa.array([REGIONS[i % 3] for i in ids], pa.string()),
        "day": pa.array([date(2026, 1, 1) + timedelta(days=i % 40) for i in ids], pa.date32()),
        "price": pa.array([float((i * 37) % 1000) + price_offset for i in ids], pa.float64()),
        "qty": pa.array([None if i % 17 == 0 else i % 50 for i in ids], pa.int32()),
    }, schema=ORDERS)


def frame(spark: Any, table: pa.Table, partitions: int | None = None) -> Any:
    """A Spark DataFrame of ``table`` with the Spark types of its schema."""
    from txn.spark._types import spark_schema

    df = spark.createDataFrame(table, schema=spark_schema(table.schema))
    return df.repartition(partitions) if partitions else df


def rows_by(table: pa.Table, key: str | tuple[str, ...] = "id") -> list[dict[str, Any]]:
    """Rows as dicts, ordered by ``key``: tables compare by content, not row order."""
    keys = (key,) if isinstance(key, str) else key
    return sorted(table.to_pylist(), key=lambda r: tuple((r[k] is None, r[k]) for k in keys))


def spark_rows(df: Any, schema: pa.Schema, key: str | tuple[str, ...] = "id") -> list[dict[str, Any]]:
    """A DataFrame's rows, cast to the table's Arrow types (Spark reads tz timestamps as UTC)."""
    got = df.toArrow()
    target = pa.schema([schema.field(name).with_nullable(True) for name in got.column_names])
    return rows_by(got.cast(target), key)


def data_files(uri: str) -> list[str]:
    """Every Parquet data file under the table folder (table-relative), metadata excluded."""
    root = Path(uri)
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*.parquet")
        if not str(p.relative_to(root)).startswith(NOT_DATA))


def file_bytes(uri: str) -> dict[str, bytes]:
    return {path: (Path(uri) / path).read_bytes() for path in data_files(uri)}


def markers(uri: str) -> list[str]:
    folder = Path(uri) / "_markers"
    return sorted(os.listdir(folder)) if folder.exists() else []


def index_logs(uri: str) -> list[str]:
    """Record-index log files (``<T>[.<part>].log.arrow``) of a keyed table."""
    folder = Path(uri) / "_metadata" / "record_index"
    return sorted(p.name for p in folder.rglob("*.log.arrow")) if folder.exists() else []


def states(table: txn.Table) -> list[tuple[str, str]]:
    """(action, state) of every instant, by requested time."""
    return [(i.action, i.state) for i in table.timeline()]


def relative(table: txn.Table, path: str) -> str:
    """A table-relative path of a snapshot file location or a Spark ``file:`` URI."""
    prefix = table.uri.rstrip("/") + "/"
    for scheme in ("file://", "file:"):
        if path.startswith(scheme) and not prefix.startswith(scheme):
            path = path[len(scheme):]
            break
    assert path.startswith(prefix), (path, prefix)
    return path[len(prefix):]


def storage_state(uri: str) -> tuple[Any, ...]:
    """What a refused write must leave unchanged: the timeline and the data files."""
    table = txn.open_table(uri)
    return [(i.time, i.action, i.state) for i in table.timeline()], file_bytes(uri)


def exploding(spark: Any, table: pa.Table) -> Any:
    """A DataFrame of ``table`` that fails as soon as any task evaluates it."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    def explode(value: int) -> int:
        raise RuntimeError("a task ran")

    return frame(spark, table).withColumn("id", F.udf(explode, LongType(), useArrow=False)("id"))


# -- streaming sources ---------------------------------------------------------------------------

def wait_for(condition: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class LineServer:
    """``nc -lk <port>`` of the walk-through: a server on 127.0.0.1 (a free port) that sends
    the lines it is fed to the one client that connects."""

    def __init__(self) -> None:
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(1)
        self.port: int = self._server.getsockname()[1]
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            connection, _ = self._server.accept()
        except OSError:  # closed before anyone connected
            return
        with connection:
            while (line := self._lines.get()) is not None:
                connection.sendall(f"{line}\n".encode())

    def feed(self, lines: list[str]) -> None:
        for line in lines:
            self._lines.put(line)

    def close(self) -> None:
        self._lines.put(None)
        self._server.close()
