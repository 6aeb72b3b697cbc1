"""MERGE INTO through ``txn.spark.sql``: every clause kind in Spark's order, the first clause that
holds wins per row, one commit; the result is checked against a reference merge written out in
plain Python over the same rows. Refusals (a target row matched twice, bad statements, key rules)
leave the table as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest

import txn
import txn.spark
from tests.spark.test_sql_dml_replans import once_before_the_commit
from txn.spark._sql import _merge as merge_module

pytestmark = pytest.mark.spark

TARGET = [(1, "a", 10, "one"), (2, "a", 20, "two"), (3, "b", 30, "three"), (4, "b", 40, "four"),
          (5, "c", 50, "five"), (6, "c", None, "six")]
SOURCE = [(1, "a", 15, "x", "delete"), (2, "b", 25, "y", "star"), (3, "b", 60, "z", "add"),
          (4, "b", None, "w", "add"), (7, "a", 70, "s", "new"), (8, "c", None, "t", "new"),
          (9, "b", -9, "u", "new")]
COLUMNS = ["id", "part", "amt", "note"]

STATEMENT = """
MERGE INTO t AS tgt
USING (SELECT * FROM src WHERE id > 0) AS s
ON tgt.id = s.id
WHEN MATCHED AND s.op = 'delete' THEN DELETE
WHEN MATCHED AND s.op = 'star' THEN UPDATE SET *
WHEN MATCHED THEN UPDATE SET tgt.amt = tgt.amt + s.amt,
                             note = CASE WHEN s.amt > 50 THEN 'big' ELSE 'small' END
WHEN NOT MATCHED AND s.amt > 0 THEN INSERT *
WHEN NOT MATCHED BY TARGET THEN INSERT (id, part, note) VALUES (id, s.part, concat('it''s ', note))
WHEN NOT MATCHED BY SOURCE AND tgt.amt >= 50 THEN DELETE
WHEN NOT MATCHED BY SOURCE THEN UPDATE SET note = 'stale'
"""


def reference(target: list[tuple[Any, ...]], source: list[tuple[Any, ...]]) -> tuple[list[dict[str, Any]],
                                                                                     tuple[int, ...]]:
    """STATEMENT's merge written out row by row (NULL comparisons are not true, as in SQL; a NOT
    MATCHED clause's unqualified column is the source's, as Spark resolves it)."""
    by_id = {s[0]: s for s in source if s[0] > 0}
    out, updated, deleted, inserted = [], 0, 0, 0
    for id_, part, amt, _ in target:
        s = by_id.get(id_)
        if s is None:
            if amt is not None and amt >= 50:
                deleted += 1
                continue
            out.append((id_, part, amt, "stale"))
            updated += 1
        elif s[4] == "delete":
            deleted += 1
        elif s[4] == "star":
            out.append(s[:4])
            updated += 1
        else:
            new_amt = amt + s[2] if amt is not None and s[2] is not None else None
            out.append((id_, part, new_amt, "big" if s[2] is not None and s[2] > 50 else "small"))
            updated += 1
    for s in by_id.values():
        if s[0] in {r[0] for r in target}:
            continue
        out.append(s[:4] if s[2] is not None and s[2] > 0 else (s[0], s[1], None, f"it's {s[3]}"))
        inserted += 1
    rows = sorted((dict(zip(COLUMNS, r, strict=True)) for r in out), key=lambda r: r["id"])
    return rows, (updated + deleted + inserted, updated, deleted, inserted)


def table_rows(table: txn.Table) -> list[dict[str, Any]]:
    return sorted(table.to_arrow().select(COLUMNS).to_pylist(), key=lambda r: r["id"])


def make_tables(spark: Any, sql: Any, warehouse: Path, layout: str,
                target: list[tuple[Any, ...]] = TARGET, segments: int = 2) -> txn.Table:
    properties = {"plain": "", "keyed": " TBLPROPERTIES('RECORD_KEY'='id')",
                  "keyed, partitioned": " PARTITIONED BY (part) TBLPROPERTIES('RECORD_KEY'='id')"}[layout]
    columns = "id int, amt int, note string, part string" if "partitioned" in layout \
        else "id int, part string, amt int, note string"
    sql(f"CREATE TABLE t ({columns}) STORED AS metatxn{properties}")
    table = txn.open_table(str(warehouse / "t"))
    half = len(target) // segments
    for rows in (target[:half], target[half:]) if segments == 2 else (target,):
        frame = spark.createDataFrame(rows, "id int, part string, amt int, note string")
        txn.spark.write(frame.select(*table.schema.names), table.uri)
    spark.createDataFrame(SOURCE, "id int, part string, amt int, note string, op string") \
        .createOrReplaceTempView("src")
    return table


@pytest.mark.parametrize("layout", ["plain", "keyed, partitioned"])
def test_every_clause_kind_matches_the_reference(spark: Any, sql: Any, warehouse: Path, layout: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_tables(spark, sql, warehouse, layout)
    before = len(table.timeline())

    answer = sql(STATEMENT).first()

    expected, counts = reference(TARGET, SOURCE)
    assert tuple(answer) == counts
    assert table.timeline()[-1].action == "commit" and len(table.timeline()) == before + 1, "one commit"
    assert table.history(limit=1)[0].operation == "merge"
    assert table_rows(table) == expected
    assert table.validate().ok
    if layout != "plain":
        # Deleted keys left the record index (tombstoned); updated and inserted keys are found.
        live = [r["id"] for r in expected]
        assert sorted(table.lookup(list(range(1, 10)))["id"].to_pylist()) == live
        back = spark.createDataFrame([(1, "a", 1, "back")], "id int, part string, amt int, note string")
        txn.spark.write(back.select(*table.schema.names), table.uri)
        assert table.to_arrow(filter=pc.field("id") == 1)["note"].to_pylist() == ["back"]
        assert 1 not in live  # the MERGE deleted it
        expected.append({"id": 1, "part": "a", "amt": 1, "note": "back"})
        on_the_key_reads_only_the_files_holding_the_keys(sql, table, expected, monkeypatch)


def on_the_key_reads_only_the_files_holding_the_keys(sql: Any, table: txn.Table, rows: list[dict[str, Any]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An ON condition over the record key finds the target's rows through the record index: only
    the files holding the source's keys are read."""
    read: list[int] = []
    located = merge_module.located_rows

    def counting(spark: Any, snapshot: txn.Snapshot, pruning: Any, keep: Any = None) -> Any:
        read.append(sum(1 for f in snapshot.files() if keep is None or keep(f)))
        return located(spark, snapshot, pruning, keep)

    monkeypatch.setattr(merge_module, "located_rows", counting)
    answer = sql("MERGE INTO t USING (SELECT 3 AS id, 'e' AS note UNION ALL SELECT 11, 'k') AS s "
                 "ON t.id = s.id AND s.note <> 'x' WHEN MATCHED THEN UPDATE SET t.note = s.note "
                 "WHEN NOT MATCHED THEN INSERT (id, part, note) VALUES (s.id, 'c', s.note)").first()

    assert tuple(answer) == (2, 1, 0, 1)
    assert read == [1] and len(table.snapshot().files()) > 2, "the one file holding key 3"
    expected = {r["id"]: r["note"] for r in rows} | {3: "e", 11: "k"}
    assert {r["id"]: r["note"] for r in table_rows(table)} == expected


REFUSED = [
    ("MERGE INTO t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET nope = 1",
     txn.InvalidOptionError, "unknown column 'nope'"),
    ("MERGE INTO t USING src s ON t.id = s.id WHEN NOT MATCHED THEN INSERT * "
     "WHEN MATCHED THEN DELETE", txn.InvalidOptionError, "comes after"),
    ("MERGE INTO t USING src s ON t.id = s.id WHEN MATCHED THEN DELETE "
     "WHEN MATCHED AND s.amt > 1 THEN UPDATE SET amt = 1", txn.InvalidOptionError, "only the last"),
    ("MERGE INTO t USING src s ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id) VALUES (t.id)",
     txn.InvalidOptionError, "source's columns only"),
    ("MERGE INTO t USING src s ON t.id = s.id WHEN NOT MATCHED BY SOURCE THEN UPDATE SET amt = s.amt",
     txn.InvalidOptionError, "target's columns only"),
    ("MERGE INTO t USING src s ON t.id = s.id WHEN NOT MATCHED THEN UPDATE SET amt = 1",
     txn.InvalidOptionError, "takes INSERT"),
    ("MERGE INTO t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET id = s.id",
     txn.InvalidOptionError, "record key"),
    ("MERGE INTO t USING src s ON t.id = s.id WHEN NOT MATCHED THEN INSERT (id, amt) VALUES (s.id)",
     txn.InvalidOptionError, "VALUES gives 1"),
    ("MERGE INTO t USING src s ON t.id = s.id + 1 WHEN NOT MATCHED THEN INSERT *",
     txn.DuplicateKeyError, "4"),
    ("MERGE INTO t USING src s ON t.amt = s.amt + 5 WHEN MATCHED THEN UPDATE SET *",
     txn.InvalidOptionError, "change the record key"),
    ("MERGE INTO t USING src s ON t.id = s.id WHEN MATCHED THEN UPDATE SET amt = 'text'",
     txn.SchemaMismatchError, "not a number"),
    ("MERGE INTO t USING twice s ON t.id = s.id WHEN MATCHED THEN UPDATE SET amt = s.amt",
     txn.MergeCardinalityError, "MERGE_CARDINALITY_VIOLATION"),
    ("MERGE INTO missing USING src s ON missing.id = s.id WHEN MATCHED THEN DELETE",
     txn.TableNotFoundError, "missing"),
    ("MERGE INTO t USING (SELECT 1 AS id) ON t.id = 1 WHEN MATCHED THEN DELETE",
     txn.InvalidOptionError, "alias"),
]


def test_bad_statements_are_refused_and_change_nothing(spark: Any, sql: Any, warehouse: Path) -> None:
    table = make_tables(spark, sql, warehouse, "keyed", TARGET[:4], segments=1)
    spark.createDataFrame([(1, 5, "u"), (1, 6, "u"), (2, 7, "keep"), (2, 8, "u")],
                          "id int, amt int, op string").createOrReplaceTempView("twice")
    before = (table.timeline(), table_rows(table))

    for statement, error, words in REFUSED:
        with pytest.raises(error, match=words):
            sql(statement)
        assert (table.timeline(), table_rows(table)) == before, statement

    # A MATCHED clause that holds for one source row of a target row only is no repeat (Delta's
    # rule); an unconditional DELETE alone deletes a row matched twice once (Spark's and Delta's).
    answer = sql("MERGE INTO t USING twice s ON t.id = s.id "
                 "WHEN MATCHED AND s.op = 'u' AND s.id = 2 THEN UPDATE SET amt = s.amt").first()
    assert tuple(answer) == (1, 1, 0, 0)
    answer = sql("MERGE INTO t USING twice ON t.id = twice.id WHEN MATCHED THEN DELETE").first()
    assert tuple(answer) == (2, 0, 2, 0)
    assert [(r["id"], r["amt"]) for r in table_rows(table)] == [(3, 30), (4, 40)]
    # A metatxn table as the source, by name (read at its latest snapshot): here the target itself.
    answer = sql("MERGE INTO t USING t AS s ON t.id = s.id WHEN MATCHED THEN UPDATE SET note = s.note || '!'")
    assert tuple(answer.first()) == (2, 2, 0, 0)
    assert [r["note"] for r in table_rows(table)] == ["three!", "four!"]


def test_a_racing_commit_fails_the_merge_and_a_compaction_makes_it_plan_again(
        spark: Any, sql: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_tables(spark, sql, warehouse, "plain", TARGET[:4])
    merge = ("MERGE INTO t USING src s ON t.id = s.id WHEN MATCHED AND s.op <> 'delete' THEN "
             "UPDATE SET note = s.note WHEN NOT MATCHED AND s.id = 7 THEN INSERT *")
    with monkeypatch.context() as patch:
        once_before_the_commit(patch, lambda: txn.open_table(table.uri).delete(pc.field("id") == 2))
        with pytest.raises(txn.CommitConflictError):
            sql(merge)
    assert [r["id"] for r in table_rows(table)] == [1, 3, 4]

    once_before_the_commit(monkeypatch, lambda: txn.open_table(table.uri).compact("major"))
    answer = sql(merge).first()

    assert tuple(answer) == (3, 2, 0, 1)
    actions = [i.action for i in table.timeline()]
    assert "compaction" in actions and actions[-1] == "commit"
    assert table_rows(table) == [{"id": 1, "part": "a", "amt": 10, "note": "one"},
                                 {"id": 3, "part": "b", "amt": 30, "note": "z"},
                                 {"id": 4, "part": "b", "amt": 40, "note": "w"},
                                 {"id": 7, "part": "a", "amt": 70, "note": "s"}]
    assert table.validate().ok
