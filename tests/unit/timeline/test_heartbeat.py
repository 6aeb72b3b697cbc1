"""Writer heartbeats and how other writers judge a pending instant dead.

An instant is expired once more than ``heartbeat_timeout_ms`` passed since its last beat, or, with
no (readable) heartbeat, since its requested time. Background beating is tested with the real
clock and a 20 ms interval; everything else uses the fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from metatxn.timeline import (
    REQUESTED,
    Heartbeat,
    Instant,
    Storage,
    Timeline,
    TimelineOptions,
    format_time,
    open_storage,
    system_clock,
)
from metatxn.timeline._heartbeat import heartbeat_path, last_beat_ms
from metatxn.timeline._layout import HEARTBEAT_FOLDER
from tests.conftest import FakeClock

TIMEOUT_MS = 4_000
OPTIONS = TimelineOptions(heartbeat_interval_ms=1_000, heartbeat_timeout_ms=TIMEOUT_MS)
FAST = TimelineOptions(heartbeat_interval_ms=20, heartbeat_timeout_ms=200)


@pytest.fixture
def storage(table_uri: str) -> Storage:
    return open_storage(table_uri)


@pytest.fixture
def timeline(storage: Storage, clock: FakeClock) -> Timeline:
    return Timeline(storage, clock=clock, owner="writer", options=OPTIONS, sleep=clock.sleep)


def pending(requested_ms: int) -> Instant:
    return Instant(time=format_time(requested_ms), action="commit", state=REQUESTED)


def wait_until(condition: Callable[[], bool], *, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return condition()


# -- beats -----------------------------------------------------------------------------------------


def test_a_beat_records_the_clock_time_and_the_owner(storage: Storage, clock: FakeClock) -> None:
    heartbeat = Heartbeat(storage, "20260101000000000", owner="w1", clock=clock, interval_ms=1_000)
    heartbeat.beat()
    assert storage.list(HEARTBEAT_FOLDER) == [heartbeat_path("20260101000000000")]
    assert last_beat_ms(storage, "20260101000000000") == clock()
    assert b'"w1"' in storage.read(heartbeat_path("20260101000000000"))
    clock.advance(1_500)
    heartbeat.beat()
    assert last_beat_ms(storage, "20260101000000000") == clock()


def test_there_is_no_last_beat_before_the_first_one(storage: Storage) -> None:
    assert last_beat_ms(storage, "20260101000000000") is None


# -- judging expiry --------------------------------------------------------------------------------


def test_an_instant_expires_once_the_timeout_passes_without_a_beat(timeline: Timeline,
                                                                   clock: FakeClock) -> None:
    instant = timeline.request("commit")
    timeline.heartbeat(instant).beat()
    clock.advance(TIMEOUT_MS)
    assert not timeline.is_expired(instant), "exactly the timeout is not yet expired"
    clock.advance(1)
    assert timeline.is_expired(instant)


def test_a_recent_beat_keeps_an_old_instant_alive(timeline: Timeline, clock: FakeClock) -> None:
    instant = timeline.request("commit")
    clock.advance(10 * TIMEOUT_MS)
    assert timeline.is_expired(instant)
    timeline.heartbeat(instant).beat()
    assert not timeline.is_expired(instant)
    clock.advance(TIMEOUT_MS - 1)
    assert not timeline.is_expired(instant)


def test_without_a_heartbeat_file_the_requested_time_decides(timeline: Timeline,
                                                            clock: FakeClock) -> None:
    """A writer that died before its first beat is judged from when it requested the instant."""
    fresh = pending(clock() - TIMEOUT_MS)
    stale = pending(clock() - TIMEOUT_MS - 1)
    assert not timeline.is_expired(fresh)
    assert timeline.is_expired(stale)


def test_is_expired_can_be_judged_at_a_given_time(timeline: Timeline, clock: FakeClock) -> None:
    instant = pending(clock())
    assert not timeline.is_expired(instant, now_ms=clock() + TIMEOUT_MS)
    assert timeline.is_expired(instant, now_ms=clock() + TIMEOUT_MS + 1)


@pytest.mark.parametrize("content", [
    b"",
    b"{not json",
    b'{"kind": "lock", "seq": 1}',
    b'{"kind": "heartbeat", "owner": "w"}',
    b'{"kind": "heartbeat", "owner": "w", "beat_ms": "soon"}',
])
def test_a_corrupt_heartbeat_counts_as_absent(storage: Storage, timeline: Timeline,
                                             clock: FakeClock, content: bytes) -> None:
    """Heartbeats are advisory: a damaged one makes the instant judged by its requested time."""
    old, recent = pending(clock() - 10 * TIMEOUT_MS), pending(clock() - 10)
    for instant in (old, recent):
        storage.put(heartbeat_path(instant.time), content)
        assert last_beat_ms(storage, instant.time) is None
    assert timeline.is_expired(old)
    assert not timeline.is_expired(recent)


def test_expired_lists_only_pending_instants_whose_writers_went_silent(
    timeline: Timeline, clock: FakeClock
) -> None:
    silent = timeline.request("commit")
    beating = timeline.request("commit")
    done = timeline.start(timeline.request("commit"))
    with timeline.lock() as lease:
        timeline.complete(done, lease=lease)
    clock.advance(TIMEOUT_MS + 1)
    timeline.heartbeat(beating).beat()
    assert [i.time for i in timeline.expired()] == [silent.time]


# -- the background thread -------------------------------------------------------------------------


def test_start_beats_in_the_background_until_stopped(storage: Storage) -> None:
    """With a 20 ms interval the beat keeps advancing, so the instant never looks expired; stop
    deletes the file and no late beat recreates it."""
    timeline = Timeline(storage, clock=system_clock, owner="writer", options=FAST)
    instant = timeline.request("commit")
    heartbeat = timeline.heartbeat(instant).start()
    try:
        first = last_beat_ms(storage, instant.time)
        assert first is not None
        assert wait_until(lambda: (last_beat_ms(storage, instant.time) or 0) > first)
        second = last_beat_ms(storage, instant.time) or 0
        assert wait_until(lambda: (last_beat_ms(storage, instant.time) or 0) > second)
        time.sleep(0.25)  # longer than the 200 ms timeout
        assert not timeline.is_expired(instant)
    finally:
        heartbeat.stop(delete=True)
    assert not storage.exists(heartbeat_path(instant.time))
    time.sleep(0.06)  # three intervals: a beating thread would have recreated the file
    assert not storage.exists(heartbeat_path(instant.time))


def test_stop_without_delete_keeps_the_last_beat(storage: Storage) -> None:
    timeline = Timeline(storage, clock=system_clock, owner="writer", options=FAST)
    instant = timeline.request("commit")
    heartbeat = timeline.heartbeat(instant).start()
    heartbeat.stop(delete=False)
    last = last_beat_ms(storage, instant.time)
    assert last is not None
    time.sleep(0.06)
    assert last_beat_ms(storage, instant.time) == last, "no beat after stop"


def test_leaving_the_context_cleanly_deletes_the_heartbeat(storage: Storage) -> None:
    timeline = Timeline(storage, clock=system_clock, owner="writer", options=FAST)
    instant = timeline.request("commit")
    with timeline.heartbeat(instant):
        assert storage.exists(heartbeat_path(instant.time))
    assert not storage.exists(heartbeat_path(instant.time))


def test_leaving_the_context_with_an_error_keeps_the_heartbeat_and_stops_beating(
    storage: Storage,
) -> None:
    """The file's age is how other writers learn this instant's writer failed."""
    timeline = Timeline(storage, clock=system_clock, owner="writer", options=FAST)
    instant = timeline.request("commit")
    with pytest.raises(RuntimeError), timeline.heartbeat(instant):
        raise RuntimeError("the write failed")
    last = last_beat_ms(storage, instant.time)
    assert last is not None
    time.sleep(0.06)
    assert last_beat_ms(storage, instant.time) == last
    assert wait_until(lambda: timeline.is_expired(instant), timeout_s=2.0)


class _FailingPuts:
    """Storage whose ``put`` fails while ``failing`` is set; everything else passes through."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.failing = False
        self.failed = 0

    def put(self, path: str, data: bytes) -> None:
        if self.failing:
            self.failed += 1
            raise OSError("injected: storage unavailable")
        self.inner.put(path, data)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_a_failed_beat_does_not_stop_the_background_thread(storage: Storage) -> None:
    flaky = _FailingPuts(storage)
    heartbeat = Heartbeat(flaky, "20260101000000000", owner="w",  # type: ignore[arg-type]
                          clock=system_clock, interval_ms=10)
    heartbeat.start()
    try:
        flaky.failing = True
        assert wait_until(lambda: flaky.failed >= 3)
        before = last_beat_ms(storage, "20260101000000000") or 0
        flaky.failing = False
        assert wait_until(lambda: (last_beat_ms(storage, "20260101000000000") or 0) > before)
    finally:
        heartbeat.stop()
    assert not storage.exists(heartbeat_path("20260101000000000"))
