"""Failures during a write, and recovery from writers that died.

Invariants, checked on the durable state of storage:

* a write that fails before its commit point leaves nothing a reader can see, deletes the files
  it wrote (found through its markers) and records a completed ``rollback`` instant;
* a writer that dies leaves its instant pending; once its heartbeat expires, the next writer
  rolls it back, deleting its files and metadata blocks, and ``validate()`` is clean again;
* when the outcome of the commit point is unknown, nothing is deleted.

Faults are injected at the storage seam (``tests/faults.py``), never inside private methods.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import txn
from metatxn import timeline
from tests.conftest import FakeClock
from tests.faults import InjectedFault, injected
from tests.unit.txn.helpers import (
    SCHEMA,
    Faulty,
    batch_reader,
    data_files_on_storage,
    rows,
    sorted_rows,
    states,
    storage_of,
    table_on,
)

#: Longer than both the default lock lease and the default heartbeat timeout (60 s each).
EXPIRY_MS = 10 * 60_000

_COMPLETED_DATA_INSTANT = re.compile(r"_timeline/\d{17}_\d{17}\.(commit|replacecommit)")


def _is_data_completion(path: str) -> bool:
    return _COMPLETED_DATA_INSTANT.fullmatch(path) is not None


def _is_marker(path: str) -> bool:
    return path.startswith("_markers")


def _is_data_file(path: str) -> bool:
    return path.endswith(".parquet") and not path.startswith(("_markers", "_metadata", "_timeline"))


def _leftovers(uri: str) -> dict[str, list[str]]:
    """What a write in flight leaves behind, by kind."""
    keys = storage_of(uri).list("", recursive=True)
    return {
        "markers": [k for k in keys if _is_marker(k)],
        "heartbeats": [k for k in keys if k.startswith("_timeline/heartbeats/")],
        "blocks": [k for k in keys if k.startswith("_metadata/") and k.endswith(".log.arrow")],
    }


def _visible(table: txn.Table) -> tuple[Any, ...]:
    snap = table.snapshot()
    return (sorted_rows(snap.to_arrow()), sorted(f.path for f in snap.files()),
            [(s.id, s.status, s.rows) for s in table.segments()])


def _many_batches(count: int, *, fail_after: int | None = None) -> Iterator[pa.RecordBatch]:
    for i in range(count):
        if fail_after is not None and i == fail_after:
            raise RuntimeError("the source broke")
        yield rows(range(1_000 + i * 100, 1_100 + i * 100)).to_batches()[0]


def _small_files(uri: str, clock: FakeClock | None = None, **extra: str) -> txn.Table:
    properties = {"write.target_file_bytes": "2000", **extra}
    return txn.create_table(uri, SCHEMA, properties=properties, clock=clock)


# -- an exception in the middle of a write ---------------------------------------------------------


@pytest.mark.parametrize("operation", ["append", "overwrite"])
def test_an_error_while_streaming_rolls_the_write_back_completely(
    table_uri: str, operation: str
) -> None:
    table = _small_files(table_uri)
    table.append(rows(range(10)))
    before, files_before = _visible(table), data_files_on_storage(table_uri)
    written_while_streaming: list[int] = []

    def source() -> Iterator[pa.RecordBatch]:
        yield from _many_batches(2)
        written_while_streaming.append(len(data_files_on_storage(table_uri)))
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        getattr(table, operation)(batch_reader(SCHEMA, source()))

    assert written_while_streaming[0] > len(files_before), "files were written before the error"
    assert _visible(table) == before
    assert data_files_on_storage(table_uri) == files_before
    failed, rollback = table.timeline()[-2:]
    left = _leftovers(table_uri)
    assert left["markers"] == [] and left["heartbeats"] == []
    assert not any(failed.time in block for block in left["blocks"])
    assert (failed.action, failed.state) == (
        "commit" if operation == "append" else "replacecommit", "rolledback")
    assert (rollback.action, rollback.state) == ("rollback", "completed")
    record = timeline.Timeline(storage_of(table_uri)).read_metadata(rollback)
    assert len(record["files_deleted"]) == written_while_streaming[0] - len(files_before)
    assert record["metadata_blocks_deleted"] == []
    assert table.validate().ok


def test_the_table_takes_the_next_write_normally_after_a_failed_one(table_uri: str) -> None:
    table = _small_files(table_uri)
    with pytest.raises(RuntimeError):
        table.append(batch_reader(SCHEMA, _many_batches(5, fail_after=3)))
    commit = table.append(rows(range(3)))
    assert table.snapshot().count() == 3
    assert states(table) == [("commit", "rolledback"), ("rollback", "completed"),
                             ("commit", "completed")]
    assert commit.rows_added == 3 and table.validate().ok


# -- a writer that dies ----------------------------------------------------------------------------


def test_a_writer_that_dies_while_writing_files_leaves_its_instant_pending(
    table_uri: str, clock: FakeClock
) -> None:
    """From its second data file on, every storage call of the writer fails (it died): its
    instant stays inflight with one data file and its marker, and no reader sees any of it."""
    _small_files(table_uri, clock).append(rows(range(5)))
    faulty = Faulty(storage_of(table_uri))
    dying = table_on(table_uri, faulty, clock=clock)
    faulty.arm(2, ops={"put_if_absent"}, match=_is_marker, crash=True)
    with pytest.raises(InjectedFault):
        dying.append(batch_reader(SCHEMA, _many_batches(10)))
    assert faulty.dead

    survivor = txn.open_table(table_uri, clock=clock)
    assert [(i.action, i.state) for i in survivor.timeline()][-1] == ("commit", "inflight")
    assert len(data_files_on_storage(table_uri)) == 2, "the first load's file and the orphan"
    assert survivor.snapshot().count() == 5
    assert survivor.segments()[0].status == "Insert In Progress"
    report = survivor.validate()
    assert report.ok, "a file claimed by a pending write's marker is not unreferenced"


def test_a_pending_write_with_a_live_heartbeat_is_not_rolled_back(
    table_uri: str, clock: FakeClock
) -> None:
    """The writer might only be slow: before its heartbeat expires nobody touches its instant."""
    _small_files(table_uri, clock).append(rows(range(5)))
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(2, ops={"put_if_absent"}, match=_is_marker, crash=True)
    with pytest.raises(InjectedFault):
        table_on(table_uri, faulty, clock=clock).append(batch_reader(SCHEMA, _many_batches(10)))
    orphan = data_files_on_storage(table_uri)

    clock.advance(1_000)
    other = txn.open_table(table_uri, clock=clock)
    commit = other.append(rows(range(5, 7)))
    pending = [i for i in other.timeline() if i.state == "inflight"]
    assert len(pending) == 1 and pending[0].time < commit.instant
    assert set(orphan) <= set(data_files_on_storage(table_uri))
    assert commit.segment == "2", "the dead writer's segment id stays reserved while it is pending"
    assert other.snapshot().count() == 7


def test_the_next_writer_rolls_back_a_dead_writer_after_its_heartbeat_expires(
    table_uri: str, clock: FakeClock
) -> None:
    _small_files(table_uri, clock).append(rows(range(5)))
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(3, ops={"put_if_absent"}, match=_is_marker, crash=True)
    with pytest.raises(InjectedFault):
        table_on(table_uri, faulty, clock=clock).append(batch_reader(SCHEMA, _many_batches(10)))
    dead = txn.open_table(table_uri, clock=clock).timeline()[-1]
    assert dead.state == "inflight"

    clock.advance(EXPIRY_MS)
    survivor = txn.open_table(table_uri, clock=clock)
    assert survivor.snapshot().count() == 5
    assert survivor.timeline()[-1].state == "inflight", "reads never roll anything back"
    survivor.append(rows(range(5, 8)))

    by_time = {i.time: i for i in survivor.timeline()}
    assert by_time[dead.time].state == "rolledback"
    rollbacks = [i for i in survivor.timeline() if i.action == "rollback"]
    assert [i.state for i in rollbacks] == ["completed"]
    record = timeline.Timeline(storage_of(table_uri)).read_metadata(rollbacks[0])
    assert len(record["files_deleted"]) == 2
    assert len(data_files_on_storage(table_uri)) == 2, "the two committed loads only"
    assert _leftovers(table_uri)["markers"] == [] and _leftovers(table_uri)["heartbeats"] == []
    assert survivor.snapshot().count() == 8
    assert survivor.validate().ok


def test_a_writer_that_dies_at_the_commit_point_leaves_blocks_nobody_reads(
    table_uri: str, clock: FakeClock
) -> None:
    """Death after the metadata table's blocks landed but before the data instant completed:
    the blocks (and even the metadata table's deltacommit) are ignored by readers, and the
    rollback deletes them along with the data files."""
    _small_files(table_uri, clock).append(rows(range(5)))
    before = _visible(txn.open_table(table_uri, clock=clock))
    blocks_before = _leftovers(table_uri)["blocks"]
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(1, ops={"put_if_absent"}, match=_is_data_completion, crash=True)
    with pytest.raises(Exception) as info:
        table_on(table_uri, faulty, clock=clock).append(batch_reader(SCHEMA, _many_batches(6)))
    assert injected(info.value) is not None

    reader = txn.open_table(table_uri, clock=clock)
    dead = reader.timeline()[-1]
    assert dead.state == "inflight"
    blocks = _leftovers(table_uri)["blocks"]
    assert {b for b in blocks if dead.time in b} and set(blocks_before) < set(blocks)
    assert _visible(reader) == (*before[:2], [("1", "Insert In Progress", 0), *before[2]])

    clock.advance(EXPIRY_MS)
    survivor = txn.open_table(table_uri, clock=clock)
    survivor.append(rows(range(5, 6)))
    assert [i.state for i in survivor.timeline() if i.time == dead.time] == ["rolledback"]
    assert not any(dead.time in b for b in _leftovers(table_uri)["blocks"])
    record = timeline.Timeline(storage_of(table_uri)).read_metadata(
        next(i for i in survivor.timeline() if i.action == "rollback"))
    assert record["metadata_blocks_deleted"] and all(dead.time in b for b in
                                                     record["metadata_blocks_deleted"])
    assert len(data_files_on_storage(table_uri)) == 2
    assert sorted(survivor.to_arrow()["id"].to_pylist()) == list(range(6))
    assert survivor.validate().ok


def test_a_rollback_whose_writer_died_is_finished_by_the_next_writer(
    table_uri: str, clock: FakeClock
) -> None:
    """The write fails, its rollback starts and the process dies while deleting files: the
    rollback instant stays pending and a later writer rolls it forward, never back."""
    _small_files(table_uri, clock).append(rows(range(5)))
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(1, ops={"delete"}, match=_is_data_file, crash=True)
    with pytest.raises(RuntimeError, match="the source broke"):
        table_on(table_uri, faulty, clock=clock).append(
            batch_reader(SCHEMA, _many_batches(8, fail_after=6)))
    assert faulty.dead
    reader = txn.open_table(table_uri, clock=clock)
    target, rollback = reader.timeline()[-2:]
    assert (target.state, rollback.action, rollback.state) == ("rolledback", "rollback", "inflight")
    assert len(data_files_on_storage(table_uri)) > 1
    assert reader.snapshot().count() == 5

    clock.advance(EXPIRY_MS)
    survivor = txn.open_table(table_uri, clock=clock)
    survivor.append(rows(range(5, 6)))
    finished = {i.time: i for i in survivor.timeline()}[rollback.time]
    assert finished.state == "completed"
    assert [i.action for i in survivor.timeline()].count("rollback") == 1
    assert len(data_files_on_storage(table_uri)) == 2
    assert _leftovers(table_uri)["markers"] == []
    assert survivor.snapshot().count() == 6 and survivor.validate().ok


# -- the commit point's outcome is unknown ---------------------------------------------------------


def test_a_commit_that_landed_but_was_reported_failed_keeps_everything(
    table_uri: str, clock: FakeClock
) -> None:
    """``CommitStateUnknownError``: the completed file landed, the response was lost. Nothing
    may be deleted, and the rows are there."""
    _small_files(table_uri, clock).append(rows(range(5)))
    faulty = Faulty(storage_of(table_uri))
    writer = table_on(table_uri, faulty, clock=clock)
    faulty.arm(1, when="after", ops={"put_if_absent"}, match=_is_data_completion)
    with pytest.raises(txn.CommitStateUnknownError, match="may or may not have landed"):
        writer.append(rows(range(5, 9)))
    assert faulty.fault is not None and faulty.fault.landed

    reader = txn.open_table(table_uri, clock=clock)
    assert reader.timeline()[-1].state == "completed"
    assert sorted(reader.to_arrow()["id"].to_pylist()) == list(range(9))
    clock.advance(EXPIRY_MS)
    reader.append(rows(range(9, 10)))
    assert reader.snapshot().count() == 10, "a later writer never undoes a landed commit"
    assert "rollback" not in {i.action for i in reader.timeline()}
    assert reader.validate().ok


def test_a_commit_that_did_not_land_and_was_reported_unknown_is_rolled_back_only_later(
    table_uri: str, clock: FakeClock
) -> None:
    _small_files(table_uri, clock).append(rows(range(5)))
    faulty = Faulty(storage_of(table_uri))
    writer = table_on(table_uri, faulty, clock=clock)
    faulty.arm(1, when="before", ops={"put_if_absent"}, match=_is_data_completion)
    with pytest.raises(txn.CommitStateUnknownError):
        writer.append(rows(range(5, 9)))
    assert faulty.fault is not None and not faulty.fault.landed

    files = data_files_on_storage(table_uri)
    assert len(files) == 2, "the writer cannot know it lost, so it deleted nothing"
    pending = txn.open_table(table_uri, clock=clock).timeline()[-1]
    assert pending.state == "inflight"

    clock.advance(EXPIRY_MS)
    survivor = txn.open_table(table_uri, clock=clock)
    survivor.append(rows(range(100, 101)))
    assert {i.time: i.state for i in survivor.timeline()}[pending.time] == "rolledback"
    assert sorted(survivor.to_arrow()["id"].to_pylist()) == [*range(5), 100]
    assert survivor.validate().ok
