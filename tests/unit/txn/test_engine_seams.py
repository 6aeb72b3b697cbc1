"""The public seams an engine on top (``txn.spark``, its SQL layer) writes through: a staged
``create_table(..., staged=True)`` with ``Table.staged`` / ``Table.publish``, the layout check
``Table.check_layout``, ``Table.overwrite_partition``, a stream's batch as
``txn.StreamProgress`` with ``Table.stream_generation``, and ``txn.open_storage``."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, rows, sorted_rows, storage_of


def _write(table: txn.Table, data: object, **options: object) -> txn.Commit | None:
    """A two-phase append of ``data`` (written by a "worker" in this process)."""
    with table.begin_write("append", **options) as pending:  # type: ignore[arg-type]
        if pending.skipped:
            return None
        return pending.commit([txn.write_files(pending.ticket, data)])


# -- a staged create ----------------------------------------------------------------------------

def test_a_staged_table_appears_with_its_first_commit(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id", staged=True)
    assert table.staged
    assert storage_of(table_uri).list("", recursive=True) == []
    with pytest.raises(txn.TableNotFoundError):
        txn.open_table(table_uri)
    table.append(rows(range(3)))
    assert not table.staged
    assert sorted_rows(txn.open_table(table_uri).to_arrow()) == sorted_rows(rows(range(3)))


def test_publish_makes_a_staged_table_exist_empty_and_is_idempotent(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, staged=True)
    table.publish()
    table.publish()
    assert not table.staged
    assert txn.open_table(table_uri).to_arrow().num_rows == 0
    txn.open_table(table_uri).publish()  # an existing table: nothing to do


def test_a_staged_create_that_lost_to_another_creator_refuses(table_uri: str) -> None:
    staged = txn.create_table(table_uri, SCHEMA, staged=True)
    txn.create_table(table_uri, SCHEMA, record_key="id")
    with pytest.raises(txn.TableExistsError):
        staged.publish()
    with pytest.raises(txn.TableExistsError):
        txn.create_table(table_uri, SCHEMA, staged=True)  # refused early where one exists
    assert txn.open_table(table_uri).record_key == "id"


def test_a_staged_create_checks_its_layout_and_writes_nothing_when_refused(table_uri: str) -> None:
    with pytest.raises(txn.InvalidOptionError, match="unknown column 'nope'"):
        txn.create_table(table_uri, SCHEMA, partition_by=["nope"], staged=True)
    assert storage_of(table_uri).list("", recursive=True) == []


# -- layout checks --------------------------------------------------------------------------------

def test_check_layout_accepts_the_tables_own_options_and_names_the_first_difference(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"], record_key="id",
                             sort_by=["price"], properties={"deletes.compaction.threshold": "2"})
    table.check_layout()
    table.check_layout(partition_by=["region"], record_key=["id"], sort_by=["price"],
                       properties={"deletes.compaction.threshold": "2"})
    with pytest.raises(txn.InvalidOptionError, match=r"partition_by \['day'\] differs from the table's"):
        table.check_layout(partition_by=["day"], record_key="qty")
    with pytest.raises(txn.InvalidOptionError, match=r"record_key \['id', 'day'\] differs"):
        table.check_layout(record_key=["id", "day"])
    with pytest.raises(txn.InvalidOptionError, match=r"threshold='3' differs from the table's \('2'\)"):
        table.check_layout(properties={"deletes.compaction.threshold": "3"})
    with pytest.raises(txn.InvalidOptionError, match="sort_by must be a list of column names"):
        table.check_layout(sort_by="price")  # type: ignore[arg-type]


def test_overwrite_partition_types_a_named_partition(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region", "day"])
    assert table.overwrite_partition(None) == {}
    assert table.overwrite_partition("dynamic") == {}
    assert table.overwrite_partition({"region": "eu", "day": "2026-01-02"}) == {
        "region": "eu", "day": date(2026, 1, 2)}
    with pytest.raises(txn.InvalidOptionError, match="partitions names"):
        table.overwrite_partition({"region": "eu"})
    keyed = txn.create_table(table_uri.rstrip("/") + "_keyed", SCHEMA, record_key="id")
    with pytest.raises(txn.InvalidOptionError, match="is not partitioned"):
        keyed.overwrite_partition("dynamic")


# -- a stream's batches through the two-phase write ----------------------------------------------

def test_a_stream_batch_commits_once_and_moves_the_streams_record(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id")
    assert table.stream_generation("job") == 0
    first = txn.StreamProgress("job", 0)
    assert not table.already_committed(stream_progress=first)
    assert _write(table, rows(range(3)), stream_progress=first) is not None
    assert table.already_committed(stream_progress=first)
    assert _write(table, rows(range(3)), stream_progress=first) is None  # a replay: skipped
    assert _write(table, rows(range(3, 5)), stream_progress=txn.StreamProgress("job", 1)) is not None
    [info] = [s for s in table.streams() if s.name == "job"]
    assert info.last_batch_id == 1
    assert table.to_arrow().num_rows == 5


def test_a_dropped_stream_fences_its_old_generation_off(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    _write(table, rows(range(2)), stream_progress=txn.StreamProgress("job", 0))
    table.drop_stream("job")
    assert table.stream_generation("job") == 1
    with pytest.raises(txn.StreamDroppedError):
        table.already_committed(stream_progress=txn.StreamProgress("job", 1, generation=0))
    with pytest.raises(txn.StreamDroppedError):
        _write(table, rows(range(2, 4)), stream_progress=txn.StreamProgress("job", 1, generation=0))
    # The next generation starts from no batch: batch 0 commits again.
    assert _write(table, rows(range(2, 4)), stream_progress=txn.StreamProgress("job", 0, generation=1))
    assert table.to_arrow().num_rows == 4


@pytest.mark.parametrize("arguments", [("", 0), ("job", -1), ("job", True), ("job", 0, -2), ("job", "1")])
def test_stream_progress_refuses_bad_values(arguments: tuple[object, ...]) -> None:
    with pytest.raises(txn.InvalidOptionError, match="StreamProgress"):
        txn.StreamProgress(*arguments)  # type: ignore[arg-type]


def test_stream_progress_must_be_the_public_type(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match=r"must be a txn\.StreamProgress"):
        table.begin_write("append", stream_progress=("job", 0))  # type: ignore[arg-type]


# -- an engine's own files -------------------------------------------------------------------------

def test_open_storage_puts_once_and_reads_back(tmp_path: Path) -> None:
    storage = txn.open_storage(str(tmp_path / "checkpoint"))
    storage.put_if_absent("id", b"first")
    with pytest.raises(txn.ObjectExistsError):
        storage.put_if_absent("id", b"second")
    assert storage.read("id") == b"first"
    with pytest.raises(txn.ObjectNotFoundError):
        storage.read("missing")
    assert issubclass(txn.ObjectExistsError, txn.StorageError)


def test_open_storage_refuses_a_bad_location() -> None:
    with pytest.raises(txn.InvalidOptionError, match="non-empty path"):
        txn.open_storage("")
