"""``txn.spark.sql``'s ALTER TABLE of a table's shape and properties (issue 24).

Invariants:

* each statement is one commit through the table's API (none when it changes nothing) and
  answers with an empty DataFrame, as CREATE TABLE;
* rows written before a change read through SQL with the new schema: an added column is null,
  a renamed column is read by its new name, a widened column with its new type;
* what the table cannot do safely (narrowing, dropping a record-key or partition column), a
  RENAME TO, an unset key that is not set and a type Spark cannot read are TxnErrors quoting
  the statement, the table left exactly as it was;
* an ALTER of a table that is not metatxn's is Spark's.

The tests that run the table's schema API are skipped until ``txn.Table`` has it.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txn
from tests.spark.test_sql import people, refused
from txn.spark._sql._alter import COMMENT, arrow_fields

pytestmark = pytest.mark.spark

needs_schema_api = pytest.mark.skipif(
    not hasattr(txn.Table, "add_columns"),
    reason="the table's schema evolution API (Table.add_columns, ...) is not merged yet")


def completed(table: txn.Table) -> int:
    return sum(1 for i in txn.open_table(table.uri).timeline() if i.state == "completed")


def names(table: txn.Table) -> list[str]:
    return txn.open_table(table.uri).schema.names


# -- what runs before the table's API --------------------------------------------------------------

def test_types_are_read_by_spark_as_create_table_reads_them(spark: Any) -> None:
    fields = arrow_fields("ALTER ...", "form", [
        ("a", "int"), ("b", "DECIMAL(15, 2)"), ("c", "array<string>"), ("d", "map<string, bigint>"),
        ("e", "struct<x: int, y: string>"), ("f", "varchar(20)"), ("g", "timestamp"),
        ("addr.country", "string")])
    assert [(f.name, str(f.type), f.nullable) for f in fields] == [
        ("a", "int32", True), ("b", "decimal128(15, 2)", True), ("c", "list<element: string>", True),
        ("d", "map<string, int64>", True), ("e", "struct<x: int32, y: string>", True),
        ("f", "string", True), ("g", "timestamp[us, tz=UTC]", True), ("addr.country", "string", True)]


def test_refusals_that_need_no_schema_change(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse)
    refused(sql, table, "ALTER TABLE people RENAME TO folks", txn.InvalidOptionError,
            "RENAME TO is not supported", "is its folder")
    refused(sql, table, "ALTER TABLE people SET LOCATION '/x'", txn.InvalidOptionError,
            "expected TBLPROPERTIES", "SET TBLPROPERTIES ('key'='value', ...)")
    refused(sql, table, "ALTER TABLE people ADD COLUMNS (c notatype)", txn.InvalidOptionError,
            "Spark cannot read the column types", "ADD COLUMNS (column type")
    refused(sql, table, "ALTER TABLE people CHANGE id id big int", txn.InvalidOptionError,
            "Spark cannot read the column types", "CHANGE [COLUMN]")
    refused(sql, table, "ALTER TABLE people ADD COLUMNS (c int NOT NULL)", txn.InvalidOptionError,
            "cannot be NOT NULL")
    refused(sql, table, "ALTER TABLE people UNSET TBLPROPERTIES ('owner', 'x')", txn.InvalidOptionError,
            "table property 'owner' is not set")
    before = completed(table)
    assert sql("ALTER TABLE people UNSET TBLPROPERTIES IF EXISTS ('owner')").collect() == []
    assert completed(table) == before


class _Recorder:
    """Stands for the table's schema API: records each call (and the builder's) as a tuple."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def method(self, name: str) -> Any:
        def call(table: Any, *args: Any, **kwargs: Any) -> None:
            self.calls.append((name, *args, *sorted(kwargs.items())))
        return call

    def update_schema(self) -> Any:
        recorder = self

        class Update:
            def __enter__(self) -> Any:
                recorder.calls.append(("update_schema",))
                return self

            def __exit__(self, *exc: Any) -> None:
                recorder.calls.append(("commit",))

            def __getattr__(self, name: str) -> Any:
                def call(*args: Any, **kwargs: Any) -> Any:
                    recorder.calls.append((f"u.{name}", *args, *sorted(kwargs.items())))
                    return self
                return call

        return Update()


def test_each_statement_calls_the_table_s_api(sql: Any, warehouse: Path, monkeypatch: Any) -> None:
    """The dispatch alone, the table's API recorded (it is the lead's: issue 24)."""
    # Made by the Python API, whose names keep their case: statements match them ignoring it.
    txn.create_table(str(warehouse / "t"), pa.schema([
        pa.field("id", pa.int64(), nullable=False), ("Amt", pa.int32()),
        ("addr", pa.struct([("City", pa.large_string())]))]),
        properties={"owner": "ops"})
    recorder = _Recorder()
    for name in ("add_columns", "drop_columns", "rename_column", "alter_column", "set_properties",
                 "unset_properties"):
        monkeypatch.setattr(txn.Table, name, recorder.method(name), raising=False)
    monkeypatch.setattr(txn.Table, "update_schema", lambda table: recorder.update_schema(), raising=False)
    comment = pa.field("c", pa.string()).with_metadata({COMMENT: b"x"})
    cases = [
        ("ALTER TABLE t ADD COLUMNS (c string COMMENT 'x', d bigint)",
         [("add_columns", [comment, pa.field("d", pa.int64())])]),
        ("ALTER TABLE t ADD COLUMNS (ADDR.country string, e int AFTER AMT)",
         [("update_schema",), ("u.add_column", pa.field("addr.country", pa.string()), ("after", None)),
          ("u.add_column", pa.field("e", pa.int32()), ("after", "Amt")), ("commit",)]),
        ("ALTER TABLE t DROP COLUMNS (amt, addr.city)", [("drop_columns", ["Amt", "addr.City"])]),
        ("ALTER TABLE t DROP COLUMNS IF EXISTS (ghost, AMT)", [("drop_columns", ["Amt"])]),
        ("ALTER TABLE t DROP COLUMNS IF EXISTS (ghost)", []),
        ("ALTER TABLE t RENAME COLUMN addr.city TO town", [("rename_column", "addr.City", "town")]),
        ("ALTER TABLE t CHANGE amt amt bigint", [("alter_column", "Amt", ("type", pa.int64()))]),
        ("ALTER TABLE t CHANGE amt total int", [("rename_column", "Amt", "total")]),
        ("ALTER TABLE t CHANGE amt amt int COMMENT 'same'", []),
        ("ALTER TABLE t CHANGE COLUMN amt total bigint",
         [("update_schema",), ("u.rename_column", "Amt", "total"),
          ("u.alter_column", "total", ("type", pa.int64())), ("commit",)]),
        ("ALTER TABLE t CHANGE addr.city town varchar(10)", [("rename_column", "addr.City", "town")]),
        ("ALTER TABLE t ALTER COLUMN amt TYPE bigint", [("alter_column", "Amt", ("type", pa.int64()))]),
        ("ALTER TABLE t CHANGE amt TYPE int", []),
        ("ALTER TABLE t ALTER ID DROP NOT NULL", [("alter_column", "id", ("nullable", True))]),
        ("ALTER TABLE t ALTER amt DROP NOT NULL", []),
        ("ALTER TABLE t SET TBLPROPERTIES ('A'='1', 'auto_load_merge'='false')",
         [("set_properties", {"a": "1", "compaction.auto": "false"})]),
        ("ALTER TABLE t UNSET TBLPROPERTIES ('owner')", [("unset_properties", ["owner"])]),
        ("ALTER TABLE t UNSET TBLPROPERTIES IF EXISTS ('owner', 'ghost')", [("unset_properties", ["owner"])]),
    ]
    for statement, calls in cases:
        recorder.calls.clear()
        answer = sql(statement)
        assert answer.columns == [] and answer.collect() == [], statement
        assert recorder.calls == calls, statement
    recorder.calls.clear()
    sql("ALTER TABLE t ADD COLUMNS (c string COMMENT 'x')")
    assert recorder.calls[0][1][0].metadata == {COMMENT: b"x"}  # == of fields ignores metadata


def test_an_alter_of_a_spark_table_is_spark_s(sql: Any) -> None:
    with pytest.raises(Exception) as caught:
        sql("ALTER TABLE ghost ADD COLUMNS (c int)")
    assert not isinstance(caught.value, txn.TxnError)


# -- through the table's schema API ----------------------------------------------------------------

@needs_schema_api
def test_add_columns_reads_null_in_old_rows(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse, rows=3)
    before = completed(table)
    answer = sql("ALTER TABLE people ADD COLUMNS (Discount decimal(15, 2) COMMENT 'off', "
                 "tags array<string>)")
    assert answer.columns == [] and answer.collect() == []
    assert completed(table) == before + 1
    schema = txn.open_table(table.uri).schema
    assert schema.names == ["id", "name", "score", "born", "discount", "tags"]
    assert schema.field("discount").type == pa.decimal128(15, 2) and schema.field("discount").nullable
    assert (schema.field("discount").metadata or {}).get(COMMENT) == b"off"
    rows = sql("SELECT id, discount, tags FROM people ORDER BY id").collect()
    assert [tuple(r) for r in rows] == [(0, None, None), (1, None, None), (2, None, None)]
    sql("INSERT INTO people VALUES (9, 'x', 1.0, date'2020-02-01', 2.50, array('a'))")
    assert [tuple(r) for r in sql("SELECT id, tags FROM people WHERE discount IS NOT NULL").collect()] \
        == [(9, ["a"])]


@needs_schema_api
def test_add_columns_after_a_column_and_into_a_struct(sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE t (id bigint, addr struct<city: string>, amt int) STORED AS metatxn")
    table = txn.open_table(str(warehouse / "t"))
    table.append(pa.table({"id": [1], "addr": [{"city": "Oslo"}], "amt": pa.array([5], pa.int32())}))
    before = completed(table)
    sql("ALTER TABLE t ADD COLUMNS (note string AFTER ID)")
    sql("ALTER TABLE t ADD COLUMNS (Addr.Country string)")
    assert completed(table) == before + 2
    schema = txn.open_table(table.uri).schema
    assert schema.names == ["id", "note", "addr", "amt"]
    assert schema.field("addr").type == pa.struct([("city", pa.string()), ("country", pa.string())])
    assert tuple(sql("SELECT id, note, addr.city, addr.country FROM t").first()) == (1, None, "Oslo", None)


@needs_schema_api
def test_drop_columns(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse, rows=2)
    sql("ALTER TABLE people DROP COLUMNS (Score, born)")
    assert names(table) == ["id", "name"]
    assert sql("SELECT * FROM people").columns == ["id", "name"]
    sql("ALTER TABLE people DROP COLUMN name")
    assert names(table) == ["id"]
    before = completed(table)
    sql("ALTER TABLE people DROP COLUMNS IF EXISTS (name, ghost)")
    assert completed(table) == before


@needs_schema_api
def test_rename_then_select_by_the_new_name(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse, rows=3)
    before = completed(table)
    sql("ALTER TABLE people RENAME COLUMN Name TO full_name")
    sql("ALTER TABLE people CHANGE score points double")  # same type: a rename only
    assert completed(table) == before + 2
    assert names(table) == ["id", "full_name", "points", "born"]
    rows = sql("SELECT id, full_name, points FROM people WHERE full_name <> 'n1' ORDER BY id").collect()
    assert [tuple(r) for r in rows] == [(0, "n0", 0.0), (2, "n2", 3.0)]


@needs_schema_api
def test_change_widens_and_renames_in_one_commit(sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE t (id bigint, amt int, qty int) STORED AS metatxn")
    table = txn.open_table(str(warehouse / "t"))
    table.append(pa.table({"id": [1, 2], "amt": pa.array([5, 6], pa.int32()),
                           "qty": pa.array([7, 8], pa.int32())}))
    before = completed(table)
    sql("ALTER TABLE t CHANGE amt amt bigint")
    sql("ALTER TABLE t CHANGE COLUMN qty quantity bigint")
    assert completed(table) == before + 2  # the second is a rename and a widening at once
    schema = txn.open_table(table.uri).schema
    assert [(f.name, f.type) for f in schema] == [("id", pa.int64()), ("amt", pa.int64()),
                                                  ("quantity", pa.int64())]
    assert [tuple(r) for r in sql("SELECT amt, quantity FROM t ORDER BY id").collect()] == [(5, 7), (6, 8)]
    sql("ALTER TABLE t CHANGE amt amt bigint COMMENT 'same'")  # restates the column: no commit
    assert completed(table) == before + 2


@needs_schema_api
def test_alter_column_widens_and_relaxes_not_null(sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE t (id bigint NOT NULL, score float) STORED AS metatxn")
    table = txn.open_table(str(warehouse / "t"))
    table.append(pa.table({"id": [1], "score": pa.array([1.5], pa.float32())}))
    sql("ALTER TABLE t ALTER COLUMN score TYPE double")
    sql("ALTER TABLE t ALTER COLUMN id DROP NOT NULL")
    schema = txn.open_table(table.uri).schema
    assert schema.field("score").type == pa.float64() and schema.field("id").nullable
    sql("INSERT INTO t VALUES (NULL, 2.25)")
    assert [tuple(r) for r in sql("SELECT id, score FROM t ORDER BY id NULLS FIRST").collect()] \
        == [(None, 2.25), (1, 1.5)]


@needs_schema_api
def test_set_and_unset_properties(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse, rows=1)
    before = completed(table)
    sql("ALTER TABLE people SET TBLPROPERTIES ('clean.retain_hours'='24', 'AUTO_LOAD_MERGE'='true', "
        "'Owner'='ops')")
    properties = txn.open_table(table.uri).properties
    assert properties["clean.retain_hours"] == "24"
    assert properties["compaction.auto"] == "true" and properties["owner"] == "ops"
    sql("ALTER TABLE people UNSET TBLPROPERTIES ('owner', 'clean.retain_hours')")
    properties = txn.open_table(table.uri).properties
    assert "owner" not in properties and "clean.retain_hours" not in properties
    assert completed(table) == before + 2
    refused(sql, table, "ALTER TABLE people UNSET TBLPROPERTIES ('owner')", txn.InvalidOptionError,
            "'owner' is not set")


@needs_schema_api
def test_what_the_table_cannot_do_safely_is_refused(sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE k (id bigint, amt bigint, day date) STORED AS metatxn PARTITIONED BY (region string) "
        "TBLPROPERTIES('RECORD_KEY'='id')")
    table = txn.open_table(str(warehouse / "k"))
    table.upsert(pa.table({"id": [1], "amt": [5], "day": [date(2020, 1, 1)], "region": ["eu"]}))
    refused(sql, table, "ALTER TABLE k DROP COLUMNS (id)", txn.TxnError, "'id'")
    refused(sql, table, "ALTER TABLE k DROP COLUMN region", txn.TxnError, "'region'")
    refused(sql, table, "ALTER TABLE k CHANGE amt amt int", txn.TxnError, "'amt'")
    refused(sql, table, "ALTER TABLE k CHANGE id id string", txn.TxnError, "'id'")
    refused(sql, table, "ALTER TABLE k ADD COLUMNS (amt int)", txn.TxnError, "'amt'")
    refused(sql, table, "ALTER TABLE k RENAME COLUMN ghost TO g", txn.TxnError, "'ghost'")
    refused(sql, table, "ALTER TABLE k SET TBLPROPERTIES ('record_index.shards'='8')", txn.TxnError,
            "record_index.shards")
