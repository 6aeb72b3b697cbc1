"""The two-phase write for distributed writers, without Spark.

The driver begins a write (``Table.begin_write``) and hands its picklable ticket to workers,
here threads and a subprocess, each writing with a ticket that went through pickle
(``txn.write_files``); the driver commits their reports once. Invariants:

* the commit is one instant holding every reported file, and nothing else: files of attempts no
  report names are deleted first; an aborted or failed write leaves no data file, marker or
  index log behind, and the table reads as before;
* on a keyed table the workers look their keys up in the snapshot read: an append refuses
  existing keys, an upsert's commit deletes their rows (one live row per key);
* conflicts are checked against every commit completed after ``read_instant``;
* ``commit_properties``' ``app_id``/``version`` commit once.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, data_files_on_storage, relative, rows, sorted_rows, states


def _pickled(value: Any) -> Any:
    return pickle.loads(pickle.dumps(value))


def _in_threads(ticket: txn.WriteTicket, parts: list[pa.Table]) -> list[txn.WrittenFiles]:
    """Each part written by a thread of its own, with its own pickled copy of the ticket."""
    reports: list[Any] = [None] * len(parts)
    errors: list[BaseException] = []

    def work(task: int) -> None:
        try:
            reports[task] = _pickled(txn.write_files(_pickled(ticket), parts[task], task_id=task))
        except BaseException as exc:  # handed to the driver, as a cluster would
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(task,)) for task in range(len(parts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return reports


def _leftovers(uri: str) -> tuple[list[str], list[str], list[str]]:
    root = Path(uri)
    return (data_files_on_storage(uri), sorted(p.name for p in (root / "_markers").glob("*")),
            sorted(p.name for p in (root / "_metadata" / "record_index").glob("*.log.arrow")))


def test_workers_in_threads_write_and_the_driver_commits_once(tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["region"])
    table.append(rows(range(10)))
    with table.begin_write() as pending:
        reports = _in_threads(pending.ticket, [rows(range(100, 150), region=r) for r in ("eu", "us", "ap")])
        commit = pending.commit(reports)
    assert commit is not None and commit.operation == "append" and commit.rows_added == 150
    assert sorted(commit.paths_added) == sorted(p for r in reports for p in r.paths)
    expected = [*rows(range(10)).to_pylist(), *[
        r for region in ("eu", "us", "ap") for r in rows(range(100, 150), region=region).to_pylist()]]

    def order(r: dict[str, Any]) -> tuple[int, str]:
        return r["id"], r["region"]
    assert sorted(table.to_arrow().to_pylist(), key=order) == sorted(expected, key=order)
    assert [i.state for i in table.timeline()] == ["completed", "completed"]
    assert table.validate().ok


def test_a_worker_in_another_process(tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id")
    table.append(rows(range(5)))
    script = ("import pickle, sys, txn\n"
              "ticket, data = pickle.load(sys.stdin.buffer)\n"
              "sys.stdout.buffer.write(pickle.dumps(txn.write_files(ticket, data, task_id=(3, 1))))\n")
    with table.begin_write("upsert") as pending:
        done = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                              input=pickle.dumps((pending.ticket, rows(range(3, 8)))),
                              env={"PYTHONPATH": str(Path(txn.__file__).parent.parent)})
        report = pickle.loads(done.stdout)
        commit = pending.commit([report])
    assert commit is not None and (commit.rows_added, commit.rows_deleted) == (5, 2)
    assert sorted_rows(table.to_arrow()) == rows(range(8)).to_pylist()
    assert table.lookup(list(range(8))).num_rows == 8
    assert table.validate().ok


def test_an_exception_aborts_and_leaves_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = txn.create_table(uri, SCHEMA, record_key="id", properties={"record_index.shards": "2"})
    table.append(rows(range(10)))
    before, visible = _leftovers(uri), sorted_rows(table.to_arrow())
    with pytest.raises(RuntimeError, match="driver failed"), table.begin_write() as pending:
        _in_threads(pending.ticket, [rows(range(100, 120)), rows(range(120, 140))])
        assert _leftovers(uri) != before, "the workers wrote files"
        raise RuntimeError("driver failed")
    assert _leftovers(uri) == before
    assert states(table)[-2:] == [("commit", "rolledback"), ("rollback", "completed")]
    assert sorted_rows(table.to_arrow()) == visible and table.validate().ok
    # A write left without a commit is aborted too.
    with table.begin_write() as pending:
        _in_threads(pending.ticket, [rows(range(200, 210))])
    assert _leftovers(uri) == before and sorted_rows(table.to_arrow()) == visible


def test_a_failed_commit_leaves_nothing(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = txn.create_table(uri, SCHEMA, record_key="id")
    table.append(rows(range(10)))
    before = _leftovers(uri)
    with pytest.raises(txn.DuplicateKeyError, match=r"repeats within .*\[120\]"), \
            table.begin_write() as pending:
        reports = _in_threads(pending.ticket, [rows(range(100, 121)), rows(range(120, 130))])
        pending.commit(reports, check_keys=True)
    assert _leftovers(uri) == before
    assert sorted_rows(table.to_arrow()) == rows(range(10)).to_pylist() and table.validate().ok


def test_files_of_unreported_attempts_are_removed_before_the_commit(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = txn.create_table(uri, SCHEMA, record_key="id", properties={"record_index.shards": "2"})
    with table.begin_write() as pending:
        ticket = _pickled(pending.ticket)
        failed = txn.write_files(ticket, rows(range(50)), task_id=(0, 0))  # its worker died
        retried = txn.write_files(ticket, rows(range(50)), task_id=(0, 1))
        other = txn.write_files(ticket, rows(range(50, 80)), task_id=1)
        assert failed.index_part != retried.index_part
        commit = pending.commit([retried, other])
    assert commit is not None and sorted(commit.paths_added) == sorted(retried.paths + other.paths)
    files, markers, logs = _leftovers(uri)
    assert files == sorted(commit.paths_added) and markers == []
    assert not [p for p in failed.paths if p in files]
    assert len(logs) == 2, "the failed attempt's index log is gone"
    assert table.lookup(list(range(80))).num_rows == 80 and table.validate().ok


def test_a_keyed_append_refuses_existing_keys_and_an_upsert_replaces_them(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = txn.create_table(uri, SCHEMA, record_key="id")
    table.append(rows(range(10)))
    before = _leftovers(uri)
    with pytest.raises(txn.DuplicateKeyError, match=r"2 record key\(s\) \[[38], [38]\] already exist"), \
            table.begin_write() as pending:
        pending.commit(_in_threads(pending.ticket, [rows([3, 100]), rows([8, 101])]))
    assert _leftovers(uri) == before
    assert states(table)[-2:] == [("commit", "rolledback"), ("rollback", "completed")]
    # The same check as a local append's.
    with pytest.raises(txn.DuplicateKeyError, match=r"2 record key\(s\) .* already exist"):
        table.append(rows([3, 8, 100]))

    changed = rows([3, 8, 100]).set_column(3, "price", pa.array([-1.0] * 3))
    with table.begin_write("upsert") as pending:
        commit = pending.commit(_in_threads(pending.ticket, [changed.slice(0, 2), changed.slice(2)]))
    assert commit is not None and (commit.rows_added, commit.rows_deleted) == (3, 2)
    prices = {r["id"]: r["price"] for r in table.to_arrow().to_pylist()}
    assert len(prices) == table.to_arrow().num_rows == 11
    assert prices[3] == prices[8] == prices[100] == -1.0 and prices[4] == 2.0
    assert table.validate().ok


def test_deletes_by_position(tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id")
    table.append(rows(range(10)))
    snapshot = table.snapshot()
    [data_file] = snapshot.files()
    with table.begin_write("delete", read_instant=snapshot) as pending:
        commit = pending.commit(deletes={data_file.path: [0, 2, 2]})
    assert commit is not None and commit.rows_deleted == 2 and commit.files_added == 0
    remaining = sorted(table.to_arrow()["id"].to_pylist())
    assert len(remaining) == 8 and table.lookup(remaining).num_rows == 8
    assert table.lookup([i for i in range(10) if i not in remaining]).num_rows == 0
    assert table.validate().ok
    # An update: rewritten rows by the workers, the old ones deleted by position.
    with table.begin_write("update") as pending:
        where = relative(table, data_file)
        kept = table.to_arrow().sort_by("id").slice(0, 1)
        with pytest.raises(txn.InvalidOptionError, match="not a live data file"):
            pending.commit(deletes={"segment_9/nothing.parquet": [0]})
        [report] = _in_threads(pending.ticket, [kept.set_column(3, "price", pa.array([9.5]))])
        position = _position(table, kept["id"][0].as_py())
        commit = pending.commit([report], deletes=pa.table({"file": [where], "position": [position]}))
    assert commit is not None and (commit.rows_added, commit.rows_deleted) == (1, 1)
    assert {r["id"]: r["price"] for r in table.to_arrow().to_pylist()}[kept["id"][0].as_py()] == 9.5
    assert table.validate().ok


@pytest.mark.parametrize("operation", ["update", "merge"])
def test_an_update_retires_the_keys_of_the_rows_it_deletes_without_rewriting(tmp_path: Path,
                                                                             operation: str) -> None:
    """SQL MERGE's form: one ``"merge"`` (committed as an ``"update"`` is) rewrites some rows,
    inserts others and deletes some outright; the keys of those (``retire``) leave the record
    index, so they can come back. The history names the operation begun."""
    table = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id")
    table.append(rows(range(4)))
    snapshot = table.snapshot()
    [data_file] = snapshot.files()
    where = relative(table, data_file)
    positions = {key: _position(table, key) for key in (1, 2)}
    with table.begin_write(operation, read_instant=snapshot) as pending:
        new = pa.concat_tables([rows([1]).set_column(3, "price", pa.array([7.0])), rows([50])])
        [report] = _in_threads(pending.ticket, [new])
        deletes = pa.table({"file": [where] * 2, "position": list(positions.values())})
        commit = pending.commit([report], deletes=deletes,
                                retire=pa.table({"file": [where], "position": [positions[2]]}))
    assert commit is not None and (commit.rows_added, commit.rows_deleted) == (2, 2)
    assert commit.operation == operation and table.history(limit=1)[0].operation == operation
    assert sorted(table.to_arrow()["id"].to_pylist()) == [0, 1, 3, 50]
    assert sorted(table.lookup([0, 1, 2, 3, 50])["id"].to_pylist()) == [0, 1, 3, 50]
    table.append(rows([2]))  # key 2 left the table: no DuplicateKeyError
    assert table.validate().ok


def _position(table: txn.Table, key: int) -> int:
    return int(table.lookup([key])["position"][0].as_py())


def test_a_commit_completed_after_read_instant_conflicts(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = txn.create_table(uri, SCHEMA, record_key="id")
    table.append(rows(range(10)))
    read = table.snapshot()
    table.upsert(rows([5]))  # another writer, after the snapshot the write planned from
    with pytest.raises(txn.CommitConflictError), \
            table.begin_write("upsert", read_instant=read.instant) as pending:
        pending.commit(_in_threads(pending.ticket, [rows([5, 6])]))
    assert states(table)[-2:] == [("commit", "rolledback"), ("rollback", "completed")]
    assert table.to_arrow().num_rows == 10 and table.validate().ok
    # New keys (no row to delete in a file the other upsert changed) commit.
    with table.begin_write("upsert", read_instant=read.instant) as pending:
        assert pending.commit(_in_threads(pending.ticket, [rows([20, 21])])) is not None
    # A probe names the snapshot it read, and a write begun from it sees the same one.
    probe = _pickled(table.key_probe())
    found = probe.find(rows([1, 2, 99]))
    assert sorted(found["id"].to_pylist()) == [1, 2] and set(found.column_names) >= {"file", "position"}
    table.upsert(rows([1]))
    with pytest.raises(txn.CommitConflictError), \
            table.begin_write("upsert", read_instant=probe.read_instant) as pending:
        pending.commit(_in_threads(pending.ticket, [rows([1])]))


def test_app_id_and_version_commit_once(tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "t"), SCHEMA)
    once = txn.CommitProperties(extra={"job": "nightly"}, app_id="loader", version=3)
    with table.begin_write(commit_properties=once) as pending:
        commit = pending.commit(_in_threads(pending.ticket, [rows(range(10))]))
    assert commit is not None and commit.extra == {"job": "nightly"}
    before = states(table)
    for version in (3, 2):
        replay = txn.CommitProperties(app_id="loader", version=version)
        with table.begin_write(commit_properties=replay) as again:
            assert again.skipped and again.commit([]) is None
    assert states(table) == before and table.to_arrow().num_rows == 10
    # Two drivers racing with the same version: one commits, the other's commit returns None.
    first = table.begin_write(commit_properties=txn.CommitProperties(app_id="loader", version=4))
    second = table.begin_write(commit_properties=txn.CommitProperties(app_id="loader", version=4))
    with first, second:
        one = first.commit(_in_threads(first.ticket, [rows(range(20, 30))]))
        other = second.commit(_in_threads(second.ticket, [rows(range(40, 50))]))
    assert one is not None and other is None
    assert table.to_arrow().num_rows == 20 and table.validate().ok


def test_a_detached_write_is_committed_from_another_handle(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = txn.create_table(uri, SCHEMA)
    ticket = table.begin_write("overwrite").detach()  # the driver's process hands over
    report = txn.write_files(_pickled(ticket), rows(range(3)), task_id=0)  # beats the heartbeat
    commit = txn.PendingWrite.resume(_pickled(ticket)).commit([report])
    assert commit is not None and commit.operation == "overwrite"
    assert table.to_arrow().num_rows == 3 and table.validate().ok
    aborted = table.begin_write().detach()
    txn.write_files(aborted, rows(range(5)))
    txn.PendingWrite.resume(aborted).abort()
    txn.PendingWrite.resume(aborted).abort()  # a second abort (Spark calls it after a failed commit)
    assert table.to_arrow().num_rows == 3 and _leftovers(uri)[:2] == (sorted(commit.paths_added), [])
    with pytest.raises(txn.InvalidOptionError, match="no longer pending"):
        txn.write_files(aborted, rows(range(5)))


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "t"), SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match="operation 'replace'"):
        table.begin_write("replace")
    with pytest.raises(txn.InvalidOptionError, match="needs a table with a record_key"):
        table.begin_write("upsert")
    with pytest.raises(txn.InvalidOptionError, match="read_instant"):
        table.begin_write(read_instant="20200101000000000")
    with pytest.raises(txn.InvalidOptionError, match="partitions"):
        table.begin_write("append", partitions="dynamic")
    assert states(table) == []
    with table.begin_write() as pending:
        with pytest.raises(txn.SchemaMismatchError):
            txn.write_files(pending.ticket, rows(range(3)).drop_columns(["price"]))
        with pytest.raises(txn.InvalidOptionError, match="deletes no rows"):
            pending.commit(deletes={"x": [1]})
    assert states(table) == [("commit", "rolledback"), ("rollback", "completed")]


def test_an_engines_replans_are_recorded_as_a_local_writes_are(tmp_path: Path) -> None:
    """``Commit.retries`` says how often a write was planned again after a table service
    overtook it; an engine that replans (``PendingWrite.retryable``) gives the count."""
    table = txn.create_table(str(tmp_path / "t"), SCHEMA)
    with table.begin_write() as pending:
        commit = pending.commit(_in_threads(pending.ticket, [rows(range(5))]), retries=2)
    assert commit is not None and commit.retries == 2
    assert table.timeline()[-1].time == commit.instant
    for bad in (-1, True, 1.5, "2"):
        with table.begin_write() as pending, pytest.raises(txn.InvalidOptionError, match="retries"):
            pending.commit([], retries=bad)  # type: ignore[arg-type]
    assert sorted_rows(table.to_arrow()) == sorted_rows(rows(range(5)))


@pytest.mark.parametrize("other", ["append", "update", "upsert"])
def test_an_engines_merge_that_scanned_conflicts_with_any_write_that_was_not_blind(
        tmp_path: Path, other: str) -> None:
    """An engine's ``"merge"`` chose its inserts by what it did not find: one that scanned the
    table loses to a concurrent commit that added or replaced rows (an update, an upsert),
    and is ordered after a blind append. One that found its rows by their keys
    (``read_by_keys``) conflicts by key and file only: an update or upsert of other rows passes."""
    for read_by_keys in (False, True):
        table = txn.create_table(str(tmp_path / f"t{read_by_keys}"), SCHEMA, record_key="id")
        table.append(rows(range(4)))
        snapshot = table.snapshot()
        if other == "append":
            table.append(rows([10]))
        elif other == "update":
            table.update(None, {"price": 1.0})
        else:
            table.upsert(rows([11]))
        before = table.timeline()
        with table.begin_write("merge", read_instant=snapshot) as pending:
            [report] = _in_threads(pending.ticket, [rows([20])])
            if other != "append" and not read_by_keys:
                with pytest.raises(txn.CommitConflictError, match="only blind appends"):
                    pending.commit([report], read_by_keys=read_by_keys)
                assert [i.state for i in table.timeline()][-2:] == ["rolledback", "completed"]
                assert len(table.timeline()) == len(before) + 2 and table.validate().ok
                continue
            commit = pending.commit([report], read_by_keys=read_by_keys)
        assert commit is not None and commit.operation == "merge"
        assert 20 in table.to_arrow()["id"].to_pylist() and table.validate().ok
