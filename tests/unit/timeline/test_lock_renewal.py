"""Background renewal of the table lock's short lease.

A held lease is renewed every ``renew_every_ms`` of real time, once the injected clock also moved
on, so a live holder keeps the lock through long work while a dead one blocks others for one
lease at most. Renewal never revives a lease that ran out: a holder paused past its lease fails
its commit with ``LockLostError`` instead of writing.

The real-clock tests use leases of a fraction of a second and assert bounds, not exact timings;
the processes are started with ``spawn`` and killed or stopped by signal.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from metatxn.timeline import (
    LockLostError,
    LockRecord,
    LockTimeoutError,
    Storage,
    TableLock,
    Timeline,
    TimelineOptions,
    open_storage,
    system_clock,
)
from metatxn.timeline._layout import LOCK_FOLDER
from metatxn.timeline._lock import DEFAULT_LEASE_MS
from tests.conftest import FakeClock

SHORT_LEASE_MS = 600
_decoder = msgspec.json.Decoder(LockRecord)


@pytest.fixture
def storage(table_uri: str) -> Storage:
    return open_storage(table_uri)


def real_lock(storage: Storage, owner: str, *, lease_ms: int = SHORT_LEASE_MS,
              timeout_ms: int = 10_000) -> TableLock:
    return TableLock(storage, owner=owner, clock=system_clock, lease_ms=lease_ms,
                     timeout_ms=timeout_ms, poll_ms=5, max_poll_ms=50)


def head(storage: Storage) -> LockRecord:
    return _decoder.decode(storage.read(sorted(storage.list(LOCK_FOLDER))[-1]))


def wait_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the background renewal"
        time.sleep(0.01)


def test_the_default_lease_is_a_few_seconds_renewed_every_third() -> None:
    lock = TableLock(open_storage("memory://renewal/defaults"), owner="a", clock=system_clock)
    assert lock.lease_ms == DEFAULT_LEASE_MS == 5_000
    assert lock.renew_every_ms == DEFAULT_LEASE_MS // 3


# -- a live holder keeps the lock ------------------------------------------------------------------


def test_a_holder_keeps_the_lock_for_several_lease_lengths(storage: Storage) -> None:
    """Held for five leases without calling renew: waiters time out, the holder's commit
    check passes, and the renewal records are collected as they pile up."""
    lease = real_lock(storage, "holder").acquire()
    first = lease.record.seq
    deadline = time.monotonic() + 5 * SHORT_LEASE_MS / 1000
    while time.monotonic() < deadline:
        with pytest.raises(LockTimeoutError) as info:
            real_lock(storage, "waiter").acquire(timeout_ms=SHORT_LEASE_MS // 4)
        assert info.value.owner == "holder"
        time.sleep(SHORT_LEASE_MS / 4000)
    lease.ensure_held()
    assert lease.record.seq >= first + 5, "renewed more than once per lease"
    assert len(storage.list(LOCK_FOLDER)) <= 32
    lease.release()
    assert real_lock(storage, "waiter").acquire(timeout_ms=0).owner == "waiter"


def test_a_released_lease_is_no_longer_renewed(storage: Storage) -> None:
    lease = real_lock(storage, "a").acquire()
    lease.release()
    released = head(storage)
    time.sleep(2 * SHORT_LEASE_MS / 1000)
    assert head(storage) == released and released.released


def test_renewal_can_be_turned_off(storage: Storage) -> None:
    lock = TableLock(storage, owner="a", clock=system_clock, lease_ms=SHORT_LEASE_MS,
                     renew_every_ms=0)
    lease = lock.acquire()
    time.sleep(1.5 * SHORT_LEASE_MS / 1000)
    with pytest.raises(LockLostError):
        lease.ensure_held()
    assert real_lock(storage, "b").acquire(timeout_ms=0).owner == "b"


# -- injected clocks -------------------------------------------------------------------------------


def test_a_clock_that_stands_still_never_renews(storage: Storage, clock: FakeClock) -> None:
    """Tests that hold their clock still see no lock record they did not write themselves."""
    lease = TableLock(storage, owner="a", clock=clock, lease_ms=60_000,
                      renew_every_ms=10).acquire()
    time.sleep(0.3)
    assert storage.list(LOCK_FOLDER) == [f"{LOCK_FOLDER}/{lease.record.seq:012d}"]


def test_renewal_follows_the_injected_clock(storage: Storage, clock: FakeClock) -> None:
    lease = TableLock(storage, owner="a", clock=clock, lease_ms=60_000,
                      renew_every_ms=10).acquire()
    clock.advance(30_000)
    wait_until(lambda: lease.record.seq == 2)
    assert lease.expires_ms >= clock() + 60_000 - 1


def test_a_lease_that_ran_out_is_never_revived(storage: Storage, clock: FakeClock) -> None:
    """Even with nobody taking it over, a lease whose end passed is lost for good."""
    lease = TableLock(storage, owner="a", clock=clock, lease_ms=60_000,
                      renew_every_ms=10).acquire()
    clock.advance(60_000)
    time.sleep(0.2)  # the background renewal looks several times
    assert storage.list(LOCK_FOLDER) == [f"{LOCK_FOLDER}/{lease.record.seq:012d}"]
    clock.now_ms -= 60_000  # even a clock that goes back does not bring it back
    with pytest.raises(LockLostError, match="ran out"):
        lease.ensure_held()


def test_a_renewal_that_finds_the_lock_taken_over_marks_the_lease_lost(
    storage: Storage, clock: FakeClock
) -> None:
    """A writer whose clock runs ahead takes the lock over; the holder's next renewal fails and
    every later check raises without another storage call."""
    lease = TableLock(storage, owner="a", clock=clock, lease_ms=60_000,
                      renew_every_ms=10).acquire()
    ahead = FakeClock(clock() + 60_000)
    TableLock(storage, owner="b", clock=ahead, lease_ms=60_000, renew_every_ms=0).acquire()
    clock.advance(30_000)
    wait_until(lambda: lease._lost is not None)
    with pytest.raises(LockLostError, match="superseded"):
        lease.ensure_held(verify=False)
    assert head(storage).owner == "b"


# -- a paused holder -------------------------------------------------------------------------------


def test_a_holder_paused_past_its_lease_fails_its_commit(storage: Storage,
                                                        clock: FakeClock) -> None:
    """Paused (its clock jumps past the lease, its renewal never ran), taken over, resumed: the
    commit point raises LockLostError and no completed file is written."""
    options = TimelineOptions(lock_lease_ms=5_000)
    paused = Timeline(storage, clock=clock, owner="paused", options=options, sleep=clock.sleep)
    other = Timeline(storage, clock=clock, owner="other", options=options, sleep=clock.sleep)
    instant = paused.start(paused.request("commit"))
    lease = paused.lock()
    clock.advance(options.lock_lease_ms)
    taken = other.lock(timeout_ms=0)
    with pytest.raises(LockLostError):
        paused.complete(instant, {"rows": 1}, lease=lease)
    taken.release()
    assert [i.state for i in other.load().pending()] == ["inflight"]
    assert other.load().completed() == ()


# -- across processes ------------------------------------------------------------------------------

HOLDER = r"""
import sys, time
from metatxn.timeline import TableLock, open_storage, system_clock
uri, lease_ms = sys.argv[1], int(sys.argv[2])
lock = TableLock(open_storage(uri), owner="child", clock=system_clock, lease_ms=lease_ms,
                 poll_ms=5, max_poll_ms=50)
lease = lock.acquire()
print("HELD", flush=True)
time.sleep(600)
"""


def _start(script: str, *args: str) -> Any:
    import subprocess

    process = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if line.strip() != "HELD":
        process.kill()
        raise AssertionError(f"holder did not start: {line!r} {process.stderr.read()}")  # type: ignore[union-attr]
    return process


@pytest.mark.multiprocess
def test_a_killed_holder_is_taken_over_within_its_lease(tmp_path: Path) -> None:
    """A holder that renewed across several leases is killed with SIGKILL: the next writer gets
    the lock within one lease (plus a small bound), not after a long fixed lease."""
    uri = str(tmp_path / "table")
    lease_ms = 1_000
    process = _start(HOLDER, uri, str(lease_ms))
    try:
        time.sleep(3 * lease_ms / 1000)
        storage = open_storage(uri)
        with pytest.raises(LockTimeoutError):  # still held: the child renewed it
            real_lock(storage, "parent", lease_ms=lease_ms).acquire(timeout_ms=0)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        killed = time.monotonic()
        lease = real_lock(storage, "parent", lease_ms=lease_ms).acquire()
        waited_ms = (time.monotonic() - killed) * 1000
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert lease.owner == "parent"
    assert waited_ms <= lease_ms + 500, waited_ms
    lease.release()


PAUSED_COMMIT = r"""
import sys, time
from metatxn.timeline import LockLostError, Timeline, TimelineOptions, open_storage
uri, lease_ms, go = sys.argv[1], int(sys.argv[2]), sys.argv[3]
timeline = Timeline(open_storage(uri), owner="child",
                    options=TimelineOptions(lock_lease_ms=lease_ms, lock_poll_ms=5))
instant = timeline.start(timeline.request("commit"))
lease = timeline.lock()
print("HELD", flush=True)
import os
while not os.path.exists(go):
    time.sleep(0.01)
try:
    timeline.complete(instant, {"rows": 1}, lease=lease)
    print("COMMITTED", flush=True)
except LockLostError as exc:
    print("LOST " + str(exc), flush=True)
"""


@pytest.mark.multiprocess
@pytest.mark.skipif(not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP")
def test_a_holder_stopped_past_its_lease_fails_its_commit(tmp_path: Path) -> None:
    """SIGSTOP the holder for longer than its lease, take the lock meanwhile, SIGCONT it: its
    commit raises LockLostError and the instant stays uncommitted."""
    uri = str(tmp_path / "table")
    lease_ms = 1_000
    go = tmp_path / "go"
    process = _start(PAUSED_COMMIT, uri, str(lease_ms), str(go))
    try:
        process.send_signal(signal.SIGSTOP)
        storage = open_storage(uri)
        taken = real_lock(storage, "parent", lease_ms=lease_ms).acquire()
        go.touch()
        process.send_signal(signal.SIGCONT)
        out, err = process.communicate(timeout=60)
        taken.release()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert out.startswith("LOST"), (out, err)
    view = Timeline(open_storage(uri), options=TimelineOptions()).load()
    assert view.completed() == ()
    assert [i.state for i in view.pending()] == ["inflight"]


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_the_renewal_thread_starts_afresh_in_a_forked_child(tmp_path: Path) -> None:
    """A child forked while the parent held a lease renews its own leases, not the parent's."""
    if not hasattr(os, "fork") or multiprocessing.get_start_method(allow_none=True) == "spawn":
        pytest.skip("needs fork")
    uri = str(tmp_path / "table")
    parent_lease = real_lock(open_storage(uri), "parent").acquire()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            other = str(tmp_path / "other")
            lease = real_lock(open_storage(other), "child").acquire()
            first = lease.record.seq
            time.sleep(3 * SHORT_LEASE_MS / 1000)
            lease.ensure_held()
            code = 0 if lease.record.seq > first else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    result = os.read(read, 1)
    os.waitpid(pid, 0)
    assert result == bytes([0])
    parent_lease.ensure_held()
    parent_lease.release()
