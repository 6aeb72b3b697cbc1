"""A foreign writer's files on a keyed table: ``adopt_files(..., index_apart=True)`` and
``txn.write_index``, without Spark (``txn.spark.write`` does the same on executors).

Invariants: the entries written by ``write_index`` calls that each hold whole node ranges
(``WriteTicket.key_hashes`` modulo ``KeyProbe.node_count()``) make the adopted files' rows
findable by key exactly as ``write_files`` would; null and repeated keys are refused, an
append's existing keys fail its commit (nothing visible), an upsert's replace their rows.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, rows, sorted_rows

#: The foreign writer's files have no non-nullable column (Spark's do not).
NULLABLE = pa.schema([f.with_nullable(True) for f in SCHEMA])


def _foreign(ticket: txn.WriteTicket, parts: list[pa.Table]) -> txn.WrittenFiles:
    """The parts written as Parquet files into the staging folder, then adopted."""
    staging = Path(ticket.staging)
    staging.mkdir(parents=True, exist_ok=True)
    for n, part in enumerate(parts):
        pq.write_table(part, staging / f"part-{n}.parquet")
    return txn.adopt_files(ticket, index_apart=True)


def _indexed(ticket: txn.WriteTicket, written: txn.WrittenFiles, ranges: int) -> list[txn.WrittenFiles]:
    """``write_index`` once per node range, each through a pickled ticket (as a worker gets it)."""
    found = []
    for path in written.paths:
        keys = pq.read_table(Path(ticket.root) / path, columns=["id"])
        found.append(pa.table({"id": keys["id"], "file": pa.repeat(pa.scalar(path), keys.num_rows),
                               "position": pa.array(np.arange(keys.num_rows))}))
    every = pa.concat_tables(found)
    part = ticket.key_hashes(every) % np.uint64(ranges)
    return [txn.write_index(pickle.loads(pickle.dumps(ticket)), every.filter(pa.array(part == p)), task_id=p)
            for p in range(ranges) if (part == p).any()]


def test_adopted_files_are_found_by_key_after_write_index(tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id",
                             properties={"record_index.shards": "4"})
    table.append(rows(range(10)))
    with table.begin_write("upsert") as pending:
        ticket = pending.ticket
        assert ticket.probe is not None and ticket.probe.node_count() == 4
        written = _foreign(ticket, [rows([3, 100]).cast(NULLABLE), rows([8, 101, 102]).cast(NULLABLE)])
        reports = _indexed(ticket, written, 2)
        assert all(r.files == () and r.index_part is not None for r in reports)
        commit = pending.commit([written, *reports])
    assert commit is not None and (commit.rows_added, commit.rows_deleted) == (5, 2)
    assert sorted(table.to_arrow()["id"].to_pylist()) == [*range(10), 100, 101, 102]
    found = table.lookup(pa.table({"id": pa.array([3, 101], pa.int64())}))
    assert sorted(found["file"].to_pylist()) == sorted(written.paths)
    assert table.validate().ok


def test_an_append_of_existing_keys_fails_its_commit_and_leaves_the_rows(tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id")
    table.append(rows(range(10)))
    before = sorted_rows(table.to_arrow())
    with pytest.raises(txn.DuplicateKeyError, match="already exist"), table.begin_write() as pending:
        written = _foreign(pending.ticket, [rows([5, 50]).cast(NULLABLE)])
        pending.commit([written, *_indexed(pending.ticket, written, 1)])
    assert sorted_rows(table.to_arrow()) == before
    assert table.validate().ok


def test_write_index_refuses_null_repeated_and_missing_keys(tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id")
    with table.begin_write() as pending:
        ticket = pending.ticket
        place = {"file": pa.array(["f", "f"]), "position": pa.array([0, 1], pa.int64())}
        with pytest.raises(txn.SchemaMismatchError, match="hold nulls"):
            txn.write_index(ticket, pa.table({"id": pa.array([1, None], pa.int64()), **place}))
        with pytest.raises(txn.DuplicateKeyError, match=r"\[7\]"):
            txn.write_index(ticket, pa.table({"id": pa.array([7, 7], pa.int64()), **place}))
        with pytest.raises(txn.InvalidOptionError, match="position"):
            txn.write_index(ticket, pa.table({"id": pa.array([1], pa.int64()), "file": ["f"]}))
    with pytest.raises(txn.InvalidOptionError, match="index_apart"), table.begin_write() as pending:
        txn.adopt_files(pending.ticket)
    unkeyed = txn.create_table(str(tmp_path / "u"), SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match="record key"), unkeyed.begin_write() as pending:
        txn.write_index(pending.ticket, pa.table({"id": [1], "file": ["f"], "position": [0]}))
