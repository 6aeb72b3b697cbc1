"""``txn.spark.compact``: the same compaction as ``Table.compact``, rewritten by the executors."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
import txn.spark

from .helpers import ORDERS, orders

pytestmark = pytest.mark.spark


def _table(tmp_path: Path, loads: int, **layout: Any) -> txn.Table:
    table = txn.create_table(str(tmp_path / "orders"), ORDERS, **layout)
    for n in range(loads):
        table.append(orders(range(n * 50, n * 50 + 50)))
    return table


def _multiset(table: pa.Table) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(r.values()) for r in table.to_pylist())


def test_spark_compaction_matches_the_local_one(spark: Any, tmp_path: Path) -> None:
    table = _table(tmp_path, 4, record_key="id", sort_by=["price"],
                   properties={"write.target_file_bytes": "4000"})
    table.delete(keys=[3, 77, 151])
    before = _multiset(table.to_arrow())

    commit = txn.spark.compact(spark, table.uri, "minor")

    assert commit is not None and commit.segment == "0.1" and commit.operation == "compact"
    assert commit.rows_added == 197 and commit.files_added > 1
    assert {s.id: s.status for s in table.segments()} == {
        "0.1": "Success", "3": "Compacted", "2": "Compacted", "1": "Compacted", "0": "Compacted"}
    assert _multiset(table.to_arrow()) == before
    # One range per output file: a point filter on the sort column opens one file.
    one = table.to_arrow().sort_by("price")["price"][100].as_py()
    assert len(table.snapshot().files(pc.field("price") == one)) == 1
    assert table.lookup([5])["segment"].to_pylist() == ["0.1"]
    assert table.validate().ok


def test_spark_compaction_refuses_what_the_local_one_refuses(spark: Any, tmp_path: Path) -> None:
    table = _table(tmp_path, 2)
    with pytest.raises(txn.InvalidOptionError, match="not one of"):
        txn.spark.compact(spark, table.uri, "sideways")
    with pytest.raises(txn.SegmentNotFoundError):
        txn.spark.compact(spark, table.uri, "custom", segments=["7"])
    assert txn.spark.compact(spark, table.uri, "minor") is None
    assert [s.status for s in table.segments()] == ["Success", "Success"]
