"""Table maintenance runs off the commit path: as instants of its own, outside the table lock.

What is pinned here: a commit never waits for a metadata compaction (other writers commit while
one folds); a compaction that fails, dies or is abandoned never changes what a snapshot reads
and is retired; ``maintenance.mode`` chooses who runs it; ``Table.maintain()`` runs what is due.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn.indexes import METADATA_FOLDER, MetadataTable
from metatxn.timeline import Instant, PrefixedStorage, Timeline
from txn._commit import wait_for_background_maintenance

from ...conftest import FakeClock

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def rows(first: int, count: int = 3) -> pa.Table:
    return pa.table({"k": list(range(first, first + count)),
                     "v": [f"v{i}" for i in range(first, first + count)]}, schema=SCHEMA)


def create(uri: str, mode: str | None = None, *, keyed: bool = True, clock: FakeClock | None = None,
           **extra: str) -> txn.Table:
    properties = {"metadata.compact_after": "3", "record_index.shards": "2", **extra}
    if mode is not None:
        properties["maintenance.mode"] = mode
    if not keyed:
        properties.pop("record_index.shards")
    kwargs = {"clock": clock} if clock is not None else {}
    return txn.create_table(uri, SCHEMA, record_key="k" if keyed else None, properties=properties,
                            **kwargs)


def metadata_instants(table: txn.Table) -> list[tuple[str, str]]:
    timeline = Timeline(PrefixedStorage(table._context.storage, METADATA_FOLDER), owner="test")
    return [(i.action, i.state) for i in timeline.load().instants if i.action == "compaction"]


def bases(table: txn.Table) -> list[str]:
    return sorted(key for key in table._context.storage.list(METADATA_FOLDER, recursive=True)
                  if ".base." in key or ".run." in key)


def three_commits_and_a_begun_compaction(uri: str, clock: FakeClock) -> tuple[
        txn.Table, Instant, list[tuple[str, str]]]:
    """A table of three commits (manual maintenance, a 60 s heartbeat timeout) and a metadata
    compaction begun on it by hand, as a maintainer does before it folds."""
    table = create(uri, "manual", clock=clock, **{"heartbeat.timeout_ms": "60000",
                                                  "heartbeat.interval_ms": "20000"})
    for i in range(3):
        table.append(rows(10 * i))
    context = table._context
    with context.timeline.lock() as lease:
        view = context.timeline.view(lease)
        order = [(i.time, i.completed_at or "") for i in view.completed()]
        instant = context.metadata.begin_compaction(order, lease=lease, data_max_time=view.max_time())
    assert instant is not None
    return table, instant, order


def test_manual_mode_leaves_maintenance_to_maintain(memory_uri: str) -> None:
    table = create(memory_uri, "manual")
    for i in range(4):
        table.append(rows(10 * i))
    assert metadata_instants(table) == []
    report = table.maintain()
    assert report.compaction is not None and report.skipped is None
    assert metadata_instants(table) == [("compaction", "completed")]
    assert table.to_arrow().num_rows == 12
    assert table.lookup(pa.table({"k": [30]})).num_rows == 1
    # Nothing is due right after: a second run does nothing.
    assert table.maintain() == txn.MaintenanceReport()


def test_inline_mode_compacts_after_the_commit_that_made_it_due(memory_uri: str) -> None:
    table = create(memory_uri)
    for i in range(3):
        table.append(rows(10 * i))
    assert metadata_instants(table) == [("compaction", "completed")]


def test_async_mode_compacts_on_a_background_thread(memory_uri: str) -> None:
    table = create(memory_uri, "async")
    for i in range(3):
        table.append(rows(10 * i))
    wait_for_background_maintenance()
    assert metadata_instants(table) == [("compaction", "completed")]
    assert table.to_arrow().num_rows == 9


def test_an_unknown_maintenance_mode_is_refused(memory_uri: str) -> None:
    with pytest.raises(txn.InvalidOptionError, match=r"maintenance.mode.*inline, async, manual"):
        create(memory_uri, "sometimes")
    with pytest.raises(txn.TableNotFoundError):
        txn.open_table(memory_uri)


def test_writers_commit_while_a_compaction_folds(memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fold holds no lock: a writer commits while it is blocked in the middle, and the
    compaction still completes, folding only what completed before it began."""
    table = create(memory_uri, "manual")
    for i in range(3):
        table.append(rows(10 * i))
    folding, release = threading.Event(), threading.Event()
    build = MetadataTable.build_compaction

    def slow_build(self: MetadataTable, *args: object, **kwargs: object) -> None:
        folding.set()
        assert release.wait(30)
        build(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(MetadataTable, "build_compaction", slow_build)
    reports: list[txn.MaintenanceReport] = []
    maintainer = threading.Thread(target=lambda: reports.append(table.maintain()))
    maintainer.start()
    assert folding.wait(30)
    other = txn.open_table(memory_uri)
    committed = other.append(rows(100))  # would wait for the lock if the fold held it
    assert committed is not None
    assert metadata_instants(table) == [("compaction", "inflight")]
    release.set()
    maintainer.join(30)
    assert reports and reports[0].compaction is not None
    # Begun first, completed after the commit landed: the commit did not wait for it.
    assert reports[0].compaction < committed.instant
    fresh = txn.open_table(memory_uri)
    assert sorted(fresh.to_arrow()["k"].to_pylist()) == sorted(
        [k for i in range(3) for k in range(10 * i, 10 * i + 3)] + [100, 101, 102])
    assert fresh.lookup(pa.table({"k": [101, 20]})).num_rows == 2
    assert fresh.validate().ok


def test_a_failed_fold_is_retired_at_once_and_changes_no_read(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = create(memory_uri, "manual")
    for i in range(3):
        table.append(rows(10 * i))
    before = table.to_arrow().sort_by("k")
    build = MetadataTable.build_compaction

    def failing_build(self: MetadataTable, *args: object, **kwargs: object) -> None:
        build(self, *args, **kwargs)  # type: ignore[arg-type]  # every base written, then:
        raise OSError("disk full")

    monkeypatch.setattr(MetadataTable, "build_compaction", failing_build)
    with pytest.raises(OSError, match="disk full"):
        table.maintain()
    assert metadata_instants(table) == [("compaction", "rolledback")]
    assert bases(table) == []
    assert txn.open_table(memory_uri).to_arrow().sort_by("k").equals(before)
    monkeypatch.setattr(MetadataTable, "build_compaction", build)
    assert table.maintain().compaction is not None


def test_an_abandoned_compaction_is_retired_once_its_heartbeat_expires(memory_uri: str) -> None:
    """A maintainer that died after writing its bases: until its heartbeat expires the
    compaction counts as running (a second one skips); then the next writer retires it and
    deletes its bases, and reads never saw them."""
    clock = FakeClock()
    table, instant, order = three_commits_and_a_begun_compaction(memory_uri, clock)
    context = table._context
    context.metadata.build_compaction(instant, order)  # ... and the maintainer dies here
    written = bases(table)
    assert written
    assert table.to_arrow().num_rows == 9
    assert table.maintain().skipped == "another metadata compaction is running"
    clock.advance(61_000)
    table.append(rows(50))  # its recovery retires the dead compaction
    assert metadata_instants(table)[0] == ("compaction", "rolledback")
    assert not set(written) & set(bases(table))
    report = table.maintain()
    assert report.compaction is not None
    reopened = txn.open_table(memory_uri)
    assert reopened.to_arrow().num_rows == 12
    assert reopened.validate().ok


def test_a_paused_compaction_retired_meanwhile_deletes_what_it_wrote(memory_uri: str) -> None:
    clock = FakeClock()
    table, instant, order = three_commits_and_a_begun_compaction(memory_uri, clock)
    context = table._context
    clock.advance(61_000)  # paused past its heartbeat: the next lock holder retires it
    table.append(rows(50))
    context.metadata.build_compaction(instant, order)  # it wakes up and writes its bases
    with context.timeline.lock() as lease:
        assert context.metadata.complete_compaction(instant, lease=lease) is False
    assert [b for b in bases(table) if instant.time in b] == []
    assert txn.open_table(memory_uri).to_arrow().num_rows == 12


@pytest.mark.allow_metatxn_warnings
def test_a_failing_maintenance_never_fails_the_commit(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    table = create(memory_uri, keyed=False)

    def broken(self: MetadataTable, *args: object, **kwargs: object) -> None:
        raise OSError("metadata store unavailable")

    monkeypatch.setattr(MetadataTable, "build_compaction", broken)
    with caplog.at_level("WARNING", logger="metatxn"):
        commits = [table.append(rows(10 * i)) for i in range(4)]
    assert all(commit is not None for commit in commits)
    assert table.to_arrow().num_rows == 12
    assert "table maintenance after a commit failed" in caplog.text
    assert [state for _, state in metadata_instants(table)] == ["rolledback", "rolledback"]


def active_metadata_instants(table: txn.Table) -> int:
    timeline = Timeline(PrefixedStorage(table._context.storage, METADATA_FOLDER), owner="test")
    return len(timeline.load().instants)


def test_untouched_shards_never_hold_the_metadata_timeline_active(memory_uri: str) -> None:
    # Every shard gets a run from the first compaction; then single-key upserts touch one shard
    # only, so 63 shards keep that run as their chain's top for good. It used to fence metadata
    # archival: 78 active metadata instants after 60 upserts, 158 after 120 (issue 22, item 8).
    table = create(memory_uri, **{"record_index.shards": "64", "timeline.archive.trigger": "5",
                                  "timeline.archive.retain": "4"})
    table.append(rows(0, 640))
    commits, active = [], []
    for i in range(45):
        commits.append(table.upsert(rows(7, 1).set_column(1, "v", pa.array([f"u{i}"]))))
        active.append(active_metadata_instants(table))
    # Bounded by what retention keeps (design/metadata-table.md): the deltacommits of the last
    # retain_commits + compact_after (13) commits and the compactions among them.
    assert max(active[20:]) <= 20, active
    assert active[-1] <= active[20] + 1, active
    fresh = txn.open_table(memory_uri)
    # Untouched shards resolve through their old runs, whose compaction is archived.
    found = fresh.lookup(pa.table({"k": list(range(0, 640, 11))}))
    assert sorted(found["k"].to_pylist()) == list(range(0, 640, 11))
    fresh.upsert(rows(300, 2).set_column(1, "v", pa.array(["x", "y"])))
    assert fresh.to_arrow().num_rows == 640
    assert fresh.lookup(pa.table({"k": [7]})).num_rows == 1
    # Time travel within retention reads exactly.
    oldest_retained = commits[-9]
    assert oldest_retained is not None
    past = fresh.to_arrow(as_of=oldest_retained.instant)
    assert past.num_rows == 640
    assert past.filter(pc.equal(past["k"], 7))["v"].to_pylist() == ["u36"]
    assert fresh.validate().problems == []


def test_an_aborted_compaction_leaves_no_run_behind_once_archived(memory_uri: str) -> None:
    # A compaction aborted before its runs were deleted (a maintainer that died between the
    # two): archived with its runs on storage, they would count as a completed compaction's.
    clock = FakeClock()
    table = create(memory_uri, "manual", clock=clock, **{"timeline.archive.trigger": "5",
                                                         "timeline.archive.retain": "4"})
    for i in range(3):
        table.append(rows(10 * i))
    metadata = table._context.metadata
    with table._context.timeline.lock() as lease:
        view = table._context.timeline.view(lease)
        order = [(i.time, i.completed_at or "") for i in view.completed()]
        instant = metadata.begin_compaction(order, lease=lease, data_max_time=view.max_time())
    assert instant is not None
    metadata.build_compaction(instant, order)
    with table._context.timeline.lock() as lease:
        metadata.timeline.abort(metadata.timeline.view(lease).get(instant.time), lease=lease)
    assert [b for b in bases(table) if instant.time in b]
    for i in range(12):
        clock.advance(1000)
        table.upsert(rows(3 * i, 3).set_column(1, "v", pa.array(["w"] * 3)))
        table.maintain()
    timeline = Timeline(PrefixedStorage(table._context.storage, METADATA_FOLDER), owner="test")
    assert instant.time not in {i.time for i in timeline.load().instants}
    assert [i.state for i in timeline.history() if i.time == instant.time] == ["rolledback"]
    assert [b for b in bases(table) if instant.time in b] == []
    assert txn.open_table(memory_uri).lookup(pa.table({"k": list(range(36))})).num_rows == 36
    assert table.validate().problems == []
