"""The table lock: leases built from put-if-absent records in ``_timeline/lock``.

Deterministic tests drive a ``FakeClock`` whose ``sleep`` only moves the clock, so waiting for a
lease costs no real time. The concurrency tests use the real clock with a short poll and check
global invariants (every increment landed, no two holders ever overlapped), not timing.
"""

from __future__ import annotations

import itertools
import multiprocessing
import queue
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from metatxn.timeline import (
    LockLostError,
    LockRecord,
    LockTimeoutError,
    ObjectExistsError,
    ObjectNotFoundError,
    Storage,
    TableLock,
    Timeline,
    TimelineOptions,
    TxnError,
    open_storage,
    system_clock,
)
from metatxn.timeline._layout import LOCK_FOLDER
from tests.conftest import FakeClock

LEASE_MS = 60_000


def no_sleep(seconds: float) -> None:
    raise AssertionError(f"the lock waited ({seconds} s) although it was free")


@pytest.fixture
def storage(table_uri: str) -> Storage:
    return open_storage(table_uri)


def make_lock(storage: Storage, clock: FakeClock, owner: str, *, timeout_ms: int = 1_000,
              sleep: Any = None) -> TableLock:
    return TableLock(storage, owner=owner, clock=clock, lease_ms=LEASE_MS, timeout_ms=timeout_ms,
                     poll_ms=20, sleep=sleep or clock.sleep)


def lock_records(storage: Storage) -> list[LockRecord]:
    import msgspec

    decoder = msgspec.json.Decoder(LockRecord)
    return [decoder.decode(storage.read(key)) for key in storage.list(LOCK_FOLDER)]


# -- acquire, wait, release ------------------------------------------------------------------------


def test_acquiring_a_never_locked_table_returns_a_lease_at_once(storage: Storage,
                                                                clock: FakeClock) -> None:
    lease = make_lock(storage, clock, "a", sleep=no_sleep).acquire()
    assert lease.owner == "a"
    assert lease.expires_ms == clock() + LEASE_MS
    assert lease.record.seq == 1
    assert [(r.seq, r.owner, r.released) for r in lock_records(storage)] == [(1, "a", False)]
    lease.ensure_held()


def test_a_second_writer_times_out_while_the_first_holds_a_live_lease(
    storage: Storage, clock: FakeClock
) -> None:
    """The error names the holder and when its lease ends; waiting used the injected sleep."""
    lease = make_lock(storage, clock, "a").acquire()
    started = clock()
    with pytest.raises(LockTimeoutError) as info:
        make_lock(storage, clock, "b", timeout_ms=1_000).acquire()
    error = info.value
    assert isinstance(error, TimeoutError)
    assert isinstance(error, TxnError)
    assert error.owner == "a"
    assert error.expires_ms == lease.expires_ms
    assert error.waited_ms >= 1_000
    assert 1_000 <= clock() - started < 1_100, "it polled on the fake clock until the timeout"
    lease.ensure_held()  # the holder is unaffected


def test_acquire_timeout_can_be_given_per_call(storage: Storage, clock: FakeClock) -> None:
    make_lock(storage, clock, "a").acquire()
    with pytest.raises(LockTimeoutError) as info:
        make_lock(storage, clock, "b", timeout_ms=50_000).acquire(timeout_ms=0)
    assert info.value.waited_ms == 0


def test_release_lets_the_next_writer_acquire_without_waiting(storage: Storage,
                                                               clock: FakeClock) -> None:
    lease = make_lock(storage, clock, "a").acquire()
    lease.release()
    assert lease.released
    following = make_lock(storage, clock, "b", sleep=no_sleep).acquire()
    assert following.owner == "b"
    assert following.record.seq == 3  # 1: a's lease, 2: a's release, 3: b's lease
    following.ensure_held()


def test_release_twice_is_harmless(storage: Storage, clock: FakeClock) -> None:
    lease = make_lock(storage, clock, "a").acquire()
    lease.release()
    lease.release()
    assert len(storage.list(LOCK_FOLDER)) == 2


def test_the_lease_context_manager_releases_even_on_error(storage: Storage,
                                                           clock: FakeClock) -> None:
    timeline = Timeline(storage, clock=clock, owner="a", sleep=no_sleep)
    with pytest.raises(RuntimeError), timeline.lock():
        raise RuntimeError("inside the critical section")
    with timeline.lock() as lease:
        assert lease.owner == "a"
    assert make_lock(storage, clock, "b", sleep=no_sleep).acquire().owner == "b"


def test_a_waiting_writer_gets_the_lock_once_the_holder_releases(storage: Storage,
                                                                  clock: FakeClock) -> None:
    holder = make_lock(storage, clock, "a").acquire()
    polls: list[int] = []

    def sleep_then_release(seconds: float) -> None:
        polls.append(clock())
        clock.sleep(seconds)
        if len(polls) == 3:
            holder.release()

    lease = make_lock(storage, clock, "b", sleep=sleep_then_release).acquire()
    assert lease.owner == "b"
    assert len(polls) == 3


# -- expiry and takeover ---------------------------------------------------------------------------


def test_a_live_lease_is_never_stolen(storage: Storage, clock: FakeClock) -> None:
    """Up to the last millisecond of the lease, nobody else writes a lock record."""
    lease = make_lock(storage, clock, "a").acquire()
    clock.advance(LEASE_MS - 1)
    for owner in ("b", "c", "d"):
        with pytest.raises(LockTimeoutError):
            make_lock(storage, clock, owner).acquire(timeout_ms=0)
    assert {r.owner for r in lock_records(storage)} == {"a"}
    assert storage.list(LOCK_FOLDER) == [f"{LOCK_FOLDER}/{lease.record.seq:012d}"]


def test_a_lease_ends_exactly_at_expires_ms(storage: Storage, clock: FakeClock) -> None:
    lease = make_lock(storage, clock, "a").acquire()
    clock.now_ms = lease.expires_ms
    assert make_lock(storage, clock, "b", sleep=no_sleep).acquire().owner == "b"


def test_waiting_past_the_lease_takes_the_lock_over(storage: Storage, clock: FakeClock) -> None:
    """A holder that died without releasing blocks others for one lease, not forever."""
    lease = make_lock(storage, clock, "a").acquire()
    taken = make_lock(storage, clock, "b", timeout_ms=2 * LEASE_MS).acquire()
    assert taken.owner == "b"
    assert clock() >= lease.expires_ms


def test_after_a_takeover_the_old_holder_learns_it_lost_the_lock(storage: Storage,
                                                                  clock: FakeClock) -> None:
    old = make_lock(storage, clock, "a").acquire()
    clock.advance(LEASE_MS)
    new = make_lock(storage, clock, "b", sleep=no_sleep).acquire()

    with pytest.raises(LockLostError):
        old.ensure_held()
    with pytest.raises(LockLostError):
        old.renew()
    old.release()  # nothing to undo, so not an error

    new.ensure_held()
    with pytest.raises(LockTimeoutError) as info:
        make_lock(storage, clock, "c").acquire(timeout_ms=0)
    assert info.value.owner == "b", "the old holder's release must not free the new holder's lock"


def test_ensure_held_detects_a_takeover_even_with_lease_time_left(storage: Storage,
                                                                   clock: FakeClock) -> None:
    """A holder whose clock lags sees its lease as live; the head record still tells the truth."""
    old = make_lock(storage, clock, "a").acquire()
    ahead = FakeClock(clock() + LEASE_MS)
    make_lock(storage, ahead, "b", sleep=no_sleep).acquire()
    with pytest.raises(LockLostError, match="taken over"):
        old.ensure_held()


def test_ensure_held_refuses_a_lease_about_to_end(storage: Storage, clock: FakeClock) -> None:
    """Too little lease left to commit safely counts as lost (default margin: a tenth)."""
    lease = make_lock(storage, clock, "a").acquire()
    clock.advance(LEASE_MS - LEASE_MS // 10 - 1)
    lease.ensure_held()
    clock.advance(1)
    with pytest.raises(LockLostError):
        lease.ensure_held()
    lease.ensure_held(margin_ms=0)


def test_a_released_lease_is_not_held_and_cannot_be_renewed(storage: Storage,
                                                             clock: FakeClock) -> None:
    lease = make_lock(storage, clock, "a").acquire()
    lease.release()
    with pytest.raises(LockLostError):
        lease.ensure_held()
    with pytest.raises(LockLostError):
        lease.renew()


# -- renewal ---------------------------------------------------------------------------------------


def test_renew_extends_the_lease_from_now(storage: Storage, clock: FakeClock) -> None:
    lease = make_lock(storage, clock, "a").acquire()
    first_expiry = lease.expires_ms
    clock.advance(50_000)
    lease.renew()
    assert lease.expires_ms == clock() + LEASE_MS
    clock.now_ms = first_expiry + 10_000  # past the original lease
    lease.ensure_held()
    with pytest.raises(LockTimeoutError) as info:
        make_lock(storage, clock, "b").acquire(timeout_ms=0)
    assert info.value.expires_ms == lease.expires_ms
    lease.release()
    assert make_lock(storage, clock, "b", sleep=no_sleep).acquire().owner == "b"


def test_renew_after_the_takeover_records_were_collected_still_reports_the_loss(
    storage: Storage, clock: FakeClock
) -> None:
    """Garbage collection may delete the record that superseded a stale holder, so its renewal
    can recreate that sequence number; it must still learn that it does not hold the lock."""
    stale = make_lock(storage, clock, "a").acquire()
    clock.advance(LEASE_MS)
    for _ in range(40):
        make_lock(storage, clock, "b", sleep=no_sleep).acquire().release()
    assert not storage.exists(f"{LOCK_FOLDER}/{stale.record.seq + 1:012d}"), "precondition: GC ran"

    with pytest.raises(LockLostError):
        stale.renew()
    with pytest.raises(LockLostError):
        stale.ensure_held()
    stale.release()
    assert make_lock(storage, clock, "c", sleep=no_sleep).acquire().owner == "c"


# -- garbage collection ----------------------------------------------------------------------------


def test_garbage_collection_keeps_the_lock_folder_bounded(storage: Storage,
                                                          clock: FakeClock) -> None:
    """200 acquire/release cycles leave a few dozen records, and the sequence keeps counting."""
    for cycle in range(200):
        lease = make_lock(storage, clock, f"w{cycle % 3}", sleep=no_sleep).acquire()
        clock.advance(5)
        lease.release()
        assert len(storage.list(LOCK_FOLDER)) < 40
    assert make_lock(storage, clock, "last", sleep=no_sleep).acquire().record.seq == 401


def test_garbage_collection_keeps_the_head_record(storage: Storage, clock: FakeClock) -> None:
    lease = make_lock(storage, clock, "a").acquire()
    for _ in range(50):
        lease.renew()
    lease.ensure_held()
    for _ in range(40):
        lease.release()
        lease = make_lock(storage, clock, "a", sleep=no_sleep).acquire()
    lease.ensure_held()
    assert storage.list(LOCK_FOLDER)[-1].endswith(f"{lease.record.seq:012d}")


@pytest.mark.allow_metatxn_warnings
def test_a_corrupt_head_record_is_named_while_it_counts_as_held(storage: Storage,
                                                                clock: FakeClock) -> None:
    # It counts as held for one lease, then is taken over: see test_lock_damage.py.
    storage.put_if_absent(f"{LOCK_FOLDER}/{1:012d}", b"{not json")
    with pytest.raises(LockTimeoutError, match=f"{LOCK_FOLDER}/000000000001"):
        make_lock(storage, clock, "a").acquire()


def test_unrelated_files_in_the_lock_folder_are_ignored(storage: Storage,
                                                        clock: FakeClock) -> None:
    storage.put_if_absent(f"{LOCK_FOLDER}/README", b"not a record")
    lease = make_lock(storage, clock, "a", sleep=no_sleep).acquire()
    assert lease.record.seq == 1


# -- mutual exclusion under real concurrency -------------------------------------------------------


def critical_section(storage: Storage, lease: Any) -> None:
    """Increment the shared counter; the holder file proves nobody else is inside."""
    try:
        storage.put_if_absent("holder", lease.owner.encode())
    except ObjectExistsError:
        raise AssertionError(f"{lease.owner} entered while {storage.read('holder')!r} was inside") from None
    try:
        try:
            count = int(storage.read("counter"))
        except ObjectNotFoundError:
            count = 0
        lease.ensure_held()
        storage.put("counter", str(count + 1).encode())
    finally:
        storage.delete("holder")


def increment_under_lock(storage: Storage, owner: str, times: int) -> list[tuple[int, int]]:
    """Take the lock ``times`` times with the real clock; return (enter, exit) times in ns."""
    lock = TableLock(storage, owner=owner, clock=system_clock, lease_ms=20_000, timeout_ms=60_000,
                     poll_ms=1)
    intervals = []
    for _ in range(times):
        with lock.acquire() as lease:
            entered = time.time_ns()
            critical_section(storage, lease)
            intervals.append((entered, time.time_ns()))
    return intervals


def assert_no_overlap(intervals: list[tuple[int, int]]) -> None:
    ordered = sorted(intervals)
    for (_, previous_exit), (entered, _) in itertools.pairwise(ordered):
        assert entered >= previous_exit, "two holders were inside the lock at once"


def test_threads_incrementing_under_the_lock_lose_no_update(table_uri: str) -> None:
    """N threads x K increments: the counter ends at N*K and no two critical sections overlap."""
    threads_count, times = 4, 15
    barrier = threading.Barrier(threads_count)
    results: list[list[tuple[int, int]] | BaseException] = [[] for _ in range(threads_count)]

    def worker(index: int) -> None:
        try:
            storage = open_storage(table_uri)
            barrier.wait(timeout=30)
            results[index] = increment_under_lock(storage, f"thread-{index}", times)
        except BaseException as exc:
            results[index] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    storage = open_storage(table_uri)
    assert int(storage.read("counter")) == threads_count * times
    assert_no_overlap([i for r in results if isinstance(r, list) for i in r])
    assert not storage.exists("holder")


def _increment_in_child(uri: str, owner: str, times: int, start: Any, results: Any) -> None:
    try:
        storage = open_storage(uri)
        start.wait(timeout=60)
        results.put((owner, increment_under_lock(storage, owner, times)))
    except BaseException as exc:
        results.put((owner, f"{type(exc).__name__}: {exc}"))


@pytest.mark.multiprocess
def test_processes_incrementing_under_the_lock_lose_no_update(tmp_path: Path) -> None:
    """3 processes on local disk, real clock: the counter ends at the total, no overlap."""
    processes_count, times = 3, 10
    uri = str(tmp_path / "table")
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(processes_count)
    results = context.Queue()
    processes = [
        context.Process(target=_increment_in_child,
                        args=(uri, f"process-{i}", times, start, results))
        for i in range(processes_count)
    ]
    for process in processes:
        process.start()
    outcomes: dict[str, Any] = {}
    try:
        for _ in range(processes_count):
            owner, outcome = results.get(timeout=120)
            outcomes[owner] = outcome
    except queue.Empty:
        pytest.fail(f"only {len(outcomes)} of {processes_count} processes reported: {outcomes}")
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()

    failures = {owner: o for owner, o in outcomes.items() if isinstance(o, str)}
    assert failures == {}
    assert int(open_storage(uri).read("counter")) == processes_count * times
    assert_no_overlap([i for o in outcomes.values() for i in o])


def test_timeline_lock_uses_the_timeline_options(storage: Storage, clock: FakeClock) -> None:
    options = TimelineOptions(lock_lease_ms=5_000, lock_timeout_ms=700, lock_poll_ms=100)
    first = Timeline(storage, clock=clock, owner="a", options=options, sleep=clock.sleep)
    second = Timeline(storage, clock=clock, owner="b", options=options, sleep=clock.sleep)
    lease = first.lock()
    assert lease.expires_ms == clock() + 5_000
    with pytest.raises(LockTimeoutError) as info:
        second.lock()
    assert 700 <= info.value.waited_ms < 800
    assert second.lock(timeout_ms=10_000).owner == "b"  # waits out the 5 s lease
