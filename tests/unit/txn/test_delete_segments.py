"""DELETE SEGMENT (``Table.delete_segments``): by id (all or nothing) or by load start time, one
``replacecommit`` that marks segments ``Marked for Delete`` and hides their rows at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn import timeline
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, rows, sorted_rows
from txn._commit import Pending, Protocol, protocol_of
from txn._context import CommitMetadata, WritePlan
from txn._write import _mutations, _state

MFD = "Marked for Delete"


# -- helpers ---------------------------------------------------------------------------------------


def loaded(uri: str, clock: FakeClock, *loads: range, **options: Any) -> txn.Table:
    """A table with one segment per range, loaded one second apart."""
    table = txn.create_table(uri, SCHEMA, clock=clock, **options)
    for ids in loads:
        clock.advance(1_000)
        table.append(rows(ids))
    return table


def statuses(table: txn.Table) -> dict[str, str]:
    return {s.id: s.status for s in table.segments()}


def ids_of(table: txn.Table, **kwargs: Any) -> list[int]:
    return sorted(table.to_arrow(columns=["id"], **kwargs)["id"].to_pylist())


def snapshot_of(table: txn.Table) -> tuple[list[tuple[str, str, str]], dict[str, str]]:
    """Everything a refused delete must leave alone: the timeline and the segments."""
    return [(i.time, i.action, i.state) for i in table.timeline()], statuses(table)


def last_metadata(table: txn.Table) -> CommitMetadata:
    last = table.timeline()[-1]
    return table._context.timeline.read_metadata(last, CommitMetadata)


def assert_valid(table: txn.Table) -> None:
    report = table.validate()
    assert report.ok, str(report)


@pytest.fixture
def running() -> Iterator[Callable[[txn.Table, Pending], None]]:
    """Registers pending instants a test created by hand; rolls them back afterwards."""
    started: list[tuple[txn.Table, Pending]] = []

    def register(table: txn.Table, pending: Pending) -> None:
        pending.heartbeat.stop(delete=False)  # no beating thread; the fake clock keeps it alive
        started.append((table, pending))

    yield register
    for table, pending in started:
        protocol_of(table._context).roll_back(pending.instant)


# -- by id -----------------------------------------------------------------------------------------


def test_delete_by_ids_marks_them_and_hides_their_rows_at_once(table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(3), range(3, 5), range(5, 9))
    before = {s.id: s for s in table.segments()}
    last_load = table.timeline()[-1].time
    clock.advance(1_000)

    commit = table.delete_segments(["0", 2])  # a str and an int

    assert isinstance(commit, txn.Commit)
    assert commit.operation == "delete_segments"
    assert (commit.segment, commit.files_added, commit.rows_added) == (None, 0, 0)
    assert commit.rows_deleted == 3 + 4
    assert statuses(table) == {"2": MFD, "1": "Success", "0": MFD}
    for segment in table.segments():
        kept = before[segment.id]
        assert (segment.rows, segment.data_size, segment.instant, segment.load_start) == (
            kept.rows, kept.data_size, kept.instant, kept.load_start), "the load's facts stay"
    # one completed replacecommit
    instant = table.timeline()[-1]
    assert (instant.time, instant.action, instant.state) == (commit.instant, "replacecommit", "completed")
    # readers stop seeing the rows at once, in this handle and in a fresh one
    assert ids_of(table) == [3, 4]
    assert table.snapshot().count() == 2
    assert ids_of(txn.open_table(table_uri)) == [3, 4]
    assert {f.segment for f in table.snapshot().files()} == {"1"}
    # time travel to before the delete still shows them
    assert ids_of(table, as_of=last_load) == list(range(9))
    assert table.snapshot(last_load).count() == 9
    assert_valid(table)


def test_the_commit_records_what_it_removed(table_uri: str, clock: FakeClock) -> None:
    """Files, their delete deltas, the segments and the live rows removed; the files stay on
    storage (CLEAN FILES removes them later)."""
    table = loaded(table_uri, clock, range(10), range(10, 12))
    table.delete(pc.field("id") < 3)  # a delete delta on segment 0's file
    files = [f for f in table.snapshot().files() if f.segment == "0"]
    assert len(files) == 1 and files[0].deleted_rows == 3
    read_at = table.timeline()[-1].completed_at

    commit = table.delete_segments(["0"])

    assert commit.rows_deleted == 7, "live rows only: the 3 deleted by the delta are not counted"
    metadata = last_metadata(table)
    assert metadata.operation == "delete_segments"
    assert metadata.segments_removed == ["0"]
    prefix = table.uri.rstrip("/") + "/"
    assert metadata.files_removed == [files[0].path.removeprefix(prefix)]
    assert [prefix + p for p in metadata.deltas_removed] == list(files[0].delete_files)
    assert metadata.rows_deleted == 7 and metadata.read_at == read_at
    assert metadata.files_added == [] and metadata.deltas_added == []
    storage = timeline.open_storage(table_uri)
    assert all(storage.exists(p) for p in (*metadata.files_removed, *metadata.deltas_removed)), (
        "nothing is deleted from storage")
    assert ids_of(table) == [10, 11]
    assert_valid(table)


def test_duplicate_and_padded_ids_collapse(table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(2), range(2, 4))
    table.delete_segments(["1", 1, " 1 "])
    assert statuses(table) == {"1": MFD, "0": "Success"}
    assert last_metadata(table).segments_removed == ["1"]
    assert_valid(table)


def test_one_bad_id_refuses_the_whole_request(table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(2), range(2, 4))
    state = snapshot_of(table)
    with pytest.raises(txn.SegmentNotFoundError) as info:
        table.delete_segments(["0", "9", "x"])
    message = str(info.value)
    assert "9: no such segment" in message and "'x': no such segment" in message
    assert "nothing was deleted" in message and "0:" not in message
    assert snapshot_of(table) == state, "nothing was written"
    assert ids_of(table) == [0, 1, 2, 3]
    assert_valid(table)


def test_a_segment_already_marked_for_delete_is_not_found(table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(2), range(2, 4))
    table.delete_segments([0])
    state = snapshot_of(table)
    with pytest.raises(txn.SegmentNotFoundError, match=f"0: already {MFD}"):
        table.delete_segments(["0", "1"])
    assert snapshot_of(table) == state
    assert statuses(table) == {"1": "Success", "0": MFD}
    assert_valid(table)


def test_overwritten_segments_cannot_be_deleted_again(table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(2))
    table.overwrite(rows(range(5, 6)))
    with pytest.raises(txn.SegmentNotFoundError, match=f"already {MFD}"):
        table.delete_segments(["0"])
    table.delete_segments(["1"])
    assert ids_of(table) == [] and statuses(table) == {"1": MFD, "0": MFD}
    assert_valid(table)


def test_a_compacted_segment_cannot_be_deleted(table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(2), range(2, 4))
    try:
        table.compact("custom", segments=["0", "1"])
    except NotImplementedError:
        pytest.skip("compaction is not implemented yet: no way to make a Compacted segment")
    state = snapshot_of(table)
    with pytest.raises(txn.InvalidOptionError, match="0: Compacted"):
        table.delete_segments(["0"])
    assert snapshot_of(table) == state
    assert_valid(table)


def test_a_load_still_running_cannot_be_deleted(
        table_uri: str, clock: FakeClock, running: Callable[[txn.Table, Pending], None]) -> None:
    table = loaded(table_uri, clock, range(2))
    pending = protocol_of(table._context).begin("append", "commit", new_segment=True)
    running(table, pending)
    assert pending.segment == "1"
    state = snapshot_of(table)
    with pytest.raises(txn.InvalidOptionError, match="1: Insert In Progress, a load is still writing it"):
        table.delete_segments(["1"])
    assert snapshot_of(table) == state


# -- by date ---------------------------------------------------------------------------------------


def _load_start(table: txn.Table, segment_id: str) -> datetime:
    start = next(s.load_start for s in table.segments() if s.id == segment_id)
    assert start is not None
    return start


@pytest.mark.parametrize("zone", ["utc", "naive", "other"])
def test_delete_before_a_moment_marks_the_segments_loaded_before_it(
        table_uri: str, clock: FakeClock, zone: str) -> None:
    table = loaded(table_uri, clock, range(2), range(2, 4), range(4, 6))
    cut = _load_start(table, "2")  # loaded exactly then: not before it
    assert cut.tzinfo is not None
    if zone == "naive":
        cut = cut.replace(tzinfo=None)  # naive means UTC
    elif zone == "other":
        cut = cut.astimezone(timezone(timedelta(hours=-5)))
    clock.advance(1_000)

    commit = table.delete_segments(before=cut)

    assert statuses(table) == {"2": "Success", "1": MFD, "0": MFD}
    assert commit.rows_deleted == 4
    assert ids_of(table) == [4, 5]
    assert_valid(table)


def test_delete_before_counts_a_sub_millisecond_moment_exactly(table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(2), range(2, 4))
    table.delete_segments(before=_load_start(table, "1") + timedelta(microseconds=1))
    assert statuses(table) == {"1": MFD, "0": MFD}
    assert_valid(table)


def test_delete_before_skips_segments_already_marked(table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(2), range(2, 4))
    table.delete_segments(["0"])
    clock.advance(1_000)
    table.delete_segments(before=datetime.now(timezone.utc) + timedelta(days=3650))
    assert last_metadata(table).segments_removed == ["1"]
    assert statuses(table) == {"1": MFD, "0": MFD}
    assert_valid(table)


def test_delete_before_with_no_match_says_what_it_checked(table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(2), range(2, 4))
    state = snapshot_of(table)
    early = datetime(2020, 1, 1)
    with pytest.raises(txn.SegmentNotFoundError) as info:
        table.delete_segments(before=early)
    message = str(info.value)
    assert early.isoformat() in message and "2 segment(s) checked" in message
    assert "nothing was deleted" in message
    assert snapshot_of(table) == state


# -- arguments -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ids", "before", "expected"), [
    (None, None, "exactly one of ids and before, got neither"),
    (["0"], datetime(2030, 1, 1), "exactly one of ids and before, got both"),
    ([], datetime(2030, 1, 1), "got both"),
    (None, "2030-01-01", "must be a datetime.datetime (naive means UTC), got the str '2030-01-01'"),
    (None, date(2030, 1, 1), "got the date"),
    (None, 1_900_000_000_000, "got the int"),
    ([], None, "must not be empty"),
    ("0", None, "got the string '0'; pass ['0'] for one id"),
    (0, None, "must be a list of ids, got the int 0; pass [0] for one id"),
    ([True], None, "segment id True for delete segment is a bool"),
    ([0.1], None, "segment id 0.1 for delete segment is a float"),
])
def test_bad_arguments_are_refused_before_anything_is_written(
        table_uri: str, clock: FakeClock, ids: Any, before: Any, expected: str) -> None:
    table = loaded(table_uri, clock, range(2))
    state = snapshot_of(table)
    with pytest.raises(txn.InvalidOptionError) as info:
        table.delete_segments(ids, before=before)
    assert expected in str(info.value)
    assert snapshot_of(table) == state


@pytest.mark.parametrize("how", [{"ids": ["0"]}, {"before": datetime(2030, 1, 1)}])
def test_a_table_without_segments_has_nothing_to_delete(table_uri: str, how: dict[str, Any]) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    state = snapshot_of(table)
    with pytest.raises(txn.InvalidOptionError, match="has no segments yet"):
        table.delete_segments(**how)
    assert snapshot_of(table) == state


def test_a_table_without_segments_still_refuses_malformed_ids(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match="is a float"):
        table.delete_segments([1.5])  # type: ignore[list-item]


# -- keyed tables ----------------------------------------------------------------------------------


def test_keys_of_a_deleted_segment_are_gone_and_can_be_written_again(
        table_uri: str, clock: FakeClock) -> None:
    table = loaded(table_uri, clock, range(5), range(5, 10), record_key="id")
    assert table.lookup([1, 6]).num_rows == 2
    table.delete_segments(["0"])

    assert table.lookup([1, 2, 6])["id"].to_pylist() == [6]
    assert_valid(table)

    upserted = table.upsert(rows([1, 2, 7]))  # 1 and 2 are new again, 7 replaces
    assert upserted is not None and upserted.rows_deleted == 1
    assert_valid(table)
    table.append(rows([3, 4]))  # no DuplicateKeyError: those keys left with their segment
    assert_valid(table)

    assert ids_of(table) == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    found = table.lookup([1, 3, 7])
    assert sorted(found["id"].to_pylist()) == [1, 3, 7]
    assert "0" not in found["segment"].to_pylist()
    with pytest.raises(txn.DuplicateKeyError):
        table.append(rows([3]))


# -- running writes and concurrent commits ---------------------------------------------------------


def test_a_segment_a_running_compaction_reads_cannot_be_deleted(
        table_uri: str, clock: FakeClock, running: Callable[[txn.Table, Pending], None]) -> None:
    table = loaded(table_uri, clock, range(2), range(2, 4))
    pending = protocol_of(table._context).begin("compact", "compaction", segment="0.1", sources=["0"])
    running(table, pending)
    state = snapshot_of(table)

    for ids in (["0"], ["0", "1"]):
        with pytest.raises(txn.CommitConflictError) as info:
            table.delete_segments(ids)
        assert str(info.value).startswith(
            f"compaction {pending.instant.time} is merging segment(s) ['0']; delete segment is "
            "not allowed until it completes")
        assert snapshot_of(table) == state, "nothing was written"
    with pytest.raises(txn.CommitConflictError, match="is merging segment"):
        table.delete_segments(before=datetime(2100, 1, 1))
    assert snapshot_of(table) == state

    table.delete_segments(["1"])  # a segment it does not read can go
    assert statuses(table)["1"] == MFD

    protocol_of(table._context).roll_back(pending.instant)
    table.delete_segments(["0"])
    assert statuses(table) == {"1": MFD, "0": MFD}
    assert_valid(table)


def test_a_compaction_whose_writer_died_does_not_hold_its_segments(
        table_uri: str, clock: FakeClock, running: Callable[[txn.Table, Pending], None]) -> None:
    """Its heartbeat expired: the delete rolls it back (recovery) and goes ahead."""
    table = loaded(table_uri, clock, range(2), range(2, 4))
    pending = protocol_of(table._context).begin("compact", "compaction", segment="0.1", sources=["0"])
    running(table, pending)
    clock.advance(10 * 60_000)  # past the heartbeat timeout
    table.delete_segments(["0"])
    assert statuses(table) == {"1": "Success", "0": MFD}
    assert [i.state for i in table.timeline() if i.time == pending.instant.time] == ["rolledback"]
    assert_valid(table)


def test_a_running_delete_of_the_same_segment_refuses_another(
        table_uri: str, clock: FakeClock, running: Callable[[txn.Table, Pending], None]) -> None:
    table = loaded(table_uri, clock, range(2))
    other = protocol_of(table._context).begin("delete_segments", "replacecommit", sources=["0"])
    running(table, other)
    with pytest.raises(txn.CommitConflictError,
                       match=f"delete segment {other.instant.time} is already deleting segment"):
        txn.open_table(table_uri, clock=clock).delete_segments(["0"])


def test_the_plan_of_a_delete_lists_the_segments_it_deletes(
        monkeypatch: pytest.MonkeyPatch, table_uri: str, clock: FakeClock) -> None:
    """So that compactions and deletes beginning while it runs leave them alone."""
    table = loaded(table_uri, clock, range(2), range(2, 4))
    begun: list[WritePlan] = []
    begin = Protocol.begin

    def spy(self: Protocol, *args: Any, **kwargs: Any) -> Any:
        pending = begin(self, *args, **kwargs)
        begun.append(table._context.timeline.read_plan(pending.instant, WritePlan))
        return pending

    monkeypatch.setattr(Protocol, "begin", spy)
    table.delete_segments([1, 0])
    assert [(p.operation, p.segment, p.sources) for p in begun] == [
        ("delete_segments", None, ["0", "1"])]


def test_a_delete_that_commits_first_makes_the_other_conflict(
        monkeypatch: pytest.MonkeyPatch, table_uri: str, clock: FakeClock) -> None:
    """A and B delete segment 0; B commits after A read the table but before A begins: A
    fails naming B, and writes nothing."""
    a = loaded(table_uri, clock, range(2), range(2, 4))
    b = txn.open_table(table_uri, clock=clock)
    fired: list[txn.Commit] = []
    begin = Protocol.begin

    def b_first(self: Protocol, *args: Any, **kwargs: Any) -> Any:
        if not fired:
            monkeypatch.undo()  # B itself begins normally
            fired.append(b.delete_segments(["0"]))
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(Protocol, "begin", b_first)
    with pytest.raises(txn.CommitConflictError) as info:
        a.delete_segments(["0", "1"])
    monkeypatch.undo()
    message = str(info.value)
    assert f"delete_segments {fired[0].instant}" in message
    assert "nothing was deleted" in message and f"segment 0 is now {MFD}" in message
    assert [i.time for i in a.timeline() if i.action == "replacecommit"] == [fired[0].instant], (
        "A never began")
    assert statuses(a) == {"1": "Success", "0": MFD}
    assert_valid(a)


def test_a_commit_that_lands_while_the_delete_runs_makes_it_conflict(
        monkeypatch: pytest.MonkeyPatch, table_uri: str, clock: FakeClock) -> None:
    """An overwrite commits after the delete began (it honours no plan's sources): the delete
    checks again under the lock, fails naming it, and is rolled back."""
    a = loaded(table_uri, clock, range(2), range(2, 4))
    b = txn.open_table(table_uri, clock=clock)
    fired: list[txn.Commit] = []
    commit = Protocol.commit

    def b_first(self: Protocol, pending: Pending, build: Any) -> Any:
        if not fired:
            monkeypatch.undo()  # B itself commits normally
            fired.append(b.overwrite(rows(range(10, 11))))
        return commit(self, pending, build)

    monkeypatch.setattr(Protocol, "commit", b_first)
    with pytest.raises(txn.CommitConflictError) as info:
        a.delete_segments(["1"])
    monkeypatch.undo()
    assert f"overwrite {fired[0].instant}" in str(info.value)
    history = a.timeline()
    # by requested time: the delete began first, the overwrite completed first
    assert [i.state for i in history if i.action == "replacecommit"] == ["rolledback", "completed"]
    assert statuses(a) == {"2": "Success", "1": MFD, "0": MFD}
    assert ids_of(a) == [10]
    assert_valid(a)


def _run_after_read(monkeypatch: pytest.MonkeyPatch, write: Callable[[], Any]) -> list[Any]:
    """Run ``write`` once, right after the next write read its state."""
    done: list[Any] = []
    read_state = _state.read_state

    def after_read(context: Any) -> _state.State:
        state = read_state(context)
        if not done:
            done.append(None)
            done[0] = write()
        return state

    monkeypatch.setattr(_state, "read_state", after_read)
    if hasattr(_mutations, "read_state"):  # a write that reads it directly
        monkeypatch.setattr(_mutations, "read_state", after_read)
    return done


WRITES: dict[str, Callable[[txn.Table], Any]] = {
    "upsert": lambda t: t.upsert(rows([1], region="us")),
    "delete": lambda t: t.delete(pc.field("id") == 1),
    "update": lambda t: t.update(pc.field("id") == 1, {"region": "us"}),
}


@pytest.mark.parametrize("operation", sorted(WRITES))
def test_a_write_that_read_a_deleted_segment_conflicts(
        monkeypatch: pytest.MonkeyPatch, table_uri: str, clock: FakeClock, operation: str) -> None:
    """A reads (row 1 lives in segment 0), B deletes segment 0, A commits: A conflicts on the
    data file B removed."""
    a = loaded(table_uri, clock, range(3), range(3, 6), record_key="id")
    b = txn.open_table(table_uri, clock=clock)
    done = _run_after_read(monkeypatch, lambda: b.delete_segments(["0"]))
    with pytest.raises(txn.CommitConflictError) as info:
        WRITES[operation](a)
    monkeypatch.undo()
    assert done, "B never ran"
    assert f"conflicts with delete_segments {done[0].instant}" in str(info.value)
    assert sorted_rows(a.to_arrow()) == sorted_rows(rows(range(3, 6)))
    assert [i.state for i in a.timeline() if i.state == "rolledback"] == ["rolledback"]
    assert_valid(a)
    # retried, the write sees the segment gone
    retried = WRITES[operation](a)
    if operation == "upsert":
        assert retried is not None and retried.rows_deleted == 0
        assert ids_of(a) == [1, 3, 4, 5]
    else:
        assert retried is None, "row 1 is no longer there"
    assert_valid(a)


def test_an_unkeyed_append_after_a_delete_segment_needs_no_retry(table_uri: str, clock: FakeClock) -> None:
    a = loaded(table_uri, clock, range(3))
    b = txn.open_table(table_uri, clock=clock)
    b.delete_segments(["0"])
    a.append(rows(range(3)))
    assert ids_of(a) == [0, 1, 2]
    assert statuses(a) == {"1": "Success", "0": MFD}
    assert_valid(a)


def test_a_partitioned_table_loses_the_partitions_only_deleted_segments_held(
        table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"], clock=clock)
    table.append(pa.concat_tables([rows(range(2), region="eu"), rows(range(2, 4), region="us")]))
    table.append(rows(range(4, 6), region="eu"))
    commit = table.delete_segments(["0"])
    assert commit.rows_deleted == 4
    assert table.partitions() == [{"region": "eu"}]
    assert ids_of(table) == [4, 5]
    assert_valid(table)
