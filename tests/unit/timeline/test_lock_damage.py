"""A damaged head lock record blocks no writer for good.

An unreadable head record (empty, truncated, garbage: power loss with fsync off) counts as a
lease that ends ``lease_ms`` after a waiter first saw it damaged, by the waiter's (injected)
clock; then the waiter takes the lock over with the next sequence number, as from an expired
record, and logs a warning naming the file. A waiter whose timeout is shorter raises
``LockTimeoutError`` naming the file.
"""

from __future__ import annotations

import logging

import pytest

import txn
from metatxn.timeline import LockTimeoutError, Storage, TableLock, open_storage
from metatxn.timeline._layout import LOCK_FOLDER
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, rows, storage_of

LEASE_MS = 60_000
DAMAGES = {"empty": b"", "truncated": b'{"kind":"lock","seq":', "garbage": b"\x07\x14\xee" * 9}


@pytest.fixture
def storage(table_uri: str) -> Storage:
    return open_storage(table_uri)


def make_lock(storage: Storage, clock: FakeClock, owner: str, *, timeout_ms: int) -> TableLock:
    return TableLock(storage, owner=owner, clock=clock, lease_ms=LEASE_MS, timeout_ms=timeout_ms,
                     poll_ms=20, sleep=clock.sleep)


def damage_head(storage: Storage, how: str) -> str:
    head = max(storage.list(LOCK_FOLDER))
    storage.delete(head)
    storage.put_if_absent(head, DAMAGES[how])
    return head


@pytest.mark.allow_metatxn_warnings
@pytest.mark.parametrize("how", sorted(DAMAGES))
def test_a_damaged_head_record_is_taken_over_one_lease_after_it_was_first_seen(
    storage: Storage, clock: FakeClock, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    make_lock(storage, clock, "gone", timeout_ms=1_000).acquire()  # dies holding the lock
    head = damage_head(storage, how)
    started = clock()
    lease = make_lock(storage, clock, "next", timeout_ms=2 * LEASE_MS).acquire()
    assert lease.record.seq == int(head.rsplit("/", 1)[1]) + 1
    assert clock() - started >= LEASE_MS, "a damaged record counts as held for one lease"
    assert clock() - started < LEASE_MS + 1_000
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and all(head in w for w in warnings)
    assert any("taking the table lock over" in w for w in warnings)


@pytest.mark.allow_metatxn_warnings
def test_a_waiter_with_a_shorter_timeout_than_the_lease_names_the_damaged_record(
    storage: Storage, clock: FakeClock
) -> None:
    make_lock(storage, clock, "gone", timeout_ms=1_000).acquire()
    head = damage_head(storage, "garbage")
    waiter = make_lock(storage, clock, "waiter", timeout_ms=LEASE_MS // 2)
    with pytest.raises(LockTimeoutError, match=head):
        waiter.acquire()
    # The lease counts from when this waiter first saw the damage, across its attempts.
    clock.advance(LEASE_MS // 2)
    assert waiter.acquire().record.seq == int(head.rsplit("/", 1)[1]) + 1


@pytest.mark.allow_metatxn_warnings
def test_exactly_one_waiter_takes_a_damaged_record_over(storage: Storage, clock: FakeClock) -> None:
    make_lock(storage, clock, "gone", timeout_ms=1_000).acquire()
    head = damage_head(storage, "empty")
    a = make_lock(storage, clock, "a", timeout_ms=100)
    b = make_lock(storage, clock, "b", timeout_ms=100)
    for waiter in (a, b):  # both see the damage at the same time
        with pytest.raises(LockTimeoutError):
            waiter.acquire()
    clock.advance(LEASE_MS)
    lease = a.acquire()
    with pytest.raises(LockTimeoutError, match="'a'"):
        b.acquire()  # the head is a's live record now, not the damaged one
    assert lease.record.seq == int(head.rsplit("/", 1)[1]) + 1
    lease.release()
    assert b.acquire().record.seq == lease.record.seq + 2


@pytest.mark.allow_metatxn_warnings
@pytest.mark.parametrize(("timeout_ms", "commits"), [(2 * LEASE_MS, True), (LEASE_MS // 2, False)])
def test_a_writer_commits_past_a_damaged_head_lock_record_once_the_lease_passed(
    table_uri: str, clock: FakeClock, timeout_ms: int, commits: bool
) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock,
                             properties={"lock.lease_ms": str(LEASE_MS),
                                         "lock.timeout_ms": str(timeout_ms)})
    table.append(rows(range(5)))
    head = damage_head(storage_of(table_uri), "garbage")
    table = txn.open_table(table_uri, clock=clock)
    table._context.timeline._lock._sleep = clock.sleep  # waits move the fake clock only
    if commits:
        table.append(rows(range(5, 7)))
        assert table.snapshot().count() == 7
    else:
        with pytest.raises(txn.LockTimeoutError, match=head):
            table.append(rows(range(5, 7)))
        assert table.snapshot().count() == 5
