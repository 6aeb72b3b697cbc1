"""Unkeyed writes through Spark's own Parquet writer (``txn/spark/_native.py``).

Invariants:

* the files are Spark's (its footer says so), published under metatxn's names in the segment
  folder, and their statistics, taken from the footers, equal what the pyarrow writer computes
  from the same rows (exact ranges, unknown where a NaN or an over-long value would make one lie);
* ``sort_by`` sorts each file as the pyarrow writer does (ascending, nulls last);
* a failed Spark job, or a driver killed at any point before the commit, leaves nothing a reader
  sees; the instant is rolled back, and staged and published files are gone once the next
  writer ran; ``validate()`` is clean afterwards.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txn
import txn.spark
from txn._files import footer_stats
from txn._files._writer import column_stats
from txn._twophase import _staging as _native  # where foreign files are published

from .helpers import ORDERS, data_files, frame, markers, orders, rows_by, spark_rows

pytestmark = pytest.mark.spark

#: One column of every type the native path writes.
NATIVE_TYPES = pa.schema([
    ("i8", pa.int8()), ("i16", pa.int16()), ("i32", pa.int32()), ("i64", pa.int64()),
    ("f32", pa.float32()), ("f64", pa.float64()), ("dec", pa.decimal128(12, 3)),
    ("s", pa.string()), ("b", pa.binary()), ("bo", pa.bool_()), ("d", pa.date32()),
    ("ts", pa.timestamp("us", tz="UTC")), ("ntz", pa.timestamp("us")), ("gone", pa.string()),
])


def _native_rows(count: int) -> pa.Table:
    base = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return pa.table({
        "i8": [i % 100 - 50 for i in range(count)],
        "i16": [None if i % 7 == 0 else i % 1000 for i in range(count)],
        "i32": list(range(count)),
        "i64": [i * 1_000_003 for i in range(count)],
        "f32": [i / 3 for i in range(count)],
        # One NaN: the range of that file's column is unknown, the others' exact.
        "f64": [math.nan if i == 5 else i * 0.5 for i in range(count)],
        "dec": [Decimal(i) / 8 for i in range(count)],
        # Non-ASCII too: ranges compare UTF-8 bytes unsigned, in the footer as in pyarrow.
        "s": [f"name-{i:05d}" if i % 11 else f"\u00fcber-{i}" for i in range(count)],
        "b": [bytes([i % 256, 7]) for i in range(count)],
        "bo": [i % 3 == 0 for i in range(count)],
        "d": [dt.date(2026, 1, 1) + dt.timedelta(days=i % 400) for i in range(count)],
        "ts": [base + dt.timedelta(seconds=i) for i in range(count)],
        "ntz": [dt.datetime(2026, 1, 1) + dt.timedelta(minutes=i) for i in range(count)],
        "gone": pa.nulls(count, pa.string()),
    }, schema=NATIVE_TYPES)


def _nan_as_text(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows with NaN made comparable (NaN != NaN)."""
    return [{k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
            for row in rows]


def _staged(uri: str) -> list[str]:
    """What the staging folder holds (the folder itself may stay, empty)."""
    folder = Path(uri) / "_staging"
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def _spark_written(path: Path) -> bool:
    metadata = pq.read_metadata(path).metadata or {}
    return b"org.apache.spark.version" in metadata


def test_unkeyed_files_are_sparks_with_the_statistics_the_pyarrow_writer_computes(
        spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "types")
    table = txn.create_table(uri, NATIVE_TYPES)
    data = _native_rows(3000)
    commit = txn.spark.write(frame(spark, data).repartitionByRange(3, "i32"), uri)

    assert commit is not None and commit.rows_added == 3000 and commit.files_added == 3
    files = data_files(uri)
    assert sorted(files) == sorted(commit.paths_added)
    segment = table.segments()[0].id
    for path in files:
        folder, name = path.split("/")
        assert folder == f"segment_{segment}" and name.startswith(f"part-{segment}-")
        assert name.endswith(f"_{table.timeline()[-1].time}.parquet")
        assert _spark_written(Path(uri) / path), f"{path} was not written by Spark"
    expected = _nan_as_text(rows_by(data, "i32"))
    assert _nan_as_text(rows_by(table.to_arrow(), "i32")) == expected
    assert _nan_as_text(spark_rows(txn.spark.read(spark, uri), NATIVE_TYPES, "i32")) == expected

    with_nan = 0
    for path in files:
        written = pq.read_table(Path(uri) / path).cast(NATIVE_TYPES)
        from_footer = footer_stats(pq.read_metadata(Path(uri) / path), NATIVE_TYPES)
        assert from_footer == column_stats(written), path
        with_nan += from_footer["f64"].min is None
    assert with_nan == 1, "the file holding the NaN has an unknown f64 range, the others exact"
    assert _staged(uri) == [] and markers(uri) == []
    assert table.validate().ok

    # The ranges prune as the pyarrow writer's do; the NaN file is never pruned by f64.
    snapshot = table.snapshot()
    assert len(snapshot.files(pc.field("i32") < 10)) == 1
    assert len(snapshot.files(pc.field("f64") > 1e9)) == 1
    assert txn.spark.read(spark, uri, filter="i32 < 10").count() == 10


def test_values_over_four_kib_leave_the_range_unknown(spark: Any, tmp_path: Path) -> None:
    """parquet-java stores no statistics for such a column chunk (not even its null count): the
    file gets none for that column, so no filter on it prunes the file."""
    uri = str(tmp_path / "long")
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    table = txn.create_table(uri, schema)
    data = pa.table({"id": [1, 2], "text": ["a" * 5000, "b"]}, schema=schema)
    txn.spark.write(frame(spark, data, 1), uri)
    (path,) = data_files(uri)
    stats = footer_stats(pq.read_metadata(Path(uri) / path), schema)
    assert "text" not in stats
    assert stats["id"] == column_stats(data)["id"]
    for matching in (pc.field("text") == "b", pc.field("text").is_null(), pc.field("text") > "a" * 4999):
        assert len(table.snapshot().files(matching)) == 1
    assert rows_by(table.to_arrow()) == rows_by(data)


def _first_row(rows: pa.Table) -> tuple[bool, int, float]:
    """The (qty, price) sort key of a file's first row (nulls last)."""
    qty, price = rows["qty"][0].as_py(), rows["price"][0].as_py()
    return (qty is None, qty or 0, price)


def test_sort_by_sorts_the_load_as_a_whole_ascending_with_nulls_last(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, sort_by=["qty", "price"])
    data = orders(range(3000))
    data = data.set_column(4, "qty", pa.array([None if i % 9 == 0 else i % 5 for i in range(3000)],
                                              pa.int32()))
    commit = txn.spark.write(frame(spark, data, 3), uri)
    assert commit is not None and commit.files_added == 3, "as many files as the DataFrame's partitions"
    order = [("qty", "ascending"), ("price", "ascending")]
    written = [pq.read_table(Path(uri) / path).cast(ORDERS) for path in commit.paths_added]
    for rows in written:
        assert rows.equals(rows.sort_by(order))
    # The files cover consecutive ranges: together, in order of their first rows, one sorted load.
    written.sort(key=_first_row)
    whole = pa.concat_tables(written)
    assert whole.equals(whole.sort_by(order))
    assert whole["qty"][whole.num_rows - 1].as_py() is None, "nulls last"
    assert rows_by(table.to_arrow()) == rows_by(data)
    assert len(table.snapshot().files(pc.field("qty") == 0)) == 1


def test_an_empty_dataframe_writes_no_file(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS)
    txn.spark.write(frame(spark, orders(range(0)), 1), uri)
    assert data_files(uri) == [] and table.to_arrow().num_rows == 0
    assert _staged(uri) == []
    assert table.validate().ok


def _failing_in_one_task(spark: Any, uri: str, data: pa.Table, poison: int) -> Any:
    """A DataFrame whose row ``poison`` fails its task once the other task staged a file.

    Spark stages task output under ``_staging/<T>/_temporary``: waiting for a file there makes
    sure the failure leaves something Spark's job abort must remove.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    staging = os.path.join(uri, "_staging")
    heartbeats = os.path.join(uri, "_timeline", "heartbeats")

    def staged() -> bool:
        return any(name.endswith(".parquet") for _, _, names in os.walk(staging) for name in names)

    def check(value: int) -> int:
        # Only while a writer beats: the not-null check before ``begin`` evaluates the rows too.
        if value == poison and os.path.isdir(heartbeats) and os.listdir(heartbeats):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not staged():
                time.sleep(0.02)
            raise RuntimeError(f"poisoned row {value}")
        return value

    return frame(spark, data, 2).withColumn("id", F.udf(check, LongType(), useArrow=False)("id"))


def test_a_failing_task_leaves_nothing_and_the_next_write_succeeds(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS)
    table.append(orders(range(100)))
    visible, files = rows_by(table.to_arrow()), data_files(uri)

    df = _failing_in_one_task(spark, uri, orders(range(1000, 3000)), poison=2999)
    with pytest.raises(Exception, match="poisoned row 2999"):
        txn.spark.write(df, uri, "append")

    assert rows_by(table.to_arrow()) == visible
    failed, rollback = table.timeline()[-2:]
    assert (failed.action, failed.state, rollback.state) == ("commit", "rolledback", "completed")
    assert data_files(uri) == files and markers(uri) == []
    assert _staged(uri) == [], "the staging folder is removed"
    assert table.validate().ok

    txn.spark.write(frame(spark, orders(range(1000, 1200)), 2), uri)
    assert rows_by(table.to_arrow()) == rows_by(orders([*range(100), *range(1000, 1200)]))
    assert table.validate().ok


def test_a_driver_killed_while_publishing_leaves_nothing_visible_and_the_next_writer_cleans_up(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver dies after the Spark job, having published one file of three: no rollback,
    no cleanup runs. The published file is claimed by its marker, the others are staged."""
    from txn._commit import _protocol

    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, properties={
        "heartbeat.interval_ms": "1000", "heartbeat.timeout_ms": "2000"})
    table.append(orders(range(100)))
    visible, files = rows_by(table.to_arrow()), data_files(uri)
    real_publish = _native._publish
    published: list[str] = []

    def dies_on_second(*args: Any) -> Any:
        if published:
            raise SystemExit("driver killed")
        status = real_publish(*args)
        published.append(status.path)
        return status

    monkeypatch.setattr(_native, "_publish", dies_on_second)
    monkeypatch.setattr(_native, "_remove_folder", lambda store, folder: None)  # a kill runs no cleanup
    monkeypatch.setattr(_protocol.Protocol, "_roll_back_quietly", lambda self, instant, lease=None: None)
    with pytest.raises(SystemExit):
        txn.spark.write(frame(spark, orders(range(500, 800)), 3), uri, "append")
    monkeypatch.undo()

    dead = table.timeline()[-1]
    assert dead.state == "inflight" and published and published[0] in data_files(uri)
    staged = list((Path(uri) / "_staging" / dead.time).rglob("*.parquet"))
    assert len(staged) == 2, "two files were never published"
    assert rows_by(txn.spark.read(spark, uri).toArrow()) == visible, "readers do not see them"
    assert rows_by(table.to_arrow()) == visible

    time.sleep(2.2)  # the dead writer's heartbeat expires
    commit = txn.spark.write(frame(spark, orders(range(500, 800)), 2), uri, "append")
    assert commit is not None
    assert {i.time: i.state for i in table.timeline()}[dead.time] == "rolledback"
    assert sorted(data_files(uri)) == sorted([*files, *commit.paths_added]), "the published file is gone"
    assert markers(uri) == []
    assert _staged(uri) == [], "the dead writer's staging folder is swept"
    assert rows_by(table.to_arrow()) == rows_by(orders([*range(100), *range(500, 800)]))
    assert table.validate().ok


def test_a_live_writers_staging_folder_is_not_swept(spark: Any, tmp_path: Path) -> None:
    """Only folders of instants that are not pending go: a pending instant's stays."""
    uri = str(tmp_path / "orders")
    txn.create_table(uri, ORDERS)
    with _pending(uri) as pending_time:
        live = Path(uri) / "_staging" / pending_time / "part-0.parquet"
        live.parent.mkdir(parents=True)
        live.write_bytes(b"staged")
        gone = Path(uri) / "_staging" / "20200101000000000" / "part-0.parquet"
        gone.parent.mkdir(parents=True)
        gone.write_bytes(b"left by a dead writer")
        txn.spark.write(frame(spark, orders(range(10)), 1), uri)
        assert live.exists() and not gone.parent.exists()


class _pending:
    """An instant begun (and left pending) by another writer of the table, for the duration."""

    def __init__(self, uri: str) -> None:
        from txn._commit import protocol_of
        from txn._context import open_context

        self._context = open_context(uri, None)
        self._protocol = protocol_of(self._context)

    def __enter__(self) -> str:
        self._begun = self._protocol.begin("append", "commit", new_segment=True)
        return str(self._begun.instant.time)

    def __exit__(self, *exc: object) -> None:
        self._begun.heartbeat.stop()
        self._protocol.roll_back(self._begun.instant)


# -- keyed tables through Spark's writer (txn/spark/_keyed.py) ---------------------------------


def test_keyed_tables_are_written_by_spark_and_indexed_by_node_range(spark: Any, tmp_path: Path) -> None:
    """Spark's files, one index log part per node range holding only keys of its range, and
    the index finds every row (append, then an upsert through the same path)."""
    import pyarrow.ipc as ipc

    from txn.spark import _keyed

    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id", properties={"record_index.shards": "4"})
    txn.spark.write(frame(spark, orders(range(1000)), 3), uri)
    files = data_files(uri)
    assert files and all(_spark_written(Path(uri) / f) for f in files)
    ticket = _ticket(table)
    ranges = _keyed.node_ranges(spark, ticket)
    assert ranges >= 1 and (4 % ranges == 0 or ranges % 4 == 0)
    logs = sorted((Path(uri) / "_metadata" / "record_index").glob("*.log.arrow"))
    assert len(logs) == ranges
    for log in logs:
        part = int(log.name.split(".")[1]) // 1000
        keys = ipc.open_file(log).read_all().select(["key_0"]).rename_columns(["id"])
        assert set((ticket.key_hashes(keys) % ranges).tolist()) == {part}

    txn.spark.write(frame(spark, orders(range(900, 1100), price_offset=0.5), 2), uri, "upsert")
    assert rows_by(table.to_arrow()) == rows_by(pa.concat_tables([
        orders(range(900)), orders(range(900, 1100), price_offset=0.5)]))
    found = table.lookup(pa.table({"id": pa.array([5, 950, 1050], pa.int64())}))
    assert found.num_rows == 3
    assert table.validate().ok


def _ticket(table: txn.Table) -> txn.WriteTicket:
    """A ticket of the table (begun and aborted: only its hashing and layout are used)."""
    with table.begin_write() as pending:
        return pending.ticket
