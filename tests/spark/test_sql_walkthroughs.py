"""The seeds' SQL sessions, replayed statement by statement through ``txn.spark.sql``.

1. CarbonData's ``orders`` session: CREATE TABLE with SORT_COLUMNS, four LOAD DATA of a
   pipe-delimited TPC-H-like file without a header (FILEHEADER), SHOW SEGMENTS, COMPACT 'MINOR',
   CLEAN FILES (then SHOW SEGMENTS shows only 0.1, SHOW HISTORY SEGMENTS the rest), more loads
   and COMPACT 'MAJOR', UPDATE twice; and the partitioned variant with
   SHOW PARTITIONS.
2. The ADD SEGMENT session (docs/addsegment-guide.md, as
   tests/unit/txn/test_add_segment.py::test_seed_walkthrough_result_and_error_tables replays it
   through the Python API): Hive folders of Parquet and ORC added to ``log_carbon_par``, its
   error table, SHOW SEGMENTS.

Every step checks what the statement answered and what the table holds afterwards (rows,
segment ids and statuses, values), read back through SQL and through the table's API.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txn
import txn.spark
from tests.unit.txn.external_data import url_of, write_hive
from tests.unit.txn.test_add_segment import LOG_PARTITIONS, LOG_SCHEMA, log_rows

pytestmark = pytest.mark.spark

ORDER_COLUMNS = ("o_orderkey", "o_custkey", "o_orderstatus", "o_totalprice", "o_orderdate",
                 "o_orderpriority", "o_clerk", "o_shippriority", "o_comment")
FILEHEADER = ",".join(ORDER_COLUMNS)
PRIORITIES = ("1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW")
ROWS = 300


def orders_rows(first_key: int, count: int = ROWS) -> list[tuple[Any, ...]]:
    """TPC-H-like orders: keys from ``first_key``, dates over 1995-1996, statuses F/O/P."""
    rng = random.Random(first_key)
    rows = []
    for key in range(first_key, first_key + count):
        day = date(1995, 1, 1) + timedelta(days=rng.randrange(730))
        rows.append((key, rng.randrange(1, 1000), rng.choice("FOP"), round(rng.uniform(900, 500000), 2),
                     day, rng.choice(PRIORITIES), f"Clerk#{rng.randrange(1000):09d}", 0,
                     f"regular deposits | no. {key}"[:60].replace("|", "-")))
    return rows


def write_tbl(path: Path, rows: list[tuple[Any, ...]]) -> str:
    """A pipe-delimited file without a header, as TPC-H's dbgen writes (values never quoted)."""
    path.write_text("".join("|".join(str(v) for v in row) + "\n" for row in rows))
    return str(path)


@pytest.fixture
def sql(spark: Any, tmp_path: Path) -> Any:
    txn.spark.register(spark, warehouse=str(tmp_path / "warehouse"))
    return lambda statement: txn.spark.sql(spark, statement)


def segments(frame: Any) -> list[tuple[str, str]]:
    return [(r["ID"], r["Status"]) for r in frame.collect()]


def load(sql: Any, table: str, path: str) -> str:
    answer = sql(f"LOAD DATA INPATH '{path}' INTO TABLE {table} "
                 f"OPTIONS('DELIMITER'='|', 'FILEHEADER'='{FILEHEADER}')").collect()
    assert len(answer) == 1
    return str(answer[0]["Segment ID"])


CREATE_ORDERS = (
    "CREATE TABLE IF NOT EXISTS orders (o_orderkey bigint, o_custkey bigint, o_orderstatus string, "
    "o_totalprice double, o_orderdate date, o_orderpriority string, o_clerk string, "
    "o_shippriority int, o_comment string) STORED AS carbondata TBLPROPERTIES('SORT_COLUMNS'='o_orderdate')")


def test_orders_session(sql: Any, tmp_path: Path) -> None:
    """The article's session: each statement's answer, and the table after it."""
    assert sql(CREATE_ORDERS).collect() == []
    table = txn.open_table(str(tmp_path / "warehouse" / "orders"))
    assert table.sort_by == ["o_orderdate"] and table.partition_by == [] and table.record_key is None
    assert [(f.name, str(f.type)) for f in table.schema] == [
        ("o_orderkey", "int64"), ("o_custkey", "int64"), ("o_orderstatus", "string"),
        ("o_totalprice", "double"), ("o_orderdate", "date32[day]"), ("o_orderpriority", "string"),
        ("o_clerk", "string"), ("o_shippriority", "int32"), ("o_comment", "string")]

    # four loads of four files: four segments
    batches = [orders_rows(1 + i * ROWS) for i in range(4)]
    loaded = [load(sql, "orders", write_tbl(tmp_path / f"orders_{i}.tbl", rows))
              for i, rows in enumerate(batches)]
    assert loaded == ["0", "1", "2", "3"]
    shown = sql("SHOW SEGMENTS FOR TABLE orders")
    assert shown.columns == ["ID", "Status", "Load Start Time", "Load Time Taken", "Partition",
                             "Data Size", "Index Size", "File Format"]
    rows = shown.collect()
    assert [(r["ID"], r["Status"], r["Partition"], r["File Format"]) for r in rows] == [
        (i, "Success", "NA", "parquet") for i in ("3", "2", "1", "0")]
    assert all(r["Data Size"].endswith("KB") for r in rows)
    loaded_files = [f.path for f in table.snapshot().files()]
    everything = [row for rows in batches for row in rows]
    assert sql("SELECT count(*) AS n, round(sum(o_totalprice), 2) AS total FROM orders").first().asDict() == \
        {"n": 4 * ROWS, "total": round(sum(r[3] for r in everything), 2)}
    first = sql("SELECT * FROM orders WHERE o_orderkey = 1").first()
    assert tuple(first) == batches[0][0]

    # COMPACT 'MINOR': the four loads become 0.1, sorted by o_orderdate
    assert sql("ALTER TABLE orders COMPACT 'MINOR'").collect() == []
    assert segments(sql("SHOW SEGMENTS FOR TABLE orders")) == [
        ("3", "Compacted"), ("2", "Compacted"), ("1", "Compacted"), ("0.1", "Success"), ("0", "Compacted")]
    assert {s.id: s.merged_to for s in table.segments() if s.status == "Compacted"} == \
        {"0": "0.1", "1": "0.1", "2": "0.1", "3": "0.1"}
    merged = [f for f in table.snapshot().files() if f.segment == "0.1"]
    for data_file in merged:
        days = pq.read_table(data_file.path.removeprefix("file://"), columns=["o_orderdate"])["o_orderdate"]
        assert days.to_pylist() == sorted(days.to_pylist())
    assert sql("SELECT count(*) FROM orders").first()[0] == 4 * ROWS

    # CLEAN FILES: within the retention nothing is freed; 'force' frees the compacted loads
    assert sql("CLEAN FILES FOR TABLE orders").collect()[0].asDict() == {"Size Freed": "0 Byte"}
    compacted = [path.removeprefix("file://") for path in loaded_files]
    dry = sql("CLEAN FILES FOR TABLE orders OPTIONS('force'='true', 'dryrun'='true')").first().asDict()
    assert all(Path(p).exists() for p in compacted)
    freed = sql("CLEAN FILES FOR TABLE orders OPTIONS('force'='true')").first().asDict()
    assert freed == {"Size Freed": dry["Size To Be Freed"]} and freed["Size Freed"].endswith("KB")
    assert dry["Trash Data Remaining"] == "0 Byte", "deleted for good, as CarbonData: no trash"
    assert not any(Path(p).exists() for p in compacted)
    assert sql("SELECT count(*) FROM orders").first()[0] == 4 * ROWS
    # as in CarbonData's walk-through, SHOW SEGMENTS shows only 0.1 now; the compacted loads are
    # in SHOW HISTORY SEGMENTS, not visible any more (issue 22, items 10 and 12)
    assert segments(sql("SHOW SEGMENTS FOR TABLE orders")) == [("0.1", "Success")]
    history = sql("SHOW HISTORY SEGMENTS FOR TABLE orders")
    assert history.columns[-2:] == ["Visibility", "Cleaned Time"]
    assert [(r["ID"], r["Status"], r["Visibility"]) for r in history.collect()] == [
        ("0.1", "Success", "true"), ("3", "Compacted", "false"), ("2", "Compacted", "false"),
        ("1", "Compacted", "false"), ("0", "Compacted", "false")]
    assert history.collect()[0]["Cleaned Time"] == "NA" != history.collect()[1]["Cleaned Time"]

    # two more loads, then COMPACT 'MAJOR': every Success segment under the size limit merges
    more = [orders_rows(1 + i * ROWS) for i in (4, 5)]
    assert [load(sql, "orders", write_tbl(tmp_path / f"orders_{i}.tbl", rows)) for i, rows in
            zip((4, 5), more, strict=True)] == ["4", "5"]
    assert sql("ALTER TABLE orders COMPACT 'MAJOR'").collect() == []
    after = segments(sql("SHOW SEGMENTS FOR TABLE orders"))
    live = [(i, s) for i, s in after if s == "Success"]
    assert len(live) == 1
    major = live[0][0]
    assert {s.id for s in txn.open_table(table.uri).segments() if s.merged_to == major} == {"0.1", "4", "5"}
    everything += [row for rows in more for row in rows]
    assert sql("SELECT count(*) FROM orders").first()[0] == 6 * ROWS

    # UPDATE, CarbonData's form: the priority of the first half of 1995
    in_range = [r for r in everything if date(1995, 1, 1) <= r[4] <= date(1995, 6, 30)]
    answer = sql("UPDATE orders SET (o_orderpriority) = ('1-URGENT') "
                 "WHERE o_orderdate BETWEEN '1995-01-01' AND '1995-06-30'").collect()
    assert [r.asDict() for r in answer] == [{"Updated Row Count": len(in_range)}]
    by_priority = dict(sql("SELECT o_orderpriority, count(*) FROM orders WHERE o_orderdate "
                           "BETWEEN '1995-01-01' AND '1995-06-30' GROUP BY o_orderpriority").collect())
    assert by_priority == {"1-URGENT": len(in_range)}
    outside = Counter(r[5] for r in everything if r not in in_range)
    assert dict(sql("SELECT o_orderpriority, count(*) FROM orders WHERE o_orderdate > '1995-06-30' "
                    "GROUP BY o_orderpriority").collect()) == dict(outside)

    # UPDATE, Spark's form, with an expression of the old value
    finished = {r[0]: r[3] for r in everything if r[2] == "F"}
    answer = sql("UPDATE orders SET o_totalprice = o_totalprice * 1.1 WHERE o_orderstatus = 'F'").collect()
    assert answer[0]["Updated Row Count"] == len(finished)
    prices = dict(sql("SELECT o_orderkey, o_totalprice FROM orders WHERE o_orderstatus = 'F'").collect())
    assert prices.keys() == finished.keys()
    assert all(prices[k] == pytest.approx(v * 1.1) for k, v in finished.items())
    unchanged = {r[0]: r[3] for r in everything if r[2] != "F"}
    assert dict(sql("SELECT o_orderkey, o_totalprice FROM orders WHERE o_orderstatus <> 'F'").collect()) \
        == unchanged
    assert sql("SELECT count(*) FROM orders").first()[0] == 6 * ROWS

    # each UPDATE wrote its rows as a new segment
    final = segments(sql("SHOW SEGMENTS FOR TABLE orders"))
    assert [i for i, s in final if s == "Success"] == ["7", "6", major]
    assert table.validate().ok


def test_partitioned_orders_show_partitions(sql: Any, tmp_path: Path) -> None:
    """PARTITIONED BY (o_orderstatus string): the column joins the schema last; each load writes
    one folder per status; SHOW PARTITIONS lists them."""
    sql("CREATE TABLE orders_part (o_orderkey bigint, o_custkey bigint, o_totalprice double, "
        "o_orderdate date, o_orderpriority string, o_clerk string, o_shippriority int, o_comment string) "
        "STORED AS carbondata PARTITIONED BY (o_orderstatus string) "
        "TBLPROPERTIES('SORT_COLUMNS'='o_orderdate')")
    table = txn.open_table(str(tmp_path / "warehouse" / "orders_part"))
    assert table.schema.names[-1] == "o_orderstatus" and table.partition_by == ["o_orderstatus"]
    rows = orders_rows(1) + orders_rows(1 + ROWS)
    assert load(sql, "orders_part", write_tbl(tmp_path / "a.tbl", rows[:ROWS])) == "0"
    assert load(sql, "orders_part", write_tbl(tmp_path / "b.tbl", rows[ROWS:])) == "1"

    partitions = sql("SHOW PARTITIONS orders_part")
    assert partitions.columns == ["partition"]
    assert [r[0] for r in partitions.collect()] == ["o_orderstatus=F", "o_orderstatus=O", "o_orderstatus=P"]
    assert [r[0] for r in sql("SHOW PARTITIONS orders_part PARTITION (o_orderstatus='O')").collect()] == \
        ["o_orderstatus=O"]
    shown = sql("SHOW SEGMENTS FOR TABLE orders_part").collect()
    assert [(r["ID"], r["Status"], r["Partition"]) for r in shown] == [
        ("1", "Success", "{o_orderstatus=F}, ..."), ("0", "Success", "{o_orderstatus=F}, ...")]
    counts = Counter(r[2] for r in rows)
    assert dict(sql("SELECT o_orderstatus, count(*) FROM orders_part GROUP BY o_orderstatus").collect()) \
        == dict(counts)

    # an UPDATE of the partition column moves rows to another partition folder
    answer = sql("UPDATE orders_part SET o_orderstatus = 'X' WHERE o_orderstatus = 'P'").first()
    assert answer["Updated Row Count"] == counts["P"]
    assert [r[0] for r in sql("SHOW PARTITIONS orders_part").collect()] == [
        "o_orderstatus=F", "o_orderstatus=O", "o_orderstatus=X"]
    assert sql("SELECT count(*) FROM orders_part WHERE o_orderstatus = 'X'").first()[0] == counts["P"]


def test_add_segment_session(sql: Any, tmp_path: Path) -> None:
    """docs/addsegment-guide.md through SQL: the result table (four segments, one per partition
    folder of the Parquet and ORC Hive tables), the error table (each refused, nothing
    written), SHOW SEGMENTS, and a native load afterwards."""
    warehouse = tmp_path / "warehouse"
    parquet_rows = pa.concat_tables([log_rows(range(5), 0), log_rows(range(5, 12), 1)])
    orc_rows = pa.concat_tables([log_rows(range(100, 103), 0), log_rows(range(103, 110), 1)])
    write_hive(warehouse / "log_parquet_par", parquet_rows, LOG_PARTITIONS, "parquet")
    write_hive(warehouse / "log_orc_par", orc_rows, LOG_PARTITIONS, "orc")
    sql("CREATE TABLE log_carbon_par (id bigint, event_time bigint, ip string) STORED AS carbondata "
        "PARTITIONED BY (day int, hour int, type int)")
    table = txn.open_table(str(warehouse / "log_carbon_par"))
    assert table.schema.equals(LOG_SCHEMA) and table.partition_by == LOG_PARTITIONS

    # the result table
    for folder, file_format in (("log_parquet_par", "parquet"), ("log_orc_par", "orc")):
        answer = sql(f"ALTER TABLE log_carbon_par ADD SEGMENT OPTIONS('path'='{warehouse}/{folder}/', "
                     f"'format'='{file_format}', 'partition'='day:int,hour:int,type:int')")
        assert answer.collect() == []

    # the error table: each refused with InvalidOptionError quoting the statement, nothing written
    before = (table.timeline(), [(s.id, s.status) for s in table.segments()])
    leaf = f"{warehouse}/log_parquet_par/day=20211123/hour=12/type=0"
    for option, words in (("day=20211123 and hour=12 and type=0", "invalid partition option"),
                          ("day=20211123,hour=12,type=0", "invalid partition option"),
                          (None, "partition option is required"),
                          ("day:int,hour:int,type:int", "does not comply")):
        given = f", 'partition'='{option}'" if option is not None else ""
        statement = (f"ALTER TABLE log_carbon_par ADD SEGMENT OPTIONS('path'='{leaf}', "
                     f"'format'='parquet'{given})")
        with pytest.raises(txn.InvalidOptionError) as refused:
            sql(statement)
        assert words in str(refused.value) and repr(statement) in str(refused.value)
        assert (table.timeline(), [(s.id, s.status) for s in table.segments()]) == before

    # SHOW SEGMENTS, newest first: one segment per partition folder, read in place
    shown = sql("SHOW SEGMENTS FOR TABLE log_carbon_par").collect()
    assert [(r["ID"], r["Status"], r["File Format"], r["Index Size"]) for r in shown] == [
        ("3", "Success", "orc", "NA"), ("2", "Success", "orc", "NA"),
        ("1", "Success", "parquet", "NA"), ("0", "Success", "parquet", "NA")]
    assert sorted(r["Partition"] for r in shown) == [
        "{day=20211123,hour=12,type=0}", "{day=20211123,hour=12,type=0}",
        "{day=20211123,hour=12,type=1}", "{day=20211123,hour=12,type=1}"]
    assert [s.path for s in table.segments()] == [url_of(warehouse / "log_orc_par")] * 2 + \
        [url_of(warehouse / "log_parquet_par")] * 2
    assert sql("SELECT count(*) FROM log_carbon_par").first()[0] == 22
    assert dict(sql("SELECT type, count(*) FROM log_carbon_par GROUP BY type").collect()) == {0: 8, 1: 14}
    assert sorted(r[0] for r in sql("SELECT id FROM log_carbon_par WHERE type = 0").collect()) == \
        [0, 1, 2, 3, 4, 100, 101, 102]

    # a native load afterwards is segment 4: parquet, not external
    answer = sql("INSERT INTO log_carbon_par VALUES (200, 1637669000, '10.0.0.200', 20211123, 12, 1), "
                 "(201, 1637669001, '10.0.0.201', 20211123, 12, 0)").collect()
    assert answer[0]["Segment ID"] == "4"
    newest = sql("SHOW SEGMENTS FOR TABLE log_carbon_par LIMIT 1").collect()
    assert [(r["ID"], r["Status"], r["File Format"]) for r in newest] == [("4", "Success", "parquet")]
    assert sql("SELECT count(*) FROM log_carbon_par").first()[0] == 24
    assert table.validate().ok
