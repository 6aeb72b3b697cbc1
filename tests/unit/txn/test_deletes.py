"""Deletes and updates through delete deltas, and horizontal compaction of those deltas.

Invariants, observed through the public surface and the storage seam:

* ``delete``/``update`` remove exactly the matching live rows; a write that matches nothing
  returns None and commits nothing; a bad argument fails before anything is written;
* a delete writes row positions, not data: its bytes grow with the rows deleted, not with the
  files they live in, and no data file is rewritten;
* a data file never has more live deltas than ``deletes.compaction.threshold``; when a write
  would exceed it, the file's deleted positions are merged into one delta in the same commit;
* every read (``count``, ``to_arrow`` with filters and columns, ``files``) agrees with a plain
  Python model after any sequence of writes, and time travel sees only the deltas completed by
  then;
* a delete or upsert that fails at any storage call leaves the table as it was: same rows,
  ``validate`` clean, none of its delta files or index blocks left once it is rolled back.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import txn
from tests.conftest import FakeClock
from tests.faults import InjectedFault, injected
from tests.unit.txn.helpers import (
    SCHEMA,
    Faulty,
    data_files_on_storage,
    rows,
    sorted_rows,
    storage_of,
    table_on,
)

#: Longer than the default lock lease and heartbeat timeout (60 s each).
EXPIRY_MS = 10 * 60_000


def _listing(uri: str) -> list[str]:
    return storage_of(uri).list("", recursive=True)


def _instants(table: txn.Table) -> list[tuple[str, str, str]]:
    return [(i.time, i.action, i.state) for i in table.timeline()]


def _ids(table: txn.Table | txn.Snapshot) -> list[int]:
    return sorted(table.to_arrow(columns=["id"])["id"].to_pylist())


def _positions(table: txn.Table, location: str) -> list[int]:
    """The row positions a delete delta (given by its location) holds."""
    prefix = table.uri.rstrip("/") + "/"
    data = storage_of(table.uri).read(location.removeprefix(prefix))
    return pq.read_table(pa.BufferReader(data))["position"].to_pylist()  # type: ignore[no-any-return]


# -- delete ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_delete_where_removes_exactly_the_matching_rows(table_uri: str, keyed: bool) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id" if keyed else None)
    table.append(rows(range(10)))
    table.append(rows(range(10, 20), region="us"))
    files_before = {p: storage_of(table_uri).read(p) for p in data_files_on_storage(table_uri)}
    commit = table.delete(where=pc.field("id") >= 15)
    assert commit is not None
    assert (commit.operation, commit.rows_deleted, commit.rows_added, commit.files_added) == (
        "delete", 5, 0, 0)
    assert commit.segment is None and commit.paths_added == ()
    assert _ids(table) == list(range(15))
    commit = table.delete(where=(pc.field("region") == "eu") & (pc.field("price") < 2.0))
    assert commit is not None and commit.rows_deleted == 4
    assert _ids(table) == [*range(4, 15)]
    assert {p: storage_of(table_uri).read(p) for p in data_files_on_storage(table_uri)} == files_before, (
        "deletes write deltas, never data files")
    assert table.snapshot().count() == 11 and table.validate().ok
    if keyed:
        assert sorted(table.lookup(list(range(20)))["id"].to_pylist()) == list(range(4, 15))


def test_delete_by_keys_removes_the_rows_of_those_keys(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id")
    table.append(rows(range(10)))
    table.append(rows(range(10, 20)))
    commit = table.delete(keys=[3, 15, 15, 999])
    assert commit is not None and commit.rows_deleted == 2
    assert table.delete(keys=pa.array([4], pa.int32())) is not None
    assert table.delete(keys=pa.table({"id": [5, 6]})) is not None
    assert _ids(table) == [0, 1, 2, 7, 8, 9, 10, 11, 12, 13, 14, 16, 17, 18, 19]
    assert table.lookup([3, 4, 5, 6, 15]).num_rows == 0
    assert table.validate().ok


def test_a_delete_matching_nothing_returns_none_and_commits_nothing(memory_uri: str) -> None:
    keyed = txn.create_table(memory_uri, SCHEMA, record_key="id")
    assert keyed.delete(where=pc.field("id") > 0) is None, "an empty table has nothing to delete"
    assert keyed.delete(keys=[1]) is None
    keyed.append(rows(range(5)))
    keyed.delete(keys=[2])
    before, listing = _instants(keyed), _listing(memory_uri)
    assert keyed.delete(where=pc.field("id") > 100) is None
    assert keyed.delete(where=pc.field("id") == 2) is None, "an already deleted row matches nothing"
    assert keyed.delete(keys=[2, 77]) is None
    assert keyed.delete(keys=[]) is None
    assert keyed.update(pc.field("id") > 100, {"price": 1.0}) is None
    assert _instants(keyed) == before and _listing(memory_uri) == listing


def test_delete_needs_exactly_one_valid_selection(memory_uri: str) -> None:
    table = txn.create_table(f"{memory_uri}/keyed", SCHEMA, record_key="id")
    table.append(rows(range(5)))
    unkeyed = txn.create_table(f"{memory_uri}/unkeyed", SCHEMA)
    unkeyed.append(rows(range(5)))
    before = (_instants(table), _instants(unkeyed), _listing(memory_uri))
    with pytest.raises(txn.InvalidOptionError, match="got neither"):
        table.delete()
    with pytest.raises(txn.InvalidOptionError, match="got both"):
        table.delete(where=pc.field("id") == 1, keys=[1])
    for where in ("id > 1", True, 1, lambda r: True, [pc.field("id") == 1]):
        with pytest.raises(txn.InvalidOptionError, match=r"must be a pyarrow\.compute\.Expression"):
            table.delete(where=where)
    with pytest.raises(txn.InvalidOptionError, match="does not apply"):
        table.delete(where=pc.field("no_such_column") == 1)
    with pytest.raises(txn.InvalidOptionError, match="does not apply"):
        table.delete(where=pc.field("region") > 5)
    with pytest.raises(txn.InvalidOptionError, match="needs a table with a record_key"):
        unkeyed.delete(keys=[1])
    assert (_instants(table), _instants(unkeyed), _listing(memory_uri)) == before
    assert _ids(table) == _ids(unkeyed) == [0, 1, 2, 3, 4]


def test_deleting_one_row_of_a_200k_row_file_writes_a_few_kilobytes(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="id")
    count = 200_000
    big = pa.table({
        "id": pa.array(range(count), pa.int64()), "region": pa.array(["eu"] * count),
        "day": pa.array([0] * count, pa.int32()).cast(pa.date32()),
        "price": pa.array([i * 0.25 for i in range(count)], pa.float64()),
    }, schema=SCHEMA)
    [path] = table.append(big).paths_added
    storage = storage_of(memory_uri)
    data = storage.read(path)
    sizes_before = {k: storage.size(k) for k in _listing(memory_uri)}

    commit = table.delete(keys=[150_001])  # in the file's second row group
    assert commit is not None and commit.rows_deleted == 1
    [data_file] = table.snapshot().files()
    [delta] = data_file.delete_files
    delta_size = storage.size(delta.removeprefix(memory_uri + "/"))
    written = sum(storage.size(k) for k in _listing(memory_uri) if k not in sizes_before)
    assert delta_size < 2_000 and delta_size * 1000 < len(data), (delta_size, len(data))
    assert written < len(data) / 100, f"the whole commit wrote {written} bytes for one row"
    assert storage.read(path) == data, "the data file is untouched"
    assert data_file.deleted_rows == 1 and _positions(table, delta) == [150_001]

    assert table.delete(where=pc.field("id") == 7) is not None
    [data_file] = table.snapshot().files()
    [delta] = data_file.delete_files
    assert _positions(table, delta) == [7, 150_001], "merged into one delta (threshold 1)"
    assert storage.size(delta.removeprefix(memory_uri + "/")) < 2_000
    snap = table.snapshot()
    assert snap.count() == count - 2
    assert snap.count(pc.field("id") >= 150_000) == 49_999
    assert snap.to_arrow(pc.field("id").isin([6, 7, 8, 150_001]), ["id"])["id"].to_pylist() == [6, 8]


# -- update ----------------------------------------------------------------------------------------


def test_update_sets_values_on_the_matching_rows(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id")
    table.append(rows(range(10)))
    commit = table.update(pc.field("id") < 3, {"price": 100.0, "region": None})
    assert commit is not None
    assert (commit.operation, commit.rows_added, commit.rows_deleted, commit.files_added) == (
        "update", 3, 3, 1)
    result = {r["id"]: r for r in table.to_arrow().to_pylist()}
    assert sorted(result) == list(range(10))
    assert all(result[i]["price"] == 100.0 and result[i]["region"] is None for i in range(3))
    assert all(result[i]["price"] == i / 2 and result[i]["region"] == "eu" for i in range(3, 10))
    assert table.update(None, {"price": pa.scalar(1, pa.int8())}) is not None, "None: every row"
    assert {r["price"] for r in table.to_arrow().to_pylist()} == {1.0}
    assert table.snapshot().count() == 10 and table.validate().ok


def test_an_update_of_the_partition_column_moves_the_rows(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["region"], record_key="id")
    table.append(pa.concat_tables([rows(range(6), region="eu"), rows(range(6, 10), region="us")]))
    assert table.update((pc.field("region") == "eu") & (pc.field("id") >= 4), {"region": "us"}) is not None
    by_region = {
        region: sorted(table.to_arrow(pc.field("region") == region)["id"].to_pylist())
        for region in ("eu", "us")}
    assert by_region == {"eu": [0, 1, 2, 3], "us": [4, 5, 6, 7, 8, 9]}
    assert all(f.startswith("region=us/") for f in table.lookup([4, 5])["file"].to_pylist())
    assert table.validate().ok


def test_a_partition_emptied_by_deletes_is_no_longer_shown(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["region"])
    table.append(pa.concat_tables([rows(range(3), region="eu"), rows(range(3, 6), region="us")]))
    table.update(pc.field("region") == "eu", {"region": "us"})
    table.delete(where=pc.field("id") == 5)
    assert table.to_arrow(pc.field("region") == "eu").num_rows == 0
    assert table.partitions() == [{"region": "us"}]


def test_an_update_of_a_record_key_column_is_refused(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="id")
    table.append(rows(range(3)))
    before = (_instants(table), _listing(memory_uri))
    with pytest.raises(txn.InvalidOptionError, match="cannot change record key column 'id'"):
        table.update(pc.field("id") == 1, {"id": 10})
    with pytest.raises(txn.InvalidOptionError, match="cannot change record key column 'id'"):
        table.update(pc.field("id") == 1, {"price": 1.0, "id": 10})
    assert (_instants(table), _listing(memory_uri)) == before


@pytest.mark.parametrize(("values", "error"), [
    ({"nope": 1}, txn.InvalidOptionError),
    ({}, txn.InvalidOptionError),
    ([("price", 1.0)], txn.InvalidOptionError),
    ({"price": "cheap"}, txn.SchemaMismatchError),
    ({"day": "tuesday"}, txn.SchemaMismatchError),
    ({"region": 3.5}, txn.SchemaMismatchError),
    ({"n": None}, txn.SchemaMismatchError),
    ({"n": 2**70}, txn.SchemaMismatchError),
], ids=["unknown column", "no values", "not a dict", "uncastable float", "uncastable date",
        "float for string", "null into not-null", "overflow"])
def test_an_update_with_bad_values_fails_and_changes_nothing(
    memory_uri: str, values: Any, error: type[Exception]
) -> None:
    schema = SCHEMA.append(pa.field("n", pa.int64(), nullable=False))
    table = txn.create_table(memory_uri, schema)
    table.append(rows(range(3), schema=SCHEMA).append_column(schema.field("n"), pa.array([1, 2, 3])))
    before = (_instants(table), _listing(memory_uri), sorted_rows(table.to_arrow()))
    with pytest.raises(error):
        table.update(pc.field("id") == 1, values)
    with pytest.raises(txn.InvalidOptionError):
        table.update("id == 1", {"price": 1.0})
    with pytest.raises(txn.InvalidOptionError, match="does not apply"):
        table.update(pc.field("nope") == 1, {"price": 1.0})
    assert (_instants(table), _listing(memory_uri), sorted_rows(table.to_arrow())) == before


# -- horizontal compaction -------------------------------------------------------------------------


def _one_file_table(uri: str, threshold: int) -> tuple[txn.Table, dict[int, int]]:
    """A keyed table of 60 rows in one file (sorted by price, so positions are not ids), and
    the position of each key."""
    table = txn.create_table(uri, SCHEMA, record_key="id", sort_by=["price"],
                             properties={"deletes.compaction.threshold": str(threshold)})
    data = rows(range(60))
    data = data.set_column(3, "price", pa.array([float((i * 7) % 60) for i in range(60)]))
    table.append(data)
    found = table.lookup(list(range(60)))
    return table, dict(zip(found["id"].to_pylist(), found["position"].to_pylist(), strict=True))


def test_with_threshold_1_a_file_keeps_one_delta_holding_every_deleted_position(memory_uri: str) -> None:
    table, position = _one_file_table(memory_uri, 1)
    deleted: set[int] = set()
    seen_deltas: set[str] = set()
    for step, keys in enumerate([[5], [17, 3], [40], [59, 0, 1]]):
        if step % 2:
            table.delete(keys=keys)
        else:
            table.delete(where=pc.field("id").isin(keys))
        deleted |= set(keys)
        [data_file] = table.snapshot().files()
        assert len(data_file.delete_files) == 1
        [delta] = data_file.delete_files
        assert delta not in seen_deltas, "each delete writes a new merged delta"
        seen_deltas.add(delta)
        assert _positions(table, delta) == sorted(position[k] for k in deleted)
        assert data_file.deleted_rows == len(deleted)
        assert _ids(table) == sorted(set(range(60)) - deleted)
    assert table.validate().ok


def test_with_threshold_3_a_file_gathers_three_deltas_then_they_are_merged(memory_uri: str) -> None:
    table, position = _one_file_table(memory_uri, 3)
    deleted: list[int] = []
    counts = []
    for key in [10, 20, 30, 40, 50, 11, 21, 31]:
        upserted = key % 20 == 0
        if upserted:  # an upsert deletes the old row through a delta too
            table.upsert(rows([key]))
        else:
            table.delete(keys=[key])
        deleted.append(key)
        data_file = next(f for f in table.snapshot().files() if f.segment == "0")
        counts.append(len(data_file.delete_files))
        held = [_positions(table, d) for d in data_file.delete_files]
        union = sorted(p for part in held for p in part)
        assert union == sorted(position[k] for k in deleted), "the live deltas are disjoint"
        assert data_file.deleted_rows == len(deleted)
    assert counts == [1, 2, 3, 1, 2, 3, 1, 2]
    assert _ids(table) == sorted(set(range(60)) - {10, 30, 50, 11, 21, 31})
    assert table.validate().ok


def test_time_travel_sees_the_deltas_of_its_time_not_the_merged_ones(memory_uri: str) -> None:
    table, _ = _one_file_table(memory_uri, 1)
    first = table.delete(keys=[1])
    second = table.delete(keys=[2])
    assert first is not None and second is not None
    then = table.snapshot(as_of=first.instant)
    assert _ids(then) == [i for i in range(60) if i != 1]
    assert then.count() == 59 and then.files()[0].deleted_rows == 1
    [old_delta] = then.files()[0].delete_files
    [new_delta] = table.snapshot().files()[0].delete_files
    assert old_delta != new_delta and len(_positions(table, new_delta)) == 2
    table.overwrite(rows([100]))
    assert _ids(table.snapshot(as_of=second.instant)) == [i for i in range(60) if i not in (1, 2)]
    assert _ids(table) == [100]


# -- every read agrees with a model ----------------------------------------------------------------

_Predicate = Callable[[dict[str, Any]], bool]
_FILTERS: list[tuple[str, Callable[[random.Random], tuple[ds.Expression, _Predicate]]]] = [
    ("id range", lambda rng: (lambda a, b: ((pc.field("id") >= a) & (pc.field("id") < b),
                                            lambda r: a <= r["id"] < b))(*sorted(rng.sample(range(400), 2)))),
    ("region", lambda rng: (lambda g: (pc.field("region") == g, lambda r: r["region"] == g))(
        rng.choice(["eu", "us", "apac"]))),
    ("price", lambda rng: (lambda x: (pc.field("price") < x, lambda r: r["price"] < x))(rng.uniform(0, 10))),
]


def _random_rows(rng: random.Random, ids: list[int]) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "region": pa.array([rng.choice(["eu", "us", "apac"]) for _ in ids], pa.string()),
        "day": pa.array([None] * len(ids), pa.date32()),
        "price": pa.array([round(rng.uniform(0, 10), 2) for _ in ids], pa.float64()),
    }, schema=SCHEMA)


def _check_reads(table: txn.Table, model: dict[int, dict[str, Any]], threshold: int,
                 rng: random.Random) -> None:
    snap = table.snapshot()
    expected = sorted(model.values(), key=lambda r: r["id"])
    assert snap.count() == len(model)
    assert sorted_rows(snap.to_arrow()) == expected
    for _, make in _FILTERS:
        expression, predicate = make(rng)
        chosen = [r for r in expected if predicate(r)]
        assert snap.count(expression) == len(chosen)
        assert sorted_rows(snap.to_arrow(expression, ["price", "id"])) == [
            {"price": r["price"], "id": r["id"]} for r in chosen]
        pruned = {f.path for f in snap.files(expression)}
        holding = {f.path for f in snap.files()}
        assert pruned <= holding
    files = snap.files()
    assert sum(f.rows - f.deleted_rows for f in files) == len(model)
    for data_file in files:
        assert len(data_file.delete_files) <= threshold
        held = [p for d in data_file.delete_files for p in _positions(table, d)]
        assert len(held) == len(set(held)) == data_file.deleted_rows
        assert all(0 <= p < data_file.rows for p in held)


@pytest.mark.parametrize(("keyed", "partitioned", "threshold", "seed"), [
    (False, True, 2, 1), (True, False, 1, 2), (True, True, 1, 3), (True, False, 3, 4),
])
def test_every_read_agrees_with_a_model_through_random_writes(
    memory_uri: str, keyed: bool, partitioned: bool, threshold: int, seed: int
) -> None:
    rng = random.Random(seed)
    table = txn.create_table(memory_uri, SCHEMA, record_key="id" if keyed else None,
                             partition_by=["region"] if partitioned else None,
                             properties={"write.target_file_bytes": "1500", "metadata.retain_commits": "50",
                                         "deletes.compaction.threshold": str(threshold)})
    model: dict[int, dict[str, Any]] = {}
    history: list[tuple[str, dict[int, dict[str, Any]]]] = []
    next_id = itertools.count()
    operations = ["append", "delete", "update"] + (["upsert", "delete keys"] if keyed else [])
    for _ in range(18):
        operation = rng.choice(operations) if model else "append"
        count_before = len(table.timeline())
        commit: txn.Commit | None
        if operation == "append":
            data = _random_rows(rng, [next(next_id) for _ in range(rng.randint(1, 40))])
            commit = table.append(data)
            model.update({r["id"]: r for r in data.to_pylist()})
            matched = data.num_rows
        elif operation == "upsert":
            ids = rng.sample(sorted(model), min(len(model), rng.randint(1, 8)))
            ids += [next(next_id) for _ in range(rng.randint(0, 5))]
            data = _random_rows(rng, ids)
            commit = table.upsert(data)
            matched = sum(1 for i in ids if i in model)
            model.update({r["id"]: r for r in data.to_pylist()})
        elif operation == "delete keys":
            ids = [*rng.sample(sorted(model), min(len(model), rng.randint(1, 6))), 10_000]
            commit = table.delete(keys=ids)
            matched = sum(1 for i in ids if i in model)
            for i in ids:
                model.pop(i, None)
        else:
            _, make = rng.choice(_FILTERS)
            expression, predicate = make(rng)
            chosen = [i for i, r in model.items() if predicate(r)]
            matched = len(chosen)
            if operation == "delete":
                commit = table.delete(where=expression)
                for i in chosen:
                    del model[i]
            else:
                values: dict[str, Any] = rng.choice([{"price": round(rng.uniform(0, 10), 2)},
                                                     {"region": rng.choice(["eu", "us", "apac"])}])
                commit = table.update(expression, values)
                for i in chosen:
                    model[i] = {**model[i], **values}
        if operation != "append" and matched == 0 and operation != "upsert":
            assert commit is None and len(table.timeline()) == count_before, operation
        else:
            assert commit is not None
            assert commit.rows_deleted == (0 if operation == "append" else matched), operation
            history.append((commit.instant, {k: dict(v) for k, v in model.items()}))
        _check_reads(table, model, threshold, rng)
    for instant, then in history:
        snap = table.snapshot(as_of=instant)
        assert snap.count() == len(then)
        assert sorted_rows(snap.to_arrow()) == sorted(then.values(), key=lambda r: r["id"]), instant
    assert table.validate().ok
    if keyed:
        assert sorted(table.lookup(list(range(-1, next(next_id) + 1)))["id"].to_pylist()) == sorted(model)


# -- failures at every storage call ----------------------------------------------------------------


def _clone(source: str, target: str) -> None:
    """Copy every object of the table at ``source`` to ``target`` (through the storage seam)."""
    src, dst = storage_of(source), storage_of(target)
    for key in src.list("", recursive=True):
        dst.put(key, src.read(key))


def _leftovers_of(uri: str, instant: str) -> list[str]:
    """Objects an instant wrote that must be gone once it is rolled back."""
    # (A completed deltacommit on the metadata timeline may stay: readers never consult it.)
    return [k for k in _listing(uri) if not k.startswith("_metadata/_timeline/") and (
            f"_{instant}." in k.rsplit("/", 1)[-1] or k.rsplit("/", 1)[-1] == instant
            or k.rsplit("/", 1)[-1].startswith(f"{instant}.log")
            or k.rsplit("/", 1)[-1].startswith(f"{instant}_"))]


OPERATIONS: dict[str, Callable[[txn.Table], Any]] = {
    "delete": lambda t: t.delete(keys=[1, 31, 45]),
    "upsert": lambda t: t.upsert(rows([2, 32, 100, 101])),
}


def _drop(uri: str) -> None:
    storage = storage_of(uri)
    for key in storage.list("", recursive=True):
        storage.delete(key)


@pytest.mark.allow_metatxn_warnings
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_write_failing_at_any_storage_call_leaves_the_table_as_it_was(
    memory_uri: str, operation: str, when: str
) -> None:
    """Fail the 1st, 2nd, ... storage call of the write (``after``: only calls that change the
    store, whose change lands before the error): it either commits whole, or raises and the table
    is exactly as before, with validate clean and nothing of the write left on storage once it is
    rolled back (at once, or by the next writer after its heartbeat expired)."""
    clock = FakeClock()
    template = f"{memory_uri}/template"
    # A short lock timeout: a write whose lock got stuck gives up its rollback quickly (the
    # next writer finishes it).
    setup = txn.create_table(template, SCHEMA, record_key="id", clock=clock,
                             properties={"record_index.shards": "4", "lock.timeout_ms": "200"})
    setup.append(rows(range(30)))
    setup.append(rows(range(30, 60)))
    setup.delete(keys=[0])  # the first file has a delta, so the write merges deltas too
    run = OPERATIONS[operation]
    last_before = setup.timeline()[-1].time
    before = sorted_rows(setup.to_arrow())
    unlocked = [k for k in _listing(template) if not k.startswith("_timeline/lock/")]

    probe = f"{memory_uri}/probe"
    _clone(template, probe)
    counting = Faulty(storage_of(probe))
    run(table_on(probe, counting, clock=FakeClock(clock.now_ms)))
    after = sorted_rows(txn.open_table(probe).to_arrow())
    assert after != before
    writes = {"put_if_absent", "put", "delete"}
    calls = [c for c in counting.calls if when == "before" or c.op in writes]
    outcomes: set[str] = set()

    for nth in range(1, len(calls) + 1):
        uri = f"{memory_uri}/n{nth}"
        _clone(template, uri)
        faulty = Faulty(storage_of(uri))
        own_clock = FakeClock(clock.now_ms)
        faulty.arm(nth, when=when, ops=None if when == "before" else writes)
        try:
            run(table_on(uri, faulty, clock=own_clock))
            failure: BaseException | None = None
        except Exception as exc:
            failure = exc
        assert faulty.fault is not None, nth
        where = f"call {nth} {faulty.fault.call.op}({faulty.fault.call.path!r}) {failure!r}"
        if failure is not None:
            assert injected(failure) is not None or isinstance(failure, txn.CommitStateUnknownError), where
        reader = txn.open_table(uri, clock=own_clock)
        mine = [i for i in reader.timeline() if i.time > last_before and i.action != "rollback"]
        if not mine:  # failed before it began: nothing at all was written
            assert failure is not None, where
            outcomes.add("failed before it began")
            assert [k for k in _listing(uri) if not k.startswith("_timeline/lock/")] == unlocked, where
            _drop(uri)
            continue
        [instant] = mine
        if instant.state == "completed":  # returned, or landed with its outcome unknown
            outcomes.add("committed" if failure is None else "landed, reported unknown")
            assert failure is None or isinstance(failure, txn.CommitStateUnknownError), where
            assert sorted_rows(reader.to_arrow()) == after, where
            assert reader.validate().ok, (where, str(reader.validate()))
            _drop(uri)
            continue
        assert failure is not None, where
        assert sorted_rows(reader.to_arrow()) == before, where
        assert reader.validate().ok, (where, str(reader.validate()))
        if instant.state != "rolledback":
            # Left pending (unknown commit outcome, or its rollback could not take the lock):
            # the next writer rolls it back once its heartbeat expired.
            outcomes.add("left pending")
            assert instant.state in ("requested", "inflight"), where
            own_clock.advance(EXPIRY_MS)
            txn.open_table(uri, clock=own_clock).append(rows([1_000]))
            reader = txn.open_table(uri, clock=own_clock)
            assert {i.time: i.state for i in reader.timeline()}[instant.time] == "rolledback", where
            assert sorted_rows(reader.to_arrow()) == sorted_rows(
                pa.concat_tables([rows([1_000]), pa.Table.from_pylist(before, schema=SCHEMA)])), where
            assert reader.validate().ok, where
        else:
            outcomes.add("rolled back")
        assert _leftovers_of(uri, instant.time) == [], where
        _drop(uri)
    assert {"committed", "rolled back"} <= outcomes, outcomes


@pytest.mark.allow_metatxn_warnings
def test_a_write_whose_lock_confirmation_fails_is_rolled_back_at_once(
        memory_uri: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    # A write past the small-write bound, which takes the lock twice (begin, commit).
    monkeypatch.setattr("txn._commit._writes._base.SMALL_WRITE_BYTES", -1)
    table = txn.create_table(memory_uri, SCHEMA, record_key="id", clock=clock,
                             properties={"lock.timeout_ms": "200"})
    table.append(rows(range(10)))
    faulty = Faulty(storage_of(memory_uri))
    # Lock listings of a delete: begin's acquire (head, confirm), then commit's (head, confirm).
    faulty.arm(4, ops={"list"}, match=lambda p: p == "_timeline/lock")
    with pytest.raises(InjectedFault):
        table_on(memory_uri, faulty, clock=clock).delete(keys=[3])
    assert faulty.calls[faulty.fault.call.index - 2].op == "put_if_absent"  # type: ignore[union-attr]
    states = [(i.action, i.state) for i in txn.open_table(memory_uri, clock=clock).timeline()]
    assert states[-2:] == [("commit", "rolledback"), ("rollback", "completed")]
    txn.open_table(memory_uri, clock=clock).append(rows([99]))  # the lock is free at once
