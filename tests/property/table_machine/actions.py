"""The actions a step can take, as frozen dataclasses, and the strategies that draw them.

An action holds what was drawn; keys, segments and folders are resolved against the model only
when it runs (``OldKey``, ``picks`` and ``position`` per mille). Most carry a ``FaultPlan`` (which
storage call of it fails) and a ``wait_ms`` (how far the clock moves before it).
``keyed_actions`` and ``unkeyed_actions`` weigh them for the one ``act`` rule of each variant
(``TableMachine._act`` says why it is one rule). What each action must do is said in the module
of its capability (``writes``, ``external``, ``streams``, ``segments``, ``services``, ``reads``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hypothesis import strategies as st

from tests.property.table_machine.config import APP_IDS, HEARTBEAT_TIMEOUT_MS, LOCK_LEASE_MS, STREAM_NAMES
from tests.property.table_machine.model import Row

Mode = Literal["exception", "death"]


Counted = Literal["all", "writes", "instants"]


#: A segment id that cannot be compacted or deleted, drawn on purpose: a ``Compacted`` one, a
#: ``Marked for Delete`` one, a ``Streaming`` one (still being written), or one the table never
#: had.
BadId = Literal["compacted", "marked", "unknown", "streaming"]


GROUPS = st.sampled_from(["a", "b", "x/y", None])


rows_strategy = st.lists(
    st.tuples(st.integers(-50, 50), GROUPS, st.integers(0, 999)),
    min_size=1, max_size=20,
)


#: Waited before a write: mostly a few milliseconds; sometimes past every heartbeat timeout and
#: lock lease, so that what failed writers left pending has expired and the write must roll it
#: back when it begins.
EXPIRE_MS = HEARTBEAT_TIMEOUT_MS + LOCK_LEASE_MS + 1


waits = st.sampled_from([5, 5, 5, 5, 5, 250, EXPIRE_MS])


@dataclass(frozen=True)
class FaultPlan:
    """Which storage call of a write fails: counting every call, only the writes (put_if_absent,
    put, delete), or only the puts of instant files on the data and metadata timelines (fewer,
    so each state transition, the commit point among them, is hit more often). ``position``
    (per mille) picks N in 1 .. two past the most such calls a write of the same operation was
    seen to make, so a write may also succeed untouched."""

    when: Literal["before", "after"]
    mode: Mode
    counted: Counted
    position: int


@dataclass(frozen=True)
class OldKey:
    """A key of the table when the action runs, ``position`` per mille into the model's live keys
    (so that upserts, deletes and lookups hit existing keys often); with no live key, a key of
    the drawn range."""

    position: int


KeySpec = int | OldKey


key_specs: st.SearchStrategy[KeySpec] = st.one_of(st.integers(-50, 50),
                                                  st.builds(OldKey, st.integers(0, 999)))


@dataclass(frozen=True)
class App:
    """An idempotent write (``app_id=name, version=...``), its version drawn relative to the
    last one the model has for ``name`` (none yet: 0, whatever the step): ``next`` (one past
    it) and ``gap`` (``by`` past it) commit; ``replay`` (the same) and ``older`` (``by`` before
    it, at least 0) must return None, write nothing and create no instant, whatever the write
    would otherwise do (a duplicate key, a delete of nothing)."""

    name: str
    step: Literal["next", "gap", "replay", "older"]
    by: int


@dataclass(frozen=True)
class Write:
    operation: Literal["append", "overwrite", "overwrite_partitions"]
    rows: list[Row]
    #: None half of the time: a write that must succeed.
    fault: FaultPlan | None
    wait_ms: int
    #: Keyed tables only. None: the keys are made unique (and, for an append, new to the
    #: table) when the action runs. "table": an append whose first row takes a key already in
    #: the table; "batch": a key repeats in the data. Both must raise DuplicateKeyError and
    #: change nothing.
    clash: Literal["table", "batch"] | None = None
    app: App | None = None


@dataclass(frozen=True)
class AddSegment:
    """ADD SEGMENT of a folder of Parquet files the machine writes outside the table, Hive style
    (``g=<value>/``), ``rows`` drawn and made new (keyed) like an append's, ``clash`` likewise.

    ``files``: how many files each partition folder holds (its rows split between them, when it
    has two or more); ``marker``: a Spark ``_SUCCESS`` file beside the partition folders.
    ``again``: add a folder of an earlier AddSegment instead (``position`` per mille into those
    of the kind): ``added``, acknowledged (InvalidOptionError); ``failed``, an add that failed at
    a fault (a retry: it commits unless one of its keys is live by now). With no such folder, a
    new one."""

    rows: list[Row]
    fault: FaultPlan | None
    wait_ms: int
    clash: Literal["table", "batch"] | None = None
    files: int = 1
    marker: bool = False
    again: Literal["added", "failed"] | None = None
    position: int = 0


@dataclass(frozen=True)
class Upsert:
    """Keyed: rows whose keys exist or not; a key may repeat, and its last row wins. Empty
    data commits nothing."""

    rows: list[tuple[KeySpec, str | None, int]]
    fault: FaultPlan | None
    wait_ms: int
    app: App | None = None


@dataclass(frozen=True)
class DeleteKeys:
    """Keyed: ``delete(keys=...)`` of existing and missing keys."""

    keys: list[KeySpec]
    fault: FaultPlan | None
    wait_ms: int
    app: App | None = None


@dataclass(frozen=True)
class RacingDeleteKeys:
    """Keyed, two writers (issue 22): the writer's ``delete(keys=...)``, and between its read and
    its commit a second writer (another process, on healthy storage) inserts, by ``via``, the
    delete's keys missing from the table (``absent``), one it finds (``present``, upserted) or
    keys it does not ask for (``other``; also when the table has no such key of the delete),
    with ``rows``' groups and values. The insert commits first; the delete then fails with
    CommitConflictError and leaves nothing when the insert wrote a key it asked for, else
    commits after it; a delete that found none of its keys commits nothing."""

    keys: list[KeySpec]
    inserts: Literal["absent", "present", "other"]
    via: Literal["upsert", "append"]
    rows: list[Row]


@dataclass(frozen=True)
class Where:
    """A predicate of a delete or update.

    ``keys``: ``low <= k <= low + span``; ``group``: ``g == group`` (``g is null`` for None);
    ``value``: ``v >= `` the model's ``v`` ``position`` per mille into its sorted values;
    ``either``: ``g == group or k <= low`` (Kleene: a null ``g`` matches by its key only);
    ``all``: every row (``where=None`` for an update, ``pc.scalar(True)`` for a delete).
    """

    kind: Literal["keys", "group", "value", "either", "all"]
    low: int
    span: int
    position: int
    group: str | None


@dataclass(frozen=True)
class DeleteWhere:
    where: Where
    fault: FaultPlan | None
    wait_ms: int
    app: App | None = None


@dataclass(frozen=True)
class Update:
    """``update(where, values)``: sets ``v`` (to ``serial * 1000 + v``), ``g`` or both."""

    where: Where
    sets: Literal["v", "g", "both"]
    g: str | None
    v: int
    fault: FaultPlan | None
    wait_ms: int
    app: App | None = None


@dataclass(frozen=True)
class MergeInto:
    """``t.merge(source, on=k)...execute()``: source rows (keys resolved as an upsert's, the
    first row of a key kept) merged by ``form``'s clauses (``writes.merge_clauses``); ``twice``
    adds a second source row for the first key, refused (MergeCardinalityError, nothing written)
    when that key is live in the table."""

    rows: list[tuple[KeySpec, str | None, int]]
    form: Literal["upsert", "conditional", "by_source"]
    twice: bool
    fault: FaultPlan | None
    wait_ms: int
    app: App | None = None


@dataclass(frozen=True)
class Lookup:
    """Keyed: look drawn keys (existing and missing) up through the writer."""

    keys: list[KeySpec]


@dataclass(frozen=True)
class ReadLatest:
    """Read the latest snapshot through the writer, pruned by column statistics if filtered."""

    k_at_least: int | None
    g_equals: str | None


@dataclass(frozen=True)
class ReadPast:
    """Time travel to an acknowledged commit (``position`` per mille into them), named by its
    instant, its completion time (which is no instant's time: a bound) or a ``datetime``."""

    position: int
    form: Literal["instant", "completed_at", "datetime"]


@dataclass(frozen=True)
class ReadWithFault:
    """A reader fails its ``nth`` storage call part way through a read (of the latest snapshot,
    or of a past one; keyed, sometimes a lookup of every key instead); its cached state must not
    be poisoned."""

    nth: int
    when: Literal["before", "after"]
    past: bool
    lookup: bool = False


@dataclass(frozen=True)
class Compact:
    """``compact(kind)``; custom: the live segments ``picks`` per mille into the model's, and
    sometimes a ``bad`` id too (then refused: InvalidOptionError or SegmentNotFoundError);
    close_streaming (hand-off): every ``Streaming Finish`` segment no running write holds, one
    round each, oldest first (InvalidOptionError on a table without ``streaming=true``)."""

    kind: Literal["minor", "major", "custom", "close_streaming"]
    picks: list[int]
    bad: BadId | None
    fault: FaultPlan | None
    wait_ms: int


@dataclass(frozen=True)
class DeleteSegments:
    """DELETE SEGMENT of live segments (``picks`` per mille into the model's), sometimes with a
    ``bad`` id among them, which refuses the whole request."""

    picks: list[int]
    bad: BadId | None
    fault: FaultPlan | None
    wait_ms: int


@dataclass(frozen=True)
class Clean:
    """CLEAN FILES by another process (the cleaner): ``clean()``, ``clean(force=True)`` or
    ``clean(dry_run=True)``."""

    mode: Literal["retained", "force", "dry_run"]
    fault: FaultPlan | None
    wait_ms: int


@dataclass(frozen=True)
class Maintain:
    """Table maintenance by another process (the maintainer): ``run`` is ``maintain()`` with
    the fault armed; ``begin`` begins a metadata compaction and writes its bases, then stops
    (paused, or dead: nothing beats its heartbeat); ``finish`` completes the compaction a
    ``begin`` left, if it is still the maintainer's."""

    step: Literal["run", "begin", "finish"]
    fault: FaultPlan | None
    wait_ms: int


@dataclass(frozen=True)
class StreamWrite:
    """``t.stream(name).write(batch_id, rows)``: the batch id drawn relative to the last one the
    model has for the stream (none yet, or dropped: 0): ``next`` (one past it), ``gap`` (``by``
    past it; ids need not be consecutive) or ``replay`` (``by - 1`` before it: at or below the
    last, so it must return None and write nothing). ``rows`` are drawn like an append's
    (keyed: made new unless ``clash``: DuplicateKeyError, nothing written); they may be empty (the
    batch id is still recorded, in a commit of no rows). ``stop``: close the ``Stream`` after
    the write (SHOW STREAMS: ``Stopped``). On a table without ``streaming=true``,
    InvalidOptionError."""

    name: str
    batch: Literal["next", "gap", "replay"]
    by: int
    rows: list[Row]
    fault: FaultPlan | None
    wait_ms: int
    clash: Literal["table", "batch"] | None = None
    stop: bool = False


@dataclass(frozen=True)
class DropStream:
    """DROP STREAM ``name`` (``t.drop_stream``): StreamNotFoundError unless the stream has a
    record and is not dropped."""

    name: str
    fault: FaultPlan | None
    wait_ms: int


#: What a transaction's block runs: the payloads of the single writes (their ``fault``,
#: ``wait_ms`` and ``app`` unused). ``Write``: ``append`` (``clash`` as for a single append, against
#: what the transaction sees) or ``overwrite`` (whole-table).
TxOperation = Write | Upsert | DeleteKeys | DeleteWhere | Update


@dataclass(frozen=True)
class Transaction:
    """``with t.transaction(commit_properties=...) as tx:`` running ``operations`` in order, then
    committing them as one instant (``transactions`` says what each must do). An operation that
    must raise (a keyed append's duplicate key, whether in the snapshot, staged earlier or twice in
    its data; an ``overwrite`` after a staged operation; an upsert of an unkeyed table) either
    leaves the block (``escape``: nothing is committed) or is caught and the block goes on (the
    operations staged commit)."""

    operations: list[TxOperation]
    escape: bool
    fault: FaultPlan | None
    wait_ms: int
    app: App | None = None


@dataclass(frozen=True)
class Alter:
    """A schema or property change, a commit of its own (``schema`` says what each must do):
    ``add`` a nullable column of ``EXTRA_TYPES[type]`` named from ``ADDED_NAMES`` (``position``
    per mille; a name dropped before comes back as a new column); ``drop`` an added column (none:
    the partition or record-key column, refused); ``rename`` any column, the record key and the
    partition column included; ``widen`` an int32 column to int64 (none: add one; now and then
    a narrowing instead, refused); ``set`` or ``unset`` ``clean.retain_commits``."""

    kind: Literal["add", "drop", "rename", "widen", "set", "unset"]
    position: int
    type: int
    fault: FaultPlan | None
    wait_ms: int


@dataclass(frozen=True)
class MergeWrite:
    """``write`` (an ``append``, or keyed an ``upsert``; its ``fault``, ``wait_ms`` and ``app``
    unused) with ``schema_mode="merge"``, its data of the model's schema plus, as drawn, a new
    nullable column (``adds``: of ``EXTRA_TYPES[type]`` named from ``ADDED_NAMES``, ``position``
    per mille; a name dropped before comes back with a new id) and/or an int32 added column sent
    as int64 (``widens``); with neither (or nothing free to add or widen), a plain write that
    creates no schema version (``schema`` says what each must do)."""

    write: Write | Upsert
    adds: bool
    widens: bool
    position: int
    type: int
    fault: FaultPlan | None
    wait_ms: int


Mutation = (Write | AddSegment | Upsert | DeleteKeys | DeleteWhere | Update | DeleteSegments
            | StreamWrite | DropStream | Transaction | Alter | MergeWrite | MergeInto)


Action = (Mutation | Compact | Clean | Maintain | Lookup | ReadLatest | ReadPast | ReadWithFault
          | RacingDeleteKeys)


fault_plans = st.one_of(st.none(), st.builds(
    FaultPlan, when=st.sampled_from(["before", "after"]),
    mode=st.sampled_from(["exception", "death"]),
    counted=st.sampled_from(["all", "writes", "instants"]), position=st.integers(0, 999)))


#: An idempotent write about a third of the time, mostly a version that commits.
app_specs = st.sampled_from([st.none(), st.none(), st.builds(
    App, name=st.sampled_from(APP_IDS),
    step=st.sampled_from(["next", "next", "gap", "replay", "older"]),
    by=st.integers(1, 3))]).flatmap(lambda chosen: chosen)


writes = st.builds(
    Write,
    operation=st.sampled_from(["append", "append", "overwrite", "overwrite_partitions"]),
    rows=rows_strategy,
    fault=fault_plans,
    wait_ms=waits,
    clash=st.sampled_from([None, None, None, None, None, None, "table", "batch"]),
    app=app_specs,
)


add_segments = st.builds(
    AddSegment, rows=rows_strategy, fault=fault_plans, wait_ms=waits,
    clash=st.sampled_from([None, None, None, None, None, None, "table", "batch"]),
    files=st.sampled_from([1, 1, 2]), marker=st.booleans(),
    again=st.sampled_from([None] * 6 + ["added", "failed"]), position=st.integers(0, 999))


upserts = st.builds(
    Upsert, rows=st.lists(st.tuples(key_specs, GROUPS, st.integers(0, 999)), max_size=20),
    fault=fault_plans, wait_ms=waits, app=app_specs)


merges_into = st.builds(
    MergeInto, rows=st.lists(st.tuples(key_specs, GROUPS, st.integers(0, 999)), max_size=12),
    form=st.sampled_from(["upsert", "conditional", "by_source"]),
    twice=st.sampled_from([False, False, False, True]), fault=fault_plans, wait_ms=waits,
    app=app_specs)


delete_keys = st.builds(DeleteKeys, keys=st.lists(key_specs, max_size=12), fault=fault_plans,
                        wait_ms=waits, app=app_specs)


racing_delete_keys = st.builds(
    # A key of the table (so that the delete commits unless it conflicts) and drawn ones, mostly
    # not in the table: issue 22's delete(keys=[14, 11]).
    RacingDeleteKeys, keys=st.tuples(st.builds(OldKey, st.integers(0, 999)),
                                     st.lists(st.integers(-50, 50), min_size=1, max_size=5)).map(
        lambda drawn: [drawn[0], *drawn[1]]),
    inserts=st.sampled_from(["absent", "absent", "present", "other"]),
    via=st.sampled_from(["upsert", "append"]),
    rows=st.lists(st.tuples(st.integers(-50, 50), GROUPS, st.integers(0, 999)), min_size=1,
                  max_size=3))


wheres = st.builds(
    Where, kind=st.sampled_from(["keys", "keys", "keys", "group", "value", "value", "either", "all"]),
    low=st.integers(-55, 50), span=st.integers(0, 30), position=st.integers(0, 999), group=GROUPS)


delete_wheres = st.builds(DeleteWhere, where=wheres, fault=fault_plans, wait_ms=waits,
                          app=app_specs)


updates = st.builds(Update, where=wheres, sets=st.sampled_from(["v", "g", "both"]), g=GROUPS,
                    v=st.integers(0, 999), fault=fault_plans, wait_ms=waits, app=app_specs)


lookups = st.builds(Lookup, keys=st.lists(key_specs, min_size=1, max_size=12))


bad_ids = st.sampled_from([None] * 9 + ["compacted", "marked", "unknown", "streaming"])


compactions = st.builds(
    Compact, kind=st.sampled_from(["minor", "minor", "major", "custom", "custom"]),
    picks=st.lists(st.integers(0, 999), min_size=1, max_size=4), bad=bad_ids, fault=fault_plans,
    wait_ms=waits)


segment_deletes = st.builds(
    DeleteSegments, picks=st.lists(st.integers(0, 999), min_size=1, max_size=2), bad=bad_ids,
    fault=fault_plans, wait_ms=waits)


#: A batch of a few rows (so that segments roll over every few batches), now and then none.
_some_rows = st.lists(st.tuples(st.integers(-50, 50), GROUPS, st.integers(0, 999)), min_size=1,
                      max_size=6)


batch_rows = st.sampled_from([_some_rows, _some_rows, _some_rows, st.just([])]).flatmap(
    lambda chosen: chosen)


stream_writes = st.builds(
    StreamWrite, name=st.sampled_from(STREAM_NAMES),
    batch=st.sampled_from(["next", "next", "next", "next", "gap", "replay"]), by=st.integers(1, 3),
    rows=batch_rows, fault=fault_plans, wait_ms=waits,
    clash=st.sampled_from([None] * 8 + ["table", "batch"]),
    stop=st.sampled_from([False] * 7 + [True]))


drop_streams = st.builds(DropStream, name=st.sampled_from(STREAM_NAMES), fault=fault_plans,
                         wait_ms=waits)


close_streamings = st.builds(Compact, kind=st.just("close_streaming"), picks=st.just([0]),
                             bad=st.none(), fault=fault_plans, wait_ms=waits)


#: A clean waits past every heartbeat more often than a write: a writer that failed without
#: rolling back (or died) holds back what the retained clean may remove while it counts as alive,
#: and the clean rolls back those that expired.
cleans = st.builds(Clean, mode=st.sampled_from(["retained", "retained", "force", "dry_run"]),
                   fault=fault_plans, wait_ms=st.sampled_from([5, 5, 250, EXPIRE_MS, EXPIRE_MS]))


maintenance = st.builds(Maintain, step=st.sampled_from(["run", "run", "begin", "finish"]),
                        fault=fault_plans, wait_ms=waits)


#: A transaction's operations: small payloads (so 2-4 of them cost about a write), no fault of
#: their own (the transaction's is armed around the whole block).
_tx_rows = st.lists(st.tuples(st.integers(-50, 50), GROUPS, st.integers(0, 999)), min_size=1,
                    max_size=6)


_tx_appends = st.builds(Write, operation=st.just("append"), rows=_tx_rows, fault=st.none(),
                        wait_ms=st.just(0),
                        clash=st.sampled_from([None, None, None, "table", "batch"]))


_tx_overwrites = st.builds(Write, operation=st.just("overwrite"), rows=_tx_rows, fault=st.none(),
                           wait_ms=st.just(0))


_tx_upserts = st.builds(Upsert, rows=st.lists(st.tuples(key_specs, GROUPS, st.integers(0, 999)),
                                              min_size=1, max_size=6),
                        fault=st.none(), wait_ms=st.just(0))


_tx_delete_keys = st.builds(DeleteKeys, keys=st.lists(key_specs, min_size=1, max_size=6),
                            fault=st.none(), wait_ms=st.just(0))


_tx_delete_wheres = st.builds(DeleteWhere, where=wheres, fault=st.none(), wait_ms=st.just(0))


_tx_updates = st.builds(Update, where=wheres, sets=st.sampled_from(["v", "g", "both"]), g=GROUPS,
                        v=st.integers(0, 999), fault=st.none(), wait_ms=st.just(0))


def _transactions(*body: st.SearchStrategy[TxOperation]) -> st.SearchStrategy[Transaction]:
    """2-4 operations drawn from ``body`` (each as often as listed; an ``overwrite`` among them
    comes after another operation, so it must raise), a whole-table overwrite first a quarter of
    the time; the error of an operation that must raise leaves the block half of the time."""
    operations = st.tuples(
        st.sampled_from([False, False, False, True]), _tx_overwrites,
        st.lists(st.sampled_from(body).flatmap(lambda chosen: chosen), min_size=2, max_size=4),
    ).map(lambda drawn: [drawn[1], *drawn[2][1:]] if drawn[0] else drawn[2])
    return st.builds(Transaction, operations=operations,
                     escape=st.booleans(), fault=fault_plans,
                     wait_ms=waits, app=app_specs)


keyed_transactions = _transactions(
    _tx_appends, _tx_appends, _tx_upserts, _tx_upserts, _tx_delete_keys, _tx_delete_keys,
    _tx_delete_wheres, _tx_updates, _tx_updates, _tx_overwrites)


unkeyed_transactions = _transactions(
    _tx_appends, _tx_appends, _tx_appends, _tx_delete_wheres, _tx_delete_wheres, _tx_updates,
    _tx_updates, _tx_overwrites, _tx_upserts)


alters = st.builds(
    Alter, kind=st.sampled_from(["add", "add", "drop", "rename", "rename", "widen", "set", "unset"]),
    position=st.integers(0, 999), type=st.integers(0, 2), fault=fault_plans, wait_ms=waits)


#: What a merge write's data carries beyond the model's schema: mostly a new column.
_merge_changes = st.sampled_from([(True, False), (True, False), (False, True), (True, True),
                                  (False, False)])


def _merge_writes(*payloads: st.SearchStrategy[Write | Upsert]) -> st.SearchStrategy[MergeWrite]:
    return st.builds(lambda write, changes, **kw: MergeWrite(write, *changes, **kw),
                     st.sampled_from(payloads).flatmap(lambda chosen: chosen), _merge_changes,
                     position=st.integers(0, 999), type=st.integers(0, 2), fault=fault_plans,
                     wait_ms=waits)


#: An append's rows as a single append draws them (keyed: made new, now and then a clash).
_merge_appends = st.builds(Write, operation=st.just("append"), rows=rows_strategy, fault=st.none(),
                           wait_ms=st.just(0), clash=st.sampled_from([None] * 6 + ["table", "batch"]))


_merge_upserts = st.builds(Upsert, rows=st.lists(st.tuples(key_specs, GROUPS, st.integers(0, 999)),
                                                 max_size=20), fault=st.none(), wait_ms=st.just(0))


keyed_merge_writes = _merge_writes(_merge_appends, _merge_upserts)


unkeyed_merge_writes = _merge_writes(_merge_appends)


def weighted(*choices: st.SearchStrategy[Action]) -> st.SearchStrategy[Action]:
    """One of ``choices``, each as often as it is listed (``st.one_of`` would count a strategy
    listed twice once), shrinking towards the first."""
    return st.sampled_from(choices).flatmap(lambda chosen: chosen)


reads: list[st.SearchStrategy[Action]] = [
    st.builds(ReadLatest, k_at_least=st.one_of(st.none(), st.integers(-50, 50)),
              g_equals=st.sampled_from([None, "a", "x/y"])),
    st.builds(ReadPast, position=st.integers(0, 999),
              form=st.sampled_from(["instant", "completed_at", "datetime"])),
]


#: Writes first (what an action shrinks to; ADD SEGMENT and stream batches among them), about half
#: of the time; table services (compaction, hand-off, CLEAN FILES, DELETE SEGMENT) a quarter.
#: Stream actions on a table without ``streaming=true`` (a third of the runs) are refused.
keyed_actions: st.SearchStrategy[Action] = weighted(
    writes, writes, add_segments, add_segments, stream_writes, stream_writes, stream_writes,
    drop_streams, upserts, upserts, delete_keys, racing_delete_keys, delete_wheres, updates,
    updates, merges_into, keyed_transactions, keyed_transactions, alters, alters, keyed_merge_writes,
    compactions, compactions, close_streamings, cleans, segment_deletes, maintenance, maintenance, lookups,
    *reads,
    st.builds(ReadWithFault, nth=st.integers(1, 30), when=st.sampled_from(["before", "after"]),
              past=st.booleans(), lookup=st.booleans()),
)


unkeyed_actions: st.SearchStrategy[Action] = weighted(
    writes, writes, writes, add_segments, add_segments, stream_writes, stream_writes,
    stream_writes, drop_streams, delete_wheres, updates, merges_into, unkeyed_transactions, alters,
    alters,
    unkeyed_merge_writes, compactions,
    compactions,
    close_streamings, cleans, segment_deletes, maintenance, maintenance, *reads,
    st.builds(ReadWithFault, nth=st.integers(1, 30), when=st.sampled_from(["before", "after"]),
              past=st.booleans()),
)
