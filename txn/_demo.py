"""The demonstration job behind ``make demo``.

It creates (or reopens) ``<warehouse>/orders``, a TPC-H-like orders table, runs a few instants
through the table's timeline, including one writer that dies part way and is rolled back by the
next, and prints the timeline. Data loads join it as the write path lands.
"""

from __future__ import annotations

import os

import pyarrow as pa

import timeline
from timeline import TableExistsError

from ._render import render_timeline
from ._table import Table, create_table, open_table

ORDERS = pa.schema([
    ("o_orderkey", pa.int64(), False),
    ("o_custkey", pa.int64()),
    ("o_orderstatus", pa.string()),
    ("o_totalprice", pa.decimal128(15, 2)),
    ("o_orderdate", pa.date32()),
    ("o_orderpriority", pa.string()),
    ("o_comment", pa.string()),
])


def _orders_table(uri: str) -> Table:
    try:
        return create_table(uri, ORDERS, partition_by=["o_orderstatus"], record_key="o_orderkey",
                            sort_by=["o_orderdate"])
    except TableExistsError:
        return open_table(uri)


def run(warehouse: str) -> None:
    uri = os.path.join(warehouse, "orders")
    table = _orders_table(uri)
    print(f"table {table.uri}: key {table.record_key}, partitioned by {table.partition_by}")

    tl = timeline.Timeline(timeline.open_storage(uri))
    for load in range(3):
        instant = tl.start(tl.request("commit", {"operation": "demo", "load": load}))
        with tl.heartbeat(instant), tl.lock() as lease:
            done = tl.complete(instant, {"load": load}, lease=lease)
        print(f"committed {done.time} (completed at {done.completed_at})")

    crashed = tl.start(tl.request("commit", {"operation": "demo", "load": "crashes"}))
    print(f"a writer died while {crashed.time} was inflight; the next writer rolls it back")
    with tl.lock() as lease:
        rollback = tl.rollback(crashed, lease=lease, undo=lambda target: {"files_deleted": 0})
    print(f"rolled back {crashed.time} with {rollback.time}")
    print()
    print(render_timeline(table.timeline()))
