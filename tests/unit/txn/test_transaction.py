"""``Table.transaction()``: several operations, one instant, all or nothing, conflict-checked as one.

Invariants:

* every operation sees the snapshot the transaction read at its first operation plus the
  transaction's own earlier operations (read-your-writes);
* a clean exit commits ONE instant (operation ``transaction``, ``operations`` in order); an
  exception, an operation that raised out of the block, or a conflict leaves the table as it was;
* a commit that completed after the transaction's snapshot and wrote a key or file it read or
  wrote fails it with ``CommitConflictError``; a compaction meanwhile replays the operations;
* the record index and ``validate()`` agree with the rows afterwards.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn import timeline
from tests.unit.txn.helpers import SCHEMA, data_files_on_storage, priced, rows, sorted_rows
from txn._context import CommitMetadata


def keyed(uri: str, **kwargs: Any) -> txn.Table:
    """A keyed table with two segments: ids 0-4 (segment 0) and 5-9 (segment 1), price id / 2."""
    table = txn.create_table(uri, SCHEMA, record_key="id", **kwargs)
    table.append(rows(range(5)))
    table.append(rows(range(5, 10)))
    return table


def unkeyed(uri: str, **kwargs: Any) -> txn.Table:
    table = txn.create_table(uri, SCHEMA, **kwargs)
    table.append(rows(range(5)))
    table.append(rows(range(5, 10)))
    return table


def prices(table: txn.Table) -> dict[int, float]:
    data = table.to_arrow()
    return dict(zip(data["id"].to_pylist(), data["price"].to_pylist(), strict=True))


def indexed(table: txn.Table, ids: list[int]) -> list[int]:
    return sorted(table.lookup(ids)["id"].to_pylist())


def start(i: int) -> dict[int, float]:
    return {k: k / 2 for k in range(i)}


# -- one instant, every operation ------------------------------------------------------------------

def test_a_transaction_of_every_operation_commits_one_instant(memory_uri: str) -> None:
    table = keyed(memory_uri)
    instants = len(table.timeline())
    file = next(f for f in table.snapshot().files() if f.segment == "1")
    with table.transaction() as tx:
        tx.delete(keys=[1, 2])
        tx.append(priced([20, 21], 3.0))
        tx.upsert(priced([3, 21], 4.0))
        tx.update(pc.field("id") == 4, {"price": 5.0})
        tx.delete(where=pc.field("id") == 0)
        tx.delete_rows({file.path: [0, 1]})  # ids 5 and 6
    commit = tx.result
    assert commit is not None and commit.operation == "transaction"
    assert commit.operations == ("delete", "append", "upsert", "update", "delete", "delete_rows")
    assert len(table.timeline()) == instants + 1
    assert table.timeline()[-1].action == "commit"
    assert commit.rows_deleted == 7  # 1, 2, 3 (upserted), 4 (updated), 0, 5, 6
    assert commit.rows_added == 4 and commit.segment == "2"  # 20, 21, 3, 4: one new segment
    assert prices(table) == {3: 4.0, 4: 5.0, 7: 3.5, 8: 4.0, 9: 4.5, 20: 3.0, 21: 4.0}
    assert indexed(table, list(range(25))) == [3, 4, 7, 8, 9, 20, 21]
    assert table.validate().ok


def test_the_commit_metadata_records_the_operations_and_commit_options(memory_uri: str) -> None:
    table = keyed(memory_uri)
    options = txn.CommitProperties(extra={"job": "nightly"})
    with table.transaction(commit_properties=options) as tx:
        tx.append(rows([30]))
        tx.delete(keys=[0])
    assert tx.result is not None and tx.result.extra == {"job": "nightly"}
    last = table.timeline()[-1]
    recorded = timeline.Timeline(timeline.open_storage(memory_uri)).read_metadata(last, CommitMetadata)
    assert recorded.operation == "transaction" and recorded.operations == ["append", "delete"]


def test_single_writes_record_no_operations(memory_uri: str) -> None:
    commit = keyed(memory_uri).append(rows([40]))
    assert commit is not None and commit.operation == "append" and commit.operations == ()


def test_an_explicit_commit_closes_the_transaction(memory_uri: str) -> None:
    table = keyed(memory_uri)
    tx = table.transaction()
    tx.append(rows([11]))
    commit = tx.commit()
    assert commit is not None and tx.result == commit and 11 in prices(table)
    for late in (lambda: tx.append(rows([12])), lambda: tx.delete(keys=[1]), tx.commit):
        with pytest.raises(txn.InvalidOptionError, match="closed"):
            late()
    with table.transaction() as again:
        again.append(rows([12]))
        assert again.commit() is not None
    assert 12 in prices(table), "a block that committed explicitly does not commit twice"


def test_a_transaction_that_changes_nothing_commits_nothing(memory_uri: str) -> None:
    table = keyed(memory_uri)
    instants = len(table.timeline())
    with table.transaction() as empty:
        pass
    with table.transaction() as cancelled:
        cancelled.append(rows([50, 51]))
        cancelled.delete(keys=[50, 51])
        cancelled.delete(keys=[77])
    assert empty.result is None and cancelled.result is None
    assert len(table.timeline()) == instants and prices(table) == start(10)


# -- read-your-writes ------------------------------------------------------------------------------

def test_an_upsert_after_an_append_of_the_same_key_replaces_it(memory_uri: str) -> None:
    table = keyed(memory_uri)
    with table.transaction() as tx:
        tx.append(priced([20], 1.0))
        tx.upsert(priced([20], 2.0))
    assert prices(table)[20] == 2.0 and tx.result is not None and tx.result.rows_added == 1
    assert indexed(table, [20]) == [20] and table.validate().ok


def test_a_delete_after_an_append_deletes_the_staged_rows(memory_uri: str) -> None:
    table = keyed(memory_uri)
    with table.transaction() as tx:
        tx.append(priced([20, 21, 22], 1.0))
        tx.delete(keys=[20])
        tx.delete(where=pc.field("id") == 21)
    assert tx.result is not None and tx.result.rows_added == 1 and tx.result.rows_deleted == 0
    assert prices(table) == {**start(10), 22: 1.0} and indexed(table, [20, 21, 22]) == [22]


def test_a_keyed_append_after_a_delete_of_that_key_is_allowed(memory_uri: str) -> None:
    table = keyed(memory_uri)
    with table.transaction() as tx:
        tx.delete(keys=[3])
        tx.append(priced([3], 9.0))
    assert prices(table) == {**start(10), 3: 9.0}
    assert table.lookup([3])["segment"].to_pylist() == ["2"], "the index points at the new row"
    assert table.validate().ok


def test_a_keyed_append_of_a_key_staged_earlier_is_a_duplicate(memory_uri: str) -> None:
    table = keyed(memory_uri)
    with table.transaction() as tx:
        tx.append(rows([20]))
        with pytest.raises(txn.DuplicateKeyError, match="staged by an earlier operation"):
            tx.append(rows([20, 21]))
        with pytest.raises(txn.DuplicateKeyError, match="already exist"):
            tx.append(rows([4]))
        tx.append(rows([21]))  # an operation that raised staged nothing: 21 is new
    assert prices(table) == {**start(10), 20: 10.0, 21: 10.5}


def test_an_update_sees_staged_rows_and_a_delete_sees_updated_ones(memory_uri: str) -> None:
    table = keyed(memory_uri)
    with table.transaction() as tx:
        tx.append(priced([20], 1.0))
        tx.update(pc.field("price") < 1.5, {"price": 7.0})  # 20 (staged) and 0, 1, 2 (table)
        tx.delete(keys=[1])
        tx.delete(where=pc.field("price") == 7.0)  # every updated row, staged or not
    expected = {k: v for k, v in start(10).items() if k not in (0, 1, 2)}
    assert prices(table) == expected
    assert indexed(table, [0, 1, 2, 20]) == [], "deleted keys leave the record index"
    assert table.validate().ok


def test_delete_rows_of_a_row_deleted_earlier_is_a_no_op(memory_uri: str) -> None:
    table = keyed(memory_uri)
    file = next(f for f in table.snapshot().files() if f.segment == "0")
    with table.transaction() as tx:
        tx.delete(keys=[0])
        tx.delete_rows({file.path: [0, 1]})
    assert tx.result is not None and tx.result.rows_deleted == 2
    assert sorted(prices(table)) == list(range(2, 10)) and indexed(table, [0, 1]) == []


@pytest.mark.parametrize("bad", [{"nope.parquet": [0]}, "positions", {"__file__": [99]},
                                 {"__file__": ["x"]}])
def test_delete_rows_refuses_unknown_files_and_positions(memory_uri: str, bad: Any) -> None:
    table = keyed(memory_uri)
    path = table.snapshot().files()[0].path
    if isinstance(bad, dict) and "__file__" in bad:
        bad = {path: bad["__file__"]}
    with table.transaction() as tx, pytest.raises(txn.InvalidOptionError):
        tx.delete_rows(bad)
    assert tx.result is None and prices(table) == start(10)


# -- unkeyed and partitioned tables ----------------------------------------------------------------

def test_an_unkeyed_transaction(memory_uri: str) -> None:
    table = unkeyed(memory_uri)
    with table.transaction() as tx:
        tx.append(rows([3, 30]))  # no key: duplicates are fine
        tx.delete(where=pc.field("id") == 3)  # the table's 3 and the staged one
        tx.update(pc.field("id") == 30, {"price": 1.0})
        with pytest.raises(txn.InvalidOptionError, match="record_key"):
            tx.delete(keys=[1])
        with pytest.raises(txn.InvalidOptionError, match="record_key"):
            tx.upsert(rows([1]))
    assert sorted_rows(table.to_arrow()) == sorted_rows(pa.concat_tables([
        rows([0, 1, 2, 4, 5, 6, 7, 8, 9]), priced([30], 1.0)]))
    assert table.validate().ok


def test_a_partitioned_transaction(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["region"], record_key="id")
    table.append(pa.concat_tables([rows([1, 2], region="eu"), rows([3, 4], region="us")]))
    with table.transaction() as tx:
        tx.delete(where=pc.field("region") == "eu")
        tx.append(rows([5], region="asia"))
        tx.upsert(rows([3], region="us"))
    assert sorted(prices(table)) == [3, 4, 5]
    assert sorted(str(p["region"]) for p in table.partitions()) == ["asia", "us"]
    assert table.validate().ok


def test_an_overwrite_first_replaces_what_the_transaction_read(memory_uri: str) -> None:
    table = keyed(memory_uri)
    with table.transaction() as tx:
        tx.overwrite(rows([1, 2, 3]))
        tx.append(rows([4]))  # the table's 4 was replaced: no duplicate
        tx.delete(keys=[1])
        tx.upsert(priced([2], 9.0))
        with pytest.raises(txn.InvalidOptionError, match="overwrite"):
            tx.delete_rows({table.snapshot().files()[0].path: [0]})
    assert prices(table) == {2: 9.0, 3: 1.5, 4: 2.0}
    assert tx.result is not None and sorted(tx.result.segments_removed) == ["0", "1"]
    assert [s.status for s in table.segments() if s.id in ("0", "1")] == ["Marked for Delete"] * 2
    assert indexed(table, list(range(10))) == [2, 3, 4] and table.validate().ok


def test_an_overwrite_only_as_the_first_operation(memory_uri: str) -> None:
    table = keyed(memory_uri)
    with table.transaction() as tx:
        tx.append(rows([20]))
        with pytest.raises(txn.InvalidOptionError, match="first operation"):
            tx.overwrite(rows([1]))
    assert prices(table) == {**start(10), 20: 10.0}


def test_a_partition_scoped_overwrite_is_the_only_operation(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["region"])
    table.append(pa.concat_tables([rows([1], region="eu"), rows([2], region="us")]))
    with table.transaction() as tx:
        tx.overwrite(rows([3], region="eu"), partitions="dynamic")
        with pytest.raises(txn.InvalidOptionError, match="only operation"):
            tx.append(rows([4], region="us"))
    assert sorted(prices(table)) == [2, 3]


# -- all or nothing --------------------------------------------------------------------------------

def test_an_exception_in_the_block_writes_nothing(memory_uri: str) -> None:
    table = keyed(memory_uri)
    timeline_before, files_before = table.timeline(), data_files_on_storage(memory_uri)
    with pytest.raises(RuntimeError, match="the caller"), table.transaction() as tx:
        tx.delete(keys=[1, 2])
        tx.append(rows([20]))
        raise RuntimeError("the caller changed its mind")
    assert table.timeline() == timeline_before and data_files_on_storage(memory_uri) == files_before
    assert prices(table) == start(10) and tx.result is None
    with pytest.raises(txn.InvalidOptionError, match="closed"):
        tx.append(rows([21]))


def test_a_duplicate_key_leaving_the_block_writes_nothing(memory_uri: str) -> None:
    table = keyed(memory_uri)
    timeline_before = table.timeline()
    with pytest.raises(txn.DuplicateKeyError), table.transaction() as tx:
        tx.delete(keys=[1])
        tx.append(rows([20]))
        tx.append(rows([5]))  # in the table
    assert table.timeline() == timeline_before and prices(table) == start(10)


def test_bad_input_is_refused_before_anything_is_staged(memory_uri: str) -> None:
    table = keyed(memory_uri)
    with table.transaction() as tx:
        with pytest.raises(txn.SchemaMismatchError):
            tx.append(pa.table({"other": [1]}))
        with pytest.raises(txn.InvalidOptionError, match="exactly one"):
            tx.delete()
        with pytest.raises(txn.InvalidOptionError, match="record key"):
            tx.update(None, {"id": 3})
        with pytest.raises(txn.InvalidOptionError):
            tx.delete(where="id = 3")
    assert tx.result is None and prices(table) == start(10)


# -- conflicts -------------------------------------------------------------------------------------

def test_a_concurrent_commit_of_a_key_the_transaction_wrote_conflicts(memory_uri: str) -> None:
    table = keyed(memory_uri)
    other = txn.open_table(memory_uri)
    tx = table.transaction()
    tx.delete(keys=[1])
    tx.append(rows([20]))
    other.upsert(priced([1], 7.0))  # completes after the transaction read the table
    after_other = prices(table)
    with pytest.raises(txn.CommitConflictError, match="transaction"):
        tx.commit()
    assert prices(table) == after_other and after_other[1] == 7.0 and 20 not in after_other
    assert table.validate().ok
    with pytest.raises(txn.InvalidOptionError, match="closed"):
        tx.commit()


@pytest.mark.parametrize("staged", ["append", "delete_missing_key", "upsert"])
def test_a_concurrent_insert_of_a_key_the_transaction_read_conflicts(memory_uri: str, staged: str) -> None:
    table = keyed(memory_uri)
    other = txn.open_table(memory_uri)
    with pytest.raises(txn.CommitConflictError), table.transaction() as tx:
        if staged == "append":
            tx.append(rows([20]))
        elif staged == "upsert":
            tx.upsert(rows([20]))
        else:
            tx.delete(keys=[20])  # not in the table: read, not found
        tx.append(rows([21]))
        other.append(priced([20], 1.0))
    assert prices(table) == {**start(10), 20: 1.0}


def test_a_concurrent_delete_of_a_file_the_transaction_deleted_from_conflicts(memory_uri: str) -> None:
    table = unkeyed(memory_uri)
    other = txn.open_table(memory_uri)
    with pytest.raises(txn.CommitConflictError), table.transaction() as tx:
        tx.delete(where=pc.field("id") == 1)
        other.delete(where=pc.field("id") == 2)  # same data file
    assert sorted(prices(table)) == [0, 1, 3, 4, 5, 6, 7, 8, 9]


def test_concurrent_commits_of_other_keys_and_files_do_not_conflict(memory_uri: str) -> None:
    table = keyed(memory_uri)
    other = txn.open_table(memory_uri)
    with table.transaction() as tx:
        tx.delete(keys=[1])
        tx.append(rows([20]))
        other.append(rows([30]))
        other.upsert(priced([7], 1.0))  # another segment's file
    assert prices(table) == {**{k: v for k, v in start(10).items() if k != 1}, 7: 1.0,
                             20: 10.0, 30: 15.0}


def test_a_compaction_meanwhile_replays_the_transaction(memory_uri: str) -> None:
    table = keyed(memory_uri)
    other = txn.open_table(memory_uri)
    runs = 0
    with table.transaction() as tx:
        runs += 1
        tx.delete(keys=[1, 6])
        tx.update(pc.field("id") == 7, {"price": 1.0})
        tx.append(rows([20]))
        assert other.compact("custom", segments=["0", "1"]) is not None
    assert runs == 1
    assert tx.result is not None and tx.result.retries == 1
    expected = {**{k: v for k, v in start(10).items() if k not in (1, 6)}, 7: 1.0, 20: 10.0}
    assert prices(table) == expected
    assert table.lookup([0])["segment"].to_pylist() == ["0.1"] and table.validate().ok


# -- idempotent transactions -----------------------------------------------------------------------

def test_an_idempotent_transaction_commits_its_version_once(memory_uri: str) -> None:
    table = keyed(memory_uri)
    options = txn.CommitProperties(app_id="loader", version=3)
    with table.transaction(commit_properties=options) as first:
        first.delete(keys=[1])
        first.append(rows([20]))
    instants = len(table.timeline())
    for version in (3, 2):
        with table.transaction(commit_properties=txn.CommitProperties(app_id="loader",
                                                                       version=version)) as retry:
            retry.delete(keys=[2])
            retry.append(rows([21]))
        assert retry.result is None
    assert first.result is not None and len(table.timeline()) == instants
    assert sorted(prices(table)) == [0, 2, 3, 4, 5, 6, 7, 8, 9, 20]
    with table.transaction(commit_properties=txn.CommitProperties(app_id="loader", version=4)) as nxt:
        nxt.append(rows([21]))
    assert nxt.result is not None and 21 in prices(table)


def test_an_idempotent_transaction_committed_meanwhile_by_another_is_skipped(memory_uri: str) -> None:
    table = keyed(memory_uri)
    other = txn.open_table(memory_uri)
    options = txn.CommitProperties(app_id="loader", version=1)
    with table.transaction(commit_properties=options) as tx:
        tx.append(rows([20]))
        other.append(rows([30]), commit_properties=options)
    assert tx.result is None and prices(table) == {**start(10), 30: 15.0}
