"""Reads: the latest snapshot (pruned by column statistics), time travel to acknowledged commits,
record-index lookups, and reads that fail part way (``ReadWithFault``: no poisoned cache after).
The ``Lookup``, ``ReadLatest``, ``ReadPast`` and ``ReadWithFault`` actions run them; the
invariants (``invariants``) make the same checks after every step.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import event, note

import txn
from metatxn.timeline import parse_time
from tests.faults import injected
from tests.property.table_machine.actions import ReadWithFault
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.model import Acked, K, Row


class Reads(MachineCore):
    """The latest snapshot, past snapshots and lookups, checked against the model."""

    def _read_latest(self, k: int | None, g: str | None) -> None:
        """Read (through the writer, if alive), optionally pruned by column statistics."""
        expression = None
        expected = list(self.expected)
        k_name, g_name, _ = self.shape.names
        if k is not None:
            expression = pc.field(k_name) >= k
            expected = [r for r in expected if r[0] >= k]
        if g is not None:
            by_g = pc.field(g_name) == g
            expression = by_g if expression is None else expression & by_g
            expected = [r for r in expected if r[1] == g]
        table = self.reader if self.dead else self.writer
        assert self.shape.rows_of(table.to_arrow(filter=expression), "filtered read") == tuple(expected)
        # The lazy scan in tiny batches, through the Arrow stream an outside engine takes: the
        # same rows, deletes applied batch by batch.
        scanner = table.scanner(filter=expression, batch_size=3)
        assert self.shape.rows_of(pa.table(scanner), "streamed read") == tuple(expected)
        assert scanner.head(2).num_rows == min(2, len(expected))

    def _read_the_past(self, position: int, form: str) -> None:
        if not self.acked:
            return
        commit = self.acked[position * len(self.acked) // 1000]
        note(f"as of commit {self.acked.index(commit) + 1} of {len(self.acked)}: {commit.instant}")
        as_of: str | datetime
        if form == "instant":
            as_of = commit.instant
        elif form == "completed_at":
            as_of = commit.completed_at  # no instant has this time: it is a completion bound
        else:
            as_of = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(
                milliseconds=parse_time(commit.completed_at))
        self._check_the_past(self.reader if self.dead else self.writer, commit, as_of)

    def _read_with_a_fault(self, action: ReadWithFault) -> None:
        nth, when, past = action.nth, action.when, action.past
        store, table = self.faulty_reader_store, self.faulty_reader
        if action.lookup and self.keyed:
            everything = self._keys_to_look_up()
            store.reset()
            store.arm(nth, when=when)
            try:
                found = table.lookup(everything)
            except Exception as exc:
                assert injected(exc) is not None, f"the fault surfaced as {exc!r}"
                event("lookup failed at an injected fault")
            else:
                self._check_found(found, everything)
            finally:
                store.disarm()
            self._check_lookup(table, everything)
            return
        store.reset()
        store.arm(nth, when=when)
        commit = self.acked[nth % len(self.acked)] if past and self.acked else None
        try:
            shape = commit.shape if commit else self.shape
            got = shape.rows_of(table.to_arrow(as_of=commit.instant if commit else None))
        except txn.SnapshotExpiredError as exc:
            assert commit is not None
            self._check_the_past_rows(commit, (), exc, commit.instant)
        except Exception as exc:
            assert injected(exc) is not None, f"the fault surfaced as {exc!r}"
            event("read failed at an injected fault")
        else:
            if commit is not None:
                self._check_the_past_rows(commit, got, None, commit.instant)
            else:
                assert got == self.expected
        finally:
            store.disarm()
        assert self.shape.rows_of(table.to_arrow()) == self.expected

    def _keys_to_look_up(self) -> list[int]:
        """Every live key, then every other key ever written or deleted (failed writes' too)."""
        live = sorted(self._live())
        return live + sorted(self.seen_keys - set(live))

    def _check_lookup(self, table: txn.Table, keys: list[int]) -> None:
        self._check_found(table.lookup(keys), keys)

    def _check_found(self, found: pa.Table, keys: list[int]) -> None:
        """``found`` (a lookup of ``keys``) names each live key among them once, where its row is,
        in the segment that holds it (after a compaction: the new one)."""
        live = self._live()
        holder = {row[0]: s.id for s in self.segment_model.values() for row in s.live}
        key = self.shape.name(K)
        assert found.column_names == [key, "segment", "file", "position"], found.schema
        got = found[key].to_pylist()
        assert len(got) == len(set(got)), f"lookup found keys more than once: {sorted(got)}"
        wanted = {k for k in keys if k in live}
        assert set(got) == wanted, (f"lookup found {sorted(set(got) - wanted)} that are not in the "
                                    f"table, missed {sorted(wanted - set(got))}")
        for k, segment, file, position in zip(got, found["segment"].to_pylist(),
                                               found["file"].to_pylist(),
                                               found["position"].to_pylist(), strict=True):
            held = self._row_at(file, position)
            assert held == live[k], (f"lookup places key {k} at {file}:{position}, which holds "
                                     f"{held}; the table's row is {live[k]}")
            assert segment == holder[k], (f"lookup places key {k} in segment {segment}; the model "
                                          f"has it in {holder[k]}")

    def _check_the_past(self, table: txn.Table, commit: Acked, as_of: str | datetime) -> None:
        """``table`` as of ``as_of`` (naming ``commit``) holds the rows ``commit`` made current."""
        error: txn.SnapshotExpiredError | None = None
        what = f"snapshot as of {as_of!r}"
        try:
            snapshot = table.snapshot(as_of=as_of)
            commit.shape.check_ids(snapshot.schema, what)
            rows = commit.shape.rows_of(snapshot.to_arrow(), what)
        except txn.SnapshotExpiredError as exc:
            rows, error = (), exc
        self._check_the_past_rows(commit, rows, error, as_of)

    def _check_the_past_rows(self, commit: Acked, rows: tuple[Row, ...],
                             error: txn.SnapshotExpiredError | None, as_of: str | datetime) -> None:
        n = self.acked.index(commit) + 1
        retained = len(self.acked) - n < self.retain_commits and n > self.clean_floor
        archived = self._includes_archived(commit)
        context = (f"as_of {as_of!r} (commit {n} of {len(self.acked)}, {commit.operation}, "
                   f"{'retained' if retained else 'beyond retention'}"
                   f"{', includes archived commits' if archived else ''})")
        if error is not None:
            # Retention counts writes only: a rollback instant never takes a commit's place.
            assert not retained, f"{context}: {error!r}"
            event("time travel beyond retention: expired")
            return
        assert rows == commit.rows, f"{context}: {len(rows)} rows, model {len(commit.rows)}"
        if archived:
            event("time travel to a snapshot that includes archived commits")

    def _includes_archived(self, commit: Acked) -> bool:
        """Whether the snapshot at ``commit`` includes a commit archived off the active timeline."""
        view = self.observer_timeline.load()
        return any(view.get(c.instant) is None for c in self.acked[: self.acked.index(commit) + 1])
