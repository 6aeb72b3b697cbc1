"""Compaction: CarbonData's MINOR, MAJOR and CUSTOM over metatxn segments, with their commit and
conflict rules (design/segments.md)."""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterator
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, rows, sorted_rows, states
from txn._segments import _compact
from txn._write import _state


def loads(uri: str, count: int, *, size: int = 10, properties: dict[str, str] | None = None,
          **layout: Any) -> txn.Table:
    table = txn.create_table(uri, SCHEMA, properties=properties, **layout)
    for n in range(count):
        table.append(rows(range(n * size, (n + 1) * size), day=date(2026, 1, 1 + n % 28)))
    return table


def status(table: txn.Table) -> dict[str, tuple[str, str | None]]:
    return {s.id: (s.status, s.merged_to) for s in table.segments()}


def multiset(table: pa.Table) -> collections.Counter[tuple[Any, ...]]:
    return collections.Counter(tuple(r.values()) for r in table.to_pylist())


# -- the seed walk-through and the kinds -----------------------------------------------------------

def test_minor_merges_four_loads_into_0_1_and_marks_them_compacted(table_uri: str) -> None:
    table = loads(table_uri, 4)
    before = multiset(table.to_arrow())

    commit = table.compact("minor")

    assert commit is not None and commit.operation == "compact" and commit.segment == "0.1"
    assert status(table) == {"0.1": ("Success", None), **{str(i): ("Compacted", "0.1") for i in range(4)}}
    assert [s.id for s in table.segments()] == ["3", "2", "1", "0.1", "0"]  # SHOW SEGMENTS order
    assert multiset(table.to_arrow()) == before
    assert {f.segment for f in table.snapshot().files()} == {"0.1"}
    assert commit.rows_added == commit.rows_deleted == 40
    assert table.timeline()[-1].action == "compaction"
    assert table.validate().ok


def test_minor_with_too_few_loads_does_nothing(table_uri: str) -> None:
    table = loads(table_uri, 3)
    timeline_before = states(table)
    assert table.compact("minor") is None
    assert table.compact() is None
    assert states(table) == timeline_before


def test_minor_repeats_from_level_one_to_level_two(table_uri: str) -> None:
    table = loads(table_uri, 4, properties={"compaction.level_threshold": "2,2"})
    before = multiset(table.to_arrow())

    commit = table.compact("minor")

    assert commit is not None and commit.segment == "0.2"  # 0,1 -> 0.1; 2,3 -> 2.1; 0.1,2.1 -> 0.2
    assert status(table)["0.1"] == ("Compacted", "0.2")
    assert status(table)["2.1"] == ("Compacted", "0.2")
    assert status(table)["0"] == ("Compacted", "0.1")
    assert [i.action for i in table.timeline()].count("compaction") == 3
    assert multiset(table.to_arrow()) == before
    assert table.validate().ok


def test_major_merges_everything_under_the_size_and_minor_leaves_its_result(table_uri: str) -> None:
    table = loads(table_uri, 5)
    commit = table.compact("major")
    assert commit is not None and commit.segment == "0.1"
    assert {s.id for s in table.segments() if s.status == "Success"} == {"0.1"}
    for n in range(5, 8):
        table.append(rows(range(n * 10, n * 10 + 10)))
    # 0.1 (a major result) and three fresh loads: minor needs four level-0 loads, and never
    # takes a major result as a level-1 input.
    assert table.compact("minor") is None
    table.append(rows(range(80, 90)))
    assert table.compact("minor").segment == "5.1"  # type: ignore[union-attr]


def test_major_respects_the_size_limit(table_uri: str) -> None:
    table = loads(table_uri, 4, size=40_000, properties={"compaction.major.size_mb": "1"})
    sizes = [s.data_size for s in table.segments()]
    assert sum(sizes) > 1024 * 1024 > max(sizes), "the test needs segments that do not all fit"
    commit = table.compact("major")
    assert commit is not None
    merged = [s for s in table.segments() if s.merged_to == commit.segment]
    # CarbonData's greedy grouping: 0, 1 and 2 fit under 1 MB; adding 3 would not.
    assert [s.id for s in merged] == ["2", "1", "0"] and sum(s.data_size for s in merged) < 1024 * 1024


def test_custom_merges_the_given_segments_in_any_case_of_kind(table_uri: str) -> None:
    table = loads(table_uri, 3)
    commit = table.compact("CUSTOM", segments=[2, "0"])
    assert commit is not None and commit.segment == "0.1"
    assert status(table) == {"2": ("Compacted", "0.1"), "1": ("Success", None),
                             "0.1": ("Success", None), "0": ("Compacted", "0.1")}
    again = table.compact("custom", segments=["0.1"])  # one segment: a re-sort
    assert again is not None and again.segment == "0.2"


@pytest.mark.parametrize(("kind", "segments", "error", "words"), [
    ("sideways", None, txn.InvalidOptionError, "not one of"),
    (3, None, txn.InvalidOptionError, "not one of"),
    ("custom", None, txn.InvalidOptionError, "needs segments"),
    ("minor", ["0"], txn.InvalidOptionError, "applies only to kind='custom'"),
    ("custom", [], txn.InvalidOptionError, "empty"),
    ("custom", ["9"], txn.SegmentNotFoundError, "9"),
    ("custom", ["0", "x"], txn.SegmentNotFoundError, "x"),
    ("close_streaming", None, txn.InvalidOptionError, "streaming=true"),
])
def test_bad_requests_are_refused_and_change_nothing(table_uri: str, kind: Any, segments: Any,
                                                     error: type[Exception], words: str) -> None:
    table = loads(table_uri, 2)
    before = (states(table), status(table))
    with pytest.raises(error, match=words):
        table.compact(kind, segments=segments)
    assert (states(table), status(table)) == before


def test_a_compacted_segment_cannot_be_compacted_again(table_uri: str) -> None:
    table = loads(table_uri, 4)
    table.compact()
    with pytest.raises(txn.InvalidOptionError, match="Compacted"):
        table.compact("custom", segments=["1", "0.1"])


# -- what the rewrite keeps ------------------------------------------------------------------------

def test_deleted_rows_are_dropped_and_their_deltas_retired(table_uri: str) -> None:
    table = loads(table_uri, 4)
    table.delete(pc.field("id") < 15)
    before = multiset(table.to_arrow())
    assert any(f.delete_files for f in table.snapshot().files())

    commit = table.compact()

    assert commit is not None and commit.rows_added == 25
    assert multiset(table.to_arrow()) == before
    files = table.snapshot().files()
    assert sum(f.rows for f in files) == 25 and not any(f.delete_files for f in files)
    assert table.validate().ok


def test_output_is_sorted_across_files_and_sized_by_the_target(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, sort_by=["price"],
                             properties={"write.target_file_bytes": "4000"})
    for n in range(4):  # every load spans the whole price range
        table.append(rows(list(range(n, 2_000, 4))))
    table.compact()
    files = table.snapshot().files()
    assert len(files) > 2
    ranges = sorted((f for f in files), key=lambda f: f.path)
    read = [txn.open_table(table_uri).snapshot().to_arrow()]  # full read still right
    assert len(read[0]) == 2_000
    # Disjoint price ranges: a one-value filter opens one file.
    assert len(table.snapshot().files(pc.field("price") == 500.0)) == 1
    assert len(ranges) == len(files)


def test_a_partitioned_table_keeps_its_partitions(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"])
    for n, region in enumerate(["eu", "us", "eu", "apac"]):
        table.append(rows(range(n * 10, n * 10 + 10), region=region))
    before = multiset(table.to_arrow())
    commit = table.compact()
    assert commit is not None
    assert multiset(table.to_arrow()) == before
    assert table.partitions() == [{"region": "apac"}, {"region": "eu"}, {"region": "us"}]
    assert sorted(s.partitions for s in table.segments() if s.id == "0.1")[0] == [
        "region=apac", "region=eu", "region=us"]
    assert table.validate().ok


def test_keyed_table_index_follows_the_rows(table_uri: str) -> None:
    table = loads(table_uri, 4, record_key="id")
    table.compact()
    found = table.lookup([5, 35])
    assert found["segment"].to_pylist() == ["0.1", "0.1"]
    with pytest.raises(txn.DuplicateKeyError):
        table.append(rows([7]))
    table.upsert(rows([7, 100]))
    assert table.to_arrow(filter=pc.field("id") == 7).num_rows == 1
    assert table.snapshot().count() == 41
    assert table.validate().ok


def test_time_travel_before_the_compaction_reads_the_same_rows(table_uri: str) -> None:
    table = loads(table_uri, 4)
    table.delete(pc.field("id") == 3)
    before_instant = table.snapshot().instant
    before = sorted_rows(table.to_arrow())
    table.compact()
    table.append(rows([1000]))
    assert sorted_rows(table.to_arrow(as_of=before_instant)) == before


# -- concurrency -----------------------------------------------------------------------------------

def _during_compaction(monkeypatch: pytest.MonkeyPatch, action: Any) -> None:
    """Run ``action`` inside the next compaction's write phase (after it began, before commit)."""
    real = _compact._merged_rows
    done = []

    def rows_then_action(*args: Any) -> Iterator[pa.RecordBatch]:
        if not done:
            done.append(True)
            action()
        yield from real(*args)

    monkeypatch.setattr(_compact, "_merged_rows", rows_then_action)


def test_an_append_during_a_compaction_never_conflicts(table_uri: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    table = loads(table_uri, 4, record_key="id")
    other = txn.open_table(table_uri)
    _during_compaction(monkeypatch, lambda: other.append(rows([500, 501])))
    assert table.compact() is not None
    assert table.snapshot().count() == 42
    assert table.validate().ok


@pytest.mark.parametrize("write", ["delete", "update", "upsert"])
def test_a_write_to_a_source_during_a_compaction_wins(table_uri: str, monkeypatch: pytest.MonkeyPatch,
                                                      write: str) -> None:
    table = loads(table_uri, 4, record_key="id")
    other = txn.open_table(table_uri)
    actions = {
        "delete": lambda: other.delete(keys=[3]),
        "update": lambda: other.update(pc.field("id") == 3, {"price": 0.0}),
        "upsert": lambda: other.upsert(rows([3])),
    }
    _during_compaction(monkeypatch, actions[write])
    with pytest.raises(txn.CommitConflictError, match="wins") as info:
        table.compact()
    assert "compaction" in str(info.value) and write in str(info.value)
    assert not any(s.id == "0.1" for s in table.segments()), "the compaction left nothing"
    assert {s.status for s in table.segments() if s.id != "3"} == {"Success"}
    assert table.timeline()[-1].action == "rollback"
    assert table.validate().ok


def test_delete_segment_of_a_source_is_refused_while_the_compaction_runs(
        table_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = loads(table_uri, 4)
    other = txn.open_table(table_uri)
    refused: list[Exception] = []

    def delete_segment() -> None:
        with pytest.raises(txn.CommitConflictError, match="is merging segment") as info:
            other.delete_segments(["2"])
        refused.append(info.value)

    _during_compaction(monkeypatch, delete_segment)
    assert table.compact() is not None and refused
    assert status(table)["2"] == ("Compacted", "0.1")


def test_a_delete_segment_that_lands_before_the_compaction_begins_wins(
        table_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = loads(table_uri, 4)
    other = txn.open_table(table_uri)
    real = _state.read_state
    fired: list[bool] = []

    def read_then_delete(context: Any) -> Any:
        state = real(context)
        if not fired:
            fired.append(True)
            other.delete_segments(["2"])
        return state

    monkeypatch.setattr(_state, "read_state", read_then_delete)
    with pytest.raises(txn.CommitConflictError, match=r"delete_segments .* wins"):
        table.compact()
    monkeypatch.undo()
    assert status(table)["2"] == ("Marked for Delete", None)
    assert {status(table)[i][0] for i in "013"} == {"Success"} and "0.1" not in status(table)
    assert table.snapshot().count() == 30 and table.validate().ok


@pytest.mark.parametrize("write", ["delete", "upsert", "update"])
def test_a_write_overtaken_by_a_compaction_is_planned_again(table_uri: str,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            write: str) -> None:
    table = loads(table_uri, 4, record_key="id")
    compactor = txn.open_table(table_uri)
    real = _state.read_state
    fired = []

    def read_then_compact(context: Any) -> Any:
        state = real(context)
        if not fired:
            fired.append(None)
            fired[0] = compactor.compact()
        return state

    monkeypatch.setattr(_state, "read_state", read_then_compact)
    commit = {
        "delete": lambda: table.delete(keys=[3, 33]),
        "upsert": lambda: table.upsert(rows([3, 200])),
        "update": lambda: table.update(pc.field("id") == 3, {"price": -1.0}),
    }[write]()
    assert fired and fired[0] is not None, "the compaction committed between read and commit"
    assert commit is not None and commit.retries == 1
    ids = table.to_arrow()["id"].to_pylist()
    assert len(ids) == len(set(ids)), "no key twice"
    if write == "delete":
        assert 3 not in ids and 33 not in ids and len(ids) == 38
    elif write == "upsert":
        assert ids.count(3) == 1 and 200 in ids
    else:
        assert table.to_arrow(filter=pc.field("id") == 3)["price"].to_pylist() == [-1.0]
    assert table.validate().ok


def test_a_failed_rewrite_is_rolled_back(table_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = loads(table_uri, 4)
    before = status(table)

    def broken(*args: Any) -> Iterator[pa.RecordBatch]:
        raise OSError("disk went away")
        yield  # pragma: no cover

    monkeypatch.setattr(_compact, "_merged_rows", broken)
    with pytest.raises(OSError):
        table.compact()
    assert status(table) == before
    assert table.timeline()[-1].action == "rollback"
    assert table.validate().ok


# -- auto compaction -------------------------------------------------------------------------------

def test_auto_compaction_runs_after_a_load(table_uri: str) -> None:
    table = loads(table_uri, 2, properties={"compaction.auto": "true",
                                            "compaction.level_threshold": "2,0"})
    assert status(table) == {"0.1": ("Success", None), "1": ("Compacted", "0.1"),
                             "0": ("Compacted", "0.1")}


@pytest.mark.allow_metatxn_warnings
def test_a_failing_auto_compaction_never_fails_the_load(table_uri: str, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    table = loads(table_uri, 1, properties={"compaction.auto": "true",
                                            "compaction.level_threshold": "2,0"})

    def broken(*args: Any, **kwargs: Any) -> None:
        raise txn.CommitConflictError("someone else won")

    monkeypatch.setattr(_compact, "compact", broken)
    with caplog.at_level(logging.WARNING, logger="metatxn"):
        commit = table.append(rows(range(100, 110)))
    assert commit is not None and table.snapshot().count() == 20
    assert any("auto compaction" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(("name", "value"), [
    ("compaction.level_threshold", "four"),
    ("compaction.level_threshold", "4"),
    ("compaction.major.size_mb", "0"),
    ("compaction.preserve_segments", "-1"),
    ("compaction.auto", "yes please"),
])
def test_bad_compaction_properties_are_refused_at_creation(table_uri: str, name: str, value: str) -> None:
    with pytest.raises(txn.InvalidOptionError, match=name.replace(".", r"\.")):
        txn.create_table(table_uri, SCHEMA, properties={name: value})


def test_an_overwrite_is_not_failed_by_a_compaction_that_completed_while_it_ran(
        table_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = loads(table_uri, 4)
    compactor = txn.open_table(table_uri)
    from txn._commit._writes import _base

    real = _base.write_phase
    fired: list[bool] = []

    def write_after_compaction(*args: Any) -> Any:
        if not fired:
            fired.append(True)
            assert compactor.compact() is not None
        return real(*args)

    monkeypatch.setattr(_base, "write_phase", write_after_compaction)
    commit = table.overwrite(rows(range(500, 505)))
    assert fired and commit.operation == "overwrite"
    assert sorted(table.to_arrow()["id"].to_pylist()) == list(range(500, 505))
    assert status(table)["0.1"] == ("Marked for Delete", None)
    assert table.validate().ok


# -- the review's cases: held segments, dead compactions, bad ids, row counts ---------------------

def test_a_compaction_planned_before_a_delete_segment_began_leaves_it_its_segment(
        table_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The compaction read the table, then a DELETE SEGMENT began on one of its sources: at its
    own begin (under the lock) the compaction sees the segment held and chooses again."""
    from txn._commit import protocol_of

    table = loads(table_uri, 4)
    real = _state.read_state
    held: list[Any] = []

    def read_then_delete_begins(context: Any) -> Any:
        state = real(context)
        if not held:
            held.append(protocol_of(table._context).begin(
                "delete_segments", "replacecommit", sources=["1"]))
        return state

    monkeypatch.setattr(_state, "read_state", read_then_delete_begins)
    assert table.compact() is None, "without segment 1 three loads are left: nothing to merge"
    pending = held[0]
    assert {s.status for s in table.segments()} == {"Success"}
    pending.heartbeat.stop(delete=False)
    protocol_of(table._context).roll_back(pending.instant)
    monkeypatch.undo()
    assert table.compact() is not None and table.validate().ok


def test_a_dead_compaction_does_not_hold_its_segments(table_uri: str, clock: Any) -> None:
    from txn._commit import protocol_of

    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    for n in range(4):
        table.append(rows(range(n * 10, n * 10 + 10)))
    dead = protocol_of(table._context).begin("compact", "compaction", segment="0.1",
                                             sources=["0", "1", "2", "3"])
    dead.heartbeat.stop(delete=False)  # the compacting process died
    clock.advance(10 * 60 * 1000)  # past the heartbeat timeout and the lock lease
    commit = txn.open_table(table_uri, clock=clock).compact("custom", segments=["0", "1"])
    assert commit is not None and commit.segment == "0.1"
    assert [i.action for i in table.timeline()].count("rollback") == 1


@pytest.mark.parametrize("segments", ["23", b"0", 3, {"0": 1}])
def test_custom_segments_must_be_a_list_of_ids(table_uri: str, segments: Any) -> None:
    table = loads(table_uri, 4)
    with pytest.raises((txn.InvalidOptionError, txn.SegmentNotFoundError)):
        table.compact("custom", segments=segments)
    assert {s.status for s in table.segments()} == {"Success"}


def test_a_rewrite_that_loses_a_row_is_never_committed(table_uri: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    table = loads(table_uri, 4)
    before = status(table)
    real = _compact._merged_rows

    def one_row_short(*args: Any) -> Iterator[pa.RecordBatch]:
        batches = list(real(*args))
        yield batches[0].slice(1)
        yield from batches[1:]

    monkeypatch.setattr(_compact, "_merged_rows", one_row_short)
    with pytest.raises(txn.TxnError, match="wrote 39 rows, but its sources hold 40"):
        table.compact()
    assert status(table) == before and table.snapshot().count() == 40
    assert table.validate().ok
