"""Small writes hold the table lock once, from begin to commit, with no heartbeat.

A write whose new rows are in memory and small (``SMALL_WRITE_BYTES``) and that deletes few
rows runs every step of the protocol under one hold of the lock: half the lock traffic, no
heartbeat file. Larger writes keep the window between begin and commit unlocked.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

import txn
from tests.faults import FaultyStorage, InjectedFault
from txn._context import read_config

from ...conftest import FakeClock

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def rows(keys: range) -> pa.Table:
    return pa.table({"k": list(keys), "v": [f"v{k}" for k in keys]}, schema=SCHEMA)


class Store(FaultyStorage):
    def arrow_filesystem(self):  # type: ignore[no-untyped-def]
        return self.inner.arrow_filesystem()  # type: ignore[attr-defined]


def on(uri: str, clock: FakeClock) -> tuple[Store, txn.Table]:
    table = txn.open_table(uri, clock=clock)
    store = Store(table._context.storage)
    return store, txn.Table(uri, store, read_config(table._context.storage), clock=clock)


def lock_records(store: Store) -> list[str]:
    return [c.path for c in store.calls if c.op == "put_if_absent" and c.path.startswith("_timeline/lock/")]


@pytest.mark.parametrize("keyed", [False, True])
def test_a_small_write_takes_the_lock_once_and_beats_no_heartbeat(
        memory_uri: str, clock: FakeClock, keyed: bool) -> None:
    txn.create_table(memory_uri, SCHEMA, record_key="k" if keyed else None, clock=clock,
                     properties={"maintenance.mode": "manual"})
    store, table = on(memory_uri, clock)
    table.append(rows(range(10)))
    assert len(lock_records(store)) == 2  # acquire and release
    assert not [c for c in store.calls if "heartbeats/" in c.path and c.op == "put"]
    store.reset()
    if keyed:
        table.upsert(rows(range(5, 15)))
        assert len(lock_records(store)) == 2
        store.reset()
        table.delete(keys=[1, 2])
        assert len(lock_records(store)) == 2
    assert sorted(txn.open_table(memory_uri).to_arrow()["k"].to_pylist()) == (
        [k for k in range(15) if k not in (1, 2)] if keyed else list(range(10)))
    assert txn.open_table(memory_uri).validate().ok


def test_a_write_past_the_bound_takes_the_lock_twice_with_a_heartbeat(
        memory_uri: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("txn._commit._writes._base.SMALL_WRITE_BYTES", 100)
    txn.create_table(memory_uri, SCHEMA, clock=clock, properties={"maintenance.mode": "manual"})
    store, table = on(memory_uri, clock)
    table.append(rows(range(1000)))
    assert len(lock_records(store)) == 4
    assert [c for c in store.calls if "heartbeats/" in c.path and c.op == "put"]


def test_a_small_write_that_fails_after_begin_is_rolled_back_under_the_same_hold(
        memory_uri: str, clock: FakeClock) -> None:
    txn.create_table(memory_uri, SCHEMA, record_key="k", clock=clock)
    store, table = on(memory_uri, clock)
    table.append(rows(range(10)))
    store.reset()
    # The first data-file marker: after begin, before the commit point.
    store.arm(1, ops={"put_if_absent"}, match=lambda path: path.startswith("_markers/"))
    with pytest.raises(InjectedFault):
        table.append(rows(range(10, 20)))
    assert len(lock_records(store)) == 2  # rolled back without taking the lock again
    reopened = txn.open_table(memory_uri, clock=clock)
    states = [(i.action, i.state) for i in reopened.timeline()]
    assert states[-2:] == [("commit", "rolledback"), ("rollback", "completed")]
    assert reopened.to_arrow().num_rows == 10
    reopened.append(rows([99]))  # the lock is free at once
    assert reopened.validate().ok


def test_a_small_writer_that_dies_holding_the_lock_is_rolled_back_after_expiry(
        memory_uri: str, clock: FakeClock) -> None:
    """No heartbeat file: the instant expires by its requested time; the lock by its lease."""
    txn.create_table(memory_uri, SCHEMA, clock=clock)
    store, table = on(memory_uri, clock)
    store.arm(1, ops={"put_if_absent"}, match=lambda path: path.startswith("_markers/"), crash=True)
    with pytest.raises(InjectedFault):
        table.append(rows(range(10)))
    clock.advance(120_000)  # past the lock lease and the heartbeat timeout
    survivor = txn.open_table(memory_uri, clock=clock)
    survivor._context.timeline._lock._sleep = clock.sleep  # type: ignore[attr-defined]
    survivor.append(rows(range(10, 12)))
    states = [(i.action, i.state) for i in survivor.timeline()]
    assert ("commit", "rolledback") in states and ("rollback", "completed") in states
    assert sorted(survivor.to_arrow()["k"].to_pylist()) == [10, 11]
    assert survivor.validate().ok
