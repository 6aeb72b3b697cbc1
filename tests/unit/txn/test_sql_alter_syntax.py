"""The grammar of ``txn.spark.sql``'s ALTER TABLE of a table's shape and properties, alone (no
Spark session, no table): every form reads as its change, every malformed statement is an
``InvalidOptionError`` quoting it and the form it should have had."""

from __future__ import annotations

import pytest

import txn
from txn.spark._sql._alter_syntax import (
    ADD_COLUMNS,
    ALTER_COLUMN,
    CHANGE,
    DROP_COLUMNS,
    RENAME_COLUMN,
    SET_PROPERTIES,
    UNSET_PROPERTIES,
    AddColumns,
    Alter,
    AlterColumn,
    ChangeColumn,
    DropColumns,
    NewColumn,
    RenameColumn,
    SetProperties,
    UnsetProperties,
    parse,
)
from txn.spark._sql._catalog import TableName

T = TableName("default", "t")


@pytest.mark.parametrize(("statement", "expected"), [
    ("ALTER TABLE t ADD COLUMNS (c int)", Alter(T, AddColumns((NewColumn("c", "int"),)))),
    ("alter table T add columns (Discount DECIMAL(15, 2) COMMENT 'off', tags array<string>)",
     Alter(T, AddColumns((NewColumn("discount", "DECIMAL(15, 2)", "off"),
                          NewColumn("tags", "array<string>"))))),
    ("ALTER TABLE sales.t ADD COLUMNS (m map<string, struct<a: int, b: string>>, n string)",
     Alter(TableName("sales", "t"), AddColumns((NewColumn("m", "map<string, struct<a: int, b: string>>"),
                                                NewColumn("n", "string"))))),
    ("ALTER TABLE t ADD COLUMN addr.country string AFTER addr.city",
     Alter(T, AddColumns((NewColumn("addr.country", "string", after="addr.city"),)))),
    ("ALTER TABLE t ADD COLUMNS (`c``d` timestamp NULL COMMENT 'it''s', e interval day to second)",
     Alter(T, AddColumns((NewColumn("c`d", "timestamp", "it's"), NewColumn("e", "interval day to second"))))),
    ("ALTER TABLE t ADD COLUMNS a int, b bigint", Alter(T, AddColumns((NewColumn("a", "int"),
                                                                      NewColumn("b", "bigint"))))),
    ("ALTER TABLE t DROP COLUMNS (a, b.c)", Alter(T, DropColumns(("a", "b.c")))),
    ("ALTER TABLE t DROP COLUMN a", Alter(T, DropColumns(("a",)))),
    ("ALTER TABLE t DROP COLUMNS IF EXISTS (A)", Alter(T, DropColumns(("A",), if_exists=True))),
    ("ALTER TABLE t CHANGE amt amt bigint", Alter(T, ChangeColumn("amt", "amt", "bigint"))),
    ("ALTER TABLE t CHANGE COLUMN Amt Total decimal(20,2) COMMENT 'sum'",
     Alter(T, ChangeColumn("Amt", "total", "decimal(20,2)", "sum"))),
    ("ALTER TABLE t CHANGE addr.city town string", Alter(T, ChangeColumn("addr.city", "town", "string"))),
    ("ALTER TABLE t CHANGE `type` `Type` int", Alter(T, ChangeColumn("type", "type", "int"))),
    ("ALTER TABLE t CHANGE c TYPE bigint", Alter(T, AlterColumn("c", type="bigint"))),
    ("ALTER TABLE t ALTER COLUMN Amt TYPE decimal(20, 2)",
     Alter(T, AlterColumn("Amt", type="decimal(20, 2)"))),
    ("ALTER TABLE t ALTER addr.zip DROP NOT NULL", Alter(T, AlterColumn("addr.zip", nullable=True))),
    ("ALTER TABLE t CHANGE COLUMN c DROP NOT NULL", Alter(T, AlterColumn("c", nullable=True))),
    ("ALTER TABLE t RENAME COLUMN a TO B", Alter(T, RenameColumn("a", "b"))),
    ("ALTER TABLE t RENAME COLUMN addr.city TO town", Alter(T, RenameColumn("addr.city", "town"))),
    ("ALTER TABLE t SET TBLPROPERTIES ('Clean.Retain_Hours'='24', 'AUTO_LOAD_MERGE'='true')",
     Alter(T, SetProperties({"clean.retain_hours": "24", "compaction.auto": "true"}))),
    ("ALTER TABLE t SET TBLPROPERTIES (clean.retain_hours = 24, compaction.auto = TRUE, x = -1, "
     "'streaming'='sink')",
     Alter(T, SetProperties({"clean.retain_hours": "24", "compaction.auto": "true", "x": "-1",
                             "streaming": "true"}))),
    ("ALTER TABLE t UNSET TBLPROPERTIES ('a', 'MAJOR_COMPACTION_SIZE')",
     Alter(T, UnsetProperties(("a", "compaction.major.size_mb")))),
    ("ALTER TABLE t UNSET TBLPROPERTIES IF EXISTS (a.b)", Alter(T, UnsetProperties(("a.b",), True))),
])
def test_each_form_reads_as_its_change(statement: str, expected: Alter) -> None:
    assert parse(statement) == expected


@pytest.mark.parametrize(("statement", "words"), [
    ("ALTER TABLE t RENAME TO u", ["RENAME TO is not supported", "is its folder"]),
    ("ALTER TABLE t SET LOCATION '/x'", ["expected TBLPROPERTIES", SET_PROPERTIES]),
    ("ALTER TABLE t RECOVER PARTITIONS", ["does not support this ALTER TABLE", "'RECOVER'", ADD_COLUMNS,
                                          UNSET_PROPERTIES]),
    ("ALTER TABLE t", ["does not support this ALTER TABLE", "the end of the statement"]),
    ("ALTER TABLE t ADD COLUMNS ()", ["expected a column name but found ')'", ADD_COLUMNS]),
    ("ALTER TABLE t ADD COLUMNS (c)", ["expected the type of column 'c'", ADD_COLUMNS]),
    ("ALTER TABLE t ADD COLUMNS (c int", ["expected ','", ADD_COLUMNS]),
    ("ALTER TABLE t ADD COLUMNS (c decimal(15, 2)", ["expected ','"]),
    ("ALTER TABLE t ADD COLUMNS (c array<int)", ["unclosed bracket: 'array<int'"]),
    ("ALTER TABLE t ADD COLUMNS (c struct<a: int>>)", ["expected ','"]),
    ("ALTER TABLE t ADD COLUMNS (c int, C string)", ["['c'] named twice"]),
    ("ALTER TABLE t ADD COLUMNS (c int NOT NULL)", ["cannot be NOT NULL", "reads as null"]),
    ("ALTER TABLE t ADD COLUMNS (c int DEFAULT 0)", ["default values are not supported"]),
    ("ALTER TABLE t ADD COLUMNS (c int FIRST)", ["FIRST is not supported"]),
    ("ALTER TABLE t ADD COLUMNS (c int COMMENT 'a' COMMENT 'b')", ["two comments"]),
    ("ALTER TABLE t ADD COLUMNS (c int COMMENT x)", ["the column comment as a quoted string"]),
    ("ALTER TABLE t ADD COLUMNS (c int) TBLPROPERTIES('DEFAULT.VALUE.c'='1')", ["default values"]),
    ("ALTER TABLE t ADD COLUMNS (`a.b` int)", ["holds a dot"]),
    ("ALTER TABLE t ADD SEGMENTS (c int)", ["expected COLUMNS or COLUMN but found 'SEGMENTS'"]),
    ("ALTER TABLE t DROP COLUMNS", ["expected a column name but found the end", DROP_COLUMNS]),
    ("ALTER TABLE t DROP COLUMNS (a, a)", ["['a'] named twice"]),
    ("ALTER TABLE t DROP COLUMNS (a b)", ["expected ','"]),
    ("ALTER TABLE t DROP PARTITION (p=1)", ["expected COLUMNS or COLUMN", DROP_COLUMNS]),
    ("ALTER TABLE t DROP COLUMNS IF (a)", ["expected EXISTS"]),
    ("ALTER TABLE t CHANGE a", ["expected the new column name but found the end", CHANGE]),
    ("ALTER TABLE t CHANGE a b", ["expected the type of column 'a'", CHANGE]),
    ("ALTER TABLE t CHANGE a x.b int", ["without its struct"]),
    ("ALTER TABLE t CHANGE a b int AFTER c", ["cannot move a column"]),
    ("ALTER TABLE t CHANGE a b int COMMENT 'x' extra", ["unexpected 'extra'"]),
    ("ALTER TABLE t ALTER COLUMN c", ["expected TYPE or DROP", ALTER_COLUMN]),
    ("ALTER TABLE t ALTER COLUMN c TYPE", ["expected the type of column 'c'", ALTER_COLUMN]),
    ("ALTER TABLE t ALTER COLUMN c SET NOT NULL", ["SET NOT NULL is not supported"]),
    ("ALTER TABLE t ALTER COLUMN c DROP DEFAULT", ["default values are not supported"]),
    ("ALTER TABLE t ALTER COLUMN c DROP NULL", ["expected NOT NULL after DROP"]),
    ("ALTER TABLE t ALTER COLUMN c COMMENT 'x'", ["a comment cannot be changed"]),
    ("ALTER TABLE t ALTER COLUMN c FIRST", ["cannot be moved"]),
    ("ALTER TABLE t CHANGE c TYPE int extra_words 'x'", ["unexpected"]),
    ("ALTER TABLE t RENAME COLUMN a b", ["expected TO but found 'b'", RENAME_COLUMN]),
    ("ALTER TABLE t RENAME COLUMN a TO", ["expected the new column name"]),
    ("ALTER TABLE t RENAME a TO b", ["expected COLUMN but found 'a'"]),
    ("ALTER TABLE t SET TBLPROPERTIES ()", ["expected a property key"]),
    ("ALTER TABLE t SET TBLPROPERTIES ('a')", ["expected '='"]),
    ("ALTER TABLE t SET TBLPROPERTIES ('a'=)", ["expected the value of property 'a'"]),
    ("ALTER TABLE t SET TBLPROPERTIES ('a'='1', 'A'='2')", ["'a' is given twice"]),
    ("ALTER TABLE t SET TBLPROPERTIES (''='1')", ["a property key is empty"]),
    ("ALTER TABLE t SET TBLPROPERTIES ('SORT_COLUMNS'='a')", ["SORT_COLUMNS is fixed when the table is "
                                                             "created"]),
    ("ALTER TABLE t UNSET TBLPROPERTIES ('record_key')", ["RECORD_KEY is fixed"]),
    ("ALTER TABLE t UNSET TBLPROPERTIES ('a'='1')", ["expected ','", UNSET_PROPERTIES]),
    ("ALTER TABLE t UNSET TBLPROPERTIES ('a', 'a')", ["['a'] named twice"]),
    ("ALTER TABLE t UNSET TBLPROPERTIES", ["expected '('"]),
])
def test_a_malformed_statement_is_refused_quoting_it_and_its_form(statement: str, words: list[str]) -> None:
    with pytest.raises(txn.InvalidOptionError) as caught:
        parse(statement)
    message = str(caught.value)
    assert isinstance(caught.value, txn.TxnError)
    assert repr(statement) in message, message
    assert "Expected: ALTER TABLE [db.]table" in message, message
    for word in words:
        assert word in message, (word, message)
