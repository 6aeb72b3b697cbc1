"""The demonstration job behind ``make demo``.

It generates a TPC-H-like ``orders`` dataset, loads it into ``<warehouse>/orders`` in four loads
(four segments), reads it back with a selective filter (showing how many files were pruned),
upserts and deletes orders through the record-level index, time-travels to the second load,
overwrites the table with its open orders, and prints SHOW SEGMENTS, the timeline and a
validation report. The Spark pipeline replaces the generator and the
loads as the Spark integration lands.
"""

from __future__ import annotations

import os
import shutil
import time
from datetime import date, timedelta
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from ._records import Segment
from ._render import render, render_timeline
from ._table import Table, create_table

ORDERS = pa.schema([
    ("o_orderkey", pa.int64(), False),
    ("o_custkey", pa.int64()),
    ("o_orderstatus", pa.string()),
    ("o_totalprice", pa.decimal128(15, 2)),
    ("o_orderdate", pa.date32()),
    ("o_orderpriority", pa.string()),
    ("o_comment", pa.string()),
])

_PRIORITIES = ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]


def generate_orders(first_key: int, count: int, start: date) -> pa.Table:
    """Deterministic TPC-H-like orders: keys ``first_key..``, dates spread over 90 days."""
    keys = pa.array(range(first_key, first_key + count), pa.int64())
    days = pc.remainder(keys, 90)
    dates = [start + timedelta(days=int(d)) for d in days.to_pylist()]
    status = ["F" if d < 60 else ("O" if d >= 75 else "P") for d in days.to_pylist()]
    prices = [Decimal(k % 100_000) / 10 + Decimal("0.99") for k in keys.to_pylist()]
    return pa.table({
        "o_orderkey": keys,
        "o_custkey": pc.add(pc.remainder(pc.multiply(keys, 7919), 15_000), 1),
        "o_orderstatus": status,
        "o_totalprice": pa.array(prices, pa.decimal128(15, 2)),
        "o_orderdate": pa.array(dates, pa.date32()),
        "o_orderpriority": [_PRIORITIES[k % 5] for k in keys.to_pylist()],
        "o_comment": [f"order {k} of the demo" for k in keys.to_pylist()],
    }, schema=ORDERS)


def _show_segments(segments: list[Segment]) -> str:
    return render(
        ("segment", "status", "rows", "data_size", "partitions", "load_end"),
        ((s.id, s.status, s.rows, s.data_size, ",".join(s.partitions),
          s.load_end.strftime("%H:%M:%S") if s.load_end else "") for s in segments),
    )


def _step(title: str) -> float:
    print(f"\n== {title}")
    return time.perf_counter()


def run(warehouse: str, *, rows_per_load: int = 50_000) -> Table:
    uri = os.path.join(warehouse, "orders")
    shutil.rmtree(uri, ignore_errors=True)  # the demo starts from an empty table every run
    began = _step(f"create {uri}: partitioned by o_orderstatus, sorted by o_orderdate")
    table = create_table(uri, ORDERS, partition_by=["o_orderstatus"], record_key="o_orderkey",
                         sort_by=["o_orderdate"])

    commits = []
    for load in range(4):
        start = date(2026, 1, 1) + timedelta(days=30 * load)
        data = generate_orders(load * rows_per_load, rows_per_load, start)
        started = time.perf_counter()
        commit = table.append(data)
        commits.append(commit)
        print(f"load {load}: segment {commit.segment}, {commit.rows_added} rows in "
              f"{commit.files_added} files, instant {commit.instant} "
              f"({(time.perf_counter() - started) * 1000:.0f} ms)")

    _step("selective read: o_orderdate in the first week of March 2026")
    snapshot = table.snapshot()
    march = (pc.field("o_orderdate") >= date(2026, 3, 1)) & (pc.field("o_orderdate") < date(2026, 3, 8))
    matching = snapshot.files(march)
    print(f"{len(matching)} of {len(snapshot.files())} files can match; "
          f"{len(snapshot.files()) - len(matching)} skipped without being opened")
    rows = snapshot.to_arrow(march, columns=["o_orderkey", "o_orderdate", "o_totalprice"])
    total = pc.sum(rows["o_totalprice"]).as_py()
    print(f"{rows.num_rows} orders, total price {total}")

    _step("upsert: 1,000 repriced orders and 1,000 new ones, by o_orderkey")
    repriced = generate_orders(rows_per_load // 2, 1_000, date(2026, 1, 1))
    repriced = repriced.set_column(3, "o_totalprice", pc.multiply(
        repriced["o_totalprice"], pa.scalar(2, pa.decimal128(15, 2))).cast(pa.decimal128(15, 2)))
    fresh = generate_orders(4 * rows_per_load, 1_000, date(2026, 4, 1))
    started = time.perf_counter()
    upserted = table.upsert(pa.concat_tables([repriced, fresh]))
    assert upserted is not None
    print(f"upsert {upserted.instant}: {upserted.rows_deleted} rows replaced through delete deltas, "
          f"{upserted.rows_added - upserted.rows_deleted} inserted, no existing file rewritten "
          f"({(time.perf_counter() - started) * 1000:.0f} ms)")
    where = table.lookup([rows_per_load // 2, 4 * rows_per_load])
    for key, segment, position in zip(where["o_orderkey"].to_pylist(), where["segment"].to_pylist(),
                                      where["position"].to_pylist(), strict=True):
        print(f"  record index: order {key} is in segment {segment}, row {position}")

    low, high = rows_per_load // 50, rows_per_load // 25
    _step(f"delete: orders {low:,}..{high - 1:,} of the first load")
    deleted = table.delete(where=(pc.field("o_orderkey") >= low) & (pc.field("o_orderkey") < high))
    assert deleted is not None
    delta_bytes = sum(sum(os.path.getsize(p) for p in f.delete_files) for f in table.snapshot().files())
    print(f"delete {deleted.instant}: {deleted.rows_deleted} rows; delete deltas hold "
          f"{delta_bytes:,} bytes in all; {table.snapshot().count()} rows now")

    _step(f"time travel to instant {commits[1].instant} (after the second load)")
    then = table.snapshot(as_of=commits[1].instant)
    print(f"then: {then.count()} rows in {len(then.files())} files; now: {table.snapshot().count()} rows")

    _step("SHOW SEGMENTS")
    print(_show_segments(table.segments()))

    _step("replace everything with the open orders (overwrite)")
    open_orders = table.to_arrow(pc.field("o_orderstatus") == "O")
    commit = table.overwrite(open_orders)
    print(f"overwrite {commit.instant}: {commit.rows_added} rows kept, {commit.rows_deleted} replaced")
    print(_show_segments(table.segments()))
    print(f"time travel still sees {table.snapshot(as_of=commits[-1].instant).count()} rows "
          f"at instant {commits[-1].instant}")

    _step("timeline")
    print(render_timeline(table.timeline()))

    _step("validate")
    print(table.validate())
    print(f"\ndone in {time.perf_counter() - began:.1f} s")
    return table
