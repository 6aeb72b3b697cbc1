"""``txn.spark.write``: executors write the files, the driver commits once.

Invariants, checked against a pyarrow model of the table and against what is on local disk:

* append / overwrite / upsert leave exactly the model's rows (``Table.to_arrow``), in one commit
  each, with the table's layout (Hive partition folders, rows sorted within files);
* a keyed upsert replaces rows through delete deltas: no existing data file is rewritten, and
  the record index points at the new rows;
* Spark types map one-to-one onto the table's Arrow types (the data round-trips exactly);
* refused writes (bad mode, schema mismatch) change nothing: same timeline, same files; a
  keyed write refused for null, repeated or (append) existing keys, checked on the files Spark
  wrote, rolls its instant back: same commits, same files;
* a write whose Spark job fails, or whose driver fails after the job ran, leaves nothing a
  reader can see, rolls its instant back, deletes what the executors wrote, and the next write
  succeeds; ``validate()`` is clean afterwards.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txn
import txn.spark
from metatxn import timeline
from txn._twophase import _driver as spark_write  # where the driver removes unreported files

from .helpers import (
    ALL_TYPES,
    EXPECTED_SPARK_TYPES,
    ORDERS,
    all_types_rows,
    data_files,
    exploding,
    file_bytes,
    frame,
    index_logs,
    markers,
    orders,
    relative,
    rows_by,
    states,
    storage_state,
)

pytestmark = pytest.mark.spark


# -- round trips ---------------------------------------------------------------------------------


def test_append_and_overwrite_round_trip_to_the_model(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS)
    first, second = orders(range(1500)), orders(range(1500, 3000))

    commit = txn.spark.write(frame(spark, first, 3), uri, extra={"job": "load-1"})
    assert commit is not None
    assert (commit.operation, commit.rows_added, commit.rows_deleted) == ("append", 1500, 0)
    assert commit.files_added == len(commit.paths_added) == 3, "one file per task"
    assert commit.extra == {"job": "load-1"}
    # Columns in another order than the table's are matched by name.
    reordered = frame(spark, second, 2).select("qty", "price", "day", "region", "id")
    txn.spark.write(reordered, uri, "append")
    assert rows_by(table.to_arrow()) == rows_by(pa.concat_tables([first, second]))
    assert [s.rows for s in table.segments()] == [1500, 1500]
    appended = table.timeline()[0]
    recorded = timeline.Timeline(timeline.open_storage(uri)).read_metadata(appended)
    assert recorded["extra"] == {"job": "load-1"}

    replacement = orders(range(5000, 5800))
    commit = txn.spark.write(frame(spark, replacement, 2), uri, "overwrite")
    assert commit is not None and commit.operation == "overwrite"
    assert rows_by(table.to_arrow()) == rows_by(replacement)
    assert states(table)[-1] == ("replacecommit", "completed")
    # The replaced files stay for time travel.
    assert rows_by(table.to_arrow(as_of=appended.time)) == rows_by(first)
    assert table.validate().ok


def test_partitioned_sorted_table_lands_in_hive_folders_sorted_within_files(
        spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, partition_by=["region"], sort_by=["price"])
    data = orders(range(3000))
    commit = txn.spark.write(frame(spark, data, 2), uri)

    assert commit is not None
    assert sorted(data_files(uri)) == sorted(commit.paths_added)
    folders = {path.split("/")[0] for path in data_files(uri)}
    assert folders == {"region=eu", "region=us", "region=apac"}
    for path in data_files(uri):
        rows = pq.read_table(Path(uri) / path)
        assert set(rows["region"].to_pylist()) == {path.split("/")[0].removeprefix("region=")}
        prices = rows["price"].to_pylist()
        assert prices == sorted(prices), f"{path} is not sorted by price"
    assert rows_by(table.to_arrow()) == rows_by(data)
    assert sorted(table.partitions(), key=str) == sorted(({"region": r} for r in ("eu", "us", "apac")),
                                                         key=str)
    assert table.validate().ok


def test_keyed_upsert_replaces_rows_through_delete_deltas(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id", partition_by=["region"],
                             properties={"record_index.shards": "4"})
    base = orders(range(2000))
    txn.spark.write(frame(spark, base, 2), uri)
    before = file_bytes(uri)

    changed = orders(list(range(0, 2000, 7)), price_offset=0.5)  # 286 existing keys
    new = orders(range(2000, 2200))
    commit = txn.spark.write(frame(spark, pa.concat_tables([changed, new]), 2), uri, "upsert")

    assert commit is not None and commit.operation == "upsert"
    assert (commit.rows_added, commit.rows_deleted) == (486, 286)
    model = {r["id"]: r for r in base.to_pylist()}
    model.update({r["id"]: r for r in pa.concat_tables([changed, new]).to_pylist()})
    assert rows_by(table.to_arrow()) == sorted(model.values(), key=lambda r: r["id"])
    after = file_bytes(uri)
    assert {path: after[path] for path in before} == before, "no existing data file was rewritten"
    assert set(after) - set(before) == set(commit.paths_added)
    assert any(f.delete_files for f in table.snapshot().files()), "replaced rows are delete deltas"

    found = table.lookup([0, 7, 1, 2100])
    where = {r["id"]: (r["file"], r["position"]) for r in found.to_pylist()}
    assert set(where) == {0, 7, 1, 2100}
    assert where[0][0] in commit.paths_added and where[2100][0] in commit.paths_added
    assert where[1][0] in before, "an untouched key still points at its old file"
    for key, (path, position) in where.items():
        assert pq.read_table(Path(uri) / path)["id"][position].as_py() == key

    # Upserting the same keys again stacks new deltas on the same old files.
    again = orders(list(range(0, 2000, 7)), price_offset=0.75)
    txn.spark.write(frame(spark, again, 2), uri, "upsert")
    model.update({r["id"]: r for r in again.to_pylist()})
    assert rows_by(table.to_arrow()) == sorted(model.values(), key=lambda r: r["id"])
    assert {path: file_bytes(uri)[path] for path in before} == before
    assert table.validate().ok


def test_composite_key_upsert_and_overwrite(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key=["region", "id"])
    base = orders(range(300))
    txn.spark.write(frame(spark, base, 2), uri, "overwrite")
    changed = orders(range(0, 300, 3), price_offset=0.25)
    commit = txn.spark.write(frame(spark, changed), uri, "upsert")
    assert commit is not None and commit.rows_deleted == 100
    model = {r["id"]: r for r in base.to_pylist()} | {r["id"]: r for r in changed.to_pylist()}
    assert rows_by(table.to_arrow()) == sorted(model.values(), key=lambda r: r["id"])
    found = table.lookup(pa.table({"region": ["eu"], "id": pa.array([0], pa.int64())}))
    assert found["file"][0].as_py() in commit.paths_added
    assert table.validate().ok


# -- Spark types ---------------------------------------------------------------------------------

def test_spark_types_map_onto_table_types_and_round_trip(spark: Any, tmp_path: Path) -> None:
    from txn.spark._types import spark_schema

    assert {f.name: f.dataType.simpleString() for f in spark_schema(ALL_TYPES).fields} == \
        EXPECTED_SPARK_TYPES
    uri = str(tmp_path / "types")
    table = txn.create_table(uri, ALL_TYPES)
    data = all_types_rows()
    txn.spark.write(frame(spark, data, 2), uri)

    written = table.to_arrow()
    assert written.schema == ALL_TYPES
    assert rows_by(written, "i8") == rows_by(data, "i8")
    back = txn.spark.read(spark, uri).toArrow()
    assert {f.name: f.type for f in back.schema} == {
        **{f.name: f.type for f in ALL_TYPES}, "ls": pa.string(),
        "ts_paris": pa.timestamp("us", tz="UTC")}, "Spark reads tz timestamps as UTC microseconds"
    assert rows_by(back.cast(ALL_TYPES), "i8") == rows_by(data, "i8")
    assert table.validate().ok


def test_a_table_with_an_unsigned_column_is_refused_naming_spark(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "unsigned")
    table = txn.create_table(uri, pa.schema([("id", pa.int64()), ("n", pa.uint32())]))
    table.append(pa.table({"id": [1], "n": pa.array([1], pa.uint32())}))
    df = spark.createDataFrame([(2, 2)], "id bigint, n bigint")
    with pytest.raises(txn.InvalidOptionError, match="Spark cannot represent") as refused:
        txn.spark.write(df, uri)
    assert "uint32" in str(refused.value)
    with pytest.raises(txn.InvalidOptionError, match="Spark"):
        txn.spark.read(spark, uri)
    assert table.to_arrow().num_rows == 1


# -- refused writes ------------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["missing", "extra", "wrong type", "wrong decimal"])
def test_a_dataframe_schema_mismatch_is_refused_before_any_task_runs(
        spark: Any, tmp_path: Path, change: str) -> None:
    from pyspark.sql import functions as F

    uri = str(tmp_path / "orders")
    txn.create_table(uri, ORDERS).append(orders(range(10)))
    before = storage_state(uri)
    df = exploding(spark, orders(range(10, 20)))
    df = {"missing": lambda: df.drop("qty"),
          "extra": lambda: df.withColumn("note", F.lit("x")),
          "wrong type": lambda: df.withColumn("qty", F.col("qty").cast("bigint")),
          "wrong decimal": lambda: df.withColumn("price", F.col("price").cast("decimal(10,2)"))}[change]()
    expected = {"missing": "lacks column.*qty", "extra": "note", "wrong type": "qty: bigint.*expected int",
                "wrong decimal": "price: decimal"}[change]
    with pytest.raises(txn.SchemaMismatchError, match=expected):
        txn.spark.write(df, uri, "append")
    assert storage_state(uri) == before


def test_bad_modes_are_refused_before_anything_happens(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    txn.create_table(uri, ORDERS).append(orders(range(10)))
    before = storage_state(uri)
    df = exploding(spark, orders(range(10, 20)))
    with pytest.raises(txn.InvalidOptionError, match="mode must be one of"):
        txn.spark.write(df, uri, "merge")
    with pytest.raises(txn.InvalidOptionError, match="record_key"):
        txn.spark.write(df, uri, "upsert")
    with pytest.raises(txn.InvalidOptionError, match="needs record_key"):
        txn.spark.write(df, str(tmp_path / "nowhere"), "upsert")
    assert storage_state(uri) == before
    assert not (tmp_path / "nowhere").exists()


def refused_leaves_of(state: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a keyed write refused by its key checks leaves as it was: the completed commits and
    the data files. (Issue 27: the checks run on the files Spark wrote, after the write began,
    so the refused write's instant is rolled back rather than never begun.)"""
    instants, files = state
    return [i for i in instants if i[2] == "completed" and i[1] != "rollback"], files


def refused_leaves(uri: str) -> tuple[Any, ...]:
    return refused_leaves_of(storage_state(uri))


def test_keyed_writes_refuse_null_and_repeated_keys(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    keyed = pa.schema([pa.field("id", pa.int64()), *list(ORDERS)[1:]])  # a nullable key column
    table = txn.create_table(uri, keyed, record_key="id")
    table.append(orders(range(100)).cast(keyed))
    before = storage_state(uri)

    nulls = orders(range(100, 110)).cast(keyed).set_column(
        0, "id", pa.array([None, *range(101, 110)], pa.int64()))
    for mode in ("append", "upsert", "overwrite"):
        with pytest.raises(txn.SchemaMismatchError, match="hold nulls"):
            txn.spark.write(frame(spark, nulls), uri, mode)
    repeated = pa.concat_tables([orders(range(200, 210)), orders([205])]).cast(keyed)
    for mode in ("append", "upsert", "overwrite"):
        with pytest.raises(txn.DuplicateKeyError, match="205"):
            txn.spark.write(frame(spark, repeated, 2), uri, mode)
    assert refused_leaves(uri) == refused_leaves_of(before)


def test_keyed_append_refuses_keys_already_in_the_table(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    txn.spark.write(frame(spark, orders(range(100)), 2), uri)
    before = storage_state(uri)
    with pytest.raises(txn.DuplicateKeyError, match=r"(?s)2 record key\(s\).*already exist.*upsert"):
        txn.spark.write(frame(spark, orders([50, 99, 100, 101])), uri, "append")
    assert refused_leaves(uri) == refused_leaves_of(before)
    # The same keys go in with an upsert, and new keys with an append.
    txn.spark.write(frame(spark, orders([50, 99, 100, 101])), uri, "upsert")
    txn.spark.write(frame(spark, orders([102])), uri, "append")
    assert rows_by(table.to_arrow()) == rows_by(orders(range(103)))
    assert table.validate().ok


def test_a_null_in_a_non_nullable_column_is_a_schema_mismatch(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    strict = pa.schema([*list(ORDERS)[:4], pa.field("qty", pa.int32(), nullable=False)])
    txn.create_table(uri, strict)
    data = orders(range(1, 11))  # qty holds no null for these ids
    df = spark.createDataFrame(data.set_column(4, "qty", pa.array([None] + [1] * 9, pa.int32())))
    before = storage_state(uri)
    try:
        with pytest.raises(txn.SchemaMismatchError, match="qty"):
            txn.spark.write(df, uri)
    finally:
        assert txn.open_table(uri).to_arrow().num_rows == 0
        assert txn.open_table(uri).validate().ok
        assert storage_state(uri)[1] == before[1]


def test_an_upsert_of_no_rows_commits_nothing(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    table.append(orders(range(5)))
    before = states(table)
    assert txn.spark.write(frame(spark, ORDERS.empty_table()), uri, "upsert") is None
    assert states(table) == before


def test_keys_are_checked_on_the_rows_that_are_written(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    table.append(orders(range(10)))
    heartbeats = os.path.join(uri, "_timeline", "heartbeats")

    def key(value):  # type: ignore[no-untyped-def]
        # The input changes between evaluations: while the write runs, every row has key 5.
        return 5 if os.path.isdir(heartbeats) and os.listdir(heartbeats) else value

    df = frame(spark, orders(range(100, 140)), 2).withColumn(
        "id", F.udf(key, LongType(), useArrow=False).asNondeterministic()("id"))
    with contextlib.suppress(txn.DuplicateKeyError):  # refusing the write is right too
        txn.spark.write(df, uri)
    ids = table.to_arrow()["id"].to_pylist()
    assert len(ids) == len(set(ids)), "a key is held by more than one row"
    assert table.validate().ok


# -- failures ------------------------------------------------------------------------------------


def _failing_in_one_task(spark: Any, uri: str, data: pa.Table, poison: int) -> Any:
    """``data`` in 2 partitions; the task holding id ``poison`` raises during the write job.

    The checks before the write (null keys, repeated keys, existing keys) evaluate the same
    DataFrame, so the row only fails while a writer beats (between begin and commit). It first
    waits (a few seconds at most) until the other task announced a data file, so the rollback
    has executor-written files to delete.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    heartbeats = os.path.join(uri, "_timeline", "heartbeats")
    marker_folder = os.path.join(uri, "_markers")

    def check(value: int) -> int:
        if value == poison and os.path.isdir(heartbeats) and os.listdir(heartbeats):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (
                    os.path.isdir(marker_folder) and os.listdir(marker_folder)):
                time.sleep(0.02)
            raise RuntimeError(f"poisoned row {value}")
        return value

    return frame(spark, data, 2).withColumn("id", F.udf(check, LongType(), useArrow=False)("id"))


def test_a_failing_task_rolls_the_write_back(spark: Any, tmp_path: Path) -> None:
    """One task of the write job raises (after the other wrote its data files).

    The table is unkeyed: a keyed write pins the DataFrame's rows before its checks, so the
    poisoned row would fail there, before the instant begins. It is partitioned, so its files are
    written by the ``mapInArrow`` tasks (an unpartitioned table's go through Spark's own writer:
    ``test_native_write.py``).
    """
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, partition_by=["region"])
    table.append(orders(range(100)))
    visible, files, logs = rows_by(table.to_arrow()), file_bytes(uri), index_logs(uri)

    df = _failing_in_one_task(spark, uri, orders(range(1000, 3000)), poison=2999)
    with pytest.raises(Exception, match="poisoned row 2999"):
        txn.spark.write(df, uri, "append")

    assert rows_by(table.to_arrow()) == visible
    failed, rollback = table.timeline()[-2:]
    assert (failed.action, failed.state) == ("commit", "rolledback")
    assert (rollback.action, rollback.state) == ("rollback", "completed")
    record = timeline.Timeline(timeline.open_storage(uri)).read_metadata(rollback)
    assert record["files_deleted"], "the task that succeeded had written files"
    assert file_bytes(uri) == files, "what the executors wrote is deleted"
    assert index_logs(uri) == logs
    assert markers(uri) == []
    assert table.validate().ok

    txn.spark.write(frame(spark, orders(range(1000, 1200)), 2), uri)
    assert rows_by(table.to_arrow()) == rows_by(orders([*range(100), *range(1000, 1200)]))
    assert table.validate().ok


def test_a_driver_failure_after_the_job_ran_leaves_nothing_visible(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id", partition_by=["region"],
                             properties={"record_index.shards": "4"})
    table.append(orders(range(100)))
    visible, files, logs = rows_by(table.to_arrow()), file_bytes(uri), index_logs(uri)
    seen: dict[str, Any] = {}

    def killed(table: txn.Table, instant_time: str, files: set[str], parts: set[int]) -> None:
        seen.update(files=data_files(uri), logs=index_logs(uri), instant=instant_time)
        raise KeyboardInterrupt("driver killed before commit")

    monkeypatch.setattr(spark_write, "_remove_unreported", killed)
    with pytest.raises(KeyboardInterrupt):
        txn.spark.write(frame(spark, orders(range(500, 900)), 2), uri, "upsert")
    monkeypatch.undo()

    assert len(seen["files"]) > len(files) and len(seen["logs"]) > len(logs), "the job had written"
    assert rows_by(table.to_arrow()) == visible
    assert rows_by(txn.spark.read(spark, uri).toArrow()) == visible
    assert {i.time: i.state for i in table.timeline()}[seen["instant"]] == "rolledback"
    assert file_bytes(uri) == files and index_logs(uri) == logs and markers(uri) == []
    assert table.validate().ok

    commit = txn.spark.write(frame(spark, orders(range(500, 900)), 2), uri, "upsert")
    assert commit is not None and commit.rows_added == 400
    assert rows_by(table.to_arrow()) == rows_by(orders([*range(100), *range(500, 900)]))
    assert table.validate().ok


def test_a_dead_driver_is_rolled_back_by_the_next_writer(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver dies between the Spark job and the commit: no rollback runs at all."""
    from txn._commit import _protocol

    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id", properties={
        "record_index.shards": "4", "heartbeat.interval_ms": "1000", "heartbeat.timeout_ms": "2000"})
    table.append(orders(range(100)))
    visible, files = rows_by(table.to_arrow()), file_bytes(uri)

    def killed(*args: Any) -> None:
        raise SystemExit("driver killed")

    monkeypatch.setattr(spark_write, "_remove_unreported", killed)
    monkeypatch.setattr(_protocol.Protocol, "_roll_back_quietly", lambda self, instant, lease=None: None)
    with pytest.raises(SystemExit):
        txn.spark.write(frame(spark, orders(range(500, 700)), 2), uri, "append")
    monkeypatch.undo()

    dead = table.timeline()[-1]
    assert dead.state == "inflight"
    assert len(data_files(uri)) > len(files), "the dead write's files are on storage"
    assert rows_by(txn.spark.read(spark, uri).toArrow()) == visible, "readers do not see them"
    assert table.validate().ok, "files claimed by a pending instant's markers are not problems"

    time.sleep(2.2)  # the dead writer's heartbeat expires
    txn.spark.write(frame(spark, orders(range(500, 700)), 2), uri, "append")
    by_time = {i.time: i for i in table.timeline()}
    assert by_time[dead.time].state == "rolledback"
    assert [i.state for i in table.timeline() if i.action == "rollback"] == ["completed"]
    assert rows_by(table.to_arrow()) == rows_by(orders([*range(100), *range(500, 700)]))
    assert not [p for p in data_files(uri) if dead.time in p] and markers(uri) == []
    assert not [log for log in index_logs(uri) if log.startswith(dead.time)]
    assert table.validate().ok


def test_files_of_unreported_task_attempts_are_deleted_before_the_commit(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retried or failed attempt leaves a data file (with its marker) and an index log that no
    successful attempt reported; the driver deletes them and commits only what was reported."""
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id", properties={"record_index.shards": "4"})
    real = spark_write._remove_unreported
    planted: list[str] = []

    def with_leftovers(table: txn.Table, instant_time: str, files: set[str], parts: set[int]) -> None:
        root = Path(uri)
        stray = f"segment_0/part-0-00000-99999a1deadbeef_{instant_time}.parquet"
        (root / stray).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(orders([424242]), root / stray)
        (root / "_markers" / Path(stray).name).write_bytes(stray.encode())
        reported = sorted((root / "_metadata" / "record_index").glob(f"{instant_time}.*.log.arrow"))
        assert reported, "the tasks wrote index log files"
        stray_log = reported[0].with_name(f"{instant_time}.99001.log.arrow")
        stray_log.write_bytes(reported[0].read_bytes())
        planted.extend([stray, stray_log.name])
        real(table, instant_time, files, parts)

    monkeypatch.setattr(spark_write, "_remove_unreported", with_leftovers)
    commit = txn.spark.write(frame(spark, orders(range(400)), 2), uri)
    assert commit is not None and planted
    assert planted[0] not in data_files(uri) and planted[1] not in index_logs(uri)
    assert sorted(data_files(uri)) == sorted(commit.paths_added)
    assert rows_by(table.to_arrow()) == rows_by(orders(range(400)))
    assert table.lookup([424242]).num_rows == 0
    assert table.validate().ok


def test_spark_file_locations_and_commit_paths_agree(spark: Any, tmp_path: Path) -> None:
    """The commit's table-relative paths are the snapshot's files, which Spark reads."""
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, partition_by=["region"])
    commit = txn.spark.write(frame(spark, orders(range(600)), 2), uri)
    assert commit is not None
    snapshot_paths = sorted(relative(table, f.path) for f in table.snapshot().files())
    read_paths = sorted(relative(table, p) for p in txn.spark.read(spark, uri).inputFiles())
    assert snapshot_paths == read_paths == sorted(commit.paths_added)


def test_commit_properties_make_a_write_idempotent(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    once = txn.CommitProperties(extra={"job": "load-7"}, app_id="loader", version=7)
    commit = txn.spark.write(frame(spark, orders(range(10)), 2), uri, commit_properties=once)
    assert commit is not None and commit.extra == {"job": "load-7"}
    before = storage_state(uri)
    # A replay (keys that exist now: a keyed append would refuse them) commits nothing.
    assert txn.spark.write(frame(spark, orders(range(10)), 2), uri, commit_properties=once) is None
    assert txn.spark.write(frame(spark, orders(range(10)), 2), uri, app_id="loader", version=6) is None
    with pytest.raises(txn.InvalidOptionError, match="not both"):
        txn.spark.write(frame(spark, orders([20])), uri, commit_properties=once, extra={"a": "b"})
    assert storage_state(uri) == before
    assert rows_by(table.to_arrow()) == rows_by(orders(range(10)))
