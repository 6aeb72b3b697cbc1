"""A transaction of several operations crashing at every step of its commit is all or nothing.

The writer dies (every later storage call refused) at its n-th storage write, for every n until
the transaction commits untouched. After the next writer recovered the table (the dead instant's
heartbeat expired), the table holds either exactly what it held before or exactly what the
transaction commits, never part of it, and the metadata table agrees with storage. Faults are
injected at the storage seam (``tests/faults.py``).
"""

from __future__ import annotations

import itertools

import pyarrow.compute as pc
import pytest

import txn
from tests.conftest import FakeClock
from tests.faults import InjectedFault, injected
from tests.unit.txn.helpers import SCHEMA, Faulty, priced, rows, storage_of, table_on

#: Longer than both the default lock lease and the default heartbeat timeout (60 s each).
EXPIRY_MS = 10 * 60_000
WRITES = frozenset({"put_if_absent", "put", "delete"})
#: More writes than any commit of this transaction makes (the loop stops at the first n that
#: does not fire).
MOST = 200


def _prepare(uri: str, clock: FakeClock) -> None:
    table = txn.create_table(uri, SCHEMA, record_key="id", partition_by=["region"], clock=clock)
    table.append(rows(range(5), region="eu"))
    table.append(rows(range(5, 10), region="us"))


def _transaction(table: txn.Table) -> txn.Commit | None:
    with table.transaction() as tx:
        tx.delete(keys=[1, 6])
        tx.append(priced([20, 21], 3.0))
        tx.upsert(priced([2, 21], 4.0))
        tx.update(pc.field("id") == 7, {"price": 9.0})
        tx.delete(where=pc.field("id") == 20)
    return tx.result


def _content(table: txn.Table) -> dict[int, float]:
    data = table.to_arrow()
    return dict(zip(data["id"].to_pylist(), data["price"].to_pylist(), strict=True))


@pytest.mark.parametrize("lock", ["one hold", "two holds"])
def test_a_crash_at_every_write_of_the_commit_leaves_all_or_nothing(
        monkeypatch: pytest.MonkeyPatch, memory_uri: str, lock: str) -> None:
    if lock == "two holds":  # the write phase outside the lock, as for a large write
        monkeypatch.setattr("txn._commit._writes._base.SMALL_WRITE_BYTES", -1)
    reference = f"{memory_uri}/reference"
    _prepare(reference, FakeClock())
    before = _content(txn.open_table(reference))
    assert _transaction(txn.open_table(reference)) is not None
    after = _content(txn.open_table(reference))
    assert before != after
    outcomes: dict[str, int] = {"before": 0, "after": 0}
    for n in itertools.count(1):
        assert n < MOST
        uri, clock = f"{memory_uri}/crash{n}", FakeClock()
        _prepare(uri, clock)
        faulty = Faulty(storage_of(uri))
        faulty.arm(n, ops=WRITES, crash=True)
        try:
            _transaction(table_on(uri, faulty, clock=clock))
        except Exception as exc:  # the fault, possibly wrapped by the layer it hit
            assert isinstance(exc, InjectedFault) or injected(exc) is not None, exc
        if not faulty.fired:
            assert _content(txn.open_table(uri)) == after
            break
        clock.advance(EXPIRY_MS)
        survivor = txn.open_table(uri, clock=clock)
        survivor.append(rows([100], region="eu"))  # recovers the dead writer's instant first
        found = {k: v for k, v in _content(survivor).items() if k != 100}
        assert found in (before, after), f"crash at write {n}: {found}"
        outcomes["before" if found == before else "after"] += 1
        assert all(i.state in ("completed", "rolledback") for i in survivor.timeline()), n
        report = survivor.validate()
        assert report.ok, (n, report.problems)
        indexed = sorted(survivor.lookup(list(range(25)))["id"].to_pylist())
        assert indexed == sorted(found), f"crash at write {n}: the index holds {indexed}"
    assert outcomes["before"] > 0 and outcomes["after"] > 0, outcomes


def test_a_failed_commit_refuses_further_operations(memory_uri: str, clock: FakeClock) -> None:
    _prepare(memory_uri, clock)
    faulty = Faulty(storage_of(memory_uri))
    table = table_on(memory_uri, faulty, clock=clock)
    tx = table.transaction()
    tx.append(rows([30]))
    faulty.arm(1, ops=WRITES)
    with pytest.raises(Exception) as info:
        tx.commit()
    assert injected(info.value) is not None
    with pytest.raises(txn.InvalidOptionError, match="closed"):
        tx.append(rows([31]))
    assert 30 not in _content(txn.open_table(memory_uri, clock=clock))

