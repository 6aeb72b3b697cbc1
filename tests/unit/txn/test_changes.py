"""The change feed (``Table.changes``): what each operation emits, window semantics, retention,
and the one property that ties it together: the changes of ``(a, b]`` applied to the snapshot at
``a`` give the snapshot at ``b`` (design/changes.md).

Clocks are injected (``FakeClock``), so instants and completion times are deterministic.
"""

from __future__ import annotations

import decimal
import pickle
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txn
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, rows, storage_of

REMOVED = {"delete", "update_preimage"}
ADDED = {"insert", "update_postimage"}


def _key(row: dict[str, Any], names: list[str]) -> tuple[Any, ...]:
    return tuple(row[n] for n in names)


def replayed(before: pa.Table, changes: pa.Table) -> Counter[tuple[Any, ...]]:
    """The rows of ``before`` with ``changes`` applied, as a multiset over its columns."""
    names = before.column_names
    state = Counter(_key(r, names) for r in before.to_pylist())
    for row in changes.to_pylist():
        if row["_change_type"] in REMOVED:
            key = _key(row, names)
            assert state[key] > 0, f"the feed deletes a row the snapshot does not hold: {row}"
            state[key] -= 1
        else:
            assert row["_change_type"] in ADDED, row
            state[_key(row, names)] += 1
    return +state


def assert_feed_replays(table: txn.Table) -> None:
    """Every window between consecutive completed data instants, and the whole history from
    ``earliest``, replays onto the earlier snapshot to give the later one."""
    done = [e for e in reversed(table.history()) if e.action in ("commit", "replacecommit",
                                                                  "compaction")]
    previous: tuple[str, pa.Table] = ("earliest", table.snapshot().schema.empty_table())
    for entry in done:
        after = table.snapshot(as_of=entry.instant).to_arrow()
        feed = table.changes(previous[0], entry.instant).to_arrow()
        before = previous[1]
        if before.schema != after.schema:  # a schema change in between: compare as of now
            before = _conformed(before, after.schema)
        assert replayed(before, feed) == Counter(_key(r, after.column_names)
                                                 for r in after.to_pylist()), entry
        previous = (entry.instant, after)
    whole = table.changes("earliest").to_arrow()
    latest = table.to_arrow()
    assert replayed(latest.schema.empty_table(), whole) == Counter(
        _key(r, latest.column_names) for r in latest.to_pylist())


def _conformed(table: pa.Table, schema: pa.Schema) -> pa.Table:
    return pa.table({f.name: table[f.name] if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in schema}, schema=schema)


def _kinds(feed: pa.Table) -> list[tuple[int, str]]:
    return sorted(zip(feed["id"].to_pylist(), feed["_change_type"].to_pylist(), strict=True))


@pytest.fixture
def keyed(table_uri: str, clock: FakeClock) -> txn.Table:
    return txn.create_table(table_uri, SCHEMA, record_key="id", clock=clock)


@pytest.fixture
def plain(table_uri: str, clock: FakeClock) -> txn.Table:
    return txn.create_table(table_uri, SCHEMA, clock=clock)


# -- what each operation emits ------------------------------------------------------------------


def test_an_upsert_emits_pre_and_post_images_of_existing_keys_and_inserts_of_new_ones(
        keyed: txn.Table, clock: FakeClock) -> None:
    first = keyed.append(rows(range(5)))
    clock.advance(10)
    keyed.upsert(rows([3, 4, 7]).set_column(3, "price", pa.array([30.0, 40.0, 70.0])))
    feed = keyed.changes(first.instant).to_arrow()
    assert _kinds(feed) == [(3, "update_postimage"), (3, "update_preimage"),
                            (4, "update_postimage"), (4, "update_preimage"), (7, "insert")]
    images = {(r["id"], r["_change_type"]): r["price"] for r in feed.to_pylist()}
    assert images[3, "update_preimage"] == 1.5 and images[3, "update_postimage"] == 30.0
    # deleted rows and pre-images come before the rows written
    kinds = feed["_change_type"].to_pylist()
    assert kinds.index("update_preimage") < kinds.index("update_postimage")
    assert_feed_replays(keyed)


def test_deletes_by_key_and_by_predicate_emit_the_deleted_rows(keyed: txn.Table,
                                                               clock: FakeClock) -> None:
    first = keyed.append(rows(range(10)))
    clock.advance(10)
    keyed.delete(keys=[2, 99])
    clock.advance(10)
    keyed.delete(pc.field("id") >= 8)
    feed = keyed.changes(first.instant).to_arrow()
    assert _kinds(feed) == [(2, "delete"), (8, "delete"), (9, "delete")]
    assert feed.filter(pc.field("id") == 8)["price"].to_pylist() == [4.0]
    assert_feed_replays(keyed)


def test_unkeyed_update_emits_images_and_a_second_delete_only_its_own_rows(
        plain: txn.Table, clock: FakeClock) -> None:
    plain.append(rows(range(6)))
    clock.advance(10)
    updated = plain.update(pc.field("id") == 1, {"price": 100.0})
    clock.advance(10)
    # the file already has a delta: this one replaces it with the union (horizontal compaction)
    deleted = plain.delete(pc.field("id").isin([2, 3]))
    update_rows = plain.changes(_before(plain, updated), updated.instant).to_arrow()
    assert _kinds(update_rows) == [(1, "update_postimage"), (1, "update_preimage")]
    delete_rows = plain.changes(updated.instant, deleted.instant).to_arrow()
    assert _kinds(delete_rows) == [(2, "delete"), (3, "delete")], "row 1 was deleted before"
    assert_feed_replays(plain)


def _before(table: txn.Table, commit: txn.Commit) -> str:
    """The instant completed just before ``commit``."""
    done = [e.instant for e in reversed(table.history())]
    return done[done.index(commit.instant) - 1]


def test_an_overwrite_deletes_the_rows_live_before_it_and_inserts_its_own(
        plain: txn.Table, clock: FakeClock) -> None:
    plain.append(rows(range(4)))
    clock.advance(10)
    plain.delete(pc.field("id") == 0)
    clock.advance(10)
    before = plain.history()[0].instant
    plain.overwrite(rows([50]))
    feed = plain.changes(before).to_arrow()
    assert _kinds(feed) == [(1, "delete"), (2, "delete"), (3, "delete"), (50, "insert")]
    assert feed["_commit_instant"].unique().to_pylist() == [plain.history()[0].instant]
    assert_feed_replays(plain)


def test_table_services_and_schema_changes_emit_nothing(keyed: txn.Table, clock: FakeClock) -> None:
    for ids in (range(3), range(3, 6), range(6, 9)):
        keyed.append(rows(ids))
        clock.advance(10)
    before = keyed.history()[0].instant
    assert keyed.compact(txn.CompactionKind.MAJOR) is not None
    clock.advance(10)
    keyed.add_columns([pa.field("note", pa.string())])
    clock.advance(10)
    keyed.set_properties({"clean.retain_hours": "0"})
    feed = keyed.changes(before)
    assert feed.to_arrow().num_rows == 0 and feed.instants() == []
    # a delete of rows the compaction rewrote: the feed reads the compacted file
    clock.advance(10)
    keyed.upsert(pa.table({"id": [4], "region": ["us"], "day": [None], "price": [2.0],
                           "note": ["moved"]}, schema=keyed.schema))
    changed = keyed.changes(before).to_arrow()
    assert _kinds(changed) == [(4, "update_postimage"), (4, "update_preimage")]
    pre = changed.filter(pc.field("_change_type") == "update_preimage").to_pylist()[0]
    assert pre["note"] is None and pre["region"] == "eu", "the old row, in today's schema"
    assert_feed_replays(keyed)


def test_a_keyed_transaction_pairs_by_key(keyed: txn.Table, clock: FakeClock) -> None:
    first = keyed.append(rows(range(4)))
    clock.advance(10)
    with keyed.transaction() as tx:
        tx.delete(keys=[0])
        tx.upsert(rows([1, 9]))
        tx.delete(keys=[2])
        tx.append(rows([2]))
    assert _kinds(keyed.changes(first.instant).to_arrow()) == [
        (0, "delete"), (1, "update_postimage"), (1, "update_preimage"),
        (2, "update_postimage"), (2, "update_preimage"), (9, "insert")]
    assert_feed_replays(keyed)


def test_add_segment_and_delete_segment(plain: txn.Table, clock: FakeClock, tmp_path: Path) -> None:
    folder = tmp_path / "outside"
    folder.mkdir()
    pq.write_table(rows(range(100, 103)), folder / "part-0.parquet")
    start = plain.append(rows(range(2))).instant
    clock.advance(10)
    added = plain.add_segment(str(folder))
    clock.advance(10)
    plain.delete(pc.field("id") == 101)  # a delta on the external file, inside the table
    clock.advance(10)
    feed = plain.changes(start, added.instant).to_arrow()
    assert _kinds(feed) == [(100, "insert"), (101, "insert"), (102, "insert")]
    assert feed["_commit_instant"].unique().to_pylist() == [added.instant]
    plain.delete_segments([added.segment])
    last = plain.changes(added.instant).to_arrow()  # 101 by the delete, 100 and 102 by the drop
    assert _kinds(last) == [(100, "delete"), (101, "delete"), (102, "delete")]
    assert last.filter(pc.field("id") == 101)["_commit_instant"].to_pylist() != \
        last.filter(pc.field("id") == 100)["_commit_instant"].to_pylist()
    assert_feed_replays(plain)


def test_a_partitioned_table_and_a_stream(tmp_path: Path, clock: FakeClock) -> None:
    table = txn.create_table(str(tmp_path / "t"), SCHEMA, partition_by=["region"], clock=clock,
                             properties={"streaming": "true"})
    table.append(pa.concat_tables([rows(range(3), region="eu"), rows(range(3, 5), region="us")]))
    clock.advance(10)
    stream = table.stream("feed")
    stream.write(0, rows(range(10, 12), region="us"))
    clock.advance(10)
    stream.write(1, rows([12], region="eu"))
    clock.advance(10)
    table.delete(pc.field("region") == "eu")
    feed = table.changes("earliest").to_arrow()
    assert Counter(feed["_change_type"].to_pylist()) == {"insert": 8, "delete": 4}
    assert_feed_replays(table)


# -- the window -----------------------------------------------------------------------------------


def test_windows_are_exclusive_at_start_inclusive_at_end_and_chain(plain: txn.Table,
                                                                   clock: FakeClock) -> None:
    commits = []
    for i in range(4):
        clock.advance(10)
        commits.append(plain.append(rows([i])))
    assert plain.changes(commits[0].instant, commits[2].instant).to_arrow()["id"].to_pylist() == [1, 2]
    assert plain.changes(commits[3].instant).to_arrow().num_rows == 0
    seen, start = [], "earliest"
    for _ in range(3):  # consecutive windows, each from the last one's end
        feed = plain.changes(start)
        seen += feed.to_arrow()["id"].to_pylist()
        start = feed.end
        clock.advance(10)
        plain.append(rows([len(seen) + 100]))
    assert seen == [0, 1, 2, 3, 104, 105]
    # moments work too: a datetime and an ISO string, both of the first commit's completion
    done = plain.history()[-1].completed_at
    moment = datetime.strptime(done, "%Y%m%d%H%M%S%f").replace(tzinfo=timezone.utc)
    for start_at in (moment, moment.isoformat()):
        assert plain.changes(start_at, commits[1].instant).to_arrow()["id"].to_pylist() == [1]


def test_the_end_of_a_window_of_an_empty_table_starts_the_next_one(plain: txn.Table) -> None:
    empty = plain.changes("earliest")
    assert empty.to_arrow().num_rows == 0 and empty.end == empty.start
    plain.append(rows([1]))
    assert plain.changes(empty.end).to_arrow()["id"].to_pylist() == [1]


def test_columns_filter_counts_and_summary(keyed: txn.Table, clock: FakeClock) -> None:
    first = keyed.append(rows(range(5)))
    clock.advance(10)
    keyed.upsert(rows([1, 8]))
    clock.advance(10)
    keyed.delete(keys=[2])
    feed = keyed.changes(first.instant, columns=["price"],
                         filter=pc.field("_change_type") != "update_preimage")
    assert feed.schema.names == ["price", *txn.CHANGE_COLUMNS]
    assert feed.to_arrow().num_rows == feed.count_rows() == 3
    assert [(s.operation, s.inserted, s.updated, s.deleted) for s in feed.summary()] == [
        ("upsert", 1, 1, 0), ("delete", 0, 0, 1)]
    assert [i.operation for i in feed.instants()] == ["upsert", "delete"]
    assert pa.table(feed).num_rows == 3, "an Arrow C stream"
    by_id = keyed.changes(first.instant, filter=pc.field("id") == 1).to_arrow()
    assert _kinds(by_id) == [(1, "update_postimage"), (1, "update_preimage")]


def test_parts_read_anywhere_after_pickling(keyed: txn.Table, clock: FakeClock) -> None:
    first = keyed.append(rows(range(5)))
    for ids in ([1, 7], [9]):
        clock.advance(10)
        keyed.upsert(rows(ids))
    feed = keyed.changes(first.instant)
    shipped = pickle.loads(pickle.dumps(feed))
    assert len(pickle.dumps(feed)) < 20_000
    parts = [pickle.loads(pickle.dumps(p)) for p in feed.parts()]
    batches = [b for p in parts for b in shipped.read_part(p)]
    assert pa.Table.from_batches(batches, schema=feed.schema).equals(feed.to_arrow())


@pytest.mark.parametrize(("start", "end", "message"), [
    (12, None, "changes start must be"),
    ("yesterday", None, "is not an instant time"),
    ("earliest", "20000101000000000", "before start"),
])
def test_bad_bounds_are_refused(plain: txn.Table, start: Any, end: Any, message: str) -> None:
    plain.append(rows([1]))
    later = plain.history()[0].completed_at
    with pytest.raises(txn.InvalidOptionError, match=message):
        plain.changes(later if end else start, end)


def test_bad_columns_and_filter_are_refused(plain: txn.Table) -> None:
    plain.append(rows([1]))
    with pytest.raises(txn.InvalidOptionError, match="unknown"):
        plain.changes("earliest", columns=["nope"])
    with pytest.raises(txn.InvalidOptionError, match="does not apply"):
        plain.changes("earliest", filter=pc.field("nope") == 1)
    with pytest.raises(txn.InvalidOptionError, match="not completed"):
        pending = plain.begin_write("append")
        plain.changes(pending.instant)


# -- retention ------------------------------------------------------------------------------------


def _churn(table: txn.Table, clock: FakeClock) -> list[txn.Commit]:
    commits = []
    for write in (lambda: table.append(rows(range(10))), lambda: table.overwrite(rows(range(50, 55))),
                  lambda: table.append(rows(range(60, 62))), lambda: table.append(rows([70]))):
        clock.advance(1_000)
        commits.append(write())
    return commits


def test_a_window_past_clean_is_refused_whole_naming_the_oldest_start(
        table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"clean.retain_commits": "2", "clean.retain_hours": "0"})
    commits = _churn(table, clock)
    table.clean()
    for start in ("earliest", commits[0].instant):
        with pytest.raises(txn.SnapshotExpiredError) as expired:
            table.changes(start)
        assert f"oldest instant a window may start at is {commits[1].instant}" in str(expired.value)
        assert "changes.retain_commits" in str(expired.value)
    assert table.changes(commits[1].instant).to_arrow()["id"].to_pylist() == [60, 61, 70]


def test_changes_retain_commits_keeps_the_history_clean_would_remove(
        table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock, properties={
        "clean.retain_commits": "2", "clean.retain_hours": "0", "changes.retain_commits": "10"})
    _churn(table, clock)
    table.clean()
    assert_feed_replays(table)


def test_a_clean_racing_a_feed_read_raises_expired(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"clean.retain_commits": "1", "clean.retain_hours": "0"})
    commits = _churn(table, clock)
    feed = table.changes(commits[0].instant)  # planned before the clean: reads after it
    table.clean()
    with pytest.raises(txn.SnapshotExpiredError):
        feed.to_arrow()


def test_a_window_ending_before_a_clean_reads_a_removed_file_whose_replaced_delta_is_gone(
        table_uri: str, clock: FakeClock) -> None:
    """A removed file whose first delta a later one replaced, and CLEAN FILES then deleted:
    the window ending before the clean reads the file less the replacement's positions."""
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"clean.retain_commits": "2", "clean.retain_hours": "0"})
    commits = []
    for write in (lambda: table.append(rows(range(6))), lambda: table.delete(pc.field("id") == 0),
                  lambda: table.delete(pc.field("id") == 1), lambda: table.append(rows([20])),
                  lambda: table.overwrite(rows([30]))):
        clock.advance(1_000)
        commits.append(write())
    assert table.clean().files, "the replaced delta (and nothing a retained snapshot needs) goes"
    feed = table.changes(commits[3].instant, commits[4].instant).to_arrow()
    assert _kinds(feed) == [(2, "delete"), (3, "delete"), (4, "delete"), (5, "delete"),
                            (20, "delete"), (30, "insert")]


# -- found by the independent review ------------------------------------------------------------


def test_an_end_past_the_newest_completion_ends_at_it_so_the_next_window_misses_nothing(
        plain: txn.Table, clock: FakeClock) -> None:
    first = plain.append(rows(range(3)))
    for end in (datetime.fromtimestamp(clock.now_ms / 1000 + 3600, tz=timezone.utc),
                "29991231000000000"):
        feed = plain.changes(first.instant, end)
        assert feed.end == plain.history()[0].completed_at, "capped at what the listing saw"
        clock.advance(10)
        late = plain.append(rows([len(plain.to_arrow()) + 10]))
        assert plain.changes(feed.end).to_arrow()["_commit_instant"].to_pylist() == [late.instant]


def test_changes_retain_commits_keeps_that_many_commits_readable(
        table_uri: str, clock: FakeClock) -> None:
    """The window over the last N commits starts after the (N+1)-th: an overwrite N commits
    back needs the files it removed, which clean.retain_commits=N alone would let go."""
    table = txn.create_table(table_uri, SCHEMA, clock=clock, properties={
        "clean.retain_commits": "1", "clean.retain_hours": "0", "changes.retain_commits": "2"})
    commits = []
    for write in (lambda: table.append(rows(range(3))), lambda: table.overwrite(rows([50])),
                  lambda: table.append(rows([60]))):
        clock.advance(1_000)
        commits.append(write())
    table.clean()
    assert _kinds(table.changes(commits[0].instant).to_arrow()) == [
        (0, "delete"), (1, "delete"), (2, "delete"), (50, "insert"), (60, "insert")]


def test_metadata_cleaning_never_limits_the_feed(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock, properties={
        "metadata.compact_after": "2", "metadata.retain_commits": "2"})
    commits = [table.append(rows([i])) for i in range(12)]
    with pytest.raises(txn.SnapshotExpiredError):  # time travel is limited by it...
        table.snapshot(as_of=commits[0].instant)
    feed = table.changes("earliest")  # ...the change feed, which reads no old metadata, is not
    assert sorted(feed.to_arrow()["id"].to_pylist()) == list(range(12))
    assert_feed_replays_from(table, commits[-2].instant)


def assert_feed_replays_from(table: txn.Table, start: str) -> None:
    before = table.snapshot(as_of=start).to_arrow()
    after = table.to_arrow()
    assert replayed(before, table.changes(start).to_arrow()) == Counter(
        _key(r, after.column_names) for r in after.to_pylist())


def test_an_unpickled_scanner_refuses_what_needs_the_plan_and_a_worker_sees_expiry(
        table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"clean.retain_commits": "1", "clean.retain_hours": "0"})
    commits = _churn(table, clock)
    feed = table.changes(commits[0].instant)
    worker = pickle.loads(pickle.dumps(feed))
    for needs_plan in (worker.to_arrow, worker.count_rows, worker.summary, worker.instants,
                       worker.parts):
        with pytest.raises(txn.InvalidOptionError, match="unpickled without its plan"):
            needs_plan()
    table.clean()
    with pytest.raises(txn.SnapshotExpiredError):
        for part in feed.parts():
            list(worker.read_part(part))


def test_a_keyed_overwrite_emits_deletes_and_inserts(keyed: txn.Table, clock: FakeClock) -> None:
    first = keyed.append(rows(range(3)))
    clock.advance(10)
    keyed.overwrite(rows([1, 5]))
    assert _kinds(keyed.changes(first.instant).to_arrow()) == [
        (0, "delete"), (1, "delete"), (1, "insert"), (2, "delete"), (5, "insert")]


def test_a_filter_failing_on_the_values_and_no_columns(plain: txn.Table) -> None:
    plain.append(rows([300]))
    with pytest.raises(txn.InvalidOptionError, match="failed on the change rows"):
        plain.changes("earliest", filter=pc.field("id").cast(pa.int8()) > 0).to_arrow()
    bare = plain.changes("earliest", columns=[])
    assert bare.to_arrow().column_names == list(txn.CHANGE_COLUMNS)
    assert bare.count_rows() == 1


def test_a_retention_record_from_before_files_from_limits_the_feed_at_its_floor(
        table_uri: str, clock: FakeClock) -> None:
    """retention.json written before CLEAN FILES' floor was kept apart: its one floor may be
    a clean's, so the feed takes it (never a window whose files may be gone)."""
    commits = []
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    for i in range(3):
        clock.advance(10)
        commits.append(table.append(rows([i])))
    old = b'{"kind":"retention","resolvable_from":"%s","source":"metadata"}' % (
        commits[1].instant.encode())
    storage_of(table_uri).put("_metadata/retention.json", old)
    with pytest.raises(txn.SnapshotExpiredError, match=commits[1].instant):
        table.changes(commits[0].instant)
    assert table.changes(table.history()[1].completed_at).to_arrow()["id"].to_pylist() == [2]


def test_every_type_reads_back_as_the_snapshot_has_it(table_uri: str) -> None:
    schema = pa.schema([
        ("id", pa.int64(), False), ("u", pa.uint32()), ("ts", pa.timestamp("ns", tz="Europe/Paris")),
        ("sec", pa.timestamp("s")), ("d", pa.decimal128(12, 3)), ("s", pa.large_string()),
        ("b", pa.binary()), ("l", pa.list_(pa.int16())),
        ("st", pa.struct([("x", pa.float32()), ("y", pa.string())])), ("day", pa.date32()),
        ("dur", pa.duration("us")), ("f16", pa.float16())])
    data = pa.table({
        "id": [1, 2], "u": [1, 4_000_000_000], "ts": [1, 2], "sec": [3, 4],
        "d": [decimal.Decimal("1.5"), None], "s": ["a", "b"], "b": [b"x", None],
        "l": [[1, 2], []], "st": [{"x": 1.0, "y": "p"}, None], "day": [1, 2], "dur": [5, 6],
        "f16": pa.array([1.0, 2.0], pa.float16())}, schema=schema)
    table = txn.create_table(table_uri, schema)
    table.append(data)
    feed = table.changes("earliest", columns=schema.names).to_arrow()
    assert feed.select(schema.names).equals(table.to_arrow())
