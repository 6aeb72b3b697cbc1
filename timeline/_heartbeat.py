"""Writer heartbeats: how a pending instant whose writer died is told apart from a slow one.

A writer beats by overwriting ``_timeline/heartbeats/<T>`` with the current time while instant
``T`` is pending. Another writer judges ``T`` failed once no beat arrived for longer than the
heartbeat timeout (by default four intervals, so one missed beat is not fatal). A pending instant
with no heartbeat file (its writer died before the first beat) is judged by its requested time.
"""

from __future__ import annotations

import threading
from types import TracebackType

import msgspec

from ._clock import Clock
from ._layout import HEARTBEAT_FOLDER
from ._storage import Storage


class HeartbeatRecord(msgspec.Struct, frozen=True, kw_only=True, tag="heartbeat", tag_field="kind"):
    owner: str
    beat_ms: int


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(HeartbeatRecord)


def heartbeat_path(instant_time: str) -> str:
    return f"{HEARTBEAT_FOLDER}/{instant_time}"


def last_beat_ms(storage: Storage, instant_time: str) -> int | None:
    """The time of the last beat for an instant, or None if there is none.

    A heartbeat that cannot be decoded counts as none: heartbeats are advisory, and treating a
    damaged one as absent only makes the instant expire sooner, by its requested time.
    """
    try:
        data = storage.read(heartbeat_path(instant_time))
    except FileNotFoundError:
        return None
    try:
        return _decoder.decode(data).beat_ms
    except msgspec.DecodeError:
        return None


class Heartbeat:
    """Beats for one pending instant, on demand or from a daemon thread every ``interval_ms``."""

    def __init__(self, storage: Storage, instant_time: str, *, owner: str, clock: Clock,
                 interval_ms: int) -> None:
        self._storage = storage
        self._path = heartbeat_path(instant_time)
        self._owner = owner
        self._clock = clock
        self._interval_s = interval_ms / 1000
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        record = HeartbeatRecord(owner=self._owner, beat_ms=self._clock())
        self._storage.put(self._path, _encoder.encode(record))

    def start(self) -> Heartbeat:
        """Beat now, then keep beating in the background until :meth:`stop`."""
        self.beat()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{self._path}",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.beat()
            except Exception:
                continue

    def stop(self, *, delete: bool = True) -> None:
        """Stop beating; delete the file once the instant no longer needs it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if delete:
            self._storage.delete(self._path)

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # After a failure keep the file: its age is how other writers learn this instant died.
        self.stop(delete=exc_type is None)
