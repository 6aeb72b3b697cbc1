"""Streams from Spark's own sources: ``rate`` (with a query killed between our commit and Spark's,
then restarted) and ``socket``, fed by a small server on 127.0.0.1, as in CarbonData's streaming
walk-through (``nc -lk 9099`` with CSV lines such as ``1,value1``)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txn
import txn.spark
from txn.spark import _stream as spark_stream

pytestmark = pytest.mark.spark

RATE = pa.schema([("timestamp", pa.timestamp("us", "UTC")), ("value", pa.int64())])
LINES = pa.schema([("k", pa.int64()), ("v", pa.string())])


@pytest.fixture(autouse=True)
def _no_query_left_running(spark: Any) -> Iterator[None]:
    yield
    for query in spark.streams.active:
        query.stop()


def _wait_for(condition: Callable[[], bool], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the stream made no progress in time"
        time.sleep(0.2)


def _commits(table: txn.Table) -> int:
    return sum(1 for i in table.timeline() if i.state == "completed" and i.action == "commit")


def test_a_rate_stream_killed_between_our_commit_and_sparks_restarts_exactly_once(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri, checkpoint = str(tmp_path / "rate"), str(tmp_path / "checkpoint")
    table = txn.create_table(uri, RATE)
    source = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
    real_write = spark_stream.write
    killed: list[int] = []

    def commit_then_die(frame: Any, target: str, mode: str, **kwargs: Any) -> txn.Commit | None:
        commit = real_write(frame, target, mode, **kwargs)
        batch = int(kwargs["extra"]["batch"])
        if commit is not None and not killed:
            killed.append(batch)  # our commit landed; Spark never records the batch as done
            raise RuntimeError(f"killed after committing batch {batch}")
        return commit

    monkeypatch.setattr(spark_stream, "write", commit_then_die)
    query = txn.spark.write_stream(source, uri, checkpoint_location=checkpoint,
                                   trigger={"processingTime": "500 milliseconds"})
    with pytest.raises(Exception, match="killed after committing batch"):
        query.awaitTermination(120)
    assert killed and _commits(table) == 1
    monkeypatch.undo()

    query = txn.spark.write_stream(source, uri, checkpoint_location=checkpoint,
                                   trigger={"processingTime": "500 milliseconds"})
    _wait_for(lambda: _commits(table) >= 3)
    query.stop()

    values = table.to_arrow()["value"].to_pylist()
    assert len(values) == len(set(values)), "a replayed batch was written twice"
    assert sorted(values) == list(range(len(values))), "the rate source's rows, each exactly once"
    assert table.validate().ok


def _serve(lines: list[str], ready: threading.Event, port: list[int]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port.append(server.getsockname()[1])
        ready.set()
        connection, _ = server.accept()
        with connection:
            for start in range(0, len(lines), 100):  # a few chunks: a few micro-batches
                connection.sendall("".join(f"{line}\n" for line in lines[start:start + 100]).encode())
                time.sleep(0.5)
            time.sleep(5)  # keep the connection open while the last batch is committed


def test_a_socket_stream_of_csv_lines_lands_every_line_once(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "lines")
    table = txn.create_table(uri, LINES, record_key="k")
    lines = [f"{k},value{k}" for k in range(1, 301)]
    ready, port = threading.Event(), []
    server = threading.Thread(target=_serve, args=(lines, ready, port), daemon=True)
    server.start()
    assert ready.wait(10)

    source = (spark.readStream.format("socket").option("host", "127.0.0.1").option("port", port[0])
              .load().selectExpr("cast(split(value, ',')[0] as bigint) as k", "split(value, ',')[1] as v"))
    query = txn.spark.write_stream(source, uri, checkpoint_location=str(tmp_path / "checkpoint"),
                                   trigger={"processingTime": "300 milliseconds"})
    _wait_for(lambda: table.snapshot().count() >= len(lines))
    query.stop()
    server.join(10)

    landed = table.to_arrow().sort_by("k")
    assert landed["k"].to_pylist() == list(range(1, 301))
    assert landed["v"].to_pylist() == [f"value{k}" for k in range(1, 301)]
    assert _commits(table) >= 2, "the lines arrived over several micro-batches"
    assert table.validate().ok
