"""The write classes (``txn._commit._writes``): one ``RowChanges`` carries the new rows and the
deletes of several operations and commits them as one instant."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import txn
from txn._commit import LockPolicy, RowChanges, commit
from txn._rows import index_keys
from txn._write import find_keys, read_state

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def rows(keys: range) -> pa.Table:
    return pa.table({"k": list(keys), "v": [f"v{k}" for k in keys]}, schema=SCHEMA)


def test_one_row_write_carries_an_insert_an_upsert_and_a_delete_as_one_instant(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    table.append(rows(range(10)))
    context = table._context
    state = read_state(context)
    new = pa.concat_tables([rows(range(10, 12)), rows(range(3, 4))])  # an insert and an upsert
    replaced = find_keys(context, state, index_keys(rows(range(3, 4)), ["k"]))
    removed = find_keys(context, state, index_keys(rows(range(5, 7)), ["k"]))  # a delete
    deleted: dict[str, list[int]] = {}
    for found in (replaced, removed):
        for file, position in zip(found["file"].to_pylist(), found["position"].to_pylist(), strict=True):
            deleted.setdefault(file, []).append(position)
    write = RowChanges(operation="upsert", rows=new.to_batches(), read_at=state.read_at,
                       current=state.deltas, rows_bytes=new.nbytes,
                       deleted={f: np.array(sorted(p), dtype=np.int64) for f, p in deleted.items()},
                       removed_keys=removed.select(index_keys(rows(range(0)), ["k"]).column_names))
    assert write.lock_policy() is LockPolicy.HELD
    before = len(table.timeline())
    done = commit(context, write)
    assert (done.rows_added, done.rows_deleted) == (3, 3)
    assert len(txn.open_table(memory_uri).timeline()) == before + 1
    reread = txn.open_table(memory_uri)
    assert sorted(reread.to_arrow()["k"].to_pylist()) == [0, 1, 2, 3, 4, 7, 8, 9, 10, 11]
    assert reread.lookup([5, 6]).num_rows == 0 and reread.validate().ok
