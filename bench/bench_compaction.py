"""Compaction benchmark: reads before and after compaction, compaction throughput, and cleaning the
compacted files; metatxn against deltalake, in one run.

What is measured, on the TPC-H-orders-like data of ``bench_mutations`` (int64 key ``o_orderkey``,
int64 customer key, string status, ``decimal(15, 2)`` price, date ``o_orderdate``, string
comment), identical for both systems:

1. **Reads before and after compaction.** A table built by ``--loads`` small appends (default 200
   of 5,000 rows; keys in random order, so every load spans the whole date range). metatxn's table
   is ``sort_by=["o_orderdate"]``; Delta has no sort order, so it keeps its defaults. Each table
   state is read ``--repeats`` times (default 5) after one untimed warm-up read, opening the table
   inside the timing as a reader does: a full read, and a 1 % selective read (a window of 1 % of
   the date range, pushed down as a filter). States: after the loads; after metatxn's
   ``compact("major")`` (everything under ``compaction.major.size_mb``, default 1024) and Delta's
   ``optimize.compact()``; after metatxn's ``compact("minor")`` called until it returns None
   (``compaction.level_threshold`` "4,3": loads 4 at a time into ``x.1``, those 3 at a time into
   ``x.2``); and a reference table of the same rows loaded by one append. Median and p90.
2. **Compaction throughput.** MB/s rewritten: the bytes of the live data files a compaction
   replaced (listed before and after, so both systems are counted the same way), divided by its
   wall time. metatxn ``compact("major")`` against Delta ``optimize.compact()`` on fresh copies of
   the same loads table, ``--compact-repeats`` copies each (default 3); median. Minor compaction's
   total time, commits and bytes rewritten across its levels are reported for information.
3. **Clean after compaction.** A table whose compaction leaves ``--clean-files`` data files
   (default 10,000) to remove. Appending 10,000 tiny loads would take minutes, so the table is
   partitioned by an extra int32 column ``o_part`` with ``--clean-partitions`` values (default
   100) and built by ``clean-files / clean-partitions`` appends that each write one small file per
   partition (20 rows). One compaction (metatxn major, Delta ``optimize.compact()``) replaces all
   of them with one file per partition. Then, on ``--clean-repeats`` fresh copies (default 3),
   metatxn ``t.clean(force=True)`` and Delta ``vacuum(retention_hours=0,
   enforce_retention_duration=False, dry_run=False)`` are timed. ``t.clean`` is reported as not
   available while it raises NotImplementedError.

Every result is checked, untimed: every read returns all rows (or exactly the rows of the date
window), and every compaction and clean leaves the table's row count unchanged. A wrong result is
printed as WRONG RESULTS at the top of the report and makes the exit status 1; otherwise it is 0
whatever the figures: the targets (metatxn's reads after compaction within 1.2x of its one-go
table, its major compaction at least as many MB/s as Delta's optimize, its clean of 10,000 files
under 5 s) are informational.

Run from the repository root::

    .venv/bin/python -m bench.bench_compaction            # the full spec (a few minutes)
    .venv/bin/python -m bench.bench_compaction --quick    # smoke run (under a minute)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

if __package__ in (None, ""):  # run as a file (python bench/bench_compaction.py): make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc

from bench._report import (
    Machine,
    _markdown_table,
    finish_run,
    load_average,
    machine_facts,
    machine_section,
    median_and_p90,
    run_folder,
)
from bench._systems import SystemUnavailableError, _require
from bench.bench_mutations import ORDERS, at_least_option, loads, names_option, orders_for

SUBJECT = "metatxn"
PEER = "deltalake"
DATE = "o_orderdate"
PART = "o_part"
CLEAN_SCHEMA = ORDERS.append(pa.field(PART, pa.int32()))
ROWS_PER_CLEAN_FILE = 20
READ_TARGET = 1.2  # metatxn read after compaction / metatxn read of the one-go table, at most
THROUGHPUT_TARGET = 1.0  # metatxn major MB/s / deltalake optimize MB/s, at least
CLEAN_TARGET_S = 5.0  # metatxn clean of 10,000 files, under
CLEAN_TARGET_FILES = 10_000
SELECTIVITY = 0.01
T = TypeVar("T")

#: Table states whose reads are measured, in report order, with how each system got there.
STATES = ("loads", "compacted", "minor", "one_go")


@dataclass(frozen=True)
class Preset:
    """Default sizes of a run; explicit command-line flags override each field."""

    loads: int
    load_rows: int
    repeats: int
    compact_repeats: int
    clean_files: int
    clean_partitions: int
    clean_repeats: int


FULL = Preset(loads=200, load_rows=5_000, repeats=5, compact_repeats=3, clean_files=10_000,
              clean_partitions=100, clean_repeats=3)
QUICK = Preset(loads=40, load_rows=5_000, repeats=3, compact_repeats=2, clean_files=2_000,
               clean_partitions=100, clean_repeats=1)
PHASES = ("compact", "clean")


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the pasteable report."""
    print(message, file=sys.stderr, flush=True)


# -- data ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Window:
    """The selective read: ``o_orderdate`` in ``[low, high)``, and how many rows match."""

    low: int  # days since the epoch
    high: int
    rows: int
    total: int

    def expression(self) -> pc.Expression:
        return ((pc.field(DATE) >= pa.scalar(self.low, pa.int32()).cast(pa.date32()))
                & (pc.field(DATE) < pa.scalar(self.high, pa.int32()).cast(pa.date32())))

    def describe(self) -> str:
        low = pa.scalar(self.low, pa.int32()).cast(pa.date32()).as_py()
        high = pa.scalar(self.high, pa.int32()).cast(pa.date32()).as_py()
        return f"{DATE} in [{low}, {high}): {self.rows:,} of {self.total:,} rows"


def date_window(batches: list[pa.Table]) -> Window:
    """A window of 1 % of the date range, in its middle, and the rows of ``batches`` inside it."""
    days = [b.column(DATE).cast(pa.int32()) for b in batches]
    low = min(pc.min(d).as_py() for d in days)
    high = max(pc.max(d).as_py() for d in days) + 1
    width = max(1, round((high - low) * SELECTIVITY))
    start = low + (high - low - width) // 2
    window = Window(start, start + width, 0, sum(b.num_rows for b in batches))
    matching = sum(b.filter(window.expression()).num_rows for b in batches)
    return replace(window, rows=matching)


def clean_loads(files: int, partitions: int) -> Iterator[pa.Table]:
    """``files / partitions`` appends, each of ``ROWS_PER_CLEAN_FILE`` rows per ``o_part`` value."""
    rows = partitions * ROWS_PER_CLEAN_FILE
    for index in range(max(1, files // partitions)):
        keys = pa.array(range(index * rows, (index + 1) * rows), pa.int64())
        batch = orders_for(keys, 7_000 + index * 10)
        yield batch.append_column(PART, pc.divide(pc.subtract(keys, index * rows),
                                                  ROWS_PER_CLEAN_FILE).cast(pa.int32()))


# -- systems ---------------------------------------------------------------------------------

class NotAvailableError(Exception):
    """The system lacks the operation (metatxn while it is being written): reported, not an error."""


@dataclass
class Layout:
    """Live data files (path -> bytes) of a table, and its live segments (metatxn only)."""

    files: dict[str, int]
    segments: int | None = None


@dataclass
class Cleaned:
    files: int
    bytes: int


class Compaction:
    """One table format: build tables, copy them, compact, clean, read. Everything it writes
    stays inside ``root``; tables are named folders there."""

    name: ClassVar[str]
    calls: ClassVar[dict[str, str]]  # what is timed, for the report
    note: ClassVar[str] = ""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def uri(self, name: str) -> str:
        return str(self.root / name)

    def copy(self, base: str, name: str) -> None:
        shutil.copytree(self.root / base, self.root / name)

    def drop(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def build(self, name: str, batches: Iterator[pa.Table], *, partitioned: bool = False) -> None:
        raise NotImplementedError

    def read(self, name: str, where: pc.Expression | None = None) -> pa.Table:
        """Open the table and read it (all columns), filtered by ``where`` if given."""
        raise NotImplementedError

    def layout(self, name: str) -> Layout:
        raise NotImplementedError

    def open(self, name: str) -> Any:
        raise NotImplementedError

    def compact(self, handle: Any) -> str:
        """The system's compaction of everything (timed); returns what it did, in its words."""
        raise NotImplementedError

    def check_clean(self) -> None:
        """Raise NotAvailableError if the system cannot clean."""

    def prepare_clean(self, name: str) -> Any:
        """Whatever :meth:`cleaned` needs, gathered before the clean (untimed)."""
        return None

    def clean(self, handle: Any) -> Any:
        """The timed call."""
        raise NotImplementedError

    def cleaned(self, outcome: Any, prepared: Any) -> Cleaned:
        """How many files (and bytes) the clean removed (untimed)."""
        raise NotImplementedError


class MetatxnCompaction(Compaction):
    name = SUBJECT
    calls: ClassVar[dict[str, str]] = {
        "read": "txn.open_table(uri).to_arrow() / .to_arrow(filter=window)",
        "compacted": "t.compact('major')",
        "minor": "t.compact('minor'), called until it returns None",
        "clean": "t.clean(force=True)",
        "build": "txn.create_table(uri, schema, sort_by=['o_orderdate']); t.append(batch) per load",
    }
    note = "sort_by=['o_orderdate'], default properties (compaction.level_threshold 4,3, major.size_mb 1024)"

    def __init__(self, root: Path) -> None:
        self.txn: Any = _require("txn", hint="pip install -e . from the repository root")
        for method in ("append", "compact"):
            if not callable(getattr(self.txn.Table, method, None)):
                raise SystemUnavailableError(f"txn.Table has no {method}() yet")
        super().__init__(root)

    def build(self, name: str, batches: Iterator[pa.Table], *, partitioned: bool = False) -> None:
        first = next(batches)
        table = self.txn.create_table(self.uri(name), first.schema, sort_by=[DATE],
                                      partition_by=[PART] if partitioned else None)
        table.append(first)
        for batch in batches:
            table.append(batch)

    def open(self, name: str) -> Any:
        return self.txn.open_table(self.uri(name))

    def read(self, name: str, where: pc.Expression | None = None) -> pa.Table:
        return self.txn.open_table(self.uri(name)).to_arrow(filter=where)

    def layout(self, name: str) -> Layout:
        table = self.open(name)
        files = {f.path: f.size for f in table.snapshot().files()}
        return Layout(files, sum(1 for s in table.segments() if s.status == "Success"))

    def compact(self, handle: Any) -> str:
        commit = handle.compact("major")
        if commit is None:
            return "no commit"
        return f"segment {commit.segment}: files_added={commit.files_added}, rows_added={commit.rows_added}"

    def minor(self, handle: Any) -> int:
        """compact('minor') until it returns None; how many calls that took."""
        calls = 1
        while handle.compact("minor") is not None:
            calls += 1
        return calls

    def merged_segments(self, name: str) -> tuple[int, int]:
        """Segments made by compactions (one per compaction commit), and bytes of the segments
        they merged (each merged once, so this is every byte the compactions read)."""
        segments = self.open(name).segments()
        made = sum(1 for s in segments if "." in s.id)
        read = sum(s.data_size for s in segments if s.status == "Compacted")
        return made, read

    def check_clean(self) -> None:
        if not callable(getattr(self.txn.Table, "clean", None)):
            raise NotAvailableError("txn.Table has no clean() yet")
        probe = self.root / "clean_probe"
        try:
            table = self.txn.create_table(str(probe), ORDERS)
            table.clean(dry_run=True)
        except NotImplementedError as exc:
            raise NotAvailableError(f"t.clean raises NotImplementedError({exc})") from None
        except Exception as exc:  # anything else is the real call's to report
            log(f"{SUBJECT}: clean probe raised {type(exc).__name__}: {exc} (measuring anyway)")
        finally:
            self.drop("clean_probe")

    def clean(self, handle: Any) -> Any:
        return handle.clean(force=True)

    def cleaned(self, outcome: Any, prepared: Any) -> Cleaned:
        return Cleaned(len(outcome.files), int(outcome.bytes))


class DeltalakeCompaction(Compaction):
    name = PEER
    calls: ClassVar[dict[str, str]] = {
        "read": "DeltaTable(uri).to_pyarrow_table() / .to_pyarrow_table(filters=window)",
        "compacted": "DeltaTable(uri).optimize.compact()",
        "clean": "DeltaTable(uri).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)",
        "build": "DeltaTable.create(uri, schema); write_deltalake(dt, batch, mode='append') per load",
    }
    note = "default table config; no sort order (plain optimize.compact(), no z-order)"

    def __init__(self, root: Path) -> None:
        self._deltalake: Any = _require("deltalake")
        super().__init__(root)

    def build(self, name: str, batches: Iterator[pa.Table], *, partitioned: bool = False) -> None:
        first = next(batches)
        table = self._deltalake.DeltaTable.create(self.uri(name), first.schema,
                                                  partition_by=[PART] if partitioned else None)
        self._deltalake.write_deltalake(table, first, mode="append")
        for batch in batches:
            self._deltalake.write_deltalake(table, batch, mode="append")

    def open(self, name: str) -> Any:
        return self._deltalake.DeltaTable(self.uri(name))

    def read(self, name: str, where: pc.Expression | None = None) -> pa.Table:
        return self._deltalake.DeltaTable(self.uri(name)).to_pyarrow_table(filters=where)

    def layout(self, name: str) -> Layout:
        uris = self.open(name).file_uris()
        return Layout({u: os.path.getsize(u.removeprefix("file://")) for u in uris})

    def compact(self, handle: Any) -> str:
        metrics = handle.optimize.compact()
        return ", ".join(f"{k}={metrics[k]}" for k in ("numFilesRemoved", "numFilesAdded") if k in metrics)

    def prepare_clean(self, name: str) -> dict[str, int]:
        """Bytes of every Parquet file by name: vacuum returns only the paths it deleted."""
        return {entry.name: entry.stat().st_size for entry in _walk(self.root / name)}

    def clean(self, handle: Any) -> Any:
        return handle.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)

    def cleaned(self, outcome: Any, prepared: Any) -> Cleaned:
        return Cleaned(len(outcome), sum(prepared.get(Path(p).name, 0) for p in outcome))


def _walk(folder: Path) -> Iterator[os.DirEntry[str]]:
    for entry in os.scandir(folder):
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path))
        elif entry.name.endswith(".parquet"):
            yield entry


SYSTEMS: dict[str, type[Compaction]] = {cls.name: cls for cls in (MetatxnCompaction, DeltalakeCompaction)}


# -- results ---------------------------------------------------------------------------------

@dataclass
class Timing:
    samples: list[float] = field(default_factory=list)
    median: float | None = None
    p90: float | None = None

    def finish(self) -> None:
        if self.samples:
            self.median, self.p90 = median_and_p90(self.samples)


@dataclass
class Reads:
    """Reads of one table state: full and 1 % selective, milliseconds."""

    table: str
    files: int
    segments: int | None
    full_ms: Timing = field(default_factory=Timing)
    selective_ms: Timing = field(default_factory=Timing)


@dataclass
class CompactRun:
    """A compaction timed on fresh copies of the loads table (seconds), and what it rewrote."""

    call: str
    seconds: Timing = field(default_factory=Timing)
    input_files: int = 0
    input_bytes: int = 0
    output_files: int = 0
    effect: str = ""
    calls: int | None = None  # minor: compact('minor') calls until None
    commits: int | None = None  # minor: compaction commits (segments made)
    rewritten_bytes: int | None = None  # minor: bytes read across all levels
    live_segments: int | None = None

    @property
    def mb_per_s(self) -> float | None:
        data = self.rewritten_bytes if self.rewritten_bytes is not None else self.input_bytes
        return None if not self.seconds.median else data / 1e6 / self.seconds.median


@dataclass
class CleanRun:
    """The clean phase of one system: its build, its compaction, and the timed clean."""

    call: str
    appends: int = 0
    build_s: float | None = None
    compact_s: float | None = None
    compacted_files: int = 0  # live files the compaction replaced: what a clean should remove
    compacted_bytes: int = 0
    output_files: int = 0
    seconds: Timing = field(default_factory=Timing)
    removed_files: int | None = None
    removed_bytes: int | None = None
    skipped: str | None = None


@dataclass
class Build:
    table: str
    rows: int
    appends: int
    seconds: float


@dataclass
class SystemResult:
    note: str = ""
    skipped: str | None = None
    reads: dict[str, Reads] = field(default_factory=dict)
    compactions: dict[str, CompactRun] = field(default_factory=dict)
    clean: CleanRun | None = None
    builds: list[Build] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RunConfig:
    systems: list[str]
    phases: list[str]
    loads: int
    load_rows: int
    repeats: int
    compact_repeats: int
    clean_files: int
    clean_partitions: int
    clean_repeats: int
    workdir: str


@dataclass
class Report:
    machine: Machine
    config: RunConfig
    systems: dict[str, SystemResult]
    window: str = ""


# -- measuring -------------------------------------------------------------------------------

def _fail(result: SystemResult, name: str, what: str) -> str:
    """Record the exception being handled as a failure of ``what``; the run goes on without it."""
    traceback.print_exc()
    exc = sys.exc_info()[1]
    message = f"{what} failed: {type(exc).__name__}: {exc}"
    result.failures.append(message)
    log(f"  {name}: {message}")
    return message


def _wrong(result: SystemResult, name: str, message: str) -> None:
    result.wrong.append(message)
    log(f"  !!! WRONG RESULT: {name}: {message}")


def _timed(action: Callable[..., T], *args: Any) -> tuple[float, T]:
    """Seconds taken by ``action(*args)``, and what it returned."""
    began = time.perf_counter()
    value = action(*args)
    return time.perf_counter() - began, value


def _build(system: Compaction, result: SystemResult, table: str, batches: list[pa.Table] | Iterator[pa.Table],
           rows: int, appends: int, *, partitioned: bool = False) -> float:
    log(f"{system.name}: building {table}: {rows:,} rows in {appends:,} append{'s' if appends != 1 else ''}")
    seconds, _ = _timed(lambda: system.build(table, iter(batches), partitioned=partitioned))
    result.builds.append(Build(table, rows, appends, seconds))
    log(f"  {system.name}: built in {seconds:.1f} s")
    return seconds


def _check_rows(system: Compaction, result: SystemResult, table: str, expected: int, after: str) -> None:
    found = system.read(table).num_rows
    if found != expected:
        _wrong(result, system.name, f"{table}: {found:,} rows after {after}; expected {expected:,}")


def _replaced(before: Layout, after: Layout) -> tuple[int, int]:
    """Files (and their bytes) live before and not after: what a compaction rewrote."""
    gone = [path for path in before.files if path not in after.files]
    return len(gone), sum(before.files[path] for path in gone)


def measure_compaction(systems: dict[str, Compaction], results: dict[str, SystemResult],
                       config: RunConfig) -> Window:
    """Parts 1 and 2: build the loads and one-go tables, compact copies, read every state."""
    batches = list(loads(config.loads * config.load_rows, config.loads, seed=11))
    window = date_window(batches)
    total = window.total
    log(f"== compaction: {config.loads} loads of {config.load_rows:,} rows; "
        f"selective read {window.describe()}")
    built: dict[str, Compaction] = {}
    for name, system in systems.items():
        try:
            _build(system, results[name], "loads", batches, total, config.loads)
            _build(system, results[name], "one_go", [pa.concat_tables(batches)], total, 1)
            built[name] = system
        except Exception:
            _fail(results[name], name, "the build of the loads and one-go tables")
    del batches

    # Compaction throughput: fresh copies, systems interleaved within each repetition.
    for name, system in built.items():
        results[name].compactions["compacted"] = CompactRun(call=system.calls["compacted"])
    kept: dict[str, str] = {}  # system -> the compacted copy whose reads are measured
    for repetition in range(config.compact_repeats):
        for name, system in built.items():
            run = results[name].compactions["compacted"]
            if run.effect.startswith("failed"):
                continue
            copy = f"compacted_{repetition}"
            try:
                system.copy("loads", copy)
                before = system.layout(copy)
                handle = system.open(copy)
                seconds, effect = _timed(system.compact, handle)
                after = system.layout(copy)
                run.seconds.samples.append(seconds)
                run.input_files, run.input_bytes = _replaced(before, after)
                run.output_files = len(after.files)
                if repetition == 0:
                    run.effect = effect
                log(f"  {name}: compaction #{repetition + 1}: {seconds:.2f} s, "
                    f"{run.input_bytes / 1e6:.1f} MB in {run.input_files} files -> {run.output_files} files"
                    + (f"  [{effect}]" if repetition == 0 else ""))
                _check_rows(system, results[name], copy, total, "compaction")
                if name in kept:
                    system.drop(copy)
                else:
                    kept[name] = copy
            except Exception:
                run.effect = _fail(results[name], name, f"compaction #{repetition + 1}")
    for name in built:
        results[name].compactions["compacted"].seconds.finish()

    minor = built.get(SUBJECT)
    if isinstance(minor, MetatxnCompaction):
        run = results[SUBJECT].compactions["minor"] = CompactRun(call=minor.calls["minor"])
        try:
            minor.copy("loads", "minor")
            before = minor.layout("minor")
            seconds, calls = _timed(minor.minor, minor.open("minor"))
            after = minor.layout("minor")
            run.seconds.samples.append(seconds)
            run.seconds.finish()
            run.calls = calls
            run.commits, run.rewritten_bytes = minor.merged_segments("minor")
            run.input_files, run.input_bytes = _replaced(before, after)
            run.output_files, run.live_segments = len(after.files), after.segments
            run.effect = (f"{run.commits} compaction commits in {calls} calls; "
                          f"{before.segments} -> {after.segments} live segments")
            log(f"  {SUBJECT}: minor compaction: {seconds:.2f} s, {run.effect}")
            _check_rows(minor, results[SUBJECT], "minor", total, "minor compaction")
            kept[f"{SUBJECT}:minor"] = "minor"
        except Exception:
            run.effect = _fail(results[SUBJECT], SUBJECT, "minor compaction")

    # Reads: every state of every system once per repetition, so load changes hit all alike.
    tables: list[tuple[str, str, str]] = []  # (system, state, table folder)
    for name in built:
        states = {"loads": "loads", "one_go": "one_go"}
        if name in kept:
            states["compacted"] = kept[name]
        if f"{name}:minor" in kept:
            states["minor"] = kept[f"{name}:minor"]
        for state in STATES:
            if state in states:
                tables.append((name, state, states[state]))
    where = window.expression()
    for name, state, table in list(tables):
        system, result = built[name], results[name]
        try:
            layout = system.layout(table)
            result.reads[state] = Reads(table, len(layout.files), layout.segments)
            full, part = system.read(table).num_rows, system.read(table, where).num_rows  # warm-up
            if full != total or part != window.rows:
                _wrong(result, name, f"{table}: read {full:,} rows and {part:,} in the window; "
                                     f"expected {total:,} and {window.rows:,}")
        except Exception:
            _fail(result, name, f"the warm-up read of {table}")
            tables.remove((name, state, table))
            result.reads.pop(state, None)
    log(f"== reads: {len(tables)} tables, {config.repeats} full and {config.repeats} selective reads each")
    for _ in range(config.repeats):
        for name, state, table in tables:
            reads = results[name].reads[state]
            seconds, _ = _timed(built[name].read, table)
            reads.full_ms.samples.append(seconds * 1e3)
            seconds, _ = _timed(built[name].read, table, where)
            reads.selective_ms.samples.append(seconds * 1e3)
    for name, state, _ in tables:
        reads = results[name].reads[state]
        reads.full_ms.finish()
        reads.selective_ms.finish()
        log(f"  {name} {state}: {reads.files} files, full {reads.full_ms.median:.1f} ms, "
            f"selective {reads.selective_ms.median:.1f} ms")
    return window


def measure_clean(systems: dict[str, Compaction], results: dict[str, SystemResult],
                  config: RunConfig) -> None:
    """Part 3: a table whose compaction leaves ``clean_files`` files to remove; time the clean."""
    partitions = config.clean_partitions
    appends = max(1, config.clean_files // partitions)
    rows = appends * partitions * ROWS_PER_CLEAN_FILE
    log(f"== clean: {appends} appends x {partitions} partitions = {appends * partitions:,} files")
    for name, system in systems.items():
        run = results[name].clean = CleanRun(call=system.calls["clean"], appends=appends)
        try:
            system.check_clean()
        except NotAvailableError as exc:
            run.skipped = f"not available: {exc}"
            log(f"{name}: clean: {run.skipped}")
        try:
            run.build_s = _build(system, results[name], "clean_base",
                                 clean_loads(config.clean_files, partitions), rows, appends,
                                 partitioned=True)
            before = system.layout("clean_base")
            run.compact_s, effect = _timed(system.compact, system.open("clean_base"))
            after = system.layout("clean_base")
            run.compacted_files, run.compacted_bytes = _replaced(before, after)
            run.output_files = len(after.files)
            log(f"  {name}: compacted {run.compacted_files:,} files into {run.output_files:,} in "
                f"{run.compact_s:.1f} s  [{effect}]")
        except Exception:
            run.skipped = _fail(results[name], name, "the build and compaction of the clean table")
            continue
        if run.skipped:
            system.drop("clean_base")
            continue
        for repetition in range(config.clean_repeats):
            copy = f"clean_{repetition}"
            try:
                system.copy("clean_base", copy)
                prepared = system.prepare_clean(copy)
                handle = system.open(copy)
                seconds, outcome = _timed(system.clean, handle)
                cleaned = system.cleaned(outcome, prepared)
                run.seconds.samples.append(seconds)
                run.removed_files, run.removed_bytes = cleaned.files, cleaned.bytes
                log(f"  {name}: clean #{repetition + 1}: {seconds:.2f} s, {cleaned.files:,} files, "
                    f"{cleaned.bytes / 1e6:.1f} MB")
                _check_rows(system, results[name], copy, rows, "clean")
                system.drop(copy)
            except NotImplementedError as exc:
                run.skipped = f"not available: NotImplementedError({exc})"
                log(f"{name}: clean: {run.skipped}")
                system.drop(copy)
                break
            except Exception:
                run.skipped = _fail(results[name], name, f"clean #{repetition + 1}")
                break
        run.seconds.finish()
        system.drop("clean_base")


def run(config: RunConfig) -> Report:
    """Measure every available system; unavailable ones (or operations) are reported, not raised."""
    workdir = Path(config.workdir)
    machine = machine_facts()
    results: dict[str, SystemResult] = {}
    systems: dict[str, Compaction] = {}
    for name in config.systems:
        cls = SYSTEMS[name]
        results[name] = SystemResult(note=cls.note)
        try:
            systems[name] = cls(workdir / name)
        except SystemUnavailableError as exc:
            log(f"{name}: skipped: {exc}")
            results[name].skipped = str(exc)
    window = ""
    if "compact" in config.phases:
        window = measure_compaction(systems, results, config).describe()
    if "clean" in config.phases:
        measure_clean(systems, results, config)
    return Report(machine=replace(machine, load_at_end=load_average()), config=config,
                  systems=results, window=window)


# -- report ----------------------------------------------------------------------------------

@dataclass
class Target:
    status: str  # met, missed or n/a
    goal: str
    detail: str


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.1f}"


def _reads(report: Report, name: str, state: str) -> Reads | None:
    result = report.systems.get(name)
    return result.reads.get(state) if result else None


def _read_ms(report: Report, name: str, state: str, kind: str) -> float | None:
    reads = _reads(report, name, state)
    if reads is None:
        return None
    return (reads.full_ms if kind == "full" else reads.selective_ms).median


def _compaction(report: Report, name: str, kind: str) -> CompactRun | None:
    result = report.systems.get(name)
    return result.compactions.get(kind) if result else None


def _peer_state(state: str) -> str:
    """The Delta state a metatxn state is compared with (Delta has one compaction)."""
    return "compacted" if state == "minor" else state


def ratios(report: Report) -> dict[str, float | None]:
    """Every ratio the report prints (metatxn / other: below 1 means metatxn is faster)."""
    out: dict[str, float | None] = {}
    for state in STATES:
        for kind in ("full", "selective"):
            ours = _read_ms(report, SUBJECT, state, kind)
            out[f"{SUBJECT} {kind} read {state}/one_go"] = _ratio(
                ours, _read_ms(report, SUBJECT, "one_go", kind))
            out[f"{kind} read {state} {SUBJECT}/{PEER}"] = _ratio(
                ours, _read_ms(report, PEER, _peer_state(state), kind))
    ours_c, theirs_c = _compaction(report, SUBJECT, "compacted"), _compaction(report, PEER, "compacted")
    out[f"compaction MB/s {SUBJECT}/{PEER}"] = _ratio(ours_c.mb_per_s if ours_c else None,
                                                      theirs_c.mb_per_s if theirs_c else None)
    ours_k, theirs_k = report.systems.get(SUBJECT), report.systems.get(PEER)
    out[f"clean s {SUBJECT}/{PEER}"] = _ratio(
        ours_k.clean.seconds.median if ours_k and ours_k.clean else None,
        theirs_k.clean.seconds.median if theirs_k and theirs_k.clean else None)
    return out


def _bound(value: float | None, limit: float, *, at_most: bool, unit: str = "x") -> tuple[str, str]:
    """(met|missed|n/a, the margin in words) for ``value`` against ``limit``."""
    if value is None:
        return "n/a", "not measured"
    ok = value <= limit if at_most else value >= limit
    gap = abs(limit - value)
    side = ("under" if value <= limit else "over") if at_most else ("above" if value >= limit else "short of")
    return ("met" if ok else "missed"), f"{gap:,.2f}{unit} {side} the {limit:g}{unit} bound"


def targets(report: Report) -> list[Target]:
    """The goals metatxn sets itself. Informational only: they never fail the run."""
    found = []
    labels = {"compacted": "compact('major')", "minor": "compact('minor') until None"}
    phases = report.config.phases
    for state in ("compacted", "minor") if "compact" in phases else ():
        for kind, what in (("full", "full read"), ("selective", "1 % selective read")):
            ours, one_go = _read_ms(report, SUBJECT, state, kind), _read_ms(report, SUBJECT, "one_go", kind)
            ratio = _ratio(ours, one_go)
            status, margin = _bound(ratio, READ_TARGET, at_most=True)
            found.append(Target(status, f"{SUBJECT} {what} after {labels[state]} within {READ_TARGET:g}x "
                                        f"of its one-go table",
                                "not measured" if ratio is None else
                                f"{_fmt(ratio, 2)}x ({_fmt(ours)} ms vs {_fmt(one_go)} ms; {margin})"))
    if "compact" in phases:
        found.append(_throughput_target(report))
    if "clean" in phases:
        found.append(_clean_target(report))
    return found


def _throughput_target(report: Report) -> Target:
    ours_c, theirs_c = _compaction(report, SUBJECT, "compacted"), _compaction(report, PEER, "compacted")
    ours_mb, theirs_mb = (ours_c.mb_per_s if ours_c else None), (theirs_c.mb_per_s if theirs_c else None)
    ratio = _ratio(ours_mb, theirs_mb)
    status, _ = _bound(ratio, THROUGHPUT_TARGET, at_most=False)
    margin = "not measured" if ratio is None else (
        f"{abs(ratio - 1) * 100:.0f} % {'above' if ratio >= 1 else 'below'} deltalake's")
    return Target(status, f"{SUBJECT} compact('major') MB/s at least deltalake optimize.compact()'s",
                  "not measured" if ratio is None else
                  f"{_fmt(ours_mb)} vs {_fmt(theirs_mb)} MB/s = {_fmt(ratio, 2)}x ({margin})")


def _clean_target(report: Report) -> Target:
    subject = report.systems.get(SUBJECT)
    clean = subject.clean if subject else None
    config = report.config
    files = config.clean_partitions * max(1, config.clean_files // config.clean_partitions)
    goal = f"{SUBJECT} t.clean(force=True) of {files:,} compacted files under {CLEAN_TARGET_S:g} s"
    if files != CLEAN_TARGET_FILES:
        goal += f" (the target is set for {CLEAN_TARGET_FILES:,})"
    if clean is None or clean.seconds.median is None:
        return Target("n/a", goal, clean.skipped if clean and clean.skipped else "not run")
    status, margin = _bound(clean.seconds.median, CLEAN_TARGET_S, at_most=True, unit=" s")
    return Target(status, goal, f"median {_fmt(clean.seconds.median, 2)} s, "
                                f"{clean.removed_files:,} files removed ({margin})")


_STATE_LABELS = {
    SUBJECT: {"loads": "after the loads", "compacted": "after compact('major')",
              "minor": "after compact('minor') until None", "one_go": "one append of all rows"},
    PEER: {"loads": "after the loads", "compacted": "after optimize.compact()",
           "one_go": "one write of all rows"},
}


def _reads_section(report: Report) -> str:
    config = report.config
    title = (f"### Reads: {config.loads} loads of {config.load_rows:,} rows, before and after compaction "
             f"(open + read, median of {config.repeats})")
    rows = []
    for name in report.systems:
        for state in STATES:
            reads = _reads(report, name, state)
            if reads is None:
                continue
            full, part = reads.full_ms.median, reads.selective_ms.median
            one_full, one_part = (_read_ms(report, name, "one_go", k) for k in ("full", "selective"))
            peer_full, peer_part = (_read_ms(report, PEER, _peer_state(state), k)
                                    for k in ("full", "selective"))
            versus = f"{_fmt(_ratio(full, peer_full), 2)} / {_fmt(_ratio(part, peer_part), 2)}"
            rows.append([
                name, _STATE_LABELS.get(name, {}).get(state, state),
                "-" if reads.segments is None else str(reads.segments), str(reads.files),
                _fmt(full), _fmt(part),
                _fmt(_ratio(full, one_full), 2), _fmt(_ratio(part, one_part), 2),
                versus if name == SUBJECT else "-",
            ])
    headers = ["system", "table", "live segments", "data files", "full ms", "1 % ms", "full / one-go",
               "1 % / one-go", f"{SUBJECT}/{PEER} full / 1 %"]
    note = (f"The 1 % read is {report.window}. `{SUBJECT}/{PEER}` compares like with like; "
            "metatxn's minor-compacted table is compared with Delta's optimized one.")
    return "\n\n".join([title, _markdown_table(headers, rows), note])


def _compaction_section(report: Report) -> str:
    config = report.config
    title = (f"### Compaction of the {config.loads}-load table: MB/s rewritten (bytes of the live files "
             f"replaced / wall time), median of {config.compact_repeats} fresh copies")
    rows = []
    ours = _compaction(report, SUBJECT, "compacted")
    for name, result in report.systems.items():
        for run in result.compactions.values():
            rewritten = run.rewritten_bytes if run.rewritten_bytes is not None else run.input_bytes
            samples = len(run.seconds.samples)
            rows.append([
                name, f"`{run.call}`", str(run.input_files), _mb(run.input_bytes), _mb(rewritten),
                str(run.output_files),
                _fmt(run.seconds.median, 2) + (" (1 run)" if samples == 1 < config.compact_repeats else ""),
                _fmt(run.mb_per_s),
                "-" if name == SUBJECT else _fmt(_ratio(ours.mb_per_s if ours else None, run.mb_per_s), 2),
                run.effect or "-",
            ])
    headers = ["system", "call", "files replaced", "MB replaced", "MB read", "files after", "seconds",
               "MB/s", f"{SUBJECT}/system MB/s", "what it did (1st run)"]
    note = ("Minor compaction reads some rows twice (a load into `x.1`, then `x.1` into `x.2`), so its "
            "MB/s counts every byte its commits read (the `Compacted` segments' sizes).")
    return "\n\n".join([title, _markdown_table(headers, rows), note])


def _clean_section(report: Report) -> str:
    config = report.config
    appends = max(1, config.clean_files // config.clean_partitions)
    files = appends * config.clean_partitions
    title = (f"### Clean after compaction: {appends} appends x {config.clean_partitions} partitions "
             f"(`{PART}`) = {files:,} small files, compacted into one file per partition")
    rows = []
    peer = report.systems.get(PEER)
    theirs = peer.clean.seconds.median if peer and peer.clean else None
    for name, result in report.systems.items():
        run = result.clean
        if run is None:
            continue
        compact_mb_s = _ratio(run.compacted_bytes / 1e6, run.compact_s) if run.compact_s else None
        rows.append([
            name, f"`{run.call}`", _fmt(run.build_s), f"{run.compacted_files:,} -> {run.output_files:,}",
            f"{_fmt(run.compact_s)} ({_fmt(compact_mb_s)} MB/s)",
            "-" if run.removed_files is None else f"{run.removed_files:,}", _mb(run.removed_bytes),
            _fmt(run.seconds.median, 2), _fmt(run.seconds.p90, 2),
            "-" if name == SUBJECT else _fmt(_ratio(_clean_median(report), theirs), 2),
            run.skipped or "-",
        ])
    copies = f"{config.clean_repeats} cop{'ies' if config.clean_repeats != 1 else 'y'}"
    headers = ["system", "call timed", "build s", "compaction files", "compaction s",
               "files removed", "MB removed", f"clean median s ({copies})", "p90 s",
               f"{SUBJECT}/system", "status"]
    return "\n\n".join([title, _markdown_table(headers, rows)])


def _clean_median(report: Report) -> float | None:
    result = report.systems.get(SUBJECT)
    return result.clean.seconds.median if result and result.clean else None


def _build_section(report: Report) -> str:
    rows = [[name, b.table, f"{b.rows:,}", f"{b.appends:,}", _fmt(b.seconds)]
            for name, result in report.systems.items() for b in result.builds]
    return "\n\n".join(["### Building the tables (untimed for the figures above)",
                        _markdown_table(["system", "table", "rows", "appends", "seconds"], rows)])


def _targets_section(report: Report) -> str:
    lines = [f"- {t.status:<6}  {t.goal}: {t.detail}" for t in targets(report)]
    return "\n".join(["### Targets (informational)", "", *lines])


def _calls_section(report: Report) -> str:
    lines = [f"- {name} {what}: `{call}`" for name, cls in SYSTEMS.items() if name in report.systems
             for what, call in cls.calls.items()]
    return "\n".join(["### Calls", "", *lines])


def wrong_results(report: Report) -> list[str]:
    return [f"{name}: {w}" for name, result in report.systems.items() for w in result.wrong]


def _notes_section(report: Report) -> str:
    lines = [f"- {name}: {result.note}" for name, result in report.systems.items() if result.note]
    systems = report.systems.items()
    lines += [f"- {name} skipped: {result.skipped}" for name, result in systems if result.skipped]
    lines += [f"- {name}: {failure}" for name, result in systems for failure in result.failures]
    return "\n".join(["### Notes", "", *lines])


def render_markdown(report: Report) -> str:
    """The whole report as Markdown, ready to paste into bench/README.md."""
    sections = []
    wrong = wrong_results(report)
    if wrong:
        sections.append("\n".join(["### WRONG RESULTS (these figures are not valid)", "",
                                   *(f"- {w}" for w in wrong)]))
    sections.append(machine_section(report.machine, report.config.workdir))
    if "compact" in report.config.phases:
        sections += [_reads_section(report), _compaction_section(report)]
    if "clean" in report.config.phases:
        sections.append(_clean_section(report))
    sections += [_build_section(report), _targets_section(report), _calls_section(report),
                 _notes_section(report)]
    return "\n\n".join(sections) + "\n"


def write_json(report: Report, path: Path) -> None:
    """The report, ratios and targets as JSON (samples included, for later analysis)."""
    document = {
        **dataclasses.asdict(report),
        "ratios": ratios(report),
        "targets": [dataclasses.asdict(t) for t in targets(report)],
        "wrong_results": wrong_results(report),
        "argv": sys.argv[1:],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


# -- command line ----------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_compaction",
        description="Reads before/after compaction, compaction MB/s and clean time: metatxn vs deltalake.",
    )
    parser.add_argument("--systems", type=names_option(list(SYSTEMS)), default=list(SYSTEMS),
                        help=f"comma-separated, from {','.join(SYSTEMS)} (default: all)")
    parser.add_argument("--phases", type=names_option(PHASES), default=list(PHASES),
                        help="compact (reads and compaction throughput), clean (default: both)")
    parser.add_argument("--loads", type=at_least_option(2),
                        help=f"small appends building the table (default: {FULL.loads})")
    parser.add_argument("--load-rows", type=at_least_option(100),
                        help=f"rows per load (default: {FULL.load_rows:,})")
    parser.add_argument("--repeats", type=at_least_option(1),
                        help=f"timed full and selective reads per table state (default: {FULL.repeats})")
    parser.add_argument("--compact-repeats", type=at_least_option(1),
                        help=f"compactions timed, each on a fresh copy (default: {FULL.compact_repeats})")
    parser.add_argument("--clean-files", type=at_least_option(2),
                        help="small files the clean table's compaction leaves behind "
                             f"(default: {FULL.clean_files:,})")
    parser.add_argument("--clean-partitions", type=at_least_option(1),
                        help=f"o_part values: files written per append (default: {FULL.clean_partitions})")
    parser.add_argument("--clean-repeats", type=at_least_option(1),
                        help=f"cleans timed, each on a fresh copy (default: {FULL.clean_repeats})")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK.loads} loads, {QUICK.repeats} reads, "
                             f"{QUICK.compact_repeats} compactions, {QUICK.clean_files:,} files to "
                             "clean once; explicit flags win")
    parser.add_argument("--workdir", type=Path,
                        help="make the run's temporary folder inside this one (default: the system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the tables instead of removing them")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    return parser.parse_args(argv)


def _flag_or(value: T | None, default: T) -> T:
    return default if value is None else value


def make_config(args: argparse.Namespace, workdir: Path) -> RunConfig:
    """Explicit flags, else the --quick preset, else the full-spec one."""
    preset = QUICK if args.quick else FULL
    return RunConfig(
        systems=args.systems,
        phases=args.phases,
        loads=_flag_or(args.loads, preset.loads),
        load_rows=_flag_or(args.load_rows, preset.load_rows),
        repeats=_flag_or(args.repeats, preset.repeats),
        compact_repeats=_flag_or(args.compact_repeats, preset.compact_repeats),
        clean_files=_flag_or(args.clean_files, preset.clean_files),
        clean_partitions=_flag_or(args.clean_partitions, preset.clean_partitions),
        clean_repeats=_flag_or(args.clean_repeats, preset.clean_repeats),
        workdir=str(workdir),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    with run_folder(args.workdir, keep=args.keep, prefix="bench-compaction-", log=log) as folder:
        report = run(make_config(args, folder))
    return finish_run(report, markdown=render_markdown(report), out=args.out, write_json=write_json,
                      wrong=wrong_results(report), began=began, log=log)


if __name__ == "__main__":
    sys.exit(main())
