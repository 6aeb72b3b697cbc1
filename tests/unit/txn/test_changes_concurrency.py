"""The change feed beside concurrent writers and CLEAN FILES (issue 26).

* Out-of-order completion: writer 1 begins its instant T1 before writer 2 begins T2 (T2 > T1)
  but completes after it. A consumer that reads the feed window by window, each window starting
  where the previous one ended (``ChangeScanner.end``), sees T2's rows in the window holding
  T2's completion, then T1's rows in the next one: each row exactly once, by the window holding
  its instant's completion (Hudi 1.x's completion-time order; ordering by instant time would
  skip T1). Deterministic with the two-phase API (``Table.begin_write`` / ``PendingWrite``), in
  random interleavings of several writers, and with writer threads racing a consumer thread.
* A reader racing a clean: a window that needs files CLEAN FILES removes (the data file a later
  delete and an overwrite took rows out of), read while the clean runs (at each storage call of
  the read in turn, and between planning and reading), reads exactly or raises
  ``SnapshotExpiredError``: never partial rows, never another error.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn import timeline
from tests.unit.txn.helpers import SCHEMA, CountingStorage, rows, storage_of, table_on


def feed(table: txn.Table, since: str) -> tuple[str, pa.Table]:
    """The window after ``since`` up to the latest completed instant: its end and its rows."""
    scanner = table.changes(since)
    return scanner.end, scanner.to_arrow()


def ids_by_type(data: pa.Table) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for row in data.select(["id", "_change_type"]).to_pylist():
        found.setdefault(row["_change_type"], []).append(row["id"])
    return {kind: sorted(ids) for kind, ids in found.items()}


def instants_of(data: pa.Table) -> set[str]:
    return set(data["_commit_instant"].to_pylist())


@dataclass
class Begun:
    """A two-phase write begun (its instant requested) whose files are written, not committed."""

    pending: txn.PendingWrite
    files: list[txn.WrittenFiles]
    ids: list[int]

    @property
    def instant(self) -> str:
        assert self.pending.instant is not None
        return self.pending.instant

    def commit(self) -> txn.Commit:
        done = self.pending.commit(self.files)
        assert done is not None
        return done


def begin(table: txn.Table, operation: str, ids: list[int]) -> Begun:
    pending = table.begin_write(operation)
    return Begun(pending, [txn.write_files(pending.ticket, rows(ids))], ids)


# -- out-of-order completion -----------------------------------------------------------------------


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_a_write_that_completes_late_is_read_once_in_the_window_of_its_completion(
        memory_uri: str, keyed: bool) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="id" if keyed else None)
    consumer = txn.open_table(memory_uri)
    other = txn.open_table(memory_uri)
    first = table.append(rows(range(3)))
    end, seen = feed(consumer, "earliest")
    assert ids_by_type(seen) == {"insert": [0, 1, 2]} and instants_of(seen) == {first.instant}

    # Writer 1 begins T1 (keyed: an upsert rewriting key 1 and adding key 10).
    writer_1 = begin(table, "upsert" if keyed else "append", [1, 10] if keyed else [10, 11])
    t1 = writer_1.instant
    # Writer 2 begins T2 after T1 and completes first.
    t2 = other.append(rows([20, 21]))
    assert t2.instant > t1
    end_2, seen = feed(consumer, end)
    assert ids_by_type(seen) == {"insert": [20, 21]} and instants_of(seen) == {t2.instant}
    assert end_2 == t2.completed_at

    # T1 completes after T2: the next window, which starts at T2's completion, holds it.
    t1_commit = writer_1.commit()
    assert t1_commit.instant == t1 and t1_commit.completed_at > t2.completed_at
    end_3, seen = feed(consumer, end_2)
    assert end_3 == t1_commit.completed_at
    assert instants_of(seen) == {t1}
    if keyed:
        assert ids_by_type(seen) == {"update_preimage": [1], "update_postimage": [1], "insert": [10]}
    else:
        assert ids_by_type(seen) == {"insert": [10, 11]}
    assert set(seen["_commit_time"].to_pylist()) == {
        pa.scalar(timeline.parse_time(t1_commit.completed_at), pa.timestamp("ms", tz="UTC")).as_py()}
    # Nothing is left for the window after it, and a start named by T2's instant time (its
    # completion is the bound) still holds T1, whose instant time is the smaller.
    assert feed(consumer, end_3)[1].num_rows == 0
    assert instants_of(consumer.changes(t2.instant).to_arrow()) == {t1}
    assert consumer.changes(t1).to_arrow().num_rows == 0
    # The window (T1's time, T2's completion] read by instant times holds T2 only: the bounds are
    # completions, so a window ending at T2 never holds T1, which completed after it.
    assert instants_of(consumer.changes(first.instant, t2.instant).to_arrow()) == {t2.instant}


@pytest.mark.parametrize("seed", range(8))
def test_random_interleavings_of_late_completions_read_each_row_once(memory_uri: str, seed: int) -> None:
    """Several two-phase writers begun in one order and completed in another, plain appends
    between them, a consumer reading windows at random moments: every acknowledged row arrives
    exactly once, in the window that holds its commit's completion."""
    chooser = random.Random(seed)
    table = txn.create_table(memory_uri, SCHEMA)
    consumer = txn.open_table(memory_uri)
    since, windows = "earliest", []
    open_writes: list[Begun] = []
    commits: dict[str, tuple[txn.Commit, list[int]]] = {}
    next_id = 0

    def ids(n: int) -> list[int]:
        nonlocal next_id
        next_id += n
        return list(range(next_id - n, next_id))

    def read() -> None:
        nonlocal since
        scanner = consumer.changes(since)
        assert since == "earliest" or scanner.start == since
        windows.append((scanner.start, scanner.end, scanner.to_arrow()))
        since = scanner.end

    for _ in range(30):
        move = chooser.choice(["begin", "begin", "finish", "finish", "append", "read"])
        if move == "begin" and len(open_writes) < 4:
            open_writes.append(begin(table, "append", ids(chooser.randint(1, 3))))
        elif move == "finish" and open_writes:
            begun = open_writes.pop(chooser.randrange(len(open_writes)))
            done = begun.commit()
            commits[done.instant] = (done, begun.ids)
        elif move == "append":
            wanted = ids(chooser.randint(1, 3))
            done = txn.open_table(memory_uri).append(rows(wanted))
            commits[done.instant] = (done, wanted)
        else:
            read()
    for begun in open_writes:
        done = begun.commit()
        commits[done.instant] = (done, begun.ids)
    read()
    got: Counter[int] = Counter()
    for start, end, data in windows:
        for row in data.select(["id", "_change_type", "_commit_instant"]).to_pylist():
            assert row["_change_type"] == "insert", row
            done, wanted = commits[row["_commit_instant"]]
            assert row["id"] in wanted
            assert start < done.completed_at <= end, (
                f"{done.instant} completed at {done.completed_at}, read in window ({start}, {end}]")
            got[row["id"]] += 1
    assert got == Counter(i for _, wanted in commits.values() for i in wanted)
    assert sorted(got) == sorted(table.to_arrow()["id"].to_pylist())


def test_writer_threads_racing_a_consumer_thread_deliver_each_row_once(memory_uri: str) -> None:
    """Three writer threads, each beginning two-phase appends and committing them after a random
    pause (so completions overtake each other), and a consumer thread reading window after window
    meanwhile: every row arrives exactly once."""
    txn.create_table(memory_uri, SCHEMA, properties={"heartbeat.interval_ms": "30000"})
    errors: list[BaseException] = []
    written: list[int] = []
    lock = threading.Lock()
    done = threading.Event()
    got: Counter[int] = Counter()

    def writer(n: int) -> None:
        chooser = random.Random(n)
        table = txn.open_table(memory_uri)
        try:
            for i in range(5):
                wanted = [n * 1000 + i * 10 + j for j in range(chooser.randint(1, 3))]
                begun = begin(table, "append", wanted)
                time.sleep(chooser.uniform(0, 0.05))
                begun.commit()
                with lock:
                    written.extend(wanted)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def consumer() -> None:
        table, since = txn.open_table(memory_uri), "earliest"
        try:
            while True:
                finished = done.is_set()  # read once more after the writers finished
                since, data = feed(table, since)
                got.update(data["id"].to_pylist())
                if finished:
                    return
                time.sleep(0.005)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    reading = threading.Thread(target=consumer)
    reading.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    done.set()
    reading.join(60)
    assert not errors, errors
    assert got == Counter(written) and len(written) >= 15


def test_the_end_of_a_window_on_an_empty_table_starts_the_next_window(memory_uri: str) -> None:
    """A consumer that starts before the first commit goes on from its window's end ('0'*17:
    refused as a start before 30c4ad8)."""
    table = txn.create_table(memory_uri, SCHEMA)
    empty = table.changes("earliest")
    assert empty.to_arrow().num_rows == 0
    table.append(rows([1]))
    assert ids_by_type(table.changes(empty.end).to_arrow()) == {"insert": [1]}


# -- a reader racing CLEAN FILES ---------------------------------------------------------------------


class Hooked(CountingStorage):
    """Forwards every call; runs ``hook`` once, before call number ``at`` (from 0)."""

    def __init__(self, inner: timeline.Storage, at: int, hook: Callable[[], object]) -> None:
        super().__init__(inner)
        self._at, self._hook, self.fired = at, hook, False

    def _log(self, op: str, path: str) -> None:
        if not self.fired and len(self.calls) == self._at:
            self.fired = True
            self._hook()
        super()._log(op, path)


def cleaned_history(uri: str) -> tuple[txn.Table, list[txn.Commit]]:
    """T1 appends file A, T2 deletes rows of A, T3 overwrites the table: once CLEAN FILES keeps
    only the latest commit, A and T2's delete delta go, and the windows before T3 need both (T2's
    and T3's deleted rows are read from A)."""
    table = txn.create_table(uri, SCHEMA, properties={
        "clean.retain_commits": "1", "clean.retain_hours": "0", "maintenance.mode": "manual"})
    commits = [table.append(rows(range(6))), table.delete(where=pc.field("id") < 2),
               table.overwrite(rows(range(100, 103)))]
    assert all(c is not None for c in commits)
    return table, commits  # type: ignore[return-value]


#: The rows of each window start (by commit index, -1: earliest) through T3: (type, id) pairs.
EXPECTED = {
    -1: sorted([*(("insert", i) for i in range(6)), ("delete", 0), ("delete", 1),
                *(("delete", i) for i in range(2, 6)), *(("insert", i) for i in range(100, 103))]),
    0: sorted([("delete", 0), ("delete", 1), *(("delete", i) for i in range(2, 6)),
               *(("insert", i) for i in range(100, 103))]),
    1: sorted([*(("delete", i) for i in range(2, 6)), *(("insert", i) for i in range(100, 103))]),
}


def pairs(data: pa.Table) -> list[tuple[str, int]]:
    return sorted((r["_change_type"], r["id"]) for r in data.select(["_change_type", "id"]).to_pylist())


def read_window(reader: txn.Table, start: str, end: str) -> pa.Table:
    return reader.changes(start, end).to_arrow()


@pytest.mark.parametrize("start", [-1, 0, 1], ids=["earliest", "after-T1", "after-T2"])
def test_a_window_read_while_clean_removes_its_files_is_exact_or_expired(
        memory_uri: str, start: int) -> None:
    table, commits = cleaned_history(memory_uri)
    since = "earliest" if start < 0 else commits[start].instant
    counting = CountingStorage(storage_of(memory_uri))
    assert pairs(read_window(table_on(memory_uri, counting), since, commits[-1].instant)) == EXPECTED[start]
    calls = len(counting.calls)
    assert calls > 0
    outcomes: Counter[str] = Counter()
    for at in range(calls + 1):
        uri = f"{memory_uri}/{at}"
        table, commits = cleaned_history(uri)
        since = "earliest" if start < 0 else commits[start].instant
        removed: list[str] = []
        hooked = Hooked(storage_of(uri), at, lambda t=table, out=removed: out.extend(t.clean().files))
        reader = table_on(uri, hooked)
        try:
            data = read_window(reader, since, commits[-1].instant)
        except txn.SnapshotExpiredError as exc:
            assert hooked.fired
            outcomes["expired"] += 1
            assert "oldest" in str(exc) or commits[-1].instant in str(exc), exc
        else:
            assert pairs(data) == EXPECTED[start], f"clean before call {at}: {pairs(data)}"
            outcomes["exact"] += 1
        if at < calls:
            assert hooked.fired and removed, f"the clean before call {at} removed nothing"
    # The clean ran before the read's first call: the window reaches before the floor it set.
    assert outcomes["expired"] >= 1, outcomes


@pytest.mark.parametrize("between", ["plan-and-read", "parts"])
def test_a_planned_window_whose_files_a_clean_removed_is_exact_or_expired(
        memory_uri: str, between: str) -> None:
    """The scanner planned (as a Spark driver plans it), then CLEAN FILES, then the read (all of
    it, or part by part with the clean after the first part)."""
    table, commits = cleaned_history(memory_uri)
    reader = txn.open_table(memory_uri)
    scanner = reader.changes("earliest", commits[-1].instant)
    got: list[pa.RecordBatch] = []
    try:
        if between == "plan-and-read":
            assert table.clean().files
            got.extend(scanner.to_batches())
        else:
            parts = scanner.parts()
            assert len(parts) >= 2, parts
            got.extend(scanner.read_part(parts[0]))
            assert table.clean().files
            for part in parts[1:]:
                got.extend(scanner.read_part(part))
    except txn.SnapshotExpiredError:
        return
    assert pairs(pa.Table.from_batches(got, schema=scanner.schema)) == EXPECTED[-1]
