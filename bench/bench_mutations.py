"""Mutation benchmark: upsert, delete and key lookup; metatxn against deltalake and pyiceberg, in one run.

What is measured, on TPC-H-orders-like data (int64 key ``o_orderkey``, int64 customer key, string
status, ``decimal(15, 2)`` price, date, string comment), identical for every system:

1. **Upsert of 1 %.** A ``--rows`` table (default 1,000,000) is built, untimed, by ``--loads``
   appends (default 4) of keys in random order. Each repetition takes a *fresh copy* of that
   table and times one upsert of ``rows / 100`` rows: half update existing keys drawn at random,
   half insert new keys drawn at random; the keys are fresh in every repetition (and the same for
   every system). Median and p90 over ``--repeats`` repetitions (default 5).
2. **Delete of 1 % by key range.** Same table, same fresh-copy scheme: each repetition deletes
   ``o_orderkey`` in ``[a, a + rows / 100)`` for a fresh random ``a``. The keys were loaded in
   random order, so the range is spread over every data file: no system can prune a file by key
   statistics, and each must find and remove rows from inside all of them.
3. **Key lookup latency.** A metatxn table of ``--lookup-rows`` (default 10,000,000) keyed rows,
   built by ``--lookup-loads`` appends (default 10, so the metadata table has compacted the
   record index into base files), is asked for ``--lookup-keys`` (default 1,000) random existing
   keys with ``t.lookup(keys)``, ``--lookups`` times (default 20) with fresh keys each time: on a
   freshly opened handle (``txn.open_table`` is inside the timing) and on a warm handle kept open.
   The peers have no key index: for scale, the time they take to find the same keys by a
   filtered scan of the key column is reported, labelled as such (``--scan-repeats``, 0 skips
   it and the peers' 10M-row builds).

| system    | upsert                                                   | delete                   |
|-----------|----------------------------------------------------------|--------------------------|
| metatxn   | ``t.upsert(batch)``                                      | ``t.delete(where=expr)`` |
| deltalake | ``dt.merge(batch, ...)``, update all matched, insert all | ``dt.delete(predicate)`` |
| pyiceberg | ``table.upsert(batch, join_cols=["o_orderkey"])``        | ``table.delete(filter)`` |

A fresh copy is a directory copy for metatxn and deltalake (both keep relative paths) and, for
pyiceberg, the base table's metadata file registered in the sqlite catalog under a new name (the
copy shares the base data files, which nothing deletes). The copy is opened untimed: deltalake's
``DeltaTable(uri)`` loads the log when it is built, pyiceberg's ``load_table`` reads the metadata
file, and metatxn's ``open_table`` reads only ``table.json`` (resolving the snapshot is inside the
timed operation). Systems run interleaved within each repetition, so a change in machine load
hits all of them alike.

Every result is checked, untimed: after an upsert the table holds ``rows + inserts`` rows and
exactly the upserted rows carry the batch's marker; after a delete it holds ``rows - deleted``
rows and none in the range; a lookup returns every key asked for. A wrong result is printed in
the report as WRONG and makes the exit status 1. Otherwise the exit status is 0 whatever the
figures: the targets (metatxn's upsert at least 5x and its delete at least 3x faster than
deltalake's, its lookup median under 100 ms) are informational.

Run from the repository root::

    .venv/bin/python -m bench.bench_mutations            # the full spec (a few minutes)
    .venv/bin/python -m bench.bench_mutations --quick    # smoke run (under a minute)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, ClassVar, TypeVar

if __package__ in (None, ""):  # run as a file (python bench/bench_mutations.py): make `bench` importable
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
from bench._systems import PEER_HINT, SystemUnavailableError

SUBJECT = "metatxn"
PEERS = ("deltalake", "pyiceberg")
KEY = "o_orderkey"
ORDERS = pa.schema([
    (KEY, pa.int64()),
    ("o_custkey", pa.int64()),
    ("o_orderstatus", pa.string()),
    ("o_totalprice", pa.decimal128(15, 2)),
    ("o_orderdate", pa.date32()),
    ("o_comment", pa.string()),
])
#: Upserted rows carry this customer key, which the generated data never uses (it draws 1..149,999),
#: so counting it checks that every update landed and every insert arrived, once.
MARKER_CUSTKEY = 0
UPSERT_TARGET = 5.0  # deltalake merge time / metatxn upsert time, at least
DELETE_TARGET = 3.0  # deltalake delete time / metatxn delete time, at least
LOOKUP_TARGET_MS = 100.0  # metatxn lookup median, under
T = TypeVar("T")


@dataclass(frozen=True)
class Preset:
    """Default sizes of a run; explicit command-line flags override each field."""

    rows: int
    loads: int
    repeats: int
    lookup_rows: int
    lookup_loads: int
    lookup_keys: int
    lookups: int
    scan_repeats: int


FULL = Preset(rows=1_000_000, loads=4, repeats=5, lookup_rows=10_000_000, lookup_loads=10,
              lookup_keys=1_000, lookups=20, scan_repeats=5)
QUICK = Preset(rows=100_000, loads=4, repeats=3, lookup_rows=1_000_000, lookup_loads=10,
               lookup_keys=1_000, lookups=10, scan_repeats=3)
PHASES = ("upsert", "delete", "lookup")


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the pasteable report."""
    print(message, file=sys.stderr, flush=True)


# -- data ------------------------------------------------------------------------------------

_WORDS = ("furiously", "regular", "deposits", "sleep", "carefully", "final", "packages", "boost",
          "blithely", "ironic", "accounts", "haggle", "quickly", "express", "requests", "nag")
_COMMENTS = pa.array([" ".join(random.Random(i).choices(_WORDS, k=3 + i % 7)) for i in range(4096)])
_STATUSES = pa.array(["F", "O", "P"])
_FIRST_DAY = 8035  # 1992-01-01 in days since the epoch


def _uniform_ints(count: int, low: int, high: int, seed: int) -> pa.Array:
    """``count`` int64 values drawn uniformly from ``[low, high)``, reproducibly."""
    draws = pc.multiply(pc.random(count, initializer=seed), float(high - low))
    return pc.add(pc.floor(draws).cast(pa.int64()), low)


def permutation(count: int, seed: int) -> pa.Array:
    """The integers ``0 .. count-1`` in a random order (int64)."""
    return pc.sort_indices(pc.random(count, initializer=seed)).cast(pa.int64())


def orders_for(keys: pa.Array, seed: int, *, custkey: int | None = None) -> pa.Table:
    """Orders with these keys; every other column is drawn from ``seed``.

    Built column-wise with pyarrow compute (numpy is not a dependency), about 0.5 s per million rows.
    """
    count = len(keys)
    cents = _uniform_ints(count, 90_000, 55_000_000, seed)
    price = pc.divide(cents.cast(pa.decimal128(19, 0)), pa.scalar(Decimal(100), pa.decimal128(3, 0)))
    return pa.table({
        KEY: keys.cast(pa.int64()),
        "o_custkey": (_uniform_ints(count, 1, 150_000, seed + 1) if custkey is None
                      else pa.array([custkey] * count, pa.int64())),
        "o_orderstatus": _STATUSES.take(_uniform_ints(count, 0, len(_STATUSES), seed + 2)),
        "o_totalprice": price.cast(ORDERS.field("o_totalprice").type),
        "o_orderdate": pc.add(_uniform_ints(count, 0, 2_405, seed + 3), _FIRST_DAY)
                         .cast(pa.int32()).cast(pa.date32()),
        "o_comment": _COMMENTS.take(_uniform_ints(count, 0, len(_COMMENTS), seed + 4)),
    }, schema=ORDERS)


def loads(rows: int, count: int, seed: int) -> Iterator[pa.Table]:
    """The keys ``0 .. rows-1`` in random order, cut into ``count`` batches of orders."""
    keys = permutation(rows, seed)
    size = -(-rows // count)
    for index, start in enumerate(range(0, rows, size)):
        yield orders_for(keys.slice(start, size), seed * 1000 + index * 10)


@dataclass(frozen=True)
class UpsertInput:
    data: pa.Table
    updates: int
    inserts: int


def upsert_input(rows: int, repetition: int) -> UpsertInput:
    """1 % of ``rows``: half random existing keys, half random new keys (above ``rows``), shuffled."""
    total = max(2, rows // 100)
    rng = random.Random(1_000 + repetition)
    updates = total // 2
    keys = rng.sample(range(rows), updates) + rng.sample(range(rows, 2 * rows), total - updates)
    rng.shuffle(keys)
    return UpsertInput(orders_for(pa.array(keys, pa.int64()), 50_000 + repetition * 10,
                                  custkey=MARKER_CUSTKEY), updates, total - updates)


def delete_range(rows: int, repetition: int) -> tuple[int, int]:
    """``[low, high)`` of 1 % of ``rows`` contiguous keys, placed at random."""
    width = max(1, rows // 100)
    low = random.Random(2_000 + repetition).randrange(0, rows - width + 1)
    return low, low + width


def lookup_keys(rows: int, count: int, repetition: int) -> pa.Array:
    return pa.array(random.Random(3_000 + repetition).sample(range(rows), count), pa.int64())


# -- systems ---------------------------------------------------------------------------------

def _require(module: str, hint: str = PEER_HINT) -> Any:
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise SystemUnavailableError(f"not installed ({hint}): {exc}") from None


class NotAvailableError(Exception):
    """The system lacks the operation (metatxn while it is being written): reported, not an error."""


class Mutations:
    """One table format: build tables, fork fresh copies, mutate them, and count (untimed) to check.

    Tables are named; every adapter keeps everything it writes inside its ``root`` folder.
    """

    name: ClassVar[str]
    calls: ClassVar[dict[str, str]]  # phase -> the call timed, for the report
    note: ClassVar[str] = ""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def check(self, phase: str) -> None:
        """Raise NotAvailableError if the system cannot run ``phase``."""

    def build(self, name: str, batches: Iterator[pa.Table]) -> None:
        raise NotImplementedError

    def fork(self, base: str, name: str) -> Any:
        """A fresh copy of table ``base`` called ``name``, opened (untimed)."""
        raise NotImplementedError

    def drop(self, name: str) -> None:
        shutil.rmtree(self.root / name, ignore_errors=True)

    def open(self, name: str) -> Any:
        raise NotImplementedError

    def upsert(self, handle: Any, data: pa.Table) -> Any:
        raise NotImplementedError

    def delete(self, handle: Any, low: int, high: int) -> Any:
        raise NotImplementedError

    def count(self, name: str, where: Any = None) -> int:
        """Live rows of table ``name``, read from storage; ``where`` is a pc.Expression."""
        raise NotImplementedError

    def scan_for(self, handle: Any, keys: pa.Array) -> pa.Table:
        """Find ``keys`` without an index: a filtered scan of the key column."""
        raise NotImplementedError

    def effect(self, result: Any, name: str) -> str:
        """What the timed call changed, in the system's own words (untimed, first repetition)."""
        return ""


class MetatxnMutations(Mutations):
    name = SUBJECT
    calls: ClassVar[dict[str, str]] = {
        "upsert": "t.upsert(batch)",
        "delete": "t.delete(where=(pc.field(k) >= a) & (pc.field(k) < b))",
        "lookup": "t.lookup(pa.array(keys))",
    }
    note = "keyed table (record_key='o_orderkey'), default properties"
    _methods: ClassVar[dict[str, str]] = {"upsert": "upsert", "delete": "delete", "lookup": "lookup"}

    def __init__(self, root: Path) -> None:
        self.txn = _require("txn", hint="pip install -e . from the repository root")
        if not hasattr(self.txn.Table, "append"):
            raise SystemUnavailableError("txn.Table has no append() yet")
        super().__init__(root)

    def check(self, phase: str) -> None:
        method = self._methods[phase]
        if not callable(getattr(self.txn.Table, method, None)):
            raise NotAvailableError(f"txn.Table has no {method}() yet")

    def build(self, name: str, batches: Iterator[pa.Table]) -> None:
        table = self.txn.create_table(str(self.root / name), ORDERS, record_key=KEY)
        for batch in batches:
            table.append(batch)

    def fork(self, base: str, name: str) -> Any:
        shutil.copytree(self.root / base, self.root / name)
        return self.open(name)

    def open(self, name: str) -> Any:
        return self.txn.open_table(str(self.root / name))

    def upsert(self, handle: Any, data: pa.Table) -> Any:
        return handle.upsert(data)

    def delete(self, handle: Any, low: int, high: int) -> Any:
        return handle.delete(where=(pc.field(KEY) >= low) & (pc.field(KEY) < high))

    def lookup(self, handle: Any, keys: pa.Array) -> pa.Table:
        return handle.lookup(keys)

    def count(self, name: str, where: Any = None) -> int:
        return int(self.open(name).snapshot().count(filter=where))

    def scan_for(self, handle: Any, keys: pa.Array) -> pa.Table:
        return handle.to_arrow(filter=pc.field(KEY).isin(keys), columns=[KEY])

    def effect(self, result: Any, name: str) -> str:
        if result is None:
            return "no commit"
        return (f"files_added={getattr(result, 'files_added', '?')}, "
                f"rows_added={getattr(result, 'rows_added', '?')}, "
                f"rows_deleted={getattr(result, 'rows_deleted', '?')}")


class DeltalakeMutations(Mutations):
    name = "deltalake"
    calls: ClassVar[dict[str, str]] = {
        "upsert": "dt.merge(batch, 't.o_orderkey = s.o_orderkey', 's', 't')"
                  ".when_matched_update_all().when_not_matched_insert_all().execute()",
        "delete": "dt.delete('o_orderkey >= a AND o_orderkey < b')",
        "lookup": "dt.to_pyarrow_dataset().to_table(filter=pc.field(k).isin(keys), columns=[k])",
    }
    note = "write_deltalake(mode='append') to build; default table config (no deletion vectors)"

    def __init__(self, root: Path) -> None:
        self._deltalake = _require("deltalake")
        super().__init__(root)

    def build(self, name: str, batches: Iterator[pa.Table]) -> None:
        uri = str(self.root / name)
        table = self._deltalake.DeltaTable.create(uri, ORDERS)
        for batch in batches:
            self._deltalake.write_deltalake(table, batch, mode="append")

    def fork(self, base: str, name: str) -> Any:
        shutil.copytree(self.root / base, self.root / name)
        return self.open(name)

    def open(self, name: str) -> Any:
        return self._deltalake.DeltaTable(str(self.root / name))

    def upsert(self, handle: Any, data: pa.Table) -> Any:
        return (handle.merge(data, predicate=f"t.{KEY} = s.{KEY}", source_alias="s", target_alias="t")
                .when_matched_update_all().when_not_matched_insert_all().execute())

    def delete(self, handle: Any, low: int, high: int) -> Any:
        return handle.delete(f"{KEY} >= {low} AND {KEY} < {high}")

    def count(self, name: str, where: Any = None) -> int:
        table = self.open(name)
        if where is None:
            return int(table.count())
        return int(table.to_pyarrow_dataset().count_rows(filter=where))

    def scan_for(self, handle: Any, keys: pa.Array) -> pa.Table:
        return handle.to_pyarrow_dataset().to_table(filter=pc.field(KEY).isin(keys), columns=[KEY])

    def effect(self, result: Any, name: str) -> str:
        if not isinstance(result, dict):
            return ""
        wanted = ("num_target_files_removed", "num_target_files_added", "num_removed_files",
                  "num_added_files", "num_target_rows_copied", "num_copied_rows", "num_deleted_rows")
        return ", ".join(f"{k}={result[k]}" for k in wanted if k in result)


class PyicebergMutations(Mutations):
    name = "pyiceberg"
    calls: ClassVar[dict[str, str]] = {
        "upsert": "table.upsert(batch, join_cols=['o_orderkey'])",
        "delete": "table.delete(And(GreaterThanOrEqual(k, a), LessThan(k, b)))",
        "lookup": "table.scan(row_filter=In(k, keys), selected_fields=(k,)).to_arrow()",
    }
    note = ("SqlCatalog on sqlite, local file warehouse, default properties (deletes and upserts "
            "are copy-on-write: files with matching rows are rewritten)")
    _namespace: ClassVar[str] = "bench"

    def __init__(self, root: Path) -> None:
        sql = _require("pyiceberg.catalog.sql")
        _require("sqlalchemy")
        self._expressions = _require("pyiceberg.expressions")
        super().__init__(root)
        self._catalog = sql.SqlCatalog("bench", uri=f"sqlite:///{root / 'catalog.db'}",
                                       warehouse=(root / "warehouse").as_uri())
        self._catalog.create_namespace_if_not_exists(self._namespace)
        self._base_snapshots: set[int] = set()

    def _id(self, name: str) -> str:
        return f"{self._namespace}.{name}"

    def build(self, name: str, batches: Iterator[pa.Table]) -> None:
        table = self._catalog.create_table(self._id(name), ORDERS)
        for batch in batches:
            table.append(batch)

    def fork(self, base: str, name: str) -> Any:
        table = self._catalog.load_table(self._id(base))
        self._base_snapshots = {s.snapshot_id for s in table.metadata.snapshots}
        return self._catalog.register_table(self._id(name), table.metadata_location)

    def drop(self, name: str) -> None:
        self._catalog.drop_table(self._id(name))  # files stay: they may be the base table's

    def open(self, name: str) -> Any:
        return self._catalog.load_table(self._id(name))

    def upsert(self, handle: Any, data: pa.Table) -> Any:
        return handle.upsert(data, join_cols=[KEY])

    def delete(self, handle: Any, low: int, high: int) -> Any:
        e = self._expressions
        handle.delete(e.And(e.GreaterThanOrEqual(KEY, low), e.LessThan(KEY, high)))
        return handle

    def count(self, name: str, where: Any = None) -> int:
        table = self.open(name)
        if where is None:
            return int(table.scan().count())
        # pyiceberg takes its own expressions; the checks only ever filter on the marker.
        return int(table.scan(row_filter=where).count())

    def scan_for(self, handle: Any, keys: pa.Array) -> pa.Table:
        row_filter = self._expressions.In(KEY, keys.to_pylist())
        return handle.scan(row_filter=row_filter, selected_fields=(KEY,)).to_arrow()

    def effect(self, result: Any, name: str) -> str:
        """Sums the summaries of every snapshot the call made (an upsert commits up to two)."""
        parts = []
        if hasattr(result, "rows_updated"):
            parts.append(f"rows_updated={result.rows_updated}, rows_inserted={result.rows_inserted}")
        table = self.open(name)
        made = [s for s in table.metadata.snapshots if s.snapshot_id not in self._base_snapshots]
        totals: dict[str, int] = {}
        for snapshot in made:
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            for key in ("added-data-files", "deleted-data-files", "added-records", "deleted-records"):
                totals[key] = totals.get(key, 0) + int(summary.get(key, 0))
        parts.append(f"snapshots={len(made)}")
        parts += [f"{k}={v}" for k, v in totals.items()]
        return ", ".join(parts)

    def marker_filter(self) -> Any:
        return self._expressions.EqualTo("o_custkey", MARKER_CUSTKEY)

    def range_filter(self, low: int, high: int) -> Any:
        e = self._expressions
        return e.And(e.GreaterThanOrEqual(KEY, low), e.LessThan(KEY, high))


SYSTEMS: dict[str, type[Mutations]] = {
    cls.name: cls for cls in (MetatxnMutations, DeltalakeMutations, PyicebergMutations)
}


def _marker_filter(system: Mutations) -> Any:
    if isinstance(system, PyicebergMutations):
        return system.marker_filter()
    return pc.field("o_custkey") == MARKER_CUSTKEY


def _range_filter(system: Mutations, low: int, high: int) -> Any:
    if isinstance(system, PyicebergMutations):
        return system.range_filter(low, high)
    return (pc.field(KEY) >= low) & (pc.field(KEY) < high)


# -- results ---------------------------------------------------------------------------------

@dataclass
class Phase:
    """One measurement of one system: samples, or why there are none."""

    call: str = ""
    samples_ms: list[float] = field(default_factory=list)
    median_ms: float | None = None
    p90_ms: float | None = None
    skipped: str | None = None  # not run, or stopped: why
    wrong: str | None = None  # a check failed: the figure is not valid
    effect: str = ""  # what the first timed call changed

    def finish(self) -> None:
        if self.samples_ms and self.wrong is None:
            self.median_ms, self.p90_ms = median_and_p90(self.samples_ms)

    @property
    def active(self) -> bool:
        return self.skipped is None and self.wrong is None


@dataclass
class Build:
    table: str
    rows: int
    loads: int
    seconds: float


@dataclass
class SystemResult:
    note: str = ""
    skipped: str | None = None
    phases: dict[str, Phase] = field(default_factory=dict)
    builds: list[Build] = field(default_factory=list)


@dataclass(frozen=True)
class RunConfig:
    systems: list[str]
    phases: list[str]
    rows: int
    loads: int
    repeats: int
    lookup_rows: int
    lookup_loads: int
    lookup_keys: int
    lookups: int
    scan_repeats: int
    workdir: str


@dataclass
class Report:
    machine: Machine
    config: RunConfig
    systems: dict[str, SystemResult]


# -- measuring -------------------------------------------------------------------------------

def _fail(result: SystemResult, name: str, key: str, what: str) -> None:
    """Record an exception in phase ``key`` of system ``name``; the run goes on without it."""
    traceback.print_exc()
    exc = sys.exc_info()[1]
    result.phases[key].skipped = f"failed during {what}: {type(exc).__name__}: {exc}"
    log(f"  {name}: {key} stopped: {result.phases[key].skipped}")


def _wrong(result: SystemResult, name: str, key: str, message: str) -> None:
    result.phases[key].wrong = message
    log(f"  !!! WRONG RESULT: {name} {key}: {message}")


def _build_all(systems: dict[str, Mutations], results: dict[str, SystemResult], table: str,
               rows: int, count: int, seed: int, keys: list[str]) -> list[str]:
    """Build table ``table`` in every system that still runs one of ``keys``; names of those built."""
    built = []
    for name, system in systems.items():
        if not any(results[name].phases[k].active for k in keys):
            continue
        log(f"{name}: building {table}: {rows:,} rows in {count} appends")
        began = time.perf_counter()
        try:
            system.build(table, loads(rows, count, seed))
        except Exception:
            for key in keys:
                if results[name].phases[key].active:
                    _fail(results[name], name, key, f"the build of {table}")
            continue
        seconds = time.perf_counter() - began
        results[name].builds.append(Build(table, rows, count, seconds))
        log(f"  {name}: built in {seconds:.1f} s")
        built.append(name)
    return built


def _timed(action: Callable[..., T], *args: Any) -> tuple[float, T]:
    """Milliseconds taken by ``action(*args)``, and what it returned."""
    began = time.perf_counter()
    value = action(*args)
    return (time.perf_counter() - began) * 1e3, value


def measure_mutation(phase: str, systems: dict[str, Mutations], results: dict[str, SystemResult],
                     config: RunConfig) -> None:
    """Upsert or delete: each repetition forks every system's base table and times one call on it."""
    active = {n: s for n, s in systems.items() if results[n].phases[phase].active}
    if not active:
        return
    base = f"base_{phase}"
    _build_all(active, results, base, config.rows, config.loads, seed=1, keys=[phase])
    for repetition in range(config.repeats):
        upsert = upsert_input(config.rows, repetition) if phase == "upsert" else None
        low, high = delete_range(config.rows, repetition)
        for name, system in active.items():
            record = results[name].phases[phase]
            if not record.active:
                continue
            fork = f"{phase}_{repetition}"
            try:
                handle = system.fork(base, fork)
                began = time.perf_counter()
                outcome = (system.upsert(handle, upsert.data) if upsert is not None
                           else system.delete(handle, low, high))
                ms = (time.perf_counter() - began) * 1e3
                record.samples_ms.append(ms)
                if repetition == 0:
                    record.effect = system.effect(outcome, fork)
                problem = (_check_upsert(system, fork, config.rows, upsert) if upsert is not None
                           else _check_delete(system, fork, config.rows, low, high))
                log(f"  {name}: {phase} #{repetition + 1}: {ms:.1f} ms"
                    + (f"  [{record.effect}]" if repetition == 0 and record.effect else ""))
                if problem:
                    _wrong(results[name], name, phase, problem)
                system.drop(fork)
            except Exception:
                _fail(results[name], name, phase, f"{phase} #{repetition + 1}")
    for name in active:
        results[name].phases[phase].finish()


def _check_upsert(system: Mutations, name: str, rows: int, upsert: UpsertInput) -> str | None:
    expected = rows + upsert.inserts
    found = system.count(name)
    if found != expected:
        return (f"{found:,} rows after upserting {upsert.updates:,} updates and {upsert.inserts:,} "
                f"inserts into {rows:,}; expected {expected:,}")
    marked = system.count(name, _marker_filter(system))
    if marked != upsert.updates + upsert.inserts:
        return (f"{marked:,} rows carry the upsert batch's values; expected "
                f"{upsert.updates + upsert.inserts:,} (updates not applied?)")
    return None


def _check_delete(system: Mutations, name: str, rows: int, low: int, high: int) -> str | None:
    expected = rows - (high - low)
    found = system.count(name)
    if found != expected:
        return f"{found:,} rows after deleting keys [{low}, {high}) from {rows:,}; expected {expected:,}"
    left = system.count(name, _range_filter(system, low, high))
    if left:
        return f"{left:,} rows of the deleted range [{low}, {high}) are still there"
    return None


def _check_found(found: pa.Table, keys: pa.Array) -> str | None:
    if found.num_rows != len(keys):
        return f"{found.num_rows} rows returned for {len(keys)} existing keys"
    column = found.column(KEY)
    hits = pc.sum(pc.is_in(column, value_set=keys)).as_py() or 0
    if hits != len(keys) or pc.count_distinct(column).as_py() != len(keys):
        return f"returned keys differ from the {len(keys)} asked for"
    return None


def measure_lookups(systems: dict[str, Mutations], results: dict[str, SystemResult],
                    config: RunConfig) -> None:
    """metatxn's t.lookup on a fresh and a warm handle; the peers' filtered scans, for scale."""
    table = "lookup"
    wanted = {n: s for n, s in systems.items()
              if (n == SUBJECT or config.scan_repeats) and results[n].phases["lookup"].active}
    built = _build_all(wanted, results, table, config.lookup_rows, config.lookup_loads, seed=2,
                       keys=["lookup"] + (["lookup_warm"] if SUBJECT in wanted else []))
    if SUBJECT in built:
        _lookup_metatxn(systems[SUBJECT], results[SUBJECT], table, config)  # type: ignore[arg-type]
    for name in built:
        if name == SUBJECT:
            continue
        record = results[name].phases["lookup"]
        try:
            handle = systems[name].open(table)
            for repetition in range(config.scan_repeats):
                keys = lookup_keys(config.lookup_rows, config.lookup_keys, repetition)
                ms, found = _timed(systems[name].scan_for, handle, keys)
                record.samples_ms.append(ms)
                log(f"  {name}: filtered scan #{repetition + 1}: {ms:.1f} ms")
                problem = _check_found(found, keys)
                if problem:
                    _wrong(results[name], name, "lookup", problem)
                    break
        except Exception:
            _fail(results[name], name, "lookup", "the filtered scan")
        record.finish()


def _lookup_metatxn(system: MetatxnMutations, result: SystemResult, table: str, config: RunConfig) -> None:
    uri = str(system.root / table)
    log(f"{SUBJECT}: {config.lookups} lookups of {config.lookup_keys:,} keys, fresh handles")
    cold, warm = result.phases["lookup"], result.phases["lookup_warm"]
    txn = system.txn

    def open_and_lookup(keys: pa.Array) -> pa.Table:
        return txn.open_table(uri).lookup(keys)

    try:
        for repetition in range(config.lookups):
            keys = lookup_keys(config.lookup_rows, config.lookup_keys, repetition)
            ms, found = _timed(open_and_lookup, keys)
            cold.samples_ms.append(ms)
            problem = _check_found(found, keys)
            if problem:
                _wrong(result, SUBJECT, "lookup", problem)
                break
    except Exception:
        _fail(result, SUBJECT, "lookup", "a lookup on a fresh handle")
    cold.finish()
    log(f"{SUBJECT}: {config.lookups} lookups of {config.lookup_keys:,} keys, one warm handle")
    try:
        handle = txn.open_table(uri)
        handle.lookup(lookup_keys(config.lookup_rows, config.lookup_keys, 10_000))  # warm-up, untimed
        for repetition in range(config.lookups):
            keys = lookup_keys(config.lookup_rows, config.lookup_keys, 20_000 + repetition)
            ms, found = _timed(handle.lookup, keys)
            warm.samples_ms.append(ms)
            problem = _check_found(found, keys)
            if problem:
                _wrong(result, SUBJECT, "lookup_warm", problem)
                break
    except Exception:
        _fail(result, SUBJECT, "lookup_warm", "a lookup on a warm handle")
    warm.finish()
    for label, phase in (("fresh handle", cold), ("warm handle", warm)):
        if phase.median_ms is not None and phase.p90_ms is not None:
            log(f"  {SUBJECT}: {label}: median {phase.median_ms:.1f} ms, p90 {phase.p90_ms:.1f} ms")


def _phase_keys(name: str, phases: list[str]) -> list[str]:
    keys = [p for p in phases if p != "lookup"]
    if "lookup" in phases:
        keys += ["lookup", "lookup_warm"] if name == SUBJECT else ["lookup"]
    return keys


def run(config: RunConfig) -> Report:
    """Measure every available system; unavailable ones (or operations) are reported, not raised."""
    workdir = Path(config.workdir)
    machine = machine_facts()
    results: dict[str, SystemResult] = {}
    systems: dict[str, Mutations] = {}
    for name in config.systems:
        cls = SYSTEMS[name]
        results[name] = SystemResult(note=cls.note)
        try:
            systems[name] = cls(workdir / name)
        except SystemUnavailableError as exc:
            log(f"{name}: skipped: {exc}")
            results[name].skipped = str(exc)
            continue
        for key in _phase_keys(name, config.phases):
            record = results[name].phases[key] = Phase(call=cls.calls[key.removesuffix("_warm")])
            if key == "lookup" and name != SUBJECT and not config.scan_repeats:
                record.skipped = "not run: --scan-repeats 0"
                continue
            try:
                systems[name].check(key.removesuffix("_warm"))
            except NotAvailableError as exc:
                record.skipped = f"not available: {exc}"
                log(f"{name}: {key}: {record.skipped}")
    for phase in ("upsert", "delete"):
        if phase in config.phases:
            log(f"== {phase}: {max(2, config.rows // 100):,} rows of a {config.rows:,}-row table, "
                f"{config.repeats} repetitions on fresh copies")
            measure_mutation(phase, systems, results, config)
    if "lookup" in config.phases:
        log(f"== lookup: {config.lookup_keys:,} keys in a {config.lookup_rows:,}-row table")
        measure_lookups(systems, results, config)
    return Report(machine=replace(machine, load_at_end=load_average()), config=config, systems=results)


# -- report ----------------------------------------------------------------------------------

@dataclass
class Target:
    status: str  # PASS, FAIL or n/a
    goal: str
    detail: str


def _phase(report: Report, name: str, key: str) -> Phase | None:
    result = report.systems.get(name)
    return result.phases.get(key) if result else None


def _median(report: Report, name: str, key: str) -> float | None:
    phase = _phase(report, name, key)
    return phase.median_ms if phase else None


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def speedups(report: Report) -> dict[str, float | None]:
    """peer time / metatxn time for every phase both ran (above 1: metatxn is faster)."""
    out: dict[str, float | None] = {}
    for phase in ("upsert", "delete"):
        for peer in PEERS:
            if peer in report.systems:
                out[f"{phase} {peer}/{SUBJECT}"] = _ratio(_median(report, peer, phase),
                                                          _median(report, SUBJECT, phase))
    return out


def targets(report: Report) -> list[Target]:
    """The goals metatxn sets itself. Informational only: they never fail the run."""
    found = []
    for phase, goal in (("upsert", UPSERT_TARGET), ("delete", DELETE_TARGET)):
        ours, theirs = _median(report, SUBJECT, phase), _median(report, "deltalake", phase)
        ratio = _ratio(theirs, ours)
        found.append(Target(
            _verdict(None if ratio is None else ratio >= goal),
            f"{SUBJECT} {phase} at least {goal:g}x faster than deltalake's",
            f"{_fmt(ratio, 2)}x ({SUBJECT} {_fmt(ours)} ms, deltalake {_fmt(theirs)} ms)"))
    for key, label in (("lookup", "fresh handle"), ("lookup_warm", "warm handle")):
        record = _phase(report, SUBJECT, key)
        median = record.median_ms if record else None
        found.append(Target(
            _verdict(None if median is None else median < LOOKUP_TARGET_MS),
            f"{SUBJECT} lookup of {report.config.lookup_keys:,} keys, {label}, median under "
            f"{LOOKUP_TARGET_MS:g} ms",
            f"median {_fmt(median)} ms, p90 {_fmt(record.p90_ms if record else None)} ms"))
    return found


def _status(phase: Phase | None) -> str:
    if phase is None:
        return "not run"
    if phase.wrong:
        return "WRONG RESULT"
    if phase.skipped:
        return "not available" if phase.skipped.startswith("not available") else "failed"
    return ""


def _mutation_section(report: Report, phase: str) -> str:
    config = report.config
    width = max(2, config.rows // 100)
    if phase == "upsert":
        title = (f"### Upsert of {width:,} rows ({width // 2:,} updates of random existing keys, "
                 f"{width - width // 2:,} new keys) into a {config.rows:,}-row table")
    else:
        title = (f"### Delete of {width:,} rows by key range (keys loaded in random order) from a "
                 f"{config.rows:,}-row table")
    title += f"; median of {config.repeats} fresh copies"
    ours = _median(report, SUBJECT, phase)
    rows = []
    for name in report.systems:
        record = _phase(report, name, phase)
        rows.append([
            name,
            _fmt(record.median_ms if record else None),
            _fmt(record.p90_ms if record else None),
            "-" if name == SUBJECT else _fmt(_ratio(record.median_ms if record else None, ours), 2),
            _status(record) or (record.effect if record else "") or "-",
        ])
    return "\n\n".join([title, _markdown_table(
        ["system", "median ms", "p90 ms", f"system/{SUBJECT} (speed-up)", "what the call did (1st run)"],
        rows)])


def _lookup_section(report: Report) -> str:
    config = report.config
    title = (f"### Key lookup: {config.lookup_keys:,} random existing keys in a "
             f"{config.lookup_rows:,}-row table ({config.lookup_loads} appends)")
    rows = []
    labels = {
        ("lookup", True): f"t.lookup(keys), fresh handle (open_table included), {config.lookups} runs",
        ("lookup_warm", True): f"t.lookup(keys), warm handle, {config.lookups} runs",
        ("lookup", False): f"filtered scan of the key column (no key index), {config.scan_repeats} runs",
    }
    for name in report.systems:
        for key in _phase_keys(name, ["lookup"]):
            record = _phase(report, name, key)
            rows.append([name, labels[(key, name == SUBJECT)], _fmt(record.median_ms if record else None),
                         _fmt(record.p90_ms if record else None), _status(record) or "-"])
    return "\n\n".join([title, _markdown_table(["system", "method", "median ms", "p90 ms", "status"], rows)])


def _build_section(report: Report) -> str:
    rows = [[name, b.table, f"{b.rows:,}", str(b.loads), _fmt(b.seconds)]
            for name, result in report.systems.items() for b in result.builds]
    return "\n\n".join(["### Building the tables (untimed for the figures above)",
                        _markdown_table(["system", "table", "rows", "appends", "seconds"], rows)])


def _calls_section(report: Report) -> str:
    lines = [f"- {name} {phase}: `{record.call}`" for name, result in report.systems.items()
             for phase, record in result.phases.items() if not phase.endswith("_warm")]
    return "\n".join(["### Calls timed", "", *lines])


def _targets_section(report: Report) -> str:
    lines = [f"- {t.status:<4}  {t.goal}: {t.detail}" for t in targets(report)]
    return "\n".join(["### Targets (informational)", "", *lines])


def wrong_results(report: Report) -> list[str]:
    return [f"{name} {key}: {phase.wrong}" for name, result in report.systems.items()
            for key, phase in result.phases.items() if phase.wrong]


def _notes_section(report: Report) -> str:
    lines = [f"- {name}: {result.note}" for name, result in report.systems.items() if result.note]
    lines += [f"- {name} skipped: {result.skipped}" for name, result in report.systems.items()
              if result.skipped]
    lines += [f"- {name} {key}: {phase.skipped}" for name, result in report.systems.items()
              for key, phase in result.phases.items() if phase.skipped]
    return "\n".join(["### Notes", "", *lines])


def _machine_section(report: Report) -> str:
    return machine_section(report.machine, report.config.workdir)


def render_markdown(report: Report) -> str:
    """The whole report as Markdown, ready to paste into bench/README.md."""
    sections = []
    wrong = wrong_results(report)
    if wrong:
        sections.append("\n".join(["### WRONG RESULTS (these figures are not valid)", "",
                                   *(f"- {w}" for w in wrong)]))
    sections.append(_machine_section(report))
    for phase in ("upsert", "delete"):
        if phase in report.config.phases:
            sections.append(_mutation_section(report, phase))
    if "lookup" in report.config.phases:
        sections.append(_lookup_section(report))
    sections += [_build_section(report), _targets_section(report), _calls_section(report),
                 _notes_section(report)]
    return "\n\n".join(sections) + "\n"


def write_json(report: Report, path: Path) -> None:
    """The report, speed-ups and targets as JSON (samples included, for later analysis)."""
    document = {
        **dataclasses.asdict(report),
        "speedups": speedups(report),
        "targets": [dataclasses.asdict(t) for t in targets(report)],
        "wrong_results": wrong_results(report),
        "argv": sys.argv[1:],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


# -- command line ----------------------------------------------------------------------------

def names_option(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: a comma-separated list of names from ``choices``."""
    def parse(text: str) -> list[str]:
        names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"unknown name(s) {unknown}; choose from {', '.join(choices)}")
        return names
    return parse


def at_least_option(minimum: int) -> Callable[[str], int]:
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


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_mutations",
        description="Upsert, delete and key-lookup latency: metatxn vs deltalake vs pyiceberg.",
    )
    parser.add_argument("--systems", type=names_option(list(SYSTEMS)), default=list(SYSTEMS),
                        help=f"comma-separated, from {','.join(SYSTEMS)} (default: all)")
    parser.add_argument("--phases", type=names_option(PHASES), default=list(PHASES),
                        help=f"comma-separated, from {','.join(PHASES)} (default: all)")
    parser.add_argument("--rows", type=at_least_option(200),
                        help=f"rows of the upsert/delete table (default: {FULL.rows:,})")
    parser.add_argument("--loads", type=at_least_option(1),
                        help=f"appends that build it (default: {FULL.loads})")
    parser.add_argument("--repeats", type=at_least_option(1),
                        help=f"upserts and deletes timed, each on a fresh copy (default: {FULL.repeats})")
    parser.add_argument("--lookup-rows", type=at_least_option(1),
                        help=f"rows of the lookup table (default: {FULL.lookup_rows:,})")
    parser.add_argument("--lookup-loads", type=at_least_option(1),
                        help=f"appends that build it (default: {FULL.lookup_loads})")
    parser.add_argument("--lookup-keys", type=at_least_option(1),
                        help=f"keys per lookup (default: {FULL.lookup_keys:,})")
    parser.add_argument("--lookups", type=at_least_option(1),
                        help=f"timed lookups, on fresh handles and on a warm one (default: {FULL.lookups})")
    parser.add_argument("--scan-repeats", type=at_least_option(0),
                        help="peers' filtered scans for the same keys; 0 skips them and the peers' "
                             f"lookup tables (default: {FULL.scan_repeats})")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: {QUICK.rows:,}-row table, {QUICK.repeats} repeats, "
                             f"{QUICK.lookup_rows:,}-row lookup table, {QUICK.lookups} lookups; "
                             "explicit flags win")
    parser.add_argument("--workdir", type=Path,
                        help="make the run's temporary folder inside this one (default: the system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the tables instead of removing them")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)
    lookup_rows = args.lookup_rows or (QUICK if args.quick else FULL).lookup_rows
    lookup_keys = args.lookup_keys or (QUICK if args.quick else FULL).lookup_keys
    if lookup_keys > lookup_rows:
        parser.error(f"--lookup-keys {lookup_keys} is more than the {lookup_rows} rows of the lookup table")
    return args


def _flag_or(value: T | None, default: T) -> T:
    return default if value is None else value


def make_config(args: argparse.Namespace, workdir: Path) -> RunConfig:
    """Explicit flags, else the --quick preset, else the full-spec one."""
    preset = QUICK if args.quick else FULL
    return RunConfig(
        systems=args.systems,
        phases=args.phases,
        rows=_flag_or(args.rows, preset.rows),
        loads=_flag_or(args.loads, preset.loads),
        repeats=_flag_or(args.repeats, preset.repeats),
        lookup_rows=_flag_or(args.lookup_rows, preset.lookup_rows),
        lookup_loads=_flag_or(args.lookup_loads, preset.lookup_loads),
        lookup_keys=_flag_or(args.lookup_keys, preset.lookup_keys),
        lookups=_flag_or(args.lookups, preset.lookups),
        scan_repeats=_flag_or(args.scan_repeats, preset.scan_repeats),
        workdir=str(workdir),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    with run_folder(args.workdir, keep=args.keep, prefix="bench-mutations-", log=log) as folder:
        report = run(make_config(args, folder))
    return finish_run(report, markdown=render_markdown(report), out=args.out, write_json=write_json,
                      wrong=wrong_results(report), began=began, log=log)


if __name__ == "__main__":
    sys.exit(main())
