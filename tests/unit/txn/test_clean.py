"""CLEAN FILES (``t.clean``): what it removes, what it keeps, and that a crash never loses a row.

Invariants, checked on the durable state of storage:

* nothing a retained snapshot needs is removed: time travel to the last ``clean.retain_commits``
  commits and the last ``clean.retain_hours`` hours reads the same rows after a clean; older
  snapshots raise ``SnapshotExpiredError`` naming the oldest reachable instant;
* ``force`` ignores retention but keeps the current snapshot and every file of a live writer;
* as in CarbonData, the files of expired ``Compacted`` and ``Marked for Delete`` segments (and
  replaced deltas) are deleted for good, and those segments leave SHOW SEGMENTS for its history;
  only orphans (files of no segment) go to ``_trash/<clean instant>/``, which they leave for good
  ``clean.trash_hours`` later (``force``: at once); ``dry_run`` changes nothing;
* a clean that fails or dies is undone (by itself, or by the next writer once its heartbeat
  expired): the table reads the same rows and ``validate()`` is clean.

Clocks are injected (``FakeClock``); faults at the storage seam (``tests/faults.py``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn import timeline
from metatxn.indexes import FILES, SEGMENTS
from tests.conftest import FakeClock
from tests.faults import InjectedFault, injected
from tests.unit.txn.helpers import SCHEMA, Faulty, batch_reader, rows, sorted_rows, storage_of, table_on
from txn._commit import protocol_of

#: Longer than the default heartbeat timeout and lock lease (60 s each).
EXPIRY_MS = 10 * 60_000
HOUR_MS = 3_600_000
#: Retention off: everything removed may be cleaned at once (the tests that need it set more).
NO_RETENTION = {"clean.retain_commits": "1", "clean.retain_hours": "0"}
_NOT_DATA = ("_timeline/", "_metadata/", "_markers/", "_trash/")


def _table(uri: str, clock: FakeClock, **properties: str) -> txn.Table:
    return txn.create_table(uri, SCHEMA, clock=clock,
                            properties={"write.target_file_bytes": "2000", **properties})


def _data_files(uri: str) -> list[str]:
    return sorted(k for k in storage_of(uri).list("", recursive=True)
                  if k.endswith((".parquet", ".deletedelta")) and not k.startswith(_NOT_DATA))


def _trash(uri: str) -> list[str]:
    return storage_of(uri).list("_trash", recursive=True)


def _everything(uri: str, *, locks: bool = True) -> dict[str, bytes]:
    """Every file of the table and its content (lock records too, unless ``locks`` is False:
    taking the table lock writes them)."""
    storage = storage_of(uri)
    return {key: storage.read(key) for key in storage.list("", recursive=True)
            if locks or not key.startswith("_timeline/lock/")}


def _removed_files(table: txn.Table) -> dict[str, int]:
    """Removed (tombstoned, not yet cleaned) files and deltas of the latest snapshot: sizes."""
    context = table._context
    resolved = context.metadata_at(context.timeline.load(), None, (FILES, SEGMENTS, "deletes"))
    found = {}
    for part in (resolved.files, resolved.deletes):
        assert part is not None
        gone = part.filter(pc.fill_null(part["deleted"], False))
        found.update(zip(gone["path"].to_pylist(), gone["size"].to_pylist(), strict=True))
    return found


def _ok(table: txn.Table) -> None:
    report = table.validate()
    assert report.ok, str(report)


def _overwritten(uri: str, clock: FakeClock, **properties: str) -> tuple[txn.Table, list[txn.Commit]]:
    table = _table(uri, clock, **properties)
    first = table.append(rows(range(20)))
    clock.advance(1_000)
    second = table.overwrite(rows(range(100, 110)))
    clock.advance(1_000)
    return table, [first, second]


# -- retention -------------------------------------------------------------------------------------


def test_nothing_is_removed_until_both_retentions_passed(table_uri: str, clock: FakeClock) -> None:
    table, _ = _overwritten(table_uri, clock)
    doomed = _removed_files(table)
    assert doomed, "the overwrite removed the first load's files"
    assert table.clean().files == []
    for i in range(10):  # clean.retain_commits (10) commits later: the hours still hold it
        table.append(rows(range(200 + i, 201 + i)))
    assert table.clean().files == []
    assert set(doomed) <= set(_data_files(table_uri))

    clock.advance(168 * HOUR_MS + 1)  # clean.retain_hours: 168
    result = table.clean()
    assert result.files == sorted(doomed)
    assert result.bytes == sum(doomed.values())
    assert result.reasons == {"marked_for_delete": len(doomed)}
    assert result.instant is not None and result.trash is None, "deleted, not moved to the trash"
    assert (result.freed_bytes, result.trashed, result.trashed_bytes) == (result.bytes, [], 0)
    assert not result.dry_run
    assert not set(doomed) & set(_data_files(table_uri))
    assert _trash(table_uri) == []
    assert [(i.action, i.state) for i in table.timeline()][-1] == ("clean", "completed")
    assert table.snapshot().count() == 20
    _ok(table)
    assert table.clean().files == [], "a second clean finds nothing"


def test_time_travel_inside_retention_reads_the_same_rows_and_past_it_is_expired(
    table_uri: str, clock: FakeClock
) -> None:
    table = _table(table_uri, clock, **{"clean.retain_commits": "2", "clean.retain_hours": "0"})
    commits, seen, moments = [], [], []
    for write in (lambda: table.append(rows(range(10))), lambda: table.overwrite(rows(range(50, 55))),
                  lambda: table.append(rows(range(60, 62))), lambda: table.append(rows(range(70, 71)))):
        clock.advance(1_000)
        commits.append(write())
        seen.append(sorted_rows(table.to_arrow()))
        clock.advance(100)
        moments.append(datetime.fromtimestamp(clock.now_ms / 1000, tz=timezone.utc))
    result = table.clean()
    assert result.reasons == {"marked_for_delete": 1}

    fresh = txn.open_table(table_uri, clock=clock)
    for commit, rows_then, moment in list(zip(commits, seen, moments, strict=True))[1:]:
        for as_of in (commit.instant, moment):
            assert sorted_rows(fresh.snapshot(as_of=as_of).to_arrow()) == rows_then
    for as_of in (commits[0].instant, moments[0]):
        with pytest.raises(txn.SnapshotExpiredError) as expired:
            fresh.snapshot(as_of=as_of)
        message = str(expired.value)
        assert f"oldest reachable instant is {commits[1].instant}" in message
        assert "clean.retain_commits" in message and "clean.retain_hours" in message


def test_force_ignores_retention_but_keeps_the_current_snapshot_and_live_writers(
    table_uri: str, clock: FakeClock
) -> None:
    table, _ = _overwritten(table_uri, clock)
    doomed = _removed_files(table)
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(2, ops={"put_if_absent"}, match=_is_marker, crash=True)
    with pytest.raises(InjectedFault):  # a writer still writing: its heartbeat is live
        table_on(table_uri, faulty, clock=clock).append(batch_reader(SCHEMA, _batches(10)))
    writing = [p for p in _data_files(table_uri) if p not in doomed and p not in _live(table)]
    assert writing, "the live writer wrote a file"
    current = sorted_rows(table.to_arrow())
    assert table.clean().files == [], "retention holds without force"

    # The writer began after the overwrite, so the snapshot it read does not need the removed
    # files: force takes them, never the writer's own.
    result = table.clean(force=True)
    assert result.files == sorted(doomed)
    assert set(writing) <= set(_data_files(table_uri))
    assert sorted_rows(table.to_arrow()) == current
    assert sorted_rows(txn.open_table(table_uri).to_arrow()) == current


def test_force_keeps_what_a_live_writer_may_have_read(table_uri: str, clock: FakeClock) -> None:
    """A writer read a snapshot before it began: files removed after it began stay while it
    runs, even with force."""
    table, _ = _overwritten(table_uri, clock)
    doomed = _removed_files(table)
    protocol = protocol_of(table._context)
    pending = protocol.begin("append", "commit", new_segment=True)
    pending.heartbeat.stop(delete=False)  # no beating thread: the fake clock keeps it alive
    clock.advance(1_000)
    table.overwrite(rows(range(300, 303)))
    later = {k: v for k, v in _removed_files(table).items() if k not in doomed}
    assert later
    assert table.clean(force=True).files == sorted(doomed)
    assert set(later) <= set(_data_files(table_uri))
    protocol.roll_back(pending.instant)
    trashed = _trash(table_uri)
    assert table.clean(force=True).files == sorted([*later, *trashed]), "force empties the trash too"
    _ok(table)


# -- what is removed -------------------------------------------------------------------------------


def test_dry_run_lists_what_a_clean_removes_and_changes_nothing(table_uri: str, clock: FakeClock) -> None:
    table, _ = _overwritten(table_uri, clock, **NO_RETENTION)
    before = _everything(table_uri)
    listed = table.clean(dry_run=True)
    assert _everything(table_uri) == before
    assert listed.dry_run and listed.instant is None and listed.trash is None
    assert listed.files and listed.files == sorted(_removed_files(table))
    done = table.clean()
    assert (done.files, done.bytes) == (listed.files, listed.bytes)


def test_replaced_delete_deltas_are_removed(table_uri: str, clock: FakeClock) -> None:
    table = _table(table_uri, clock, **NO_RETENTION)
    table.append(rows(range(10)))
    for i in range(3):  # deletes.compaction.threshold 1: each delta replaces the one before
        table.delete(pc.field("id") == i)
    expected = sorted_rows(table.to_arrow())
    replaced = _removed_files(table)
    assert len(replaced) == 2 and all(p.endswith(".deletedelta") for p in replaced)
    clock.advance(1_000)  # clean.retain_hours 0: what was removed before now
    result = table.clean()
    assert result.files == sorted(replaced) and result.reasons == {"replaced_delta": 2}
    assert result.bytes == sum(replaced.values())
    assert sorted_rows(table.to_arrow()) == expected
    assert sorted_rows(txn.open_table(table_uri).to_arrow()) == expected
    _ok(table)


@pytest.mark.allow_metatxn_warnings  # the rollback logs the damaged marker it cannot follow
def test_an_orphan_of_a_killed_writer_is_removed(table_uri: str, clock: FakeClock) -> None:
    """A killed writer's files go with its rollback (its markers name them); one whose marker is
    damaged cannot be located by the rollback and is an orphan: the clean removes it."""
    table = _table(table_uri, clock)
    table.append(rows(range(5)))
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(3, ops={"put_if_absent"}, match=_is_marker, crash=True)
    with pytest.raises(InjectedFault):
        table_on(table_uri, faulty, clock=clock).append(batch_reader(SCHEMA, _batches(10)))
    storage = storage_of(table_uri)
    markers = storage.list("_markers")
    assert len(markers) == 2
    orphan = storage.read(markers[0]).decode()
    storage.put(markers[0], b"garbage")
    before = sorted_rows(table.to_arrow())

    assert table.clean().files == [], "the writer is alive: nothing of it goes"
    clock.advance(EXPIRY_MS)
    result = table.clean()
    assert result.files == [orphan] and result.reasons == {"orphan": 1}
    assert result.bytes > 0
    assert [p for p in _data_files(table_uri) if p.endswith(".parquet")] == _live(table)
    assert sorted_rows(table.to_arrow()) == before
    _ok(table)


def test_files_of_a_live_writer_and_names_metatxn_does_not_write_are_never_removed(
    table_uri: str, clock: FakeClock
) -> None:
    table, _ = _overwritten(table_uri, clock, **NO_RETENTION)
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(2, ops={"put_if_absent"}, match=_is_marker, crash=True)
    with pytest.raises(InjectedFault):
        table_on(table_uri, faulty, clock=clock).append(batch_reader(SCHEMA, _batches(10)))
    storage = storage_of(table_uri)
    pending = next(i for i in table.timeline() if i.state == "inflight")
    unannounced = f"segment_9/part-9-00000-x_{pending.time}.parquet"
    storage.put(unannounced, b"a file of the live writer whose marker is not written yet")
    storage.put("notes/readme.parquet", b"not a name metatxn writes")
    writer_files = [p for p in _data_files(table_uri) if pending.time in p]
    clock.advance(EXPIRY_MS // 20)  # not expired

    table.clean(force=True)
    assert set(writer_files) <= set(_data_files(table_uri))
    assert storage.exists("notes/readme.parquet")


def test_trash_is_deleted_for_good_after_clean_trash_hours(table_uri: str, clock: FakeClock) -> None:
    table, _ = _overwritten(table_uri, clock, **NO_RETENTION)
    orphan = _orphan(table)
    first = table.clean()
    trashed = _trash(table_uri)
    assert trashed == [f"{first.trash}/{orphan}"] and first.trashed == [orphan]
    clock.advance(23 * HOUR_MS)
    assert table.clean().files == [] and _trash(table_uri) == trashed
    clock.advance(HOUR_MS)
    gone = table.clean()
    assert gone.files == trashed and gone.reasons == {"expired_trash": len(trashed)}
    assert gone.bytes == gone.freed_bytes == first.trashed_bytes and gone.trash is None
    assert _trash(table_uri) == []
    _ok(table)


def test_force_empties_the_trash(table_uri: str, clock: FakeClock) -> None:
    table, _ = _overwritten(table_uri, clock, **NO_RETENTION)
    _orphan(table)
    assert table.clean().trashed
    trashed = _trash(table_uri)
    assert trashed
    emptied = table.clean(force=True)
    assert emptied.files == trashed and emptied.reasons == {"expired_trash": len(trashed)}
    assert _trash(table_uri) == []


def test_an_orphan_put_back_from_the_trash_by_hand_is_read_as_before(
    table_uri: str, clock: FakeClock
) -> None:
    """The trash keeps each file under its table-relative path: moving it back restores it."""
    table, _ = _overwritten(table_uri, clock, **NO_RETENTION)
    orphan = _orphan(table)
    result = table.clean()
    storage = storage_of(table_uri)
    storage.put_if_absent(orphan, storage.read(f"{result.trash}/{orphan}"))
    storage.delete(f"{result.trash}/{orphan}")
    assert storage.exists(orphan) and table.snapshot().count() == 10


# -- CarbonData's CLEAN FILES: direct deletion, the trash, and SHOW SEGMENTS' history --------------


def test_expired_segments_are_deleted_for_good_and_only_orphans_go_to_the_trash(
    table_uri: str, clock: FakeClock
) -> None:
    """Issue 22, item 11: CarbonData deletes expired Compacted and Marked-for-Delete segments
    directly; only stale data (files of no segment) goes to the trash, and the report says
    which is which: freed bytes are what left storage, not what moved into the trash."""
    table, _ = _overwritten(table_uri, clock)
    doomed = _removed_files(table)
    orphan = _orphan(table)
    orphan_size = storage_of(table_uri).size(orphan)
    result = table.clean(force=True)
    assert result.reasons == {"marked_for_delete": len(doomed), "orphan": 1}
    assert result.trashed == [orphan] and result.trashed_bytes == orphan_size
    assert result.freed_bytes == sum(doomed.values())
    assert result.bytes == result.freed_bytes + result.trashed_bytes
    assert _trash(table_uri) == [f"{result.trash}/{orphan}"], "only the orphan is in the trash"
    assert not set(doomed) & set(_data_files(table_uri)), "the deleted segment's files are gone"
    assert sorted_rows(table.to_arrow()) == sorted_rows(rows(range(100, 110)))
    _ok(table)


def test_a_cleaned_segment_leaves_show_segments_for_its_history(table_uri: str, clock: FakeClock) -> None:
    """Issue 22, items 10 and 12: CarbonData's walk-through, four loads, a MINOR compaction into
    0.1 and CLEAN FILES: SHOW SEGMENTS shows only 0.1 afterwards; SHOW HISTORY SEGMENTS lists
    the compacted ones with their final status and the clean that removed them."""
    table = _table(table_uri, clock)
    for i in range(4):
        table.append(rows(range(i * 10, i * 10 + 10)))
    assert table.compact("minor").segment == "0.1"
    shown = [(s.id, s.status) for s in table.segments()]
    assert shown == [("3", "Compacted"), ("2", "Compacted"), ("1", "Compacted"), ("0.1", "Success"),
                     ("0", "Compacted")]
    assert table.clean().segments == [], "within retention the files stay, and so do the segments"
    assert [s.id for s in table.segments()] == ["3", "2", "1", "0.1", "0"]

    result = table.clean(force=True)
    assert result.segments == ["0", "1", "2", "3"]
    assert [(s.id, s.status) for s in table.segments()] == [("0.1", "Success")]
    fresh = txn.open_table(table_uri, clock=clock)
    assert [s.id for s in fresh.segments()] == ["0.1"]
    history = fresh.segments(history=True)
    assert [(s.id, s.status, s.merged_to, s.visible) for s in history] == [
        ("0.1", "Success", None, True), ("3", "Compacted", "0.1", False), ("2", "Compacted", "0.1", False),
        ("1", "Compacted", "0.1", False), ("0", "Compacted", "0.1", False)]
    for segment in history[1:]:
        assert segment.cleaned_instant == result.instant
        assert segment.cleaned == datetime.fromtimestamp(
            timeline.parse_time(result.instant) / 1000, tz=timezone.utc)
        assert segment.rows == 10 and segment.load_start is not None
    assert history[0].cleaned_instant is None and history[0].cleaned is None
    assert table.clean(force=True).segments == [], "a segment leaves once"
    assert table.append(rows([99])).segment == "4", "ids are never reused"
    _ok(table)


def test_a_deleted_segment_leaves_only_once_its_files_are_removed(table_uri: str, clock: FakeClock) -> None:
    """DELETE SEGMENT marks; the segment stays listed (Marked for Delete) until CLEAN FILES
    removed its files past retention, and a segment removed inside retention stays."""
    table = _table(table_uri, clock, **{"clean.retain_commits": "2", "clean.retain_hours": "0"})
    for i in range(3):
        table.append(rows(range(i * 10, i * 10 + 10)))
        clock.advance(1_000)
    table.delete_segments(["0"])
    clock.advance(1_000)
    table.append(rows([50]))
    clock.advance(1_000)
    table.delete_segments(["1"])  # inside retention (2 commits): its files stay
    clock.advance(1_000)
    result = table.clean()
    assert result.segments == ["0"] and result.reasons == {"marked_for_delete": 1}
    assert [(s.id, s.status) for s in table.segments()] == [
        ("3", "Success"), ("2", "Success"), ("1", "Marked for Delete")]
    assert [(s.id, s.status, s.visible) for s in table.segments(history=True)][-1] == (
        "0", "Marked for Delete", False)
    with pytest.raises(txn.SegmentNotFoundError):
        table.delete_segments(["0"])


@pytest.mark.allow_metatxn_warnings  # each file it could not delete is logged
def test_a_clean_that_dies_after_its_commit_point_leaves_files_the_next_clean_deletes(
    table_uri: str, clock: FakeClock
) -> None:
    """The clean purges the records at its commit point and deletes the files after it, as
    CarbonData writes its table status before deleting: a crash in between leaves files no
    snapshot needs, and the next clean deletes them (not into the trash)."""
    table, _ = _overwritten(table_uri, clock, **NO_RETENTION)
    doomed = _removed_files(table)
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(1, ops={"delete"}, match=lambda p: p in doomed, crash=True)
    died = table_on(table_uri, faulty, clock=clock).clean()  # past its commit point: it returns
    assert faulty.dead and died.files == [] and died.segments == ["0"]
    assert [(i.action, i.state) for i in table.timeline()][-1] == ("clean", "completed")
    assert set(doomed) <= set(_data_files(table_uri)), "died before deleting"
    assert [s.id for s in table.segments()] == ["1"]
    _ok(table)
    result = table.clean()
    assert result.files == sorted(doomed) and result.reasons == {"leftover": len(doomed)}
    assert result.trashed == [] and _trash(table_uri) == []
    assert not set(doomed) & set(_data_files(table_uri))
    assert table.clean().files == []
    _ok(table)


@pytest.mark.allow_metatxn_warnings  # each file it could not delete is logged
def test_a_leftover_whose_purge_a_metadata_compaction_folded_is_no_unreferenced_file(
    table_uri: str, clock: FakeClock
) -> None:
    """A metadata compaction folds purge records away (a base keeps no record of a purged key),
    so a leftover of a clean that died after its commit point is then named by no record; it is
    no committed file whose reference was lost: validate() finds it in that clean's
    ``CleanMetadata.removed`` and reports nothing, and the next clean removes it (an orphan now,
    into the trash). Found by the table state machine (issue 28)."""
    table, _ = _overwritten(table_uri, clock, **NO_RETENTION, **{"metadata.compact_after": "1"})
    doomed = _removed_files(table)
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(1, ops={"delete"}, match=lambda p: p in doomed, crash=True)
    table_on(table_uri, faulty, clock=clock).clean()  # past its commit point: it returns
    assert faulty.dead and set(doomed) <= set(_data_files(table_uri))
    clock.advance(1_000)
    table.append(rows([200]))
    table.maintain()
    assert not set(doomed) & set(_removed_files(table)), "the purge records are folded away"
    context = table._context
    named = context.metadata_at(context.timeline.load(), None, (FILES,)).files
    assert named is not None and not set(doomed) & set(named["path"].to_pylist())
    _ok(table)
    clock.advance(1_000)
    result = table.clean()
    assert sorted(result.trashed) == sorted(doomed) and result.reasons == {"orphan": len(doomed)}
    assert not set(doomed) & set(_data_files(table_uri))
    _ok(table)
    assert sorted_rows(table.to_arrow()) == sorted_rows(rows([*range(100, 110), 200]))


def test_a_clean_of_an_external_segment_hides_it_and_never_deletes_its_files(
    table_uri: str, clock: FakeClock, tmp_path: Path
) -> None:
    folder = tmp_path / "external"
    folder.mkdir()
    import pyarrow.parquet as pq

    pq.write_table(rows(range(500, 505)), folder / "part-0.parquet")
    table = _table(table_uri, clock, **NO_RETENTION)
    table.append(rows(range(5)))
    added = table.add_segment(str(folder))
    table.delete_segments([added.segment])
    clock.advance(1_000)
    result = table.clean()
    assert result.segments == [added.segment] and result.files == []
    assert [s.id for s in table.segments()] == ["0"]
    assert (folder / "part-0.parquet").exists()
    _ok(table)


# -- one clean at a time, and crashes --------------------------------------------------------------


def test_a_second_clean_is_refused_while_one_runs(table_uri: str, clock: FakeClock) -> None:
    table, _ = _overwritten(table_uri, clock, **NO_RETENTION)
    _orphan(table)
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(1, match=lambda p: p.startswith("_trash/"), crash=True)
    with pytest.raises(InjectedFault):  # dies while moving: its instant stays pending
        table_on(table_uri, faulty, clock=clock).clean()
    running = next(i for i in table.timeline() if i.action == "clean")
    assert running.state == "inflight"
    before = _everything(table_uri, locks=False)
    with pytest.raises(txn.TxnError, match=f"clean instant {running.time} is still running"):
        table.clean()
    assert _everything(table_uri, locks=False) == before

    clock.advance(EXPIRY_MS)
    result = table.clean()  # rolls the dead clean back, then cleans
    states = {i.time: i.state for i in table.timeline()}
    assert states[running.time] == "rolledback"
    assert result.files and result.instant != running.time
    assert table.snapshot().count() == 10
    _ok(table)


def _linked_copy(template: Path, uri: Path) -> None:
    """A copy of the template table for one case, its files hard links: local storage never
    writes into an existing file (a new one, renamed or linked in place; removal unlinks a
    name), so no case can change the template, and the dozens of cases copy nothing."""
    shutil.copytree(template, uri, copy_function=os.link)


@pytest.mark.slow
@pytest.mark.parametrize("crash", [True, False], ids=["death", "exception"])
def test_a_failure_at_any_storage_call_of_a_clean_loses_nothing(tmp_path: Path, crash: bool) -> None:
    """Fail each storage call of a clean in turn, before it reaches storage and after it landed.
    Exception: the clean rolls itself back. Death: the next writer rolls it back once its
    heartbeat expired. Either way the table reads the same rows, and the past snapshots inside
    retention too, and validate() is clean; a later clean then finishes the job."""
    clock = FakeClock()
    template = tmp_path / "template"
    # A lock whose release failed stays held until its lease ends, which a clock standing still
    # never sees: give up waiting for it at once (the instant then expires into recovery).
    table = _table(str(template), clock, **{"clean.retain_commits": "2", "clean.retain_hours": "0",
                                            "lock.timeout_ms": "100"})
    table.append(rows(range(10)))
    table.delete(pc.field("id") == 1)
    table.delete(pc.field("id") == 2)  # replaces the first delta
    table.overwrite(rows(range(100, 106)))  # marks the first segment for delete
    table.delete(pc.field("id") == 100)
    kept = table.timeline()[-2].time  # the overwrite: inside retention
    expected = sorted_rows(table.to_arrow())
    expected_then = sorted_rows(table.snapshot(as_of=kept).to_arrow())
    after_append = sorted_rows(pa.Table.from_pylist(expected + rows([900]).to_pylist(), schema=SCHEMA))
    doomed = _removed_files(table)
    clock.advance(1_000)  # clean.retain_hours 0: what was removed before now

    probe_uri = tmp_path / "probe"
    shutil.copytree(template, probe_uri)
    probe = Faulty(storage_of(str(probe_uri)))
    assert table_on(str(probe_uri), probe, clock=FakeClock(clock.now_ms)).clean().files
    calls = len(probe.calls)
    for nth in range(1, calls + 1):
        for when in ("before", "after"):
            uri = tmp_path / f"t-{nth}-{when}"
            _linked_copy(template, uri)
            own = FakeClock(clock.now_ms)
            faulty = Faulty(storage_of(str(uri)))
            faulty.arm(nth, when=when, crash=crash)  # type: ignore[arg-type]
            try:
                table_on(str(uri), faulty, clock=own).clean()
            except Exception as exc:  # what matters is what is left on storage
                assert injected(exc) is not None, exc
            own.advance(EXPIRY_MS)
            survivor = txn.open_table(str(uri), clock=own)
            case = (nth, when, faulty.fault.call if faulty.fault else None)
            assert sorted_rows(survivor.to_arrow()) == expected, case
            assert sorted_rows(survivor.snapshot(as_of=kept).to_arrow()) == expected_then, case
            survivor.append(rows([900]))  # recovers a dead clean
            assert survivor.validate().ok, (case, str(survivor.validate()))
            survivor.clean()
            assert sorted_rows(survivor.to_arrow()) == after_append, case
            assert survivor.validate().ok, (case, str(survivor.validate()))
            left = set(doomed) & set(_data_files(str(uri)))
            assert not left, (case, "a later clean finishes the job", left)
            assert not _trash(str(uri)), (case, "nothing of this table is an orphan")
            assert [s.id for s in survivor.segments()][-1] == "1", (case, "segment 0 left")
            shutil.rmtree(uri)


def test_a_writer_committing_at_any_point_of_a_clean_loses_nothing(tmp_path: Path) -> None:
    """Another writer appends (a whole write: files, markers, commit) just before each storage
    call of a forced clean in turn: whatever the clean listed or resolved by then, it never takes
    that writer's files, and every acknowledged row is there afterwards. (While the clean holds
    the table lock the append times out at once and writes nothing.)"""
    clock = FakeClock()
    template = tmp_path / "template"
    table = _table(str(template), clock, **NO_RETENTION, **{"lock.timeout_ms": "100"})
    table.append(rows(range(10)))
    table.overwrite(rows(range(100, 106)))
    clock.advance(1_000)
    probe_uri = tmp_path / "probe"
    shutil.copytree(template, probe_uri)
    probe = Faulty(storage_of(str(probe_uri)))
    assert table_on(str(probe_uri), probe, clock=FakeClock(clock.now_ms)).clean(force=True).files
    appended = 0
    for nth in range(1, len(probe.calls) + 1):
        uri = tmp_path / f"t-{nth}"
        _linked_copy(template, uri)
        own = FakeClock(clock.now_ms)
        faulty = Faulty(storage_of(str(uri)))
        other = txn.open_table(str(uri), clock=own)
        acknowledged: list[int] = []

        def append(other: txn.Table = other, ids: list[int] = acknowledged, nth: int = nth) -> None:
            try:
                other.append(rows([1_000 + nth]))
            except txn.LockTimeoutError:
                return
            ids.append(1_000 + nth)

        faulty.interleave(nth, append)
        table_on(str(uri), faulty, clock=own).clean(force=True)
        survivor = txn.open_table(str(uri), clock=own)
        appended += len(acknowledged)
        assert sorted(survivor.to_arrow()["id"].to_pylist()) == [*range(100, 106), *acknowledged]
        assert survivor.validate().ok, (nth, str(survivor.validate()))
        shutil.rmtree(uri)
    assert appended > 10, "most points of the clean let the other writer commit"


# -- helpers ---------------------------------------------------------------------------------------


def _is_marker(path: str) -> bool:
    return path.startswith("_markers")


def _orphan(table: txn.Table) -> str:
    """Put a data file no record names, written by the table's first (decided) instant, as a
    failed Spark task attempt leaves one: CarbonData's stale segment data."""
    first = table.timeline()[0].time
    path = f"segment_0/part-0-09999-0123456789abcdef_{first}.parquet"
    storage_of(table.uri).put(path, b"a file of a failed task attempt")
    return path


def _live(table: txn.Table) -> list[str]:
    prefix = table.uri.rstrip("/") + "/"
    return sorted(f.path[len(prefix):] for f in table.snapshot().files())


def _batches(count: int) -> Iterator[pa.RecordBatch]:
    for i in range(count):
        yield rows(range(1_000 + i * 100, 1_100 + i * 100)).to_batches()[0]


def test_the_timeline_accepts_clean_instants() -> None:
    assert "clean" in timeline.ACTIONS


def test_clean_deletes_the_temporaries_of_writers_killed_inside_a_put_once_no_put_can_own_them(
    local_uri: str, clock: FakeClock
) -> None:
    """Local disk stages each put in ``.<name>.<pid>.<thread>.<n>.tmp``; a writer killed between
    writing it and linking it leaves it behind, where no listing shows it. CLEAN FILES deletes
    those of metatxn's own folders untouched for an hour (and heartbeat.timeout_ms), by the
    filesystem's clock; a dry run lists them. Younger ones (a put may stall) and temporaries
    metatxn did not name (a Spark checkpoint's, a data folder's) stay."""
    table = _table(local_uri, clock, **NO_RETENTION)
    table.append(rows(range(5)))
    root = Path(local_uri)
    now = timeline.format_time(clock())
    old = [root / "_timeline" / f".{now}.commit.requested.7.8.9.tmp",
           root / "_metadata" / "files" / f".{now}.log.arrow.7.8.10.tmp",
           root / "_timeline" / "lock" / ".000000000009.7.8.11.tmp"]
    (root / ".streaming").mkdir()
    kept = [root / "_timeline" / ".20990101000000000.commit.requested.7.8.12.tmp",  # 30 min old
            root / ".streaming" / ".offsets.7f3c-uuid.tmp",  # not a name metatxn writes
            root / "segment_0" / ".part-0.parquet.7.8.13.tmp"]  # nor a folder it puts in
    for path in (*old, *kept):
        path.write_bytes(b"half written")
    for path in (*old, *kept[1:]):
        os.utime(path, (time.time() - 2 * 3_600,) * 2)
    os.utime(kept[0], (time.time() - 1_800,) * 2)
    before = _everything(local_uri)
    expected = sorted(str(p.relative_to(root)) for p in old)

    preview = table.clean(dry_run=True)
    assert preview.reasons == {"temporary": 3} and preview.files == expected
    assert all(p.exists() for p in old)

    result = table.clean()

    assert result.reasons == {"temporary": 3}
    assert result.files == expected
    assert result.bytes == 3 * len(b"half written")
    assert not any(p.exists() for p in old) and all(p.exists() for p in kept)
    assert _everything(local_uri, locks=False) == {k: v for k, v in before.items()
                                                   if not k.startswith("_timeline/lock/")}
    assert table.to_arrow().num_rows == 5
    _ok(table)


def test_a_clean_instant_records_the_temporaries_it_deleted(local_uri: str, clock: FakeClock) -> None:
    table = _table(local_uri, clock, **NO_RETENTION)
    table.append(rows(range(5)))
    leftover = Path(local_uri) / "_metadata" / "segments" / f".{table.timeline()[0].time}.log.arrow.1.2.3.tmp"
    leftover.write_bytes(b"half written")
    table.delete_segments(["0"])  # gives the clean a plan, so an instant
    clock.advance(1_000)
    table.append(rows(range(5, 6)))
    os.utime(leftover, (time.time() - 2 * 3_600,) * 2)

    result = table.clean()

    assert result.instant is not None and result.reasons["temporary"] == 1
    record = timeline.Timeline(storage_of(local_uri)).read_metadata(
        next(i for i in table.timeline() if i.time == result.instant))
    assert record["temporaries_deleted"] == [str(leftover.relative_to(local_uri))]
    assert not leftover.exists()
    _ok(table)
