"""The demonstration job behind ``make demo``: a pipeline on local Spark.

It starts a local SparkSession (``local[2]``), generates a TPC-H-like ``orders`` dataset in Spark
and loads it into ``<warehouse>/orders`` in four loads with :func:`txn.spark.write` (four
segments: Spark's executors write the data files, this process commits each load once). The first
load creates the table from the DataFrame's schema and the layout options it is given, as a Delta
or Hudi write to a new path does. A MINOR compaction (rewritten by Spark's executors) then merges
segments 0-3 into ``0.1``, as CarbonData's walk-through does. It then upserts a Spark DataFrame
of repriced existing orders and new ones, deletes some orders by a predicate (both through the
record-level index and delete deltas: no data file is rewritten), and a downstream job reads only
what changed since the last instant it processed (the change feed, ``t.changes``: the upsert's
pre- and post-images, its inserts and the deletes, read from those commits' own files and delete
deltas). It then reads one week of orders with :func:`txn.spark.read` (showing how many files the
snapshot skips) and aggregates it in Spark, and reads the same week as of the last load (time
travel: the compacted segments' files are still there). CLEAN FILES then deletes the compacted
segments' files (the table keeps a short retention, two commits, so that the demo has something
to clean) and the same time travel is refused with its reason. Last: SHOW SEGMENTS (of the
walk-through's segments only ``0.1`` is left, as in CarbonData; the compacted ones are in its
history), the timeline and a validation report. Its tables (SHOW SEGMENTS among them) are printed
by the command line's renderer (``_render``), as ``metatxn segments`` prints them.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from datetime import date, timedelta
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import SnapshotExpiredError
from txn import CompactionKind

from .._table import Table, create_table, open_table
from . import _render
from ._render import changes_table, segments_table, show, streams_table, timeline_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from rich.table import Table as Grid

#: The columns of the orders the demo generates (their types are Spark's: the first write
#: creates the table from the DataFrame's schema).
ORDER_COLUMNS = ("o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice", "o_orderdate",
                 "o_orderpriority", "o_comment")

FIRST_DAY = date(2026, 1, 1)
#: Load ``n`` holds the orders of the 30 days from ``FIRST_DAY + 30 n``, dated in key order.
DAYS_PER_LOAD = 30
#: The week the selective read and the time travel look at (inside the third load).
WEEK = (date(2026, 3, 9), date(2026, 3, 15))


def orders_frame(spark: SparkSession, first_key: int, count: int, start: date, days: int,
                 comment: str) -> DataFrame:
    """``count`` TPC-H-like orders with keys ``first_key..``, dated over ``days`` days from
    ``start`` in key order (so each Spark task writes files of a narrow date range)."""
    return spark.range(first_key, first_key + count, numPartitions=2).selectExpr(
        "id AS o_orderkey",
        "pmod(id * 7919, 150000) + 1 AS o_custkey",
        "CASE WHEN pmod(xxhash64(id), 100) < 49 THEN 'F' "
        "WHEN pmod(xxhash64(id), 100) < 97 THEN 'O' ELSE 'P' END AS o_orderstatus",
        "CAST(900 + pmod(xxhash64(id, 'price'), 45000000) / 100 AS DECIMAL(15, 2)) AS o_totalprice",
        f"date_add(DATE '{start}', CAST((id - {first_key}) * {days} DIV {count} AS INT)) AS o_orderdate",
        "element_at(array('1-URGENT', '2-HIGH', '3-MEDIUM', '4-NOT SPECIFIED', '5-LOW'), "
        "CAST(pmod(id, 5) + 1 AS INT)) AS o_orderpriority",
        f"concat('order ', id, ' {comment}') AS o_comment",
    )


#: A short retention, so that CLEAN FILES has something to free within the demo (the defaults
#: keep 10 commits and 7 days of time travel).
RETENTION = {"clean.retain_commits": "2", "clean.retain_hours": "0"}


def _folder_bytes(folder: str) -> dict[str, int]:
    """Every file below ``folder`` and its size."""
    return {os.path.join(root, name): os.path.getsize(os.path.join(root, name))
            for root, _, names in os.walk(folder) for name in names}


def _shards(count: int | None) -> str:
    return "one shard" if count == 1 else f"{count} shards"


def _show_created(table: Table) -> None:
    print(f"created by this write: table {table.table_id}, partitioned by {table.partition_by}, "
          f"keyed by {table.record_key} (a record index of {_shards(table.record_index_shards)}, "
          "split as it grows), "
          f"sorted by {table.sort_by}; its schema, from the DataFrame's:")
    show(_render.table(("column", "type"), ((f.name, f.type) for f in table.schema)))


def _by_priority(frame: DataFrame) -> Grid:
    """Orders, revenue and average price per priority, computed by Spark."""
    from pyspark.sql import functions as F

    rows = (frame.groupBy("o_orderpriority")
            .agg(F.count("*").alias("orders"), F.sum("o_totalprice").alias("revenue"),
                 F.avg("o_totalprice").cast("decimal(15,2)").alias("avg_price"))
            .orderBy("o_orderpriority").collect())
    return _render.table(("o_orderpriority", "orders", "revenue", "avg_price"),
                         ((r["o_orderpriority"], r["orders"], f"{r['revenue']:,}", f"{r['avg_price']:,}")
                          for r in rows), numeric=("orders", "revenue", "avg_price"))


def _step(title: str) -> float:
    print(f"\n== {title}", flush=True)
    return time.perf_counter()


def _ms(started: float) -> str:
    return f"{(time.perf_counter() - started) * 1000:,.0f} ms"


def run(warehouse: str, *, rows_per_load: int = 100_000, spark: SparkSession | None = None) -> Table:
    """Run the demo on ``<warehouse>/orders`` (recreated); returns the table.

    ``spark``: a session to use (left running); by default the demo starts a local one
    (:func:`txn.spark.local_session`, its workers running this interpreter) and stops it at the
    end.
    """
    from ..spark import local_session

    began = _step("start Spark: local[2], driver memory 1g, 4 shuffle partitions, UTC" if spark is None
                  else "Spark: the session given")
    if spark is None:
        # The executors' Python workers must import metatxn, as this process does, whatever
        # PYSPARK_PYTHON the environment sets for other jobs.
        os.environ["PYSPARK_PYTHON"] = sys.executable
    session = local_session("metatxn-demo") if spark is None else spark
    print(f"Spark {session.version}, master {session.sparkContext.master} ({_ms(began)})")
    try:
        return _pipeline(session, warehouse, rows_per_load, began)
    finally:
        if spark is None:
            session.stop()


def _pipeline(spark: SparkSession, warehouse: str, rows_per_load: int, began: float) -> Table:
    from .. import spark as txn_spark
    from ..spark._filters import to_expression

    uri = os.path.join(warehouse, "orders")
    shutil.rmtree(uri, ignore_errors=True)  # the demo starts from an empty table every run

    _step(f"load: four loads of {rows_per_load:,} orders generated in Spark, each a segment; the "
          f"first creates {uri}")
    commits = []
    for load in range(4):
        start = FIRST_DAY + timedelta(days=DAYS_PER_LOAD * load)
        orders = orders_frame(spark, load * rows_per_load, rows_per_load, start, DAYS_PER_LOAD,
                              f"of load {load}")
        started = time.perf_counter()
        # The layout options create the table on the first write; later writes repeat them,
        # and a write whose layout differs from the table's is refused.
        commit = txn_spark.write(orders, uri, mode="append", partition_by=["o_orderstatus"],
                                 record_key="o_orderkey", sort_by=["o_orderdate"],
                                 properties=RETENTION)
        assert commit is not None
        commits.append(commit)
        if load == 0:
            _show_created(open_table(uri))
        print(f"load {load}: orders of {start} .. {start + timedelta(days=DAYS_PER_LOAD - 1)}: "
              f"segment {commit.segment}, {commit.rows_added:,} rows in {commit.files_added} files, "
              f"instant {commit.instant} ({_ms(started)})", flush=True)

    table = open_table(uri)
    _step("compact MINOR (CarbonData's ALTER TABLE orders COMPACT 'MINOR'), rewritten by Spark's "
          "executors")
    started = time.perf_counter()
    compacted = txn_spark.compact(spark, uri, CompactionKind.MINOR)
    assert compacted is not None
    print(f"compaction {compacted.instant}: segments {', '.join(compacted.segments_merged)} -> "
          f"segment {compacted.segment}: {compacted.rows_added:,} rows in {compacted.files_added} "
          f"files sorted by o_orderdate, record index rewritten in the same commit ({_ms(started)})")
    show(segments_table(table.segments()))

    _step(f"upsert: the urgent orders of {WEEK[0]} repriced +10%, and new orders of May, by o_orderkey")
    urgent = txn_spark.read(spark, uri, filter=f"o_orderdate = DATE '{WEEK[0]}' AND "
                                               "o_orderpriority = '1-URGENT'")
    repriced = urgent.selectExpr(
        *[c for c in ORDER_COLUMNS if c not in ("o_totalprice", "o_comment")],
        "CAST(o_totalprice * 1.10 AS DECIMAL(15, 2)) AS o_totalprice",
        "concat(o_comment, ', repriced') AS o_comment",
    ).select(*ORDER_COLUMNS)
    fresh = orders_frame(spark, 4 * rows_per_load, rows_per_load // 100, date(2026, 5, 1), 10,
                         "added by upsert")
    first_repriced = repriced.select("o_orderkey").orderBy("o_orderkey").first()
    assert first_repriced is not None, f"no urgent order on {WEEK[0]}: rows_per_load is too small"
    started = time.perf_counter()
    upserted = txn_spark.write(repriced.unionByName(fresh), uri, mode="upsert")
    assert upserted is not None
    print(f"upsert {upserted.instant}: {upserted.rows_deleted:,} rows replaced through delete deltas, "
          f"{upserted.rows_added - upserted.rows_deleted:,} inserted, segment {upserted.segment}, "
          f"no existing file rewritten ({_ms(started)})")
    where = table.lookup([first_repriced["o_orderkey"], 4 * rows_per_load])
    for key, segment, file, position in zip(*(where[c].to_pylist() for c in
                                              ("o_orderkey", "segment", "file", "position")), strict=True):
        print(f"  record index: order {key} is in segment {segment}, {file}, row {position}")

    cancelled = WEEK[0] + timedelta(days=1)
    _step(f"delete: the low-priority orders of {cancelled} (pyarrow API, by predicate)")
    started = time.perf_counter()
    deleted = table.delete(where=(pc.field("o_orderdate") == cancelled)
                           & (pc.field("o_orderpriority") == "5-LOW"))
    assert deleted is not None
    delta_bytes = sum(sum(os.path.getsize(p) for p in f.delete_files) for f in table.snapshot().files())
    print(f"delete {deleted.instant}: {deleted.rows_deleted:,} rows; delete deltas hold "
          f"{delta_bytes:,} bytes in all; {table.snapshot().count():,} rows now ({_ms(started)})")

    _downstream(table, commits[-1].instant, first_repriced["o_orderkey"])

    legacy = os.path.join(warehouse, "legacy_orders")
    _step("ADD SEGMENT: an existing Parquet folder (last year's orders, written by plain Spark, "
          f"Hive-partitioned by o_orderstatus) joins the table in place: {legacy}")
    shutil.rmtree(legacy, ignore_errors=True)
    old_orders = orders_frame(spark, 10 * rows_per_load, rows_per_load // 4, date(2025, 1, 1), 60,
                              "of last year")
    old_orders.write.partitionBy("o_orderstatus").parquet(legacy)
    legacy_bytes = _folder_bytes(legacy)
    started = time.perf_counter()
    added = table.add_segment(legacy, "parquet", partition="o_orderstatus:string")
    assert added is not None  # None only for an idempotent add (commit_properties)
    print(f"add_segment {added.instant}: {added.files_added} files, {added.rows_added:,} rows as "
          f"segment(s) {added.segment}.. (one per partition folder); row counts and column ranges "
          f"from the Parquet footers, the keys indexed; nothing copied ({_ms(started)})")
    mixed = txn_spark.read(spark, uri)
    older = mixed.where(f"o_orderdate < DATE '{FIRST_DAY}'").count()
    print(f"read across formats with Spark (the table's Parquet scan and one per external format, "
          f"unioned): {mixed.count():,} rows, of which {older:,} from the added folder")

    week = f"o_orderdate BETWEEN DATE '{WEEK[0]}' AND DATE '{WEEK[1]}'"
    _step(f"selective read with Spark: {week}")
    started = time.perf_counter()
    snapshot = table.snapshot()
    every, matching = snapshot.files(), snapshot.files(to_expression(week, table.schema))
    print(f"{len(matching)} of {len(every)} files can match; {len(every) - len(matching)} skipped "
          "without being opened (column ranges in the metadata table)")
    show(_by_priority(txn_spark.read(spark, uri, filter=week)))
    print(f"({_ms(started)})")

    last_load = commits[-1].instant
    _step(f"time travel: the same week as of instant {last_load} (the last load)")
    started = time.perf_counter()
    show(_by_priority(txn_spark.read(spark, uri, filter=week, as_of=last_load)))
    print(f"then: {table.snapshot(as_of=last_load).count():,} rows; now: {snapshot.count():,} rows "
          f"({_ms(started)})")

    _step("CLEAN FILES: the files of the Compacted segments, past the retention of 2 commits")
    started = time.perf_counter()
    cleaned = table.clean()
    print(f"clean {cleaned.instant}: {len(cleaned.files):,} files deleted, {cleaned.freed_bytes:,} "
          f"bytes freed; segments {', '.join(cleaned.segments)} leave SHOW SEGMENTS for its history "
          f"({_ms(started)})")
    try:
        table.snapshot(as_of=last_load).count()
    except SnapshotExpiredError as refused:
        print(f"time travel to the last load now: {type(refused).__name__}: {refused}")
    else:  # pragma: no cover - the demo's retention makes this impossible
        raise AssertionError("the clean should have expired the snapshot of the last load")

    _step("SHOW SEGMENTS")
    show(segments_table(table.segments()))
    cleaned_ids = [s.id for s in table.segments(history=True) if not s.visible]
    print(f"SHOW HISTORY SEGMENTS adds {', '.join(cleaned_ids)} (metatxn segments --history)")
    intact = _folder_bytes(legacy) == legacy_bytes
    print(f"the added folder {legacy} is {'untouched' if intact else 'CHANGED'} by CLEAN FILES")
    assert intact

    _step("timeline")
    show(timeline_table(table.timeline(), {e.instant: e for e in table.history()}))

    _step("validate")
    report = table.validate()
    print(report)
    # The demo is also CI's end-to-end check (`make demo`): a table that does not validate fails it.
    assert report.ok, f"the demo's table does not validate:\n{report}"
    _streaming(spark, warehouse)
    print(f"\ndone in {time.perf_counter() - began:.1f} s")
    return table


def _downstream(table: Table, processed: str, repriced_key: int) -> None:
    """A downstream job that last processed instant ``processed`` (the last load) reads only the
    rows changed since: the compaction changed none, the upsert gives pre- and post-images of
    the orders it repriced and inserts of the new ones, the delete its deleted rows."""
    _step(f"change feed: a downstream job reads only what changed since instant {processed}, the "
          "last it processed (t.changes)")
    started = time.perf_counter()
    feed = table.changes(processed)
    changed = feed.to_arrow()
    show(changes_table(feed.summary()))
    print(f"{changed.num_rows:,} change rows, read from those instants' own files and delete deltas; "
          f"the compaction in between changed no row; the table holds {table.snapshot().count():,} "
          f"rows ({_ms(started)})")
    for row in changed.filter(pc.field("o_orderkey") == repriced_key).to_pylist():
        print(f"  order {repriced_key}: {row['_change_type']:<16} o_totalprice {row['o_totalprice']}, "
              f"instant {row['_commit_instant']}")
    print(f"its next run starts after {feed.end} (the window's end): "
          f"{table.changes(feed.end).count_rows()} rows so far")


def _streaming(spark: SparkSession, warehouse: str) -> None:
    """A streaming table fed by Spark's rate source: SHOW STREAMS while it runs, DROP STREAM,
    and the hand-off of its streaming segment to a columnar one."""
    from .. import spark as txn_spark

    uri = os.path.join(warehouse, "events")
    shutil.rmtree(uri, ignore_errors=True)
    events = create_table(uri, pa.schema([("at", pa.timestamp("us", tz="UTC")), ("value", pa.int64())]),
                          sort_by=["value"], properties={"streaming": "true"})
    _step(f"streaming: Spark's rate source, 200 rows a second, into the streaming table {uri}")
    rate = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
    query = txn_spark.write_stream(rate.selectExpr("timestamp AS at", "value"), uri,
                                   checkpoint_location=os.path.join(warehouse, "events_checkpoint"),
                                   name="rate_job", trigger={"processingTime": "500 milliseconds"})
    try:
        deadline = time.monotonic() + 60
        while (not events.streams() or (events.streams()[0].last_batch_id or 0) < 4) \
                and time.monotonic() < deadline:
            time.sleep(0.25)
        print("SHOW STREAMS, while the query runs:")
        show(streams_table(events.streams()))
        show(segments_table(events.segments()))
    finally:
        events.drop_stream("rate_job")  # DROP STREAM: the query stops first
        if query.isActive:  # pragma: no cover - drop_stream stopped it
            query.stop()
    print(f"DROP STREAM rate_job: the query is {'running' if query.isActive else 'stopped'}; its "
          "segment finished and was handed off to a columnar segment (streaming.auto_handoff):")
    show(segments_table(events.segments()))
    report = events.validate()
    print(f"{events.snapshot().count():,} rows, each batch exactly once; {report}")
    assert report.ok, f"the streaming table does not validate:\n{report}"
