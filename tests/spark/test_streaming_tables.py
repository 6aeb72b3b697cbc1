"""Streaming tables fed by Spark Structured Streaming: CarbonData's streaming walk-through (a
socket source on 127.0.0.1 fed ``1,value1`` lines into a streaming sink, SHOW STREAMS while it
runs, DROP STREAM, COMPACT 'CLOSE_STREAMING'), and exactly once across a restart."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txn
import txn.spark

from .helpers import LineServer, wait_for

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


@pytest.fixture
def line_server() -> Iterator[Callable[[list[str]], LineServer]]:
    servers: list[LineServer] = []

    def start(lines: list[str]) -> LineServer:
        servers.append(LineServer())
        servers[-1].feed(lines)
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_the_socket_walkthrough(spark: Any, tmp_path: Path,
                                line_server: Callable[[list[str]], LineServer]) -> None:
    uri = str(tmp_path / "sink")
    sink = txn.create_table(uri, SCHEMA, properties={"streaming": "true",
                                                     "streaming.auto_handoff": "false"})
    server = line_server([f"{i},value{i}" for i in range(1, 31)])
    lines = (spark.readStream.format("socket").option("host", "127.0.0.1")
             .option("port", server.port).load())
    rows = lines.selectExpr("CAST(split(value, ',')[0] AS BIGINT) AS id",
                            "split(value, ',')[1] AS name")
    query = txn.spark.write_stream(rows, uri, checkpoint_location=str(tmp_path / "checkpoint"),
                                   name="job1", trigger={"processingTime": "300 milliseconds"})
    try:
        wait_for(lambda: sink.snapshot().count() == 30, "the 30 lines to arrive")
        shown = sink.streams()
        assert [(i.name, i.status, i.kind) for i in shown] == [("job1", "Running", "stream")]
        assert shown[0].rows == 30 and shown[0].segment is not None
        assert {s.status for s in sink.segments()} == {"Streaming"}

        sink.drop_stream("job1")  # DROP STREAM job1: the query stops first
        assert not query.isActive
    finally:
        if query.isActive:
            query.stop()
    assert sink.streams() == []
    assert [s.status for s in sink.segments()] == ["Streaming Finish"]

    handed = sink.compact("close_streaming")  # ALTER TABLE sink COMPACT 'CLOSE_STREAMING'
    assert handed is not None
    statuses = {s.id: (s.status, s.merged_to) for s in sink.segments()}
    assert sorted(status for status, _ in statuses.values()) == ["Compacted", "Success"]
    read = txn.spark.read(spark, uri).collect()
    assert sorted((r.id, r.name) for r in read) == [(i, f"value{i}") for i in range(1, 31)]
    assert sink.validate().ok


def test_a_restarted_query_writes_each_batch_once(spark: Any, tmp_path: Path) -> None:
    """A file source read with availableNow, stopped and started again on the same checkpoint
    and stream name: the stream's record skips what committed; SHOW STREAMS says Stopped."""
    source = tmp_path / "in"
    source.mkdir()
    uri = str(tmp_path / "sink")
    txn.create_table(uri, SCHEMA, properties={"streaming": "true"})
    schema = "id BIGINT, name STRING"

    def run() -> None:
        frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(source))
        query = txn.spark.write_stream(frame, uri, checkpoint_location=str(tmp_path / "checkpoint"),
                                       name="files", trigger={"availableNow": True})
        query.awaitTermination(120)

    for n in range(3):
        (source / f"part-{n}.json").write_text(f'{{"id": {n}, "name": "n{n}"}}\n')
    run()
    (source / "part-3.json").write_text('{"id": 3, "name": "n3"}\n')
    run()
    table = txn.open_table(uri)
    assert sorted(table.to_arrow()["id"].to_pylist()) == [0, 1, 2, 3]
    (info,) = table.streams()
    assert (info.name, info.status, info.last_batch_id, info.rows) == ("files", "Stopped", 3, 4)


def test_hand_off_on_spark_executors(spark: Any, tmp_path: Path) -> None:
    """``txn.spark.compact(spark, uri, "close_streaming")``: the finished segment's rows are
    rewritten by Spark's executors into a columnar segment, sorted."""
    uri = str(tmp_path / "sink")
    t = txn.create_table(uri, SCHEMA, sort_by=["id"], properties={
        "streaming": "true", "streaming.segment.max_size": "1024", "streaming.auto_handoff": "false"})
    s = t.stream("job1")
    for batch_id in range(6):
        s.write(batch_id, pa.table({"id": [50 - batch_id, batch_id], "name": ["a", "b"]}))
    finished = [x.id for x in t.segments() if x.status == "Streaming Finish"]
    assert finished
    commit = txn.spark.compact(spark, uri, "close_streaming")
    assert commit is not None and commit.extra == {"compaction": "close_streaming"}
    after = {x.id: x for x in t.segments()}
    assert all(after[f].status == "Compacted" for f in finished)
    assert sorted(r.id for r in txn.spark.read(spark, uri).collect()) == sorted(
        [50 - b for b in range(6)] + list(range(6)))
    assert t.validate().ok


def test_an_upsert_stream_refused_for_a_new_streaming_table_leaves_no_table(
        spark: Any, tmp_path: Path) -> None:
    """The refusal comes before the table would be created, as for ``txn.spark.write``."""
    uri = str(tmp_path / "sink")
    frame = spark.readStream.schema("id BIGINT, name STRING").json(str(tmp_path))
    with pytest.raises(txn.InvalidOptionError, match="a stream on a streaming table appends"):
        txn.spark.write_stream(frame, uri, checkpoint_location=str(tmp_path / "checkpoint"), mode="upsert",
                               record_key="id", properties={"streaming": "true"})
    assert not (tmp_path / "sink").exists()
