"""Table maintenance runs off the commit path: as instants of its own, outside the table lock.

What is pinned here: a commit never waits for a metadata compaction (other writers commit while
one folds); a compaction that fails, dies or is abandoned never changes what a snapshot reads
and is retired; ``maintenance.mode`` chooses who runs it; ``Table.maintain()`` runs what is due.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

import txn
from indexes import METADATA_FOLDER, MetadataTable
from timeline import Instant, PrefixedStorage, Timeline
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
