"""SQL UPDATE and DELETE on the public two-phase write: a compaction that completes while the
statement runs never fails it (planned again on the compacted table, as ``Table.update`` and
``Table.delete`` are); a write to the same rows meanwhile does (``CommitConflictError``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txn
import txn.spark

pytestmark = pytest.mark.spark


def four_loads(sql: Any, warehouse: Path, keyed: bool) -> txn.Table:
    key = " TBLPROPERTIES('RECORD_KEY'='id')" if keyed else ""
    sql(f"CREATE TABLE t (id bigint, v string) STORED AS metatxn{key}")
    for n in range(4):
        sql(f"INSERT INTO t VALUES ({2 * n}, 'a'), ({2 * n + 1}, 'b')")
    return txn.open_table(str(warehouse / "t"))


def once_before_the_commit(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> None:
    """Run ``action`` after the statement planned, before its first commit."""
    done: list[bool] = []
    begin = txn.Table.begin_write

    def begin_then_act(self: txn.Table, *args: Any, **kwargs: Any) -> txn.PendingWrite:
        if not done:
            done.append(True)
            action()
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(txn.Table, "begin_write", begin_then_act)


def rows(table: txn.Table) -> list[dict[str, Any]]:
    return sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("statement", ["UPDATE t SET v = 'z' WHERE id % 2 = 0",
                                       "DELETE FROM t WHERE id % 2 = 0"])
def test_a_compaction_meanwhile_makes_the_statement_plan_again(
        sql: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch, statement: str, keyed: bool) -> None:
    table = four_loads(sql, warehouse, keyed)
    once_before_the_commit(monkeypatch, lambda: txn.open_table(table.uri).compact("minor"))

    answer = sql(statement).first()

    assert answer[0] == 4
    actions = [i.action for i in table.timeline()]
    assert "compaction" in actions and "rollback" in actions, "the first plan lost, the second won"
    expected = [{"id": i, "v": "z" if i % 2 == 0 else "b"} for i in range(8)]
    if statement.startswith("DELETE"):
        expected = [r for r in expected if r["id"] % 2]
    assert rows(table) == expected
    if keyed:
        assert sorted(table.lookup(list(range(8)))["id"].to_pylist()) == [r["id"] for r in expected]
    assert table.validate().ok


def test_a_delete_of_the_same_rows_meanwhile_fails_the_update(
        sql: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = four_loads(sql, warehouse, keyed=False)
    once_before_the_commit(monkeypatch, lambda: txn.open_table(table.uri).delete(
        pa.compute.field("id") == 0))

    with pytest.raises(txn.CommitConflictError):
        sql("UPDATE t SET v = 'z' WHERE id % 2 = 0")

    assert [r["id"] for r in rows(table)] == list(range(1, 8))
    assert {r["v"] for r in rows(table)} == {"a", "b"}
    assert table.validate().ok
