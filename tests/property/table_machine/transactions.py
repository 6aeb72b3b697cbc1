"""Transactions: ``with t.transaction() as tx:`` running several writes, committed as one instant.

A ``Transaction`` action runs 2-4 operations in one block: appends, upserts, deletes by key or by
predicate and updates, drawn as the single writes' payloads, a whole-table overwrite first now and
then, with ``commit_properties`` carrying an app's version about a third of the time and a fault
armed around the whole block like any write (so crashes hit every step of its commit, and the
reads of its operations). ``_expect_transaction`` predicts it by applying the operations in order
to what the transaction sees (read-your-writes): the snapshot's rows it has not deleted or
rewritten, plus the rows it staged. Then ``Commits._write`` judges it like every write:

* it commits as one instant of operation ``transaction`` whose ``Commit.operations`` (and commit
  metadata) name the operations that staged, in order; ``rows_added`` is the rows staged at the
  end (one new segment holds them; none without rows, but an overwrite's, which may be empty),
  ``rows_deleted`` the snapshot's rows it deleted or rewrote (an overwrite: all of them, and every
  live segment is marked for delete);
* all or nothing: under a fault it is either acknowledged whole or nothing of it is visible (the
  invariants find no row of a failed serial), its instant rolled back as a single write's;
* an operation that must raise (a keyed append of a key the transaction sees, staged or in the
  snapshot, or twice in its data: DuplicateKeyError; an overwrite after an operation staged, or
  an upsert of an unkeyed table: InvalidOptionError) stages nothing. Its error either leaves the
  block (``escape``), and then the transaction must raise it, create no instant and change nothing,
  or is caught by the block (the error must have been raised) and the rest commits;
* operations that together change nothing (all matching nothing, or deleting only what they
  staged) return None and create no instant;
* a replayed app version (``Commits._expect``): every operation is a no-op (none raises but a bad
  call, which the block then catches) and the commit returns None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow.compute as pc
from hypothesis import note

import txn
from tests.property.table_machine.actions import (
    DeleteKeys,
    DeleteWhere,
    KeySpec,
    Transaction,
    TxOperation,
    Update,
    Upsert,
    Write,
)
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.model import Expected, Row, _sort
from tests.property.table_machine.writes import _free_key, resolve_where

Step = Callable[[txn.Transaction], None]


@dataclass
class _Seen:
    """What the transaction sees after its operations so far."""

    #: The snapshot's rows it has not deleted or rewritten.
    kept: list[Row]
    #: The rows it staged (written by the commit, as one new segment).
    staged: list[Row] = field(default_factory=list)
    #: The snapshot's rows it deleted or rewrote (each at most once: a row of it is gone from
    #: ``kept``), and how many.
    removed: set[Row] = field(default_factory=set)
    deleted: int = 0
    #: A whole-table overwrite began it.
    replaces: bool = False
    #: The names of the operations that staged, in order.
    names: list[str] = field(default_factory=list)

    def rows(self) -> list[Row]:
        return [*self.kept, *self.staged]

    def keys(self) -> set[int]:
        return {row[0] for row in self.rows()}

    def drop(self, gone: Callable[[Row], bool]) -> None:
        """Delete the rows ``gone`` says, from the snapshot's and the staged ones."""
        out = [row for row in self.kept if gone(row)]
        self.removed.update(out)
        self.deleted += len(out)
        self.kept = [row for row in self.kept if not gone(row)]
        self.staged = [row for row in self.staged if not gone(row)]


class Transactions(MachineCore):
    """``t.transaction()`` as the model predicts it."""

    def _expect_transaction(self, action: Transaction, serial: int, kw: dict[str, object]) -> Expected:
        """``_expect`` of a transaction (``kw``: app_id and version, if any)."""
        tag = serial * 1000
        app, version = kw.get("app_id"), kw.get("version")
        properties, replay = None, False
        if isinstance(app, str) and isinstance(version, int):
            properties = txn.CommitProperties(app_id=app, version=version)
            held = self.app_model.get(app)
            # A version committed before: every operation is a no-op (``_expect`` then expects
            # None and nothing written).
            replay = held is not None and version <= held[0]
        seen = _Seen(kept=list(self.expected))
        steps: list[tuple[str, Step, type[Exception] | None, bool]] = []
        refused: type[Exception] | None = None
        caught = 0
        for operation in action.operations:
            name, step, raises = self._tx_operation(operation, seen, tag)
            # A replay stages nothing, so nothing is a duplicate or comes after a staged
            # operation; a bad call (an upsert of an unkeyed table) still raises, and the block
            # catches it (a replay must return None).
            if replay and not (name == "upsert" and not self.keyed):
                raises = None
            escapes = action.escape and not replay
            steps.append((name, step, raises, escapes))
            if raises is None:
                continue
            if escapes:
                refused = raises
                break
            caught += 1
        note(f"transaction: {[step[0] for step in steps]}, staged {seen.names}"
             + (f", {refused.__name__} leaves the block" if refused else "")
             + (f", {caught} error(s) caught" if caught else ""))

        def call(t: txn.Table) -> object:
            with t.transaction(commit_properties=properties) as tx:
                for name, step, raises, escapes in steps:
                    if raises is None or escapes:
                        step(tx)
                        continue
                    try:
                        step(tx)
                    except raises:
                        continue
                    # Raised inside the block: nothing commits, and the judge sees this error.
                    raise AssertionError(f"tx.{name} should have raised {raises.__name__}")
            return tx.result

        if refused is not None:
            return Expected("transaction", call, self.expected, added=0, deleted=0, segment=False,
                            refused=refused, label=f"transaction left by {refused.__name__}")
        staged = bool(seen.staged)
        noop = not (seen.replaces or staged or seen.deleted)
        form = ("an overwrite and more" if seen.replaces else
                "writing and deleting" if staged and seen.deleted else
                "writing only" if staged else "deleting only" if seen.deleted else "of no change")
        removed = frozenset(seen.removed)
        return Expected(
            "transaction", call, _sort(seen.rows()), added=len(seen.staged),
            deleted=len(self.expected) if seen.replaces else seen.deleted,
            # An overwrite writes its segment even when nothing staged is left (as a single
            # overwrite of no rows: Success, 0 rows).
            segment=staged or seen.replaces,
            noop=noop, written=_sort(seen.staged), removes=lambda row: row in removed,
            replaces=seen.replaces, operations=tuple(seen.names),
            label=f"transaction {form}" + (", an error caught" if caught else ""))

    def _tx_operation(self, operation: TxOperation, seen: _Seen, tag: int) -> tuple[
            str, Step, type[Exception] | None]:
        """One operation of a transaction: its name, how the block runs it and the error it must
        raise (None: it stages, and ``seen`` moves on)."""
        if isinstance(operation, Write) and operation.operation == "overwrite":
            rows = [(k, g, tag + v) for k, g, v in operation.rows]
            if self.keyed:  # the last row of each key, as a single overwrite's data
                rows = list({k: (k, g, v) for k, g, v in rows}.values())
            self.seen_keys.update(r[0] for r in rows)
            data = self.shape.table(rows)
            if seen.names:  # only first: after an operation that staged
                return "overwrite", lambda tx: tx.overwrite(data), txn.InvalidOptionError
            seen.deleted, seen.kept, seen.staged = 0, [], rows
            seen.replaces = True
            seen.names.append("overwrite")
            return "overwrite", lambda tx: tx.overwrite(data), None
        if isinstance(operation, Write):
            rows, raises = self._tx_append_rows(operation, seen, tag)
            self.seen_keys.update(r[0] for r in rows)
            data = self.shape.table(rows)
            if raises is None:
                seen.staged = [*seen.staged, *rows]
                seen.names.append("append")
            return "append", lambda tx: tx.append(data), raises
        if isinstance(operation, Upsert):
            keys = sorted(seen.keys())
            rows = [(self._tx_key(spec, keys), g, tag + v) for spec, g, v in operation.rows]
            self.seen_keys.update(r[0] for r in rows)
            data = self.shape.table(rows)
            if not self.keyed:
                return "upsert", lambda tx: tx.upsert(data), txn.InvalidOptionError
            last = {row[0]: row for row in rows}  # the last row of a key wins
            seen.drop(lambda row: row[0] in last)
            seen.staged = [*seen.staged, *last.values()]
            seen.names.append("upsert")
            return "upsert", lambda tx: tx.upsert(data), None
        if isinstance(operation, DeleteKeys):
            keys = sorted(seen.keys())
            wanted = [self._tx_key(spec, keys) for spec in operation.keys]
            self.seen_keys.update(wanted)
            hit = set(wanted)
            seen.drop(lambda row: row[0] in hit)
            seen.names.append("delete")
            return "delete", lambda tx: tx.delete(keys=wanted), None
        assert isinstance(operation, (DeleteWhere, Update))
        expression, matches = resolve_where(operation.where, tuple(seen.rows()), self.shape.names)
        if isinstance(operation, DeleteWhere):
            condition = pc.scalar(True) if expression is None else expression
            seen.drop(matches)
            seen.names.append("delete")
            return "delete", lambda tx: tx.delete(where=condition), None
        sets_v, sets_g = operation.sets in ("v", "both"), operation.sets in ("g", "both")
        values = self.shape.update_values(tag + operation.v if sets_v else None,
                                          (operation.g,) if sets_g else None)

        def changed(row: Row) -> Row:
            k, g, v = row
            return (k, operation.g if sets_g else g, tag + operation.v if sets_v else v)

        rewritten = [changed(row) for row in seen.rows() if matches(row)]
        seen.drop(matches)
        seen.staged = [*seen.staged, *rewritten]
        seen.names.append("update")
        return "update", lambda tx: tx.update(expression, values), None

    def _tx_append_rows(self, operation: Write, seen: _Seen, tag: int) -> tuple[
            list[Row], type[Exception] | None]:
        """An append's rows, tagged, and the error they must raise: keyed, their keys made unique
        and new to what the transaction sees (a key it deleted may come back), unless ``clash``
        repeats a key in the data (``batch``) or puts the first row on a key the transaction sees
        (``table``: staged or in the snapshot)."""
        rows = [(k, g, tag + v) for k, g, v in operation.rows]
        if not self.keyed:
            return rows, None
        if operation.clash == "batch":
            return [*rows, (rows[0][0], *rows[-1][1:])], txn.DuplicateKeyError
        taken = seen.keys()
        fresh = []
        for k, g, v in rows:
            k = _free_key(k, taken)
            taken.add(k)
            fresh.append((k, g, v))
        visible = sorted(seen.keys())
        if operation.clash == "table" and visible:
            fresh[0] = (visible[fresh[0][2] % 1000 * len(visible) // 1000], *fresh[0][1:])
            return fresh, txn.DuplicateKeyError
        return fresh, None

    @staticmethod
    def _tx_key(spec: KeySpec, keys: list[int]) -> int:
        """``spec`` resolved against the keys the transaction sees (``MachineCore._key``'s rule)."""
        if isinstance(spec, int):
            return spec
        return keys[spec.position * len(keys) // 1000] if keys else spec.position % 101 - 50

