"""``txn.spark.sql``: regressions of an independent review (one test per finding).

Invariants:

* what a statement hands Spark (predicates, SET values, queries) is the statement's own text:
  every literal means what Spark reads it as (doubled quotes, backslash escapes, adjacent
  strings, comment-like text);
* file pruning never skips a file holding rows Spark's predicate matches (a literal whose type
  differs from its column's does not prune);
* a refused statement, or one Spark fails to evaluate, raises a ``TxnError`` quoting it and
  leaves the table as it was: same timeline (no rolled-back instant), segments and rows;
* table names are what Spark's catalog takes unquoted; no name reaches outside the warehouse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txn
import txn.spark
from tests.spark.test_sql import refused, state
from txn._files import hive_value
from txn.spark._filters import to_expression
from txn.spark._sql import Catalog, TableName

pytestmark = pytest.mark.spark


def named(sql: Any, warehouse: Path, rows: dict[int, str]) -> txn.Table:
    """``q (id bigint, name string)`` holding ``rows``, one segment."""
    sql("CREATE TABLE q (id bigint, name string) STORED AS metatxn")
    table = txn.open_table(str(warehouse / "q"))
    table.append(pa.table({"id": pa.array(list(rows), pa.int64()), "name": list(rows.values())}))
    return table


def names(table: txn.Table) -> dict[int, str | None]:
    return {r["id"]: r["name"] for r in txn.open_table(table.uri).to_arrow().to_pylist()}


# -- 1. literals reach Spark as written ----------------------------------------------------------

#: String literals as a user types them; Spark decides what each one means.
LITERALS = [
    "'it''s'", "''''", "'a''''b'", r"'back\\slash'", r"'tab\there'", r"'quote\'d'", "'é€😀'",
    "'a' 'b'", '"dq""x"', "'-- not a comment'", "'/* nor this */'", "'semi;colon'", r"'\u0041z'",
]


@pytest.mark.slow
def test_literals_in_where_set_insert_and_ctas_mean_what_spark_reads(spark: Any, sql: Any,
                                                                       warehouse: Path) -> None:
    meant = [spark.sql(f"SELECT {literal} AS v").first()["v"] for literal in LITERALS]
    assert meant[0] == "it's" and meant[7] == "ab"  # the review's cases, as Spark reads them
    table = named(sql, warehouse, dict(enumerate(meant)) | {100: "its"})
    for i, literal in enumerate(LITERALS):
        assert sql(f"DELETE FROM q WHERE name = {literal}").first()[0] == 1, literal
        assert i not in names(table) and names(table)[100] == "its", literal
    for i, literal in enumerate(LITERALS):
        assert sql(f"INSERT INTO q VALUES ({i}, {literal})").first()[0] is not None
    assert names(table) == dict(enumerate(meant)) | {100: "its"}
    for i, literal in enumerate(LITERALS):
        answer = sql(f"UPDATE q SET (name) = ({literal} || '+') WHERE id = {i} AND name = {literal}")
        assert answer.first()[0] == 1, literal
    sql("UPDATE q SET name = 'it''s', id = id WHERE name = 'its'")
    assert names(table) == {i: value + "+" for i, value in enumerate(meant)} | {100: "it's"}
    columns = ", ".join(f"{literal} AS v{i}" for i, literal in enumerate(LITERALS))
    sql(f"CREATE TABLE c STORED AS metatxn AS SELECT {columns}")
    assert txn.open_table(str(warehouse / "c")).to_arrow().to_pylist() == [
        {f"v{i}": value for i, value in enumerate(meant)}]


# -- 2. pruning agrees with Spark's comparisons --------------------------------------------------

def test_a_literal_of_another_type_than_its_column_never_prunes() -> None:
    schema = pa.schema([("id", pa.int64()), ("small", pa.int16()), ("name", pa.string()),
                        ("ratio", pa.float32()), ("score", pa.float64()), ("price", pa.decimal128(10, 2)),
                        ("flag", pa.bool_()), ("day", pa.date32()),
                        ("at", pa.timestamp("us", tz="UTC")), ("local", pa.timestamp("us"))])
    for unknown in ["name = 5", "name IN ('a', 5)", "name BETWEEN 1 AND 9", "ratio > 0.1",
                    "ratio = 1e-1", "score > '1'", "id = '5'", "id = 5.0", "id < 1e3", "small = 1.5",
                    "price = 1e2", "flag = 1", "flag = 'true'", "day = 20200101", "day = '2020-1-2'",
                    "day >= TIMESTAMP '2020-01-01 00:00:00+00:00'", "at > DATE '2020-01-01'",
                    "at = '2020-01-01 00:00:00'", "local = TIMESTAMP '2020-01-01 00:00:00+00:00'",
                    "id = 5 OR name = 5", "NOT (ratio < 0.5)", "NOT (id = 1 AND name = 5)",
                    "small = 100000", "id = 5L"]:
        assert to_expression(unknown, schema) is None, unknown
    for known in ["id = 5", "id IN (1, 2)", "small <= 7", "name = 'it''s'", "score > 0.1", "score <= 2",
                  "score < 1e3", "ratio > 1", "price = 1.25", "price > 3", "flag = TRUE",
                  "day = DATE '2020-01-02'", "day >= '2020-01-02'", "id BETWEEN 1 AND 3 OR name IS NULL",
                  "at >= TIMESTAMP '2020-01-01 00:00:00+00:00'", "id = 5 AND name = 5"]:
        assert to_expression(known, schema) is not None, known


def test_update_delete_and_read_match_every_row_spark_matches(spark: Any, sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE s (id bigint, name string, ratio float) STORED AS metatxn")
    table = txn.open_table(str(warehouse / "s"))
    for i, (name, ratio) in enumerate([("05", 0.1), ("7", 0.7), ("5", 0.1)]):  # one file each
        table.append(pa.table({"id": pa.array([i], pa.int64()), "name": [name],
                               "ratio": pa.array([ratio], pa.float32())}))
    for predicate in ["name = 5", "ratio > 0.1", "ratio > 0.1 AND id < 5"]:
        expected = sql(f"SELECT count(*) FROM s WHERE {predicate}").first()[0]
        assert expected >= 1, predicate
        assert txn.spark.read(spark, table.uri, filter=predicate).count() == expected, predicate
    assert sql("UPDATE s SET id = id + 10 WHERE ratio > 0.1").first()[0] == 3
    assert sql("DELETE FROM s WHERE name = 5").first()[0] == 2
    assert sorted(r["id"] for r in txn.open_table(table.uri).to_arrow().to_pylist()) == [11]


# -- 3. NOT NULL columns -------------------------------------------------------------------------

def test_update_refuses_null_in_a_not_null_column(sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE nn (id bigint NOT NULL, name string) STORED AS metatxn")
    sql("INSERT INTO nn VALUES (1, 'a'), (2, NULL)")
    table = txn.open_table(str(warehouse / "nn"))
    refused(sql, table, "UPDATE nn SET id = NULL", txn.SchemaMismatchError, "'id'", "not nullable")
    refused(sql, table, "UPDATE nn SET (name, id) = ('x', CASE WHEN id = 2 THEN NULL ELSE id END)",
            txn.SchemaMismatchError, "'id'")
    assert sql("UPDATE nn SET id = id * 10, name = NULL WHERE id = 1").first()[0] == 1
    assert sorted(names(table).items()) == [(2, None), (10, None)]


# -- 4. INSERT ... BY NAME and REPLACE WHERE -----------------------------------------------------

def test_insert_by_name_matches_columns_by_name_and_replace_where_is_refused(sql: Any,
                                                                            warehouse: Path) -> None:
    sql("CREATE TABLE b (id bigint, name string, score double) STORED AS metatxn")
    table = txn.open_table(str(warehouse / "b"))
    assert sql("INSERT INTO b BY NAME SELECT 2.5 AS score, 'n' AS NAME, 9 AS id").first()[0] == "0"
    sql("INSERT INTO TABLE b BY NAME SELECT 'm' AS name, 7 AS id")
    assert sorted(txn.open_table(table.uri).to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 7, "name": "m", "score": None}, {"id": 9, "name": "n", "score": 2.5}]
    refused(sql, table, "INSERT INTO b REPLACE WHERE id = 9 SELECT 9, 'r', 0.0", txn.InvalidOptionError,
            "REPLACE WHERE is not supported", "Expected: INSERT")
    refused(sql, table, "INSERT INTO b BY NAME SELECT 1 AS id, 'x' AS nick", txn.InvalidOptionError,
            "['nick']")
    refused(sql, table, "INSERT INTO b BY NAME SELECT 1 AS id, 2 AS ID", txn.InvalidOptionError, "twice")


# -- 5. table names ------------------------------------------------------------------------------

def test_table_names_are_spark_identifiers_and_stay_inside_the_warehouse(sql: Any, warehouse: Path) -> None:
    catalog = Catalog("/w")
    assert catalog.name("`1abc`") == TableName("default", "1abc")
    for bad in ("`../escaped`", "`a/b`", "`odd-name`", "`my table`", "`a.b`", "`..`.t", "`.`"):
        with pytest.raises(txn.InvalidOptionError, match=r"\[A-Za-z0-9_\]\+"):
            catalog.name(bad)
    with pytest.raises(txn.InvalidOptionError):
        TableName("default", "../x")
    for bad in ("../escaped", "a/b", "odd-name", "my table", "a.b"):
        statement = f"CREATE TABLE `{bad}` (id bigint) STORED AS metatxn"
        with pytest.raises(txn.InvalidOptionError) as caught:
            sql(statement)
        assert repr(bad) in str(caught.value) and "[A-Za-z0-9_]+" in str(caught.value)
        assert repr(statement) in str(caught.value)
    with pytest.raises(txn.InvalidOptionError, match=r"'\.\.'"):
        sql("CREATE TABLE `..`.t STORED AS metatxn AS SELECT 1 AS id")
    with pytest.raises(txn.InvalidOptionError, match=r"'a/b'"):
        sql("SHOW SEGMENTS FOR TABLE `a/b`")
    assert not (warehouse.parent / "escaped").exists() and not warehouse.exists()
    # an accepted name works in every statement (views named after it included)
    sql("CREATE TABLE `1abc` (id bigint) STORED AS metatxn")
    assert sql("INSERT INTO `1abc` VALUES (1), (2)").first()[0] == "0"
    assert sql("SELECT count(*) FROM `1abc`").first()[0] == 2
    assert sql("DELETE FROM `1abc` WHERE id = 1").first()[0] == 1
    assert sql("UPDATE `1ABC` SET id = 3").first()[0] == 1
    assert [r[0] for r in sql("SELECT id FROM default.`1abc`").collect()] == [3]


# -- 6. Spark's runtime errors -------------------------------------------------------------------

def test_spark_runtime_errors_become_txn_errors_and_change_nothing(sql: Any, warehouse: Path,
                                                                   tmp_path: Path) -> None:
    table = named(sql, warehouse, {1: "a", 2: "b"})
    refused(sql, table, "UPDATE q SET name = CAST(1 / 0 AS string)", txn.InvalidOptionError,
            "DIVIDE_BY_ZERO")
    refused(sql, table, "DELETE FROM q WHERE 1 / (id - 1) > 0", txn.InvalidOptionError, "DIVIDE_BY_ZERO")
    refused(sql, table, "INSERT INTO q SELECT CAST(name AS BIGINT), 'x' FROM q", txn.InvalidOptionError,
            "CAST_INVALID_INPUT")
    # a string for a number column is refused before any cast (design/sql.md, values into columns)
    refused(sql, table, "INSERT INTO q VALUES ('abc', 'x')", txn.SchemaMismatchError, "'id'")
    refused(sql, table, "INSERT INTO q SELECT 1 / (id - 1), name FROM q", txn.InvalidOptionError,
            "DIVIDE_BY_ZERO")
    refused(sql, table, "INSERT INTO q SELECT assert_true(id > 5), 'x' FROM q", txn.InvalidOptionError)
    garbage = tmp_path / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all" * 10)
    refused(sql, table, f"LOAD DATA INPATH '{garbage}' INTO TABLE q", txn.InvalidOptionError)


# -- 7. CTAS is atomic ---------------------------------------------------------------------------

def test_a_failed_create_table_as_select_leaves_no_table(sql: Any, warehouse: Path) -> None:
    statement = "CREATE TABLE x STORED AS metatxn AS SELECT id, 1 / (id - 2) AS v FROM range(5)"
    with pytest.raises(txn.InvalidOptionError, match="DIVIDE_BY_ZERO") as caught:
        sql(statement)
    assert repr(statement) in str(caught.value)
    assert not (warehouse / "x").exists()
    keyed = ("CREATE TABLE k STORED AS metatxn TBLPROPERTIES('RECORD_KEY'='id') "
             "AS SELECT id % 2 AS id FROM range(4)")
    with pytest.raises(txn.DuplicateKeyError):
        sql(keyed)
    # Issue 27: the keys are checked on the files Spark wrote, after the write began; its
    # instant is rolled back and forgotten, and only the timeline lock's files stay, as after
    # any failed job on a new location: no table, and the name is free.
    with pytest.raises(txn.TableNotFoundError):
        txn.open_table(str(warehouse / "k"))
    sql(keyed.replace("id % 2 AS id", "id"))
    assert sorted(txn.open_table(str(warehouse / "k")).to_arrow()["id"].to_pylist()) == [0, 1, 2, 3]
    sql("CREATE TABLE x STORED AS metatxn AS SELECT 1 AS v")
    assert txn.open_table(str(warehouse / "x")).to_arrow().to_pylist() == [{"v": 1}]
    sql("CREATE TABLE e STORED AS metatxn AS SELECT 1 AS v WHERE false")  # no rows: the table only
    assert txn.open_table(str(warehouse / "e")).timeline() == []


# -- 8. CACHE TABLE ------------------------------------------------------------------------------

def test_cache_table_as_select_over_a_metatxn_table_stays_readable(spark: Any, sql: Any,
                                                                    warehouse: Path) -> None:
    table = named(sql, warehouse, {1: "a", 2: "b"})
    try:
        sql("CACHE TABLE cq AS SELECT * FROM q WHERE id > 1")
        assert sql("SELECT count(*) FROM cq").first()[0] == 1
        assert spark.sql("SELECT name FROM cq").first()[0] == "b"
    finally:
        spark.sql("UNCACHE TABLE IF EXISTS cq")
        spark.catalog.dropTempView("cq")
    refused(sql, table, "CACHE TABLE q", txn.InvalidOptionError, "CACHE TABLE name AS SELECT")


# -- 9. SHOW PARTITIONS --------------------------------------------------------------------------

def test_show_partitions_renders_and_matches_values_as_hive_folders(sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE pb (id bigint) STORED AS metatxn PARTITIONED BY (flag boolean)")
    sql("INSERT INTO pb VALUES (1, true), (2, false), (3, NULL)")
    shown = sorted(r[0] for r in sql("SHOW PARTITIONS pb").collect())
    assert shown == ["flag=__HIVE_DEFAULT_PARTITION__", "flag=false", "flag=true"]
    assert [r[0] for r in sql("SHOW PARTITIONS pb PARTITION (flag='true')").collect()] == ["flag=true"]
    assert [r[0] for r in sql("SHOW PARTITIONS pb PARTITION (flag='FALSE')").collect()] == ["flag=false"]
    sql("CREATE TABLE ps (id bigint, p string) STORED AS metatxn PARTITIONED BY (p)")
    odd = ["a/b", "x=y", "it's", "50%"]
    txn.open_table(str(warehouse / "ps")).append(pa.table({"id": pa.array(range(4), pa.int64()), "p": odd}))
    shown = sorted(r[0] for r in sql("SHOW PARTITIONS ps").collect())
    assert shown == sorted(f"p={hive_value(v)}" for v in odd) and "p=a%2Fb" in shown and "p=x%3Dy" in shown
    assert [r[0] for r in sql("SHOW PARTITIONS ps PARTITION (p='a/b')").collect()] == ["p=a%2Fb"]
    quoted = sql("SHOW PARTITIONS ps PARTITION (p='it''s')").collect()
    assert [r[0] for r in quoted] == [f"p={hive_value(odd[2])}"]
    table = txn.open_table(str(warehouse / "pb"))
    refused(sql, table, "SHOW PARTITIONS pb PARTITION (flag='maybe')", txn.InvalidOptionError, "'maybe'")


# -- 10 and 12. refused forms --------------------------------------------------------------------

def test_external_temporary_and_replaced_metatxn_tables_and_repeated_partitions_are_refused(
        sql: Any, warehouse: Path, tmp_path: Path) -> None:
    for statement in ["CREATE EXTERNAL TABLE e1 (id bigint) STORED AS carbondata",
                      "CREATE TEMPORARY TABLE e1 (id bigint) STORED AS metatxn",
                      "CREATE OR REPLACE TABLE e1 (id bigint) USING metatxn",
                      "CREATE GLOBAL TEMPORARY TABLE e1 (id bigint) USING carbondata"]:
        with pytest.raises(txn.InvalidOptionError) as caught:
            sql(statement)
        assert repr(statement) in str(caught.value) and "Expected: CREATE TABLE" in str(caught.value)
    assert not warehouse.exists()
    sql("CREATE TABLE logs (id bigint) STORED AS metatxn PARTITIONED BY (day int)")
    table = txn.open_table(str(warehouse / "logs"))
    (tmp_path / "one.csv").write_text("1\n")
    refused(sql, table, f"LOAD DATA INPATH '{tmp_path}/one.csv' INTO TABLE logs PARTITION (day='3', "
                        "DAY='4') OPTIONS('HEADER'='false')", txn.InvalidOptionError, "'day'", "twice")
    refused(sql, table, "SHOW PARTITIONS logs PARTITION (day='3', day='3')", txn.InvalidOptionError, "twice")


# -- 11. empty loads and inserts -----------------------------------------------------------------

def test_a_load_or_insert_of_no_rows_commits_nothing(sql: Any, warehouse: Path, tmp_path: Path) -> None:
    table = named(sql, warehouse, {1: "a"})
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("id,name\n")
    before = state(table)
    for statement in [f"LOAD DATA INPATH '{tmp_path}/empty.csv' INTO TABLE q OPTIONS('FILEHEADER'='id,name')",
                      f"LOAD DATA INPATH '{tmp_path}/header.csv' INTO TABLE q",
                      "INSERT INTO q SELECT * FROM q WHERE false"]:
        answer = sql(statement)
        assert answer.columns == ["Segment ID"] and answer.collect() == [], statement
    assert state(table) == before
    sql("INSERT OVERWRITE q SELECT * FROM q WHERE false")  # replacing with nothing is a change
    assert names(table) == {}


# -- terminators ---------------------------------------------------------------------------------

def test_a_trailing_semicolon_or_comment_ends_any_statement(sql: Any, warehouse: Path) -> None:
    table = named(sql, warehouse, {1: "a", 2: "b", 3: "c"})
    assert sql("DELETE FROM q WHERE id = 1; -- done").first()[0] == 1
    assert sql("UPDATE q SET name = 'x' -- why\n WHERE id = 2 -- only two\n;").first()[0] == 1
    assert len(sql("SHOW SEGMENTS FOR TABLE q ;\n").collect()) == 2  # the UPDATE added one
    assert len(sql("SHOW SEGMENTS FOR TABLE q -- all of them").collect()) == 2
    assert sql("INSERT INTO q VALUES (4, 'd'); /* four */").first()[0] == "2"
    assert sql("-- leading\nSELECT count(*) FROM q; -- trailing").first()[0] == 3
    assert names(table) == {2: "x", 3: "c", 4: "d"}
