"""The table state machine, split by concern; ``tests/property/test_table_state_machine.py``
assembles it (``TableMachine``) and holds its test cases, profiles and regression tests.

Where things are:

* ``config``: the table the machine creates (schema, properties drawn at create, timings);
* ``actions``: what a step can do, as frozen dataclasses, and the strategies that draw them;
* ``model``: the reference model's values and pure helpers (``Expected``: what a write must do);
* ``injection``: which storage call fails, and the storage the machine's processes go through;
* ``core``: ``MachineCore``, the state of a run, ``create`` and the ``Table`` objects it opens;
* the capability mixins, each a subclass of ``MachineCore`` with the methods (and any rules) of
  one concern: ``crashes.Crashes`` (faults, rollback and recovery), ``commits.Commits`` (one
  write, judged), ``writes.Writes`` (loads and keyed writes, the racing delete),
  ``transactions.Transactions`` (``t.transaction()``: several writes, one instant),
  ``external.ExternalSegments`` (ADD SEGMENT, with two rules of its own), ``streams.Streams``,
  ``segments.Segments`` (compaction and DELETE SEGMENT), ``services.Services`` (CLEAN FILES,
  maintenance and archival), ``reads.Reads`` (reads, lookups, time travel),
  ``schema.SchemaChanges`` (add, drop, rename and widen columns, set and unset a property,
  writes with ``schema_mode="merge"``: the model's ``Shape``, by which every write builds its
  data and every read is checked);
* ``invariants.Invariants``: every ``@invariant`` but the change feed's;
* ``changes.ChangeFeed``: the change feed (``t.changes``) of every window of acknowledged
  commits, replayed onto the model after every step.

The mixins call each other through ``self``: only the assembled ``TableMachine`` has them all.
Hypothesis collects rules, initializers and invariants from the members of the machine's class,
in name order, whichever base defines them, so a mixin's ``@rule`` needs nothing but the mixin
among ``TableMachine``'s bases.

Adding a kind of commit (``t.transaction()``, say):

1. ``actions``: a frozen dataclass of what a step draws (with ``fault: FaultPlan | None`` and
   ``wait_ms``) and its strategy, listed in ``keyed_actions`` and ``unkeyed_actions`` as often
   as it should be drawn, and in ``Mutation`` if it commits;
2. a module of its own with a mixin, ``class Transactions(MachineCore)``, whose
   ``_expect_<kind>(action, serial) -> Expected`` predicts from the model what it must do (the
   call, the rows after it, the rows it adds and deletes, the segments it writes or marks, or the
   error it must raise); ``Commits._expect`` hands the action to it, and ``Commits._write`` runs
   it with its fault armed and judges it like any write (refusal, commit point, rollback, the
   model's next state). A commit that changes segments in a new way extends
   ``Commits._segments_after``; one of several instants judges them as ``Segments._rounds`` does;
3. the mixin among ``TableMachine``'s bases, and the action's branch in ``TableMachine._act``
   (the clock's wait, a dead writer's replacement), in ``test_table_state_machine.py``;
4. what must hold after every step, as an ``@invariant`` in ``invariants``.

The table's schema changes during a run (``schema``): rows stay ``(k, g, v)`` in the model, by
column id, and the model's ``Shape`` (``self.shape``; each ``Acked`` has the one of its commit)
turns them into a write's data (``self.shape.table(rows)``, never a fixed schema), names
columns in expressions (``self.shape.names``) and checks a read's schema and added columns
(``shape.rows_of(table)``; ``check_ids`` for the column ids).

Prefer an action of ``act`` to a ``@rule`` of its own: Hypothesis's swarm testing switches whole
rules off for a run (``TableMachine._act``). A rule that only checks and restores (as
``external``'s do) takes a ``@precondition`` so that it runs on few steps. New actions or rules
change what the derandomized ``ci`` profile draws; the profiles themselves stay as they are.
"""

from tests.property.table_machine.changes import ChangeFeed
from tests.property.table_machine.commits import Commits
from tests.property.table_machine.crashes import Crashes
from tests.property.table_machine.external import ExternalSegments
from tests.property.table_machine.invariants import Invariants
from tests.property.table_machine.reads import Reads
from tests.property.table_machine.schema import SchemaChanges
from tests.property.table_machine.segments import Segments
from tests.property.table_machine.services import Services
from tests.property.table_machine.streams import Streams
from tests.property.table_machine.transactions import Transactions
from tests.property.table_machine.writes import Writes

__all__ = [
    "ChangeFeed",
    "Commits",
    "Crashes",
    "ExternalSegments",
    "Invariants",
    "Reads",
    "SchemaChanges",
    "Segments",
    "Services",
    "Streams",
    "Transactions",
    "Writes",
]
