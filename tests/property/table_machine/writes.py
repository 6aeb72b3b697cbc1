"""Loads and keyed writes: append, overwrite (whole or by partition), upsert, delete by keys or
by predicate, update, and a delete by keys racing a second writer's insert.

The table is keyed (``record_key="k"``) in one pair of variants and unkeyed in the other. Writes:

* ``append``: unkeyed, any rows; keyed, rows with new keys (made unique and new when the action
  runs), or on purpose one key already in the table or twice in the data, which must raise
  DuplicateKeyError, write nothing and create no instant;
* ``overwrite``: replaces every row (keyed: unique keys; a key twice in the data is refused);
* ``overwrite(partitions="dynamic")``: replaces the rows of the groups ``g`` the data holds and
  keeps the others; a segment whose live rows are all in them is marked for delete, the others
  lose those rows (no rows: nothing is committed; keyed tables refuse it);
* ``upsert`` (keyed): rows whose keys are partly in the table, partly new, sometimes repeated in
  the data (the last row of a key wins);
* ``delete(keys=...)`` (keyed), ``delete(where=...)`` (a key range, a partition value, a value
  threshold, a disjunction, or everything) and ``update(where, values)`` (``v``, the partition
  column ``g`` or both);
* two writers (keyed, ``RacingDeleteKeys``): ``delete(keys=...)`` of a live key and drawn ones,
  mostly missing, while a second writer's upsert or keyed append, run between the delete's read
  and its commit, inserts the delete's missing keys, upserts its live one, or inserts other
  keys. The insert is judged like any write; then the delete must fail with
  CommitConflictError naming the insert and leave nothing when the insert wrote a key it asked
  for (found or not), else commit after it (issue 22), or commit nothing if it found no key.
  When the insert's commit expired the snapshot the delete read (a clean or a metadata
  compaction removed what its key lookup needs), the delete reads the table again: it then
  deletes what it finds after the insert, without conflict;

* ``merge(source, on=k)`` (``MergeInto``), keyed and unkeyed, by one of three sets of clauses
  (``merge_clauses``): ``upsert`` (update_all, insert_all), ``conditional`` (delete a match
  whose source ``v`` is under 300 of its tag, else update ``v``; insert a source row whose ``v``
  is 500 or more, ``g`` null) and ``by_source`` (set a match's ``g``; delete a target row no
  source row matched whose ``g`` is ``"a"``). A second source row for a live key is refused
  with MergeCardinalityError; the commit is one ``merge`` instant, crashes at every call included;

A delete, update, upsert or merge that matches nothing must return None and create no instant, whatever
fault was armed (a fault can then only hit its reads).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Literal

import pyarrow.compute as pc
import pyarrow.dataset as ds
from hypothesis import event, note

import txn
from metatxn.timeline import ROLLEDBACK
from tests.property.table_machine.actions import (
    AddSegment,
    DeleteKeys,
    DeleteSegments,
    DeleteWhere,
    MergeInto,
    Mutation,
    RacingDeleteKeys,
    Upsert,
    Where,
    Write,
)
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.internals import CommitMetadata, write_state
from tests.property.table_machine.model import HOLDS_ROWS, Acked, Expected, Row, Shape, _sort


def _free_key(key: int, taken: set[int]) -> int:
    """``key`` if free, else the next free key of the drawn range (wrapping), else above it."""
    return next(c for c in itertools.chain(range(key, 51), range(-50, key), itertools.count(51))
                if c not in taken)


def resolve_where(where: Where, rows: tuple[Row, ...], names: tuple[str, str, str] = ("k", "g", "v"),
                  ) -> tuple[ds.Expression | None, Callable[[Row], bool]]:
    """The expression of ``where`` (None: every row; ``names``: the current names of ``k``, ``g``
    and ``v``) and the model's version of it."""
    k, g, v = (pc.field(name) for name in names)
    if where.kind == "keys":
        low, high = where.low, where.low + where.span
        return (k >= low) & (k <= high), lambda r: low <= r[0] <= high
    if where.kind == "group":
        if where.group is None:
            return g.is_null(), lambda r: r[1] is None
        group = where.group
        return g == group, lambda r: r[1] == group
    if where.kind == "value":
        values = sorted(r[2] for r in rows)
        threshold = values[where.position * len(values) // 1000] if values else 0
        return v >= threshold, lambda r: r[2] >= threshold
    if where.kind == "either":
        group, low = where.group or "a", where.low
        return (g == group) | (k <= low), lambda r: r[1] == group or r[0] <= low
    return None, lambda r: True


def merge_clauses(merger: txn.TableMerger, form: str, names: tuple[str, str, str],
                  added: tuple[str, ...], tag: int) -> txn.TableMerger:
    """The clauses of a ``MergeInto`` of ``form`` (``names``: the current names of ``k``, ``g``
    and ``v``; ``added``: the added columns, set with ``v`` as the model's ``Shape`` wants)."""
    k, g, v = names
    source, target = (lambda name: pc.field(f"source.{name}")), (lambda name: pc.field(f"target.{name}"))
    with_v = {v: source(v), **{name: source(name) for name in added}}
    if form == "upsert":
        return merger.when_matched_update_all().when_not_matched_insert_all()
    if form == "conditional":
        return (merger.when_matched_delete(source(v) < tag + 300)
                .when_matched_update(with_v)
                .when_not_matched_insert({k: source(k), **with_v}, predicate=source(v) >= tag + 500))
    return (merger.when_matched_update({g: source(g)})
            .when_not_matched_by_source_delete(target(g) == "a"))


class Writes(MachineCore):
    """Appends, overwrites, upserts, deletes and updates as the model predicts them, and the
    delete by keys that races a second writer."""

    def _expect_mutation(self, action: Mutation, serial: int, kw: dict[str, object],
                         shape: Shape | None = None) -> Expected:
        """``_expect`` of the table's writes (``kw``: app_id and version, if any); an append's or
        upsert's data has the model's schema, or ``shape`` (a merge write's)."""
        before = self.expected
        shape = shape or self.shape
        tag = serial * 1000
        if isinstance(action, AddSegment):
            return self._expect_add(action, serial)
        if isinstance(action, Write) and action.operation == "overwrite_partitions":
            return self._expect_partition_overwrite(action, tag, kw)
        if isinstance(action, Write):
            refused: type[Exception] | None = None
            if action.operation == "append" or (self.keyed and action.clash == "batch"):
                rows, refused = self._new_rows(action.rows, action.clash, tag)
            else:
                rows = [(k, g, tag + v) for k, g, v in action.rows]
                if self.keyed:  # a keyed overwrite: the last row of each key
                    rows = list({k: (k, g, v) for k, g, v in rows}.values())
            self.seen_keys.update(r[0] for r in rows)
            data = shape.table(rows)
            if action.operation == "append":
                return Expected("append", lambda t: t.append(data, **kw), _sort([*before, *rows]),
                                added=len(rows), deleted=0, segment=True, refused=refused,
                                written=_sort(rows))
            return Expected("overwrite", lambda t: t.overwrite(data, **kw), _sort(rows), added=len(rows),
                            deleted=len(before), segment=True, refused=refused,
                            written=_sort(rows), replaces=True)
        if isinstance(action, Upsert):
            rows = [(self._key(spec), g, tag + v) for spec, g, v in action.rows]
            self.seen_keys.update(r[0] for r in rows)
            live = self._live()
            last = {row[0]: row for row in rows}  # the last row of a key wins
            data = shape.table(rows)
            replaced = len(last.keys() & live.keys())
            form = ("replacing and inserting" if 0 < replaced < len(last) else
                    "replacing only" if replaced else "inserting only")
            return Expected("upsert", lambda t: t.upsert(data, **kw), _sort(list({**live, **last}.values())),
                            added=len(last), deleted=replaced, segment=True, noop=not rows,
                            label=f"upsert {form}{', a key repeated' if len(last) < len(rows) else ''}",
                            written=_sort(list(last.values())), removes=lambda row: row[0] in last)
        if isinstance(action, DeleteKeys):
            keys = [self._key(spec) for spec in action.keys]
            self.seen_keys.update(keys)
            live = self._live()
            hit = set(keys) & live.keys()
            return Expected("delete", lambda t: t.delete(keys=keys, **kw),
                            _sort([row for k, row in live.items() if k not in hit]),
                            added=0, deleted=len(hit), segment=False, noop=not hit,
                            label=f"delete(keys) of {'only' if hit == set(keys) else 'some'} live keys",
                            removes=lambda row: row[0] in hit)
        if isinstance(action, DeleteSegments):
            return self._expect_segment_delete(action)
        expression, matches = resolve_where(action.where, before, self.shape.names)
        note(f"where {expression}")
        matched = [row for row in before if matches(row)]
        kept = [row for row in before if not matches(row)]
        if isinstance(action, DeleteWhere):
            condition = pc.scalar(True) if expression is None else expression
            return Expected("delete", lambda t: t.delete(where=condition, **kw), _sort(kept), added=0,
                            deleted=len(matched), segment=False, noop=not matched,
                            label=f"delete(where {action.where.kind})", removes=matches)
        sets_v, sets_g = action.sets in ("v", "both"), action.sets in ("g", "both")
        values = self.shape.update_values(tag + action.v if sets_v else None,
                                          (action.g,) if sets_g else None)
        changed = [(k, action.g if sets_g else g, tag + action.v if sets_v else v)
                   for k, g, v in matched]
        return Expected("update", lambda t: t.update(expression, values, **kw), _sort([*kept, *changed]),
                        added=len(matched), deleted=len(matched), segment=True, noop=not matched,
                        label=f"update(where {action.where.kind}) of {action.sets}",
                        written=_sort(changed), removes=matches)

    def _expect_merge_into(self, action: MergeInto, serial: int, kw: dict[str, object]) -> Expected:
        """``t.merge(source, on=k)`` with ``action.form``'s clauses, as the model predicts it."""
        tag = serial * 1000
        source: list[Row] = []
        present = sorted({row[0] for row in self.expected})  # an unkeyed table repeats keys
        for spec, g, v in action.rows:
            if self.keyed or isinstance(spec, int) or not present:
                k = self._key(spec)
            else:
                k = present[spec.position * len(present) // 1000]
            if all(k != row[0] for row in source):
                source.append((k, g, tag + v))
        self.seen_keys.update(r[0] for r in source)
        before = self.expected
        live_keys = {row[0] for row in before}
        twice = action.twice and bool(source) and source[0][0] in live_keys
        drawn = [*source, (source[0][0], "b", tag + 999)] if twice else source
        names, added = self.shape.names, tuple(c.name for c in self.shape.added)
        data = self.shape.table(drawn)
        properties = txn.CommitProperties(**kw) if kw else None  # type: ignore[arg-type]

        def call(t: txn.Table) -> object:
            merger = t.merge(data, names[0], commit_properties=properties)
            return merge_clauses(merger, action.form, names, added, tag).execute().commit

        label = f"merge ({action.form})"
        if twice:
            return Expected("merge", call, before, added=0, deleted=0, segment=False,
                            refused=txn.MergeCardinalityError, label=f"{label} of a key twice")
        by_key = {row[0]: row for row in source}
        after: list[Row] = []
        written: list[Row] = []
        removed: set[Row] = set()
        updated = deleted = 0
        for row in before:
            match = by_key.get(row[0])
            new: Row | None = row
            if match is not None and action.form == "upsert":
                new = match
            elif match is not None and action.form == "conditional":
                new = None if match[2] < tag + 300 else (row[0], row[1], match[2])
            elif match is not None:
                new = (row[0], match[1], row[2])
            elif action.form == "by_source" and row[1] == "a":
                new = None
            if new is row:
                after.append(row)
                continue
            removed.add(row)
            if new is None:
                deleted += 1
            else:
                updated += 1
                after.append(new)
                written.append(new)
        inserted = [row for row in source if row[0] not in live_keys and (
            action.form == "upsert" or (action.form == "conditional" and row[2] >= tag + 500))]
        inserted = [(k, None, v) if action.form == "conditional" else (k, g, v)
                    for k, g, v in inserted]
        changed = updated + deleted + len(inserted)
        return Expected("merge", call, _sort([*after, *inserted]), added=updated + len(inserted),
                        deleted=updated + deleted, segment=bool(updated or inserted),
                        noop=not changed, written=_sort([*written, *inserted]),
                        removes=lambda row: row in removed,
                        label=f"{label}: {updated} updated, {deleted} deleted, {len(inserted)} inserted")

    def _new_rows(self, drawn: list[Row], clash: Literal["table", "batch"] | None,
                  tag: int) -> tuple[list[Row], type[Exception] | None]:
        """The rows of an append or ADD SEGMENT, tagged, and the error they must raise: keyed,
        their keys made unique and new to the table, unless ``clash`` puts a key twice in the
        data (``batch``) or the first row on a key of the table (``table``)."""
        rows = [(k, g, tag + v) for k, g, v in drawn]
        if not self.keyed:
            return rows, None
        if clash == "batch":
            rows.append((rows[0][0], *rows[-1][1:]))
            return rows, txn.DuplicateKeyError
        live = self._live()
        taken = set(live)
        fresh = []
        for k, g, v in rows:
            k = _free_key(k, taken)
            taken.add(k)
            fresh.append((k, g, v))
        if clash == "table" and live:
            keys = sorted(live)
            fresh[0] = (keys[fresh[0][2] % 1000 * len(keys) // 1000], *fresh[0][1:])
            return fresh, txn.DuplicateKeyError
        return fresh, None

    def _expect_partition_overwrite(self, action: Write, tag: int, kw: dict[str, object]) -> Expected:
        """``overwrite(data, partitions="dynamic")``: the groups the data holds are replaced; a
        segment whose live rows are all in them is marked for delete, the others lose those rows."""
        rows = [(k, g, tag + v) for k, g, v in action.rows]
        data = self.shape.table(rows)
        before = self.expected

        def call(t: txn.Table) -> object:
            return t.overwrite(data, partitions="dynamic", **kw)

        if self.keyed:
            return Expected("overwrite", call, before, added=0, deleted=0, segment=False,
                            refused=txn.InvalidOptionError, label="partition overwrite of a keyed table")
        if not rows:
            return Expected("overwrite", call, before, added=0, deleted=0, segment=False, noop=True,
                            label="partition overwrite of no rows")
        self.seen_keys.update(r[0] for r in rows)
        groups = {g for _, g, _ in rows}
        marks = frozenset(s.id for s in self.segment_model.values() if s.status in HOLDS_ROWS and s.live
                          and all(row[1] in groups for row in s.live))
        kept = [row for row in before if row[1] not in groups]
        return Expected("overwrite", call, _sort([*kept, *rows]), added=len(rows),
                        deleted=len(before) - len(kept), segment=True, written=_sort(rows),
                        removes=lambda row: row[1] in groups, marks=marks,
                        label="partition overwrite" + (" of every group" if not kept else ""))

    def _race_delete_keys(self, action: RacingDeleteKeys) -> None:
        """The writer deletes keys; a second writer's insert (judged like any write, by
        ``_write``) runs once, right after the delete read the table."""
        serial = next(self.serials)
        keys = [self._key(spec) for spec in action.keys]
        self.seen_keys.update(keys)
        live = self._live()
        hit = set(keys) & live.keys()
        absent = sorted(set(keys) - live.keys())
        inserts, via = action.inserts, action.via
        if inserts == "absent" and absent:
            inserted = absent
        elif inserts == "present" and hit:
            inserted, via = [min(hit)], "upsert"
        else:
            inserts, taken, inserted = "other", live.keys() | set(keys), []
            for k, _, _ in action.rows:
                inserted.append(_free_key(k, taken | set(inserted)))
        drawn = [(k, g, v) for k, (_, g, v) in zip(inserted, itertools.cycle(action.rows),
                                                   strict=False)]
        insert: Mutation = (Upsert(rows=list(drawn), fault=None, wait_ms=0) if via == "upsert"
                            else Write("append", drawn, fault=None, wait_ms=0))
        conflict = bool(hit) and inserts != "other"
        note(f"delete(keys={keys}) racing an {via} of {inserts} keys {inserted}")

        racer_errors: list[BaseException] = []
        read_state = write_state.read_state
        #: The delete's reads of the table after the insert (counted from the insert's end).
        again: list[object] = []

        def counted(context: object) -> object:
            again.append(context)
            return read_state(context)  # type: ignore[arg-type]

        def then_insert(context: object) -> object:
            state = read_state(context)  # type: ignore[arg-type]
            if write_state.read_state is then_insert:
                write_state.read_state = counted  # once: the insert reads the table too
                saved = self.store, self.writer
                self.store, self.writer = self._new_writer()
                try:
                    self._write(insert)
                except BaseException as exc:  # judged below, not taken for the delete's error
                    racer_errors.append(exc)
                finally:
                    self.store, self.writer = saved
                    again.clear()
            return state

        acked = len(self.acked)
        started_ms = self.clock()
        write_state.read_state = then_insert  # type: ignore[assignment]
        try:
            outcome, _, calls = self._armed(self.store, None, lambda: self.writer.delete(keys=keys))
        finally:
            write_state.read_state = read_state
        if racer_errors:
            raise racer_errors[0]
        assert len(self.acked) == acked + 1, "the second writer's insert was not acknowledged"
        made = self._instants_of(calls)
        instant = made[0] if made else None
        if again:
            # The insert's commit expired the snapshot the delete read (a clean or a metadata
            # compaction removed what its key lookup needs): it read the table again, so it
            # deletes what it finds after the insert, and nothing conflicts.
            hit, conflict = set(keys) & self._live().keys(), False
            event("racing delete(keys) read the table again after the insert")
        if not hit:
            assert outcome is None and instant is None, (
                f"a delete that found none of its keys returned {outcome!r}, instant {instant}")
            event(f"racing delete(keys) of no live key beside an {via} of {inserts} keys")
            return
        assert instant is not None, f"the racing delete made no instant: {outcome!r}"
        found = self.observer_timeline.history()
        state = next(i for i in found if i.time == instant.time)
        if conflict:
            winner = self.acked[-1].instant
            assert isinstance(outcome, txn.CommitConflictError), (
                f"a delete of {keys} committed after an {via} of {inserted} ({winner}) that it "
                f"did not see: {outcome!r}")
            assert f"conflicts with {via} {winner}" in str(outcome), outcome
            assert state.state == ROLLEDBACK, f"the conflicting delete left {state}"
            self.failed_instants.add(instant.time)
            self.failed_serials.add(serial)
            self._lock_is_free()
            event(f"racing delete(keys): conflict with an {via} of {inserts} keys")
            return
        assert isinstance(outcome, txn.Commit), f"racing delete(keys) failed: {outcome!r}"
        assert state.is_completed and state.completed_at is not None
        # The insert wrote none of the delete's keys: the delete applies to the model as it is now.
        expected = self._expect_mutation(DeleteKeys(keys, fault=None, wait_ms=0), serial, {})
        assert (outcome.rows_added, outcome.rows_deleted) == (0, expected.deleted) == (0, len(hit))
        metadata = self.observer_timeline.read_metadata(state, CommitMetadata)
        self._record(Acked(instant=state.time, completed_at=state.completed_at, operation="delete",
                           serial=serial, rows=expected.after),
                     self._segments_after(expected, state.time, metadata))
        self._clean_run("delete", calls, started_ms)
        event(f"racing delete(keys) committed after an {via} of other keys")
