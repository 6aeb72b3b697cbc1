"""One vectorised question over everything a handle knows of the record index: which runs and
which log files may hold any of these keys.

A keyed append asks it for every key it inserts, and almost every answer is "nowhere". Asked run
by run, the answer cost Python work per run and per log (about 150 filter checks and 50 file
opens for 100 random keys over 64 shards: 20-30 ms); here it is a handful of numpy operations
whatever the number of runs:

* :class:`FilterBank` holds the bloom filter of every run whose footer the handle has read in one
  buffer, with each run's byte offset and bit count, so the filters of all ``(key, run)`` pairs
  a lookup could need are probed in one gather;
* integer keys are also checked against each run's key range (a batch of keys above everything
  written, the common append, passes no run at all);
* :class:`LogKeys` keeps the sorted key hashes of each log file (read once per process; a writer
  seeds it with the log it wrote), so a log is opened only for the keys whose hash it holds.

The probe never says "absent" for a key a run or log holds: filters and hash sets have no false
negatives, and ranges are exact. It may say "present" for an absent key (about 1 % per run from
the filter, or a 64-bit hash collision in a log); the reader then opens that run or log for that
key only, and the exact match decides.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from ._index_runs import probe_positions
from ._keys import Hashes

#: Bits of a run whose footer has no filter (a base written before filters): admits every key.
ADMITS_ALL: Final = -1
#: Logs read by a lookup have their key hashes kept up to this many entries; larger ones (bulk
#: loads, whose sorted batches are searched directly) are not hashed.
LOG_HASHED_ROWS: Final = 65_536
#: Hashes of log files kept per process (8 bytes each): beyond it the oldest logs are forgotten
#: and read again when asked (a reader falls back to matching the log itself).
LOG_HASHES_KEPT: Final = 8_000_000


@dataclass(frozen=True)
class Slot:
    """Where one run's filter sits in the bank: ``bits`` (``ADMITS_ALL``, or 0: admits none)."""

    offset: int
    bits: int


class FilterBank:
    """The bloom filters of many runs in one growing buffer (filters never change: a run is
    immutable). Filters of runs no longer asked about stay until the buffer is rebuilt, which
    happens when more than half of it is such garbage. Shared by every handle of a table in the
    process (see ``RecordIndex``), so a buffer and its slots are always taken together."""

    def __init__(self) -> None:
        self._buffer = np.zeros(1 << 16, dtype=np.uint8)
        self._end = 0
        self._slots: dict[str, Slot] = {}
        self._mutex = threading.Lock()

    def slots(self, runs: Sequence[tuple[str, bytes | None]]) -> tuple[npt.NDArray[np.uint8], list[Slot]]:
        """The buffer and the slots of ``runs`` (path, filter), adding new filters: taken
        together, so a rebuild by another thread cannot move a filter between the two (a grown
        or rebuilt buffer is a new array; the old one keeps serving the slots taken with it)."""
        with self._mutex:
            slots = [self._slot(path, bloom) for path, bloom in runs]
            return self._buffer, slots

    def _slot(self, path: str, bloom: bytes | None) -> Slot:
        found = self._slots.get(path)
        if found is not None:
            return found
        if bloom is None:
            found = Slot(0, ADMITS_ALL)
        elif not bloom:
            found = Slot(0, 0)
        else:
            size = len(bloom)
            if self._end + size > len(self._buffer):
                grown = np.zeros(max(2 * len(self._buffer), self._end + size), dtype=np.uint8)
                grown[:self._end] = self._buffer[:self._end]
                self._buffer = grown
            self._buffer[self._end:self._end + size] = np.frombuffer(bloom, dtype=np.uint8)
            found = Slot(self._end, size * 8)
            self._end += size
        self._slots[path] = found
        return found

    def keep_only(self, paths: set[str]) -> None:
        """Forget the filters of runs not in ``paths`` once they are most of the buffer (runs
        replaced by merges and cleaned). Cheap when there is little to forget."""
        with self._mutex:
            if len(self._slots) <= 2 * len(paths) and self._end <= (1 << 16):
                return
            live = [(p, s) for p, s in self._slots.items() if p in paths]
            used = sum(s.bits // 8 for _, s in live if s.bits > 0)
            if self._end <= 4096 or used * 2 >= self._end:
                return
            buffer = np.zeros(max(1 << 16, used), dtype=np.uint8)
            slots: dict[str, Slot] = {}
            end = 0
            for path, slot in live:
                if slot.bits > 0:
                    size = slot.bits // 8
                    buffer[end:end + size] = self._buffer[slot.offset:slot.offset + size]
                    slots[path] = Slot(end, slot.bits)
                    end += size
                else:
                    slots[path] = slot
            self._buffer, self._end, self._slots = buffer, end, slots


def admitted(buffer: npt.NDArray[np.uint8], hashes: Hashes, offsets: npt.NDArray[np.int64],
             bits: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
    """Per pair ``i``, whether the filter at ``offsets[i]`` of ``bits[i]`` bits in ``buffer``
    (taken with its slots from :meth:`FilterBank.slots`) admits the key of hash ``hashes[i]``:
    one gather for all pairs."""
    result = bits == ADMITS_ALL
    real = bits > 0
    if real.any():
        chosen = np.flatnonzero(real)
        positions = probe_positions(hashes[chosen], bits[chosen].astype(np.uint64)).astype(np.int64)
        positions += (offsets[chosen] * 8)[:, None]
        hits = (buffer[positions >> 3] >> (positions & 7).astype(np.uint8)) & 1
        result[chosen] = hits.all(axis=1)
    return result  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Pairs:
    """The ``(key, run)`` pairs a probe admitted: ``keys[i]`` is a row of the asked keys,
    ``runs[i]`` an index into the runs given."""

    keys: npt.NDArray[np.int64]
    runs: npt.NDArray[np.int64]


def probe_runs(buffer: npt.NDArray[np.uint8], hashes: Hashes, first_keys: npt.NDArray[np.int64] | None,
               chains: Sequence[tuple[npt.NDArray[np.int64], Sequence[int]]],
               slots: Sequence[Slot], ranges: Sequence[tuple[int, int] | None]) -> Pairs:
    """The pairs of asked keys and runs that may match.

    ``chains`` holds, per node asked, the rows of its keys (into ``hashes``) and the indices of
    its chain's runs (into ``slots`` and ``ranges``); ``ranges`` the integer key range of each
    run (None when unknown), checked against ``first_keys`` when given.
    """
    key_parts: list[npt.NDArray[np.int64]] = []
    run_parts: list[npt.NDArray[np.int64]] = []
    for rows, chain in chains:
        if len(rows) == 0 or not chain:
            continue
        key_parts.append(np.tile(rows, len(chain)))
        run_parts.append(np.repeat(np.asarray(chain, dtype=np.int64), len(rows)))
    if not key_parts:
        empty = np.zeros(0, dtype=np.int64)
        return Pairs(empty, empty)
    keys = np.concatenate(key_parts)
    runs = np.concatenate(run_parts)
    if first_keys is not None:
        low = np.array([r[0] if r is not None else np.iinfo(np.int64).min for r in ranges], dtype=np.int64)
        high = np.array([r[1] if r is not None else np.iinfo(np.int64).max for r in ranges], dtype=np.int64)
        values = first_keys[keys]
        inside = (values >= low[runs]) & (values <= high[runs])
        keys, runs = keys[inside], runs[inside]
    offsets = np.array([s.offset for s in slots], dtype=np.int64)
    bits = np.array([s.bits for s in slots], dtype=np.int64)
    passed = admitted(buffer, hashes[keys], offsets[runs], bits[runs])
    return Pairs(keys[passed], runs[passed])


class LogKeys:
    """The sorted key hashes of log files (logs never change), least recently used out beyond
    :data:`LOG_HASHES_KEPT` hashes."""

    def __init__(self, budget: int = LOG_HASHES_KEPT) -> None:
        self._budget = budget
        self._used = 0
        self._hashes: OrderedDict[str, npt.NDArray[np.uint64]] = OrderedDict()
        self._refused: dict[str, None] = {}
        self._mutex = threading.Lock()

    def get(self, path: str) -> npt.NDArray[np.uint64] | None:
        with self._mutex:
            found = self._hashes.get(path)
            if found is not None:
                self._hashes.move_to_end(path)
            return found

    def put(self, path: str, hashes: Hashes) -> None:
        if len(hashes) > self._budget:
            return  # one log above the budget: matched by reading it, as before
        ordered = np.sort(hashes)
        with self._mutex:
            if path in self._hashes:
                return
            self._hashes[path] = ordered
            self._used += len(ordered)
            while self._used > self._budget and self._hashes:
                _, evicted = self._hashes.popitem(last=False)
                self._used -= len(evicted)

    def refuse(self, path: str) -> None:
        """Remember that ``path`` is not worth hashing (read directly whenever asked)."""
        with self._mutex:
            self._refused[path] = None
            while len(self._refused) > 4096:
                self._refused.pop(next(iter(self._refused)))

    def too_large(self, path: str) -> bool:
        return path in self._refused

    def forget(self, path: str) -> None:
        with self._mutex:
            self._refused.pop(path, None)
            evicted = self._hashes.pop(path, None)
            if evicted is not None:
                self._used -= len(evicted)


def held(log_hashes: npt.NDArray[np.uint64], hashes: Hashes) -> npt.NDArray[np.bool_]:
    """Per asked hash, whether the log holds a key of that hash."""
    if len(log_hashes) == 0:
        return np.zeros(len(hashes), dtype=np.bool_)
    at = np.minimum(np.searchsorted(log_hashes, hashes), len(log_hashes) - 1)
    return log_hashes[at] == hashes  # type: ignore[no-any-return]
