"""``spark.readStream.format("metatxn")``: a table's change feed as a Spark stream.

Each query runs with ``Trigger.AvailableNow``, so it reads what the table holds when it starts,
in micro-batches of its limits, and stops; a query started again from the same checkpoint goes
on from where the last one committed. Batches are collected with ``foreachBatch`` (batch id and
rows), which shows both what was read and how it was cut into micro-batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
import txn.spark

from .helpers import ORDERS, orders

pytestmark = pytest.mark.spark


@pytest.fixture(autouse=True)
def _registered(request: pytest.FixtureRequest) -> Iterator[None]:
    """The format registered for the tests that use Spark, and no query left running after them."""
    if "spark" not in request.fixturenames:
        yield
        return
    spark = request.getfixturevalue("spark")
    txn.spark.register(spark)
    yield
    for query in spark.streams.active:
        query.stop()


def run(spark: Any, uri: str, checkpoint: Path, **options: str) -> list[pa.Table]:
    """Run a stream of the table until it has read what is there now: its micro-batches' rows."""
    batches: list[pa.Table] = []

    def each(frame: Any, batch_id: int) -> None:
        batches.append(frame.toArrow())

    query = (spark.readStream.format("metatxn").options(**options).load(uri)
             .writeStream.foreachBatch(each).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert not query.isActive, "the stream did not finish"
    if query.exception() is not None:
        raise AssertionError(str(query.exception()))
    return [b for b in batches if b.num_rows]


def ids(batches: list[pa.Table]) -> list[int]:
    return sorted(i for b in batches for i in b["id"].to_pylist())


@pytest.fixture
def table(tmp_path: Path) -> txn.Table:
    """An unkeyed table with two appends of 5 rows each."""
    created = txn.create_table(str(tmp_path / "source"), ORDERS)
    created.append(orders(range(5)))
    created.append(orders(range(5, 10)))
    return created


def test_by_default_a_stream_reads_the_table_then_its_changes(spark: Any, table: txn.Table,
                                                              tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    first = run(spark, table.uri, checkpoint)
    assert ids(first) == list(range(10)) and first[0].column_names == ORDERS.names
    table.append(orders(range(10, 13)))
    table.delete(pc.field("id") == 0)  # no row added: nothing for a stream of added rows
    assert ids(run(spark, table.uri, checkpoint)) == [10, 11, 12]
    assert run(spark, table.uri, checkpoint) == []


def test_a_stream_starts_at_the_latest_the_earliest_or_an_instant(spark: Any, table: txn.Table,
                                                                  tmp_path: Path) -> None:
    first = table.history()[-1].instant  # the first append
    latest = tmp_path / "latest"
    assert run(spark, table.uri, latest, startingInstant="latest") == []
    table.append(orders(range(10, 12)))
    assert ids(run(spark, table.uri, latest, startingInstant="latest")) == [10, 11]
    assert ids(run(spark, table.uri, tmp_path / "earliest", startingInstant="earliest")) == list(range(12))
    assert ids(run(spark, table.uri, tmp_path / "after", startingInstant=first)) == list(range(5, 12))


def test_limits_admit_whole_instants_and_at_least_one(spark: Any, table: txn.Table,
                                                      tmp_path: Path) -> None:
    table.append(orders(range(10, 15)))
    for limit, sizes in ((("maxFilesPerTrigger", "1"), [5, 5, 5]),
                         (("maxRowsPerTrigger", "10"), [10, 5]),
                         (("maxRowsPerTrigger", "3"), [5, 5, 5]),
                         (("maxRowsPerTrigger", "1000"), [15])):
        batches = run(spark, table.uri, tmp_path / f"{limit[0]}{limit[1]}", startingInstant="earliest",
                      **dict([limit]))
        assert [b.num_rows for b in batches] == sizes, limit
        assert ids(batches) == list(range(15))


def test_the_first_snapshot_is_cut_by_the_limits_too(spark: Any, table: txn.Table,
                                                     tmp_path: Path) -> None:
    batches = run(spark, table.uri, tmp_path / "checkpoint", maxFilesPerTrigger="1")
    assert [b.num_rows for b in batches] == [5, 5] and ids(batches) == list(range(10))


def test_read_change_feed_streams_change_rows(spark: Any, tmp_path: Path) -> None:
    keyed = txn.create_table(str(tmp_path / "keyed"), ORDERS, record_key="id")
    keyed.append(orders(range(5)))
    checkpoint = tmp_path / "feed"
    snapshot = run(spark, keyed.uri, checkpoint, readChangeFeed="true")
    assert snapshot[0].column_names == [*ORDERS.names, *txn.CHANGE_COLUMNS]
    assert set(snapshot[0]["_change_type"].to_pylist()) == {"insert"}
    upsert = keyed.upsert(orders(range(3, 7), price_offset=0.5))
    changes = run(spark, keyed.uri, checkpoint, readChangeFeed="true")
    expected = keyed.changes(keyed.history()[-1].instant).to_arrow()
    got = pa.concat_tables(changes)
    key = ("id", "_change_type")
    assert sorted(zip(*[got[k].to_pylist() for k in key], strict=True)) == \
        sorted(zip(*[expected[k].to_pylist() for k in key], strict=True))
    assert set(got["_commit_instant"].to_pylist()) == {upsert.instant}
    # Without readChangeFeed the same upsert streams its post-images and inserts only.
    plain = tmp_path / "plain"
    run(spark, keyed.uri, plain, startingInstant="latest")
    keyed.upsert(orders(range(6, 8), price_offset=1.5))
    added = pa.concat_tables(run(spark, keyed.uri, plain, startingInstant="latest"))
    assert added.column_names == ORDERS.names and sorted(added["id"].to_pylist()) == [6, 7]
    assert added["price"].to_pylist() == [p + 1.5 for p in orders([6, 7])["price"].to_pylist()]


@pytest.mark.parametrize(("options", "message"), [
    ({"maxFilesPerTrigger": "0"}, "maxFilesPerTrigger must be a whole number of at least 1"),
    ({"maxRowsPerTrigger": "many"}, "maxRowsPerTrigger must be a whole number of at least 1"),
    ({"readChangeFeed": "1"}, "readChangeFeed must be 'true' or 'false'"),
    ({"startingInstant": "yesterday-ish"}, "InvalidOptionError"),
    ({"startingVersion": "0"}, r"unknown option\(s\) \['startingversion'\]"),
])
def test_bad_stream_options_are_refused_when_the_stream_is_defined(spark: Any, table: txn.Table,
                                                                   options: dict[str, str],
                                                                   message: str) -> None:
    with pytest.raises(Exception, match=message) as caught:
        spark.readStream.format("metatxn").options(**options).load(table.uri)
    assert "InvalidOptionError" in str(caught.value)


def test_an_ending_instant_is_refused_for_a_stream(spark: Any, table: txn.Table, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="endingInstant is for batch reads") as caught:
        run(spark, table.uri, tmp_path / "checkpoint", startingInstant="earliest",
            endingInstant=table.history()[0].instant)
    assert "InvalidOptionError" in str(caught.value)


def test_a_write_that_completes_after_a_later_one_is_streamed_once(spark: Any, table: txn.Table,
                                                                   tmp_path: Path) -> None:
    """Offsets are completion bounds: a write that began first and completed last is in the
    micro-batch after the one that read the later-begun write, never skipped, never twice."""
    checkpoint = tmp_path / "checkpoint"
    assert ids(run(spark, table.uri, checkpoint)) == list(range(10))
    slow = table.begin_write("append")  # begins first...
    table.append(orders(range(20, 22)))  # ...this begins later and completes first
    assert slow.instant < table.history()[0].instant
    assert ids(run(spark, table.uri, checkpoint)) == [20, 21]
    slow.commit([txn.write_files(slow.ticket, orders(range(10, 13)))])
    assert ids(run(spark, table.uri, checkpoint)) == [10, 11, 12]
    assert run(spark, table.uri, checkpoint) == []


def test_table_services_move_a_stream_on_without_rows(spark: Any, table: txn.Table,
                                                      tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    run(spark, table.uri, checkpoint, startingInstant="earliest", readChangeFeed="true")
    assert table.compact("custom", segments=[s.id for s in table.segments()]) is not None
    assert run(spark, table.uri, checkpoint, startingInstant="earliest", readChangeFeed="true") == []
    table.append(orders(range(10, 12)))
    feed = run(spark, table.uri, checkpoint, startingInstant="earliest", readChangeFeed="true")
    assert ids(feed) == [10, 11] and set(feed[0]["_change_type"].to_pylist()) == {"insert"}


def test_a_stream_keeps_the_columns_it_was_defined_with(spark: Any, table: txn.Table,
                                                        tmp_path: Path) -> None:
    from .helpers import wait_for

    checkpoint = tmp_path / "checkpoint"
    batches: list[pa.Table] = []
    query = (spark.readStream.format("metatxn").load(table.uri).writeStream
             .foreachBatch(lambda frame, _: batches.append(frame.toArrow()))
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="1 second").start())
    try:
        wait_for(lambda: len(ids(batches)) == 10, "the first snapshot")
        with table.update_schema() as update:
            update.add_column("note", pa.string())
        table.append(orders(range(10, 12)).append_column("note", pa.array(["a", "b"])))
        wait_for(lambda: len(ids(batches)) == 12, "the rows appended after the new column")
        # A batch's rows reach foreachBatch before its offsets are committed to the checkpoint;
        # stopped in between, the query defined again would replay the batch.
        query.processAllAvailable()
    finally:
        query.stop()
    assert {tuple(b.column_names) for b in batches} == {tuple(ORDERS.names)}
    # Defined again (same checkpoint) it has the new column; older windows give it as nulls.
    table.append(orders(range(12, 13)).append_column("note", pa.array(["c"])))
    again = pa.concat_tables(run(spark, table.uri, checkpoint))
    assert again.column_names == [*ORDERS.names, "note"] and again["note"].to_pylist() == ["c"]
    older = pa.concat_tables(run(spark, table.uri, tmp_path / "older", startingInstant="earliest"))
    assert sorted(zip(older["id"].to_pylist(), older["note"].to_pylist(), strict=True))[9:] == [
        (9, None), (10, "a"), (11, "b"), (12, "c")]


def test_a_replayed_first_batch_reads_the_window_its_offset_was_logged_with(table: txn.Table) -> None:
    """Spark asks ``initialOffset`` again when it replays a first batch that did not finish; the
    logged end offset alone must decide what the batch reads (no Spark needed: the reader's
    hooks are called as Spark's planning worker calls them)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from txn.spark._change_options import ChangeOptions
    from txn.spark._stream_source import ChangeStreamReader
    from txn.spark._types import spark_schema

    def rows(reader: ChangeStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[int]:
        return sorted(i for part in reader.partitions(start, end) for batch in reader.read(part)
                      for i in batch["id"].to_pylist())

    latest = ChangeOptions(starting="latest")
    reader = ChangeStreamReader(table.uri, latest, spark_schema(ORDERS))
    start = reader.initialOffset()
    table.append(orders(range(10, 13)))
    end = reader.latestOffset(start, ReadAllAvailable())  # Spark logs it, then runs the batch
    assert rows(reader, start, end) == [10, 11, 12]
    table.append(orders(range(13, 15)))  # the query dies; the table moves on; the query restarts
    again = ChangeStreamReader(table.uri, latest, spark_schema(ORDERS))
    assert again.initialOffset() != start
    assert rows(again, again.initialOffset(), end) == [10, 11, 12]
    assert rows(again, end, again.latestOffset(end, ReadAllAvailable())) == [13, 14]


def test_each_trigger_admits_the_next_instants_including_those_completed_since(table: txn.Table) -> None:
    """The reader plans each instant once and keeps what it planned; instants completing between
    triggers still join the window, in completion order."""
    from pyspark.sql.streaming.datasource import ReadMaxFiles

    from txn.spark._change_options import ChangeOptions
    from txn.spark._stream_source import ChangeStreamReader
    from txn.spark._types import spark_schema

    reader = ChangeStreamReader(table.uri, ChangeOptions(starting="earliest", max_files=1),
                                spark_schema(ORDERS))
    at = reader.initialOffset()
    windows = []
    for round in range(4):
        if round == 2:
            table.append(orders(range(10, 12)))
        end = reader.latestOffset(at, ReadMaxFiles(1))
        windows.append(sorted(i for part in reader.partitions(at, end) for batch in reader.read(part)
                              for i in batch["id"].to_pylist()))
        at = end
    assert windows == [list(range(5)), list(range(5, 10)), [10, 11], []]
    assert reader.latestOffset(at, ReadMaxFiles(1)) == at


# -- a chain of tables, killed and restarted -------------------------------------------------------

#: The downstream job: a stream of the source's changes into the target, 30 rows (three of the
#: source's 10-row commits) a micro-batch, through ``txn.spark.write_stream`` (one commit per
#: micro-batch, exactly once). Few and large batches: the kill lands mid-stream all the same, and
#: each batch costs the test a second or two.
CHAIN_JOB = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
import txn.spark

source, target, checkpoint = sys.argv[1:4]
spark = txn.spark.local_session("metatxn-chain", cores=1)
txn.spark.register(spark)
changes = (spark.readStream.format("metatxn").option("startingInstant", "earliest")
           .option("maxRowsPerTrigger", "30").load(source))
query = txn.spark.write_stream(changes, target, checkpoint_location=checkpoint,
                               trigger={"availableNow": True})
query.awaitTermination()
print("caught up", flush=True)
"""


def _start_chain(tmp_path: Path, source: str, target: str) -> Any:
    import os
    import subprocess
    import sys

    script = tmp_path / "chain_job.py"
    script.write_text(CHAIN_JOB)
    log = (tmp_path / "chain_job.log").open("a")
    # A session of its own: the kill takes its Spark JVM with it.
    return subprocess.Popen([sys.executable, str(script), source, target, str(tmp_path / "checkpoint")],
                            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ),
                            start_new_session=True)


def _batches_committed(target: str) -> int:
    try:
        return sum(1 for entry in txn.open_table(target).history() if entry.extra.get("stream"))
    except txn.TableNotFoundError:
        return 0


@pytest.mark.slow
def test_a_chain_killed_mid_stream_and_restarted_holds_every_row_exactly_once(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    import os
    import signal
    import time

    source = txn.create_table(str(tmp_path / "source"), ORDERS)
    for first in range(0, 150, 10):
        source.append(orders(range(first, first + 10)))
    target = str(tmp_path / "target")
    job = _start_chain(tmp_path, source.uri, target)
    try:
        deadline = time.monotonic() + 300
        while _batches_committed(target) < 2:
            assert job.poll() is None, (tmp_path / "chain_job.log").read_text()
            assert time.monotonic() < deadline, "the chain did not commit two batches"
            time.sleep(0.2)
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert _batches_committed(target) < 5, "the job finished before it was killed"
    # The source moves on while the chain is down.
    for first in range(150, 180, 10):
        source.append(orders(range(first, first + 10)))
    job = _start_chain(tmp_path, source.uri, target)
    try:
        assert job.wait(timeout=600) == 0, (tmp_path / "chain_job.log").read_text()
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    rows = txn.open_table(target).to_arrow()
    assert sorted(rows["id"].to_pylist()) == list(range(180))
    assert rows.sort_by("id").to_pylist() == source.to_arrow().sort_by("id").to_pylist()
