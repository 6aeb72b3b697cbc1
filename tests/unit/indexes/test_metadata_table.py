"""The metadata table: visibility, compaction and cleaning.

* Visibility: a block is read only if its instant completed on the *data* timeline; blocks of
  pending, failed or foreign instants are never used, even if their deltacommit completed.
* Compaction folds blocks into a base without changing any answer: every resolve after it
  equals the same resolve before it.
* Cleaning keeps what the snapshots of the last ``retain_commits`` commits need, and older
  snapshots raise ``SnapshotExpiredError`` instead of answering wrongly.
"""

from __future__ import annotations

import contextlib
import re
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
import pytest

import txn
from metatxn import indexes, timeline
from metatxn.indexes import (
    COLUMN_STATS,
    DELETES,
    FILES,
    SCHEMAS,
    SEGMENTS,
    STREAMS,
    MetadataChanges,
    MetadataTable,
    SegmentEntry,
)
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, Faulty, rows, sorted_rows, storage_of, table_on

ALL = (FILES, SEGMENTS, COLUMN_STATS, DELETES, STREAMS, SCHEMAS)


def _completed(table: txn.Table) -> dict[str, str]:
    return {i.time: i.completed_at or "" for i in table.timeline() if i.state == "completed"}


def _metadata(table: txn.Table) -> MetadataTable:
    return MetadataTable(storage_of(table.uri), table.schema)


def _canonical(snapshot: indexes.MetadataSnapshot) -> tuple[Any, ...]:
    """A resolve as plain values; column statistics of removed files are not part of the answer."""
    assert snapshot.files is not None and snapshot.segments is not None
    assert snapshot.column_stats is not None
    return (snapshot.files.sort_by("path").to_pylist(),
            dict(sorted(snapshot.segments.items())),
            indexes.live(snapshot.column_stats).sort_by("path").to_pylist())


def _resolve_all(table: txn.Table, bounds: list[str]) -> list[tuple[Any, ...]]:
    metadata, completed = _metadata(table), _completed(table)
    return [_canonical(metadata.resolve(completed, bound, partitions=ALL)) for bound in bounds]


def _bases(uri: str) -> list[str]:
    return [k for k in storage_of(uri).list("", recursive=True) if k.endswith(".base.arrow")]


def _logs(uri: str, partition: str = FILES) -> list[str]:
    return [k for k in storage_of(uri).list(f"_metadata/{partition}") if k.endswith(".log.arrow")]


def _loads(table: txn.Table, clock: FakeClock, count: int) -> list[txn.Commit]:
    commits = []
    for i in range(count):
        clock.advance(1_000)
        if i == count - 2:
            commits.append(table.overwrite(rows(range(i * 10, i * 10 + 3), region="us")))
        else:
            commits.append(table.append(rows(range(i * 10, i * 10 + 5))))
    return commits


# -- visibility -------------------------------------------------------------------------------------


def test_blocks_of_an_instant_that_never_completed_on_the_data_timeline_are_ignored(
    table_uri: str, clock: FakeClock
) -> None:
    """A foreign block adds a phantom file, removes a real one and adds a segment; its
    deltacommit even completes on the metadata timeline. No resolve, snapshot or compaction
    ever uses it."""
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"metadata.compact_after": "100"})
    commits = _loads(table, clock, 2)
    before = _resolve_all(table, [commits[-1].completed_at])[0]
    visible = (sorted_rows(table.to_arrow()), [(s.id, s.status) for s in table.segments()])

    never = timeline.format_time(clock.now_ms - 3_600_000)  # no data instant has this time
    real = commits[0].paths_added[0]
    phantom = pa.Table.from_pylist([{
        "path": "segment_9/phantom.parquet", "segment": "9", "partition": "", "format": "parquet",
        "rows": 1000, "size": 1, "instant": never, "deleted": False}], schema=indexes.FILES_SCHEMA)
    changes = MetadataChanges(
        files=pa.concat_tables([phantom, indexes.tombstones(indexes.FILES_SCHEMA, [real])]),
        segments=[SegmentEntry(id="9", status=indexes.SegmentStatus.SUCCESS, rows=1000)])
    metadata = _metadata(table)
    with timeline.Timeline(storage_of(table_uri), clock=clock).lock() as lease:
        metadata.write_delta(never, changes, lease=lease)
    assert any(i.time == never and i.state == "completed"
               for i in metadata.timeline.load().completed()), "its deltacommit did complete"
    assert f"_metadata/files/{never}.log.arrow" in _logs(table_uri)

    assert _resolve_all(table, [commits[-1].completed_at])[0] == before
    assert _canonical(metadata.resolve(_completed(table), None, partitions=ALL)) == before
    fresh = txn.open_table(table_uri, clock=clock)
    for reader in (table, fresh):
        assert (sorted_rows(reader.to_arrow()),
                [(s.id, s.status) for s in reader.segments()]) == visible
        assert reader.snapshot().count() == len(visible[0])

    with timeline.Timeline(storage_of(table_uri), clock=clock).lock() as lease:
        order = sorted(_completed(table).items(), key=lambda item: item[1])
        metadata.compact(order, lease=lease)
    assert _bases(table_uri)
    assert _resolve_all(table, [commits[-1].completed_at])[0] == before
    assert sorted_rows(txn.open_table(table_uri).to_arrow()) == visible[0]


def test_blocks_of_a_pending_write_are_invisible_until_it_completes(
    table_uri: str, clock: FakeClock
) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    table.append(rows(range(3)))
    faulty = Faulty(storage_of(table_uri))
    writer = table_on(table_uri, faulty, clock=clock)
    faulty.arm(1, when="before", ops={"put_if_absent"},
               match=lambda p: re.fullmatch(r"_timeline/\d{17}_\d{17}\.commit", p) is not None)
    with pytest.raises(txn.CommitStateUnknownError):
        writer.append(rows(range(3, 6)))
    pending = table.timeline()[-1]
    assert pending.state == "inflight"
    assert f"_metadata/files/{pending.time}.log.arrow" in _logs(table_uri)
    resolved = _metadata(table).resolve(_completed(table), None, partitions=ALL)
    assert resolved.files is not None and resolved.segments is not None
    assert resolved.files.num_rows == 1 and set(resolved.segments) == {"0"}
    assert table.snapshot().count() == 3


# -- compaction -------------------------------------------------------------------------------------


def test_compaction_writes_a_base_and_changes_no_answer(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock, partition_by=["region"],
                             properties={"metadata.compact_after": "100"})
    commits = _loads(table, clock, 6)
    bounds = [c.completed_at for c in commits]
    before = _resolve_all(table, bounds)
    assert _bases(table_uri) == []

    metadata = _metadata(table)
    with timeline.Timeline(storage_of(table_uri), clock=clock).lock() as lease:
        order = sorted(_completed(table).items(), key=lambda item: item[1])
        compaction = metadata.compact(order, lease=lease)
    horizon = bounds[-1]
    assert sorted(_bases(table_uri)) == sorted(
        f"_metadata/{p}/{compaction}_{horizon}.base.arrow" for p in ALL)
    assert _resolve_all(table, bounds) == before

    latest = metadata.resolve(_completed(table), None, partitions=ALL)
    assert all(path.endswith(".base.arrow") for path in latest.files_read), (
        "the latest resolve reads the bases only")
    clock.advance(1_000)
    after = table.append(rows(range(900, 902)))
    latest = metadata.resolve(_completed(table), None, partitions=ALL)
    assert sorted(p.rsplit("/", 1)[1] for p in latest.files_read if p.endswith(".log.arrow")) == [
        f"{after.instant}.log.arrow"] * 3
    assert _resolve_all(table, bounds) == before


def test_automatic_compaction_runs_every_compact_after_commits(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"metadata.compact_after": "3",
                                         "metadata.retain_commits": "100"})
    commits: list[txn.Commit] = []
    answers: list[tuple[Any, ...]] = []
    for i in range(7):
        clock.advance(1_000)
        commits.append(table.append(rows(range(i * 10, i * 10 + 2))))
        answers.append(_resolve_all(table, [commits[-1].completed_at])[0])
    compactions = [i for i in _metadata(table).timeline.load().completed() if i.action == "compaction"]
    assert len(compactions) == 2
    assert len([b for b in _bases(table_uri) if b.startswith("_metadata/files/")]) == 2
    assert _resolve_all(table, [c.completed_at for c in commits]) == answers


def test_a_compaction_whose_writer_died_is_never_used_and_is_cleared(
    table_uri: str, clock: FakeClock
) -> None:
    """The writer dies after writing bases but before completing its compaction instant: the
    bases are ignored, and the next writer retires the compaction and deletes them."""
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"metadata.compact_after": "2"})
    table.append(rows(range(3)))
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(1, ops={"put_if_absent"}, crash=True,
               match=lambda p: re.fullmatch(r"_metadata/_timeline/\d{17}_\d{17}\.compaction", p)
               is not None)
    # The data commit landed before the compaction (after-commit maintenance) died, so the
    # write returns its commit: a landed commit is never reported as a failure.
    commit = table_on(table_uri, faulty, clock=clock).append(rows(range(3, 6)))
    assert commit.rows_added == 3
    assert faulty.dead, "the compaction's completion was refused"
    partial = _bases(table_uri)
    assert partial, "bases were written before the crash"
    assert [i.state for i in _metadata(table).timeline.load() if i.action == "compaction"] == [
        "inflight"]

    reader = txn.open_table(table_uri, clock=clock)
    assert sorted(reader.to_arrow()["id"].to_pylist()) == list(range(6)), "the commit had landed"
    metadata = _metadata(table)
    assert not any(p.endswith(".base.arrow")
                   for p in metadata.resolve(_completed(table), None).files_read)

    clock.advance(10 * 60_000)  # the dead writer's lock lease ends
    survivor = txn.open_table(table_uri, clock=clock)
    survivor.append(rows(range(6, 7)))
    states = [i.state for i in _metadata(table).timeline.load() if i.action == "compaction"]
    assert states[0] == "rolledback"
    assert not set(partial) & set(_bases(table_uri))
    assert sorted(survivor.to_arrow()["id"].to_pylist()) == list(range(7))
    assert survivor.validate().ok


# -- cleaning and retention -------------------------------------------------------------------------


def test_cleaning_keeps_the_last_retained_commits_and_expires_older_snapshots(
    table_uri: str, clock: FakeClock
) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"metadata.compact_after": "2",
                                         "metadata.retain_commits": "2"})
    commits: list[txn.Commit] = []
    seen: list[list[dict[str, Any]]] = []
    moments: list[datetime] = []
    for i in range(9):
        clock.advance(1_000)
        commits.append(table.append(rows(range(i * 10, i * 10 + 3))))
        seen.append(sorted_rows(table.to_arrow()))
        clock.advance(100)
        moments.append(datetime.fromtimestamp(clock.now_ms / 1000, tz=timezone.utc))

    fresh = txn.open_table(table_uri, clock=clock)
    outcomes: list[bool] = []
    for commit, expected, moment in zip(commits, seen, moments, strict=True):
        for as_of in (commit.instant, moment):
            try:
                snap = fresh.snapshot(as_of=as_of)
            except txn.SnapshotExpiredError as exc:
                assert "no longer retained" in str(exc) and "metadata.retain_commits" in str(exc)
                outcomes.append(False)
                continue
            assert sorted_rows(snap.to_arrow()) == expected
            outcomes.append(True)
    retained = outcomes[::2]
    assert retained[-2:] == [True, True], "the last retain_commits commits stay resolvable"
    assert retained[0] is False, "the oldest snapshots are gone"
    assert retained == sorted(retained), "expiry is a prefix of the history"
    assert outcomes[::2] == outcomes[1::2], "an instant and a moment just after it agree"
    assert issubclass(txn.SnapshotExpiredError, txn.TxnError)

    files = storage_of(table_uri).list("_metadata/files")
    assert len([f for f in files if f.endswith(".base.arrow")]) <= 2
    assert len([f for f in files if f.endswith(".log.arrow")]) <= 3
    assert fresh.snapshot().count() == 27 and fresh.validate().ok


def test_the_metadata_table_raises_snapshot_expired_for_a_cleaned_bound(
    table_uri: str, clock: FakeClock
) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"metadata.compact_after": "2",
                                         "metadata.retain_commits": "1"})
    commits = [table.append(rows(range(i, i + 1))) for i in range(6)]
    metadata = _metadata(table)
    with pytest.raises(indexes.SnapshotExpiredError):
        metadata.resolve(_completed(table), commits[0].completed_at)
    assert metadata.resolve(_completed(table), commits[-1].completed_at).files is not None


def test_commits_in_the_same_millisecond_never_collide_with_metadata_compactions(
    table_uri: str, clock: FakeClock
) -> None:
    """The metadata table mirrors each data instant's time as its deltacommit and allocates its
    compactions from its own timeline; with a clock that does not move, every commit must still
    get a time that neither timeline has used."""
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"metadata.compact_after": "1"})
    commits = [table.append(rows(range(i, i + 1))) for i in range(6)]
    assert len({c.instant for c in commits}) == 6
    assert table.snapshot().count() == 6
    compactions = [i for i in _metadata(table).timeline.load() if i.action == "compaction"]
    assert len(compactions) >= 5 and all(i.state == "completed" for i in compactions)
    assert not {i.time for i in compactions} & {c.instant for c in commits}


# -- damaged and missing files ------------------------------------------------------------------


def _problems(report: txn.ValidationReport) -> set[tuple[str, str]]:
    return {(p.kind, p.path) for p in report.problems}


@pytest.mark.parametrize("partition", [FILES, SEGMENTS, DELETES, "record_index"])
def test_a_missing_block_of_a_completed_commit_is_an_error_not_fewer_rows(
    table_uri: str, partition: str
) -> None:
    """The deltacommit of a completed instant records the blocks it wrote: a reader that finds
    one missing raises, naming it, instead of answering without that commit."""
    table = txn.create_table(table_uri, SCHEMA, record_key="id",
                             properties={"record_index.shards": "2"})
    table.append(rows(range(10)))
    commit = table.delete(keys=[3]) if partition == DELETES else table.upsert(rows([4, 10, 11]))
    assert commit is not None
    lost = f"_metadata/{partition}/{commit.instant}.log.arrow"
    storage_of(table_uri).delete(lost)
    reopened = txn.open_table(table_uri)
    read = {FILES: reopened.to_arrow, DELETES: reopened.to_arrow, SEGMENTS: reopened.segments,
            "record_index": lambda: reopened.lookup([3, 4, 10])}[partition]
    with pytest.raises(txn.CorruptMetadataError, match=re.escape(lost)) as info:
        read()
    assert info.value.path == lost
    assert ("missing file", lost) in _problems(reopened.validate())


def _compacted_keyed(uri: str) -> txn.Table:
    table = txn.create_table(uri, SCHEMA, record_key="id",
                             properties={"metadata.compact_after": "2", "metadata.retain_commits": "2",
                                         "record_index.shards": "2"})
    for i in range(6):
        table.append(rows(range(i * 10, i * 10 + 5)))
    table.upsert(rows([1, 100]))
    return table


@pytest.mark.parametrize("damage", [b"", b"{", b"\xff\xfe garbage"])
def test_a_damaged_retention_record_is_named_by_lookups_writes_and_validate(
    table_uri: str, damage: bytes
) -> None:
    _compacted_keyed(table_uri)
    storage = storage_of(table_uri)
    assert storage.exists("_metadata/retention.json")
    storage.put("_metadata/retention.json", damage)
    reopened = txn.open_table(table_uri)
    with pytest.raises(txn.CorruptMetadataError, match=r"_metadata/retention\.json"):
        reopened.lookup([1])
    with pytest.raises(txn.CorruptMetadataError, match=r"_metadata/retention\.json"):
        reopened.upsert(rows([1]))
    assert ("damaged file", "_metadata/retention.json") in _problems(reopened.validate())


@pytest.mark.parametrize("kind", ["log", "base"])
def test_a_damaged_record_index_file_is_named_by_lookups_and_validate(
    table_uri: str, kind: str
) -> None:
    table = _compacted_keyed(table_uri)
    storage = storage_of(table_uri)
    files = storage.list("_metadata/record_index", recursive=True)
    if kind == "log":
        damaged = f"_metadata/record_index/{table.timeline()[-1].time}.log.arrow"
    else:
        damaged = max((f for f in files if f.endswith(".base.arrow")),
                      key=lambda f: f.rsplit("/", 1)[1])
    assert damaged in files
    storage.put(damaged, storage.read(damaged)[:40])
    reopened = txn.open_table(table_uri)
    with pytest.raises(txn.CorruptMetadataError, match=re.escape(damaged)):
        reopened.lookup([*range(60), 100])
    report = reopened.validate()  # reports, never raises
    assert ("damaged file", damaged) in _problems(report)


def test_a_compaction_whose_completed_file_is_lost_keeps_its_bases(table_uri: str) -> None:
    """A pending compaction older than a completed one did not die (every lock holder retires a
    dead one first): its completed file was lost. The next writer must not delete its bases as
    if it had died, and validate reports the lost file."""
    _compacted_keyed(table_uri)
    storage = storage_of(table_uri)
    kept = sorted(k for k in storage.list("_metadata/files") if k.endswith(".base.arrow"))
    assert len(kept) >= 2, "the floor and a newer base"
    time = kept[0].rsplit("/", 1)[1][:17]  # the floor's compaction
    [lost] = [k for k in storage.list("_metadata/_timeline")
              if re.fullmatch(rf"_metadata/_timeline/{time}_\d{{17}}\.compaction", k)]
    bases = [k for k in storage.list("_metadata", recursive=True)
             if re.search(rf"/{time}_\d{{17}}\.base\.", k)]
    storage.delete(lost)
    writer = txn.open_table(table_uri)
    # The lost compaction folded blocks that reads and this write's maintenance may need.
    with contextlib.suppress(txn.CorruptMetadataError):
        writer.append(rows([500]))
    assert all(storage.exists(base) for base in bases)
    report = txn.open_table(table_uri).validate()
    assert any(p.kind == "missing file" and time in p.path for p in report.problems), str(report)
