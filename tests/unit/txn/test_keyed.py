"""Keyed tables: unique record keys, upsert, lookup, and the record index behind them.

Invariants, observed through the public surface and the storage seam:

* a key is held by at most one live row: a keyed append refuses a key already in the table or
  twice in its data, and leaves the table exactly as it was (not one object written);
* an upsert replaces the rows of existing keys through delete deltas and writes every row of its
  data as a new segment: no existing data file is rewritten, and the last row of a key wins;
* ``lookup`` says where each live key is (segment, file, row position), and nothing for others;
* the record index agrees with the live rows (``validate``) after any sequence of writes, through
  metadata compaction and cleaning, and ``validate`` notices when it does not.
"""

from __future__ import annotations

import ast
import re
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest

import txn
from metatxn.indexes import shard_folder, shard_of
from tests.unit.txn.helpers import (
    SCHEMA,
    data_files_on_storage,
    read_data_file,
    relative,
    rows,
    storage_of,
)

#: A key column that may hold nulls (``SCHEMA.id`` is not nullable, so the schema check fires
#: first there).
NULLABLE = pa.schema([("k", pa.int64()), ("v", pa.string())])
#: A composite key (region, id).
COMPOSITE = pa.schema([("region", pa.string(), False), ("id", pa.int64(), False), ("v", pa.float64())])


def _listing(uri: str) -> list[str]:
    return storage_of(uri).list("", recursive=True)


def _state(table: txn.Table) -> tuple[Any, ...]:
    """Everything a reader can see: the timeline and the rows."""
    return ([(i.time, i.action, i.state) for i in table.timeline()],
            sorted(table.to_arrow().to_pylist(), key=str))


def _listed_keys(message: str, pattern: str) -> list[Any]:
    match = re.search(pattern, message)
    assert match, message
    return ast.literal_eval(match.group(1))  # type: ignore[no-any-return]


def _ids(table: txn.Table) -> list[int]:
    return sorted(table.to_arrow(columns=["id"])["id"].to_pylist())


def _keyed(uri: str, **kwargs: Any) -> txn.Table:
    return txn.create_table(uri, SCHEMA, record_key="id", **kwargs)


def _composite_rows(keys: list[tuple[str, int]], v: float = 0.0) -> pa.Table:
    return pa.table({"region": [k[0] for k in keys], "id": pa.array([k[1] for k in keys], pa.int64()),
                     "v": [v] * len(keys)}, schema=COMPOSITE)


# -- keyed appends ---------------------------------------------------------------------------------


def test_a_keyed_append_of_keys_already_in_the_table_fails_and_changes_nothing(table_uri: str) -> None:
    table = _keyed(table_uri)
    table.append(rows(range(10)))
    table.append(rows(range(10, 20)))
    before, listing = _state(table), _listing(table_uri)
    with pytest.raises(txn.DuplicateKeyError, match="already exist in the table") as info:
        table.append(rows([3, 100, 15, 101]))
    assert sorted(_listed_keys(str(info.value), r"record key\(s\) (\[.*?\]) already exist")) == [3, 15]
    assert "upsert" in str(info.value), "the message says what to do instead"
    assert _state(table) == before
    assert _listing(table_uri) == listing, "not one object was written"
    assert table.validate().ok


def test_a_keyed_append_repeating_a_key_within_its_data_fails_and_changes_nothing(table_uri: str) -> None:
    table = _keyed(table_uri)
    table.append(rows(range(5)))
    before, listing = _state(table), _listing(table_uri)
    with pytest.raises(txn.DuplicateKeyError, match="repeats within the data") as info:
        table.append(rows([50, 51, 50, 52, 51, 51]))
    assert sorted(_listed_keys(str(info.value), r"within the data: (\[.*?\]) appear")) == [50, 51]
    assert _state(table) == before and _listing(table_uri) == listing
    assert table.validate().ok


def test_a_duplicate_key_error_lists_a_few_keys_and_counts_the_rest(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    table.append(rows(range(100)))
    with pytest.raises(txn.DuplicateKeyError) as info:
        table.append(rows(range(90, 110)))
    shown = _listed_keys(str(info.value), r"record key\(s\) (\[.*?\])")
    assert len(shown) == 5 and set(shown) <= set(range(90, 100))
    assert "and 5 more" in str(info.value)


def test_a_key_whose_row_is_gone_can_be_appended_again(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    table.append(rows(range(10)))
    table.delete(keys=[1])
    table.delete(where=pc.field("id") == 2)
    table.upsert(rows([3]))  # replaced, still there: appending it again must fail
    table.append(rows([1, 2]))
    with pytest.raises(txn.DuplicateKeyError):
        table.append(rows([3]))
    assert _ids(table) == list(range(10))
    assert table.validate().ok


def test_null_keys_are_refused_by_every_write(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, NULLABLE, record_key="k")
    table.append(pa.table({"k": pa.array([1, 2], pa.int64()), "v": ["a", "b"]}))
    before, listing = _state(table), _listing(memory_uri)
    with_null = pa.table({"k": pa.array([3, None], pa.int64()), "v": ["c", "d"]})
    for write in (table.append, table.upsert, table.overwrite):
        with pytest.raises(txn.SchemaMismatchError, match="record key column 'k' holds 1 null"):
            write(with_null)
    assert _state(table) == before and _listing(memory_uri) == listing


# -- upsert ----------------------------------------------------------------------------------------


def _file_bytes(uri: str) -> dict[str, bytes]:
    storage = storage_of(uri)
    return {path: storage.read(path) for path in data_files_on_storage(uri)}


def test_an_upsert_updates_existing_keys_inserts_new_ones_and_rewrites_no_file(table_uri: str) -> None:
    table = _keyed(table_uri)
    first = table.append(rows(range(10)))
    second = table.append(rows(range(10, 20), region="us"))
    untouched_before = _file_bytes(table_uri)

    data = rows([5, 25, 26], region="apac")
    commit = table.upsert(data)
    assert commit is not None
    assert (commit.operation, commit.rows_added, commit.rows_deleted, commit.files_added) == (
        "upsert", 3, 1, 1)
    after = _file_bytes(table_uri)
    assert {p: after[p] for p in untouched_before} == untouched_before, "no existing file rewritten"
    assert set(after) - set(untouched_before) == set(commit.paths_added)

    result = {r["id"]: r for r in table.to_arrow().to_pylist()}
    assert sorted(result) == [*range(20), 25, 26]
    assert result[5]["region"] == "apac" and result[4]["region"] == "eu"
    files = {relative(table, f): f for f in table.snapshot().files()}
    [changed] = first.paths_added
    assert files[changed].deleted_rows == 1 and len(files[changed].delete_files) == 1
    [untouched] = second.paths_added
    assert files[untouched].deleted_rows == 0 and files[untouched].delete_files == ()
    assert table.snapshot().count() == 22
    assert table.validate().ok


def test_the_last_row_of_a_key_within_an_upsert_wins(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    table.append(rows(range(3)))
    data = pa.concat_tables([rows([1, 7], region="first"), rows([7, 1, 8], region="second"),
                             rows([7], region="third")])
    commit = table.upsert(data)
    assert commit is not None and commit.rows_added == 3 and commit.rows_deleted == 1
    regions = {r["id"]: r["region"] for r in table.to_arrow().to_pylist()}
    assert regions == {0: "eu", 1: "second", 2: "eu", 7: "third", 8: "second"}
    assert table.validate().ok


def test_upserting_again_and_again_keeps_one_row_per_key(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    for round_ in range(6):
        table.upsert(rows(range(round_, round_ + 5), region=f"r{round_}"))
    regions = {r["id"]: r["region"] for r in table.to_arrow().to_pylist()}
    assert regions == {i: f"r{min(i, 5)}" for i in range(10)}
    assert table.snapshot().count() == 10 and table.validate().ok


def test_an_empty_upsert_commits_nothing(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    table.append(rows(range(3)))
    before, listing = _state(table), _listing(memory_uri)
    assert table.upsert(rows([])) is None
    assert _state(table) == before and _listing(memory_uri) == listing


def test_an_upsert_with_the_wrong_schema_fails_and_changes_nothing(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    table.append(rows(range(3)))
    before, listing = _state(table), _listing(memory_uri)
    wrong_type = rows([1]).set_column(3, "price", pa.array(["cheap"]))
    for data in (pa.table({"id": pa.array([1], pa.int64())}), wrong_type,
                 rows([1]).append_column("extra", pa.array([1]))):
        with pytest.raises(txn.SchemaMismatchError):
            table.upsert(data)
    assert _state(table) == before and _listing(memory_uri) == listing


def test_upsert_and_lookup_need_a_keyed_table(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA)
    table.append(rows(range(3)))
    before = _state(table)
    with pytest.raises(txn.InvalidOptionError, match="needs a table with a record_key"):
        table.upsert(rows([1]))
    with pytest.raises(txn.InvalidOptionError, match="needs a table with a record_key"):
        table.lookup([1])
    assert _state(table) == before


def test_an_upsert_moves_a_key_to_another_partition(memory_uri: str) -> None:
    table = _keyed(memory_uri, partition_by=["region"])
    table.append(pa.concat_tables([rows(range(5), region="eu"), rows(range(5, 10), region="us")]))
    commit = table.upsert(rows([2, 7], region="apac"))
    assert commit is not None and commit.rows_deleted == 2
    by_region: dict[str, list[int]] = {}
    for row in table.to_arrow().to_pylist():
        by_region.setdefault(row["region"], []).append(row["id"])
    assert {k: sorted(v) for k, v in by_region.items()} == {
        "apac": [2, 7], "eu": [0, 1, 3, 4], "us": [5, 6, 8, 9]}
    found = table.lookup([2, 7])
    assert all(f.startswith("region=apac/") for f in found["file"].to_pylist())
    assert table.partitions() == [{"region": "apac"}, {"region": "eu"}, {"region": "us"}]
    assert table.to_arrow(filter=pc.field("region") == "eu")["id"].to_pylist().count(2) == 0
    assert table.validate().ok


# -- composite keys --------------------------------------------------------------------------------


def test_composite_keys_append_upsert_lookup_and_delete(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, COMPOSITE, record_key=["region", "id"])
    assert table.record_key == ["region", "id"] and table.record_key_columns == ["region", "id"]
    table.append(_composite_rows([("eu", 1), ("us", 1), ("eu", 2)]))
    with pytest.raises(txn.DuplicateKeyError) as info:
        table.append(_composite_rows([("us", 1), ("us", 2)]))
    assert _listed_keys(str(info.value), r"record key\(s\) (\[.*?\])") == [("us", 1)]
    with pytest.raises(txn.DuplicateKeyError):
        table.append(_composite_rows([("ap", 1), ("ap", 1)]))

    table.upsert(_composite_rows([("us", 1), ("ap", 1)], v=9.0))
    values = {(r["region"], r["id"]): r["v"] for r in table.to_arrow().to_pylist()}
    assert values == {("eu", 1): 0.0, ("us", 1): 9.0, ("eu", 2): 0.0, ("ap", 1): 9.0}

    found = table.lookup([("us", 1), ("eu", 3), ("ap", 1)])
    assert found.column_names == ["region", "id", "segment", "file", "position"]
    assert sorted(zip(found["region"].to_pylist(), found["id"].to_pylist(), strict=True)) == [
        ("ap", 1), ("us", 1)]
    as_table = table.lookup(pa.table({"id": pa.array([2], pa.int32()), "region": ["eu"]}))
    assert as_table["id"].to_pylist() == [2] and as_table["segment"].to_pylist() == ["0"]

    assert table.delete(keys=[("eu", 1), ("zz", 1)]) is not None
    left = table.to_arrow(columns=["region", "id"]).to_pylist()
    assert sorted((r["region"], r["id"]) for r in left) == [("ap", 1), ("eu", 2), ("us", 1)]
    with pytest.raises(txn.InvalidOptionError, match="give each key as a tuple"):
        table.lookup([1, 2])
    assert table.validate().ok


def test_composite_keys_are_found_in_a_compacted_index_whose_first_column_repeats(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, COMPOSITE, record_key=["region", "id"],
                             properties={"metadata.compact_after": "2", "record_index.shards": "2"})
    table.append(_composite_rows([("eu", i) for i in range(20_000)]))
    table.append(_composite_rows([("us", 0)]))  # the second commit compacts the index into bases
    assert table.lookup([("eu", 5), ("eu", 12_345), ("eu", 19_999)]).num_rows == 3
    with pytest.raises(txn.DuplicateKeyError):
        table.append(_composite_rows([("eu", 19_999)]))


def test_composite_keys_from_several_files_are_upserted_after_compaction(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, COMPOSITE, record_key=["region", "id"],
                             properties={"metadata.compact_after": "2", "record_index.shards": "1"})
    table.append(_composite_rows([(f"a{i:05d}", i) for i in range(5000)]))
    table.append(_composite_rows([(f"b{i:05d}", i) for i in range(5000)]))
    table.append(_composite_rows([("zz", 0)]))
    assert table.lookup([("a00005", 5), ("b04000", 4000)]).num_rows == 2
    commit = table.upsert(_composite_rows([("a00005", 5), ("b04000", 4000)], v=2.0))
    assert commit is not None and commit.rows_deleted == 2
    assert table.snapshot().count() == 10_001 and table.validate().ok


# -- lookup ----------------------------------------------------------------------------------------


def test_lookup_finds_where_live_keys_are_and_nothing_for_the_others(table_uri: str) -> None:
    table = _keyed(table_uri, sort_by=["price"])
    data = rows(range(100)).set_column(3, "price", pa.array([float((i * 37) % 100) for i in range(100)]))
    commit = table.append(data)
    table.delete(keys=[42])
    wanted = [0, 42, 99, 1000, -1, 57]
    found = table.lookup(wanted)
    assert found.column_names == ["id", "segment", "file", "position"]
    assert found.schema.field("id").type == pa.int64()
    assert sorted(found["id"].to_pylist()) == [0, 57, 99]
    [path] = commit.paths_added
    assert set(found["file"].to_pylist()) == {path} and set(found["segment"].to_pylist()) == {"0"}
    stored = read_data_file(table_uri, path)
    for key, position in zip(found["id"].to_pylist(), found["position"].to_pylist(), strict=True):
        assert stored["id"][position].as_py() == key, "the position is the row's place in its file"
    assert table.lookup([]).num_rows == 0
    assert table.lookup(pa.array([99, 0], pa.int32()))["id"].to_pylist() != []
    assert sorted(table.lookup(pa.chunked_array([[0], [99, 3]]))["id"].to_pylist()) == [0, 3, 99]
    assert table.lookup(pa.table({"id": [57], "other": ["ignored"]}))["id"].to_pylist() == [57]
    assert sorted(table.lookup(range(3))["id"].to_pylist()) == [0, 1, 2]


def test_lookup_of_an_empty_keyed_table_finds_nothing(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    assert table.lookup([1, 2]).num_rows == 0


@pytest.mark.parametrize("keys", ["abc", 5, b"ab", None, ["a"], [(1, 2)], [2**70],
                                  pa.table({"other": [1]})],
                         ids=["str", "int", "bytes", "none", "wrong type", "wide tuple",
                              "overflow", "table without key"])
def test_bad_keys_are_refused_with_invalid_option(memory_uri: str, keys: Any) -> None:
    table = _keyed(memory_uri)
    table.append(rows(range(3)))
    with pytest.raises(txn.InvalidOptionError):
        table.lookup(keys)
    with pytest.raises(txn.InvalidOptionError):
        table.delete(keys=keys)
    assert _ids(table) == [0, 1, 2]


def test_a_float_is_not_silently_truncated_to_an_integer_key(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    table.append(rows(range(3)))
    with pytest.raises(txn.InvalidOptionError):
        table.delete(keys=[1.5])
    assert _ids(table) == [0, 1, 2]


def test_null_keys_are_refused_by_lookup_and_delete(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    table.append(rows(range(3)))
    with pytest.raises((txn.SchemaMismatchError, txn.InvalidOptionError)):
        table.lookup([1, None])
    with pytest.raises((txn.SchemaMismatchError, txn.InvalidOptionError)):
        table.delete(keys=[2, None])
    assert _ids(table) == [0, 1, 2]


# -- overwrite, maintenance and validation ---------------------------------------------------------


def test_after_an_overwrite_lookup_finds_only_the_new_keys(memory_uri: str) -> None:
    table = _keyed(memory_uri)
    table.append(rows(range(10)))
    table.upsert(rows([3, 20]))
    table.overwrite(rows(range(100, 105)))
    assert sorted(table.lookup(list(range(110)))["id"].to_pylist()) == list(range(100, 105))
    table.append(rows([3, 20]))  # the old keys are free again
    with pytest.raises(txn.DuplicateKeyError):
        table.append(rows([104]))
    assert _ids(table) == [3, 20, *range(100, 105)]
    with pytest.raises(txn.DuplicateKeyError, match="repeats within the data"):
        table.overwrite(rows([1, 1]))
    assert table.validate().ok


def test_the_index_survives_many_compactions_and_cleanings(memory_uri: str) -> None:
    table = _keyed(memory_uri, partition_by=["region"], properties={
        "metadata.compact_after": "2", "metadata.retain_commits": "2", "record_index.shards": "4"})
    model: dict[int, str] = {}
    for step in range(14):
        region = ["eu", "us", "apac"][step % 3]
        fresh = list(range(step * 20, step * 20 + 20))
        if step % 4 == 3:
            table.upsert(rows(fresh[:10] + list(range(0, step * 20, 7)), region=region))
            model.update(dict.fromkeys(fresh[:10] + list(range(0, step * 20, 7)), region))
        elif step % 4 == 1 and model:
            gone = sorted(model)[::5]
            table.delete(keys=gone)
            for k in gone:
                del model[k]
            table.append(rows(fresh, region=region))
            model.update(dict.fromkeys(fresh, region))
        elif step % 4 == 2:
            table.update(pc.field("id") < step * 3, {"region": region})
            model.update({k: region for k in model if k < step * 3})
        else:
            table.append(rows(fresh, region=region))
            model.update(dict.fromkeys(fresh, region))
        probe = list(range(-3, step * 20 + 25))
        assert sorted(table.lookup(probe)["id"].to_pylist()) == sorted(model), step
    assert {r["id"]: r["region"] for r in table.to_arrow().to_pylist()} == model
    listing = _listing(memory_uri)
    assert any(k.startswith("_metadata/record_index/") and k.endswith(".base.arrow") for k in listing)
    assert table.validate().ok
    reopened = txn.open_table(memory_uri)
    assert sorted(reopened.lookup(sorted(model))["id"].to_pylist()) == sorted(model)


def _latest_index_blocks(uri: str, table: txn.Table) -> list[str]:
    last = table.timeline()[-1].time
    return [k for k in _listing(uri) if k.startswith("_metadata/record_index/")
            and k.endswith(f"{last}.log.arrow")]


def test_validate_reports_a_lost_record_index_block(memory_uri: str) -> None:
    table = _keyed(memory_uri, properties={"record_index.shards": "4"})
    table.append(rows(range(50)))
    table.append(rows(range(50, 100)))
    assert table.validate().ok
    lost = _latest_index_blocks(memory_uri, table)[0]
    storage_of(memory_uri).delete(lost)
    reopened = txn.open_table(memory_uri)
    with pytest.raises(txn.CorruptMetadataError, match=lost):
        reopened.lookup(list(range(100)))
    report = reopened.validate()
    assert not report.ok
    assert {(p.kind, p.path) for p in report.problems} == {("missing file", lost)}


def test_validate_reports_index_entries_that_point_at_the_wrong_row(memory_uri: str) -> None:
    table = _keyed(memory_uri, properties={"record_index.shards": "2"})
    table.append(rows(range(40)))
    storage = storage_of(memory_uri)
    block = _latest_index_blocks(memory_uri, table)[0]
    entries = ipc.open_file(pa.BufferReader(storage.read(block))).read_all()
    shifted = entries.set_column(entries.schema.get_field_index("position"), "position",
                                 pc.add(entries["position"], 1))
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, shifted.schema) as writer:
        writer.write_table(shifted)
    storage.put(block, sink.getvalue().to_pybytes())
    report = txn.open_table(memory_uri).validate()
    details = " ".join(p.detail for p in report.problems)
    assert not report.ok and {p.kind for p in report.problems} == {"record index entry"}
    assert "without an index entry at their place" in details and "for no live row" in details


def test_validate_reports_a_lost_shard_of_a_compacted_index(memory_uri: str) -> None:
    table = _keyed(memory_uri, properties={"metadata.compact_after": "2", "metadata.retain_commits": "2",
                                           "record_index.shards": "4"})
    for i in range(6):
        table.append(rows(range(i * 30, i * 30 + 30)))
    assert table.validate().ok
    shard = int(shard_of([pa.array([0], pa.int64())], 4)[0])
    storage = storage_of(memory_uri)
    for key in storage.list(shard_folder(shard)):
        storage.delete(key)
    reopened = txn.open_table(memory_uri)
    # The lookup lists only the key's shard: it names what the lost base had folded (a log).
    with pytest.raises(txn.CorruptMetadataError, match="_metadata/record_index/"):
        reopened.lookup([0])
    report = reopened.validate()
    assert not report.ok and {p.kind for p in report.problems} == {"missing file"}
    assert all(p.path.startswith(shard_folder(shard)) for p in report.problems)


def test_a_keyed_table_with_date_keys_round_trips(memory_uri: str) -> None:
    schema = pa.schema([("day", pa.date32(), False), ("n", pa.int64())])
    table = txn.create_table(memory_uri, schema, record_key="day",
                             properties={"metadata.compact_after": "2", "record_index.shards": "3"})
    days = [date(2026, 1, d) for d in range(1, 29)]
    table.append(pa.table({"day": pa.array(days[:14], pa.date32()), "n": pa.array(range(14), pa.int64())}))
    table.append(pa.table({"day": pa.array(days[14:], pa.date32()), "n": pa.array(range(14), pa.int64())}))
    table.upsert(pa.table({"day": pa.array([days[0], days[27]], pa.date32()),
                           "n": pa.array([-1, -1], pa.int64())}))
    found = table.lookup([days[0], days[13], date(2030, 1, 1)])
    assert sorted(found["day"].to_pylist()) == [days[0], days[13]]
    assert table.snapshot().count() == 28 and table.validate().ok


def _keyed_load_in_a_child(uri: str) -> int:
    table = txn.create_table(uri, pa.schema([("k", pa.int64())]), record_key="k")
    table.append(pa.table({"k": pa.array(range(100), pa.int64())}))
    return int(table.snapshot().count())


def test_a_process_forked_after_a_keyed_load_loads_too(tmp_path: Any) -> None:
    """The thread that encodes index logs is per process: a forked child gets its own instead
    of the parent's, whose threads it does not have (a task submitted there never runs)."""
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    assert _keyed_load_in_a_child(str(tmp_path / "parent")) == 100
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_keyed_load_in_a_child, (str(tmp_path / "child"),)).get(timeout=60) == 100
