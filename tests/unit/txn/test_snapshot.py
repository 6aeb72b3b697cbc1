"""Snapshots: what they hold, how filters prune files, and time travel.

A snapshot is built from completed instants only, reads no data folder listing, and opens only
the files whose column ranges can match a filter. Resolving the same ``as_of`` always gives the
same rows.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn import timeline
from tests.conftest import FakeClock
from tests.unit.txn.helpers import (
    SCHEMA,
    CountingStorage,
    data_files_on_storage,
    relative,
    rows,
    sorted_rows,
    storage_of,
    table_on,
)
from txn._commit import protocol_of


def _moment(clock: FakeClock) -> datetime:
    return datetime.fromtimestamp(clock.now_ms / 1000, tz=timezone.utc)


# -- what a snapshot holds --------------------------------------------------------------------------


def test_a_new_table_has_an_empty_snapshot(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    snap = table.snapshot()
    assert snap.instant is None
    assert snap.files() == [] and snap.count() == 0
    assert snap.to_arrow().schema.equals(SCHEMA) and snap.to_arrow().num_rows == 0
    assert snap.count(pc.field("id") > 1) == 0 and snap.files(pc.field("id") > 1) == []
    assert snap.to_arrow(columns=["id"]).column_names == ["id"]


def test_the_snapshot_instant_is_the_last_completed_commit(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    first = table.append(rows(range(3)))
    assert table.snapshot().instant == first.instant
    second = table.append(rows(range(3, 5)))
    snap = table.snapshot()
    assert snap.instant == second.instant == table.timeline()[-1].time
    assert snap.count() == 5


def test_files_describe_every_live_data_file(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"])
    commit = table.append(pa.concat_tables([rows(range(3), region="eu"), rows(range(3, 4), region="us")]))
    files = table.snapshot().files()
    assert all(isinstance(f, txn.DataFile) for f in files)
    assert sorted(relative(table, f) for f in files) == sorted(commit.paths_added)
    storage = storage_of(table_uri)
    for data_file in files:
        assert data_file.path.startswith(table_uri.rstrip("/") + "/")
        assert data_file.segment == "0" and data_file.format == "parquet"
        assert data_file.deleted_rows == 0
        assert data_file.size == storage.size(relative(table, data_file))
    assert sorted((f.partition["region"], f.rows) for f in files) == [("eu", 3), ("us", 1)]


def test_to_arrow_filters_and_projects(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, sort_by=["id"])
    table.append(rows(range(10)))
    table.append(rows(range(10, 20), region="us"))
    snap = table.snapshot()
    selected = snap.to_arrow(filter=(pc.field("id") >= 8) & (pc.field("region") == "us"),
                             columns=["price", "id"])
    assert selected.column_names == ["price", "id"]
    assert sorted(selected["id"].to_pylist()) == list(range(10, 20))
    assert snap.count(pc.field("id") < 3) == 3
    assert snap.count() == 20
    assert sorted_rows(table.to_arrow(pc.field("id") == 4, ["id", "price"])) == [{"id": 4, "price": 2.0}]


@pytest.mark.parametrize("keyed", [True, False])
def test_an_empty_projection_keeps_the_row_count(table_uri: str, clock: FakeClock,
                                                 keyed: bool) -> None:
    """``columns=[]`` is a projection like any other: as many rows as the snapshot holds (or
    the filter keeps) and no columns, through Table and Snapshot, for past snapshots and files
    with delete deltas alike (found by issue 22: 0 rows for a table of 3)."""
    table = txn.create_table(table_uri, SCHEMA, record_key="id" if keyed else None, clock=clock)

    def empty(result: pa.Table, expected: int) -> None:
        assert (result.num_rows, result.column_names) == (expected, [])

    empty(table.to_arrow(columns=[]), 0)
    first = table.append(rows(range(3)))
    empty(table.to_arrow(columns=[]), 3)
    clock.advance(1)
    table.append(rows(range(3, 8), region="us"))
    empty(table.snapshot().to_arrow(columns=[]), 8)
    clock.advance(1)
    table.delete(pc.field("id").isin([1, 4]))  # a delete delta on each file
    empty(table.to_arrow(columns=[]), 6)
    empty(table.snapshot().to_arrow(columns=[]), 6)
    empty(table.to_arrow(pc.field("region") == "us", columns=[]), 4)
    empty(table.snapshot().to_arrow(pc.field("id") >= 2, columns=[]), 5)
    empty(table.to_arrow(pc.field("id") > 100, columns=[]), 0)
    empty(table.snapshot(as_of=first.instant).to_arrow(columns=[]), 3)
    empty(table.to_arrow(columns=[], as_of=first.instant), 3)
    assert table.snapshot().count() == 6


@pytest.mark.parametrize("columns", [["id", "nope"], "id", ["Id"]])
def test_an_unknown_column_raises_invalid_option(table_uri: str, columns: object) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3)))
    with pytest.raises(txn.InvalidOptionError, match="columns"):
        table.snapshot().to_arrow(columns=columns)  # type: ignore[arg-type]
    with pytest.raises(txn.InvalidOptionError):
        table.to_arrow(columns=columns)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["id > 3", {"id": 3}, pc.equal, True])
def test_a_filter_that_is_not_an_expression_raises_invalid_option(table_uri: str, bad: object) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3)))
    snap = table.snapshot()
    for call in (snap.to_arrow, snap.count, snap.files, table.to_arrow):
        with pytest.raises(txn.InvalidOptionError, match=r"filter must be a pyarrow\.compute\.Expression"):
            call(bad)  # type: ignore[operator]


def test_a_filter_on_an_unknown_column_raises_invalid_option(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3)))
    with pytest.raises(txn.InvalidOptionError, match="does not apply"):
        table.to_arrow(pc.field("nope") == 1)


# -- pruning ----------------------------------------------------------------------------------------


def _three_loads(table: txn.Table) -> list[txn.Commit]:
    return [table.append(rows(range(i * 10, i * 10 + 10), region=region))
            for i, region in enumerate(["eu", "us", "apac"])]


def test_a_filter_on_a_sort_column_keeps_only_files_whose_range_can_match(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, sort_by=["id"])
    loads = _three_loads(table)
    snap = table.snapshot()
    assert len(snap.files()) == 3
    kept = snap.files(pc.field("id").isin([12, 15]))
    assert [relative(table, f) for f in kept] == list(loads[1].paths_added)
    assert len(snap.files(pc.field("id") > 100)) == 0
    assert len(snap.files(pc.field("id") >= 19)) == 2
    assert len(snap.files(pc.field("price") < 1)) == 1  # price = id / 2: only the first load
    assert len(snap.files(pc.field("id").is_null())) == 0


def test_files_whose_range_cannot_match_are_never_opened(table_uri: str) -> None:
    """Delete, behind the table's back, the data files a filter must prune: a filtered read still
    returns the right rows, and only an unfiltered read notices the files are gone."""
    table = txn.create_table(table_uri, SCHEMA, sort_by=["id"])
    loads = _three_loads(table)
    storage = storage_of(table_uri)
    for commit in (loads[0], loads[2]):
        for path in commit.paths_added:
            storage.delete(path)

    wanted = (pc.field("id") >= 12) & (pc.field("id") < 15)
    snap = table.snapshot()
    assert sorted(snap.to_arrow(wanted)["id"].to_pylist()) == [12, 13, 14]
    assert snap.count(wanted) == 3
    assert table.to_arrow(pc.field("region") == "us").num_rows == 10
    assert snap.count() == 30, "an unfiltered count reads no data file"
    with pytest.raises(OSError):
        snap.to_arrow()
    with pytest.raises(OSError):
        snap.to_arrow(pc.field("id") < 12)


def test_partition_filters_prune_whole_partitions(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region", "day"])
    data = pa.concat_tables([
        rows(range(4), region="eu", day=date(2026, 1, 1)),
        rows(range(4, 8), region="eu", day=date(2026, 1, 2)),
        rows(range(8, 12), region="us west", day=date(2026, 1, 1)),
        rows(range(12, 14), region=None, day=date(2026, 1, 1)),
    ])
    table.append(data)
    snap = table.snapshot()
    on_day = snap.files(pc.field("day") == date(2026, 1, 2))
    assert [(f.partition["region"], f.partition["day"]) for f in on_day] == [("eu", date(2026, 1, 2))]
    assert {f.partition["region"] for f in snap.files(pc.field("region") == "us west")} == {"us west"}
    assert [f.partition["region"] for f in snap.files(pc.field("region").is_null())] == [None]
    assert len(snap.files(pc.field("region") == "nowhere")) == 0

    storage = storage_of(table_uri)
    for data_file in snap.files():
        if data_file.partition["region"] != "eu":
            storage.delete(relative(table, data_file))
    assert sorted(table.to_arrow(pc.field("region") == "eu")["id"].to_pylist()) == list(range(8))
    assert table.snapshot().count(pc.field("day") == date(2026, 1, 2)) == 4


def test_a_file_with_nulls_or_nans_is_kept_wherever_they_could_match(table_uri: str) -> None:
    """A range learned from the other values must hide neither a file's nulls nor its NaNs:
    every filtered answer equals the same filter applied to all the rows in memory."""
    table = txn.create_table(table_uri, SCHEMA, sort_by=["id"])
    data = pa.table({"id": [1, 2, 3], "region": ["eu", None, "eu"],
                     "day": [date(2026, 1, 1)] * 3, "price": [1.0, float("nan"), 1.0]},
                    schema=SCHEMA)
    table.append(data)
    table.append(rows(range(10, 12)))
    everything = table.to_arrow()
    snap = table.snapshot()
    filters = [pc.field("region").is_null(), pc.field("region") == "eu", ~pc.field("region").is_valid(),
               pc.is_nan(pc.field("price")), pc.field("price") != 1.0, pc.field("price") > 5,
               pc.field("region") != "eu"]
    for expression in filters:
        assert snap.count(expression) == everything.filter(expression).num_rows, expression
        assert snap.to_arrow(expression).num_rows == everything.filter(expression).num_rows
    assert snap.count(pc.field("price") != 1.0) == 3  # the NaN, 5.0 and 5.5


# -- resolving a snapshot touches only metadata -------------------------------------------------------


def test_resolving_a_snapshot_lists_no_data_folder(table_uri: str) -> None:
    """Snapshot resolution lists only ``_timeline`` and ``_metadata``: never a data folder."""
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"],
                             properties={"metadata.compact_after": "2"})
    for i, region in enumerate(["eu", "us", "apac", "eu"]):
        table.append(rows(range(i * 10, i * 10 + 10), region=region))
    counting = CountingStorage(storage_of(table_uri))
    reader = table_on(table_uri, counting)

    counting.calls.clear()
    files = reader.snapshot().files()
    assert len(files) == 4
    assert reader.snapshot().count() == 40
    assert reader.snapshot(as_of=table.timeline()[1].time).files()
    listed = [path for op, path in counting.calls if op == "list"]
    assert listed, "resolution must list the timeline"
    assert all(path.startswith(("_timeline", "_metadata")) for path in listed), listed
    touched = {path for _, path in counting.calls}
    assert not any(path.endswith(".parquet") and not path.startswith("_metadata/")
                   for path in touched), "no data file is read to list a snapshot"


def test_an_unfiltered_count_reads_no_data_file(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(5)))
    table.append(rows(range(5, 7)))
    storage = storage_of(table_uri)
    for path in data_files_on_storage(table_uri):
        storage.delete(path)
    assert table.snapshot().count() == 7


# -- time travel ------------------------------------------------------------------------------------


def test_as_of_an_instant_sees_exactly_the_commits_up_to_it(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    commits = []
    for i in range(3):
        clock.advance(1_000)
        commits.append(table.append(rows(range(i * 10, i * 10 + 10))))
    for n, commit in enumerate(commits, start=1):
        snap = table.snapshot(as_of=commit.instant)
        assert snap.instant == commit.instant
        assert sorted(snap.to_arrow()["id"].to_pylist()) == list(range(n * 10))
        assert table.to_arrow(as_of=commit.instant).num_rows == n * 10


def test_as_of_a_datetime_sees_the_commits_completed_by_then(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    before_anything = _moment(clock)
    clock.advance(1_000)
    first = table.append(rows(range(3)))
    clock.advance(1_000)
    between = _moment(clock)
    clock.advance(1_000)
    table.append(rows(range(3, 5)))
    clock.advance(1_000)

    assert table.snapshot(as_of=before_anything).count() == 0
    assert table.snapshot(as_of=before_anything).instant is None
    assert table.snapshot(as_of=between).instant == first.instant
    assert table.snapshot(as_of=between).count() == 3
    naive = between.astimezone(timezone.utc).replace(tzinfo=None)
    assert table.snapshot(as_of=naive).count() == 3, "a naive datetime means UTC"
    tokyo = between.astimezone(timezone(timedelta(hours=9)))
    assert table.snapshot(as_of=tokyo).count() == 3
    assert table.snapshot(as_of=_moment(clock)).count() == 5


def test_time_travel_reaches_back_across_an_overwrite(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    clock.advance(1_000)
    loaded = table.append(rows(range(6)))
    clock.advance(1_000)
    before_overwrite = _moment(clock)
    clock.advance(1_000)
    replaced = table.overwrite(rows(range(100, 102)))

    assert sorted(table.to_arrow(as_of=loaded.instant)["id"].to_pylist()) == list(range(6))
    assert table.snapshot(as_of=before_overwrite).count() == 6
    assert table.snapshot(as_of=replaced.instant).count() == 2
    assert [f.segment for f in table.snapshot(as_of=loaded.instant).files()] == ["0"]


def test_as_of_a_pending_instant_raises_invalid_option(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(2)))
    pending = protocol_of(table._context).begin("append", "commit", new_segment=True)
    try:
        with pytest.raises(txn.InvalidOptionError, match="not completed"):
            table.snapshot(as_of=pending.instant.time)
    finally:
        pending.heartbeat.stop(delete=False)
        protocol_of(table._context).roll_back(pending.instant)
    with pytest.raises(txn.InvalidOptionError, match="not completed"):
        table.snapshot(as_of=pending.instant.time)  # now rolled back: still not a snapshot


@pytest.mark.parametrize("bad", ["yesterday", "2026", "20261301000000000", 20260101000000000, 1.5])
def test_a_malformed_as_of_raises_invalid_option(table_uri: str, bad: object) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match="as_of"):
        table.snapshot(as_of=bad)  # type: ignore[arg-type]


def _reader_with_a_null_key() -> pa.RecordBatchReader:
    loose = pa.schema([f.with_nullable(True) for f in SCHEMA])
    good = rows(range(900, 905), schema=loose).to_batches()[0]
    bad = pa.record_batch([pa.array([None], pa.int64()), pa.array(["x"]),
                           pa.array([None], pa.date32()), pa.array([1.0])], schema=loose)
    return pa.RecordBatchReader.from_batches(loose, iter([good, bad]))


def test_the_same_as_of_resolves_to_the_same_rows_later(table_uri: str, clock: FakeClock) -> None:
    """Stability: after more commits, overwrites, failed writes and metadata compactions, every
    earlier ``as_of`` (instant or datetime) still resolves to exactly the rows it did."""
    table = txn.create_table(table_uri, SCHEMA, clock=clock, sort_by=["id"],
                             properties={"metadata.compact_after": "2",
                                         "metadata.retain_commits": "50"})
    seen: list[tuple[object, list[dict[str, object]], list[str]]] = []

    def remember(as_of: object) -> None:
        snap = table.snapshot(as_of=as_of)  # type: ignore[arg-type]
        seen.append((as_of, sorted_rows(snap.to_arrow()), sorted(f.path for f in snap.files())))

    for i in range(8):
        clock.advance(1_000)
        if i == 5:
            commit = table.overwrite(rows(range(500, 503)))
        else:
            commit = table.append(rows(range(i * 10, i * 10 + 5)))
        remember(commit.instant)
        clock.advance(500)
        remember(_moment(clock))
        if i == 3:
            with pytest.raises(txn.SchemaMismatchError):
                table.append(_reader_with_a_null_key())

    bases = [k for k in storage_of(table_uri).list("_metadata/files") if k.endswith(".base.arrow")]
    assert bases, "the metadata table must have compacted for this test to mean anything"
    fresh = txn.open_table(table_uri, clock=clock)
    for as_of, expected_rows, expected_files in seen:
        for reader in (table, fresh):
            snap = reader.snapshot(as_of=as_of)  # type: ignore[arg-type]
            assert sorted_rows(snap.to_arrow()) == expected_rows, as_of
            assert sorted(f.path for f in snap.files()) == expected_files, as_of


def test_snapshots_ignore_writes_still_in_flight(table_uri: str) -> None:
    """Only completed instants count: a pending write's segment and files are invisible."""
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3)))
    pending = protocol_of(table._context).begin("append", "commit", new_segment=True)
    try:
        assert table.snapshot().count() == 3
        other = txn.open_table(table_uri)
        assert other.snapshot().count() == 3
        assert other.snapshot().instant == table.timeline()[0].time
    finally:
        pending.heartbeat.stop(delete=False)
        protocol_of(table._context).roll_back(pending.instant)


def test_snapshot_instant_strings_parse_as_instant_times(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    commit = table.append(rows(range(1)))
    assert timeline.parse_time(table.snapshot().instant or "") == timeline.parse_time(commit.instant)
