"""The change feed (issue 26): ``t.changes(start, end)`` replayed against the model after every
step.

The model already holds what a change feed must reproduce: ``self.acked`` is every acknowledged
commit in completion order with the rows of the snapshot it made current. So after each step
(``change_feed_replays_to_the_model``):

* every window between consecutive acknowledged commits that the step added (each new commit on
  its own, the first from ``"earliest"``), and every other step one window spanning several
  (from a rotating commit, or ``"earliest"``, to the latest; now and then with ``end=None``,
  a filter on ``k``, or read part by part through a pickled scanner, as an engine's workers
  read it), replayed instant by instant onto the rows of the commit before it (rows whose
  ``_change_type`` is ``delete`` or ``update_preimage`` taken out as a multiset, each of them
  present; ``insert`` and ``update_postimage`` added), gives exactly the rows of each commit of
  the window in turn (compared on the table's columns, by the model's ``Shape``);
* ``_commit_instant`` names only acknowledged commits whose completion is in the window (a
  crashed or refused write's instant never), ``_commit_time`` is that commit's completion time;
  rows come in completion order, and within an instant deletes and preimages before inserts
  and postimages; ``instants()`` lists, in completion order, window commits only, every one that
  emitted a row among them; the scanner's bounds are the completions of the commits named;
* table services emit no row: compaction (the hand-off too), ALTER TABLE, DROP STREAM (clean
  and rollback are no data instants, so no window ever names them);
* what each operation emits (design/changes.md's table): appends, ADD SEGMENT and stream
  batches only inserts, deletes and DELETE SEGMENT only deletes, an update pre- and postimages
  in pairs, an overwrite (and an unkeyed transaction, and a keyed one that overwrote: it
  removed every file) deletes and inserts; keyed, an upsert, update or other transaction gives
  each key it rewrote one ``update_preimage`` and one ``update_postimage``, a key it only took
  out a ``delete``, one it only wrote an ``insert``, and no key twice on either side;
  ``summary()`` counts the rows of each instant by kind;
* retention: a window whose start is below CLEAN FILES' floor (``retention.json``'s
  ``files_from``) raises ``SnapshotExpiredError``, never rows; any other window is read,
  whatever metadata cleaning and archival did (``metadata.retain_commits`` 3 archives as the
  run goes); and that floor never expires a window whose start the model still retains (no
  clean so far may have published a floor above it: ``clean.retain_commits`` at that clean,
  ``force``: the latest).

The windows are read through the long-lived reader (its cache extended at every step) and, one
step in three, through a table opened now.
"""

from __future__ import annotations

import pickle
from collections import Counter
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import event
from hypothesis.stateful import invariant

import txn
from metatxn.timeline import parse_time
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.model import Acked, Row, Shape, _row_key

#: The change columns every change row ends with (``txn.CHANGE_COLUMNS``).
CHANGE_COLUMNS = ("_change_type", "_commit_instant", "_commit_time")


REMOVES = frozenset({"delete", "update_preimage"})


ADDS = frozenset({"insert", "update_postimage"})


#: Operations that emit no change row (table services and schema changes).
SILENT = frozenset({"compact", "alter_table", "drop_stream"})


#: The change types each operation may emit (design/changes.md); keyed upserts, updates,
#: transactions and merges are judged key by key (``IMAGES``).
KINDS = {
    "append": {"insert"}, "add_segment": {"insert"}, "stream": {"insert"}, "delete": {"delete"},
    "update": {"update_preimage", "update_postimage"}, "overwrite": {"delete", "insert"},
    "delete_segments": {"delete"}, "transaction": {"delete", "insert"},
    "merge": {"delete", "insert"},
}


#: Keyed operations whose rewritten keys come as pre- and postimages (the others delete and
#: insert).
IMAGES = frozenset({"upsert", "update", "transaction", "merge"})



#: The forms a window's bound is given in (``as_of``'s): an instant time (its completion is the
#: bound), a completion time, a ``datetime``.
FORMS = ("instant", "completed_at", "datetime")


#: A change row: the model's row, its change type and commit instant.
Change = tuple[Row, str, str]


class ChangeFeed(MachineCore):
    """``t.changes`` over the windows of the acknowledged commits, replayed onto the model."""

    @invariant()
    def change_feed_replays_to_the_model(self) -> None:
        n = len(self.acked)
        table = self._open(self.inner) if self.steps % 3 == 2 else self.reader
        # Each commit the last step acknowledged, on its own (the window of its completion).
        for index in range(self.changes_checked, n):
            self._check_window(table, index - 1, index, FORMS[(self.steps + index) % len(FORMS)])
        self.changes_checked = n
        if n >= 2 and self.steps % 2 == 0:
            # One window over several commits: from a rotating one (or "earliest") to the latest.
            first = (self.steps * 7) % n - 1
            self._check_window(table, first, n - 1, FORMS[self.steps % len(FORMS)],
                               open_end=self.steps % 4 == 0, by_parts=self.steps % 8 == 2,
                               k_at_least=0 if self.steps % 8 == 6 else None,
                               summary=self.steps % 8 == 4)

    def _bound(self, commit: Acked, form: str) -> str | datetime:
        if form == "instant":
            return commit.instant
        if form == "completed_at":
            return commit.completed_at
        return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(
            milliseconds=parse_time(commit.completed_at))

    def _changes_retained(self, first: int) -> bool:
        """Whether a window starting after commit ``first`` (-1: before the first) must be read:
        no clean so far may have published a floor above its start (``clean_floor``, as time
        travel has it). Metadata cleaning and archival never limit the feed."""
        n = first + 1
        return n > self.clean_floor if n else self.clean_floor == 0

    def _check_window(self, table: txn.Table, first: int, last: int, form: str, *,
                      open_end: bool = False, by_parts: bool = False,
                      k_at_least: int | None = None, summary: bool = False) -> None:
        """The window after commit ``first`` (-1: ``"earliest"``) up to commit ``last``, read
        through ``table``: replayed onto ``first``'s rows it gives each commit's rows in turn."""
        start_commit = self.acked[first] if first >= 0 else None
        end_commit = self.acked[last]
        within = self.acked[first + 1:last + 1]
        start = "earliest" if start_commit is None else self._bound(start_commit, form)
        end = None if open_end else self._bound(end_commit, form)
        retained = self._changes_retained(first)
        # CLEAN FILES' floor (retention.json's files_from) limits the feed (design/changes.md,
        # "Retention"): a window starting below it is refused whole, any other is read,
        # whatever metadata cleaning and archival did.
        floor = self.reader._context.metadata.retention_floor()
        files_from = floor.files_from if floor is not None else None
        start_bound = start_commit.completed_at if start_commit else "0" * 17
        expired = files_from is not None and start_bound < files_from
        assert not (retained and expired), (
            f"CLEAN FILES' floor {files_from} expires the window after commit {first + 1} of "
            f"{len(self.acked)}, which the model retains")
        what = (f"changes({start!r}, {end!r}) (commits {first + 2}-{last + 1} of {len(self.acked)}, "
                f"{'below the retention floor' if expired else 'readable'})")
        k_name = self.shape.names[0]
        condition = pc.field(k_name) >= k_at_least if k_at_least is not None else None
        try:
            scanner = table.changes(start, end, filter=condition)
            instants = scanner.instants()
            if by_parts:
                # As an engine's workers read it: the scanner pickled, one part at a time.
                shipped = pickle.loads(pickle.dumps(scanner))
                batches = [b for part in scanner.parts() for b in shipped.read_part(part)]
                data = pa.Table.from_batches(batches, schema=scanner.schema)
            else:
                data = scanner.to_arrow()
        except txn.SnapshotExpiredError as exc:
            assert expired, f"{what}: {exc!r}"
            assert "no longer retained" in str(exc), exc
            event("change feed below the retention floor: expired")
            return
        assert not expired, f"{what}: read {data.num_rows} rows of a window below the floor {files_from}"
        if not retained:
            event("change feed beyond the cleans' retention: read")
        self._check_bounds(scanner, start_commit, end_commit, open_end, what)
        changes = self._changes_of(data, within, what)
        self._check_instants(instants, changes, within, what)
        keep = (lambda row: row[0] >= k_at_least) if k_at_least is not None else (lambda row: True)
        rows = Counter(row for row in (start_commit.rows if start_commit else ()) if keep(row))
        by_instant: dict[str, list[Change]] = {}
        for change in changes:
            by_instant.setdefault(change[2], []).append(change)
        for commit in within:
            emitted = by_instant.get(commit.instant, [])
            self._check_operation(commit, emitted, what)
            for row, kind, _ in emitted:
                if kind in REMOVES:
                    assert rows[row] > 0, (f"{what}: {commit.operation} {commit.instant} emits "
                                           f"{kind} {row}, which the table did not hold")
                    rows[row] -= 1
                else:
                    rows[row] += 1
            want = Counter(row for row in commit.rows if keep(row))
            got = +rows
            assert got == want, (
                f"{what}: replayed to {commit.operation} {commit.instant}, {sum(got.values())} "
                f"rows, model {sum(want.values())}; extra "
                f"{sorted((got - want).elements(), key=_row_key)[:5]}, missing "
                f"{sorted((want - got).elements(), key=_row_key)[:5]}")
        if len(within) > 1:
            event("change feed: a window of several commits replayed")
        if summary:  # it reads the window again: one window in four
            self._check_summary(scanner.summary(), changes, what)
        if by_parts:
            event("change feed: read part by part")

    def _check_summary(self, summary: list[txn.ChangeSummary], changes: list[Change],
                       what: str) -> None:
        """``summary()``: per instant that emitted rows, its rows counted by kind."""
        counted: dict[str, Counter[str]] = {}
        for _, kind, instant in changes:
            counted.setdefault(instant, Counter())[kind] += 1
        got = {s.instant: (s.inserted, s.updated, s.deleted) for s in summary
               if s.inserted or s.updated or s.deleted}
        want = {i: (c["insert"], c["update_postimage"], c["delete"]) for i, c in counted.items()}
        assert got == want, f"{what}: summary {got}; the rows count {want}"

    def _check_bounds(self, scanner: txn.ChangeScanner, start_commit: Acked | None,
                      end_commit: Acked, open_end: bool, what: str) -> None:
        assert scanner.start == (start_commit.completed_at if start_commit else "0" * 17), (
            f"{what}: start bound {scanner.start}")
        if open_end:
            # The latest completed instant of any action: a clean or rollback may follow it.
            assert scanner.end >= end_commit.completed_at, f"{what}: end bound {scanner.end}"
        else:
            assert scanner.end == end_commit.completed_at, f"{what}: end bound {scanner.end}"
        assert list(scanner.schema.names[-3:]) == list(CHANGE_COLUMNS), scanner.schema

    def _changes_of(self, data: pa.Table, within: list[Acked], what: str) -> list[Change]:
        """The change rows of ``data`` in order, the table's columns checked against the shape
        of the window's last commit (or the table's now), their times against their commits."""
        assert list(data.column_names[-3:]) == list(CHANGE_COLUMNS), f"{what}: {data.schema}"
        columns = data.drop_columns(list(CHANGE_COLUMNS))
        shape = self._shape_of(columns.schema, within, what)
        shape.rows_of(columns, what)  # names, types and the added columns' values
        k, g, v = (columns[name].to_pylist() for name in shape.names)
        kinds = data["_change_type"].to_pylist()
        instants = data["_commit_instant"].to_pylist()
        times = data["_commit_time"].to_pylist()
        completed = {c.instant: c.completed_at for c in within}
        rank = {c.instant: n for n, c in enumerate(within)}
        epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
        changes: list[Change] = []
        order = (-1, 0)
        for i, kind in enumerate(kinds):
            instant = instants[i]
            assert instant in completed, (
                f"{what}: a row of instant {instant}, which is no acknowledged commit of the window "
                f"{sorted(completed)}{' (a failed write)' if instant in self.failed_instants else ''}")
            assert kind in REMOVES | ADDS, f"{what}: _change_type {kind!r}"
            assert times[i] == epoch + timedelta(milliseconds=parse_time(completed[instant])), (
                f"{what}: _commit_time {times[i]} of {instant}, completed at {completed[instant]}")
            now = (rank[instant], 0 if kind in REMOVES else 1)
            assert now >= order, (f"{what}: row {i} ({kind} of {instant}) after one of "
                                  f"{within[order[0]].instant} ({'adds' if order[1] else 'removes'})")
            order = now
            changes.append(((k[i], g[i], v[i]), kind, instant))
        return changes

    def _shape_of(self, schema: pa.Schema, within: list[Acked], what: str) -> Shape:
        """The model's shape the change rows come in: the table's as of the window's end."""
        shape = within[-1].shape
        got = [(f.name, str(f.type)) for f in schema]
        assert got == [(c.name, str(c.type)) for c in shape.columns], (
            f"{what}: schema {got}; the model has {shape.arrow()} at the window's end")
        return shape

    def _check_instants(self, instants: list[txn.ChangeInstant], changes: list[Change],
                        within: list[Acked], what: str) -> None:
        """``instants()``: window commits only, in completion order, none silent, every one that
        emitted a row."""
        rank = {c.instant: n for n, c in enumerate(within)}
        listed = [i.instant for i in instants]
        assert all(i in rank for i in listed), f"{what}: instants() {listed}, window {list(rank)}"
        assert [rank[i] for i in listed] == sorted(rank[i] for i in listed), f"{what}: {listed}"
        by = {c.instant: c for c in within}
        for i in instants:
            assert i.completed_at == by[i.instant].completed_at, (what, i)
            assert by[i.instant].operation not in SILENT, f"{what}: instants() lists {i}"
        emitted = {instant for _, _, instant in changes}
        assert emitted <= set(listed), f"{what}: rows of {sorted(emitted - set(listed))}, not listed"

    def _check_operation(self, commit: Acked, emitted: list[Change], what: str) -> None:
        """What ``commit``'s operation may emit (see the module docstring)."""
        kinds = Counter(kind for _, kind, _ in emitted)
        operation = commit.operation
        if operation == "transaction" and "overwrite" in commit.operations:
            # It removed every file live before it: deletes and inserts, as an overwrite.
            operation = "overwrite"
            event("change feed: a transaction that overwrote")
        label = f"{what}: {operation} {commit.instant} emits {dict(kinds)}"
        if operation in SILENT:
            assert not emitted, label
            event(f"change feed: {operation} emits nothing")
            return
        if not (self.keyed and operation in IMAGES):
            assert set(kinds) <= KINDS[operation], label
        if operation == "update":
            assert kinds["update_preimage"] == kinds["update_postimage"], label
        if not self.keyed:
            return
        removed = [row[0] for row, kind, _ in emitted if kind in REMOVES]
        added = [row[0] for row, kind, _ in emitted if kind in ADDS]
        assert len(removed) == len(set(removed)) and len(added) == len(set(added)), (
            f"{label}: a key twice on one side")
        if operation in IMAGES:
            both = set(removed) & set(added)
            for row, kind, _ in emitted:
                want = (("update_preimage" if kind in REMOVES else "update_postimage")
                        if row[0] in both else ("delete" if kind in REMOVES else "insert"))
                assert kind == want, f"{label}: key {row[0]} as {kind}, expected {want}"
            if both:
                event(f"change feed: keyed {operation} with pre- and postimages")
