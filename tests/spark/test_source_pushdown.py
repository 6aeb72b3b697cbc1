"""``spark.read.format("metatxn")``: pushed filters (``pushFilters``) translated exactly, files
pruned by the metadata table's ranges, partitions planned from it, and ``as.of.instant``.

Invariants: every predicate gives through the format the rows plain Spark gives over the same
data (NULLs, NaN, ``IN`` with NULL, ``<=>``, decimals, dates, timestamps, strings), with delete
deltas applied and an external segment read; a file whose ranges rule the filter out is never
opened; untranslated filters go back to Spark.
"""

from __future__ import annotations

import datetime as dt
import functools
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    In,
    IsNull,
    LessThan,
    Not,
    StringStartsWith,
)

import txn
import txn.spark
from txn.spark._pushed import translate
from txn.spark._source import plan

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([
    ("id", pa.int64()), ("n", pa.int32()), ("x", pa.float64()), ("amt", pa.decimal128(12, 2)),
    ("s", pa.string()), ("d", pa.date32()), ("ts", pa.timestamp("us", tz="UTC")),
])

#: Spark's predicates, run through the format and over the same rows in a plain DataFrame.
PREDICATES = [  # conjuncts are pushed one by one: two per predicate keep the scans few
    "n = 3 AND x > 1.5", "n <> 3 AND s LIKE 'a%'", "n > 2 AND amt BETWEEN 0.5 AND 2.5",
    "n <= 2 AND x >= 1.5", "n IS NOT NULL AND NOT (x > 1.5)", "n IN (1, 4) AND d >= date'2026-01-03'",
    "n NOT IN (1, 4) AND ts < timestamp'2026-01-02 12:00:00'", "n IN (1, NULL)",
    "n NOT IN (1, NULL) OR n IS NULL", "n <=> 3 AND s > 'b'", "NOT (n <=> 3) AND x < 1.5",
    "x = double('NaN') AND s LIKE '%c'", "x IN (0.5, 2.5) AND amt > 2", "amt = 1.255 OR amt = 1.5",
    "s = 'b' AND d = '2026-01-02'", "s LIKE '%b%' AND n IS NULL", "NOT s LIKE 'a%' AND id % 2 = 0",
    "id >= 30 AND n > 1", "id < 5 OR s = 'c'",
]


def _rows(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({
        "id": ids,
        "n": [None if i % 7 == 0 else i % 5 for i in ids],
        "x": [float("nan") if i % 6 == 0 else None if i % 9 == 0 else (i % 4) * 0.5 + 0.5 for i in ids],
        "amt": [None if i % 8 == 0 else Decimal(i % 5) * Decimal("0.75") for i in ids],
        "s": [None if i % 10 == 0 else "abc"[i % 3] + ("c" if i % 4 == 0 else "") for i in ids],
        "d": [dt.date(2026, 1, 1 + i % 5) for i in ids],
        "ts": [dt.datetime(2026, 1, 1 + i % 3, i % 24, tzinfo=dt.timezone.utc) for i in ids],
    }, schema=SCHEMA)


@pytest.fixture(scope="module")
def table(spark: Any, tmp_path_factory: Any) -> tuple[str, txn.Table]:
    txn.spark.register(spark)
    root = tmp_path_factory.mktemp("pushdown")
    uri = str(root / "t")
    table = txn.create_table(uri, SCHEMA)
    for first in (0, 20, 40):
        table.append(_rows(first, 20))
    table.delete(pc.field("id").isin([3, 24, 45]))
    external = root / "ext"
    external.mkdir()
    pq.write_table(_rows(60, 20), external / "part-0.parquet")
    table.add_segment(str(external), "parquet")
    return uri, table


def test_predicates_mean_what_spark_means(spark: Any, table: tuple[str, txn.Table]) -> None:
    """One Spark job for all predicates, each branch a scan of its own ``load()`` (Spark 4.3
    shares one pushdown outcome among the scans of one DataFrame: see ``_PushingReader``)."""
    from pyspark.sql import functions as F

    uri, t = table
    plain = spark.createDataFrame(t.to_arrow())

    def source() -> Any:
        return spark.read.format("metatxn").option("pushFilters", "true").load(uri)

    def tagged(frame: Any) -> Any:
        return functools.reduce(lambda a, b: a.unionByName(b), [
            frame().where(p).select(F.lit(i).alias("p"), "id") for i, p in enumerate(PREDICATES)])

    def by_predicate(frame: Any) -> dict[str, list[int]]:
        found: dict[str, list[int]] = {p: [] for p in PREDICATES}
        for row in frame.collect():
            found[PREDICATES[row.p]].append(row.id)
        return {p: sorted(ids) for p, ids in found.items()}

    expected = by_predicate(tagged(lambda: plain))
    assert by_predicate(tagged(source)) == expected
    assert all(expected.values())
    assert 18 in expected["n = 3 AND x > 1.5"] and 3 not in expected["n = 3 AND x > 1.5"]  # 3 is deleted
    assert 64 in expected["NOT s LIKE 'a%' AND id % 2 = 0"]  # a row of the external segment


def test_files_the_ranges_rule_out_are_not_opened(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = txn.create_table(uri, SCHEMA)
    for first in (0, 100, 200):
        t.append(_rows(first, 100))
    pruned = t.snapshot().files(pc.field("id") < 100)
    assert len(pruned) == 1
    expected = t.to_arrow(filter=(pc.field("id") >= 150) & (pc.field("s") == "a")).num_rows
    Path(pruned[0].path).write_bytes(b"not parquet")  # any read of it now fails
    df = spark.read.format("metatxn").option("pushFilters", "true").load(uri)
    assert df.where("id >= 150 AND s = 'a'").count() == expected > 0
    with pytest.raises(Exception, match=r"(?i)parquet"):
        df.where("id >= 50").count()
    with pytest.raises(Exception, match=r"(?i)parquet"):  # without the option, nothing is pruned
        spark.read.format("metatxn").load(uri).where("id >= 150 AND s = 'a'").count()


def test_partitions_pack_small_files_and_as_of_instant(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    t = txn.create_table(uri, SCHEMA)
    for first in range(0, 60, 10):
        t.append(_rows(first, 10))
    instant = t.timeline()[1].time
    df = spark.read.format("metatxn").load(uri)
    # six small files, parallelism 2 (local[2]): two tasks
    assert df.rdd.getNumPartitions() == 2 and df.count() == 60
    old = spark.read.format("metatxn").option("as.of.instant", instant).load(uri)
    assert sorted(r.id for r in old.select("id").collect()) == list(range(20))
    # one DataFrame scanned twice with different filters (the default reader takes none)
    pairs = df.where("id < 30").alias("a").join(df.where("id >= 20").alias("b"), "id")
    assert sorted(r.id for r in pairs.select("id").collect()) == list(range(20, 30))
    with pytest.raises(Exception, match=r"asOf and as\.of\.instant"):
        spark.read.format("metatxn").option("asOf", instant).option("as.of.instant", instant).load(uri)


def test_translation_returns_what_it_cannot_apply_exactly() -> None:
    typed = dict.fromkeys(SCHEMA.names, True)
    kept = [EqualTo(("n",), 3), Not(In(("n",), [1, 2])), EqualNullSafe(("n",), 3), Not(IsNull(("d",))),
            StringStartsWith(("s",), "a"), GreaterThan(("x",), 1.0), LessThan(("amt",), Decimal("2.50"))]
    back = [In(("n",), [1, None]), EqualTo(("x",), float("nan")), EqualTo(("amt",), Decimal("1.255")),
            EqualTo(("n",), 2 ** 40), EqualTo(("a", "b"), 1), EqualTo(("zz",), 1),
            Not(Not(EqualTo(("n",), 3)))]
    expression, rest = translate([*kept, *back], SCHEMA, typed)
    assert rest == back and all(r is b for r, b in zip(rest, back, strict=True))
    assert expression is not None
    rows = _rows(0, 40)
    # n = 3 (so i % 5 == 3), s starts with 'a' (i % 3 == 0), x > 1 or NaN, amt < 2.50: of
    # 3, 18 and 33, x is 2.0, NaN and 1.0
    assert rows.filter(expression).column("id").to_pylist() == [3, 18]
    # a column the read schema types otherwise (a user's .schema(...)) is left to Spark
    assert translate([EqualTo(("n",), 3)], SCHEMA, {"n": False})[1] != []
    assert plan([], 2) == []
