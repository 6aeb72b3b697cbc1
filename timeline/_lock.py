"""The table lock: a short lease built only from put-if-absent, renewed while it is held.

The lock is a sequence of immutable records ``_timeline/lock/<seq>``. The record with the highest
sequence number is the lock's state: held by its owner until ``expires_ms``, or free if it is a
release record or its lease has ended. To acquire, a writer puts record ``head + 1`` with
put-if-absent. Of all writers that saw the same head, exactly one can create ``head + 1``, so:

* a live lock is never stolen: nobody writes ``head + 1`` while the head is a live lease;
* an expired lock is taken over safely: several writers may see it expired, but only one of them
  creates the next record, and the old holder's own renewal or release (also ``head + 1``) then
  fails, telling it that it lost the lock.

Old records are garbage-collected, keeping the newest few. Because a deleted number could be
created again by a writer with a very stale listing, a writer re-lists after its put and holds the
lock only if its record is the highest; a recreated old number is never the highest.

**Renewal.** The lease is short (``lease_ms``, seconds), so a holder that dies (``kill -9``, a
lost machine) blocks the others for at most one lease. A live holder keeps it however long its
critical section runs: while a lease is held, a background thread of the process renews it every
``renew_every_ms`` (a third of the lease by default) by writing ``head + 1`` with a new expiry,
exactly as :meth:`Lease.renew` does; two renewals can fail before the lease runs out. Renewal
never revives a lease whose end has passed by the holder's clock: that lease is lost for good
(:class:`~timeline.LockLostError` from then on), even if no one took it over, so a holder that
was paused past its lease (a stopped process, a long garbage-collection pause, a suspended VM)
learns it at its next :meth:`Lease.ensure_held` instead of carrying on. A renewal that finds its
``head + 1`` taken likewise marks the lease lost. The renewal thread waits in real time, as
heartbeats do, but renews only once the injected clock has also moved on by half an interval:
under a clock that tests hold still, leases never renew behind the test's back.

A head record that cannot be decoded (power loss with fsync off, a damaged disk, a user's edit)
would block every writer for good if it were an error. Instead a waiter treats it as a lease that
ends ``lease_ms`` after the waiter first saw it damaged (by its own clock), then takes the lock
over with ``head + 1`` exactly as from an expired record, so exactly one waiter takes it. A live
holder whose record got damaged renews (``head + 1``) within its lease, before any waiter takes
over. The takeover is logged with the damaged file's name; ``validate()`` reports the file.

The lease assumes clocks across writers agree to well within it. Before a commit point, the
holder calls :meth:`Lease.ensure_held`, which re-checks the head and the remaining lease; that
narrows, but cannot close, the window in which a holder paused for longer than its remaining
lease between that check and its next write acts after losing the lock. The commit point itself
is a put-if-absent, so even then no committed file is torn or overwritten.

Waiting costs storage requests (a listing and a read per look at the head), and every waiter's
requests slow the holder down on a shared store. So a waiter backs off: its n-th wait is drawn
from ``(d/2, d]`` ms with ``d = min(max_poll_ms, poll_ms * 2**n)`` ("equal jitter": the waits grow
and stay capped, and waiters that started together drift apart). A waiter never sleeps past the
moment the holder's lease ends, when the lock may be taken over, nor past its own timeout.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import os
import random
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType

import msgspec

from ._clock import Clock
from ._errors import CorruptMetadataError, LockLostError, LockTimeoutError, ObjectExistsError
from ._layout import LOCK_FOLDER
from ._storage import Storage

log = logging.getLogger("metatxn")

_SEQ_DIGITS = 12
_KEEP_RECORDS = 16
#: The longest single wait between two looks at a busy lock, unless a lock is given another.
DEFAULT_MAX_POLL_MS = 1_000
#: The lease of a lock record: how long a dead holder can block the others. Renewal keeps a live
#: holder's lease however long it holds the lock, so this only has to outlast a renewal's
#: storage round trip and the clock skew between writers, with room for two failed renewals.
DEFAULT_LEASE_MS = 5_000


class LockRecord(msgspec.Struct, frozen=True, kw_only=True, tag="lock", tag_field="kind"):
    """One state of the table lock, as stored in ``_timeline/lock/<seq>``."""

    seq: int
    owner: str
    acquired_ms: int
    expires_ms: int
    released: bool = False


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(LockRecord)


def _record_path(seq: int) -> str:
    return f"{LOCK_FOLDER}/{seq:0{_SEQ_DIGITS}d}"


class Lease:
    """Proof that this writer holds the table lock, until ``expires_ms`` (renewed meanwhile).

    Safe to use from several threads: the background renewal and the holder's checks take turns.
    """

    def __init__(self, lock: TableLock, record: LockRecord) -> None:
        self._lock = lock
        self.record = record
        self.released = False
        #: Why the lease is lost for good, once renewal learned it (see the module docstring).
        self._lost: str | None = None
        self._mutex = threading.Lock()

    @property
    def owner(self) -> str:
        return self.record.owner

    @property
    def expires_ms(self) -> int:
        return self.record.expires_ms

    def ensure_held(self, *, margin_ms: int | None = None, verify: bool = True) -> None:
        """Check that the lock is still ours with some lease left.

        The lease check alone is enough while clocks agree to within the margin: nobody takes
        a lock over before its lease ends. ``verify`` also lists the lock records to catch a
        takeover anyway (clock skew beyond the margin); the commit point always verifies.

        Raises:
            LockLostError: the lease ended, was released, or another writer took the lock over.
        """
        lock = self._lock
        margin = lock.lease_ms // 10 if margin_ms is None else margin_ms
        with self._mutex:
            if self.released:
                raise LockLostError(f"lease {self.record.seq} of {self.owner!r} was already released")
            if self._lost is not None:
                raise LockLostError(self._lost)
            if lock.clock() + margin >= self.record.expires_ms:
                raise LockLostError(
                    f"lease {self.record.seq} of {self.owner!r} ends at {self.record.expires_ms}, "
                    f"too close to now ({lock.clock()}) to commit safely"
                )
            if not verify:
                return
            head = lock.head_seq()
            if head != self.record.seq:
                raise LockLostError(
                    f"table lock was taken over: our record is {self.record.seq}, the head is {head}"
                )

    def renew(self) -> None:
        """Extend the lease. Raises LockLostError if another writer took the lock over."""
        with self._mutex:
            self._renew()

    def _renew(self) -> None:
        if self.released:
            raise LockLostError(f"lease {self.record.seq} of {self.owner!r} was already released")
        if self._lost is not None:
            raise LockLostError(self._lost)
        record = self._lock._write_next(self.record, released=False)
        # A successful put is not enough: if garbage collection deleted the record that took
        # the lock over, the put recreated that old number. Only the highest record holds it.
        seqs = self._lock._sequence_numbers()
        head = seqs[-1] if seqs else 0
        if head != record.seq:
            raise LockLostError(
                f"table lock was taken over: our renewal is record {record.seq}, the head is {head}"
            )
        self.record = record
        # A long hold writes a record per renewal: collect them now, not at the next acquire.
        # Best effort: the lease is renewed already, and the next renewal collects again.
        with contextlib.suppress(Exception):
            self._lock._collect_garbage(seqs)

    def _renew_if_due(self) -> bool:
        """The background renewal: renew if the clock moved on; False once there is nothing
        more to renew (released or lost)."""
        lock = self._lock
        with self._mutex:
            if self.released or self._lost is not None:
                return False
            now = lock.clock()
            if now >= self.record.expires_ms:
                self._lost = (f"lease {self.record.seq} of {self.owner!r} ran out at "
                              f"{self.record.expires_ms} before it could be renewed (now {now}): "
                              "the holder was paused or renewal failed for a whole lease")
                # The holder learns it from LockLostError; a log line from this thread could
                # only land beside someone else's work.
                log.info("%s", self._lost)
                return False
            renewed_at = self.record.expires_ms - lock.lease_ms
            if now - renewed_at < lock.renew_every_ms // 2:
                return True  # an injected clock that stands still: nothing to renew yet
            try:
                self._renew()
            except LockLostError as exc:
                self._lost = str(exc)
                log.info("the table lock was lost while held: %s", exc)
                return False
        return True

    def release(self) -> None:
        """Free the lock. Losing it earlier is not an error here: there is nothing to undo."""
        with self._mutex:
            if self.released:
                return
            self.released = True  # from here the background renewal leaves this lease alone
            if self._lost is not None:
                return
            with contextlib.suppress(LockLostError):
                self._lock._write_next(self.record, released=True)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class _Renewals:
    """The one background thread of a process that renews every lease it holds.

    One thread serves all leases, so taking the lock costs no thread start and releasing it no
    join: a released lease is dropped when it next comes due. Leases are held by weak reference,
    so one that its holder dropped without releasing (a test's abandoned lease) is not renewed
    for ever; a holder that crashed took the thread with it.
    """

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._due: list[tuple[float, int, weakref.ref[Lease]]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease) -> None:
        with self._ready:
            self._push(lease, lease._lock.renew_every_ms)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="metatxn-lock-renewal",
                                                daemon=True)
                self._thread.start()
            self._ready.notify()

    def _push(self, lease: Lease, after_ms: float) -> None:
        heapq.heappush(self._due, (time.monotonic() + after_ms / 1000, next(self._order),
                                   weakref.ref(lease)))

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._ready.wait(self._due[0][0] - time.monotonic() if self._due else None)
                _, _, ref = heapq.heappop(self._due)
            lease = ref()
            if lease is None:
                continue
            every = lease._lock.renew_every_ms
            try:
                again = lease._renew_if_due()
            except Exception:
                # A storage error: the lease still has two thirds left, so try again soon.
                log.warning("renewing the table lock of %r failed; retrying", lease.owner,
                            exc_info=True)
                again, every = True, max(1, every // 4)
            if again:
                with self._ready:
                    self._push(lease, every)
            del lease

    def forget_after_fork(self) -> None:
        # The thread did not survive the fork; the leases are the parent's, not ours.
        self._ready = threading.Condition()
        self._due = []
        self._thread = None


_renewals = _Renewals()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renewals.forget_after_fork)


class TableLock:
    """Acquire leases on one table's lock.

    Args:
        poll_ms: the first wait while the lock is busy; later waits double up to ``max_poll_ms``.
        max_poll_ms: the cap on one wait (at least ``poll_ms``; default
            :data:`DEFAULT_MAX_POLL_MS`, or ``poll_ms`` if that is larger).
        sleep: how to wait (seconds); tests pass a fake that moves their clock.
        renew_every_ms: how often a held lease is renewed in the background (default: a third
            of ``lease_ms``); 0 turns background renewal off (then only :meth:`Lease.renew`
            extends a lease).
        jitter: uniform floats in ``[0, 1)``; a wait is ``d - int(d * jitter() / 2)`` ms. The
            default is a generator seeded from ``owner``, so distinct owners wait differently
            and a test with fixed owners is reproducible.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        owner: str,
        clock: Clock,
        lease_ms: int = DEFAULT_LEASE_MS,
        timeout_ms: int = 120_000,
        poll_ms: int = 20,
        max_poll_ms: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
        renew_every_ms: int | None = None,
        jitter: Callable[[], float] | None = None,
    ) -> None:
        self.storage = storage
        self.owner = owner
        self.clock = clock
        self.lease_ms = lease_ms
        self.timeout_ms = timeout_ms
        self.poll_ms = poll_ms
        self.max_poll_ms = max(poll_ms, DEFAULT_MAX_POLL_MS if max_poll_ms is None else max_poll_ms)
        self.renew_every_ms = max(1, lease_ms // 3) if renew_every_ms is None else renew_every_ms
        self._sleep = sleep
        self._jitter = jitter or random.Random(f"lock-jitter:{owner}").random
        #: A damaged head record (its sequence number) and when this writer first saw it.
        self._damaged: tuple[int, int] | None = None

    def _sequence_numbers(self) -> list[int]:
        names = (key.rsplit("/", 1)[1] for key in self.storage.list(LOCK_FOLDER))
        return sorted(int(name) for name in names if name.isdigit())

    def head_seq(self) -> int:
        """The sequence number of the record that is the lock's current state (0: never taken)."""
        seqs = self._sequence_numbers()
        return seqs[-1] if seqs else 0

    def _read(self, seq: int) -> LockRecord | None:
        path = _record_path(seq)
        try:
            data = self.storage.read(path)
        except FileNotFoundError:
            return None
        try:
            return _decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise CorruptMetadataError(path, "a JSON lock record", str(exc)) from None

    def acquire(self, *, timeout_ms: int | None = None) -> Lease:
        """Wait for the lock and return a lease on it.

        While another writer holds a live lease, look again after waits that back off (see the
        module docstring); each look costs a listing and a read.

        Raises:
            LockTimeoutError: another writer held a live lease for the whole timeout.
        """
        waited_from = self.clock()
        limit = self.timeout_ms if timeout_ms is None else timeout_ms
        slept_ms = 0
        delay_ms = max(1, self.poll_ms)
        while True:
            head = self.head_seq()
            try:
                current = self._read(head) if head else None
            except CorruptMetadataError as exc:
                current = self._damaged_record(head, exc)
            now = self.clock()
            if head and current is None:
                continue  # garbage-collected under us: list again
            if current is None or current.released or now >= current.expires_ms:
                if self._damaged is not None and self._damaged[0] == head:
                    log.warning("taking the table lock over from damaged lock record %s, "
                                "unreadable for a whole lease (%d ms)", _record_path(head),
                                self.lease_ms)
                mine = LockRecord(seq=head + 1, owner=self.owner, acquired_ms=now,
                                  expires_ms=now + self.lease_ms)
                try:
                    self.storage.put_if_absent(_record_path(mine.seq), _encoder.encode(mine))
                except ObjectExistsError:
                    continue  # another writer moved the head first
                try:
                    seqs = self._sequence_numbers()
                except BaseException:
                    self._abandon(mine)
                    raise
                if seqs[-1] == mine.seq:
                    self._collect_garbage(seqs)
                    lease = Lease(self, mine)
                    if self.renew_every_ms > 0:
                        _renewals.add(lease)
                    return lease
                continue
            # Count our own sleeps too: an injected clock that stands still must not make us
            # wait forever.
            waited = max(now - waited_from, slept_ms)
            if waited >= limit:
                raise LockTimeoutError(current.owner, current.expires_ms, waited)
            wait_ms = min(delay_ms - int(delay_ms * self._jitter() / 2),
                          current.expires_ms - now,  # the lease ends: the lock may be taken over
                          limit - waited)  # look once more at the deadline
            self._sleep(wait_ms / 1000)
            slept_ms += wait_ms
            delay_ms = min(delay_ms * 2, self.max_poll_ms)

    def _damaged_record(self, seq: int, error: CorruptMetadataError) -> LockRecord:
        """A stand-in for damaged head record ``seq``: a lease ending ``lease_ms`` after this
        writer first saw it damaged (see the module docstring)."""
        if self._damaged is None or self._damaged[0] != seq:
            self._damaged = (seq, self.clock())
            log.warning("%s; this lock record counts as held until one lease (%d ms) from now, "
                        "then the lock is taken over", error, self.lease_ms)
        first_seen = self._damaged[1]
        return LockRecord(seq=seq, owner=f"unknown (damaged lock record {_record_path(seq)})",
                          acquired_ms=first_seen, expires_ms=first_seen + self.lease_ms)

    def _abandon(self, mine: LockRecord) -> None:
        """Release a record whose acquisition could not be confirmed, so no one waits a lease."""
        with contextlib.suppress(Exception):  # best effort: the original error is what matters
            self._write_next(mine, released=True)

    def _write_next(self, held: LockRecord, *, released: bool) -> LockRecord:
        now = self.clock()
        record = LockRecord(seq=held.seq + 1, owner=held.owner, acquired_ms=held.acquired_ms,
                            expires_ms=now if released else now + self.lease_ms,
                            released=released)
        try:
            self.storage.put_if_absent(_record_path(record.seq), _encoder.encode(record))
        except ObjectExistsError:
            raise LockLostError(
                f"table lock record {held.seq} of {held.owner!r} was superseded by another writer"
            ) from None
        return record

    def _collect_garbage(self, seqs: list[int]) -> None:
        # Delete in batches, and never the newest records: see the module docstring.
        if len(seqs) > 2 * _KEEP_RECORDS:
            for seq in seqs[:-_KEEP_RECORDS]:
                self.storage.delete(_record_path(seq))
