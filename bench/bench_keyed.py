"""Keyed tables at scale: metatxn's keyed writes and reads against deltalake and Lance, in one run.

The targets of issue 12 (item 7) and issue 27 (item 5), all but Spark's, each measured by its own
function below, every peer in the same run on the same data (TPC-H-orders-like rows from
``bench_mutations``: int64 key ``o_orderkey``, int64 customer key, string status,
``decimal(15, 2)`` price, date, string comment):

1. **Append** (``measure_appends``): a table of 6,000, one of 1M and one of 10M keys (keys in
   random order, built in appends of at most 1M rows), then ``--warmup`` untimed and ``--appends``
   timed 100-row appends of new keys through a kept handle, systems interleaved commit by
   commit: median, p99, and the 10M median over the 1M one; then ``--fresh-appends`` more, each
   through a handle opened for it (``txn.open_table(uri)`` then ``append``, as stateless jobs
   do; the open is timed with the append). metatxn keyed against Lance's and deltalake's plain
   appends (no key check), and metatxn unkeyed against Lance.
2. **Load** (``measure_loads``): one append of ``--load-rows`` rows into an empty table, keyed
   against unkeyed: an int64 key, and a composite key of two columns (``o_orderkey = k // 8``,
   ``o_linenumber = k % 8 + 1``), each with the rows in random key order and sorted by key.
   Lance and deltalake (int64 key) for scale.
3. **TPC-H lineitem** (``measure_lineitem``): ``lineitem`` from ``tpchgen-cli`` (scale ``--tpch-scale``)
   loaded in one append keyed by (``l_orderkey``, ``l_linenumber``): the bytes under
   ``_metadata/record_index/`` against the bytes of the live data files. Without tpchgen-cli, a
   synthetic table with the same key distribution (1.5M orders per scale unit, 1-7 lines each);
   the report says which.
4. **Lookup** (``measure_lookups``): 1,000 random existing keys, ``t.lookup(keys)`` on a warm
   handle, in the append phase's keyed tables and, with ``--large``, in a 100M-key table
   (100 appends of 1M rows, several minutes and a few GB of disk; left out of the default run).
5. **Upsert and delete** (``measure_mutations``): 1 % of a 1M-row table (half updates of random
   keys, half new keys) and a delete of a random 1 % key range, each timed on a fresh copy,
   with the base table's keys loaded in random order and in key order. metatxn ``upsert`` against
   Lance's ``merge_insert`` and deltalake's ``merge``.
6. **Count and open** (``measure_count_open``): ``txn.open_table`` / ``lance.dataset`` /
   ``DeltaTable``, then a count of the whole table on that handle; and open + list of the files
   (``snapshot().files()`` / ``get_fragments()`` / ``file_uris()``); on the
   append phase's 1M-key table (so after its appends): ``--count-repeats`` times in this process
   (whatever a library caches, it keeps) and ``--cold-repeats`` times in fresh processes, each
   of which first opens and counts (or lists) a small other table so that imports are not
   counted.
7. **Concurrent appends** (``measure_concurrent``): ``--writers`` processes append 100-row batches
   of their own keys to one table for ``--writer-seconds``, metatxn keyed and unkeyed, deltalake,
   Lance, each append through a handle opened for it (``--writer-handles fresh``, the default;
   ``kept``: one handle per process): commits/s, failed appends (raised), lost commits
   (reported committed but missing from the table) and extra ones (raised but landed). Each
   writer's first failure is printed in full on stderr.
8. **Flat rate and planning** (``measure_flat``): ``--flat-appends`` successive 100-row appends
   (10,000); milliseconds per commit of the first and last ``--flat-window`` (1,000), and open +
   plan (``snapshot().file_table()``) after 100 commits and after all of them. Lance runs
   alongside; deltalake only when named in ``--flat-systems`` (its appends slow down with the log:
   see the Commits section of bench/README.md).

metatxn's ``t.maintain()`` is called, untimed, after each table is built, where the Table has
one; the writes timed are plain ``append``/``upsert``/``delete`` calls, so upkeep that a commit
starts is part of what its caller waits for. Every result is checked untimed (row counts,
ranges gone, keys found); a wrong result is printed as WRONG and makes the exit status 1.
Otherwise the status is 0 whatever the figures: the targets are informational.

Run from the repository root::

    .venv/bin/python -m bench.bench_keyed            # full sizes (an estimated 20-35 min, a third of it flat)
    .venv/bin/python -m bench.bench_keyed --quick    # smaller sizes, a few minutes
    .venv/bin/python -m bench.bench_keyed --large    # also the 100M-key lookup
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import random
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):  # run as a file (python bench/bench_keyed.py): make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench._report import (
    LIBRARIES,
    Machine,
    _markdown_table,
    load_average,
    machine_facts,
    machine_section,
    run_folder,
)
from bench._systems import KEYED_SYSTEMS, KeyedSystem, MetatxnKeyed, SystemUnavailableError
from bench.bench_mutations import (
    KEY,
    MARKER_CUSTKEY,
    ORDERS,
    UpsertInput,
    at_least_option,
    delete_range,
    names_option,
    orders_for,
    permutation,
    upsert_input,
)

SUBJECT = "metatxn"
UNKEYED = "metatxn unkeyed"
#: metatxn keyed with ``maintenance.mode=async``: table maintenance on a background thread, so
#: an append returns at its commit point (appends only).
ASYNC = "metatxn async"
LANCE, DELTA = "lance", "deltalake"
VARIANTS = (SUBJECT, UNKEYED, LANCE, DELTA)  # metatxn keyed, metatxn with no key, and the peers
LINE = "o_linenumber"
COMPOSITE = pa.schema([*ORDERS, (LINE, pa.int32())])
LINEITEM_KEY = ["l_orderkey", "l_linenumber"]
APPEND_ROWS = 100
BUILD_CHUNK = 1_000_000  # rows per append when building a big table
LOOKUP_KEYS = 1_000
LARGE_LOOKUP = 100_000_000
#: The small keyed table of issue 27 (a key costs what it costs whatever the table's size).
SMALL_TABLE = 6_000
#: The count and open phase uses the append table nearest this size (the 1M one by default).
COUNT_TABLE = 1_000_000
#: How a writer gets its handle: opened once and kept, or opened again for every append (as a
#: stateless job does: ``txn.open_table(uri)`` then ``append``).
HANDLES = ("kept", "fresh")
#: Load cases: key kind x key order of the rows (random, or sorted by key).
LOAD_CASES = (("int64", "random"), ("int64", "sorted"), ("composite", "random"), ("composite", "sorted"))
PHASES = ("append", "load", "lineitem", "lookup", "mutate", "count", "concurrent", "flat")
T = TypeVar("T")


@dataclass(frozen=True)
class Preset:
    """Default sizes of a run; explicit command-line flags override each field."""

    append_sizes: tuple[int, ...]
    appends: int
    warmup: int
    load_rows: int
    load_repeats: int
    tpch_scale: float
    lookups: int
    mutation_rows: int
    mutation_repeats: int
    count_repeats: int
    cold_repeats: int
    writers: int
    writer_seconds: float
    flat_appends: int
    flat_window: int
    fresh_appends: int


FULL = Preset(append_sizes=(SMALL_TABLE, 1_000_000, 10_000_000), appends=150, warmup=5,
              load_rows=1_000_000, load_repeats=3, tpch_scale=1.0, lookups=20, mutation_rows=1_000_000,
              mutation_repeats=5, count_repeats=20, cold_repeats=5, writers=8, writer_seconds=20.0,
              flat_appends=10_000, flat_window=1_000, fresh_appends=50)
QUICK = Preset(append_sizes=(SMALL_TABLE, 100_000, 1_000_000), appends=40, warmup=3, load_rows=200_000,
               load_repeats=1, tpch_scale=0.1, lookups=10, mutation_rows=100_000, mutation_repeats=2,
               count_repeats=10, cold_repeats=3, writers=8, writer_seconds=5.0, flat_appends=500,
               flat_window=100, fresh_appends=15)


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the pasteable report."""
    print(message, file=sys.stderr, flush=True)


# -- data ------------------------------------------------------------------------------------

def composite(orders: pa.Table) -> pa.Table:
    """The same rows keyed by two columns: ``k`` becomes (``k // 8``, ``k % 8 + 1``), like order lines."""
    keys = orders.column(KEY)
    return (orders.set_column(0, KEY, pc.divide(keys, 8))
            .append_column(LINE, pc.add(pc.bit_wise_and(keys, 7), 1).cast(pa.int32())))


def new_keys(first: int, count: int) -> pa.Array:
    return pa.array(range(first, first + count), pa.int64())


def chunks(keys: pa.Array, size: int) -> Iterator[pa.Array]:
    for start in range(0, len(keys), size):
        yield keys.slice(start, size)


def lineitem(folder: Path, scale: float) -> tuple[pa.Table, str]:
    """TPC-H lineitem from tpchgen-cli, else a synthetic one with its key distribution; and which."""
    tool = Path(sys.executable).parent / "tpchgen-cli"
    command = str(tool) if tool.exists() else shutil.which("tpchgen-cli")
    if command:
        out = folder / "tpch"
        subprocess.run([command, "parquet", "-s", f"{scale:g}", "--tables", "lineitem",
                        "--output-dir", str(out)], check=True, capture_output=True)
        table = pq.read_table(out / "lineitem.parquet")
        # tpchgen writes string_view and Parquet field ids; a user loading it casts to plain strings.
        schema = pa.schema([pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type,
                                     nullable=f.nullable) for f in table.schema])
        shutil.rmtree(out, ignore_errors=True)
        return table.cast(schema), f"TPC-H SF{scale:g} lineitem from tpchgen-cli"
    return synthetic_lineitem(scale), (f"synthetic lineitem (tpchgen-cli not installed): "
                                       f"{int(1_500_000 * scale):,} orders of 1-7 lines")


def synthetic_lineitem(scale: float) -> pa.Table:
    """lineitem's keys (1.5M orders x scale, keyed like TPC-H's, 1-7 lines each) and some value columns."""
    orders = int(1_500_000 * scale)
    lines = np.random.default_rng(7).integers(1, 8, orders)
    ordinal = np.arange(orders, dtype=np.int64)
    order_keys = (ordinal // 8) * 32 + ordinal % 8 + 1  # TPC-H uses 8 of every 32 order keys
    starts = np.cumsum(lines) - lines
    rows = int(lines.sum())
    values = orders_for(pa.array(np.arange(rows, dtype=np.int64)), seed=11)
    return pa.table({
        "l_orderkey": np.repeat(order_keys, lines),
        "l_linenumber": (np.arange(rows) - np.repeat(starts, lines) + 1).astype(np.int32),
        "l_quantity": values.column("o_totalprice"),
        "l_shipdate": values.column("o_orderdate"),
        "l_returnflag": values.column("o_orderstatus"),
        "l_comment": values.column("o_comment"),
    })


def tree_bytes(folder: Path) -> tuple[int, int]:
    """Bytes and number of the files under ``folder`` (0, 0 if it does not exist)."""
    sizes = [p.stat().st_size for p in folder.rglob("*") if p.is_file()]
    return sum(sizes), len(sizes)


# -- results ---------------------------------------------------------------------------------

@dataclass
class Figure:
    """One measured quantity of one system: samples (ms, or s for loads), or why there are none."""

    samples: list[float] = field(default_factory=list)
    median: float | None = None
    p99: float | None = None
    skipped: str | None = None  # not run, or stopped: why
    wrong: str | None = None  # a check failed: the figure is not valid
    detail: str = ""

    def finish(self) -> None:
        if self.samples and self.wrong is None:
            self.median = statistics.median(self.samples)
            self.p99 = (self.samples[0] if len(self.samples) == 1 else
                        statistics.quantiles(self.samples, n=100, method="inclusive")[98])

    @property
    def valid(self) -> bool:
        return self.skipped is None and self.wrong is None


@dataclass
class Lineitem:
    source: str
    rows: int
    data_bytes: int
    data_files: int
    index_bytes: int
    index_files: int
    maintained: bool


@dataclass
class Concurrent:
    writers: int
    seconds: float
    commits: int
    failed: int
    lost: int  # commits a writer saw succeed whose rows are not in the table
    extra: int  # commits a writer saw fail whose rows are in the table
    errors: list[str] = field(default_factory=list)
    handles: str = "fresh"  # each append through a handle opened for it, or through one kept

    @property
    def per_second(self) -> float:
        return self.commits / self.seconds if self.seconds else 0.0


@dataclass
class Flat:
    commits: int
    window: int
    samples_ms: list[float]
    first_ms: float  # mean ms per commit over the first ``window`` appends
    last_ms: float
    plan_ms: dict[int, float]  # commits -> median open + plan


@dataclass
class Report:
    machine: Machine
    config: Config
    #: "phase/case" -> system -> figure, e.g. "append/1000000", "upsert/random", "open", "count"
    figures: dict[str, dict[str, Figure]] = field(default_factory=dict)
    lineitem: Lineitem | None = None
    lineitem_loads: dict[str, Figure] = field(default_factory=dict)
    concurrent: dict[str, Concurrent] = field(default_factory=dict)
    flat: dict[str, Flat] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # system -> why it did not run
    notes: list[str] = field(default_factory=list)
    builds: list[tuple[str, str, int, float]] = field(default_factory=list)  # system, table, rows, s

    def figure(self, key: str, system: str) -> Figure:
        return self.figures.setdefault(key, {}).setdefault(system, Figure())

    def value(self, key: str, system: str) -> float | None:
        found = self.figures.get(key, {}).get(system)
        return found.median if found is not None and found.valid else None


@dataclass(frozen=True)
class Config:
    systems: list[str]
    phases: list[str]
    append_sizes: list[int]
    appends: int
    warmup: int
    load_rows: int
    load_repeats: int
    tpch_scale: float
    lookup_sizes: list[int]
    lookups: int
    mutation_rows: int
    mutation_repeats: int
    count_repeats: int
    cold_repeats: int
    writers: int
    writer_seconds: float
    flat_appends: int
    flat_window: int
    flat_systems: list[str]
    workdir: str
    fresh_appends: int = 0
    writer_handles: list[str] = field(default_factory=lambda: ["fresh"])

    @property
    def count_size(self) -> int:
        """The append table the count and open phase reads: the one nearest ``COUNT_TABLE`` keys."""
        return min(self.append_sizes, key=lambda size: (abs(size - COUNT_TABLE), size))


# -- the run ---------------------------------------------------------------------------------

def make_variant(name: str, root: Path) -> KeyedSystem:
    """The adapter of one of VARIANTS over ``root``: "metatxn unkeyed" is metatxn with no record key."""
    if name == ASYNC:
        return MetatxnKeyed(root, keyed=True, properties={"maintenance.mode": "async"})
    return KEYED_SYSTEMS[SUBJECT if name == UNKEYED else name](root, keyed=name != UNKEYED)


class Run:
    """The systems of one run, the tables built so far (phases reuse them), and the report."""

    def __init__(self, config: Config, report: Report) -> None:
        self.config, self.report = config, report
        self.root = Path(config.workdir)
        self.systems: dict[str, KeyedSystem] = {}
        for name in config.systems:
            try:
                self.systems[name] = make_variant(name, self.root / name.replace(" ", "_"))
            except SystemUnavailableError as exc:
                report.skipped[name] = str(exc)
                log(f"{name}: skipped: {exc}")
        #: (system, size) -> (table, rows): the append phase's tables, reused by lookup and count
        self.grown: dict[tuple[str, int], tuple[str, int]] = {}

    def among(self, names: Sequence[str]) -> dict[str, KeyedSystem]:
        return {n: self.systems[n] for n in names if n in self.systems}

    def maintain(self, name: str, handle: Any) -> None:
        system = self.systems[name]
        if isinstance(system, MetatxnKeyed) and system.maintain(handle):
            log(f"  {name}: t.maintain() after the build")

    def build(self, systems: dict[str, KeyedSystem], table: str, batches: Iterator[pa.Table],
              schema: pa.Schema, key: list[str]) -> dict[str, Any]:
        """Create ``table`` in every system and append each batch to all of them; their handles."""
        handles: dict[str, Any] = {}
        seconds = dict.fromkeys(systems, 0.0)
        rows = 0
        for name, system in systems.items():
            handles[name] = system.create(table, schema, key)
        for batch in batches:
            rows += batch.num_rows
            for name, system in systems.items():
                began = time.perf_counter()
                system.append(handles[name], batch)
                seconds[name] += time.perf_counter() - began
        for name in systems:
            self.maintain(name, handles[name])
            self.report.builds.append((name, table, rows, seconds[name]))
            log(f"  {name}: built {table} ({rows:,} rows) in {seconds[name]:.1f} s")
        return handles

    def grow(self, names: Sequence[str], size: int) -> dict[str, Any]:
        """The ``size``-key tables of ``names`` (random key order), built in 1M-row appends; handles."""
        missing = {n: s for n, s in self.among(names).items() if (n, size) not in self.grown}
        if missing:
            log(f"building {size:,}-key tables: {', '.join(missing)}")
            keys = permutation(size, seed=size % 1_000_003)
            batches = (orders_for(chunk, seed=index) for index, chunk in
                       enumerate(chunks(keys, BUILD_CHUNK)))
            self.build(missing, f"grow_{size}", batches, ORDERS, [KEY])
            for name in missing:
                self.grown[(name, size)] = (f"grow_{size}", size)
        return {n: s.open(self.grown[(n, size)][0]) for n, s in self.among(names).items()
                if (n, size) in self.grown}


def _timed(action: Callable[..., T], *args: Any) -> tuple[float, T]:
    """Milliseconds taken by ``action(*args)``, and what it returned."""
    began = time.perf_counter()
    value = action(*args)
    return (time.perf_counter() - began) * 1e3, value


def _fail(figure: Figure, name: str, what: str) -> None:
    traceback.print_exc()
    exc = sys.exc_info()[1]
    figure.skipped = f"failed during {what}: {type(exc).__name__}: {exc}"
    log(f"  {name}: stopped: {figure.skipped}")


def _wrong(figure: Figure, name: str, message: str) -> None:
    figure.wrong = message
    log(f"  !!! WRONG RESULT: {name}: {message}")


def measure_appends(run: Run) -> None:
    """100-row appends of new keys to each append table, all systems interleaved per commit:
    through a kept handle, then (``--fresh-appends``) through a handle opened for each append."""
    config = run.config
    for size in config.append_sizes:
        handles = run.grow((*VARIANTS, ASYNC), size)
        table_rows = dict.fromkeys(handles, size)
        total = config.warmup + config.appends
        log(f"== append: {total} x {APPEND_ROWS} rows into {size:,} keys ({config.warmup} warm-up), "
            "kept handle")
        _append_rounds(run, f"append/{size}", handles, table_rows, size, range(total), config.warmup)
        if config.fresh_appends:
            fresh = {name: None for name in handles if name != ASYNC}
            log(f"== append: {config.fresh_appends} x {APPEND_ROWS} rows into {size:,} keys, a fresh handle "
                "(open, then append) each")
            _append_rounds(run, f"append-fresh/{size}", fresh, table_rows, size,
                           range(total, total + config.fresh_appends), 0)
        keys = (f"append/{size}", f"append-fresh/{size}")
        for name in handles:
            table = run.grown[(name, size)][0]
            found = run.systems[name].count(run.systems[name].open(table))
            if found != table_rows[name]:
                problem = f"{found:,} rows after the appends; expected {table_rows[name]:,}"
                for key in keys:
                    figure = run.report.figures.get(key, {}).get(name)
                    if figure is not None and figure.valid:
                        _wrong(figure, name, problem)
            run.grown[(name, size)] = (table, table_rows[name])
        for key in keys:
            for name, figure in run.report.figures.get(key, {}).items():
                figure.finish()
                if figure.median is not None:
                    log(f"  {name} ({key}): median {figure.median:.1f} ms, p99 {figure.p99:.1f} ms")


def _append_rounds(run: Run, key: str, handles: dict[str, Any], table_rows: dict[str, int], size: int,
                   indexes: range, warmup: int) -> None:
    """One 100-row append of new keys per system per index, systems taking turns; a handle of
    None means a fresh one for each append (``open`` timed with the append)."""
    for round_number, index in enumerate(indexes):
        batch = orders_for(new_keys(size + index * APPEND_ROWS, APPEND_ROWS), seed=index)
        order = list(handles)
        order = order[index % len(order):] + order[:index % len(order)]  # no system always first
        for name in order:
            figure = run.report.figure(key, name)
            if not figure.valid:
                continue
            system = run.systems[name]
            try:
                if handles[name] is None:
                    began = time.perf_counter()
                    system.append(system.open(run.grown[(name, size)][0]), batch)
                    ms = (time.perf_counter() - began) * 1e3
                else:
                    ms, _ = _timed(system.append, handles[name], batch)
            except Exception:
                _fail(figure, name, f"append #{index + 1}")
                continue
            table_rows[name] += APPEND_ROWS
            if round_number >= warmup:
                figure.samples.append(ms)


def measure_loads(run: Run) -> None:
    """One append of ``--load-rows`` rows into an empty table, keyed against unkeyed: an int64
    and a composite key, the rows in random key order and sorted by key."""
    config = run.config
    rows = config.load_rows
    log(f"== load: {rows:,} rows in one append, {config.load_repeats} repetition(s)")
    for repetition in range(config.load_repeats):
        shuffled = orders_for(permutation(rows, seed=77 + repetition), seed=500 + repetition)
        ordered = orders_for(pa.array(range(rows), pa.int64()), seed=500 + repetition)
        for kind, order in LOAD_CASES:
            data = shuffled if order == "random" else ordered
            table, schema, key = ((data, ORDERS, [KEY]) if kind == "int64"
                                  else (composite(data), COMPOSITE, [KEY, LINE]))
            names = VARIANTS if kind == "int64" else (SUBJECT, UNKEYED)
            for name, system in run.among(names).items():
                figure = run.report.figure(f"load/{kind}/{order}", name)
                if not figure.valid:
                    continue
                target = f"load_{kind}_{order}_{repetition}"
                try:
                    handle = system.create(target, schema, key)
                    ms, _ = _timed(system.append, handle, table)
                    found = system.count(system.open(target))
                except Exception:
                    _fail(figure, name, f"the {kind} load ({order} order)")
                    continue
                figure.samples.append(ms / 1e3)
                log(f"  {name}: {kind} load, {order} order, #{repetition + 1}: {ms / 1e3:.2f} s")
                if found != rows:
                    _wrong(figure, name, f"{found:,} rows after loading {rows:,}")
                shutil.rmtree(system.path(target), ignore_errors=True)
    for kind, order in LOAD_CASES:
        for figure in run.report.figures.get(f"load/{kind}/{order}", {}).values():
            figure.finish()


def measure_lineitem(run: Run) -> None:
    """lineitem keyed by (l_orderkey, l_linenumber): index bytes against data bytes; load times."""
    config = run.config
    log(f"== lineitem: generating scale {config.tpch_scale:g}")
    data, source = lineitem(run.root, config.tpch_scale)
    log(f"  {source}: {data.num_rows:,} rows")
    for name, system in run.among(VARIANTS).items():
        figure = run.report.lineitem_loads.setdefault(name, Figure())
        try:
            handle = system.create("lineitem", data.schema, LINEITEM_KEY)
            ms, _ = _timed(system.append, handle, data)
            figure.samples.append(ms / 1e3)
            figure.finish()
            log(f"  {name}: lineitem load {ms / 1e3:.2f} s")
            found = system.count(system.open("lineitem"))
            if found != data.num_rows:
                _wrong(figure, name, f"{found:,} rows after loading {data.num_rows:,}")
            if name == SUBJECT and isinstance(system, MetatxnKeyed):
                maintained = system.maintain(handle)
                files = system.open("lineitem").snapshot().files()
                index_bytes, index_files = tree_bytes(system.path("lineitem") / "_metadata" / "record_index")
                run.report.lineitem = Lineitem(
                    source=source, rows=data.num_rows, data_bytes=sum(f.size for f in files),
                    data_files=len(files), index_bytes=index_bytes, index_files=index_files,
                    maintained=maintained)
                log(f"  {name}: record index {index_bytes / 2**20:.1f} MiB in {index_files} files, "
                    f"data {sum(f.size for f in files) / 2**20:.1f} MiB")
        except Exception:
            _fail(figure, name, "the lineitem load")
        shutil.rmtree(system.path("lineitem"), ignore_errors=True)


def _check_found(found: pa.Table, keys: pa.Array) -> str | None:
    if found.num_rows != len(keys):
        return f"{found.num_rows} rows returned for {len(keys)} existing keys"
    return None


def measure_lookups(run: Run) -> None:
    """``t.lookup`` of 1,000 random existing keys on a warm handle, per table size."""
    config = run.config
    for size in config.lookup_sizes:
        handles = run.grow([SUBJECT], size)
        if SUBJECT not in handles:
            return
        figure = run.report.figure(f"lookup/{size}", SUBJECT)
        log(f"== lookup: {config.lookups} x {LOOKUP_KEYS:,} keys in {size:,}, warm handle")
        handle = handles[SUBJECT]
        try:
            handle.lookup(pa.array(random.Random(size).sample(range(size), LOOKUP_KEYS), pa.int64()))
            for repetition in range(config.lookups):
                keys = pa.array(random.Random(size + 1 + repetition).sample(range(size), LOOKUP_KEYS),
                                pa.int64())
                ms, found = _timed(handle.lookup, keys)
                figure.samples.append(ms)
                problem = _check_found(found, keys)
                if problem:
                    _wrong(figure, SUBJECT, problem)
                    break
        except Exception:
            _fail(figure, SUBJECT, "a lookup")
        figure.finish()
        if figure.median is not None:
            log(f"  {SUBJECT}: median {figure.median:.1f} ms, p99 {figure.p99:.1f} ms")


def _mutation_base(order: str, rows: int) -> Iterator[pa.Table]:
    """The keys 0..rows-1 in 4 appends: shuffled across all of them, or in key order."""
    keys = permutation(rows, seed=5) if order == "random" else pa.array(range(rows), pa.int64())
    for index, chunk in enumerate(chunks(keys, -(-rows // 4))):
        yield orders_for(chunk, seed=900 + index)


def measure_mutations(run: Run) -> None:
    """Upsert of 1 % and delete of a 1 % key range, each on a fresh copy; two key orders."""
    config = run.config
    rows = config.mutation_rows
    systems = run.among((SUBJECT, LANCE, DELTA))
    for order in ("random", "key"):
        base = f"mutate_{order}"
        log(f"== upsert and delete: 1 % of {rows:,} rows loaded in {order} order")
        run.build(systems, base, _mutation_base(order, rows), ORDERS, [KEY])
        for repetition in range(config.mutation_repeats):
            upsert = upsert_input(rows, repetition)
            low, high = delete_range(rows, repetition)
            for operation in ("upsert", "delete"):
                for name, system in systems.items():
                    figure = run.report.figure(f"{operation}/{order}", name)
                    if not figure.valid:
                        continue
                    fork = f"{base}_{operation}_{repetition}"
                    try:
                        shutil.copytree(system.path(base), system.path(fork))
                        handle = system.open(fork)
                        if operation == "upsert":
                            ms, _ = _timed(system.upsert, handle, upsert.data, [KEY])
                        else:
                            ms, _ = _timed(system.delete_range, handle, KEY, low, high)
                        figure.samples.append(ms)
                        log(f"  {name}: {operation} #{repetition + 1}: {ms:.1f} ms")
                        problem = (_check_upsert(system, fork, rows, upsert) if operation == "upsert"
                                   else _check_delete(system, fork, rows, low, high))
                        if problem:
                            _wrong(figure, name, problem)
                    except Exception:
                        _fail(figure, name, f"{operation} #{repetition + 1}")
                    shutil.rmtree(system.path(fork), ignore_errors=True)
        for operation in ("upsert", "delete"):
            for figure in run.report.figures.get(f"{operation}/{order}", {}).values():
                figure.finish()
        for system in systems.values():
            shutil.rmtree(system.path(base), ignore_errors=True)


def _check_upsert(system: KeyedSystem, table: str, rows: int, upsert: UpsertInput) -> str | None:
    handle = system.open(table)
    expected = rows + upsert.inserts
    found = system.count(handle)
    if found != expected:
        return (f"{found:,} rows after upserting {upsert.updates:,} + {upsert.inserts:,} new; "
                f"expected {expected:,}")
    marked = system.count(handle, pc.field("o_custkey") == MARKER_CUSTKEY)
    if marked != upsert.updates + upsert.inserts:
        return f"{marked:,} rows carry the upsert's values; expected {upsert.updates + upsert.inserts:,}"
    return None


def _check_delete(system: KeyedSystem, table: str, rows: int, low: int, high: int) -> str | None:
    handle = system.open(table)
    found = system.count(handle)
    if found != rows - (high - low):
        return (f"{found:,} rows after deleting [{low}, {high}) from {rows:,}; "
                f"expected {rows - (high - low):,}")
    left = system.count(handle, (pc.field(KEY) >= low) & (pc.field(KEY) < high))
    return f"{left:,} rows of the deleted range are still there" if left else None


def measure_count_open(run: Run) -> None:
    """Open a handle, then count the whole table through it; and open a handle and list the
    live data files: warm (in this process) and cold (a fresh process per sample)."""
    config = run.config
    size = config.count_size
    handles = run.grow((SUBJECT, LANCE, DELTA), size)
    log(f"== count and open: {config.count_repeats} in process, {config.cold_repeats} in fresh processes, "
        f"{size:,}-key table")
    for name in handles:
        system = run.systems[name]
        table, rows = run.grown[(name, size)]
        system.append(system.create("count_warmup", ORDERS, [KEY]), orders_for(new_keys(0, APPEND_ROWS), 1))
        files = system.list_files(table)
        for cold in (False, True):
            suffix = " cold" if cold else ""
            figures = [run.report.figure(what + suffix, name) for what in ("open", "count", "open+count")]
            listing = run.report.figure("open+list" + suffix, name)
            try:
                samples = (_cold_samples(name, system, table, config.cold_repeats) if cold
                           else _warm_samples(system, table, config.count_repeats))
                for open_ms, count_ms, found, list_ms, listed in samples:
                    for figure, ms in zip(figures, (open_ms, count_ms, open_ms + count_ms), strict=True):
                        figure.samples.append(ms)
                    listing.samples.append(list_ms)
                    if found != rows:
                        _wrong(figures[1], name, f"count() said {found:,}; the table holds {rows:,}")
                        break
                    if listed != files:
                        _wrong(listing, name, f"listed {listed:,} files, then {files:,}")
                        break
            except Exception:
                _fail(figures[1], name, f"open and count{suffix}")
                figures[0].skipped = figures[2].skipped = listing.skipped = figures[1].skipped
            for figure in (*figures, listing):
                figure.finish()
            if figures[0].median is not None and figures[1].median is not None:
                log(f"  {name}{suffix}: open {figures[0].median:.2f} ms, count {figures[1].median:.2f} ms, "
                    f"open + list {_fmt(listing.median, 2)} ms")


def _open_and_count(system: KeyedSystem, table: str) -> tuple[float, float, int]:
    """Milliseconds to open a handle and to count the table through it, and the count."""
    open_ms, handle = _timed(system.open, table)
    count_ms, found = _timed(system.count, handle)
    return open_ms, count_ms, found


#: One sample of the count and open phase: open ms, count ms, the count, open + list ms, files listed.
Sample = tuple[float, float, int, float, int]


def _warm_samples(system: KeyedSystem, table: str, repeats: int) -> list[Sample]:
    """In this process, after one untimed open and count and one listing: whatever the library
    caches, it keeps. Each sample: open, count, the count, open + list, the files listed."""
    system.count(system.open(table))
    system.list_files(table)
    samples = []
    for _ in range(repeats):
        list_ms, listed = _timed(system.list_files, table)
        samples.append((*_open_and_count(system, table), list_ms, listed))
    return samples


def _cold_open_count(name: str, root: str, table: str) -> tuple[float, float, int]:
    """In a fresh process: open and count a small other table first (untimed), then ``table``."""
    system = make_variant(name, Path(root))
    system.count(system.open("count_warmup"))  # imports and reader set-up, not about this table
    return _open_and_count(system, table)


def _cold_open_list(name: str, root: str, table: str) -> tuple[float, int]:
    """In a fresh process: open and list a small other table first (untimed), then ``table``."""
    system = make_variant(name, Path(root))
    system.list_files("count_warmup")
    return _timed(system.list_files, table)


def _cold_samples(name: str, system: KeyedSystem, table: str, repeats: int) -> list[Sample]:
    """One fresh spawned process per measurement (count, then list: two per sample), so no
    library can answer from a cache of this table."""
    context = multiprocessing.get_context("spawn")
    samples, root = [], str(system.path(table).parent)
    for _ in range(repeats):
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            counted = pool.submit(_cold_open_count, name, root, table).result()
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            listed = pool.submit(_cold_open_list, name, root, table).result()
        samples.append((*counted, *listed))
    return samples


# -- concurrent appends ------------------------------------------------------------------------

def _writer(name: str, root: str, table: str, index: int, seconds: float, ready: Any, start: Any,
            results: Any, fresh: bool = False) -> None:
    """One appending process: a warm-up commit, then appends of its own keys until the deadline,
    each through a handle opened for it (``fresh``, as a stateless job) or through one kept."""
    system = make_variant(name, Path(root))
    handle = system.open(table)
    template = orders_for(new_keys(0, APPEND_ROWS), seed=index)
    first = (index + 1) * 10**12

    def batch(number: int) -> pa.Table:
        return template.set_column(0, KEY, new_keys(first + number * APPEND_ROWS, APPEND_ROWS))

    system.append(handle, batch(0))
    ready.put(index)
    start.wait()
    began = time.perf_counter()
    committed: list[int] = []
    failed: list[int] = []
    errors: list[str] = []
    number = 1
    while time.perf_counter() - began < seconds:
        try:
            system.append(system.open(table) if fresh else handle, batch(number))
            committed.append(number)
        except Exception as exc:
            failed.append(number)
            if not errors:
                traceback.print_exc()  # the first failure of each writer in full, on stderr
            if len(errors) < 3:
                errors.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:400]}")
            handle = system.open(table)  # a writer that failed starts again from the table's state
        number += 1
    results.put((index, committed, failed, errors, time.perf_counter() - began))


def measure_concurrent(run: Run) -> None:
    """``--writers`` processes appending to one table, with each kind of handle of
    ``--writer-handles``: commits/s, failed, lost and extra commits."""
    for handles in run.config.writer_handles:
        for name, system in run.among((SUBJECT, UNKEYED, DELTA, LANCE)).items():
            _concurrent(run, name, system, handles)


def _concurrent(run: Run, name: str, system: KeyedSystem, handles: str) -> None:
    """One run of ``--writers`` processes of ``name`` on a new table, each appending through
    ``handles`` handles (``fresh``: one opened per append)."""
    config = run.config
    context = multiprocessing.get_context("spawn")
    log(f"== concurrent: {config.writers} {name} writers for {config.writer_seconds:g} s, {handles} handles")
    table = "concurrent"
    system.create(table, ORDERS, [KEY])
    ready, results, start = context.Queue(), context.Queue(), context.Event()
    processes = [context.Process(target=_writer, args=(name, str(system.path(table).parent), table, i,
                                                       config.writer_seconds, ready, start, results,
                                                       handles == "fresh"))
                 for i in range(config.writers)]
    for process in processes:
        process.start()
    try:
        for _ in processes:
            ready.get(timeout=300)
        start.set()
        outcomes = [results.get(timeout=config.writer_seconds + 600) for _ in processes]
    except Exception:
        traceback.print_exc()
        run.report.notes.append(
            f"{name} concurrent appends ({handles} handles): a writer did not finish ({sys.exc_info()[1]!r})")
        outcomes = []
    for process in processes:
        process.join(timeout=60)
        if process.is_alive():
            process.kill()
    if len(outcomes) == len(processes):
        present = _present_batches(system, table)
        warmups = {(i, 0) for i in range(config.writers)}
        committed = {(i, n) for i, done, _, _, _ in outcomes for n in done} | warmups
        failed = {(i, n) for i, _, lost, _, _ in outcomes for n in lost}
        result = Concurrent(
            writers=config.writers, seconds=max(o[4] for o in outcomes),
            commits=sum(len(o[1]) for o in outcomes), failed=len(failed),
            lost=len(committed - present), extra=len(failed & present),
            errors=sorted({e for o in outcomes for e in o[3]})[:3], handles=handles)
        run.report.concurrent[_concurrent_key(name, handles)] = result
        log(f"  {name}: {result.per_second:.1f} commits/s, {result.failed} failed, {result.lost} lost, "
            f"{result.extra} extra")
    shutil.rmtree(system.path(table), ignore_errors=True)


def _concurrent_key(name: str, handles: str) -> str:
    """The report's key of a concurrent run: the system, and its handles unless fresh (the default)."""
    return name if handles == "fresh" else f"{name}, {handles} handles"


def _present_batches(system: KeyedSystem, table: str) -> set[tuple[int, int]]:
    """(writer, batch number) of every complete batch in the table, from the keys it holds."""
    keys = system.read(system.open(table), [KEY]).column(KEY)
    batch = pc.divide(keys, APPEND_ROWS)  # keys of batch n of writer i are (i+1)*1e12 + n*100 + 0..99
    counts = pa.table({"b": batch}).group_by("b").aggregate([("b", "count")])
    return {(int(b) // 10**10 - 1, int(b) % 10**10)
            for b, c in zip(counts.column("b").to_pylist(), counts.column("b_count").to_pylist(), strict=True)
            if c == APPEND_ROWS}


# -- flat rate and planning ------------------------------------------------------------------

def measure_flat(run: Run) -> None:
    """``--flat-appends`` successive small appends; open + plan after 100 and after all of them."""
    config = run.config
    systems = run.among(config.flat_systems)
    marks = sorted({min(100, config.flat_appends), config.flat_appends})
    log(f"== flat: {config.flat_appends:,} appends of {APPEND_ROWS} rows, interleaved: {', '.join(systems)}")
    handles = {name: system.create("flat", ORDERS, [KEY]) for name, system in systems.items()}
    samples: dict[str, list[float]] = {name: [] for name in systems}
    plans: dict[str, dict[int, float]] = {name: {} for name in systems}
    failed: set[str] = set()
    template = orders_for(new_keys(0, APPEND_ROWS), seed=3)
    for index in range(config.flat_appends):
        batch = template.set_column(0, KEY, new_keys(index * APPEND_ROWS, APPEND_ROWS))
        for name, system in systems.items():
            if name in failed:
                continue
            try:
                ms, _ = _timed(system.append, handles[name], batch)
            except Exception:
                traceback.print_exc()
                run.report.notes.append(f"{name} flat appends stopped at #{index + 1}: {sys.exc_info()[1]!r}")
                failed.add(name)
                continue
            samples[name].append(ms)
            if index + 1 in marks:
                plans[name][index + 1] = statistics.median(
                    _timed(system.plan, "flat")[0] for _ in range(5))
        if (index + 1) % 1000 == 0:
            log(f"  {index + 1:,} appends: " + ", ".join(
                f"{n} {statistics.mean(s[-1000:]):.1f} ms" for n, s in samples.items() if s))
    window = config.flat_window
    for name in systems:
        found = samples[name]
        if name in failed or len(found) < 2 * window:
            continue
        run.report.flat[name] = Flat(commits=len(found), window=window, samples_ms=found,
                                     first_ms=statistics.mean(found[:window]),
                                     last_ms=statistics.mean(found[-window:]), plan_ms=plans[name])
        rows = systems[name].count(systems[name].open("flat"))
        if rows != len(found) * APPEND_ROWS:
            run.report.notes.append(f"WRONG: {name} flat table holds {rows:,} rows; "
                                    f"expected {len(found) * APPEND_ROWS:,}")


MEASURES: dict[str, Callable[[Run], None]] = {
    "append": measure_appends, "load": measure_loads, "lineitem": measure_lineitem,
    "lookup": measure_lookups, "mutate": measure_mutations, "count": measure_count_open,
    "concurrent": measure_concurrent, "flat": measure_flat,
}


def run_all(config: Config) -> Report:
    """Measure every phase asked for; a system or phase that cannot run is reported, not raised."""
    report = Report(machine=machine_facts((*LIBRARIES[:3], "pylance")), config=config)
    run = Run(config, report)
    for phase in config.phases:
        try:
            MEASURES[phase](run)
        except Exception:
            traceback.print_exc()
            report.notes.append(f"phase {phase} stopped: {sys.exc_info()[1]!r}")
    report.machine = replace(report.machine, load_at_end=load_average())
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


def _status(ok: bool | None) -> str:
    return "n/a" if ok is None else ("met" if ok else "missed")


def _at_most(goal: str, figure: str, ratio: float | None, bound: float, unit: str = "x") -> Target:
    return Target(goal, figure, _fmt(ratio, 2, unit), _status(None if ratio is None else ratio <= bound))


def _append_targets(report: Report) -> list[Target]:
    found: list[Target] = []
    sizes = report.config.append_sizes
    for size in sizes:
        key = f"append/{size}"
        ours, lance, delta = (report.value(key, n) for n in (SUBJECT, LANCE, DELTA))
        unkeyed = report.value(key, UNKEYED)
        mine = report.figures.get(key, {}).get(SUBJECT)
        p99 = mine.p99 if mine is not None and mine.valid else None
        background = report.figures.get(key, {}).get(ASYNC)
        async_median = background.median if background is not None and background.valid else None
        async_p99 = background.p99 if background is not None and background.valid else None
        found += [
            _at_most(f"keyed append @{size:,}: median within 1.5x Lance's", f"{_fmt(ours, 2)} vs "
                     f"{_fmt(lance, 2)} ms", _ratio(ours, lance), 1.5),
            _at_most(f"keyed append @{size:,}: median below deltalake's", f"{_fmt(ours, 2)} vs "
                     f"{_fmt(delta, 2)} ms", _ratio(ours, delta), 1.0 - 1e-9),
            _at_most(f"keyed append @{size:,}: p99 at most 2x the median", f"p99 {_fmt(p99, 2)} ms",
                     _ratio(p99, ours), 2.0),
            _at_most(f"keyed append @{size:,}, maintenance.mode=async: p99 at most 2x the median",
                     f"p99 {_fmt(async_p99, 2)} ms, median {_fmt(async_median, 2)} ms",
                     _ratio(async_p99, async_median), 2.0),
            _at_most(f"unkeyed append @{size:,}: median at or below Lance's", f"{_fmt(unkeyed, 2)} vs "
                     f"{_fmt(lance, 2)} ms", _ratio(unkeyed, lance), 1.0),
        ]
        if report.config.fresh_appends:
            fresh = report.value(f"append-fresh/{size}", SUBJECT)
            found.append(_at_most(f"keyed append @{size:,}, a fresh handle per append (open + append): "
                                  "median within 2x the kept handle's",
                                  f"{_fmt(fresh, 2)} vs {_fmt(ours, 2)} ms", _ratio(fresh, ours), 2.0))
    scaled = [size for size in sizes if size != SMALL_TABLE]  # the small table is its own case
    if len(scaled) >= 2:
        low, high = (report.value(f"append/{scaled[0]}", SUBJECT),
                     report.value(f"append/{scaled[-1]}", SUBJECT))
        found.append(_at_most(f"keyed append median @{scaled[-1]:,} within 1.3x @{scaled[0]:,}",
                              f"{_fmt(high, 2)} vs {_fmt(low, 2)} ms", _ratio(high, low), 1.3))
    return found


def _load_targets(report: Report) -> list[Target]:
    found = []
    for kind, order in LOAD_CASES:
        key = f"load/{kind}/{order}"
        keyed, plain = report.value(key, SUBJECT), report.value(key, UNKEYED)
        found.append(_at_most(f"keyed {report.config.load_rows:,}-row load ({kind} key, {order} order) "
                              "at most 1.5x unkeyed", f"{_fmt(keyed, 2)} vs {_fmt(plain, 2)} s",
                              _ratio(keyed, plain), 1.5))
    return found


def _lineitem_targets(report: Report) -> list[Target]:
    item = report.lineitem
    return [_at_most(
        "lineitem record index at most 25 % of the data's bytes",
        "-" if item is None else f"{item.index_bytes / 2**20:,.1f} vs {item.data_bytes / 2**20:,.1f} MiB",
        None if item is None else item.index_bytes / item.data_bytes, 0.25)]


def _lookup_targets(report: Report) -> list[Target]:
    found = []
    for size in report.config.lookup_sizes:
        bound = 20.0 if size <= 10_000_000 else 50.0
        median = report.value(f"lookup/{size}", SUBJECT)
        found.append(Target(f"lookup of 1,000 keys in {size:,}: at most {bound:g} ms (warm handle)",
                            f"{_fmt(median, 2)} ms", _fmt(_ratio(median, bound), 2, "x of bound"),
                            _status(None if median is None else median <= bound)))
    if LARGE_LOOKUP not in report.config.lookup_sizes:
        found.append(Target(f"lookup of 1,000 keys in {LARGE_LOOKUP:,}: at most 50 ms", "not run (--large)",
                            "-", "n/a"))
    return found


def _mutation_targets(report: Report) -> list[Target]:
    found = []
    for order in ("random", "key"):
        ours = report.value(f"upsert/{order}", SUBJECT)
        lance, delta = report.value(f"upsert/{order}", LANCE), report.value(f"upsert/{order}", DELTA)
        found.append(_at_most(f"upsert 1 % ({order} order) faster than Lance merge_insert",
                              f"{_fmt(ours)} vs {_fmt(lance)} ms", _ratio(ours, lance), 1.0 - 1e-9))
        speedup = _ratio(delta, ours)
        found.append(Target(f"upsert 1 % ({order} order) at least 5x faster than deltalake merge",
                            f"{_fmt(ours)} vs {_fmt(delta)} ms", _fmt(speedup, 2, "x faster"),
                            _status(None if speedup is None else speedup >= 5)))
        ours = report.value(f"delete/{order}", SUBJECT)
        for peer in (LANCE, DELTA):
            theirs = report.value(f"delete/{order}", peer)
            found.append(_at_most(f"delete 1 % key range ({order} order) faster than {peer}",
                                  f"{_fmt(ours)} vs {_fmt(theirs)} ms", _ratio(ours, theirs), 1.0 - 1e-9))
    return found


def _count_open_targets(report: Report) -> list[Target]:
    found = []
    for suffix, where in (("", "in process"), (" cold", "fresh process")):
        for what, label, bound in (("count", "count() of the whole table", 2.0),
                                   ("open", "open a handle", 2.0),
                                   ("open+count", "open a handle and count", 2.0),
                                   ("open+list", "open a handle and list the files", 1.0)):
            ours, lance = report.value(what + suffix, SUBJECT), report.value(what + suffix, LANCE)
            within = "at or below" if bound == 1.0 else f"within {bound:g}x"
            found.append(_at_most(f"{label} ({where}) {within} Lance's",
                                  f"{_fmt(ours, 2)} vs {_fmt(lance, 2)} ms", _ratio(ours, lance), bound))
    return found


def _concurrent_targets(report: Report) -> list[Target]:
    writers = report.config.writers
    found = []
    for handles, (name, label) in ((h, c) for h in report.config.writer_handles
                                   for c in ((SUBJECT, "keyed"), (UNKEYED, "unkeyed"))):
        delta = report.concurrent.get(_concurrent_key(DELTA, handles))
        ours = report.concurrent.get(_concurrent_key(name, handles))
        if ours is None and name == UNKEYED:
            continue
        label = f"{label}, {'a fresh handle per append' if handles == 'fresh' else 'handles kept'}"
        speedup = _ratio(ours.per_second if ours else None, delta.per_second if delta else None)
        found.append(Target(f"{writers} appending processes ({label}): at least 2x deltalake's commits/s",
                            f"{_fmt(ours.per_second if ours else None)} vs "
                            f"{_fmt(delta.per_second if delta else None)}/s",
                            _fmt(speedup, 2, "x"), _status(None if speedup is None else speedup >= 2)))
        found.append(Target(f"{writers} appending processes ({label}): 0 failed, 0 lost",
                            "-" if ours is None else
                            f"{ours.failed} failed, {ours.lost} lost, {ours.extra} extra", "-",
                            _status(None if ours is None else ours.failed == 0 and ours.lost == 0)))
    return found


def _flat_targets(report: Report) -> list[Target]:
    flat = report.flat.get(SUBJECT)
    if flat is None:
        return [Target("successive small appends at a flat rate", "not run", "-", "n/a"),
                Target("open + plan after many commits within 1.5x of after 100", "not run", "-", "n/a")]
    marks = sorted(flat.plan_ms)
    low, high = flat.plan_ms.get(marks[0]), flat.plan_ms.get(marks[-1])
    return [
        _at_most(f"{flat.commits:,} successive appends: last {flat.window:,} within 1.3x "
                 f"the first {flat.window:,}",
                 f"{flat.last_ms:.2f} vs {flat.first_ms:.2f} ms/commit", flat.last_ms / flat.first_ms, 1.3),
        _at_most(f"open + plan after {marks[-1]:,} commits within 1.5x of after {marks[0]:,}",
                 f"{_fmt(high, 2)} vs {_fmt(low, 2)} ms", _ratio(high, low), 1.5),
    ]


def targets(report: Report) -> list[Target]:
    """Issue 12's and issue 27's targets. Informational only: they never fail the run."""
    by_phase: dict[str, Callable[[Report], list[Target]]] = {
        "append": _append_targets, "load": _load_targets, "lineitem": _lineitem_targets,
        "lookup": _lookup_targets, "mutate": _mutation_targets, "count": _count_open_targets,
        "concurrent": _concurrent_targets, "flat": _flat_targets,
    }
    return [target for phase in report.config.phases for target in by_phase[phase](report)]


def _cell(figure: Figure | None, value: float | None, digits: int = 2) -> str:
    if figure is None:
        return "-"
    if figure.wrong:
        return "WRONG"
    if figure.skipped:
        return "failed" if figure.skipped.startswith("failed") else "n/a"
    return _fmt(value, digits)


def _append_section(report: Report) -> str:
    rows = []
    for size in report.config.append_sizes:
        for key, handle in ((f"append/{size}", "kept"), (f"append-fresh/{size}", "fresh")):
            by_system = report.figures.get(key, {})
            ours = report.value(key, SUBJECT)
            for name, figure in by_system.items():
                rows.append([f"{size:,}", handle, name, _cell(figure, figure.median),
                             _cell(figure, figure.p99), _fmt(_ratio(figure.p99, figure.median), 2),
                             "-" if name == SUBJECT else _fmt(_ratio(ours, figure.median), 2)])
    config = report.config
    title = (f"#### Append: {APPEND_ROWS} rows of new keys, {config.appends} timed after {config.warmup} "
             f"warm-up through a kept handle, then {config.fresh_appends} through a fresh handle each "
             "(open + append timed), systems interleaved")
    return "\n\n".join([title, _markdown_table(
        ["keys in table", "handle", "system", "median ms", "p99 ms", "p99/median", "metatxn keyed/system"],
        rows)])


def _load_section(report: Report) -> str:
    rows = []
    for kind, order in LOAD_CASES:
        plain = report.value(f"load/{kind}/{order}", UNKEYED)
        for name, figure in report.figures.get(f"load/{kind}/{order}", {}).items():
            rows.append([kind, order, name, _cell(figure, figure.median),
                         _fmt(_ratio(figure.median, plain), 2)])
    title = (f"#### Load: {report.config.load_rows:,} rows in one append (keys in random order, and sorted), "
             f"median of {report.config.load_repeats}")
    return "\n\n".join([title, _markdown_table(
        ["key", "order", "system", "seconds", "system/metatxn unkeyed"], rows)])


def _lineitem_section(report: Report) -> str:
    item = report.lineitem
    if item is None:
        return "#### TPC-H lineitem keyed by (l_orderkey, l_linenumber)\n\nnot measured (see Notes)"
    facts = _markdown_table(
        ["source", "rows", "data MiB (files)", "record index MiB (files)", "index/data"],
        [[item.source, f"{item.rows:,}", f"{item.data_bytes / 2**20:,.1f} ({item.data_files})",
          f"{item.index_bytes / 2**20:,.1f} ({item.index_files})",
          f"{item.index_bytes / item.data_bytes:.1%}"]])
    plain = report.lineitem_loads.get(UNKEYED)
    loads = _markdown_table(["system", "one-append load s", "system/metatxn unkeyed"], [
        [name, _cell(f, f.median), _fmt(_ratio(f.median, plain.median if plain else None), 2)]
        for name, f in report.lineitem_loads.items()])
    measured = ("after t.maintain()" if item.maintained else "as the load left it (Table has no maintain())")
    return "\n\n".join([
        "#### TPC-H lineitem keyed by (l_orderkey, l_linenumber), one append",
        facts, f"Record index: every file under `_metadata/record_index/`, {measured}; data: the live "
        "data files' sizes (`snapshot().files()`).", loads])


def _lookup_section(report: Report) -> str:
    rows = [[f"{size:,}", _cell(f, f.median), _cell(f, f.p99)] for size in report.config.lookup_sizes
            for f in [report.figures.get(f"lookup/{size}", {}).get(SUBJECT)] if f is not None]
    title = (f"#### Lookup: t.lookup of {LOOKUP_KEYS:,} random existing keys, warm handle, "
             f"{report.config.lookups} runs")
    return "\n\n".join([title, _markdown_table(["keys in table", "median ms", "p99 ms"], rows)])


def _mutation_section(report: Report) -> str:
    rows = []
    for operation in ("upsert", "delete"):
        for order in ("random", "key"):
            ours = report.value(f"{operation}/{order}", SUBJECT)
            for name, figure in report.figures.get(f"{operation}/{order}", {}).items():
                rows.append([operation, order, name, _cell(figure, figure.median, 1),
                             "-" if name == SUBJECT else _fmt(_ratio(figure.median, ours), 2)])
    rows_total = report.config.mutation_rows
    title = (f"#### Upsert of {rows_total // 100:,} rows (half updates, half new keys) and delete of a "
             f"{rows_total // 100:,}-key range, {rows_total:,}-row table; median of "
             f"{report.config.mutation_repeats} fresh copies")
    return "\n\n".join([title, _markdown_table(
        ["operation", "keys loaded in", "system", "median ms", "system/metatxn (speed-up)"], rows)])


def _count_open_section(report: Report) -> str:
    rows = []
    for suffix, where in (("", "in process"), (" cold", "fresh process")):
        for name in report.figures.get("open" + suffix, {}):
            cells, ratios = [], []
            for what in ("open", "count", "open+count", "open+list"):
                figure = report.figures.get(what + suffix, {}).get(name)
                cells.append(_cell(figure, figure.median if figure else None))
                ratios.append(_fmt(_ratio(report.value(what + suffix, SUBJECT),
                                          report.value(what + suffix, name)), 2))
            rows.append([where, name, *cells, *(["-"] * 4 if name == SUBJECT else ratios)])
    config = report.config
    title = (f"#### Open a handle, then count the whole table through it; open a handle and list the "
             f"files ({config.count_size:,}-key table after the appends; median of {config.count_repeats} in "
             f"this process after one untimed open, and of {config.cold_repeats} fresh processes that first "
             "opened another table)")
    return "\n\n".join([title, _markdown_table(
        ["where", "system", "open ms", "count ms", "open + count ms", "open + list ms", "metatxn/system open",
         "metatxn/system count", "metatxn/system open + count", "metatxn/system open + list"], rows)])


def _concurrent_section(report: Report) -> str:
    rows = [[name.split(",")[0], c.handles, str(c.writers), f"{c.seconds:.1f}", f"{c.commits:,}",
             f"{c.per_second:.1f}", str(c.failed), str(c.lost), str(c.extra), "; ".join(c.errors) or "-"]
            for name, c in report.concurrent.items()]
    title = (f"#### {report.config.writers} processes appending {APPEND_ROWS}-row batches of their own keys "
             f"to one table for {report.config.writer_seconds:g} s (fresh handles: each append opens the "
             "table first)")
    return "\n\n".join([title, _markdown_table(
        ["system", "handles", "writers", "seconds", "commits", "commits/s", "failed", "lost", "extra",
         "errors"], rows)])


def _flat_section(report: Report) -> str:
    rows = []
    for name, flat in report.flat.items():
        marks = sorted(flat.plan_ms)
        rows.append([name, f"{flat.commits:,}", f"{flat.first_ms:.2f}", f"{flat.last_ms:.2f}",
                     f"{flat.last_ms / flat.first_ms:.2f}",
                     " / ".join(f"{flat.plan_ms[m]:.2f}" for m in marks),
                     _fmt(_ratio(flat.plan_ms[marks[-1]], flat.plan_ms[marks[0]]), 2)])
    marks_text = " / ".join(f"@{m:,}" for m in sorted(next(iter(report.flat.values())).plan_ms)) \
        if report.flat else "-"
    window = report.config.flat_window
    title = (f"#### {report.config.flat_appends:,} successive {APPEND_ROWS}-row appends; open + plan "
             "(fresh handle, in process, median of 5)")
    return "\n\n".join([title, _markdown_table(
        ["system", "commits", f"first {window:,} ms/commit", f"last {window:,} ms/commit", "last/first",
         f"open + plan ms {marks_text}", "ratio"], rows)])


def _build_section(report: Report) -> str:
    rows = [[name, table, f"{rows:,}", f"{seconds:.1f}"] for name, table, rows, seconds in report.builds]
    return "\n\n".join(["#### Building the tables (untimed for the figures above)",
                        _markdown_table(["system", "table", "rows", "seconds of appends"], rows)])


def _targets_section(report: Report) -> str:
    rows = [[t.goal, t.figure, t.ratio, t.status] for t in targets(report)]
    return "\n\n".join(["#### Targets (issues 12 and 27, informational)",
                        _markdown_table(["target", "figure", "ratio", "met?"], rows)])


def _calls_section(report: Report) -> str:
    names = [n for n in (SUBJECT, LANCE, DELTA) if n in report.config.systems and n not in report.skipped]
    lines = [f"- {name} {operation}: `{call}`" for name in names
             for operation, call in KEYED_SYSTEMS[name].calls.items()]
    return "\n".join(["#### Calls", "", *lines])


def wrong_results(report: Report) -> list[str]:
    found = [f"{name} {key}: {f.wrong}" for key, by_system in report.figures.items()
             for name, f in by_system.items() if f.wrong]
    found += [f"{name} lineitem: {f.wrong}" for name, f in report.lineitem_loads.items() if f.wrong]
    found += [f"{name} concurrent: {c.lost} lost commits" for name, c in report.concurrent.items() if c.lost]
    found += [n for n in report.notes if n.startswith("WRONG")]
    return found


def _notes_section(report: Report) -> str:
    lines = [f"- {name} skipped: {why}" for name, why in report.skipped.items()]
    lines += [f"- {name} {key}: {f.skipped}" for key, by_system in report.figures.items()
              for name, f in by_system.items() if f.skipped]
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
    phases = report.config.phases
    optional = [("append", _append_section), ("load", _load_section), ("lineitem", _lineitem_section),
                ("lookup", _lookup_section), ("mutate", _mutation_section), ("count", _count_open_section),
                ("concurrent", _concurrent_section), ("flat", _flat_section)]
    sections += [render(report) for phase, render in optional if phase in phases]
    sections += [_targets_section(report), _build_section(report), _calls_section(report)]
    notes = _notes_section(report)
    return "\n\n".join([*sections, *([notes] if notes else [])]) + "\n"


def write_json(report: Report, path: Path) -> None:
    """The report and its targets as JSON (samples included, for later analysis)."""
    document = {**dataclasses.asdict(report), "targets": [dataclasses.asdict(t) for t in targets(report)],
                "wrong_results": wrong_results(report), "argv": sys.argv[1:]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


# -- command line ----------------------------------------------------------------------------

def sizes_option(text: str) -> list[int]:
    """An argparse type: comma-separated sizes of at least 1,000, ascending."""
    try:
        values = sorted({int(part.replace("_", "")) for part in text.split(",") if part.strip()})
    except ValueError:
        values = []
    if not values or values[0] < LOOKUP_KEYS:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers >= {LOOKUP_KEYS}, got {text!r}")
    return values


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_keyed", description=(
        "Keyed tables at scale (issues 12 and 27): metatxn keyed and unkeyed against Lance and deltalake."))
    parser.add_argument("--systems", type=names_option((*VARIANTS, ASYNC)), default=[*VARIANTS, ASYNC],
                        help=f"comma-separated, from {','.join(VARIANTS)} (default: all)")
    parser.add_argument("--phases", type=names_option(PHASES), default=list(PHASES),
                        help=f"comma-separated, from {','.join(PHASES)} (default: all)")
    parser.add_argument("--append-sizes", type=sizes_option,
                        help=f"keys in the append tables (default: {','.join(map(str, FULL.append_sizes))})")
    parser.add_argument("--appends", type=at_least_option(2), help=f"timed appends per size ({FULL.appends})")
    parser.add_argument("--warmup", type=at_least_option(0),
                        help=f"untimed appends before them ({FULL.warmup})")
    parser.add_argument("--fresh-appends", type=at_least_option(0),
                        help=f"timed appends per size through a handle opened for each, after the others "
                             f"({FULL.fresh_appends}; 0: none)")
    parser.add_argument("--load-rows", type=at_least_option(1_000),
                        help=f"rows of a load ({FULL.load_rows:,})")
    parser.add_argument("--load-repeats", type=at_least_option(1), help=f"loads timed ({FULL.load_repeats})")
    parser.add_argument("--tpch-scale", type=float, help=f"lineitem scale factor ({FULL.tpch_scale:g})")
    parser.add_argument("--lookups", type=at_least_option(1), help=f"timed lookups per size ({FULL.lookups})")
    parser.add_argument("--mutation-rows", type=at_least_option(200),
                        help=f"rows of the upsert/delete table ({FULL.mutation_rows:,})")
    parser.add_argument("--mutation-repeats", type=at_least_option(1),
                        help=f"upserts and deletes timed, each on a fresh copy ({FULL.mutation_repeats})")
    parser.add_argument("--count-repeats", type=at_least_option(1),
                        help=f"opens and counts ({FULL.count_repeats})")
    parser.add_argument("--cold-repeats", type=at_least_option(1),
                        help=f"opens and counts in fresh processes ({FULL.cold_repeats})")
    parser.add_argument("--writers", type=at_least_option(1), help=f"appending processes ({FULL.writers})")
    parser.add_argument("--writer-seconds", type=float,
                        help=f"how long they append ({FULL.writer_seconds:g})")
    parser.add_argument("--writer-handles", type=names_option(HANDLES), default=["fresh"],
                        help="how each appending process gets its handle, comma-separated: fresh (open the "
                             "table for every append, as stateless jobs do; the default), kept (open once)")
    parser.add_argument("--flat-appends", type=at_least_option(200),
                        help=f"successive appends ({FULL.flat_appends:,})")
    parser.add_argument("--flat-window", type=at_least_option(1),
                        help=f"appends compared at each end ({FULL.flat_window:,})")
    parser.add_argument("--flat-systems", type=names_option((SUBJECT, LANCE, DELTA)),
                        default=[SUBJECT, LANCE],
                        help="systems of the flat-rate phase (default: metatxn,lance; deltalake's appends "
                             "slow down with its log, so 10,000 of them take long)")
    parser.add_argument("--quick", action="store_true", help=(
        f"sizes / 10: append tables {','.join(map(str, QUICK.append_sizes))}, {QUICK.appends} appends, "
        f"{QUICK.flat_appends:,} flat appends, lineitem SF{QUICK.tpch_scale:g}; explicit flags win"))
    parser.add_argument("--large", action="store_true", help=(
        f"also the lookup in {LARGE_LOOKUP:,} keys: a metatxn table built by 100 appends of 1M rows "
        "(several minutes, a few GB under --workdir)"))
    parser.add_argument("--workdir", type=Path,
                        help="make the run's temporary folder inside this one (default: the system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the tables instead of removing them")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    flat_appends = args.flat_appends or (QUICK if args.quick else FULL).flat_appends
    flat_window = args.flat_window or (QUICK if args.quick else FULL).flat_window
    if 2 * flat_window > flat_appends:
        parser.error(f"--flat-window {flat_window} needs at least {2 * flat_window} --flat-appends")
    return args


def _flag_or(value: T | None, default: T) -> T:
    return default if value is None else value


def make_config(args: argparse.Namespace, workdir: Path) -> Config:
    """Explicit flags, else the --quick preset, else the full one."""
    preset = QUICK if args.quick else FULL
    append_sizes = _flag_or(args.append_sizes, list(preset.append_sizes))
    return Config(
        systems=args.systems, phases=args.phases, append_sizes=append_sizes,
        appends=_flag_or(args.appends, preset.appends), warmup=_flag_or(args.warmup, preset.warmup),
        load_rows=_flag_or(args.load_rows, preset.load_rows),
        load_repeats=_flag_or(args.load_repeats, preset.load_repeats),
        tpch_scale=_flag_or(args.tpch_scale, preset.tpch_scale),
        lookup_sizes=[*append_sizes, *([LARGE_LOOKUP] if args.large else [])],
        lookups=_flag_or(args.lookups, preset.lookups),
        mutation_rows=_flag_or(args.mutation_rows, preset.mutation_rows),
        mutation_repeats=_flag_or(args.mutation_repeats, preset.mutation_repeats),
        count_repeats=_flag_or(args.count_repeats, preset.count_repeats),
        cold_repeats=_flag_or(args.cold_repeats, preset.cold_repeats),
        writers=_flag_or(args.writers, preset.writers),
        writer_seconds=_flag_or(args.writer_seconds, preset.writer_seconds),
        flat_appends=_flag_or(args.flat_appends, preset.flat_appends),
        flat_window=_flag_or(args.flat_window, preset.flat_window),
        flat_systems=[n for n in args.flat_systems if n in args.systems],
        workdir=str(workdir),
        fresh_appends=_flag_or(args.fresh_appends, preset.fresh_appends),
        writer_handles=args.writer_handles,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    with run_folder(args.workdir, keep=args.keep, prefix="bench-keyed-", log=log) as folder:
        report = run_all(make_config(args, folder))
    print(render_markdown(report), end="")
    if args.out:
        write_json(report, args.out)
        log(f"wrote {args.out}")
    log(f"run took {(time.monotonic() - began) / 60:.1f} min")
    wrong = wrong_results(report)
    if wrong:
        log("WRONG RESULTS (exit status 1):\n" + "\n".join(f"  {w}" for w in wrong))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
