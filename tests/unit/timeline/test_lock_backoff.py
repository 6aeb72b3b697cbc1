"""How a waiter for the table lock spends its time and its storage requests.

A waiter backs off: the n-th wait is drawn from ``(d/2, d]`` ms with
``d = min(max_poll_ms, poll_ms * 2**n)``, never past the holder's lease end or the waiter's own
timeout. Every test drives a ``FakeClock`` through a recording sleep and an injected jitter
source, so the waits are exact numbers, not timings.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from metatxn.timeline import LockTimeoutError, Storage, TableLock, Timeline, open_storage
from metatxn.timeline._lock import DEFAULT_MAX_POLL_MS
from tests.conftest import FakeClock
from tests.faults import FaultyStorage

LEASE_MS = 60_000


class RecordingSleep:
    """A sleep that moves the fake clock by exactly the requested milliseconds and logs them.

    ``at_start(n)`` runs as the n-th wait begins: what it does happens while the waiter sleeps.
    """

    def __init__(self, clock: FakeClock, at_start: Callable[[int], None] | None = None) -> None:
        self.clock = clock
        self.waits_ms: list[int] = []
        self._at_start = at_start

    def __call__(self, seconds: float) -> None:
        ms = round(seconds * 1000)
        assert ms >= 1, f"a waiter slept {seconds} s: a busy loop"
        self.waits_ms.append(ms)
        if self._at_start is not None:
            self._at_start(len(self.waits_ms))
        self.clock.advance(ms)


@pytest.fixture
def storage(table_uri: str) -> Storage:
    return open_storage(table_uri)


def holder(storage: Storage, clock: FakeClock, *, lease_ms: int = LEASE_MS) -> TableLock:
    """A lock for the writer that holds the table while a waiter waits."""

    def refuse(seconds: float) -> None:
        raise AssertionError("the holder waited although the lock was free")

    return TableLock(storage, owner="holder", clock=clock, lease_ms=lease_ms, sleep=refuse)


def waiter(storage: Storage, clock: FakeClock, sleep: RecordingSleep, *, poll_ms: int = 20,
           max_poll_ms: int | None = 1_000, timeout_ms: int = 10_000,
           jitter: Callable[[], float] | None = None, owner: str = "waiter") -> TableLock:
    return TableLock(storage, owner=owner, clock=clock, lease_ms=LEASE_MS, timeout_ms=timeout_ms,
                     poll_ms=poll_ms, max_poll_ms=max_poll_ms, sleep=sleep, jitter=jitter)


def nominal_steps(poll_ms: int, max_poll_ms: int, count: int) -> list[int]:
    """The un-jittered waits: poll_ms doubling up to the cap."""
    steps, step = [], poll_ms
    for _ in range(count):
        steps.append(step)
        step = min(2 * step, max_poll_ms)
    return steps


def never_jitter() -> float:
    return 0.0


def always_shortest() -> float:
    return math.nextafter(1.0, 0.0)  # the largest value below 1: the shortest allowed wait


# -- the waits -------------------------------------------------------------------------------------


def test_waits_double_from_poll_ms_and_stop_growing_at_the_cap(storage: Storage,
                                                               clock: FakeClock) -> None:
    holder(storage, clock).acquire()
    sleep = RecordingSleep(clock)
    with pytest.raises(LockTimeoutError):
        waiter(storage, clock, sleep, jitter=never_jitter, timeout_ms=5_000).acquire()
    assert sleep.waits_ms[:9] == [20, 40, 80, 160, 320, 640, 1_000, 1_000, 1_000]
    assert sum(sleep.waits_ms) == 5_000, "the last wait ends at the timeout, not after it"
    assert sleep.waits_ms[-1] == 5_000 - sum(sleep.waits_ms[:-1])


def test_jittered_waits_stay_between_half_and_all_of_their_step(storage: Storage,
                                                                 clock: FakeClock) -> None:
    holder(storage, clock).acquire()
    sleep = RecordingSleep(clock)
    with pytest.raises(LockTimeoutError):
        waiter(storage, clock, sleep, jitter=random.Random(7).random, timeout_ms=30_000).acquire()
    waits = sleep.waits_ms[:-1]  # the last one is cut short by the timeout
    steps = nominal_steps(20, 1_000, len(waits))
    for wait, step in zip(waits, steps, strict=True):
        assert step / 2 < wait <= step
    assert max(waits) <= 1_000
    assert len(set(waits[6:])) > 5, "waits at the cap still differ from one another"
    assert sum(w < s for w, s in zip(waits, steps, strict=True)) > len(waits) // 2


def test_the_shortest_jitter_halves_each_step(storage: Storage, clock: FakeClock) -> None:
    holder(storage, clock).acquire()
    sleep = RecordingSleep(clock)
    with pytest.raises(LockTimeoutError):
        waiter(storage, clock, sleep, jitter=always_shortest, timeout_ms=3_000).acquire()
    assert sleep.waits_ms[:8] == [11, 21, 41, 81, 161, 321, 501, 501]


def test_the_default_jitter_is_seeded_by_the_owner(storage: Storage, clock: FakeClock) -> None:
    """Reproducible for a given owner; writers with different owners drift apart."""
    holder(storage, clock).acquire()
    runs = {}
    for run, owner in enumerate(["w-1", "w-1", "w-2"]):
        sleep = RecordingSleep(clock)
        with pytest.raises(LockTimeoutError):
            waiter(storage, clock, sleep, owner=owner, timeout_ms=8_000).acquire()
        runs[run] = sleep.waits_ms
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    for waits in runs.values():
        for wait, step in zip(waits[:-1], nominal_steps(20, 1_000, len(waits) - 1), strict=True):
            assert step / 2 < wait <= step


def test_a_fixed_poll_is_a_cap_equal_to_the_first_wait(storage: Storage, clock: FakeClock) -> None:
    """The old behaviour, still available: max_poll_ms == poll_ms and no jitter."""
    holder(storage, clock).acquire()
    sleep = RecordingSleep(clock)
    with pytest.raises(LockTimeoutError):
        waiter(storage, clock, sleep, max_poll_ms=20, jitter=never_jitter,
               timeout_ms=1_000).acquire()
    assert sleep.waits_ms == [20] * 50


def test_timeline_locks_back_off_by_default(storage: Storage, clock: FakeClock) -> None:
    holder(storage, clock).acquire()
    sleep = RecordingSleep(clock)
    with pytest.raises(LockTimeoutError):
        Timeline(storage, clock=clock, owner="t", sleep=sleep).lock(timeout_ms=10_000)
    waits = sleep.waits_ms[:-1]
    assert max(waits) <= DEFAULT_MAX_POLL_MS
    assert max(waits) > DEFAULT_MAX_POLL_MS // 2, "the waits grew to the cap"
    assert waits[0] <= 20


# -- waking up -------------------------------------------------------------------------------------


def test_a_waiter_wakes_when_the_holders_lease_ends(storage: Storage, clock: FakeClock) -> None:
    """The wait that would pass the lease end is cut to end there, and the lock is taken over."""
    held = holder(storage, clock, lease_ms=2_345).acquire()
    sleep = RecordingSleep(clock)
    lease = waiter(storage, clock, sleep, poll_ms=1_000, max_poll_ms=10_000,
                   jitter=never_jitter).acquire()
    assert sleep.waits_ms == [1_000, 1_345]
    assert lease.owner == "waiter"
    assert lease.record.acquired_ms == held.expires_ms


def test_a_release_is_noticed_within_one_capped_wait(storage: Storage, clock: FakeClock) -> None:
    held = holder(storage, clock).acquire()
    released_at: list[int] = []

    def release_during_the_tenth_wait(count: int) -> None:
        if count == 10:
            held.release()
            released_at.append(clock())

    sleep = RecordingSleep(clock, at_start=release_during_the_tenth_wait)
    lease = waiter(storage, clock, sleep, jitter=random.Random(1).random).acquire()
    assert lease.owner == "waiter"
    assert len(sleep.waits_ms) == 10
    assert 500 < lease.record.acquired_ms - released_at[0] <= 1_000


def test_a_timeout_shorter_than_the_first_wait_is_kept(storage: Storage,
                                                       clock: FakeClock) -> None:
    holder(storage, clock).acquire()
    sleep = RecordingSleep(clock)
    with pytest.raises(LockTimeoutError) as info:
        waiter(storage, clock, sleep, poll_ms=1_000, timeout_ms=300,
               jitter=never_jitter).acquire()
    assert sleep.waits_ms == [300]
    assert info.value.waited_ms == 300


# -- what waiting costs ----------------------------------------------------------------------------


def test_a_long_wait_costs_a_bounded_number_of_storage_calls(storage: Storage,
                                                             clock: FakeClock) -> None:
    """50 s behind a live lease, with the shortest jitter every time: each look is one listing
    and one read, and the looks are at most the steps up to the cap plus one per half cap.
    (A fixed 20 ms poll would have looked 2,500 times.)"""
    holder(storage, clock, lease_ms=2 * LEASE_MS).acquire()
    counted = FaultyStorage(storage)
    sleep = RecordingSleep(clock)
    wait_ms, poll_ms, cap_ms = 50_000, 20, 1_000
    with pytest.raises(LockTimeoutError):
        waiter(counted, clock, sleep, poll_ms=poll_ms, max_poll_ms=cap_ms, timeout_ms=wait_ms,
               jitter=always_shortest).acquire()
    looks = len(sleep.waits_ms) + 1
    assert counted.count("list") == looks
    assert counted.count("read") == looks
    assert counted.count() == 2 * looks, "a waiter behind a live lease never writes"
    growing = math.ceil(math.log2(cap_ms / poll_ms))
    assert looks <= growing + math.ceil(wait_ms / (cap_ms / 2)) + 1
    assert counted.count() <= 220


def test_the_storage_calls_of_a_long_wait_hardly_grow_with_the_poll(storage: Storage,
                                                                    clock: FakeClock) -> None:
    """Halving the first wait adds one step of growth, not twice the calls."""
    holder(storage, clock, lease_ms=10 * LEASE_MS).acquire()
    calls = {}
    for poll_ms in (20, 10, 1):
        counted = FaultyStorage(storage)
        with pytest.raises(LockTimeoutError):
            waiter(counted, clock, RecordingSleep(clock), poll_ms=poll_ms, timeout_ms=20_000,
                   jitter=never_jitter).acquire()
        calls[poll_ms] = counted.count()
    assert calls[10] - calls[20] == 2
    assert calls[1] - calls[20] <= 10
