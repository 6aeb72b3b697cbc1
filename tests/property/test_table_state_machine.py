"""Model-based test of tables: appends, overwrites, keyed writes (upsert, delete, update), merges,
transactions of several of them, schema and property changes, ADD SEGMENT of external Parquet
folders, streams and idempotent writes, record lookups, time travel, the table services
(compaction, hand-off, DELETE SEGMENT, CLEAN FILES) and crashes at every storage call.

This module assembles the machine and runs it; the machine itself lives in
``tests/property/table_machine/``, a module per concern, each saying what it covers:
``config`` (the table created), ``actions`` (what a step can do), ``model`` (the reference
model), ``injection`` and ``crashes`` (faults at every storage call, and recovery), ``commits``
(one write, judged), ``writes``, ``transactions`` (``t.transaction()``), ``external`` (ADD
SEGMENT), ``streams``, ``segments`` (compaction, DELETE SEGMENT), ``services`` (CLEAN FILES,
maintenance, archival), ``reads`` (reads, lookups, time travel), ``invariants`` and ``changes``
(the change feed replayed onto the model after every step). The package
docstring is the map, and says where a new kind of commit adds its actions and rules.

``TableMachine`` combines the capability mixins; ``machine_on`` binds it to a backend (memory
or local disk: the differential half of the contract) and to a keyed or an unkeyed table, adds
the one ``act`` rule with the actions that fit, and sizes the run from the loaded Hypothesis
profile (``ci``, ``dev`` or ``long``, registered in ``tests/conftest.py``). The default run
(``ci``, derandomized) runs every variant, 12 runs of 25-30 steps each (``CI_RUNS``); ``make
test-long`` adds the breadth: 100 random runs per variant, or 1,000 longer ones with
``HYPOTHESIS_PROFILE=long``. The tests at the end pin cases the machine found.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable

import fsspec
import pyarrow as pa
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

import txn
from metatxn.timeline import open_storage
from tests.conftest import FakeClock
from tests.faults import InjectedFault
from tests.property.table_machine import (
    ChangeFeed,
    Commits,
    Crashes,
    ExternalSegments,
    Invariants,
    Reads,
    SchemaChanges,
    Segments,
    Services,
    Streams,
    Transactions,
    Writes,
)
from tests.property.table_machine.actions import (
    Action,
    AddSegment,
    Alter,
    Clean,
    Compact,
    DeleteKeys,
    DeleteSegments,
    DeleteWhere,
    DropStream,
    FaultPlan,
    Lookup,
    Maintain,
    MergeInto,
    MergeWrite,
    RacingDeleteKeys,
    ReadLatest,
    ReadPast,
    StreamWrite,
    Transaction,
    Update,
    Upsert,
    Write,
    keyed_actions,
    unkeyed_actions,
)
from tests.property.table_machine.config import (
    BASE_NAME,
    HEARTBEAT_TIMEOUT_MS,
)
from tests.property.table_machine.injection import TableStorage
from tests.property.table_machine.internals import TABLE_CONFIG_PATH, decode_config


class TableMachine(Invariants, ChangeFeed, Commits, Writes, Transactions, SchemaChanges, ExternalSegments,
                   Streams, Segments, Services, Reads, Crashes):
    """Drive one table through writes, reads and crashes; subclasses choose the backend and
    whether the table is keyed (and add the ``act`` rule with the actions that fit it)."""

    # One rule for every action (``act``, added per variant by ``machine_on`` with the actions
    # that fit the table). Hypothesis's swarm testing switches whole rules off for a run (each
    # with a probability drawn per run), and with writes in a rule of their own about half of
    # the runs never wrote and so tested nothing. A new kind of action adds its branch here, and
    # its mixin to the bases above (see tests/property/table_machine/__init__.py).
    def _act(self, action: Action) -> None:
        if isinstance(action, Clean):
            self._wait(action.wait_ms)
            self._settle()
            self._clean(action)
        elif isinstance(action, Maintain):
            self._wait(action.wait_ms)
            self._maintain(action)
        elif isinstance(action, MergeWrite):
            self._revive_if_dead()
            self._wait(action.wait_ms)
            self._merge_write(action)
        elif isinstance(action, (Write, AddSegment, Upsert, DeleteKeys, DeleteWhere, Update, MergeInto,
                                 DeleteSegments, StreamWrite, DropStream, Transaction, Alter)):
            self._revive_if_dead()
            self._wait(action.wait_ms)
            if isinstance(action, (DeleteSegments, StreamWrite, DropStream)):
                self._settle()  # a hand-off skips segments running writes hold
            name = getattr(action, "name", "")
            was_active = self._active_stream(name) is not None
            self._write(action)
            held = self.open_streams.get(name)
            if isinstance(action, DropStream) and held is not None:
                # DROP STREAM closes the stream's writers in this process before it commits.
                if was_active and self._active_stream(name) is None:
                    assert held.closed, "DROP STREAM committed; the stream's writer is still open"
                if held.closed:
                    del self.open_streams[name]
            elif isinstance(action, StreamWrite) and action.stop and held is not None:
                held.close()
                del self.open_streams[name]
                event("stream stopped")
        elif isinstance(action, Compact):
            self._revive_if_dead()
            self._wait(action.wait_ms)
            self._settle()
            self._compact(action)
        elif isinstance(action, RacingDeleteKeys):
            self._revive_if_dead()
            self._race_delete_keys(action)
        elif isinstance(action, Lookup):
            keys = [self._key(spec) for spec in action.keys]
            self._check_lookup(self.reader if self.dead else self.writer, keys)
        elif isinstance(action, ReadLatest):
            self._read_latest(action.k_at_least, action.g_equals)
        elif isinstance(action, ReadPast):
            self._read_the_past(action.position, action.form)
        else:
            self._read_with_a_fault(action)


# -- variants ------------------------------------------------------------------------------------

_memory_roots = itertools.count()


def _memory_location() -> tuple[str, Callable[[], None]]:

    root = f"/metatxn-table-machine-{os.getpid()}-{next(_memory_roots)}"

    def cleanup() -> None:
        fs = fsspec.filesystem("memory")
        if fs.exists(root):
            fs.rm(root, recursive=True)

    return f"memory://{root}", cleanup


def _local_location() -> tuple[str, Callable[[], None]]:
    root = tempfile.mkdtemp(prefix="metatxn-table-machine-")
    return os.path.join(root, "table"), lambda: shutil.rmtree(root, ignore_errors=True)


#: Every step writes or reads a real table and checks it whole, so keyed runs (whose steps cost
#: most) are shortened to this fraction of the profile's stateful_step_count: ci 30 -> 25, dev
#: 40 -> 33, long 80 -> 66; unkeyed runs take the whole count (ci 30), as compactions and cleans
#: need several loads and removals before they find work.
STEP_FRACTION = {True: 5 / 6, False: 1}

#: What the default run (the derandomized ``ci`` profile) covers: the same 25-30 step runs, but
#: this many of them per variant instead of the profile's 40. Each step's invariants (the latest
#: and past snapshots, ``validate()``, the change feed replayed) cost about a quarter of a second
#: on an idle core, so 40 runs took 60-80 s per variant, 5 of the suite's 30 worker-minutes, and
#: CI's 20-minute budget (issue 29 added every store's tests) leaves room for 12: still 300-360
#: checked steps per variant, every action with faults at every storage call among them.
#: ``make test-long`` adds the breadth: 100 random runs per variant (``dev``), or 1,000 of 66-80
#: steps (``HYPOTHESIS_PROFILE=long``).
CI_RUNS = 12


def machine_on(name: str, factory: Callable[[], tuple[str, Callable[[], None]]], *,
               keyed: bool) -> type[TableMachine]:
    """The same machine, bound to one backend (the differential half of the contract), on a keyed
    or an unkeyed table."""

    @rule(action=keyed_actions if keyed else unkeyed_actions)
    def act(self: TableMachine, action: Action) -> None:
        self._act(action)

    machine = type(f"{'Keyed' if keyed else 'Unkeyed'}TableMachineOn{name}", (TableMachine,),
                   {"make_location": staticmethod(factory), "keyed": keyed, "act": act})
    profile = settings()  # the loaded profile's values
    steps = max(1, int(profile.stateful_step_count * STEP_FRACTION[keyed]))
    # Only the derandomized profile is the default run; the random ones keep their breadth.
    runs = min(profile.max_examples, CI_RUNS) if profile.derandomize else profile.max_examples
    machine.TestCase.settings = settings(  # type: ignore[attr-defined]
        profile, stateful_step_count=steps, max_examples=runs)
    return machine


KeyedMemoryMachine = machine_on("Memory", _memory_location, keyed=True)


KeyedLocalDiskMachine = machine_on("LocalDisk", _local_location, keyed=True)


UnkeyedMemoryMachine = machine_on("Memory", _memory_location, keyed=False)


UnkeyedLocalDiskMachine = machine_on("LocalDisk", _local_location, keyed=False)


TestKeyedTableOnMemory = pytest.mark.slow(KeyedMemoryMachine.TestCase)


TestKeyedTableOnLocalDisk = pytest.mark.slow(KeyedLocalDiskMachine.TestCase)


TestTableOnMemory = pytest.mark.slow(UnkeyedMemoryMachine.TestCase)


TestTableOnLocalDisk = pytest.mark.slow(UnkeyedLocalDiskMachine.TestCase)


# -- regressions ---------------------------------------------------------------------------------


def test_an_aborted_compaction_leaves_no_record_index_base(memory_uri: str) -> None:
    """A metadata compaction that fails after writing a record-index base is aborted by the next
    write's recovery, and nothing it wrote stays behind: every record-index base on storage
    belongs to a completed compaction.

    The state machine checks this too (``no_base_of_a_failed_compaction``) but reaches the
    case only by chance; this pins it. (Found while extending the machine; fixed in 3a4439d.)
    """
    clock = FakeClock()
    txn.create_table(memory_uri, pa.schema([("k", pa.int64()), ("v", pa.int64())]), record_key="k",
                     properties={"metadata.compact_after": "2", "record_index.shards": "1",
                                 "heartbeat.interval_ms": "30000"}, clock=clock)
    inner = open_storage(memory_uri)
    store = TableStorage(inner)
    table = txn.Table(memory_uri, store, decode_config(inner.read(TABLE_CONFIG_PATH)), clock=clock)

    def rows(first: int) -> pa.Table:
        return pa.table({"k": [first, first + 1], "v": [0, 0]})

    table.append(rows(0))
    clock.advance(5)
    # The second commit compacts the metadata table: fail the compaction just after its
    # record-index base landed. The commit itself stands (maintenance is best effort).
    store.arm(1, when="after", ops={"put_if_absent"}, match=lambda path: path.startswith(
        "_metadata/record_index/") and BASE_NAME.match(path.rpartition("/")[2]) is not None)
    table.append(rows(2))
    assert store.fault is not None and store.fault.landed
    clock.advance(5)
    table.append(rows(4))  # its begin aborts the failed compaction
    done = table._context.metadata.done_compactions()
    aborted = [str(i) for i in table._context.metadata.timeline.history()
               if i.action == "compaction" and not (i.is_completed or i.is_pending)]
    assert aborted, "the failed compaction should have been aborted"
    bases = [key for key in inner.list("_metadata/record_index", recursive=True)
             if BASE_NAME.match(key.rpartition("/")[2])]
    orphans = [key for key in bases if key.rsplit("/", 1)[1].split("_", 1)[0] not in done]
    assert not orphans, f"record-index bases of compactions that never completed: {orphans}"
    assert sorted(table.to_arrow()["k"].to_pylist()) == [0, 1, 2, 3, 4, 5]


def test_a_resumed_clean_rollback_restores_no_file_a_later_clean_removed(memory_uri: str) -> None:
    """A clean dies after moving a file to its trash; the rollback that undoes it restores the
    file but fails to delete the trash copy, and stays pending; a later clean removes the
    restored file again and purges its record; resuming the rollback must not restore the trash
    copy once more (a file no record names: validate() reports it as unreferenced).

    Found by the state machine (an Unkeyed run: Clean with a death fault, a write whose recovery
    failed on the trash delete, a clean, a write that resumed the rollback).
    """
    clock = FakeClock()
    txn.create_table(memory_uri, pa.schema([("k", pa.int64())]), clock=clock, properties={
        "clean.retain_commits": "1", "clean.retain_hours": "0", "clean.trash_hours": "1",
        "metadata.compact_after": "2", "heartbeat.interval_ms": "30000"})
    inner = open_storage(memory_uri)
    config = decode_config(inner.read(TABLE_CONFIG_PATH))

    def process() -> tuple[TableStorage, txn.Table]:
        store = TableStorage(inner)
        return store, txn.Table(memory_uri, store, config, clock=clock)

    def load(k: int) -> None:
        writer.append(pa.table({"k": [k]}))
        clock.advance(5)

    store, writer = process()
    load(0)
    load(1)
    load(2)
    # Only orphans (files of no segment) go to the trash, removed segments' files are deleted
    # for good after the commit point: the file the clean moves is an orphan.
    removed = f"segment_0/part-0-09999-0123456789abcdef_{writer.timeline()[0].time}.parquet"
    inner.put(removed, b"a file of a failed task attempt")
    dying, cleaner = process()
    dying.arm(1, when="after", ops={"delete"}, match=lambda path: path == removed, crash=True)
    with pytest.raises(InjectedFault):
        cleaner.clean()  # moved the file to its trash, then died
    clock.advance(HEARTBEAT_TIMEOUT_MS + 1)
    # This write's recovery restores the file, then fails to delete the trash copy.
    store.arm(1, when="before", ops={"delete"}, match=lambda path: path.startswith("_trash/"))
    load(3)
    assert inner.exists(removed)
    # While that rollback is pending, a clean beside it is refused (it could remove the file the
    # rollback then restores once more, with no record naming it).
    with pytest.raises(txn.CommitConflictError, match=r"rollback .* of clean .* is still pending"):
        process()[1].clean()
    clock.advance(HEARTBEAT_TIMEOUT_MS + 1)
    for k in (4, 5, 6):  # the first resumes the rollback; metadata compaction runs
        load(k)
    assert process()[1].clean().files == [removed]  # now a clean removes it, for good
    for k in (7, 8):
        load(k)
    assert not inner.exists(removed), "the rollback restored a file a later clean removed"
    assert writer.validate().ok


def test_a_keyed_overwrite_emits_deletes_and_inserts(memory_uri: str) -> None:
    """A keyed overwrite that writes a key it also removed emits a ``delete`` of the old row and
    an ``insert`` of the new one, never pre- and postimages (design/changes.md; found by the
    change-feed invariant, ``table_machine/changes.py``: a keyed run's append, ADD SEGMENT,
    append, overwrite; fixed in 0500c75)."""
    table = txn.create_table(memory_uri, pa.schema([("k", pa.int64()), ("v", pa.int64())]),
                             record_key="k")
    append = table.append(pa.table({"k": [0, 1], "v": [0, 0]}))
    overwrite = table.overwrite(pa.table({"k": [0], "v": [1]}))
    assert append is not None and overwrite is not None
    got = table.changes(append.instant, overwrite.instant).to_arrow()
    assert sorted(zip(got["_change_type"].to_pylist(), got["k"].to_pylist(), strict=True)) == [
        ("delete", 0), ("delete", 1), ("insert", 0)]


@settings(max_examples=1, deadline=None, database=None)
@given(st.none())
def test_a_dead_clean_after_a_dead_write_leaves_no_unreferenced_file(_: None) -> None:
    """The machine's case, shrunk (TestTableOnLocalDisk with the ci profile): every step is an
    action of the machine, checked by ``metadata_table_agrees_with_storage`` after each. The
    dying write may be a merge or an append: both fail the same way (so does main without
    merges). The file validate() named was no lost reference: DELETE SEGMENT removed it, the
    forced clean purged it and died before deleting it (a leftover), and the last append's
    metadata compaction folded the purge record away; validate() now finds it in the clean's
    ``CleanMetadata.removed`` (``txn/_segments/_validate.py``)."""
    F = FaultPlan
    state = UnkeyedLocalDiskMachine()
    try:
        state.create(retain_commits=1000, shards=1, delta_threshold=1, level_threshold=(2, 2),
                     clean_retain=2, trash_hours=0, maintenance="inline", streaming=True,
                     stream_max=2048, auto_handoff=False, changes_retain=None)
        for action in [
                AddSegment(rows=[(0, "a", 0)], fault=F("before", "death", "writes", 108), wait_ms=5,
                           clash=None, files=1, marker=False, again=None, position=512),
                Maintain(step="run", fault=None, wait_ms=5),
                Write("append", [(0, "a", 0)], fault=F("before", "death", "all", 684), wait_ms=5),
                Write("append", [(0, "a", 0)], fault=F("after", "exception", "instants", 127), wait_ms=5),
                ReadPast(position=0, form="instant"),
                Alter(kind="add", position=0, type=0, fault=F("before", "death", "all", 2), wait_ms=5),
                DeleteSegments(picks=[0], bad=None, fault=F("after", "exception", "instants", 39),
                               wait_ms=5),
                Clean(mode="force", fault=F("before", "death", "writes", 799), wait_ms=65001),
                Write("append", [(0, "a", 0)], fault=None, wait_ms=5),
                Write("append", [(0, "a", 0)], fault=F("before", "death", "all", 0), wait_ms=5),
                Write("append", [(0, "a", 0)], fault=None, wait_ms=5)]:
            state.act(action=action)  # type: ignore[call-arg]
            state.metadata_table_agrees_with_storage()
    finally:
        state.teardown()
