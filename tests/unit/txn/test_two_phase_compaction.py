"""The two-phase compaction (``Table.begin_compaction`` -> ``txn.PendingCompaction``): the round
``Table.compact`` runs, its rows rewritten by workers through ``txn.write_files`` (design/
protocol.md, "The two-phase form"; design/segments.md)."""

from __future__ import annotations

import collections
import pickle
from datetime import date
from typing import Any

import pyarrow as pa
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, rows, sorted_rows, states


def loads(uri: str, count: int, **layout: Any) -> txn.Table:
    table = txn.create_table(uri, SCHEMA, **layout)
    for n in range(count):
        table.append(rows(range(n * 10, (n + 1) * 10), day=date(2026, 1, 1 + n)))
    return table


def rewrite(pending: txn.PendingCompaction) -> list[txn.WrittenFiles]:
    """What workers do: each reads some source files with the pickled reader and writes them."""
    reader = pickle.loads(pickle.dumps(pending.file_reader()))
    ticket = pickle.loads(pickle.dumps(pending.ticket))
    return [txn.write_files(ticket, reader.read(f), task_id=n) for n, f in enumerate(pending.files())]


def multiset(table: pa.Table) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(r.values()) for r in table.to_pylist())


def test_a_two_phase_compaction_preserves_the_rows_and_marks_the_sources_compacted(table_uri: str) -> None:
    table = loads(table_uri, 4, record_key="id")
    table.delete(keys=[3, 14])
    before = multiset(table.to_arrow())

    pending = table.begin_compaction("minor")
    assert pending is not None
    with pending:
        assert (pending.kind, pending.target, pending.sources) == ("minor", "0.1", ["0", "1", "2", "3"])
        assert pending.rows == 38 and {f.segment for f in pending.files()} == {"0", "1", "2", "3"}
        commit = pending.commit(rewrite(pending))

    assert commit.operation == "compact" and commit.segment == "0.1"
    assert commit.rows_added == commit.rows_deleted == 38
    assert {s.id: (s.status, s.merged_to) for s in table.segments()} == {
        "0.1": ("Success", None), **{str(i): ("Compacted", "0.1") for i in range(4)}}
    assert multiset(table.to_arrow()) == before
    assert {f.segment for f in table.snapshot().files()} == {"0.1"}
    assert set(table.lookup([5, 25])["segment"].to_pylist()) == {"0.1"}
    assert table.lookup([3]).num_rows == 0
    assert table.validate().ok
    assert table.begin_compaction("minor") is None  # nothing left: as compact() returns None


def test_the_two_phase_round_is_the_one_compact_runs(tmp_path: Any) -> None:
    local = loads(str(tmp_path / "local"), 4)
    remote = loads(str(tmp_path / "remote"), 4)
    expected = local.compact("custom", segments=["1", "2"])
    with remote.begin_compaction("CUSTOM", segments=[1, 2]) as pending:
        assert pending is not None
        commit = pending.commit(rewrite(pending))
    assert expected is not None
    assert (commit.segment, commit.rows_added) == (expected.segment, expected.rows_added) == ("1.1", 20)
    assert sorted_rows(remote.to_arrow()) == sorted_rows(local.to_arrow())
    assert [(s.id, s.status) for s in remote.segments()] == [(s.id, s.status) for s in local.segments()]


def test_a_delete_of_a_source_row_meanwhile_wins(table_uri: str) -> None:
    table = loads(table_uri, 4, record_key="id")
    pending = table.begin_compaction()
    assert pending is not None
    reports = rewrite(pending)
    txn.open_table(table_uri).delete(keys=[3])
    with pytest.raises(txn.CommitConflictError, match="wins") as info, pending:
        pending.commit(reports)
    assert "compaction" in str(info.value) and "delete" in str(info.value)
    assert not any(s.id == "0.1" for s in table.segments()), "the compaction left nothing"
    assert table.timeline()[-1].action == "rollback"
    assert table.snapshot().count() == 39
    assert table.validate().ok


def test_a_count_that_is_not_the_sources_live_rows_is_refused(table_uri: str) -> None:
    table = loads(table_uri, 4)
    with table.begin_compaction() as pending, pytest.raises(txn.TxnError, match="wrote 10 rows"):
        assert pending is not None
        pending.commit([txn.write_files(pending.ticket, pending.file_reader().read(pending.files()[0]))])
    assert {s.status for s in table.segments()} == {"Success"} and table.snapshot().count() == 40


def test_abort_leaves_nothing(table_uri: str) -> None:
    table = loads(table_uri, 4)
    files = {f.path for f in table.snapshot().files()}
    with table.begin_compaction() as pending:
        assert pending is not None
        rewrite(pending)
        assert states(table)[-1] == ("compaction", "inflight")
    assert [(s.id, s.status) for s in table.segments()] == [(str(i), "Success") for i in (3, 2, 1, 0)]
    assert {f.path for f in table.snapshot().files()} == files
    assert states(table)[-1] == ("rollback", "completed")
    assert table.validate().ok
    with pytest.raises(txn.InvalidOptionError, match="committed or aborted already"):
        pending.commit([])
    assert table.compact() is not None  # the same round runs afterwards


def test_refusals_are_compact_s(table_uri: str) -> None:
    table = loads(table_uri, 3)
    assert table.begin_compaction("minor") is None
    with pytest.raises(txn.InvalidOptionError, match="not one of"):
        table.begin_compaction("sideways")
    with pytest.raises(txn.SegmentNotFoundError):
        table.begin_compaction("custom", segments=["7"])
    assert all(i.action != "compaction" for i in table.timeline())
