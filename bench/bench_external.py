"""ADD SEGMENT benchmark: registering external Parquet files in place, and a 1 % selective Spark
query over them through ``txn.spark.read`` against ``spark.read.parquet`` on the same folder.

Issue 13, item 7. What is measured:

1. **Registering** a Hive-partitioned folder of ``--days`` x ``--files-per-day`` Parquet files
   (``day=<int>/part-NNNNN.parquet``, ``--rows`` rows each, written untimed by pyarrow: bigint
   ``id`` and ``ts`` whose ranges are disjoint from file to file, a random bigint, a double, a
   low-cardinality string, an int) with ``t.add_segment(folder, "parquet", partition="day:int")``
   on a fresh table partitioned by ``day`` (created untimed), ``--add-repeats`` times: median
   seconds and files/s. Before them, one add to another fresh table (untimed, so it also pays
   the first use of the code paths) through a counting fsspec filesystem (``LocalFileSystem``
   registered under the protocol ``countingfile``, the folder given as
   ``countingfile:///abs/path``) that counts the files opened, the read calls and the bytes they
   returned: how much of the data was read to register it (footers only, for a table without a
   record key). The same for a table keyed by ``id``, where ADD SEGMENT also reads the
   key column of every file to index the keys and refuse duplicates.
2. **A 1 % selective query**: ``ts`` in the range of 1 % of the files (``ts >= a and ts < b``),
   ``txn.spark.read(spark, uri, filter=...)`` on the unkeyed table against
   ``spark.read.parquet(folder).where(...)``, both written to Spark's ``noop`` sink (planning
   inside the timing on both sides: snapshot resolution and pruning against folder listing and
   schema inference). One untimed warm-up each, then ``--repeats`` runs of each side, alternately:
   median and best, ratio metatxn / plain (below 1: metatxn faster). Files opened: metatxn's
   pruned list (``len(t.snapshot().files(expression))``) and, on both sides, the ``numFiles``
   metric of Spark's file scan in the executed plan (plain Spark lists every file of the folder,
   prunes by partition only, and each task opens every file's footer to skip its row groups).
   Both answers are checked (exactly 1 % of the rows), or the run fails.

Run from the repository root::

    .venv/bin/python -m bench.bench_external --out bench/out/external.json   # 1,000 files
    .venv/bin/python -m bench.bench_external --quick                         # 100 files, ~1 min
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.implementations.local import LocalFileOpener, LocalFileSystem

import txn
import txn.spark
from bench._report import Machine, load_average, machine_facts, machine_section, run_folder

LIBRARIES = ("metatxn", "pyarrow", "pyspark", "fsspec")
#: The protocol of the counting filesystem: ``countingfile:///abs/path`` is the local file.
COUNTING_PROTOCOL = "countingfile"
FIRST_DAY = 20261101
#: ``ts`` is epoch milliseconds, one row every 100 ms, consecutive from file to file.
TS_START, TS_STEP = 1_793_491_200_000, 100
STATUSES = ("new", "paid", "shipped", "delivered", "returned", "cancelled")
SCHEMA = pa.schema([
    ("id", pa.int64()), ("ts", pa.int64()), ("user_id", pa.int64()), ("amount", pa.float64()),
    ("status", pa.string()), ("code", pa.int32()), ("day", pa.int32()),
])


@dataclass(frozen=True)
class Preset:
    days: int
    files_per_day: int
    rows: int
    add_repeats: int
    repeats: int


FULL = Preset(days=10, files_per_day=100, rows=20_000, add_repeats=3, repeats=5)
QUICK = Preset(days=10, files_per_day=10, rows=20_000, add_repeats=3, repeats=5)


@dataclass(frozen=True)
class Config:
    days: int
    files_per_day: int
    rows: int
    add_repeats: int
    repeats: int
    phases: list[str]
    workdir: str

    @property
    def files(self) -> int:
        return self.days * self.files_per_day


@dataclass
class Folder:
    """The external folder as written (untimed)."""

    path: str
    files: int
    rows: int
    bytes: int
    footer_bytes: int  # sum over the files of the footer (FileMetaData + 8 bytes)
    write_s: float


@dataclass
class Counted:
    """What the counting filesystem saw during one add."""

    seconds: float
    files_opened: int = 0
    read_calls: int = 0
    bytes_read: int = 0


@dataclass
class Registration:
    variant: str  # "unkeyed" or "keyed by id"
    samples_s: list[float]
    counted: Counted

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)


@dataclass
class Query:
    predicate: str
    rows_matched: int
    files_selected: int  # files whose ts range meets the predicate (by construction)
    metatxn_ms: list[float]
    plain_ms: list[float]
    metatxn_files: int  # len(t.snapshot().files(expression))
    metatxn_scan: list[dict[str, Any]]  # Spark's file scans of the metatxn read: metrics
    plain_scan: list[dict[str, Any]]
    plain_input_files: int  # spark.read.parquet(folder).where(...).inputFiles(), for reference
    spark_version: str

    @property
    def ratio(self) -> float:
        return statistics.median(self.metatxn_ms) / statistics.median(self.plain_ms)


@dataclass
class Report:
    machine: Machine
    config: Config
    folder: Folder | None = None
    registrations: list[Registration] = field(default_factory=list)
    query: Query | None = None
    wrong: list[str] = field(default_factory=list)


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the pasteable report."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the counting filesystem ---------------------------------------------------------------------

class _Counter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.opened = self.calls = self.bytes = 0

    def reset(self) -> None:
        with self._lock:
            self.opened = self.calls = self.bytes = 0

    def open(self) -> None:
        with self._lock:
            self.opened += 1

    def read(self, size: int) -> None:
        with self._lock:
            self.calls += 1
            self.bytes += size


COUNTER = _Counter()


class CountingFile(LocalFileOpener):
    """A local file whose reads are counted (every way pyarrow may read a Python file)."""

    def read(self, *args: Any, **kwargs: Any) -> bytes:
        data: bytes = super().read(*args, **kwargs)
        COUNTER.read(len(data))
        return data

    def readinto(self, buffer: Any) -> int:
        size: int = self.f.readinto(buffer)
        COUNTER.read(size)
        return size

    def readline(self, *args: Any, **kwargs: Any) -> bytes:
        data: bytes = super().readline(*args, **kwargs)
        COUNTER.read(len(data))
        return data


class CountingFileSystem(LocalFileSystem):
    """``LocalFileSystem`` under its own protocol, counting the files opened and the bytes read."""

    protocol = COUNTING_PROTOCOL

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, **kwargs: Any) -> Any:
        path = self._strip_protocol(path)
        if "r" not in mode:  # only reads are measured
            return super()._open(path, mode, block_size, **kwargs)
        COUNTER.open()
        return CountingFile(path, mode, fs=self, **kwargs)


fsspec.register_implementation(COUNTING_PROTOCOL, CountingFileSystem, clobber=True)


# -- data ----------------------------------------------------------------------------------------

def ts_of_file(config: Config, index: int) -> int:
    """The first ``ts`` of the file at global position ``index`` (day-major order)."""
    return TS_START + index * config.rows * TS_STEP


def write_folder(config: Config, folder: Path) -> Folder:
    """``day=<d>/part-<n>.parquet`` files; ``id`` and ``ts`` ranges are disjoint between files."""
    rng = np.random.default_rng(13)
    started = time.perf_counter()
    total = footers = 0
    statuses = pa.array(STATUSES)
    for day in range(config.days):
        sub = folder / f"day={FIRST_DAY + day}"
        sub.mkdir(parents=True)
        for part in range(config.files_per_day):
            index = day * config.files_per_day + part
            first = index * config.rows
            ids = np.arange(first, first + config.rows, dtype=np.int64)
            data = pa.table({
                "id": ids,
                "ts": TS_START + ids * TS_STEP,
                "user_id": rng.integers(0, 1_000_000, config.rows, dtype=np.int64),
                "amount": np.round(rng.random(config.rows) * 1000, 2),
                "status": pc.take(statuses, rng.integers(0, len(STATUSES), config.rows)),
                "code": rng.integers(0, 1000, config.rows, dtype=np.int32),
            })
            path = sub / f"part-{part:05d}.parquet"
            pq.write_table(data, path, use_dictionary=["status"])
            total += path.stat().st_size
            footers += pq.read_metadata(path).serialized_size + 8
    return Folder(str(folder), config.files, config.files * config.rows, total, footers,
                  time.perf_counter() - started)


# -- 1. registering ------------------------------------------------------------------------------

def _add(uri: Path, url: str, keyed: bool) -> tuple[float, Any]:
    table = txn.create_table(str(uri), SCHEMA, partition_by=["day"], record_key="id" if keyed else None)
    started = time.perf_counter()
    commit = table.add_segment(url, "parquet", partition="day:int")
    return time.perf_counter() - started, (table, commit)


def _check_added(report: Report, what: str, table: Any, commit: Any) -> None:
    assert report.folder is not None
    rows = table.snapshot().count()
    if commit.files_added != report.folder.files or rows != report.folder.rows:
        report.wrong.append(f"{what}: {commit.files_added} files and {rows:,} rows registered, "
                            f"expected {report.folder.files} and {report.folder.rows:,}")
    segments = {f.segment for f in table.snapshot().files()}
    if len(segments) != report.config.days:
        report.wrong.append(f"{what}: {len(segments)} segments, expected one per day folder "
                            f"({report.config.days})")


def measure_registration(report: Report, work: Path) -> str:
    """Time ADD SEGMENT of the folder on fresh tables, unkeyed and keyed; returns the URI of an
    unkeyed table that holds the folder through ``file://`` (for the query)."""
    assert report.folder is not None
    folder = report.folder.path
    tables = work / "tables"
    query_uri = ""
    for keyed in (False, True):
        variant = "keyed by id" if keyed else "unkeyed"
        name = "keyed" if keyed else "plain"
        # The counted add comes first: it also pays the first use of this kind's code paths.
        COUNTER.reset()
        seconds, (table, commit) = _add(tables / f"{name}-counted",
                                        f"{COUNTING_PROTOCOL}://{folder}", keyed)
        counted = Counted(seconds, COUNTER.opened, COUNTER.calls, COUNTER.bytes)
        _check_added(report, f"add_segment {variant} through {COUNTING_PROTOCOL}://", table, commit)
        log(f"add_segment {variant} counted: {counted}")
        samples = []
        for repeat in range(report.config.add_repeats):
            seconds, (table, commit) = _add(tables / f"{name}-{repeat}", folder, keyed)
            samples.append(seconds)
            log(f"add_segment {variant} #{repeat + 1}: {seconds:.2f} s")
            if repeat == 0:
                _check_added(report, f"add_segment {variant}", table, commit)
            if not keyed:
                query_uri = str(tables / f"{name}-{repeat}")
        report.registrations.append(Registration(variant, samples, counted))
    return query_uri


# -- 2. the selective query ----------------------------------------------------------------------

def _once(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def _noop(frame: Any) -> None:
    frame.write.format("noop").mode("overwrite").save()


def _plan_nodes(plan: Any) -> list[Any]:
    """Every node of a physical plan (py4j), looking inside adaptive plans and their stages."""
    nodes, pending = [], [plan]
    while pending:
        node = pending.pop()
        nodes.append(node)
        name = node.nodeName()
        if name.startswith("AdaptiveSparkPlan"):
            pending.append(node.executedPlan())
        elif "QueryStage" in name:
            pending.append(node.plan())
        children = node.children()
        pending.extend(children.apply(i) for i in range(children.size()))
    return nodes


def scan_metrics(frame: Any) -> list[dict[str, Any]]:
    """Run ``frame``'s own executed plan (rows counted, not collected), then read the metrics of
    its file scans: ``numFiles`` ("number of files read") and ``filesSize``."""
    execution = frame._jdf.queryExecution()
    execution.toRdd().count()
    scans = []
    for node in _plan_nodes(execution.executedPlan()):
        metrics = node.metrics()
        if not metrics.contains("numFiles"):
            continue
        scans.append({
            "node": node.nodeName(),
            "numFiles": int(metrics.apply("numFiles").value()),
            "filesSize": int(metrics.apply("filesSize").value()) if metrics.contains("filesSize") else None,
        })
    return scans


def spark_session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("metatxn-bench-external")
             .config("spark.driver.memory", "3g").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "8")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def measure_query(report: Report, uri: str) -> None:
    assert report.folder is not None
    config, folder = report.config, report.folder.path
    selected = max(1, config.files // 100)
    first = (config.files - selected) // 2
    low, high = ts_of_file(config, first), ts_of_file(config, first + selected)
    predicate = f"ts >= {low} and ts < {high}"
    expression = (pc.field("ts") >= low) & (pc.field("ts") < high)
    expected = selected * config.rows
    metatxn_files = len(txn.open_table(uri).snapshot().files(expression))

    log("starting Spark")
    spark = spark_session()
    try:
        def mine() -> Any:
            return txn.spark.read(spark, uri, filter=predicate)

        def plain() -> Any:
            return spark.read.parquet(folder).where(predicate)

        log(f"query `{predicate}`: warm-up and checks")
        for side, frame in (("txn.spark.read", mine()), ("spark.read.parquet", plain())):
            found = frame.count()
            if found != expected:
                report.wrong.append(f"{side} with `{predicate}` found {found:,} rows, expected {expected:,}")
        _noop(mine())
        _noop(plain())
        mine_ms, plain_ms = [], []
        for repeat in range(config.repeats):
            mine_ms.append(_once(lambda: _noop(mine())))
            plain_ms.append(_once(lambda: _noop(plain())))
            log(f"query #{repeat + 1}: metatxn {mine_ms[-1]:,.0f} ms, plain {plain_ms[-1]:,.0f} ms")
        report.query = Query(predicate, expected, selected, mine_ms, plain_ms, metatxn_files,
                             scan_metrics(mine()), scan_metrics(plain()), len(plain().inputFiles()),
                             spark.version)
    finally:
        spark.stop()


# -- report --------------------------------------------------------------------------------------

def _table(headers: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers),
                      *("| " + " | ".join(row) + " |" for row in rows)])


def _size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count:,} B"


def _files(scans: list[dict[str, Any]]) -> str:
    return " + ".join(str(scan["numFiles"]) for scan in scans) or "-"


def render_markdown(report: Report) -> str:
    config, folder = report.config, report.folder
    sections = []
    if report.wrong:
        sections.append("\n".join(["#### WRONG RESULTS (these figures are not valid)", "",
                                   *(f"- {w}" for w in report.wrong)]))
    sections.append(machine_section(report.machine, config.workdir).replace("### ", "#### ", 1))
    if folder is not None:
        sections.append(
            f"#### The external folder\n\n{folder.files:,} Parquet files in {config.days} `day=` folders "
            f"({config.files_per_day} each), {config.rows:,} rows per file ({folder.rows:,} in all), "
            f"{_size(folder.bytes)} ({_size(folder.bytes // folder.files)} per file, footers "
            f"{_size(folder.footer_bytes // folder.files)} per file on average); written by pyarrow "
            f"{pa.__version__} in {folder.write_s:.1f} s (untimed)")
    if report.registrations and folder is not None:
        rows = []
        for r in report.registrations:
            c = r.counted
            rows.append([
                r.variant, f"{r.median_s:.2f}", f"{min(r.samples_s):.2f}",
                f"{folder.files / r.median_s:,.0f}",
                _size(c.bytes_read), f"{100 * c.bytes_read / folder.bytes:.2f} %",
                _size(c.bytes_read // folder.files), f"{c.files_opened:,}", f"{c.read_calls:,}",
                f"{c.seconds:.2f}",
            ])
        sections.append(
            f"#### Registering {folder.files:,} files: `t.add_segment(folder, \"parquet\", "
            f"partition=\"day:int\")` on a fresh table; median of {config.add_repeats}\n\n" + _table(
                ["table", "median s", "best s", "files/s", "bytes read", "of the files' bytes",
                 "read per file", "file opens", "read calls", f"s (the {COUNTING_PROTOCOL}:// add)"],
                rows))
    query = report.query
    if query is not None:
        mine, plain = statistics.median(query.metatxn_ms), statistics.median(query.plain_ms)
        sections.append(
            f"#### 1 % selective query `{query.predicate}` ({query.files_selected} of {config.files:,} "
            f"files, {query.rows_matched:,} rows) into Spark's noop sink; median of {config.repeats} "
            "after a warm-up, the two sides alternately\n\n" + _table(
                ["what", "metatxn ms", "plain Spark Parquet ms", "metatxn / plain", "best / best",
                 "files: metatxn", "files: plain"],
                [["`txn.spark.read(spark, uri, filter=...)` vs `spark.read.parquet(folder).where(...)`",
                  f"{mine:,.0f}", f"{plain:,.0f}", f"{query.ratio:.2f}x",
                  f"{min(query.metatxn_ms) / min(query.plain_ms):.2f}x",
                  f"{query.metatxn_files:,} (scan numFiles {_files(query.metatxn_scan)})",
                  f"{_files(query.plain_scan)} (scan numFiles)"]]))
    notes = _notes(report)
    if notes:
        sections.append("#### Notes\n\n" + "\n".join(f"- {note}" for note in notes))
    return "\n\n".join(sections) + "\n"


def _notes(report: Report) -> list[str]:
    notes = []
    folder = report.folder
    if report.registrations and folder is not None:
        notes.append(
            f"Bytes read are counted by a `LocalFileSystem` registered as `{COUNTING_PROTOCOL}://` "
            "(bytes returned by its files' read calls), in one untimed add to a fresh table before "
            "the timed ones, which name the folder as a plain path (`file://`). Listing the folder "
            "opens no file.")
        for r in report.registrations:
            c = r.counted
            notes.append(
                f"{r.variant}: {c.files_opened / folder.files:.2f} file opens and "
                f"{c.read_calls / folder.files:.2f} read calls per file, "
                f"{_size(c.bytes_read // folder.files)} per file (footers are "
                f"{_size(folder.footer_bytes // folder.files)}: pyarrow reads a file's last 64 KiB in "
                "one call to find its footer)")
    query = report.query
    if query is not None:
        sizes = ", ".join(f"{_size(scan['filesSize'])} for the {side} scan"
                          for side, scans in (("metatxn", query.metatxn_scan), ("plain", query.plain_scan))
                          for scan in scans if scan.get("filesSize") is not None)
        notes.append(
            "Files opened: metatxn's is `len(t.snapshot().files(expression))`, the files whose "
            "recorded `ts` range meets the predicate; both sides' numFiles is the metric of Spark's "
            "file scan in the executed plan (the files the scan was given after partition pruning; "
            "plain Spark opens each one's footer in its tasks to skip row groups by their statistics)"
            + (f"; scan filesSize: {sizes}" if sizes else "") + ". "
            f"`spark.read.parquet(folder).where(...).inputFiles()` lists {query.plain_input_files:,}.")
        notes.append(f"pyspark {query.spark_version}, local[2], driver memory 3g; planning is inside the "
                     "timing on both sides (snapshot resolution and pruning; folder listing and schema "
                     "inference)")
    return notes


def write_json(report: Report, path: Path) -> None:
    document = {**dataclasses.asdict(report), "argv": sys.argv[1:]}
    if report.query is not None:
        document["query"]["ratio_of_medians"] = report.query.ratio
    for item, registration in zip(document["registrations"], report.registrations, strict=True):
        item["median_s"] = registration.median_s
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


# -- command line --------------------------------------------------------------------------------

PHASES = ("register", "query")


def _phases(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PHASES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list from {','.join(PHASES)}")
    return names


def _positive(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_external", description=(
        "ADD SEGMENT (issue 13): registering external Parquet files, and a 1 % selective Spark "
        "query over them against plain Spark Parquet."))
    parser.add_argument("--days", type=_positive, help=f"day= partition folders ({FULL.days})")
    parser.add_argument("--files-per-day", type=_positive, help=f"files per folder ({FULL.files_per_day})")
    parser.add_argument("--rows", type=_positive, help=f"rows per file ({FULL.rows:,})")
    parser.add_argument("--add-repeats", type=_positive,
                        help=f"timed adds per table kind, each on a fresh table ({FULL.add_repeats})")
    parser.add_argument("--repeats", type=_positive, help=f"timed queries per side ({FULL.repeats})")
    parser.add_argument("--phases", type=_phases, default=list(PHASES),
                        help=f"comma-separated, from {','.join(PHASES)} (default: both)")
    parser.add_argument("--quick", action="store_true", help=(
        f"{QUICK.days * QUICK.files_per_day} files of {QUICK.rows:,} rows, {QUICK.add_repeats} adds, "
        f"{QUICK.repeats} queries; explicit flags win"))
    parser.add_argument("--workdir", type=Path,
                        help="make the run's temporary folder inside this one (default: the system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the folder and tables afterwards")
    parser.add_argument("--out", type=Path, help="also write the results as JSON to this file")
    return parser.parse_args(argv)


def make_config(args: argparse.Namespace, workdir: Path) -> Config:
    """Explicit flags, else the --quick preset, else the full one."""
    preset = QUICK if args.quick else FULL

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    return Config(days=pick(args.days, preset.days),
                  files_per_day=pick(args.files_per_day, preset.files_per_day),
                  rows=pick(args.rows, preset.rows), add_repeats=pick(args.add_repeats, preset.add_repeats),
                  repeats=pick(args.repeats, preset.repeats), phases=args.phases, workdir=str(workdir))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    began = time.monotonic()
    with run_folder(args.workdir, keep=args.keep, prefix="bench-external-", log=log) as work:
        config = make_config(args, work)
        report = Report(machine_facts(LIBRARIES), config)
        log(f"writing {config.files:,} Parquet files of {config.rows:,} rows")
        report.folder = write_folder(config, work / "external")
        uri = ""
        if "register" in config.phases:
            uri = measure_registration(report, work)
        if "query" in config.phases:
            if not uri:  # the query needs a table holding the folder: register it once, untimed
                uri = str(work / "tables" / "query")
                txn.create_table(uri, SCHEMA, partition_by=["day"]).add_segment(
                    report.folder.path, "parquet", partition="day:int")
            measure_query(report, uri)
        report.machine = dataclasses.replace(report.machine, load_at_end=load_average())
    print(render_markdown(report), end="")
    if args.out:
        write_json(report, args.out)
        log(f"wrote {args.out}")
    log(f"run took {(time.monotonic() - began) / 60:.1f} min")
    if report.wrong:
        log("WRONG RESULTS (exit status 1):\n" + "\n".join(f"  {w}" for w in report.wrong))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
