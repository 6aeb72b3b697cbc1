"""Schema and property changes (issue 24): each a commit of its own, crashed at every storage
call like any write (``Commits._write``), judged against the model's ``Shape``.

* ``add_columns``: a nullable column of ``EXTRA_TYPES`` named from ``ADDED_NAMES`` (a name
  dropped before comes back as a new column, with a new id: old files read it as null); every
  name taken: refused (SchemaEvolutionError);
* ``drop_columns`` of an added column; with none, of the partition column ``g`` or (keyed) the
  record key ``k``: refused;
* ``rename_column`` of any column (the record key and the partition column too) to a new name;
* ``alter_column`` widening an int32 column to int64 (with none, the change adds one); now and
  then narrowing ``v`` to int32 instead: refused;
* ``set_properties`` / ``unset_properties`` of ``clean.retain_commits`` (the model's
  ``clean_retain``: what CLEAN FILES must keep from then on; unset: the default, 10);
* writes with ``schema_mode="merge"`` (``MergeWrite``): an append (keyed: its keys made new,
  now and then a duplicate key, refused) or, keyed, an upsert, whose data adds a nullable column
  (a free name of ``ADDED_NAMES``, a dropped one too: a new id above every id used, null in
  every older row) and/or sends an int32 added column as int64: one commit makes the new schema
  current with the rows (``Commit.schema_version`` set); data that adds nothing is a plain write
  (no version). A merge that fails or crashes changes nothing, and a ``Snapshot`` the writer
  took before it reads the same schema and rows after it, whatever happened.

A change adds no row: its commit's snapshot holds the rows of the one before, as the new
schema shows them (``Shape``: renamed, a dropped column gone, an added one null in old rows,
a widened one of the new type). A change that fails leaves the old schema: the invariants read
the latest schema and every retained snapshot's (``as_of``: the schema as of then) against the
model, and every later write writes rows of the schema current then (``Shape.table``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pyarrow as pa

import txn
from tests.property.table_machine.actions import Alter, MergeWrite
from tests.property.table_machine.config import CLEAN_RETENTIONS
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.model import Column, Expected, G, K, Shape, V

#: The types of added columns: int32 (which ``widen`` makes int64), string, float64.
EXTRA_TYPES = (pa.int32(), pa.string(), pa.float64())


#: The names added columns take: few, so that a dropped name is soon added again.
ADDED_NAMES = ("a", "b", "c")


#: clean.retain_commits when unset (design/properties.md).
DEFAULT_CLEAN_RETAIN = 10


class SchemaChanges(MachineCore):
    """``_expect_alter``: what a schema or property change must do, from the model's shape."""

    def _expect_alter(self, action: Alter, serial: int) -> Expected:
        shape, kind = self.shape, action.kind
        int32 = [c for c in shape.added if c.type == pa.int32()]
        if kind == "widen" and not int32:
            kind = "add"
            action = dataclasses.replace(action, type=0)
        if kind == "add":
            return self._expect_add_column(action, serial)
        if kind == "drop":
            if not shape.added:
                # Never the partition column, nor the record key.
                name = shape.name(K if self.keyed and action.position % 2 else G)
                return self._alter(lambda t: t.drop_columns([name]), None,
                                   f"drop of the {'record key' if name == shape.name(K) else 'partition'} "
                                   "column", refused=txn.SchemaEvolutionError)
            column = shape.added[action.position * len(shape.added) // 1000]
            return self._alter(lambda t: t.drop_columns([column.name]),
                               dataclasses.replace(shape, columns=tuple(
                                   c for c in shape.columns if c.cid != column.cid)),
                               f"drop of an added {column.type} column")
        if kind == "rename":
            column = shape.columns[action.position * len(shape.columns) // 1000]
            root = {K: "k", G: "g", V: "v"}.get(column.cid, "x")
            new = f"{root}{serial}"
            what = {K: "the record key" if self.keyed else "the sort column", G: "the partition column",
                    V: "v"}.get(column.cid, "an added column")
            return self._alter(lambda t: t.rename_column(column.name, new),
                               dataclasses.replace(shape, columns=tuple(
                                   dataclasses.replace(c, name=new) if c.cid == column.cid else c
                                   for c in shape.columns)),
                               f"rename of {what}")
        if kind == "widen":
            if action.position % 10 == 0:
                name = shape.name(V)
                return self._alter(lambda t: t.alter_column(name, pa.int32()), None,
                                   "narrowing int64 -> int32", refused=txn.SchemaEvolutionError)
            column = int32[action.position * len(int32) // 1000]
            return self._alter(lambda t: t.alter_column(column.name, pa.int64()),
                               dataclasses.replace(shape, columns=tuple(
                                   dataclasses.replace(c, type=pa.int64()) if c.cid == column.cid
                                   else c for c in shape.columns)),
                               "widening int32 -> int64")
        if kind == "unset" and self.retain_set:
            def unset() -> None:
                self.clean_retain, self.retain_set = DEFAULT_CLEAN_RETAIN, False

            return self._alter(lambda t: t.unset_properties(["clean.retain_commits"]), None,
                               "unset_properties(clean.retain_commits)", then=unset)
        retain = CLEAN_RETENTIONS[action.position % len(CLEAN_RETENTIONS)]

        def set_retain() -> None:
            self.clean_retain, self.retain_set = retain, True

        return self._alter(lambda t: t.set_properties({"clean.retain_commits": str(retain)}), None,
                           "set_properties(clean.retain_commits)", then=set_retain)

    def _expect_add_column(self, action: Alter, serial: int) -> Expected:
        shape = self.shape
        taken = {c.name for c in shape.columns}
        start = action.position * len(ADDED_NAMES) // 1000
        free = [n for n in ADDED_NAMES[start:] + ADDED_NAMES[:start] if n not in taken]
        kind = EXTRA_TYPES[action.type]
        if not free:
            name = ADDED_NAMES[start]
            return self._alter(lambda t: t.add_columns([pa.field(name, kind)]), None,
                               "add of a column whose name is taken", refused=txn.SchemaEvolutionError)
        name = free[0]
        again = any(name in (c.name for c in a.shape.columns) for a in self.acked)
        column = Column(shape.last_id + 1, name, kind, since=serial)
        return self._alter(lambda t: t.add_columns([pa.field(name, kind)]),
                           Shape(columns=(*shape.columns, column), last_id=column.cid),
                           f"add of a {kind} column" + (" under a name dropped before" if again else ""))

    def _merge_write(self, action: MergeWrite) -> None:
        """Run ``action`` (judged by ``_write``); a ``Snapshot`` of the writer taken before it
        still reads the schema and rows of then."""
        shape, rows = self.shape, self.expected
        pinned = self.writer.snapshot()
        self._write(action)
        if not self.dead:  # a dead writer's store refuses every call
            what = "a snapshot taken before a merge write"
            shape.check_ids(pinned.schema, what)
            assert shape.rows_of(pinned.to_arrow(), what) == rows, f"{what} changed its rows"

    def _expect_merge(self, action: MergeWrite, serial: int) -> Expected:
        """``action.write`` with ``schema_mode="merge"``, its data of the merged shape: once it
        committed, that shape is the model's."""
        shape = self.shape
        columns, last_id, changes = list(shape.columns), shape.last_id, []
        int32 = [c for c in shape.added if c.type == pa.int32()]
        if action.widens and int32:
            widened = int32[action.position * len(int32) // 1000]
            columns = [dataclasses.replace(c, type=pa.int64()) if c.cid == widened.cid else c
                       for c in columns]
            changes.append("widening an int32 column to int64")
        taken = {c.name for c in shape.columns}
        start = action.position * len(ADDED_NAMES) // 1000
        free = [n for n in ADDED_NAMES[start:] + ADDED_NAMES[:start] if n not in taken]
        if action.adds and free:
            kind = EXTRA_TYPES[action.type]
            again = any(free[0] in (c.name for c in a.shape.columns) for a in self.acked)
            last_id += 1
            columns.append(Column(last_id, free[0], kind, since=serial))
            changes.append(f"adding a {kind} column" + (" under a name dropped before" if again else ""))
        after = Shape(columns=tuple(columns), last_id=last_id)
        expected = self._expect_mutation(action.write, serial, {"schema_mode": "merge"}, shape=after)
        operation = expected.operation
        if not changes:
            return dataclasses.replace(expected, versions=False,
                                       label=f"merge {operation} that adds nothing")

        def committed() -> None:
            self.shape = after

        label = f"merge {operation} {' and '.join(changes)}"
        if expected.noop:
            label = f"merge {operation} of no rows"
        return dataclasses.replace(expected, versions=True, label=label, on_commit=committed)

    def _alter(self, call: Callable[[txn.Table], object], after: Shape | None, label: str, *,
               refused: type[Exception] | None = None,
               then: Callable[[], None] | None = None) -> Expected:
        """An ``alter_table`` commit: no rows added or deleted, no segment; once it committed the
        model's shape is ``after`` (None: unchanged) and ``then`` runs."""

        def committed() -> None:
            if after is not None:
                self.shape = after
            if then is not None:
                then()

        return Expected("alter_table", call, self.expected, added=0, deleted=0, segment=False,
                        refused=refused, label=label, on_commit=committed)
