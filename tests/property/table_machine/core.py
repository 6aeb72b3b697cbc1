"""The machine's core: the state every capability shares, the table and the processes that open it.

Each run first creates the table (``create``) with one of two retentions, and (keyed) one of
several record-index shard counts, a delete-delta compaction threshold of 1 or 2 and the
compaction and clean properties of ``config``. ``retain_commits`` 1000, so every past snapshot must
resolve until a clean says otherwise (and, with retention fencing archival, the data timeline is
never archived), or 3, so the data timeline is archived and metadata cleaned as the run goes:
the snapshots of the last 3 commits must then resolve, older ones may instead raise
SnapshotExpiredError, and none may ever return wrong rows. A streaming table's streaming
properties are drawn there too, and ``changes.retain_commits`` (unset, or 3: CLEAN FILES then
keeps at least 4 commits, which time travel and the change feed must still reach).

``MachineCore`` holds the state of a run (the model: acknowledged commits, segments, streams,
apps, failed writes and instants; the processes: the writer, a long-lived reader, a reader whose
reads fail, the cleaner and the maintainer), creates the table (``create``, the one
``@initialize`` rule) and opens ``Table`` objects on the fake clock. Every capability mixin of
this package subclasses it, so what it defines is what a mixin may rely on;
``tests/property/test_table_state_machine.py`` combines the mixins into the machine.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable

import fsspec
import pyarrow.parquet as pq
from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize

import txn
from metatxn.indexes import METADATA_FOLDER, field_id
from metatxn.timeline import (
    Instant,
    PrefixedStorage,
    Storage,
    Timeline,
    open_storage,
)
from tests.conftest import FakeClock
from tests.property.table_machine.actions import Counted, KeySpec
from tests.property.table_machine.config import (
    CHANGES_RETENTIONS,
    CLEAN_RETENTIONS,
    DATA_ACTIONS,
    DELTA_THRESHOLDS,
    LEVEL_THRESHOLDS,
    MAINTENANCE_MODES,
    OPTIONS,
    RETENTIONS,
    SCHEMA,
    SHARDS,
    STREAM_MAX_SIZES,
    TRASH_HOURS,
    properties,
)
from tests.property.table_machine.injection import TableStorage
from tests.property.table_machine.internals import TABLE_CONFIG_PATH, WritePlan, decode_config
from tests.property.table_machine.model import (
    BASE,
    EXTERNAL_ROOT,
    Acked,
    Folder,
    G,
    K,
    Row,
    SegmentModel,
    StreamModel,
    V,
    _external_runs,
    memory_path,
)


class MachineCore(RuleBasedStateMachine):
    """The state of a run, the table it creates and the processes (``Table`` objects) it opens;
    the capability mixins subclass it, and ``TableMachine`` combines them."""

    keyed: bool = True

    @staticmethod
    def make_location() -> tuple[str, Callable[[], None]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.uri, self._cleanup = self.make_location()
        self.clock = FakeClock()
        self._ids = itertools.count()
        self.inner = open_storage(self.uri)
        self.observer_timeline = Timeline(self.inner, clock=self.clock, owner="observer",
                                          options=OPTIONS)
        self.metadata_timeline = Timeline(PrefixedStorage(self.inner, METADATA_FOLDER),
                                          clock=self.clock, owner="observer", options=OPTIONS)
        # Set by create(), which runs first.
        self.retain_commits = RETENTIONS[0]
        self.shards: int | None = None
        self.delta_threshold = DELTA_THRESHOLDS[0]
        self.level_threshold = LEVEL_THRESHOLDS[0]
        self.clean_retain = CLEAN_RETENTIONS[0]
        #: Whether clean.retain_commits is set (at create it is; ``schema``'s unset removes it).
        self.retain_set = True
        #: changes.retain_commits (None: unset): CLEAN FILES keeps at least one commit more.
        self.changes_retain: int | None = None
        #: Acknowledged commits before this index may have been cleaned past (time travel to
        #: them may raise SnapshotExpiredError): what the cleans so far may have published.
        self.clean_floor = 0
        self.cleaner_dead = False
        self.maintainer_dead = False
        #: A metadata compaction the maintainer began and stopped in (``Maintain("begin")``).
        self.paused: tuple[Instant, list[tuple[str, str]]] | None = None
        self.dead = False
        self.serials = itertools.count(1)
        self.acked: list[Acked] = []
        #: The committed segments by id, as of the last acknowledged commit.
        self.segment_model: dict[str, SegmentModel] = {}
        self.failed_serials: set[int] = set()
        self.failed_instants: set[str] = set()
        #: Per operation, the most calls (of each count) a clean write was seen to make.
        self.call_bounds: dict[str, dict[Counted, int]] = {}
        #: Every key a write or delete named (keyed): those not live must not be found.
        self.seen_keys: set[int] = set()
        #: Rows of data files, by table-relative path (data files never change).
        self._file_rows: dict[str, list[Row]] = {}
        #: Files on storage announced by the markers of live writers, at the last step -> writer.
        self.announced: dict[str, str] = {}
        #: ADD SEGMENT: this run's folder of external folders, the folders in the order written,
        #: and every file written into them (memory-filesystem key -> its bytes; data files ->
        #: their rows, in file order, ``g`` from the partition folder).
        self.external_root = f"{EXTERNAL_ROOT}/{os.getpid()}-{next(_external_runs)}"
        self.folders: list[Folder] = []
        self.external_files: dict[str, bytes] = {}
        self.external_rows: dict[str, list[Row]] = {}
        #: Streaming tables (set by create()): the streams' records, the ``Stream`` objects the
        #: writer holds open (SHOW STREAMS's ``Running``), the apps' records (app_id -> last
        #: version, rows) and every acknowledged batch (stream, batch id, serial, rows).
        self.streaming = False
        self.stream_max: int | None = None
        self.auto_handoff = True
        self.stream_model: dict[str, StreamModel] = {}
        self.open_streams: dict[str, txn.Stream] = {}
        #: A ``Stream`` of each name as another process holds it (out of DROP STREAM's reach),
        #: with the generation it was opened in (see ``_check_producer_elsewhere``).
        self.elsewhere: dict[str, tuple[txn.Stream, int]] = {}
        self.app_model: dict[str, tuple[int, int]] = {}
        self.batches: list[tuple[str, int, int, tuple[Row, ...]]] = []
        self.steps = 0
        #: The table's schema as of the last acknowledged commit (``schema`` changes it).
        self.shape = BASE
        #: Acknowledged commits whose change-feed window was checked (``changes``).
        self.changes_checked = 0

    @initialize(retain_commits=st.sampled_from(RETENTIONS), shards=st.sampled_from(SHARDS),
                delta_threshold=st.sampled_from(DELTA_THRESHOLDS),
                level_threshold=st.sampled_from(LEVEL_THRESHOLDS),
                clean_retain=st.sampled_from(CLEAN_RETENTIONS),
                trash_hours=st.sampled_from(TRASH_HOURS),
                maintenance=st.sampled_from(MAINTENANCE_MODES),
                streaming=st.sampled_from([True, True, False]),
                stream_max=st.sampled_from(STREAM_MAX_SIZES), auto_handoff=st.booleans(),
                changes_retain=st.sampled_from(CHANGES_RETENTIONS))
    def create(self, retain_commits: int, shards: int, delta_threshold: int,
               level_threshold: tuple[int, int], clean_retain: int, trash_hours: int,
               maintenance: str, streaming: bool, stream_max: int | None,
               auto_handoff: bool, changes_retain: int | None) -> None:
        self.changes_retain = changes_retain
        self.streaming = streaming
        self.stream_max = stream_max
        self.auto_handoff = auto_handoff
        self.retain_commits = retain_commits
        self.shards = shards if self.keyed else None
        self.delta_threshold = delta_threshold
        self.level_threshold = level_threshold
        self.clean_retain = clean_retain
        txn.create_table(self.uri, SCHEMA, partition_by=["g"], sort_by=["k"],
                         record_key="k" if self.keyed else None,
                         properties=properties(retain_commits, shards=self.shards,
                                               delta_threshold=delta_threshold,
                                               level_threshold=level_threshold,
                                               clean_retain=clean_retain, trash_hours=trash_hours,
                                               maintenance=maintenance, streaming=streaming,
                                               stream_max=stream_max, auto_handoff=auto_handoff,
                                               changes_retain=changes_retain),
                         clock=self.clock, ids=self._new_id)
        self.config = decode_config(self.inner.read(TABLE_CONFIG_PATH))
        self.reader = self._open(self.inner)  # long-lived: exercises the incremental cache
        # Another long-lived reader (process), whose reads can fail.
        self.faulty_reader_store = TableStorage(self.inner)
        self.faulty_reader = self._open(self.faulty_reader_store)
        self.store, self.writer = self._new_writer()
        # CLEAN FILES runs in a process of its own, so it sees the writer's instants pending
        # (alive until their heartbeat expires) when the writer has died.
        self.cleaner_store, self.cleaner = self._new_writer()
        self.maintainer_store, self.maintainer = self._new_writer()
        self.maintenance = maintenance

    def teardown(self) -> None:
        low = (self.steps - 1) // 10 * 10
        layout = f"{self.shards} shard(s)" if self.keyed else "unkeyed"
        event(f"run of {low}-{low + 9} steps, {len(self.acked)} commits, "
              f"{next(self.serials) - 1} writes, retain_commits={self.retain_commits}")
        event(f"table: {layout}, deletes.compaction.threshold={self.delta_threshold}")
        statuses = sorted({s.status for s in self.segment_model.values()})
        event(f"segments at the end: {', '.join(statuses) or 'none'}")
        external = sorted({s.status for s in self.segment_model.values() if s.external})
        if external:
            event(f"external segments at the end: {', '.join(external)}")
        if self.streaming:
            event(f"streaming table: max_size={self.stream_max}, auto_handoff={self.auto_handoff}, "
                  f"{len(self.batches)} batches acknowledged")
        if self.app_model:
            event("idempotent writes committed")
        self._close_streams()
        self._cleanup()
        root = memory_path(self.external_root)
        filesystem = fsspec.filesystem("memory")
        if filesystem.exists(root):
            filesystem.rm(root, recursive=True)

    def _new_id(self) -> str:
        return f"f{next(self._ids):06d}"

    def _open(self, storage: Storage) -> txn.Table:
        table = txn.Table(self.uri, storage, self.config, clock=self.clock, ids=self._new_id)
        # The Table API takes no sleep function: without this, waiting for a lease (one this
        # writer lost track of when a fault hit its lock put after it landed) would poll the
        # fake clock with real sleeps forever. Waits now move the fake clock instead.
        table._context.timeline._lock._sleep = self.clock.sleep
        return table

    def _new_writer(self) -> tuple[TableStorage, txn.Table]:
        store = TableStorage(self.inner)
        return store, self._open(store)

    def _row_at(self, path: str, position: int) -> Row | None:
        """Row ``position`` of data file ``path`` (table-relative), read with pyarrow; of an
        external file (a URL), as the machine wrote it (``external_files_are_untouched`` checks
        that it still holds those bytes)."""
        if "://" in path:
            rows = self.external_rows.get(memory_path(path)) if path.startswith("memory:") else None
            assert rows is not None, f"{path} is no file the machine wrote"
            return rows[position] if 0 <= position < len(rows) else None
        rows = self._file_rows.get(path)
        if rows is None:
            filesystem, root = self.inner.arrow_filesystem()  # type: ignore[attr-defined]
            try:
                with filesystem.open_input_file(f"{root.rstrip('/')}/{path}") as handle:
                    table = pq.ParquetFile(handle).read()
            except FileNotFoundError:
                return None
            # By column id: a file keeps the names of the schema it was written with.
            by_id = {field_id(f): table.column(i).to_pylist() for i, f in enumerate(table.schema)}
            rows = self._file_rows[path] = list(zip(by_id[K], by_id[G], by_id[V], strict=True))
        return rows[position] if 0 <= position < len(rows) else None

    def _files(self, table: txn.Table) -> list[txn.DataFile]:
        """The latest snapshot's files."""
        return table.snapshot().files()

    @property
    def expected(self) -> tuple[Row, ...]:
        return self.acked[-1].rows if self.acked else ()

    def _live(self) -> dict[int, Row]:
        """Keyed: the model's rows by key."""
        live = {row[0]: row for row in self.expected}
        assert len(live) == len(self.expected), "the model of a keyed table repeats a key"
        return live

    def _key(self, spec: KeySpec) -> int:
        if isinstance(spec, int):
            return spec
        keys = sorted(self._live())
        return keys[spec.position * len(keys) // 1000] if keys else spec.position % 101 - 50

    def _pending_data_instants(self) -> set[str]:
        return {i.time for i in self.observer_timeline.load().pending() if i.action in DATA_ACTIONS}

    def _pending_plans(self, *, alive_only: bool) -> dict[str, WritePlan]:
        """The plans of the pending data instants (only those whose writer is alive, if asked)."""
        view = self.observer_timeline.load()
        dead = {i.time for i in self.observer_timeline.expired(view)} if alive_only else set()
        return {i.time: self.observer_timeline.read_plan(i, WritePlan) for i in view.pending()
                if i.action in DATA_ACTIONS and i.time not in dead}
