"""Recovery that cannot be turned against the table.

* A marker is read back only after it is checked (``read_marker``): a dead writer's marker that
  names ``../victim.txt``, an absolute path, metadata, or is empty or not UTF-8 (power loss with
  fsync off) deletes nothing and blocks nobody; its rollback completes and records it.
* A rollback that fails on one instant is logged; the write that found it goes on, and a later
  writer finishes it.
* A partition value whose folder name would exceed 255 bytes is refused with
  ``InvalidOptionError``; the string value ``__HIVE_DEFAULT_PARTITION__`` reads back as itself.
* A full disk is a ``StorageError`` naming the file, and leaves no temporary files.
* A commit deletes its own markers by name and never lists ``_markers/``; markers a writer killed
  after its commit point left (or a rolled-back instant's) are swept by the table maintenance that
  runs with a metadata compaction; markers of writes in flight stay. Half-written markers (a
  writer killed inside the put, on local disk) go with their instant's rollback or the sweep.
* ``txn.spark``'s removal of failed task attempts' files skips a damaged marker (logged).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import metatxn.timeline._local as local_module
import txn
from metatxn import timeline
from tests.conftest import FakeClock
from tests.faults import FullDisk, InjectedFault, temporary_files
from tests.unit.txn.helpers import (
    SCHEMA,
    ArrowStorage,
    CountingStorage,
    Faulty,
    batch_reader,
    data_files_on_storage,
    rows,
    storage_of,
    table_on,
)
from txn._commit import protocol_of
from txn._files import read_marker

EXPIRY_MS = 10 * 60_000


def _is_marker(path: str) -> bool:
    return path.startswith("_markers/")


def _batches(count: int) -> Iterator[pa.RecordBatch]:
    for i in range(count):
        yield rows(range(1_000 + i * 100, 1_100 + i * 100)).to_batches()[0]


def _small_files(uri: str, clock: FakeClock, **kwargs: Any) -> txn.Table:
    return txn.create_table(uri, SCHEMA, properties={"write.target_file_bytes": "2000"},
                            clock=clock, **kwargs)


def _dead_writer(uri: str, clock: FakeClock) -> timeline.Instant:
    """A writer that died after its first data file: its instant is inflight, with a marker."""
    faulty = Faulty(storage_of(uri))
    faulty.arm(2, ops={"put_if_absent"}, match=_is_marker, crash=True)
    with pytest.raises(InjectedFault):
        table_on(uri, faulty, clock=clock).append(batch_reader(SCHEMA, _batches(10)))
    dead = txn.open_table(uri, clock=clock).timeline()[-1]
    assert dead.state == "inflight"
    return dead


def _rollback_record(uri: str, table: txn.Table) -> dict[str, Any]:
    rollback = [i for i in table.timeline() if i.action == "rollback"][-1]
    assert rollback.state == "completed"
    record: dict[str, Any] = timeline.Timeline(storage_of(uri)).read_metadata(rollback)
    return record


# -- markers are checked before anything is deleted ----------------------------------------------


HOSTILE = {
    "parent": b"../victim.txt",
    "parent-with-name": b"../{name}",
    "absolute": b"/tmp/{name}",
    "metadata": b"_timeline/{name}",
    "another-name": b"segment_0/part-0-00000-other_20260101000000000.parquet",
    "dot-segment": b"segment_0/./{name}",
    "no-folder": b"{name}",
    "empty": b"",
    "not-utf8": b"\xff\xfe\x00segment",
}


@pytest.mark.allow_metatxn_warnings
@pytest.mark.parametrize("content", sorted(HOSTILE))
def test_a_dead_writers_damaged_or_hostile_marker_deletes_nothing_and_blocks_nobody(
    tmp_path: Path, clock: FakeClock, content: str
) -> None:
    uri = str(tmp_path / "table")
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me")
    _small_files(uri, clock).append(rows(range(5)))
    committed = data_files_on_storage(uri)
    dead = _dead_writer(uri, clock)
    name = f"part-1-00099-evil_{dead.time}.parquet"
    marker = f"_markers/{name}"
    storage = storage_of(uri)
    storage.put_if_absent(marker, HOSTILE[content].replace(b"{name}", name.encode()))
    with pytest.raises(txn.CorruptMetadataError, match=f"corrupt metadata file '{marker}'") as info:
        read_marker(storage, marker)
    assert info.value.path == marker

    clock.advance(EXPIRY_MS)
    survivor = txn.open_table(uri, clock=clock)
    survivor.append(rows(range(5, 8)))

    assert victim.read_bytes() == b"keep me"
    assert os.path.isdir(uri) and storage.read("_timeline/table.json")
    assert {i.time: i.state for i in survivor.timeline()}[dead.time] == "rolledback"
    record = _rollback_record(uri, survivor)
    assert record["damaged_markers"] == [marker]
    assert len(record["files_deleted"]) == 1, "the dead writer's real file is still deleted"
    assert storage.list("_markers") == []
    assert set(committed) < set(data_files_on_storage(uri))
    assert sorted(survivor.to_arrow()["id"].to_pylist()) == list(range(8))
    assert survivor.validate().ok


def test_read_marker_returns_the_path_a_sound_marker_names(memory_uri: str) -> None:
    storage = storage_of(memory_uri)
    name = "part-0-00000-abc_20260101000000000_20260102000000000.deletedelta"
    storage.put_if_absent(f"_markers/{name}", f"region=eu/day=x/{name}".encode())
    assert read_marker(storage, f"_markers/{name}") == f"region=eu/day=x/{name}"
    with pytest.raises(timeline.ObjectNotFoundError):
        read_marker(storage, "_markers/part-0-00001-abc_20260101000000000.parquet")


def test_a_dead_writers_marker_naming_a_path_too_long_for_the_disk_is_rolled_back(
    tmp_path: Path, clock: FakeClock
) -> None:
    """What an earlier version left after ``Errno 36``: the rollback used to fail forever."""
    uri = str(tmp_path / "table")
    _small_files(uri, clock).append(rows(range(5)))
    dead = _dead_writer(uri, clock)
    name = f"part-1-00099-long_{dead.time}.parquet"
    storage_of(uri).put_if_absent(f"_markers/{name}", f"region={'x' * 300}/{name}".encode())

    clock.advance(EXPIRY_MS)
    survivor = txn.open_table(uri, clock=clock)
    survivor.append(rows(range(5, 6)))
    assert {i.time: i.state for i in survivor.timeline()}[dead.time] == "rolledback"
    assert storage_of(uri).list("_markers") == []
    assert survivor.validate().ok


# -- a failing rollback does not block writers -----------------------------------------------------


class RefusingDeletes(ArrowStorage):
    """Forwards everything, but refuses to delete data files while ``refusing`` is set."""

    def __init__(self, inner: timeline.Storage) -> None:
        self.inner = inner
        self.refusing = True

    @property
    def uri(self) -> str:
        return self.inner.uri

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def delete(self, path: str) -> None:
        if self.refusing and path.endswith(".parquet") and not path.startswith("_"):
            raise timeline.StorageError(f"could not delete {path!r}: permission denied")
        self.inner.delete(path)


@pytest.mark.allow_metatxn_warnings
def test_a_rollback_that_keeps_failing_is_logged_and_later_writes_go_on(
    table_uri: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    _small_files(table_uri, clock).append(rows(range(5)))
    dead = _dead_writer(table_uri, clock)
    clock.advance(EXPIRY_MS)
    refusing = RefusingDeletes(storage_of(table_uri))
    writer = table_on(table_uri, refusing, clock=clock)

    for start in (5, 6):  # the second time, the pending rollback has expired in turn
        writer.append(rows(range(start, start + 1)))
        clock.advance(EXPIRY_MS)
    assert sorted(writer.to_arrow()["id"].to_pylist()) == list(range(7))
    warnings = [r for r in caplog.records if "of a dead writer" in r.getMessage()]
    rollback = next(i for i in writer.timeline() if i.action == "rollback")
    assert [r.getMessage().split(" of a dead")[0] for r in warnings] == [
        f"could not roll back instant {dead.time}", f"could not finish rollback {rollback.time}"]
    assert all(isinstance(r.exc_info[1], timeline.StorageError) for r in warnings)  # type: ignore[index]
    by_time = {i.time: i for i in writer.timeline()}
    assert (by_time[dead.time].state, rollback.state) == ("rolledback", "inflight")

    refusing.refusing = False
    writer.append(rows(range(7, 8)))
    assert [i.state for i in writer.timeline() if i.action == "rollback"] == ["completed"]
    assert storage_of(table_uri).list("_markers") == []
    assert writer.snapshot().count() == 8 and writer.validate().ok


def test_a_recovery_step_that_landed_but_reported_a_failure_does_not_collide_with_the_write(
    table_uri: str, clock: FakeClock
) -> None:
    """The rollback instant's requested file lands, the response is lost: the write goes on, and
    its own instant must not take the rollback's time (the lease's cached view missed it)."""
    _small_files(table_uri, clock).append(rows(range(5)))
    dead = _dead_writer(table_uri, clock)
    clock.advance(EXPIRY_MS)
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(1, when="after", ops={"put_if_absent"},
               match=lambda path: path.endswith(".rollback.requested"))
    commit = table_on(table_uri, faulty, clock=clock).append(rows(range(5, 6)))
    assert faulty.fault is not None and faulty.fault.landed

    instants = txn.open_table(table_uri, clock=clock).timeline()  # loads: no time taken twice
    assert len({i.time for i in instants}) == len(instants)
    assert {i.time: i.state for i in instants}[commit.instant] == "completed"

    clock.advance(EXPIRY_MS)
    survivor = txn.open_table(table_uri, clock=clock)
    survivor.append(rows(range(6, 7)))
    states = {i.time: i for i in survivor.timeline()}
    assert states[dead.time].state == "rolledback"
    # The orphaned rollback instant is finished too (undo is idempotent).
    assert {i.state for i in survivor.timeline() if i.action == "rollback"} == {"completed"}
    assert storage_of(table_uri).list("_markers") == []
    assert survivor.snapshot().count() == 7 and survivor.validate().ok


# -- partition values ------------------------------------------------------------------------------


def _regional(uri: str) -> txn.Table:
    return txn.create_table(uri, SCHEMA, partition_by=["region"])


@pytest.mark.parametrize("value", ["x" * 300, "é" * 125])
def test_a_partition_value_too_long_for_a_folder_name_is_refused_and_the_table_goes_on(
    table_uri: str, value: str
) -> None:
    table = _regional(table_uri)
    table.append(rows(range(3)))
    with pytest.raises(txn.InvalidOptionError,
                       match=r"partition column 'region' .* is \d+ bytes once escaped; "
                             r"expected at most 255 bytes"):
        table.append(pa.concat_tables([rows(range(3, 5)), rows(range(5, 6), region=value)]))
    assert table.timeline()[-2].state == "rolledback"
    assert storage_of(table_uri).list("_markers") == []
    table.append(rows(range(5, 6), region="x" * (255 - len("region="))))
    assert table.snapshot().count() == 4 and table.validate().ok


def test_the_string_value_equal_to_the_null_folder_name_reads_back_as_itself(table_uri: str) -> None:
    table = _regional(table_uri)
    literal, escaped = "__HIVE_DEFAULT_PARTITION__", "%5F_HIVE_DEFAULT_PARTITION__"
    table.append(pa.concat_tables([rows(range(2), region=literal), rows(range(2, 3), region=None),
                                   rows(range(3, 4), region=escaped)]))
    assert table.partitions() == [{"region": escaped}, {"region": None}, {"region": literal}]
    by_rows = sorted((f.rows, str(f.partition["region"])) for f in table.snapshot().files())
    assert by_rows == [(1, escaped), (1, "None"), (2, literal)]
    got = {r["id"]: r["region"] for r in table.to_arrow().to_pylist()}
    assert got == {0: literal, 1: literal, 2: None, 3: escaped}
    assert table.validate().ok


# -- a full disk -----------------------------------------------------------------------------------


@pytest.mark.allow_metatxn_warnings
def test_an_injected_full_disk_fails_the_write_with_a_storage_error_and_the_table_recovers(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = str(tmp_path / "table")
    table = _small_files(uri, clock)
    table.append(rows(range(5)))
    monkeypatch.setattr(local_module, "open", FullDisk(tmp_path, at="open"), raising=False)
    with pytest.raises(txn.StorageError, match=r"could not write '.*'.*No space left") as info:
        table.append(rows(range(5, 10)))
    assert info.value.errno == errno.ENOSPC
    assert temporary_files(tmp_path) == []
    monkeypatch.undo()

    clock.advance(EXPIRY_MS)
    table.append(rows(range(10, 12)))
    assert sorted(table.to_arrow()["id"].to_pylist()) == [*range(5), 10, 11]
    assert storage_of(uri).list("_markers") == []
    assert table.validate().ok


def _big(ids: range) -> pa.Table:
    table = rows(ids)
    noise = np.random.default_rng(0).random(len(table))
    return table.set_column(table.schema.get_field_index("price"), "price", pa.array(noise))


def test_a_real_full_disk_fails_the_write_with_a_storage_error_and_the_table_goes_on(
    tiny_disk: Path, clock: FakeClock
) -> None:
    uri = str(tiny_disk / "table")
    table = txn.create_table(uri, SCHEMA, clock=clock)
    table.append(rows(range(5)))
    with pytest.raises(txn.StorageError, match=r"could not write data file .*No space left") as info:
        table.append(_big(range(100, 200_100)))
    assert info.value.errno == errno.ENOSPC
    assert temporary_files(tiny_disk) == []
    assert table.timeline()[-2].state == "rolledback", "the partial file was removed, so the "
    "rollback had room to run at once"
    table.append(rows(range(5, 7)))
    assert table.snapshot().count() == 7
    assert storage_of(uri).list("_markers") == []
    assert table.validate().ok


# -- markers of committed instants -----------------------------------------------------------------


def _marker_listings(counting: CountingStorage) -> list[tuple[str, str]]:
    return [c for c in counting.calls if c[0] == "list" and c[1].startswith("_markers")]


def test_a_commit_removes_its_own_markers_by_name_without_listing_them(
    table_uri: str, clock: FakeClock
) -> None:
    _small_files(table_uri, clock, record_key="id").append(rows(range(20)))
    counting = CountingStorage(storage_of(table_uri))
    table = table_on(table_uri, counting, clock=clock)
    table.upsert(rows(range(10, 30)))  # new data files and delete deltas
    assert storage_of(table_uri).list("_markers") == []
    assert _marker_listings(counting) == [], "the commit path never lists _markers/"
    removed = [c[1] for c in counting.calls if c[0] == "delete" and _is_marker(c[1])]
    assert any(m.endswith(".parquet") for m in removed)
    assert any(m.endswith(".deletedelta") for m in removed)
    assert table.validate().ok


def test_markers_a_writer_killed_after_its_commit_left_are_swept_by_maintenance_only(
    table_uri: str, clock: FakeClock
) -> None:
    compact_after = 4
    txn.create_table(table_uri, SCHEMA, clock=clock,
                     properties={"write.target_file_bytes": "2000",
                                 "metadata.compact_after": str(compact_after)}
                     ).append(rows(range(5)))
    for _ in range(2):
        faulty = Faulty(storage_of(table_uri))
        faulty.arm(1, ops={"delete"}, match=_is_marker, crash=True)
        # Dies while removing its markers: the commit landed, so the write still returns.
        table_on(table_uri, faulty, clock=clock).append(batch_reader(SCHEMA, _batches(3)))
        assert faulty.dead
        clock.advance(1_000)
    left = storage_of(table_uri).list("_markers")
    assert len(left) >= 4
    assert all(i.state == "completed" for i in txn.open_table(table_uri, clock=clock).timeline())

    swept_by = []
    for n in range(compact_after):
        counting = CountingStorage(storage_of(table_uri))
        table_on(table_uri, counting, clock=clock).append(rows(range(100 + n, 101 + n)))
        listings = _marker_listings(counting)
        if listings:
            assert listings == [("list", "_markers")], "one listing per maintenance run"
            assert any(c[0] == "put_if_absent" and "compaction" in c[1] for c in counting.calls), (
                "_markers/ is listed only by the maintenance that runs with a metadata compaction")
            swept_by.append(n)
        if not swept_by:
            assert storage_of(table_uri).list("_markers") == left, "the commit path leaves them"
        clock.advance(1_000)
    assert len(swept_by) == 1, "a metadata compaction is due once per compact_after commits"
    assert storage_of(table_uri).list("_markers") == []
    assert txn.open_table(table_uri, clock=clock).validate().ok


def test_the_next_commit_leaves_the_markers_of_a_write_still_in_flight(
    table_uri: str, clock: FakeClock
) -> None:
    _small_files(table_uri, clock).append(rows(range(5)))
    dead = _dead_writer(table_uri, clock)  # its heartbeat has not expired: it may be slow
    in_flight = storage_of(table_uri).list("_markers")
    assert in_flight and all(dead.time in m for m in in_flight)
    clock.advance(1_000)
    txn.open_table(table_uri, clock=clock).append(rows(range(5, 6)))
    assert storage_of(table_uri).list("_markers") == in_flight


def test_the_marker_sweep_removes_rolled_back_leftovers_and_leaves_writes_in_flight(
    table_uri: str, clock: FakeClock
) -> None:
    txn.create_table(table_uri, SCHEMA, clock=clock,
                     properties={"write.target_file_bytes": "2000", "metadata.compact_after": "2"}
                     ).append(rows(range(5)))
    rolled = _dead_writer(table_uri, clock)
    clock.advance(EXPIRY_MS)
    txn.open_table(table_uri, clock=clock).append(rows(range(5, 6)))  # rolls it back
    assert txn.open_table(table_uri, clock=clock).timeline()[1].state == "rolledback"
    # A paused writer of the rolled-back instant announces a file after its rollback.
    late = f"part-9-00000-late_{rolled.time}.parquet"
    storage_of(table_uri).put_if_absent(f"_markers/{late}", f"segment_9/{late}".encode())
    dead = _dead_writer(table_uri, clock)  # its heartbeat has not expired: it may be slow
    in_flight = storage_of(table_uri).list("_markers")
    in_flight.remove(f"_markers/{late}")
    assert in_flight and all(dead.time in m for m in in_flight)
    for n in range(3):  # a metadata compaction, so the sweep, runs at least once
        clock.advance(1_000)
        txn.open_table(table_uri, clock=clock).append(rows(range(10 + n, 11 + n)))
    assert storage_of(table_uri).list("_markers") == in_flight


@pytest.mark.allow_metatxn_warnings
def test_a_damaged_marker_does_not_fail_the_removal_of_a_spark_writes_unreported_files(
    table_uri: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    from txn._twophase._driver import _remove_unreported

    table = _small_files(table_uri, clock)
    table.append(rows(range(5)))
    pending = protocol_of(table._context).begin("append", "commit", new_segment=True)
    t = pending.instant.time
    storage = storage_of(table_uri)
    files = {name: f"segment_{pending.segment}/{name}" for name in
             (f"part-a_{t}.parquet", f"part-b_{t}.parquet", f"part-c_{t}.parquet")}
    for name, path in files.items():
        storage.put_if_absent(path, b"data")
        storage.put_if_absent(f"_markers/{name}", path.encode())
    damaged = f"_markers/part-c_{t}.parquet"
    storage.delete(damaged)
    storage.put_if_absent(damaged, b"")  # power loss with fsync off
    reported = files[f"part-a_{t}.parquet"]

    _remove_unreported(table._context, t, {reported}, set())

    assert storage.exists(reported)
    assert not storage.exists(files[f"part-b_{t}.parquet"]), "a failed attempt's file is removed"
    assert storage.exists(files[f"part-c_{t}.parquet"]), "nothing a damaged marker names is deleted"
    assert any(damaged in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    pending.heartbeat.stop(delete=False)
    protocol_of(table._context).roll_back(pending.instant)


def _half_written_marker(uri: str, instant_time: str, n: int) -> Path:
    """What a writer killed inside a marker's put leaves on local disk: the put's temporary."""
    folder = Path(uri) / "_markers"
    folder.mkdir(exist_ok=True)
    leftover = folder / f".part-0-0000{n}-x_{instant_time}.parquet.4242.77.{n}.tmp"
    leftover.write_bytes(b"segment_0/part")
    return leftover


def test_a_rollback_deletes_the_half_written_markers_of_its_instant_only(
    local_uri: str, clock: FakeClock
) -> None:
    """Found by tests/integration/test_kill_writers.py: a writer SIGKILLed between writing a
    marker's temporary and linking it left ``_markers/.<marker>.<pid>...tmp`` for good."""
    _small_files(local_uri, clock).append(rows(range(5)))
    dead = _dead_writer(local_uri, clock)
    clock.advance(40_000)
    other = _dead_writer(local_uri, clock)  # a slow writer, mid-put
    mine = _half_written_marker(local_uri, dead.time, 1)
    theirs = _half_written_marker(local_uri, other.time, 2)
    clock.advance(30_000)  # past heartbeat.timeout_ms (60 s) for the first writer only
    txn.open_table(local_uri, clock=clock).append(rows(range(5, 6)))
    states = {i.time: i.state for i in txn.open_table(local_uri, clock=clock).timeline()}
    assert states[dead.time] == "rolledback" and states[other.time] == "inflight"
    assert not mine.exists() and theirs.exists()
    assert all(other.time in m for m in storage_of(local_uri).list("_markers"))


def test_the_marker_sweep_deletes_half_written_markers_of_decided_instants_only(
    local_uri: str, clock: FakeClock
) -> None:
    table = _small_files(local_uri, clock)
    table.append(rows(range(5)))
    completed = table.timeline()[-1]
    done = _half_written_marker(local_uri, completed.time, 1)
    clock.advance(1_000)
    pending = protocol_of(table._context).begin("append", "commit", new_segment=True)
    in_flight = _half_written_marker(local_uri, pending.instant.time, 2)
    with table._context.timeline.lock() as lease:
        protocol_of(table._context).sweep_markers(lease)
    pending.heartbeat.stop()
    assert not done.exists() and in_flight.exists()
