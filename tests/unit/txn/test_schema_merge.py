"""Writes that evolve the schema (``schema_mode="merge"``): the new version and the rows in one
instant; pandas and Arrow input; the two-phase form; losing to a concurrent schema change; a
write of the older version committing after a change; crashes leave the old version."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.conftest import FakeClock
from tests.faults import InjectedFault, injected
from tests.unit.txn.helpers import Faulty, storage_of, table_on
from txn._commit._writes import _base

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amt", pa.int32())])


def rows(ids: list[int], **more: pa.Array) -> pa.Table:
    columns: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "name": [f"n{i}" for i in ids],
                               "amt": pa.array(ids, pa.int32())}
    columns.update(more)
    return pa.table(columns)


@pytest.fixture
def table(tmp_path: Path) -> txn.Table:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows([1, 2]))
    return t


@pytest.fixture
def keyed(tmp_path: Path) -> txn.Table:
    t = txn.create_table(str(tmp_path / "k"), SCHEMA, record_key="id")
    t.append(rows([1, 2]))
    return t


def content(t: txn.Table) -> list[dict[str, Any]]:
    return sorted(txn.open_table(t.uri).to_arrow().to_pylist(), key=lambda r: r["id"])


def state(t: txn.Table) -> tuple[object, ...]:
    reopened = txn.open_table(t.uri)
    return (reopened.schema.to_string(show_field_metadata=True), content(t),
            len(reopened.schema_history()), [i.time for i in reopened.timeline() if i.is_completed])


def state_of(t: txn.Table) -> tuple[object, ...]:
    reopened = txn.open_table(t.uri)
    return (reopened.schema.to_string(show_field_metadata=True), reopened.to_arrow().to_pylist(),
            [i.time for i in reopened.timeline() if i.is_completed])


def test_append_with_a_new_column_is_one_commit_and_a_version(table: txn.Table) -> None:
    before = len(table.timeline())
    commit = table.append(rows([3], extra=pa.array(["x"])), schema_mode="merge")
    assert commit is not None and commit.schema_version == 1 and commit.rows_added == 1
    assert len(table.timeline()) == before + 1  # one instant: the version and the rows
    assert table.schema.names == ["id", "name", "amt", "extra"]
    assert content(table) == [{"id": 1, "name": "n1", "amt": 1, "extra": None},
                              {"id": 2, "name": "n2", "amt": 2, "extra": None},
                              {"id": 3, "name": "n3", "amt": 3, "extra": "x"}]
    history = table.schema_history()
    assert [v.version for v in history] == [0, 1]
    assert history[1].instant == commit.instant and history[1].changes == ("add column extra string",)
    snapshot = table.snapshot()
    assert {f.schema_id for f in snapshot.files()} == {0, 1}
    # Nothing to merge: a plain write, no version.
    again = table.append(rows([4], extra=pa.array(["y"])), schema_mode="merge")
    assert again is not None and again.schema_version is None
    assert len(table.schema_history()) == 2


def test_merge_adds_a_nested_struct_field(tmp_path: Path) -> None:
    address = pa.struct([("city", pa.string())])
    t = txn.create_table(str(tmp_path / "n"), pa.schema([("id", pa.int64()), ("addr", address)]))
    t.append(pa.table({"id": [1], "addr": [{"city": "a"}]}, schema=t.schema.remove_metadata()))
    wider = pa.struct([("city", pa.string()), ("zip", pa.int32())])
    commit = t.append(pa.table({"id": [2], "addr": pa.array([{"city": "b", "zip": 7}], wider)}),
                      schema_mode="merge")
    assert commit is not None and commit.schema_version == 1
    assert t.schema.field("addr").type.field("zip").type == pa.int32()
    assert content(t) == [{"id": 1, "addr": {"city": "a", "zip": None}},
                          {"id": 2, "addr": {"city": "b", "zip": 7}}]


def test_an_arrow_int64_column_widens_an_int32_one(table: txn.Table) -> None:
    commit = table.append(rows([3], amt=pa.array([3], pa.int64())), schema_mode="merge")
    assert commit is not None and commit.schema_version == 1
    assert table.schema.field("amt").type == pa.int64()
    assert table.schema_history()[1].changes == ("alter column amt type int64",)
    assert [r["amt"] for r in content(table)] == [1, 2, 3]


def test_pandas_int64_fits_an_int32_column_without_widening(table: txn.Table) -> None:
    frame = pd.DataFrame({"id": [3], "name": ["n3"], "amt": [3], "extra": [1.5]})
    assert frame["amt"].dtype == "int64"
    commit = table.append(frame, schema_mode="merge")
    assert commit is not None and commit.schema_version == 1
    assert table.schema.field("amt").type == pa.int32()  # pandas' default dtype declares nothing
    assert table.schema_history()[1].changes == ("add column extra double",)
    # A value the int32 column cannot hold: the column is widened.
    big = pd.DataFrame({"id": [4], "name": ["n4"], "amt": [2**40], "extra": [None]})
    commit = table.append(big, schema_mode="merge")
    assert commit is not None and commit.schema_version == 2
    assert table.schema.field("amt").type == pa.int64()
    assert [r["amt"] for r in content(table)] == [1, 2, 3, 2**40]


def test_without_merge_the_messages_are_todays_and_the_table_unchanged(table: txn.Table) -> None:
    before = state(table)
    with pytest.raises(txn.SchemaMismatchError, match=r"the data has column\(s\) \['extra'\]"):
        table.append(rows([3], extra=pa.array(["x"])))
    with pytest.raises(txn.SchemaMismatchError, match="2147483648 does not fit"):
        table.append(pd.DataFrame({"id": [3], "name": ["n3"], "amt": [2**31]}))
    with pytest.raises(txn.SchemaMismatchError, match="2147483648 does not fit"):
        table.append(rows([3], amt=pa.array([2**31], pa.int64())))
    with pytest.raises(txn.InvalidOptionError, match=r"schema_mode must be one of \[None, 'merge'\]"):
        table.append(rows([3]), schema_mode="overwrite")
    assert state(table) == before


def test_merge_never_changes_a_key_column(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "k32"), pa.schema([("k", pa.int32()), ("v", pa.string())]),
                         record_key="k")
    t.append(pa.table({"k": pa.array([1], pa.int32()), "v": ["a"]}))
    # A wider key type is left to the input check: values that fit are taken (as without
    # merge), one that does not is refused, and the key's type stays.
    assert t.upsert(pa.table({"k": pa.array([2], pa.int64()), "v": ["b"]}),
                    schema_mode="merge").schema_version is None
    before = state_of(t)
    with pytest.raises(txn.SchemaMismatchError, match="'k'"):
        t.upsert(pa.table({"k": pa.array([2 ** 40], pa.int64()), "v": ["c"]}), schema_mode="merge")
    assert state_of(t) == before and t.schema.field("k").type == pa.int32()


def test_overwrite_with_merge(table: txn.Table) -> None:
    commit = table.overwrite(rows([7], extra=pa.array([True])), schema_mode="merge")
    assert commit is not None and commit.schema_version == 1
    assert content(table) == [{"id": 7, "name": "n7", "amt": 7, "extra": True}]


def test_upsert_with_merge(keyed: txn.Table) -> None:
    commit = keyed.upsert(rows([2, 3], extra=pa.array(["b", "c"])), schema_mode="merge")
    assert commit is not None and commit.schema_version == 1 and commit.rows_deleted == 1
    assert content(keyed) == [{"id": 1, "name": "n1", "amt": 1, "extra": None},
                              {"id": 2, "name": "n2", "amt": 2, "extra": "b"},
                              {"id": 3, "name": "n3", "amt": 3, "extra": "c"}]
    assert keyed.lookup([3])["file"].to_pylist()  # the record index has the new row


def test_a_transaction_refuses_merge(keyed: txn.Table) -> None:
    before = state(keyed)
    with pytest.raises(txn.InvalidOptionError, match=r"update_schema\(\)"), keyed.transaction() as tx:
        tx.append(rows([5], extra=pa.array(["x"])), schema_mode="merge")
    with pytest.raises(txn.InvalidOptionError, match="schema_mode must be one of"), \
            keyed.transaction() as tx:
        tx.upsert(rows([5]), schema_mode="evolve")
    assert state(keyed) == before


def test_begin_write_with_merge_through_write_files(table: txn.Table) -> None:
    data = rows([3, 4], extra=pa.array(["c", "d"]))
    with table.begin_write("append", schema_mode="merge", data_schema=data.schema) as pending:
        ticket = pickle.loads(pickle.dumps(pending.ticket))
        assert "extra" in ticket.table_schema.names and ticket.schema_id == 1
        assert table.schema.names == ["id", "name", "amt"]  # nothing exists before the commit
        report = txn.write_files(ticket, data, task_id=0)
        commit = pending.commit([report])
    assert commit is not None and commit.schema_version == 1
    assert table.schema.names == ["id", "name", "amt", "extra"]
    assert [r["extra"] for r in content(table)] == [None, None, "c", "d"]
    with pytest.raises(txn.InvalidOptionError, match="data_schema"):
        table.begin_write("append", schema_mode="merge")
    with pytest.raises(txn.InvalidOptionError, match="append, overwrite or upsert"):
        table.begin_write("delete", schema_mode="merge", data_schema=data.schema)


def test_begin_write_with_merge_loses_to_a_change_committed_meanwhile(table: txn.Table) -> None:
    data = rows([3], extra=pa.array(["c"]))
    before = state(table)
    pending = table.begin_write("append", schema_mode="merge", data_schema=data.schema)
    report = txn.write_files(pending.ticket, data, task_id=0)
    other = txn.open_table(table.uri)
    change = other.add_columns([pa.field("note", pa.string())])
    with pytest.raises(txn.SchemaChangedError, match=change.instant) as info:
        pending.commit([report])
    assert isinstance(info.value, txn.CommitConflictError) and pending.retryable(info.value)
    after = state(table)
    assert after[1] == [{**r, "note": None} for r in before[1]]  # only the other change landed
    assert after[2] == 2
    # Begun again, it merges into the new version.
    with table.begin_write("append", schema_mode="merge", data_schema=data.schema) as again:
        commit = again.commit([txn.write_files(again.ticket, data, task_id=0)])
    assert commit is not None and commit.schema_version == 2
    assert table.schema.names == ["id", "name", "amt", "note", "extra"]


def _during_write_phase(monkeypatch: pytest.MonkeyPatch, action: Callable[[], object]) -> None:
    """Run ``action`` once, inside the next write phase (after begin, before the commit)."""
    real = _base.write_phase
    done: list[bool] = []

    def write_phase(context: Any, pending: Any, write: Any) -> Any:
        if not done:
            done.append(True)
            action()
        return real(context, pending, write)

    monkeypatch.setattr(_base, "write_phase", write_phase)


def test_a_merge_loses_to_a_concurrent_add_columns(monkeypatch: pytest.MonkeyPatch,
                                                   table: txn.Table) -> None:
    before = state(table)
    other = txn.open_table(table.uri)
    changes: list[txn.Commit] = []
    _during_write_phase(monkeypatch, lambda: changes.append(other.add_columns([pa.field("note", pa.int8())])))
    with pytest.raises(txn.SchemaChangedError, match=r"instant\(s\) \['\d+'\]") as info:
        table.overwrite(rows([9], extra=pa.array(["x"])), schema_mode="merge")
    assert changes[0].instant in str(info.value)
    assert content(table) == [{**r, "note": None} for r in before[1]]
    assert [v.version for v in txn.open_table(table.uri).schema_history()] == [0, 1]
    commit = table.overwrite(rows([9], extra=pa.array(["x"])), schema_mode="merge")  # a retry
    assert commit is not None and commit.schema_version == 2
    assert content(table) == [{"id": 9, "name": "n9", "amt": 9, "note": None, "extra": "x"}]


def test_a_keyed_merge_is_planned_again_after_losing(monkeypatch: pytest.MonkeyPatch,
                                                     keyed: txn.Table) -> None:
    monkeypatch.setattr(_base, "SMALL_WRITE_BYTES", -1)  # the write phase outside the lock
    other = txn.open_table(keyed.uri)
    _during_write_phase(monkeypatch, lambda: other.add_columns([pa.field("note", pa.int8())]))
    commit = keyed.upsert(rows([2, 3], extra=pa.array(["b", "c"])), schema_mode="merge")
    assert commit is not None and commit.retries == 1 and commit.schema_version == 2
    assert keyed.schema.names == ["id", "name", "amt", "note", "extra"]
    assert [r["extra"] for r in content(keyed)] == [None, "b", "c"]


def test_a_plain_write_begun_before_an_alter_commits_after_it(monkeypatch: pytest.MonkeyPatch,
                                                              table: txn.Table) -> None:
    # The same handle adopts the new version while the write runs: the write keeps the
    # schema it conformed its rows to.
    _during_write_phase(monkeypatch, lambda: (table.add_columns([pa.field("note", pa.string())]),
                                              table.rename_column("name", "label")))
    commit = table.overwrite(rows([5, 6]))
    assert commit is not None and commit.schema_version is None
    assert table.schema.names == ["id", "label", "amt", "note"]
    assert content(table) == [{"id": 5, "label": "n5", "amt": 5, "note": None},
                              {"id": 6, "label": "n6", "amt": 6, "note": None}]
    assert {f.schema_id for f in table.snapshot().files()} == {0}


def test_a_two_phase_write_begun_before_an_alter_commits_after_it(table: txn.Table) -> None:
    with table.begin_write("append") as pending:
        table.add_columns([pa.field("note", pa.string())])
        table.rename_column("name", "label")
        commit = pending.commit([txn.write_files(pending.ticket, rows([3]), task_id=0)])
    assert commit is not None
    assert [(r["label"], r["note"]) for r in content(table)] == [("n1", None), ("n2", None), ("n3", None)]
    # Its statistics are keyed by the ids of the schema its files were written with: a filter
    # on the renamed column prunes its file.
    def new_files(where: Any) -> list[int]:
        return [f.schema_id for f in table.snapshot().files(where) if commit.instant in f.path]
    assert new_files(pc.field("label") == "n3") == [0]
    assert new_files(pc.field("label") == "zz") == []


WRITES = frozenset({"put_if_absent", "put", "delete"})


def test_a_crash_at_every_write_of_a_merge_leaves_the_old_version_or_the_new(memory_uri: str) -> None:
    outcomes = {"before": 0, "after": 0}
    for n in range(1, 200):
        uri, clock = f"{memory_uri}/crash{n}", FakeClock()
        txn.create_table(uri, SCHEMA, record_key="id", clock=clock).append(rows([1, 2]))
        faulty = Faulty(storage_of(uri))
        faulty.arm(n, ops=WRITES, crash=True)
        try:
            table_on(uri, faulty, clock=clock).upsert(rows([2, 3], extra=pa.array(["b", "c"])),
                                                      schema_mode="merge")
        except Exception as exc:
            assert isinstance(exc, InjectedFault) or injected(exc) is not None, exc
        if not faulty.fired:
            break
        clock.advance(10 * 60_000)
        survivor = txn.open_table(uri, clock=clock)
        survivor.append(rows([10]), schema_mode="merge")  # recovers the dead writer's instant first
        reopened = txn.open_table(uri, clock=clock)
        found = {r["id"]: r for r in reopened.to_arrow().to_pylist()}
        if "extra" in reopened.schema.names:
            outcomes["after"] += 1
            assert [v.version for v in reopened.schema_history()] == [0, 1]
            assert (found[2]["extra"], found[3]["extra"], found[1]["extra"]) == ("b", "c", None)
        else:
            outcomes["before"] += 1
            assert [v.version for v in reopened.schema_history()] == [0]
            assert sorted(found) == [1, 2, 10]
    else:
        raise AssertionError("the merge never committed untouched")
    assert outcomes["before"] and outcomes["after"]


def test_merge_streams_a_reader_and_fills_a_nullable_column_the_data_lacks(table: txn.Table) -> None:
    data = pa.table({"id": pa.array([3], pa.int64()), "amt": pa.array([3], pa.int32()),
                     "extra": ["c"]})
    with pytest.raises(txn.SchemaMismatchError, match="the data lacks table column"):
        table.append(data.drop_columns(["extra"]))
    commit = table.append(pa.RecordBatchReader.from_batches(data.schema, data.to_batches()),
                          schema_mode="merge")
    assert commit is not None and commit.schema_version == 1
    assert content(table)[-1] == {"id": 3, "name": None, "amt": 3, "extra": "c"}


def test_merge_leaves_key_and_partition_types_to_the_input_check(tmp_path: Path) -> None:
    """A wider key in the data is not a widening merge makes (a key's type never changes): the
    values that fit are taken, as without merge."""
    schema = pa.schema([("id", pa.int32()), ("g", pa.int32()), ("v", pa.string())])
    t = txn.create_table(str(tmp_path / "k"), schema, record_key="id", partition_by=["g"])
    data = pa.table({"id": pa.array([1], pa.int64()), "g": pa.array([2], pa.int64()), "v": ["a"]})
    assert t.append(data, schema_mode="merge").schema_version is None
    assert t.schema.field("id").type == pa.int32() and t.to_arrow().num_rows == 1


def test_merge_refuses_a_new_column_with_no_type(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    t = txn.create_table(str(tmp_path / "n"), pa.schema([("id", pa.int64())]))
    before = t.schema_history()
    with pytest.raises(txn.SchemaEvolutionError, match="'c' is new and holds only nulls"):
        t.append(pd.DataFrame({"id": [1], "c": [None]}), schema_mode="merge")
    assert t.schema_history() == before and t.to_arrow().num_rows == 0
