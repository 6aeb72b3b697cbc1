"""``txn.spark.sql``: CarbonData's own UPDATE, CREATE TABLE and StreamSQL test cases where
metatxn did otherwise (issue 22, items 9 and 12), each modelled on the CarbonData test it comes
from.

Invariants:

* a column name Spark accepts in backticks is a column through CREATE TABLE, INSERT, SELECT and
  UPDATE; an error of CREATE TABLE always says why;
* ``UPDATE d SET (cols) = (SELECT ... FROM s WHERE <d's row>)`` changes the rows of ``d`` the
  subquery matches and leaves the others as they were (CarbonData's update from a source); a
  row it matches more than once is refused, with nothing written;
* CarbonData's bracketed SET list takes its values in brackets: ``SET (c2) = 194`` is refused;
* a value is stored only if the column's type holds it unchanged: UPDATE, INSERT and
  ``Table.update`` refuse 3.45, 2**40 and a string for an int column alike;
* a stream query joins its one stream source with metatxn tables read as static tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import txn
import txn.spark
from tests.spark.test_sql import refused, state
from txn.spark._sql import Catalog, TableName, catalog_of
from txn.spark._sql._stream_jobs import jobs

from .helpers import wait_for

pytestmark = pytest.mark.spark

#: CarbonData's IUD resources: dest.csv and source2.csv (UpdateCarbonTableTestCase).
DEST = [("a", 1, "aa", "aaa"), ("b", 2, "bb", "bbb"), ("c", 3, "cc", "ccc"), ("d", 4, "dd", "ddd"),
        ("e", 5, "ee", "eee")]
SOURCE2 = [("a", 1, "MGM", "Disco", 10), ("b", 2, "RGK", "Music", 8), ("c", 3, "cc", "ccc", 1),
           ("d", 4, "dd", "ddd", 1), ("e", 5, "ee", "eee", 1)]


def values(rows: list[tuple[Any, ...]]) -> str:
    return ", ".join("(" + ", ".join(repr(v) for v in row) + ")" for row in rows)


def dest(sql: Any, warehouse: Path, name: str = "dest") -> txn.Table:
    """CarbonData's ``iud.dest``, and ``iud.source2`` whose c11 'a' and 'b' carry new values."""
    sql(f"CREATE TABLE {name} (c1 string, c2 int, c3 string, c5 string) STORED AS carbondata")
    sql(f"INSERT INTO {name} VALUES {values(DEST)}")
    if not (warehouse / "source2").exists():
        sql("CREATE TABLE source2 (c11 string, c22 int, c33 string, c55 string, c66 int) "
            "STORED AS carbondata")
        # Only a and b differ from dest: CarbonData's source2.csv holds other rows too, which
        # match no row of dest.
        sql("INSERT INTO source2 VALUES ('a', 1, 'MGM', 'Disco', 10), ('b', 2, 'RGK', 'Music', 8), "
            "('x', 9, 'XX', 'XXX', 1)")
    return txn.open_table(str(warehouse / name))


def rows_of(sql: Any, query: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in sql(query).collect()]


# -- item 9: a backtick in a column name -----------------------------------------------------------

def test_a_backticked_column_name_works_through_create_insert_select_and_update(
        sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE t (a INT, `c``d` INT) STORED AS metatxn")
    table = txn.open_table(str(warehouse / "t"))
    assert table.schema.names == ["a", "c`d"]
    sql("INSERT INTO t VALUES (1, 10), (2, 20)")
    sql("INSERT INTO t (`c``d`, a) VALUES (30, 3)")
    assert rows_of(sql, "SELECT a, `c``d` FROM t ORDER BY a") == [(1, 10), (2, 20), (3, 30)]
    assert sql("UPDATE t SET (`c``d`) = (`c``d` + 1) WHERE `c``d` >= 20").first()[0] == 2
    assert sql("UPDATE t SET `c``d` = 0 WHERE a = 1").first()[0] == 1
    assert sql("DELETE FROM t WHERE `c``d` = 31").first()[0] == 1
    assert rows_of(sql, "SELECT a, `c``d` FROM t ORDER BY a") == [(1, 0), (2, 21)]
    assert table.validate().ok


def test_a_refused_create_table_always_says_why(sql: Any, warehouse: Path) -> None:
    for kind in ["DECIMAL(3, 5)", "MAP<INT>", "JSON", "DECIMAL(50, 2)"]:
        statement = f"CREATE TABLE u (a INT, b {kind}) STORED AS metatxn"
        with pytest.raises(txn.InvalidOptionError) as caught:
            sql(statement)
        message = str(caught.value)
        assert "Spark cannot read the column types (" in message and "()" not in message, message
        reason = message.split("Spark cannot read the column types (", 1)[1].split(")", 1)[0]
        assert reason.strip(), message
        assert not (warehouse / "u").exists()


# -- item 12: UPDATE from a source updates the rows it matches -------------------------------------

def test_update_from_a_source_changes_only_the_rows_it_matches(sql: Any, warehouse: Path) -> None:
    """UpdateCarbonTableTestCase: 'update carbon table[single column select from source with where
    and exist]', '...[select from source table with where and exist]' and '...[using source table
    columns with where and exist and no destination table condition]'."""
    table = dest(sql, warehouse, "dest55")
    answer = sql("update dest55 d set (c3)  = (select s.c33 from source2 s where d.c1 = s.c11) "
                 "where 1 = 1")
    assert answer.first()[0] == 2
    assert rows_of(sql, "select c1, c3 from dest55 order by c1") == [
        ("a", "MGM"), ("b", "RGK"), ("c", "cc"), ("d", "dd"), ("e", "ee")]
    assert table.validate().ok

    dest(sql, warehouse, "dest11")
    sql("update dest11 d set (d.c3, d.c5 ) = (select s.c33,s.c55 from source2 s where d.c1 = s.c11) "
        "where 1 = 1")
    assert sorted(rows_of(sql, "select c3, c5 from dest11")) == [
        ("MGM", "Disco"), ("RGK", "Music"), ("cc", "ccc"), ("dd", "ddd"), ("ee", "eee")]

    dest(sql, warehouse, "dest120")
    sql("update dest120 d  set (c3, c5 ) = (select s.c33 ,s.c55  from source2 s where d.c1 = s.c11)")
    assert sorted(rows_of(sql, "select c3, c5 from dest120")) == [
        ("MGM", "Disco"), ("RGK", "Music"), ("cc", "ccc"), ("dd", "ddd"), ("ee", "eee")]

    # 'update carbon table without alias in set three columns': the WHERE narrows the rows
    dest(sql, warehouse, "dest44")
    sql("update dest44 d set (c1,c3,c5 ) = (select s.c11, s.c33 ,s.c55  from source2 s "
        "where d.c1 = s.c11) where d.c1 = 'a'")
    assert rows_of(sql, "select c1, c3, c5 from dest44 where c1 = 'a'") == [("a", "MGM", "Disco")]
    assert rows_of(sql, "select count(*) from dest44 where c3 = 'RGK'") == [(0,)]

    # A subquery that does not refer to the target's row is one value, as CarbonData evaluates it:
    # no row sets NULL (on every row the WHERE matches), one row sets its value.
    sql("update dest44 set (c5) = (select c55 from source2 where c11 = 'none') where c1 = 'c'")
    sql("update dest44 set (c2, c5) = (select c22, c55 from source2 where c11 = 'x') where c1 = 'e'")
    assert rows_of(sql, "select c1, c2, c5 from dest44 where c1 in ('c', 'e') order by c1") == [
        ("c", 3, None), ("e", 9, "XXX")]


def test_update_from_a_source_matching_a_row_twice_is_refused(sql: Any, warehouse: Path) -> None:
    """CarbonData: 'update cannot be supported for 1 to N mapping, as more than one value present
    for the update key'; nothing is written."""
    table = dest(sql, warehouse)
    sql("INSERT INTO source2 VALUES ('b', 2, 'RGK2', 'Music2', 8)")
    for statement in [
        "UPDATE dest d SET (c3) = (SELECT s.c33 FROM source2 s WHERE d.c1 = s.c11)",
        "UPDATE dest d SET (c3, c5) = (SELECT s.c33, s.c55 FROM source2 s WHERE d.c1 = s.c11)",
        "UPDATE dest SET (c3) = (SELECT c33 FROM source2 WHERE c11 = 'b')",
    ]:
        message = refused(sql, table, statement, txn.InvalidOptionError)
        assert "more than one" in message and "row" in message, message
    # the WHERE leaves out the row matched twice: the others are updated
    assert sql("UPDATE dest d SET (c3) = (SELECT s.c33 FROM source2 s WHERE d.c1 = s.c11) "
               "WHERE d.c1 <> 'b'").first()[0] == 1


# -- item 12: CarbonData's SET list takes its values in brackets -----------------------------------

def test_a_bracketed_set_list_needs_its_values_in_brackets(sql: Any, warehouse: Path) -> None:
    """CarbonData refuses ``SET (c2) = 194`` ('Parsing error, missing bracket'); Spark's own
    ``SET c2 = 194`` stays metatxn's second form."""
    table = dest(sql, warehouse)
    for statement in ["UPDATE dest SET (c2) = 194", "UPDATE dest d SET (d.c2) = d.c2 + 1 WHERE c1 = 'a'",
                      "UPDATE dest SET (c2, c3) = 1, 'x'"]:
        message = refused(sql, table, statement, txn.InvalidOptionError, "Expected: UPDATE")
        assert "in brackets" in message, message
    message = refused(sql, table, "UPDATE dest SET (c2) = 194", txn.InvalidOptionError)
    assert "SET (c2) = (194)" in message, message
    # 'update carbon table-error[one set column with two updated column'
    refused(sql, table, "update dest  set c2 = (c2 + 1, concat(c5 , 'z') )", txn.InvalidOptionError)
    assert sql("UPDATE dest SET c2 = 194 WHERE c1 = 'a'").first()[0] == 1
    assert sql("UPDATE dest SET (c2) = (195) WHERE c1 = 'b'").first()[0] == 1
    assert rows_of(sql, "SELECT c2 FROM dest WHERE c1 IN ('a', 'b') ORDER BY c1") == [(194,), (195,)]


# -- item 12: a value that does not fit its column is refused --------------------------------------

NOT_FITTING = ["3.45", str(2**40), "'abc'", "'5'", "CAST(1e10 AS DOUBLE)"]


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_values_that_do_not_fit_an_int_column_are_refused_by_update_insert_and_the_api(
        spark: Any, sql: Any, warehouse: Path, ansi: str) -> None:
    """IUD 'update with BAD_RECORDS_ACTION=FAIL': ``SET (item) = (3.45)`` on an int column fails;
    so do a value out of range and a string, whatever ``spark.sql.ansi.enabled`` says."""
    table = dest(sql, warehouse)
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        for value in NOT_FITTING:
            message = refused(sql, table, f"UPDATE dest SET (c2) = ({value}) WHERE c1 = 'a'",
                              txn.SchemaMismatchError, "'c2'")
            assert "int" in message, message
            refused(sql, table, f"INSERT INTO dest VALUES ('z', {value}, 'x', 'y')",
                    txn.SchemaMismatchError, "'c2'")
            refused(sql, table, f"INSERT INTO dest (c2) SELECT {value}", txn.SchemaMismatchError)
        # the Python API agrees
        for python_value in [3.45, 2**40, "abc", "5", 1e10]:
            before_api = state(table)
            with pytest.raises(txn.SchemaMismatchError):
                table.update(None, {"c2": python_value})
            assert state(table) == before_api
        # values the column holds unchanged are stored, as through the API
        assert sql("UPDATE dest SET (c2) = (3.0) WHERE c1 = 'a'").first()[0] == 1
        assert sql("UPDATE dest SET (c2) = (CAST(7 AS BIGINT)) WHERE c1 = 'b'").first()[0] == 1
        assert sql("UPDATE dest SET (c2) = (CAST(3.45 AS INT)) WHERE c1 = 'c'").first()[0] == 1
        assert sql("UPDATE dest SET (c5) = (12.5) WHERE c1 = 'd'").first()[0] == 1
        sql("INSERT INTO dest VALUES ('z', 8.0, NULL, 5)")
        assert rows_of(sql, "SELECT c1, c2, c5 FROM dest ORDER BY c1") == [
            ("a", 3, "aaa"), ("b", 7, "bbb"), ("c", 3, "ccc"), ("d", 4, "12.5"), ("e", 5, "eee"),
            ("z", 8, "5")]
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)
    assert table.validate().ok


def test_dates_and_doubles_take_values_that_fit(sql: Any, warehouse: Path) -> None:
    """A date written as text, a number into a double column: stored; a time of day into a date
    column would be lost: refused."""
    sql("CREATE TABLE days (id int, day date, amount double, at timestamp) STORED AS metatxn")
    table = txn.open_table(str(warehouse / "days"))
    sql("INSERT INTO days VALUES (1, '2020-10-10', 10, '2020-10-10 01:02:03'), "
        "(2, '2021-01-01', 0.1, '2021-01-01 00:00:00')")
    sql("INSERT INTO days VALUES (3, DATE '2021-01-03', 1e300, TIMESTAMP '2021-01-03 00:00:00')")
    assert sql("UPDATE days SET (day, amount) = ('2022-02-02', 2.5) WHERE id = 2").first()[0] == 1
    refused(sql, table, "UPDATE days SET (day) = ('2022-02-02 10:00:00')", txn.SchemaMismatchError,
            "'day'")
    refused(sql, table, "UPDATE days SET (day) = ('not a day')", txn.SchemaMismatchError, "'day'")
    refused(sql, table, "UPDATE days SET (day) = (TIMESTAMP '2022-02-02 10:00:00')",
            txn.SchemaMismatchError, "'day'")
    # a float column rounds a double, but 1e300 would be infinite
    sql("CREATE TABLE ratios (r float) STORED AS metatxn")
    ratios = txn.open_table(str(warehouse / "ratios"))
    sql("INSERT INTO ratios VALUES (0.1), (CAST(2.5 AS DOUBLE))")
    refused(sql, ratios, "INSERT INTO ratios VALUES (1e300)", txn.SchemaMismatchError, "'r'")
    assert sorted(ratios.to_arrow()["r"].to_pylist()) == [pytest.approx(0.1), 2.5]
    rows = {r["id"]: r for r in table.to_arrow().to_pylist()}
    assert sorted(rows) == [1, 2, 3] and rows[3]["amount"] == 1e300
    assert str(rows[1]["day"]) == "2020-10-10" and rows[1]["amount"] == 10.0
    assert str(rows[2]["day"]) == "2022-02-02" and rows[2]["amount"] == 2.5


# -- item 12: a stream query joins a dimension table -----------------------------------------------

@pytest.fixture
def stream_warehouse(spark: Any, tmp_path: Path) -> Iterator[Catalog]:
    txn.spark.register(spark, warehouse=str(tmp_path / "warehouse"))
    yield catalog_of(spark)
    for job in jobs():
        txn.spark.sql(spark, f"DROP STREAM IF EXISTS {job.name}")


def test_a_stream_query_joins_its_source_with_a_dimension_table(
        spark: Any, stream_warehouse: Catalog, tmp_path: Path) -> None:
    """TestStreamingTableOpName: a stream of a source joined with a (non-stream) dimension table;
    the dimension table is read as a static table, only the source is streamed."""
    def sql(statement: str) -> Any:
        return txn.spark.sql(spark, statement)

    incoming = tmp_path / "incoming"
    incoming.mkdir()
    (incoming / "part-0.json").write_text(
        "\n".join(json.dumps({"id": i, "city": f"c{i % 3}"}) for i in range(6)))
    sql("CREATE TABLE sink (id int, city_name string) STORED AS carbondata "
        "TBLPROPERTIES('streaming'='true')")
    sql("CREATE TABLE dim (city string, city_name string) STORED AS carbondata")
    sql("INSERT INTO dim VALUES ('c0', 'Zero'), ('c1', 'One')")
    sql(f"CREATE TABLE source (id int, city string) STORED AS carbondata TBLPROPERTIES("
        f"'streaming'='source', 'format'='json', 'path'='{incoming}')")
    sql("CREATE STREAM joined ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', "
        "'interval'='1 seconds') AS SELECT s.id, d.city_name FROM source s JOIN dim d "
        "ON s.city = d.city")
    sink = stream_warehouse.open(TableName("default", "sink"))
    wait_for(lambda: sink.to_arrow().num_rows == 4, "the joined rows to reach the sink")
    sql("DROP STREAM joined")
    got = sorted((r["id"], r["city_name"]) for r in sink.to_arrow().to_pylist())
    assert got == [(0, "Zero"), (1, "One"), (3, "Zero"), (4, "One")]

    # two stream sources are still refused; a query of plain tables alone names no source
    sql(f"CREATE TABLE source_b (id int, city string) STORED AS carbondata TBLPROPERTIES("
        f"'streaming'='source', 'format'='json', 'path'='{incoming}')")
    for statement, message in [
        ("CREATE STREAM two ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', 'interval'="
         "'1 seconds') AS SELECT a.id, b.city FROM source a JOIN source_b b ON a.id = b.id",
         "Stream query on more than one stream source table is not supported"),
        ("CREATE STREAM none ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', 'interval'="
         "'1 seconds') AS SELECT 1 AS id, city_name FROM dim",
         "Table default.dim is not streaming source table"),
    ]:
        with pytest.raises(txn.InvalidOptionError, match=message):
            sql(statement)
    assert jobs() == []
