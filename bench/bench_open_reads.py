"""Open reads benchmark (issue 25): DuckDB, Polars and metatxn's own scanner over a metatxn table,
against the same engines over plain Parquet files of the same rows, in one run.

Data: TPC-H ``lineitem`` from ``tpchgen-cli`` (bench/requirements.txt) at ``--scale`` (1: 6,001,215
rows), string columns cast to ``string``, loaded by ``--loads`` ``Table.append`` calls of Arrow
batches (one segment each; metatxn cuts a load into files of ``write.target_file_bytes``). The
plain side is one Parquet file per table data file, holding that file's rows, written by
``pq.write_table`` with the table writer's row groups (131,072 rows), integer-stored decimals and
dictionary encoding on the columns the writer chose it for: the same rows in the same files,
encoded alike, without the table. Ratios are metatxn / plain (below 1:
metatxn is faster); the two sides run alternately, ``--repeats`` times each after one untimed
warm-up, and both the ratio of medians and that of the best runs are printed (on a shared
machine the best moves least).

1. **DuckDB Q1 and Q6**: ``txn.duckdb.register(con, "lineitem", t)`` then the query, against
   ``CREATE OR REPLACE VIEW lineitem AS SELECT * FROM read_parquet([...plain files])`` then the
   query (view creation inside the timing on both sides).
2. **Polars Q1 and Q6** (lazy, ``collect()``): ``txn.polars.scan(t)`` against ``pl.scan_parquet``.
3. **``head(10)``**: ``t.scanner().head(10)`` on an open table against
   ``next(pq.ParquetFile(first file).iter_batches())``, the first file of the file table.
4. **Full scan memory**: ``t.scanner(memory_budget=B).to_batches()`` consumed in a fresh process;
   the growth of peak RSS (``ru_maxrss``) over the peak after opening the snapshot, against
   ``B``. ``B`` is a quarter of the table's Arrow size (``--budget`` overrides it).
5. **After deleting 0.1 % of rows** (``l_orderkey % 1000 == 7``, every file touched) through
   ``Table.delete``: 1 and 2 again, against plain files rewritten without those rows (the same
   files, deleted rows removed), and 4 again.

Every answer is compared with the plain side's (DuckDB exactly, Polars to 1e-9 relative); a
wrong answer exits 1. Targets (PASS/FAIL on the ratio of medians): DuckDB and Polars within
1.2x, ``head(10)`` within 3x, scan growth under 1.5x the budget.

Run from the repository root::

    .venv/bin/python -m bench.bench_open_reads            # TPC-H scale 1, 5 repeats
    .venv/bin/python -m bench.bench_open_reads --quick    # scale 0.1, 3 repeats: about a minute
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import txn
from bench._report import Timing, load_average, machine_facts
from bench._tpch import DELETED_EVERY, DELETED_REMAINDER, TPCH_QUERIES

#: The queries both engines run: DuckDB this SQL, Polars the same query as a lazy frame.
QUERIES = {name: TPCH_QUERIES[name] for name in ("Q1", "Q6")}
#: The table writer's row group (txn/_files/_writer.py), used for the plain files too.
ROW_GROUP_ROWS = 128 * 1024
MIB = 1024 * 1024


def polars_q1(lf: Any) -> Any:
    import polars as pl

    price = pl.col("l_extendedprice")
    disc_price = price * (1 - pl.col("l_discount"))
    return (lf.filter(pl.col("l_shipdate") <= date(1998, 9, 2))
            .group_by("l_returnflag", "l_linestatus")
            .agg(pl.col("l_quantity").sum().alias("sum_qty"), price.sum().alias("sum_base_price"),
                 disc_price.sum().alias("sum_disc_price"),
                 (disc_price * (1 + pl.col("l_tax"))).sum().alias("sum_charge"),
                 pl.col("l_quantity").cast(pl.Float64).mean().alias("avg_qty"),
                 price.cast(pl.Float64).mean().alias("avg_price"),
                 pl.col("l_discount").cast(pl.Float64).mean().alias("avg_disc"),
                 pl.len().alias("count_order"))
            .sort("l_returnflag", "l_linestatus"))


def polars_q6(lf: Any) -> Any:
    import polars as pl

    return (lf.filter((pl.col("l_shipdate") >= date(1994, 1, 1))
                      & (pl.col("l_shipdate") < date(1995, 1, 1))
                      & pl.col("l_discount").is_between(0.05, 0.07)
                      & (pl.col("l_quantity") < 24))
            .select((pl.col("l_extendedprice") * pl.col("l_discount")).sum().alias("revenue")))


POLARS_QUERIES = {"Q1": polars_q1, "Q6": polars_q6}


@dataclass
class Row:
    what: str
    mine: Timing | None
    plain: Timing | None
    target: float | None
    skipped: str = ""

    def ratio(self) -> float | None:
        return None if self.mine is None or self.plain is None else self.mine.median / self.plain.median

    def cells(self) -> list[str]:
        if self.mine is None or self.plain is None:
            return [self.what, "-", "-", "-", "-", f"skipped: {self.skipped}"]
        ratio = self.mine.median / self.plain.median
        verdict = "-" if self.target is None else (
            f"<= {self.target}x: {'PASS' if ratio <= self.target else 'FAIL'}")
        return [self.what, f"{self.mine.median:,.1f}", f"{self.plain.median:,.1f}", f"{ratio:.2f}x",
                f"{self.mine.best / self.plain.best:.2f}x", verdict]


@dataclass
class ScanMemory:
    """Peak RSS growth of full scans in fresh processes, one sample per process."""

    what: str
    budget: int
    growth: list[int]  # bytes
    seconds: list[float]
    rows: int
    arrow_peak: list[int]  # bytes: the peak of Arrow's memory pool in the same process
    method: str  # how the peak was read: VmHWM (reset before the scan) or ru_maxrss

    def cells(self) -> list[str]:
        worst = max(self.growth)
        verdict = f"< 1.5x: {'PASS' if worst < 1.5 * self.budget else 'FAIL'}"
        return [self.what, f"{self.budget / MIB:,.0f}",
                ", ".join(f"{g / MIB:,.0f}" for g in self.growth),
                ", ".join(f"{g / MIB:,.0f}" for g in self.arrow_peak),
                f"{worst / self.budget:.2f}x", f"{statistics.median(self.seconds):.2f}", verdict]


def _once(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def _interleaved(mine: Callable[[], object], plain: Callable[[], object],
                 repeats: int) -> tuple[Timing, Timing]:
    """Samples of both after one untimed run each (page cache, lazy imports), run alternately so
    that a busy spell of the machine hits both alike."""
    mine(), plain()
    a, b = [], []
    for _ in range(repeats):
        a.append(_once(mine))
        b.append(_once(plain))
    return Timing(a), Timing(b)


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- data -------------------------------------------------------------------------------------

def generate_lineitem(scale: float, folder: Path) -> Path:
    """``lineitem`` as one Parquet file from ``tpchgen-cli``."""
    tool = shutil.which("tpchgen-cli") or str(Path(sys.executable).parent / "tpchgen-cli")
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run([tool, "parquet", "-s", str(scale), "--tables", "lineitem",
                    "--output-dir", str(folder)], check=True, capture_output=True)
    return folder / "lineitem.parquet"


def _plain_schema(schema: pa.Schema) -> pa.Schema:
    """tpchgen writes ``string_view``; a table column is ``string``."""
    return pa.schema([f.with_type(pa.string()) if pa.types.is_string_view(f.type) else f
                      for f in schema]).remove_metadata()


def _loads(source: Path, loads: int) -> Iterator[pa.Table]:
    """The generated rows in ``loads`` consecutive chunks, as the table's schema."""
    reader = pq.ParquetFile(source)
    schema = _plain_schema(reader.schema_arrow)
    per = -(-reader.metadata.num_rows // loads)
    chunk: list[pa.RecordBatch] = []
    held = 0
    for batch in reader.iter_batches(batch_size=65_536):
        columns = [column.cast(field.type) for column, field in zip(batch.columns, schema, strict=True)]
        batch = pa.RecordBatch.from_arrays(columns, schema=schema)
        while batch.num_rows:
            take = min(per - held, batch.num_rows)
            chunk.append(batch.slice(0, take))
            held += take
            batch = batch.slice(take)
            if held == per:
                yield pa.Table.from_batches(chunk, schema)
                chunk, held = [], 0
    if chunk:
        yield pa.Table.from_batches(chunk, schema)


def load(source: Path, uri: str, loads: int) -> tuple[Any, int, float]:
    """The metatxn table of ``source`` in ``loads`` appends; its Arrow size, the load seconds."""
    schema = _plain_schema(pq.read_schema(source))
    t = txn.create_table(uri, schema)
    arrow_bytes, seconds = 0, 0.0
    for chunk in _loads(source, loads):
        arrow_bytes += chunk.nbytes
        started = time.perf_counter()
        t.append(chunk)
        seconds += time.perf_counter() - started
    return t, arrow_bytes, seconds


def write_plain(snapshot: Any, folder: Path) -> list[str]:
    """One plain Parquet file per live data file of ``snapshot``, its live rows only (deleted
    positions removed), in file table order."""
    folder.mkdir(parents=True)
    deletes = snapshot.deletes()
    deleted: dict[str, np.ndarray] = {}
    if deletes.num_rows:
        for location in pc.unique(deletes["location"]).to_pylist():
            mask = pc.equal(deletes["location"], location)
            deleted[location] = deletes.filter(mask)["position"].to_numpy()
    paths = []
    for i, location in enumerate(snapshot.file_table(stats=False)["location"].to_pylist()):
        rows = pq.read_table(location)
        # The writer's choice of dictionary columns (it leaves out high-cardinality ones): with
        # pyarrow's default (every column) the plain files would decode slower than the table's.
        first = pq.read_metadata(location).row_group(0)
        dictionary = [first.column(c).path_in_schema for c in range(first.num_columns)
                      if first.column(c).has_dictionary_page]
        if location in deleted:
            keep = np.ones(rows.num_rows, bool)
            keep[deleted[location]] = False
            rows = rows.filter(pa.array(keep))
        path = str(folder / f"part-{i:05d}.parquet")
        pq.write_table(rows.replace_schema_metadata(None), path, row_group_size=ROW_GROUP_ROWS,
                       use_dictionary=dictionary, store_decimal_as_integer=True)
        paths.append(path)
    return paths


def _deleted_orders() -> pc.Expression:
    """``l_orderkey % DELETED_EVERY == DELETED_REMAINDER`` (keys are positive: integer division)."""
    key = pc.field("l_orderkey")
    remainder = pc.subtract(key, pc.multiply(pc.divide(key, DELETED_EVERY), DELETED_EVERY))
    return pc.equal(remainder, DELETED_REMAINDER)


# -- engines ----------------------------------------------------------------------------------

def duckdb_rows(t: Any, plain: list[str], phase: str, repeats: int, notes: list[str]) -> list[Row]:
    try:
        import duckdb

        import txn.duckdb as txn_duckdb
    except ImportError as error:
        return [Row(f"DuckDB {name}{phase}", None, None, 1.2, str(error)) for name in QUERIES]
    mine_con, plain_con = duckdb.connect(), duckdb.connect()
    files = "[" + ", ".join(f"'{p}'" for p in plain) + "]"

    def mine(sql: str) -> list[tuple[Any, ...]]:
        txn_duckdb.register(mine_con, "lineitem", t)
        return mine_con.sql(sql).fetchall()

    def baseline(sql: str) -> list[tuple[Any, ...]]:
        plain_con.execute(f"create or replace view lineitem as select * from read_parquet({files})")
        return plain_con.sql(sql).fetchall()

    rows = []
    for name, sql in QUERIES.items():
        _progress(f"DuckDB {name}{phase}")
        if mine(sql) != baseline(sql):
            raise SystemExit(f"WRONG ANSWER for DuckDB {name}{phase}: "
                             f"metatxn {mine(sql)[:2]} vs plain {baseline(sql)[:2]}")
        timings = _interleaved(lambda: mine(sql), lambda: baseline(sql), repeats)  # noqa: B023
        rows.append(Row(f"DuckDB {name}{phase}", *timings, 1.2))
    # Where the time goes: the registration (snapshot, deletes, the view) against the query alone.
    registering = Timing([_once(lambda: txn_duckdb.register(mine_con, "lineitem", t))
                          for _ in range(repeats)])
    querying = {name: Timing([_once(lambda: mine_con.sql(sql).fetchall()) for _ in range(repeats)])  # noqa: B023
                for name, sql in QUERIES.items()}
    notes.append(f"DuckDB{phase}: `register` alone {registering.median:.1f} ms (median); the query "
                 "alone on the registered view " + ", ".join(
                     f"{name} {timing.median:.1f} ms" for name, timing in querying.items()))
    return rows


def polars_rows(t: Any, plain: list[str], phase: str, repeats: int, notes: list[str]) -> list[Row]:
    try:
        import polars as pl
        from polars.testing import assert_frame_equal

        import txn.polars as txn_polars
    except ImportError as error:
        return [Row(f"Polars {name}{phase}", None, None, 1.2, str(error)) for name in POLARS_QUERIES]
    rows = []
    for name, query in POLARS_QUERIES.items():
        _progress(f"Polars {name}{phase}")

        def mine(query: Callable[[Any], Any] = query) -> Any:
            return query(txn_polars.scan(t)).collect()

        def baseline(query: Callable[[Any], Any] = query) -> Any:
            return query(pl.scan_parquet(plain)).collect()

        try:
            assert_frame_equal(mine(), baseline(), check_exact=False, rel_tol=1e-9)
        except AssertionError as error:
            raise SystemExit(f"WRONG ANSWER for Polars {name}{phase}: {error}") from error
        rows.append(Row(f"Polars {name}{phase}", *_interleaved(mine, baseline, repeats), 1.2))
    scanning = Timing([_once(lambda: txn_polars.scan(t)) for _ in range(repeats)])
    notes.append(f"Polars{phase}: `txn.polars.scan(t)` alone (the snapshot and the plan) "
                 f"{scanning.median:.1f} ms (median)")
    return rows


def head_row(t: Any, repeats: int) -> Row:
    first = t.snapshot().file_table(stats=False)["location"][0].as_py()
    if not hasattr(t, "scanner"):
        return Row("`head(10)`", None, None, 3.0, "Table.scanner is not built yet")

    def mine() -> pa.Table:
        return t.scanner().head(10)

    def baseline() -> pa.RecordBatch:
        return next(pq.ParquetFile(first).iter_batches())

    if mine().num_rows != 10:
        raise SystemExit("WRONG ANSWER for head(10)")
    return Row("`t.scanner().head(10)` vs `ParquetFile(first file).iter_batches()`, first batch",
               *_interleaved(mine, baseline, repeats * 4), 3.0)


def scan_memory(uri: str, budget: int, what: str, repeats: int) -> ScanMemory | str:
    """Full scans in fresh processes (peak RSS is per process)."""
    growth, seconds, rows, arrow_peak, method = [], [], 0, [], ""
    for _ in range(repeats):
        done = subprocess.run([sys.executable, __file__, "--scan-child", uri, str(budget)],
                              capture_output=True, text=True, check=False)
        if done.returncode:
            return done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "failed"
        found = json.loads(done.stdout.strip().splitlines()[-1])
        growth.append(found["growth"])
        seconds.append(found["seconds"])
        arrow_peak.append(found["arrow_peak"])
        rows, method = found["rows"], found["method"]
    return ScanMemory(what, budget, growth, seconds, rows, arrow_peak, method)


def _peak_rss() -> tuple[int, str]:
    """This process's peak resident set (bytes) and how it was read."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "VmHWM"
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "ru_maxrss"  # KiB on Linux


def _reset_peak_rss() -> int:
    """Reset the peak to the current resident set (Linux 4.0+: ``clear_refs`` 5) and return it.

    Why not ``ru_maxrss`` alone: a child started by ``vfork`` (what ``subprocess`` uses) inherits
    its parent's peak in ``ru_maxrss`` at ``exec``, so a child of a large parent reports the
    parent's size and a scan's growth reads as zero.
    """
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass
    return _peak_rss()[0]


def scan_child(uri: str, budget: int) -> None:
    """In a fresh process: consume a full scan and print its peak RSS growth (bytes) as JSON."""
    t = txn.open_table(uri)
    snapshot = t.snapshot()
    snapshot.file_table()  # planning's own memory is not the scan's
    base = _reset_peak_rss()
    started = time.perf_counter()
    rows = sum(batch.num_rows for batch in snapshot.scanner(memory_budget=budget).to_batches())
    peak, method = _peak_rss()
    pool = pa.default_memory_pool()
    print(json.dumps({"rows": rows, "seconds": time.perf_counter() - started,
                      "growth": peak - base, "method": method,
                      "arrow_peak": pool.max_memory(), "pool": pool.backend_name}))


# -- report -----------------------------------------------------------------------------------

def _print_report(args: argparse.Namespace, facts: Any, load_start: float | None, rows: list[Row],
                  memory: list[ScanMemory | tuple[str, str]], notes: list[str]) -> None:
    import importlib.metadata as metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    print("### Machine\n")
    print(f"- {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {facts.cpus} CPUs, "
          f"{facts.memory_gib} GiB RAM, {facts.platform}")
    print(f"- {facts.python}, pyarrow {pa.__version__}, duckdb {version('duckdb')}, "
          f"polars {version('polars')}; load average {load_start} at start, {load_average()} at end")
    print(f"\n### TPC-H lineitem scale {args.scale}, {args.loads} loads; median of {args.repeats} "
          "(head: of 4x as many), the two sides run alternately\n")
    print("| what | metatxn ms | plain Parquet ms | metatxn / plain | best / best | target |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row.cells()) + " |")
    print("\n| full scan (fresh process each) | budget MiB | peak RSS growth MiB | Arrow pool peak MiB "
          "| worst / budget | median s | target |")
    print("|---|---|---|---|---|---|---|")
    for found in memory:
        if isinstance(found, ScanMemory):
            print("| " + " | ".join(found.cells()) + " |")
        else:
            print(f"| {found[0]} | - | - | - | - | - | skipped: {found[1]} |")
    if notes:
        print()
        for note in notes:
            print(f"- {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="TPC-H scale factor")
    parser.add_argument("--loads", type=int, default=6, help="appends the table is loaded in")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scan-repeats", type=int, default=3, help="fresh processes per full scan")
    parser.add_argument("--budget", type=int, default=0,
                        help="memory_budget of the full scan in bytes (0: a quarter of the table's "
                             "Arrow size)")
    parser.add_argument("--phases", default="duckdb,polars,head,memory",
                        help="which of duckdb,polars,head,memory to run")
    parser.add_argument("--quick", action="store_true", help="scale 0.1, 4 loads, 3 repeats, 2 scans")
    parser.add_argument("--workdir", default=None, help="where the run's temporary folder is made")
    parser.add_argument("--keep", action="store_true", help="keep the tables (the folder is printed)")
    parser.add_argument("--scan-child", nargs=2, metavar=("URI", "BUDGET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scan_child:
        scan_child(args.scan_child[0], int(args.scan_child[1]))
        return 0
    if args.quick:
        args.scale, args.loads, args.repeats, args.scan_repeats = 0.1, 4, 3, 2
    phases = set(args.phases.split(","))

    work = Path(tempfile.mkdtemp(prefix="bench-open-reads-", dir=args.workdir))
    facts = machine_facts(("metatxn", "pyarrow"))
    load_start = load_average()
    rows: list[Row] = []
    memory: list[ScanMemory | tuple[str, str]] = []
    notes: list[str] = []
    try:
        _progress(f"generating TPC-H lineitem, scale {args.scale}")
        source = generate_lineitem(args.scale, work / "tpch")
        _progress(f"loading it into a metatxn table in {args.loads} appends")
        uri = str(work / "lineitem")
        t, arrow_bytes, load_s = load(source, uri, args.loads)
        snapshot = t.snapshot()
        files = snapshot.file_table(stats=False)
        notes.append(f"{sum(files['rows'].to_pylist()):,} rows loaded by {args.loads} appends in "
                     f"{load_s:.1f} s: {files.num_rows} data files, "
                     f"{sum(files['size'].to_pylist()) / MIB:,.0f} MiB on disk, "
                     f"{arrow_bytes / MIB:,.0f} MiB as Arrow")
        _progress("writing the plain Parquet files")
        plain = write_plain(snapshot, work / "plain")
        budget = args.budget or arrow_bytes // 4

        if "duckdb" in phases:
            rows += duckdb_rows(t, plain, "", args.repeats, notes)
        if "polars" in phases:
            rows += polars_rows(t, plain, "", args.repeats, notes)
        if "head" in phases:
            _progress("head(10)")
            rows.append(head_row(t, args.repeats))
        if "memory" in phases:
            _progress("full scan memory")
            found = scan_memory(uri, budget, "no deletes", args.scan_repeats)
            memory.append(found if isinstance(found, ScanMemory) else ("no deletes", found))

        _progress("deleting 0.1 % of the rows")
        started = time.perf_counter()
        t.delete(_deleted_orders())
        delete_s = time.perf_counter() - started
        snapshot = t.snapshot()
        files = snapshot.file_table(stats=False)
        notes.append(f"`Table.delete` of `l_orderkey % {DELETED_EVERY} == {DELETED_REMAINDER}` took "
                     f"{delete_s:.1f} s: {sum(files['deleted_rows'].to_pylist()):,} rows deleted, "
                     f"{sum(1 for n in files['deleted_rows'].to_pylist() if n)} of {files.num_rows} "
                     "files with deletes")
        plain = write_plain(snapshot, work / "plain_deleted")
        phase = " after deletes"
        if "duckdb" in phases:
            rows += duckdb_rows(t, plain, phase, args.repeats, notes)
        if "polars" in phases:
            rows += polars_rows(t, plain, phase, args.repeats, notes)
        if "memory" in phases:
            _progress("full scan memory after deletes")
            found = scan_memory(uri, budget, "after deletes", args.scan_repeats)
            memory.append(found if isinstance(found, ScanMemory) else ("after deletes", found))
    finally:
        if args.keep:
            print(f"kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    _print_report(args, facts, load_start, rows, memory, notes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
