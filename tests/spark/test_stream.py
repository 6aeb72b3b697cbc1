"""``txn.spark.write_stream``: one commit per micro-batch, exactly once across restarts.

The source is a folder of Parquet files read one file per micro-batch (``maxFilesPerTrigger``),
run with ``availableNow``: a restarted query replays exactly what Spark's checkpoint says is not
done, with the same batch ids and rows. The target is keyed, so a batch appended twice would be
refused with DuplicateKeyError rather than pass unnoticed.

Crashes are simulated where they matter for the argument in design/spark.md: Spark forgetting a
batch it had recorded (its ``commits/<N>`` file deleted: the batch is replayed after our commit),
and the batch function failing before or after our commit point.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txn
import txn.spark
from metatxn import timeline
from txn.spark import _stream as spark_stream
from txn.spark._types import spark_schema

from .helpers import ORDERS, orders, rows_by

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def _no_query_left_running(spark: Any) -> Iterator[None]:
    yield
    for query in spark.streams.active:
        query.stop()


def _source(spark: Any, folder: Path) -> Any:
    return (spark.readStream.schema(spark_schema(ORDERS)).option("maxFilesPerTrigger", 1)
            .parquet(str(folder)))


def _add_file(folder: Path, name: str, rows: pa.Table) -> None:
    """Add a source file; Spark takes files in modification-time order, so space them out."""
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.parquet"
    pq.write_table(rows, path)
    moment = time.time() - 600 + len(list(folder.glob("*.parquet")))
    os.utime(path, (moment, moment))


def _run(spark: Any, folder: Path, uri: str, checkpoint: Path, mode: str = "append") -> None:
    """Run the query until the source holds nothing new; raise what the query raised."""
    query = txn.spark.write_stream(_source(spark, folder), uri, checkpoint_location=str(checkpoint),
                                   mode=mode, trigger={"availableNow": True})
    finished = query.awaitTermination(120)
    assert finished, "the query did not finish"


def _batches(table: txn.Table) -> list[tuple[str, str]]:
    """(stream, batch) of every completed data commit, in timeline order."""
    reader = timeline.Timeline(timeline.open_storage(table.uri))
    return [(extra.get("stream", ""), extra.get("batch", ""))
            for extra in (reader.read_metadata(i)["extra"] for i in table.timeline()
                          if i.state == "completed" and i.action != "rollback")]


def test_each_micro_batch_commits_once_even_when_spark_replays_it(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    _add_file(source, "f0", orders(range(100)))
    _add_file(source, "f1", orders(range(100, 250)))

    _run(spark, source, uri, checkpoint)
    stream = (checkpoint / spark_stream.STREAM_ID_FILE).read_text()
    assert _batches(table) == [(stream, "0"), (stream, "1")]
    assert rows_by(table.to_arrow()) == rows_by(orders(range(250)))

    # Spark forgets that batch 1 was done (a crash between our commit and its own): it replays
    # batch 1, which finds its commit on the timeline and writes nothing.
    (checkpoint / "commits" / "1").unlink()
    (checkpoint / "commits" / ".1.crc").unlink(missing_ok=True)
    _run(spark, source, uri, checkpoint)
    assert (checkpoint / "commits" / "1").exists(), "Spark ran batch 1 again"
    assert _batches(table) == [(stream, "0"), (stream, "1")]

    # The restarted query keeps its stream id and goes on with the next batch.
    _add_file(source, "f2", orders(range(250, 300)))
    _run(spark, source, uri, checkpoint)
    assert (checkpoint / spark_stream.STREAM_ID_FILE).read_text() == stream
    assert _batches(table) == [(stream, "0"), (stream, "1"), (stream, "2")]
    assert rows_by(table.to_arrow()) == rows_by(orders(range(300)))
    assert table.validate().ok


def test_a_batch_that_fails_around_its_commit_is_written_once_after_restarts(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batch 1 fails first before the commit point, then after it; each restart replays it."""
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    first, changed = orders(range(200)), orders(range(100, 300), price_offset=0.5)
    _add_file(source, "f0", first)
    _add_file(source, "f1", changed)  # an upsert of 100 existing keys and 100 new ones
    real_write = spark_stream.write
    calls: list[str] = []

    def crash_before(df: Any, uri: str, mode: str, **kwargs: Any) -> Any:
        if kwargs["extra"]["batch"] == "1":
            calls.append("before")
            raise RuntimeError("driver crashed before the commit")
        return real_write(df, uri, mode, **kwargs)

    monkeypatch.setattr(spark_stream, "write", crash_before)
    with pytest.raises(Exception, match="driver crashed before the commit"):
        _run(spark, source, uri, checkpoint, mode="upsert")
    stream = (checkpoint / spark_stream.STREAM_ID_FILE).read_text()
    assert _batches(table) == [(stream, "0")]
    assert rows_by(table.to_arrow()) == rows_by(first)

    def crash_after(df: Any, uri: str, mode: str, **kwargs: Any) -> Any:
        real_write(df, uri, mode, **kwargs)
        calls.append("after")
        raise RuntimeError("driver crashed after the commit")

    monkeypatch.setattr(spark_stream, "write", crash_after)
    with pytest.raises(Exception, match="driver crashed after the commit"):
        _run(spark, source, uri, checkpoint, mode="upsert")
    assert _batches(table) == [(stream, "0"), (stream, "1")]

    monkeypatch.setattr(spark_stream, "write", real_write)
    _run(spark, source, uri, checkpoint, mode="upsert")
    assert calls == ["before", "after"]
    assert _batches(table) == [(stream, "0"), (stream, "1")], "the replay wrote nothing"
    model = {r["id"]: r for r in first.to_pylist()} | {r["id"]: r for r in changed.to_pylist()}
    assert rows_by(table.to_arrow()) == sorted(model.values(), key=lambda r: r["id"])
    assert table.validate().ok


def test_bad_stream_arguments_are_refused_before_the_query_starts(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    txn.create_table(uri, ORDERS, record_key="id")
    source = tmp_path / "source"
    _add_file(source, "f0", orders(range(10)))
    with pytest.raises(txn.InvalidOptionError, match="mode"):
        txn.spark.write_stream(_source(spark, source), uri, checkpoint_location=str(tmp_path / "c1"),
                               mode="overwrite")
    with pytest.raises(txn.SchemaMismatchError, match="qty"):
        txn.spark.write_stream(_source(spark, source).drop("qty"), uri,
                               checkpoint_location=str(tmp_path / "c2"))
    with pytest.raises(txn.InvalidOptionError, match=r"partition_by \['region'\] differs from the table's"):
        txn.spark.write_stream(_source(spark, source), uri, checkpoint_location=str(tmp_path / "c3"),
                               partition_by=["region"])
    with pytest.raises(txn.InvalidOptionError, match="needs record_key"):
        txn.spark.write_stream(_source(spark, source), str(tmp_path / "nowhere"), mode="upsert",
                               checkpoint_location=str(tmp_path / "c4"))
    with pytest.raises(TypeError):
        txn.spark.write_stream(_source(spark, source), str(tmp_path / "nowhere"),
                               checkpoint_location=str(tmp_path / "c5"), trigger={"every": "5 seconds"})
    assert spark.streams.active == []
    assert txn.open_table(uri).timeline() == []
    assert not (tmp_path / "nowhere").exists()


def test_a_stream_into_a_new_location_creates_the_table(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    source = tmp_path / "source"
    _add_file(source, "f0", orders(range(10)))
    query = txn.spark.write_stream(_source(spark, source), uri, checkpoint_location=str(tmp_path / "c"),
                                   partition_by=["region"], record_key="id", trigger={"availableNow": True})
    try:
        query.awaitTermination(120)
    finally:
        query.stop()
    table = txn.open_table(uri)
    assert (table.partition_by, table.record_key, table.schema.names) == (["region"], "id", ORDERS.names)
    assert rows_by(table.to_arrow()) == rows_by(orders(range(10)))


def test_an_upsert_stream_into_a_table_without_key_is_refused_up_front(
        spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    txn.create_table(uri, ORDERS)
    source = tmp_path / "source"
    _add_file(source, "f0", orders(range(10)))
    try:
        query = txn.spark.write_stream(_source(spark, source), uri, mode="upsert",
                                       checkpoint_location=str(tmp_path / "c"))
    except txn.InvalidOptionError as refused:
        assert "record_key" in str(refused)
    else:
        query.stop()
        pytest.fail("the query started")


def test_a_running_query_whose_stream_is_dropped_stops_and_a_new_one_starts_afresh(
        spark: Any, tmp_path: Path) -> None:
    """Issue 22, item 4, on Spark: on a table without ``streaming=true`` no ``Stream`` object
    ties the query to DROP STREAM, so, like a query in another process, it wrote on: its next
    micro-batch brought the dropped stream back. It now fails with StreamDroppedError."""
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    source, checkpoint = tmp_path / "source", tmp_path / "checkpoint"
    _add_file(source, "f0", orders(range(10)))
    query = txn.spark.write_stream(_source(spark, source), uri, checkpoint_location=str(checkpoint),
                                   name="job", trigger={"processingTime": "200 milliseconds"})
    try:
        deadline = time.monotonic() + 120
        while not table.streams() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [(i.name, i.last_batch_id) for i in table.streams()] == [("job", 0)]
        table.drop_stream("job")
        _add_file(source, "f1", orders(range(10, 20)))
        with pytest.raises(Exception, match=r"StreamDroppedError|was dropped"):
            query.awaitTermination(120)
    finally:
        query.stop()
    assert table.streams() == [], "the dropped stream stays dropped"
    assert rows_by(table.to_arrow()) == rows_by(orders(range(10)))

    # A query started after the drop (here from the same checkpoint) writes the next generation.
    query = txn.spark.write_stream(_source(spark, source), uri, checkpoint_location=str(checkpoint),
                                   name="job", trigger={"availableNow": True})
    try:
        assert query.awaitTermination(120), "the query did not finish"
    finally:
        query.stop()
    assert [(i.name, i.last_batch_id) for i in table.streams()] == [("job", 1)]
    assert rows_by(table.to_arrow()) == rows_by(orders(range(20)))
    assert table.validate().ok
