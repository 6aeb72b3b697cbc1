"""Streaming batch commits (issue 14, item 2): ``s.write(batch_id, rows)`` on a streaming table
against deltalake appends of the same batches, and a full read of the streamed table against one
Parquet file of the same rows, in one run on local disk; and (item 1) a replay check on a long
stream against a short one.

What is measured:

1. **Batch commits** (``measure_commits``): a table created with ``properties={"streaming":
   "true"}`` and one stream (``t.stream("bench")``) per batch size (``--sizes``: 10 and 100
   rows of ``id`` int64, ``ts`` timestamp[us], ``device`` string, ``value`` float64);
   ``--batches`` successive ``s.write(batch_id, batch)`` calls (one commit each) into each. Per
   window of ``--window`` batches: median, p90 and p99 ms; over all batches: median, p90, p99,
   and **flatness**, the median of the last window over the median of the first. deltalake
   appends the same batches (``write_deltalake(dt, batch, mode="append")`` on a held
   ``DeltaTable``, default config) into a table of its own per size.

   The systems run one after the other (metatxn first), each system's two tables taking turns
   batch by batch. A writer's latency depends on what runs between its commits (a deltalake
   append or a 20 ms sleep between two metatxn batches raised metatxn's median from about 4 to
   about 6.7 ms here), so a peer interleaved for only the first batches would skew the windows
   that flatness compares; the price is that the ratio across systems is exposed to load
   changing between the phases (the report prints the load average at both ends). deltalake's
   appends slow down as its log grows (see the Commits section of bench/README.md), so it stops
   after ``--delta-batches`` batches or ``--delta-budget`` seconds of appends per size,
   whichever comes first; the report says where, its flatness uses windows of at most half its
   batches, the ratio metatxn / deltalake compares medians over the same (first) batches, and a
   straight-line fit of its per-commit time projects what all ``--batches`` would have taken.
2. **Full read** (``measure_reads``): each streamed table read whole, ``txn.open_table(uri)
   .to_arrow()`` (a fresh handle each time), against ``pq.read_table`` of one Parquet file holding
   the same rows (written untimed by pyarrow with its defaults), ``--read-repeats`` times each,
   alternately: medians and the ratio. The table's data files are counted
   (``len(snapshot().files())``). **Where the time goes**: the same read split into its parts,
   each timed on its own: opening the handle and resolving the snapshot, planning
   (``snapshot.file_table(stats=False)``: the live files as an Arrow table), and pyarrow alone
   scanning exactly those files (``pyarrow.dataset.dataset(locations).to_table()``); whatever
   ``to_arrow`` takes beyond their sum is metatxn's own per-file work around the scan. With
   ``--profile FILE`` one more read of each table runs under cProfile (untimed for the figures):
   the stats go to ``FILE`` (``FILE.10``, ``FILE.100`` per size) and the top functions to stderr.
3. **Replay checks** (``measure_replay``, ``--phases replay``; not in the default run): issue 14
   wants a stream's progress read in constant time whatever the table's history, "a stream that
   has committed 100,000 batches checks a replay as fast as one that has committed 10". Two
   streaming tables, built untimed for the figures: a "long" one whose stream commits
   ``--replay-batches`` batches of 1 row, and a "short" one whose stream commits 10 (the build's
   time and median ms per batch are reported). Then, ``--replay-repeats`` times each, the tables
   taking turns: (a) ``s.write(0, batch)`` on the stream object that did the writes (a replay:
   must return None), (b) the same on a fresh handle, ``txn.open_table(uri).stream(name)
   .write(0, batch)`` (the time includes opening the table), (c) ``s.last_batch_id`` on the held
   stream (must be the last batch id). Medians for long and short and the ratio long/short of
   each; the target is the ratio of (a).

Every result is checked untimed: each write returned a commit, the stream's last batch id and the
tables' row counts after the writes, and every read's ids (exactly ``0 .. rows - 1``, once each);
every replay check returned None, every ``last_batch_id`` the last batch, and the replayed tables
kept their rows.
A wrong result is printed as WRONG RESULTS and makes the exit status 1; otherwise it is 0 whatever
the figures (the targets are informational).

Run from the repository root::

    .venv/bin/python -m bench.bench_streaming --out bench/out/streaming.json   # 30,000 batches, ~20-30 min
    .venv/bin/python -m bench.bench_streaming --quick                          # 2,000 batches, ~1.5 min
    .venv/bin/python -m bench.bench_streaming --phases replay --out bench/out/streaming_replay.json
    .venv/bin/python -m bench.bench_streaming --quick --phases replay          # 2,000-batch long stream
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import io
import json
import pstats
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):  # run as a file (python bench/bench_streaming.py): make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from bench._report import (
    Machine,
    _markdown_table,
    finish_run,
    load_average,
    machine_facts,
    machine_section,
    run_folder,
)

SUBJECT, DELTA = "metatxn", "deltalake"
LIBRARIES = ("metatxn", "pyarrow", "deltalake")
STREAM = "bench"
SCHEMA = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us")), ("device", pa.string()),
                    ("value", pa.float64())])
DEVICES = 500
#: ``ts`` starts at 2026-11-01 00:00 UTC, one row every 10 ms.
TS_START_US, TS_STEP_US = 1_793_491_200_000_000, 10_000
#: Issue 14's targets.
MEDIAN_BOUND_MS, FLAT_BOUND, READ_BOUND = 5.0, 1.3, 2.0
#: Issue 14, item 1: a replay check on the long stream "as fast as" on the short one.
REPLAY_BOUND = 1.3
#: The short stream's batches (issue 14's "one that has committed 10").
SHORT_BATCHES = 10
T = TypeVar("T")


@dataclass(frozen=True)
class Preset:
    """Default sizes of a run; explicit command-line flags override each field."""

    batches: int
    window: int
    delta_batches: int
    delta_budget_s: float
    read_repeats: int
    replay_batches: int
    replay_repeats: int


FULL = Preset(batches=30_000, window=1_000, delta_batches=3_000, delta_budget_s=900.0, read_repeats=3,
              replay_batches=100_000, replay_repeats=200)
QUICK = Preset(batches=2_000, window=1_000, delta_batches=600, delta_budget_s=60.0, read_repeats=3,
               replay_batches=2_000, replay_repeats=50)


@dataclass(frozen=True)
class Config:
    sizes: list[int]  # rows per batch
    batches: int
    window: int
    systems: list[str]
    delta_batches: int
    delta_budget_s: float
    read_repeats: int
    replay_batches: int
    replay_repeats: int
    phases: list[str]
    profile: str | None
    workdir: str


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the pasteable report."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- data ------------------------------------------------------------------------------------

def stream_rows(rows: int, seed: int) -> pa.Table:
    """``rows`` rows in arrival order: ids 0.., ``ts`` every 10 ms, a device, a reading."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)
    devices = pa.array([f"device-{d:04d}" for d in range(DEVICES)])
    return pa.table({
        "id": ids,
        "ts": pa.array(TS_START_US + ids * TS_STEP_US, pa.timestamp("us")),
        "device": devices.take(pa.array(rng.integers(0, DEVICES, rows))),
        "value": rng.normal(20.0, 5.0, rows),
    }, schema=SCHEMA)


# -- results ---------------------------------------------------------------------------------

def _quantile(samples: list[float], percent: int) -> float:
    if len(samples) == 1:
        return samples[0]
    return statistics.quantiles(samples, n=100, method="inclusive")[percent - 1]


@dataclass
class Window:
    first: int  # number of the window's first batch (1-based)
    last: int
    median_ms: float
    p90_ms: float
    p99_ms: float


@dataclass
class Series:
    """One writer's commits: ``rows`` rows per batch, one sample (ms) per batch."""

    system: str
    rows: int
    samples_ms: list[float] = field(default_factory=list)
    stopped: str | None = None  # why it stopped before --batches (deltalake's cap), or a failure
    wrong: str | None = None
    window: int = 0  # batches per window, set by finish()
    windows: list[Window] = field(default_factory=list)
    median_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    seconds: float = 0.0  # all of its commits

    @property
    def name(self) -> str:
        return f"{self.system} {self.rows}-row"

    def finish(self, window: int) -> None:
        found = self.samples_ms
        if not found:
            return
        self.window = max(1, min(window, len(found) // 2)) if len(found) >= 2 else 1
        self.windows = [Window(start + 1, min(start + self.window, len(found)),
                               statistics.median(part), _quantile(part, 90), _quantile(part, 99))
                        for start in range(0, len(found), self.window)
                        for part in [found[start:start + self.window]] if len(part) == self.window]
        self.median_ms = statistics.median(found)
        self.p90_ms, self.p99_ms = _quantile(found, 90), _quantile(found, 99)
        self.seconds = sum(found) / 1e3

    @property
    def flatness(self) -> float | None:
        """Median of the last window over the median of the first."""
        if len(self.windows) < 2:
            return None
        return self.windows[-1].median_ms / self.windows[0].median_ms

    def median_of_first(self, batches: int) -> float | None:
        return statistics.median(self.samples_ms[:batches]) if len(self.samples_ms) >= batches > 0 else None

    def projected_s(self, batches: int) -> float | None:
        """Seconds ``batches`` commits would take, from a straight-line fit of ms per commit."""
        found = self.samples_ms
        if len(found) < 100:
            return None
        slope, intercept = np.polyfit(np.arange(len(found)), np.asarray(found), 1)
        return float(batches * intercept + slope * batches * (batches - 1) / 2) / 1e3


@dataclass
class Read:
    """A full read of one streamed table against one Parquet file of the same rows."""

    rows: int  # rows per batch of the table
    batches: int
    table_rows: int
    data_files: int
    data_bytes: int
    parquet_bytes: int
    metatxn_ms: list[float] = field(default_factory=list)  # txn.open_table(uri).to_arrow()
    parquet_ms: list[float] = field(default_factory=list)  # pq.read_table(file)
    open_ms: list[float] = field(default_factory=list)  # txn.open_table(uri).snapshot()
    plan_ms: list[float] = field(default_factory=list)  # snapshot.file_table(stats=False)
    scan_ms: list[float] = field(default_factory=list)  # pyarrow alone over the same files
    wrong: str | None = None

    @staticmethod
    def _median(samples: list[float]) -> float | None:
        return statistics.median(samples) if samples else None

    def median(self, what: str) -> float | None:
        return self._median(getattr(self, f"{what}_ms"))

    @property
    def ratio(self) -> float | None:
        return _ratio(self.median("metatxn"), self.median("parquet"))


#: The replay phase's checks: (a) held, (b) fresh, (c) last (see the module docstring).
REPLAY_CHECKS = ("held", "fresh", "last")


@dataclass
class Replay:
    """Replay checks on a long stream against a short one: one sample (ms) per check."""

    long_batches: int
    short_batches: int
    build_ms: dict[str, list[float]] = field(default_factory=dict)  # "long"/"short" -> ms per batch
    facts: dict[str, dict[str, object]] = field(default_factory=dict)  # "long"/"short" -> the table
    held_long_ms: list[float] = field(default_factory=list)  # s.write(0, batch) -> None
    held_short_ms: list[float] = field(default_factory=list)
    fresh_long_ms: list[float] = field(default_factory=list)  # open_table(uri).stream(name).write(0, ...)
    fresh_short_ms: list[float] = field(default_factory=list)
    last_long_ms: list[float] = field(default_factory=list)  # s.last_batch_id
    last_short_ms: list[float] = field(default_factory=list)
    wrong: str | None = None

    def median(self, check: str, length: str) -> float | None:
        samples: list[float] = getattr(self, f"{check}_{length}_ms")
        return statistics.median(samples) if samples else None

    def ratio(self, check: str) -> float | None:
        """Median on the long stream over the median on the short one."""
        return _ratio(self.median(check, "long"), self.median(check, "short"))

    def build_median_ms(self, length: str) -> float | None:
        samples = self.build_ms.get(length)
        return statistics.median(samples) if samples else None

    def build_s(self, length: str) -> float:
        return sum(self.build_ms.get(length, [])) / 1e3


@dataclass
class Report:
    machine: Machine
    config: Config
    series: dict[str, Series] = field(default_factory=dict)  # Series.name -> series
    reads: list[Read] = field(default_factory=list)
    layouts: dict[str, dict[str, object]] = field(default_factory=dict)  # Series.name -> facts
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    profile: dict[int, list[str]] = field(default_factory=dict)  # batch rows -> top functions
    replay: Replay | None = None

    def get(self, system: str, rows: int) -> Series | None:
        return self.series.get(f"{system} {rows}-row")


# -- writers ---------------------------------------------------------------------------------

class Writer:
    """One table written batch by batch: ``write(batch_id, batch)`` is the timed call."""

    def __init__(self, series: Series, write: Callable[[int, pa.Table], Any],
                 count: Callable[[], int], facts: Callable[[], dict[str, object]], uri: str) -> None:
        self.series, self.write, self.count, self.facts, self.uri = series, write, count, facts, uri


def metatxn_writer(root: Path, rows: int) -> Writer:
    import txn

    uri = str(root / f"metatxn_{rows}")
    table = txn.create_table(uri, SCHEMA, properties={"streaming": "true"})
    stream = table.stream(STREAM)
    series = Series(SUBJECT, rows)

    def write(batch_id: int, batch: pa.Table) -> Any:
        commit = stream.write(batch_id, batch)
        if commit is None:
            raise AssertionError(f"s.write({batch_id}, ...) returned None: the batch was not committed")
        return commit

    def facts() -> dict[str, object]:
        handle = txn.open_table(uri)
        segments = handle.segments()
        return {"last_batch_id": stream.last_batch_id,
                "segments": ", ".join(f"{s.id} {s.status}" for s in segments[:3])
                + (f" (+{len(segments) - 3})" if len(segments) > 3 else ""),
                "data_files": len(handle.snapshot().files()),
                "timeline_instants": len(handle.timeline())}

    return Writer(series, write, lambda: int(txn.open_table(uri).snapshot().count()), facts, uri)


def delta_writer(root: Path, rows: int) -> Writer:
    import deltalake

    uri = str(root / f"deltalake_{rows}")
    table = deltalake.DeltaTable.create(uri, SCHEMA)

    def write(_batch_id: int, batch: pa.Table) -> None:
        # The held DeltaTable (not the URI): its loaded state is reused, as a long-lived writer's.
        deltalake.write_deltalake(table, batch, mode="append")

    def count() -> int:
        return int(deltalake.DeltaTable(uri).to_pyarrow_dataset().count_rows())

    def facts() -> dict[str, object]:
        log_folder = Path(uri) / "_delta_log"
        return {"version": deltalake.DeltaTable(uri).version(),
                "checkpoints": sum(1 for _ in log_folder.glob("*.checkpoint*.parquet")),
                "data_files": len(deltalake.DeltaTable(uri).file_uris())}

    return Writer(Series(DELTA, rows), write, count, facts, uri)


WRITERS: dict[str, Callable[[Path, int], Writer]] = {SUBJECT: metatxn_writer, DELTA: delta_writer}


# -- the run ---------------------------------------------------------------------------------

def _timed(action: Callable[..., T], *args: Any) -> tuple[float, T]:
    """Milliseconds taken by ``action(*args)``, and what it returned."""
    began = time.perf_counter()
    value = action(*args)
    return (time.perf_counter() - began) * 1e3, value


def measure_commits(report: Report, root: Path, data: dict[int, pa.Table]) -> dict[int, str]:
    """Each system's batches, one system after the other (its tables taking turns batch by
    batch); the metatxn tables' URIs."""
    config = report.config
    writers: list[Writer] = []
    for system in config.systems:
        try:
            mine = [WRITERS[system](root, rows) for rows in config.sizes]
        except ImportError as exc:
            report.skipped[system] = f"{type(exc).__name__}: {exc} (pip install -r bench/requirements.txt)"
            log(f"{system}: skipped: {report.skipped[system]}")
            continue
        for writer in mine:
            report.series[writer.series.name] = writer.series
        write_batches(config, mine, data)
        writers += mine
    uris: dict[int, str] = {}
    for writer in writers:
        series = writer.series
        series.finish(config.window)
        if series.system == SUBJECT and series.stopped is None:
            uris[series.rows] = writer.uri
        _check_writer(report, writer)
    return uris


def write_batches(config: Config, writers: list[Writer], data: dict[int, pa.Table]) -> None:
    """``--batches`` batches into each of ``writers`` (one system's tables), taking turns batch by
    batch; deltalake stops at ``--delta-batches`` or ``--delta-budget``."""
    system = writers[0].series.system
    cap = f" (stops at {config.delta_batches:,} batches or {config.delta_budget_s:g} s per size)" \
        if system == DELTA else ""
    log(f"== {system}: {config.batches:,} batches of {', '.join(str(w.series.rows) for w in writers)} rows, "
        f"the tables taking turns{cap}")
    running = list(writers)
    began = time.monotonic()
    for batch_id in range(config.batches):
        if not running:
            break
        turn = batch_id % len(running)
        for writer in running[turn:] + running[:turn]:  # no table always first
            series = writer.series
            batch = data[series.rows].slice(batch_id * series.rows, series.rows)
            try:
                ms, _ = _timed(writer.write, batch_id, batch)
            except Exception:
                traceback.print_exc()
                series.stopped = f"failed at batch {batch_id}: {sys.exc_info()[1]!r}"
                continue
            series.samples_ms.append(ms)
            series.seconds += ms / 1e3
            if system == DELTA and len(series.samples_ms) >= config.delta_batches:
                series.stopped = f"capped at {config.delta_batches:,} batches (--delta-batches)"
            elif system == DELTA and series.seconds >= config.delta_budget_s:
                series.stopped = (f"stopped after {len(series.samples_ms):,} batches: "
                                  f"{config.delta_budget_s:g} s of appends (--delta-budget)")
        if (batch_id + 1) % 1000 == 0 or batch_id + 1 == config.batches or not all(
                w.series.stopped is None for w in running):
            log(f"  {batch_id + 1:,} batches, {time.monotonic() - began:.0f} s, median of the last 1,000: "
                + ", ".join(f"{w.series.name} {statistics.median(w.series.samples_ms[-1000:]):.2f} ms"
                            for w in running if w.series.samples_ms))
        running = [w for w in running if w.series.stopped is None]


def _check_writer(report: Report, writer: Writer) -> None:
    series = writer.series
    try:
        found = writer.count()
        report.layouts[series.name] = writer.facts()
    except Exception:
        traceback.print_exc()
        series.wrong = f"could not count the table: {sys.exc_info()[1]!r}"
        return
    expected = len(series.samples_ms) * series.rows
    if found != expected:
        series.wrong = f"{found:,} rows after {len(series.samples_ms):,} batches; expected {expected:,}"
    last = report.layouts[series.name].get("last_batch_id", len(series.samples_ms) - 1)
    if series.system == SUBJECT and last != len(series.samples_ms) - 1:
        series.wrong = f"the stream's last batch id is {last}; expected {len(series.samples_ms) - 1}"
    if series.wrong:
        log(f"  !!! WRONG RESULT: {series.name}: {series.wrong}")
    elif series.median_ms is not None:
        log(f"  {series.name}: {len(series.samples_ms):,} batches in {series.seconds:.1f} s, median "
            f"{series.median_ms:.2f} ms, flatness {_fmt(series.flatness, 2)}x")


def _check_ids(table: pa.Table, rows: int) -> str | None:
    if table.num_rows != rows:
        return f"{table.num_rows:,} rows read; expected {rows:,}"
    ids = np.sort(table.column("id").to_numpy())
    if not np.array_equal(ids, np.arange(rows, dtype=np.int64)):
        return "the ids read are not exactly 0 .. rows - 1, once each"
    return None


def measure_reads(report: Report, root: Path, uris: dict[int, str], data: dict[int, pa.Table]) -> None:
    """Each streamed table read whole against one Parquet file of the same rows; the read's parts."""
    import txn

    config = report.config
    for rows, uri in uris.items():
        series = report.get(SUBJECT, rows)
        batches = len(series.samples_ms) if series else 0
        expected = data[rows].slice(0, batches * rows)
        reference = root / f"reference_{rows}.parquet"
        pq.write_table(expected, reference)
        files = txn.open_table(uri).snapshot().files()
        read = Read(rows=rows, batches=batches, table_rows=expected.num_rows, data_files=len(files),
                    data_bytes=sum(f.size for f in files), parquet_bytes=reference.stat().st_size)
        report.reads.append(read)
        log(f"== read: the {batches:,}-batch table of {rows}-row batches ({read.data_files:,} data files, "
            f"{expected.num_rows:,} rows) against one Parquet file, {config.read_repeats} times each")
        read_all(read, uri, reference, config.read_repeats)
        if read.wrong:
            log(f"  !!! WRONG RESULT: read of the {rows}-row table: {read.wrong}")
        log(f"  to_arrow {_fmt(read.median('metatxn'))} ms, pq.read_table {_fmt(read.median('parquet'))} ms "
            f"({_fmt(read.ratio, 2)}x); open {_fmt(read.median('open'))}, plan {_fmt(read.median('plan'))}, "
            f"pyarrow scan of the files {_fmt(read.median('scan'))} ms")
        if config.profile:
            profile_read(report, uri, rows, Path(f"{config.profile}.{rows}"))
        reference.unlink()


def _plan(snapshot: Any) -> pa.Table:
    """What ``to_arrow`` plans from: the live files as an Arrow table, no column statistics."""
    planned: pa.Table = snapshot.file_table(stats=False)
    return planned


def scan_files(locations: list[str]) -> pa.Table:
    """pyarrow alone reading exactly these Parquet files (dataset discovery included)."""
    return ds.dataset(locations, schema=SCHEMA, format="parquet").to_table()


def read_all(read: Read, uri: str, reference: Path, repeats: int) -> None:
    """One untimed read of each kind (the code paths' first use; the files into the page cache),
    then ``repeats`` of each, taking turns: to_arrow, pq.read_table, and to_arrow's parts."""
    import txn

    expected = read.table_rows
    for table in (txn.open_table(uri).to_arrow(), pq.read_table(reference)):
        read.wrong = read.wrong or _check_ids(table, expected)
    for _ in range(repeats):
        ms, table = _timed(lambda: txn.open_table(uri).to_arrow())
        read.metatxn_ms.append(ms)
        read.wrong = read.wrong or _check_ids(table, expected)
        ms, table = _timed(pq.read_table, reference)
        read.parquet_ms.append(ms)
        read.wrong = read.wrong or _check_ids(table, expected)
        ms, snapshot = _timed(lambda: txn.open_table(uri).snapshot())
        read.open_ms.append(ms)
        ms, planned = _timed(_plan, snapshot)
        read.plan_ms.append(ms)
        ms, table = _timed(scan_files, planned.column("location").to_pylist())
        read.scan_ms.append(ms)
        read.wrong = read.wrong or _check_ids(table, expected)


def profile_read(report: Report, uri: str, rows: int, path: Path) -> None:
    """One more ``txn.open_table(uri).to_arrow()`` under cProfile: stats to ``path``, top to stderr."""
    import txn

    profiler = cProfile.Profile()
    profiler.enable()
    txn.open_table(uri).to_arrow()
    profiler.disable()
    path.parent.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(str(path))
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
    log(f"  cProfile of one read ({path}), by own time:\n{text.getvalue()}")
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    top = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:8]
    report.profile[rows] = [f"{Path(f).name}:{line} {name}: {tt * 1e3:.0f} ms own, {ct * 1e3:.0f} ms "
                            f"cumulative, {nc:,} calls" for (f, line, name), (_, nc, tt, ct, _) in top]


def _table_facts(uri: str) -> dict[str, object]:
    import txn

    handle = txn.open_table(uri)
    on_disk = sum(1 for path in Path(uri).rglob("*.parquet") if "_metadata" not in path.parts)
    return {"rows": int(handle.snapshot().count()), "data_files": len(handle.snapshot().files()),
            "parquet_files_on_disk": on_disk, "segments": len(handle.segments()),
            "timeline_instants": len(handle.timeline())}


def build_stream(replay: Replay, length: str, uri: str, batches: int) -> Any:
    """A streaming table whose stream commits ``batches`` batches of one row (untimed for the
    figures; each batch's ms kept for the build's figures); the stream that wrote them."""
    import txn

    data = stream_rows(batches, seed=batches)
    stream = txn.create_table(uri, SCHEMA, properties={"streaming": "true"}).stream(STREAM)
    samples = replay.build_ms.setdefault(length, [])
    log(f"== replay: building the {length} stream, {batches:,} batches of 1 row")
    began = time.monotonic()
    for batch_id in range(batches):
        ms, commit = _timed(stream.write, batch_id, data.slice(batch_id, 1))
        samples.append(ms)
        if commit is None:
            replay.wrong = f"building the {length} stream: s.write({batch_id}, ...) returned None"
            return stream
        if (batch_id + 1) % 10_000 == 0:
            log(f"  {batch_id + 1:,} batches, {time.monotonic() - began:.0f} s, median of the last 10,000: "
                f"{statistics.median(samples[-10_000:]):.2f} ms")
    log(f"  {length}: {batches:,} batches in {replay.build_s(length):.1f} s of writes "
        f"({time.monotonic() - began:.1f} s in all), median {_fmt(replay.build_median_ms(length), 2)} ms "
        "per batch")
    return stream


def measure_replay(report: Report, root: Path) -> None:
    """Replay checks on a long stream against a short one, the streams taking turns: a replayed
    batch on the held stream, the same on a fresh handle, and ``s.last_batch_id``."""
    import txn

    config = report.config
    replay = Replay(long_batches=config.replay_batches, short_batches=SHORT_BATCHES)
    report.replay = replay
    lengths = {"long": config.replay_batches, "short": SHORT_BATCHES}
    uris = {length: str(root / f"replay_{length}") for length in lengths}
    streams = {length: build_stream(replay, length, uris[length], batches)
               for length, batches in lengths.items()}
    if replay.wrong:
        log(f"  !!! WRONG RESULT: replay: {replay.wrong}")
        return
    batch = stream_rows(1, seed=0)

    def held(length: str) -> Any:
        return streams[length].write(0, batch)

    def fresh(length: str) -> Any:
        return txn.open_table(uris[length]).stream(STREAM).write(0, batch)

    def last(length: str) -> Any:
        return streams[length].last_batch_id

    def check(kind: str, length: str, found: Any) -> None:
        expected = None if kind != "last" else lengths[length] - 1
        if found != expected and replay.wrong is None:
            replay.wrong = (f"{kind} check on the {length} stream returned {found!r}; expected {expected!r}"
                            + (" (a replay was committed)" if kind != "last" else ""))

    checks: dict[str, Callable[[str], Any]] = {"held": held, "fresh": fresh, "last": last}
    for length in lengths:  # the code paths' first use, untimed
        for kind, action in checks.items():
            check(kind, length, action(length))
    log(f"== replay: {config.replay_repeats} checks of each kind on each stream, taking turns")
    order = list(lengths)
    for repeat in range(config.replay_repeats):
        for length in order[repeat % 2:] + order[:repeat % 2]:  # no stream always first
            for kind, action in checks.items():
                ms, found = _timed(action, length)
                getattr(replay, f"{kind}_{length}_ms").append(ms)
                check(kind, length, found)
    for length, batches in lengths.items():  # nothing written by the replays
        replay.facts[length] = _table_facts(uris[length])
        found = replay.facts[length]["rows"]
        if found != batches and replay.wrong is None:
            replay.wrong = f"the {length} table holds {found} rows after the replays; expected {batches:,}"
    if replay.wrong:
        log(f"  !!! WRONG RESULT: replay: {replay.wrong}")
    log("  " + "; ".join(f"{kind}: long {_fmt(replay.median(kind, 'long'), 2)} ms, short "
                         f"{_fmt(replay.median(kind, 'short'), 2)} ms ({_fmt(replay.ratio(kind), 2)}x)"
                         for kind in REPLAY_CHECKS))


def _runs_commits(config: Config) -> bool:
    """The commit phase runs when asked for, and for the read (which reads its tables)."""
    return "commit" in config.phases or "read" in config.phases


def run_all(config: Config) -> Report:
    report = Report(machine=machine_facts(LIBRARIES), config=config)
    root = Path(config.workdir)
    if _runs_commits(config):
        log(f"generating {config.batches:,} batches of {', '.join(map(str, config.sizes))} rows")
        data = {rows: stream_rows(config.batches * rows, seed=rows) for rows in config.sizes}
        uris: dict[int, str] = {}
        try:
            uris = measure_commits(report, root, data)
        except Exception:
            traceback.print_exc()
            report.notes.append(f"commits stopped: {sys.exc_info()[1]!r}")
        if "read" in config.phases:
            try:
                measure_reads(report, root, uris, data)
            except Exception:
                traceback.print_exc()
                report.notes.append(f"reads stopped: {sys.exc_info()[1]!r}")
    if "replay" in config.phases:
        try:
            measure_replay(report, root)
        except Exception:
            traceback.print_exc()
            report.notes.append(f"replay checks stopped: {sys.exc_info()[1]!r}")
    report.machine = dataclasses.replace(report.machine, load_at_end=load_average())
    return report


# -- report ----------------------------------------------------------------------------------

@dataclass
class Target:
    goal: str
    figure: str
    ratio: str
    status: str  # met, missed, n/a


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def _fmt(value: float | None, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:,.{digits}f}{suffix}"


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def _status(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "missed")


def targets(report: Report) -> list[Target]:
    """Issue 14's targets. Informational only: they never fail the run."""
    found = []
    for rows in report.config.sizes if _runs_commits(report.config) else []:
        series = report.get(SUBJECT, rows)
        valid = series is not None and series.wrong is None and series.median_ms is not None
        median = series.median_ms if valid and series else None
        flat = series.flatness if valid and series else None
        count = f"{len(series.samples_ms):,}" if series else "-"
        found.append(Target(f"{rows}-row batch commit: median at most {MEDIAN_BOUND_MS:g} ms "
                            f"({count} batches)",
                            f"{_fmt(median, 2)} ms", _fmt(_ratio(median, MEDIAN_BOUND_MS), 2, "x of bound"),
                            _status(None if median is None else median <= MEDIAN_BOUND_MS)))
        window = series.window if series else report.config.window
        first = series.windows[0].median_ms if valid and series and series.windows else None
        last = series.windows[-1].median_ms if valid and series and series.windows else None
        found.append(Target(f"{rows}-row batches flat: median of the last {window:,} within "
                            f"{FLAT_BOUND:g}x the first {window:,}",
                            f"{_fmt(last, 2)} vs {_fmt(first, 2)} ms",
                            _fmt(flat, 2, "x"), _status(None if flat is None else flat <= FLAT_BOUND)))
    for read in report.reads:
        ratio = None if read.wrong else read.ratio
        found.append(Target(f"full read of the {read.batches:,}-batch table ({read.rows}-row batches) within "
                            f"{READ_BOUND:g}x one Parquet file",
                            f"{_fmt(read.median('metatxn'))} vs {_fmt(read.median('parquet'))} ms",
                            _fmt(ratio, 2, "x"), _status(None if ratio is None else ratio <= READ_BOUND)))
    replay = report.replay
    if replay is not None:
        ratio = None if replay.wrong else replay.ratio("held")
        found.append(Target(f"replay check (`s.write(0, batch)` on the held stream) after "
                            f"{replay.long_batches:,} batches within {REPLAY_BOUND:g}x of after "
                            f"{replay.short_batches:,}",
                            f"{_fmt(replay.median('held', 'long'), 2)} vs "
                            f"{_fmt(replay.median('held', 'short'), 2)} ms",
                            _fmt(ratio, 2, "x"), _status(None if ratio is None else ratio <= REPLAY_BOUND)))
    return found


def _commit_section(report: Report) -> str:
    if not report.series:
        return ""
    rows = []
    for series in report.series.values():
        ours = report.get(SUBJECT, series.rows)
        same = None
        if series.system != SUBJECT and ours is not None:
            same = _ratio(ours.median_of_first(len(series.samples_ms)), series.median_ms)
        first = series.windows[0].median_ms if series.windows else None
        last = series.windows[-1].median_ms if series.windows else None
        cells = ["WRONG" if series.wrong else _fmt(v, 2)
                 for v in (series.median_ms, series.p90_ms, series.p99_ms, first, last)]
        rows.append([series.name, f"{len(series.samples_ms):,}", f"{series.seconds:,.1f}", *cells[:3],
                     f"{series.window:,}", *cells[3:], _fmt(series.flatness, 2),
                     "-" if series.system == SUBJECT else _fmt(same, 2)])
    config = report.config
    title = (f"#### Batch commits: {config.batches:,} batches per size; one system after the other, its two "
             "tables taking turns batch by batch (deltalake capped: see Notes)")
    return "\n\n".join([title, _markdown_table(
        ["writer", "batches", "seconds", "median ms", "p90 ms", "p99 ms", "window", "first window median ms",
         "last window median ms", "last/first", "metatxn/deltalake (same batches)"], rows)])


def _window_section(report: Report) -> str:
    ours = [s for s in report.series.values() if s.system == SUBJECT and s.windows]
    peers = [s for s in report.series.values() if s.system != SUBJECT and s.samples_ms]
    if not ours:
        return ""
    window = report.config.window
    rows = []
    for index, w in enumerate(ours[0].windows):
        cells = [f"{w.first:,}-{w.last:,}"]
        for series in ours:
            found = series.windows[index] if index < len(series.windows) else None
            cells += [_fmt(found.median_ms if found else None, 2), _fmt(found.p90_ms if found else None, 2),
                      _fmt(found.p99_ms if found else None, 2)]
        for series in peers:  # capped: a window it only began shows the median of its part
            part = series.samples_ms[w.first - 1:w.last]
            whole = len(part) == w.last - w.first + 1
            cells.append(_fmt(statistics.median(part), 2) + ("" if whole else f" ({len(part):,} batches)")
                         if part else "-")
        rows.append(cells)
    headers = ["batches"] + [f"{s.name} {what}" for s in ours for what in ("median", "p90", "p99")] \
        + [f"{s.name} median" for s in peers]
    title = f"#### Per window of {window:,} batches (ms)"
    return "\n\n".join([title, _markdown_table(headers, rows)])


def _read_section(report: Report) -> str:
    if not report.reads:
        return ""
    rows = [[f"{r.rows}-row", f"{r.batches:,}", f"{r.table_rows:,}", f"{r.data_files:,}",
             f"{r.data_bytes / 2**20:,.1f}", f"{r.parquet_bytes / 2**20:,.1f}",
             "WRONG" if r.wrong else _fmt(r.median("metatxn")), _fmt(r.median("parquet")), _fmt(r.ratio, 2)]
            for r in report.reads]
    title = (f"#### Full read: `txn.open_table(uri).to_arrow()` against `pq.read_table` of one Parquet "
             f"file of the same rows (median of {report.config.read_repeats}, taking turns)")
    parts = []
    for r in report.reads:
        parts_sum = sum(v for v in (r.median("open"), r.median("plan"), r.median("scan")) if v is not None)
        total = r.median("metatxn")
        rest = None if total is None else total - parts_sum
        scan = r.median("scan")
        parts.append([f"{r.rows}-row", f"{r.data_files:,}", _fmt(r.median("open")), _fmt(r.median("plan")),
                      _fmt(scan), _fmt(None if scan is None else scan * 1e3 / max(r.data_files, 1), 0),
                      _fmt(rest), _fmt(total)])
    parts_title = ("#### Where the read time goes (ms, medians, each part timed on its own): open + snapshot "
                   "(`txn.open_table(uri).snapshot()`), plan (`snapshot.file_table(stats=False)`), pyarrow "
                   "alone scanning the same files (`ds.dataset(locations).to_table()`), and the rest of "
                   "`to_arrow` (a difference of medians: near zero it can come out negative)")
    return "\n\n".join([title, _markdown_table(
        ["table", "batches", "rows", "data files", "data MiB", "one Parquet MiB", "to_arrow ms",
         "pq.read_table ms", "ratio"], rows), parts_title, _markdown_table(
        ["table", "data files", "open + snapshot", "plan", "pyarrow scan of the files", "scan us per file",
         "rest of to_arrow", "to_arrow"], parts)])


def _replay_section(report: Report) -> str:
    replay = report.replay
    if replay is None:
        return ""
    calls = {"held": "(a) `s.write(0, batch)` on the held stream (a replay: None)",
             "fresh": "(b) `txn.open_table(uri).stream(name).write(0, batch)` (a fresh handle, open "
                      "included)",
             "last": "(c) `s.last_batch_id` on the held stream"}
    rows = [[calls[kind], *(["WRONG"] * 2 if replay.wrong else
                            [_fmt(replay.median(kind, "long"), 2), _fmt(replay.median(kind, "short"), 2)]),
             _fmt(None if replay.wrong else replay.ratio(kind), 2)] for kind in REPLAY_CHECKS]
    title = (f"#### Replay checks: a stream of {replay.long_batches:,} batches against one of "
             f"{replay.short_batches:,} (ms, medians of {report.config.replay_repeats}, the streams taking "
             "turns)")
    tables = []
    for length, batches in (("long", replay.long_batches), ("short", replay.short_batches)):
        facts = replay.facts.get(length, {})
        tables.append([length, f"{batches:,}", f"{replay.build_s(length):,.1f}",
                       _fmt(replay.build_median_ms(length), 2),
                       *(f"{facts[k]:,}" if isinstance(facts.get(k), int) else "-"
                         for k in ("rows", "data_files", "parquet_files_on_disk", "segments",
                                   "timeline_instants"))])
    return "\n\n".join([title, _markdown_table(
        ["check", f"long ({replay.long_batches:,} batches)", f"short ({replay.short_batches:,} batches)",
         "long/short"], rows),
        "#### The replay tables (built untimed for the checks; 1-row batches)", _markdown_table(
        ["stream", "batches", "build s (writes)", "build median ms per batch", "rows", "live data files",
         "Parquet files on disk", "segments", "timeline instants"], tables)])


def _layout_section(report: Report) -> str:
    rows = [[name, ", ".join(f"{k}={v}" for k, v in facts.items())] for name, facts in report.layouts.items()]
    return "\n\n".join(["#### The tables after the writes", _markdown_table(["writer", "layout"], rows)]) \
        if rows else ""


def _targets_section(report: Report) -> str:
    rows = [[t.goal, t.figure, t.ratio, t.status] for t in targets(report)]
    return "\n\n".join(["#### Targets (issue 14, informational)",
                        _markdown_table(["target", "figure", "ratio", "met?"], rows)])


def _calls_section(report: Report) -> str:
    lines = ['- metatxn: `t = txn.create_table(uri, schema, properties={"streaming": "true"})`, '
             '`s = t.stream("bench")`, then `s.write(batch_id, batch)` per batch (one commit each)']
    if _runs_commits(report.config):
        lines += ['- deltalake: `dt = DeltaTable.create(uri, schema)`, then '
                  '`write_deltalake(dt, batch, mode="append")` per batch, default config (a checkpoint every '
                  "100 commits)"]
    if "read" in report.config.phases:
        lines += ["- read: `txn.open_table(uri).to_arrow()` (a fresh handle each time) against "
                  "`pq.read_table(path)` of a file written by `pq.write_table(rows, path)` (pyarrow's "
                  "defaults)"]
    if report.replay is not None:
        lines += ["- replay: after the batches, `s.write(0, batch)` on the same `s` (returns None), "
                  '`txn.open_table(uri).stream("bench").write(0, batch)` (returns None), and '
                  "`s.last_batch_id`"]
    return "\n".join(["#### Calls", "", *lines])


def wrong_results(report: Report) -> list[str]:
    found = [f"{s.name}: {s.wrong}" for s in report.series.values() if s.wrong]
    found += [f"read of the {r.rows}-row table: {r.wrong}" for r in report.reads if r.wrong]
    if report.replay is not None and report.replay.wrong:
        found.append(f"replay checks: {report.replay.wrong}")
    return found


def _notes_section(report: Report) -> str:
    config = report.config
    lines = [f"- {name} skipped: {why}" for name, why in report.skipped.items()]
    for series in report.series.values():
        if series.stopped is None:
            continue
        lines.append(f"- {series.name}: {series.stopped}")
        projected = series.projected_s(config.batches)
        if series.system == DELTA and projected is not None:
            first = series.windows[0].median_ms if series.windows else None
            last = series.windows[-1].median_ms if series.windows else None
            lines.append(f"- {series.name}: all {config.batches:,} batches projected at "
                         f"{_duration(projected)} of appends (straight-line fit of its ms per commit; "
                         f"window medians {_fmt(first)} ms first, {_fmt(last)} ms last)")
    if any(s.system == DELTA for s in report.series.values()):
        lines.append("- metatxn/deltalake compares medians over the same batches: metatxn's first N, N being "
                     "deltalake's batch count; deltalake's window is at most half its batches")
    for rows, top in report.profile.items():
        lines.append(f"- cProfile of one read of the {rows}-row table, by own time: " + "; ".join(top[:5]))
    lines += [f"- {n}" for n in report.notes]
    return "\n".join(["#### Notes", "", *lines]) if lines else ""


def render_markdown(report: Report) -> str:
    """The whole report as Markdown, ready to paste into bench/README.md."""
    sections = []
    wrong = wrong_results(report)
    if wrong:
        sections.append("\n".join(["#### WRONG RESULTS (these figures are not valid)", "",
                                   *(f"- {w}" for w in wrong)]))
    sections.append(machine_section(report.machine, report.config.workdir).replace("### ", "#### ", 1))
    sections += [_commit_section(report), _window_section(report), _read_section(report),
                 _replay_section(report), _layout_section(report), _targets_section(report),
                 _calls_section(report), _notes_section(report)]
    return "\n\n".join(s for s in sections if s) + "\n"


def write_json(report: Report, path: Path) -> None:
    """The report and its targets as JSON (every sample included, for later analysis)."""
    document = {**dataclasses.asdict(report), "targets": [dataclasses.asdict(t) for t in targets(report)],
                "flatness": {s.name: s.flatness for s in report.series.values()},
                "read_ratio": {r.rows: r.ratio for r in report.reads},
                "replay_ratio": ({kind: report.replay.ratio(kind) for kind in REPLAY_CHECKS}
                                 if report.replay is not None else None),
                "wrong_results": wrong_results(report), "argv": sys.argv[1:]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


# -- command line ----------------------------------------------------------------------------

PHASES = ("commit", "read", "replay")
#: The default run: the replay phase is asked for by name (it builds a 100,000-batch stream).
DEFAULT_PHASES = ("commit", "read")


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum`` (``_`` and ``,`` allowed)."""
    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", "").replace(",", ""))
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value
    return parse


def _names(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list of names from ``choices``."""
    def parse(text: str) -> list[str]:
        names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown name(s) {unknown}; choose from {', '.join(choices)}")
        return names
    return parse


def _sizes(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        values = []
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_streaming", description=(
        "Streaming batch commits (issue 14): s.write(batch_id, rows) against deltalake appends of the "
        "same batches, and a full read of the streamed table against one Parquet file."))
    parser.add_argument("--sizes", type=_sizes, default=[10, 100], help="rows per batch (default: 10,100)")
    parser.add_argument("--batches", type=_at_least(2), help=f"batches per size ({FULL.batches:,})")
    parser.add_argument("--window", type=_at_least(1), help=f"batches per window ({FULL.window:,})")
    parser.add_argument("--systems", type=_names((SUBJECT, DELTA)), default=[SUBJECT, DELTA],
                        help=f"comma-separated, from {SUBJECT},{DELTA} (default: both)")
    parser.add_argument("--delta-batches", type=_at_least(2),
                        help=f"deltalake stops after this many batches per size ({FULL.delta_batches:,})")
    parser.add_argument("--delta-budget", type=float,
                        help=f"... or after this many seconds of appends per size ({FULL.delta_budget_s:g})")
    parser.add_argument("--read-repeats", type=_at_least(1),
                        help=f"timed reads of each kind ({FULL.read_repeats})")
    parser.add_argument("--phases", type=_names(PHASES), default=list(DEFAULT_PHASES),
                        help="from commit,read,replay (default: commit,read; the read needs the commits' "
                        "tables, so it runs them too; replay runs only when named)")
    parser.add_argument("--replay-batches", type=_at_least(1),
                        help=f"batches of the replay phase's long stream ({FULL.replay_batches:,})")
    parser.add_argument("--replay-repeats", type=_at_least(1),
                        help=f"timed replay checks of each kind on each stream ({FULL.replay_repeats})")
    parser.add_argument("--profile", metavar="FILE",
                        help="also profile one read of each table with cProfile: stats to FILE.<rows>")
    parser.add_argument("--quick", action="store_true", help=(
        f"{QUICK.batches:,} batches per size, deltalake capped at {QUICK.delta_batches:,} batches or "
        f"{QUICK.delta_budget_s:g} s, a {QUICK.replay_batches:,}-batch replay stream checked "
        f"{QUICK.replay_repeats} times; explicit flags win"))
    parser.add_argument("--workdir", type=Path,
                        help="make the run's temporary folder inside this one (default: the system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the tables instead of removing them")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    preset = QUICK if args.quick else FULL
    batches = args.batches or preset.batches
    window = args.window or preset.window
    if 2 * window > batches:
        parser.error(f"--window {window} needs at least {2 * window} --batches")
    return args


def make_config(args: argparse.Namespace, workdir: Path) -> Config:
    """Explicit flags, else the --quick preset, else the full one."""
    preset = QUICK if args.quick else FULL

    def pick(value: T | None, default: T) -> T:
        return default if value is None else value

    return Config(sizes=args.sizes, batches=pick(args.batches, preset.batches),
                  window=pick(args.window, preset.window), systems=args.systems,
                  delta_batches=pick(args.delta_batches, preset.delta_batches),
                  delta_budget_s=pick(args.delta_budget, preset.delta_budget_s),
                  read_repeats=pick(args.read_repeats, preset.read_repeats),
                  replay_batches=pick(args.replay_batches, preset.replay_batches),
                  replay_repeats=pick(args.replay_repeats, preset.replay_repeats), phases=args.phases,
                  profile=args.profile, workdir=str(workdir))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    with run_folder(args.workdir, keep=args.keep, prefix="bench-streaming-", log=log) as folder:
        report = run_all(make_config(args, folder))
    return finish_run(report, markdown=render_markdown(report), out=args.out, write_json=write_json,
                      wrong=wrong_results(report), began=began, log=log)


if __name__ == "__main__":
    sys.exit(main())
