"""Change feed benchmark (issue 26): reading what the last commits changed, on a table of many
commits, against reading those commits' files directly, against diffing two snapshots, and
against deltalake's change data feed on the same workload, in one run.

Workloads (``--workloads``), each ``--commits`` commits (default 10,000) of TPC-H-orders-like rows
(bench_commits' ``orders``: int64 key, int64 customer key, string status, ``decimal(15, 2)`` price,
date, string comment):

- ``append``: an unkeyed table grown by ``--rows``-row appends (default 100), one data file each.
- ``keyed``: a table keyed by ``o_orderkey`` grown by appends of new keys, where every 10th
  commit is instead an upsert (half of its rows reprice existing keys, half are new keys) and
  every 50th a delete of ``--rows / 5`` existing keys: change rows of every type.

metatxn's tables keep their defaults (metadata compaction after every 10 commits in the writer,
timeline archival past 30 instants). deltalake's are created with
``delta.enableChangeDataFeed=true`` and keep its defaults (a checkpoint every 100 versions). Its
``keyed`` table is written through its API (``write_deltalake(mode="append")``, ``merge``,
``delete``), which slows down as versions accumulate, so it is built only up to 2,000 commits
(``--quick``); its ``append`` table is written directly, commit by commit, as
``write_deltalake`` would write it (``_DeltaLogWriter``: the same files and ``add`` actions, its
checkpoints made by deltalake), because through the API 10,000 appends take hours here.
Building takes minutes, so the tables are kept in ``--cache`` (default ``bench/out/changes-cache``)
and reused by later runs with the same sizes (``--rebuild`` builds them again); nothing timed
writes to them.

What is timed, per workload, on a handle opened once (untimed), each side after one untimed run,
the sides run alternately ``--repeats`` times (median, and the ratio of the best runs, which a
shared machine moves least; the diff, which takes seconds, on its own, at most 3 times):

a. **changes**: ``t.changes(start).to_arrow()``, ``start`` the instant of the 11th-last commit
   (exclusive), so the window holds the last ``--last`` commits (default 10).
b. **direct** (``append`` only): the same commits' data files read by pyarrow alone,
   ``pa.concat_tables([pq.ParquetFile(p).read() for p in paths])`` (the fastest way tried;
   ``pq.read_table(p)`` per file is timed too, as **read_table**), the paths taken (untimed) from
   ``t.snapshot().file_table()`` rows whose ``instant`` is in the window. Target: a / b < 2.
c. **diff**: what a user without a change feed writes: both snapshots read whole
   (``t.snapshot(as_of=start).to_arrow()`` and ``t.to_arrow()``) and anti-joined both ways on
   every column (rows only in the new one were inserted, rows only in the old one deleted).
   Target: c / a >= 10.
d. **deltalake load_cdf**: ``DeltaTable(uri).load_cdf(starting_version=v - last + 1,
   ending_version=v).read_all()`` on the deltalake table of the same workload.

Answers are checked, untimed: the changes hold exactly the rows of the direct read (``append``),
and as many inserted and deleted rows as the diff finds, and as many rows of each change type as
deltalake's feed. A wrong answer is printed and makes the exit status 1; the targets are
informational. ``--profile`` prints where (a)'s time goes (cProfile, to stderr).

Run from the repository root::

    .venv/bin/python -m bench.bench_changes                  # 10,000 commits, both workloads
    .venv/bin/python -m bench.bench_changes --quick          # 1,000 commits, 5 repeats
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (python bench/bench_changes.py): make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bench._report import (
    Machine,
    Timing,
    _markdown_table,
    finish_run,
    load_average,
    machine_facts,
    machine_section,
)
from bench.bench_commits import ORDERS, orders

WORKLOADS = ("append", "keyed")
SYSTEMS = ("metatxn", "deltalake")
#: Every UPSERT_EVERY-th commit of the keyed workload is an upsert, every DELETE_EVERY-th a delete.
UPSERT_EVERY, DELETE_EVERY = 10, 50
#: deltalake's keyed table is built through its API (merge and delete write change data files,
#: which only deltalake writes), whose commits slow down as versions accumulate: beyond this
#: many commits the keyed workload runs without it (--quick runs it).
DELTA_API_MAX_COMMITS = 2_000
DEFAULT_CACHE = Path(__file__).resolve().parent / "out" / "changes-cache"
#: Bumped when the workloads change, so that a cache of other tables is never reused.
WORKLOAD_VERSION = 1


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the workloads ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """One commit of a workload: ``kind`` append, upsert or delete, of ``rows`` (delete: the
    key column only)."""

    kind: str
    rows: pa.Table


def steps(workload: str, commits: int, rows: int) -> Callable[[int], Step]:
    """Commit ``i`` of ``workload``, the same for every system (built from ``i`` alone).

    Keyed: commit ``i`` appends keys ``i * rows ..`` (as ``orders(i, rows)``), except every
    UPSERT_EVERY-th (``i % 10 == 9``), an upsert repricing half its rows' worth of the keys of
    commit ``i - 7`` (an append) and adding the first half of its own, and every DELETE_EVERY-th
    (``i % 50 == 44``), a delete of a fifth of the keys of commit ``10 (i // 50) + 1`` (an
    append; no key is deleted twice). The last ten of 10,000 commits hold both.
    """

    def append_only(i: int) -> Step:
        return Step("append", orders(i, rows))

    def keyed(i: int) -> Step:
        if i % DELETE_EVERY == DELETE_EVERY - 6:
            first = (10 * (i // DELETE_EVERY) + 1) * rows
            return Step("delete", pa.table({"o_orderkey": pa.array(range(first, first + max(1, rows // 5)),
                                                                     pa.int64())}))
        if i % UPSERT_EVERY == UPSERT_EVERY - 1:
            half = rows // 2
            old = sorted(random.Random(-i).sample(range((i - 7) * rows, (i - 6) * rows), half))
            repriced = orders(commits + i, half).set_column(0, "o_orderkey", pa.array(old, pa.int64()))
            return Step("upsert", pa.concat_tables([repriced, orders(i, rows).slice(0, rows - half)]))
        return Step("append", orders(i, rows))

    return append_only if workload == "append" else keyed


# -- building (cached) -------------------------------------------------------------------------

@dataclass
class Built:
    system: str
    workload: str
    path: Path
    build_s: float
    reused: bool


def _writer_kind(system: str, workload: str) -> str:
    """How ``system``'s table of ``workload`` is written: deltalake's appends directly to its
    log (see _DeltaLogWriter), everything else through the library's own calls."""
    return "deltalake-log" if (system, workload) == ("deltalake", "append") else system


def _cache_name(system: str, workload: str, commits: int, rows: int) -> str:
    return f"{_writer_kind(system, workload)}-{workload}-{commits}x{rows}-v{WORKLOAD_VERSION}"


def build(system: str, workload: str, commits: int, rows: int, cache: Path, rebuild: bool) -> Built:
    """The table of ``workload`` for ``system`` in ``cache``, built unless a complete one is there."""
    path = cache / _cache_name(system, workload, commits, rows)
    done = path / "BUILT.json"
    if done.exists() and not rebuild:
        facts = json.loads(done.read_text())
        log(f"{system} {workload}: reusing {path} (built in {facts['build_s']:.0f} s)")
        return Built(system, workload, path / "table", facts["build_s"], True)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    step = steps(workload, commits, rows)
    kind = _writer_kind(system, workload)
    writer: _MetatxnWriter | _DeltaWriter | _DeltaLogWriter = (
        _MetatxnWriter(path / "table", workload) if kind == "metatxn"
        else _DeltaLogWriter(path / "table", workload) if kind == "deltalake-log"
        else _DeltaWriter(path / "table", workload))
    seconds, last_report = 0.0, time.monotonic()
    for i in range(commits):
        s = step(i)
        started = time.perf_counter()
        writer.write(s)
        seconds += time.perf_counter() - started
        if time.monotonic() - last_report >= 30:
            last_report = time.monotonic()
            log(f"  {system} {workload}: {i + 1:,}/{commits:,} commits, {seconds:.0f} s of writes")
    done.write_text(json.dumps({"build_s": seconds, "commits": commits, "rows": rows}))
    log(f"{system} {workload}: built {commits:,} commits in {seconds:.0f} s")
    return Built(system, workload, path / "table", seconds, False)


class _MetatxnWriter:
    def __init__(self, path: Path, workload: str) -> None:
        import txn

        self.t = txn.create_table(str(path), ORDERS,
                                  record_key="o_orderkey" if workload == "keyed" else None)

    def write(self, step: Step) -> None:
        if step.kind == "append":
            self.t.append(step.rows)
        elif step.kind == "upsert":
            self.t.upsert(step.rows)
        else:
            self.t.delete(keys=step.rows["o_orderkey"].to_pylist())


class _DeltaWriter:
    def __init__(self, path: Path, workload: str) -> None:
        import deltalake

        self.deltalake = deltalake
        self.dt = deltalake.DeltaTable.create(
            str(path), ORDERS, configuration={"delta.enableChangeDataFeed": "true"})
        # Checkpoints as by default; no log cleanup, which lists the whole log after every
        # commit (3x the append's cost at 1,500 versions) and removes nothing younger than 30
        # days: the table is the same, built in a fraction of the time.
        self.hooks = deltalake.PostCommitHookProperties(create_checkpoint=True,
                                                        cleanup_expired_logs=False)

    def write(self, step: Step) -> None:
        if step.kind == "append":
            self.deltalake.write_deltalake(self.dt, step.rows, mode="append",
                                           post_commithook_properties=self.hooks)
        elif step.kind == "upsert":
            (self.dt.merge(step.rows, predicate="t.o_orderkey = s.o_orderkey", source_alias="s",
                           target_alias="t", post_commithook_properties=self.hooks)
             .when_matched_update_all().when_not_matched_insert_all().execute())
        else:
            keys = ", ".join(map(str, step.rows["o_orderkey"].to_pylist()))
            self.dt.delete(f"o_orderkey IN ({keys})", post_commithook_properties=self.hooks)


class _DeltaLogWriter:
    """deltalake's table of the append workload with its commits written directly: each append
    one Parquet file (pyarrow, snappy) and one JSON commit of an ``add`` action, as
    ``write_deltalake(mode="append")`` writes them, and every 100th version a checkpoint made
    by deltalake itself (``DeltaTable(uri, version=v).create_checkpoint()``), as its default
    ``delta.checkpointInterval`` does. The table is created by deltalake (change data feed on).

    Why: through ``write_deltalake`` each append costs more the more versions the table has
    (0.1 s at 1,500 versions, over 1 s of CPU past 3,000 on this machine: hours to 10,000);
    written directly, 10,000 take about a minute. The reads measured are the same: an append
    writes no change data files, so ``load_cdf`` reads the ``add`` actions' files.
    """

    def __init__(self, path: Path, workload: str) -> None:
        import deltalake

        if workload != "append":
            raise ValueError("only appends are written directly")
        self.deltalake = deltalake
        deltalake.DeltaTable.create(str(path), ORDERS,
                                    configuration={"delta.enableChangeDataFeed": "true"})
        self.path, self.version = path, 0

    def write(self, step: Step) -> None:
        import uuid

        self.version += 1
        rows = step.rows
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        pq.write_table(rows, self.path / name, compression="snappy")
        keys = pc.min_max(rows["o_orderkey"]).as_py()
        now = int(time.time() * 1000)
        stats = {"numRecords": rows.num_rows, "minValues": {"o_orderkey": keys["min"]},
                 "maxValues": {"o_orderkey": keys["max"]},
                 "nullCount": {c: rows[c].null_count for c in rows.column_names}}
        actions = [
            {"commitInfo": {"timestamp": now, "operation": "WRITE",
                            "operationParameters": {"mode": "Append"},
                            "clientVersion": "bench_changes"}},
            {"add": {"path": name, "partitionValues": {}, "size": (self.path / name).stat().st_size,
                     "modificationTime": now, "dataChange": True, "stats": json.dumps(stats)}},
        ]
        log_file = self.path / "_delta_log" / f"{self.version:020d}.json"
        log_file.write_text("".join(json.dumps(a) + "\n" for a in actions))
        if self.version % 100 == 0:
            self.deltalake.DeltaTable(str(self.path), version=self.version).create_checkpoint()


# -- measuring ---------------------------------------------------------------------------------

def _once(run: Callable[[], object]) -> float:
    # A collection due inside the timed call would be charged to whichever side runs after a
    # big one (the diff frees gigabytes of objects): collect first, as timeit disables it.
    gc.collect()
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def interleaved(sides: dict[str, Callable[[], object]], repeats: int) -> dict[str, Timing]:
    """Samples of every side after one untimed run each, the sides run alternately so that a
    busy spell of the machine hits them alike, each round starting one side later (no side
    always follows the same one)."""
    for run in sides.values():
        run()
    names = list(sides)
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for round_ in range(repeats):
        for name in names[round_ % len(names):] + names[:round_ % len(names)]:
            samples[name].append(_once(sides[name]))
    return {name: Timing(s) for name, s in samples.items()}


def diff(old: pa.Table, new: pa.Table) -> tuple[pa.Table, pa.Table]:
    """Rows only in ``new`` (inserted) and rows only in ``old`` (deleted), on every column."""
    keys = new.column_names
    return (new.join(old, keys=keys, join_type="left anti", use_threads=True),
            old.join(new, keys=keys, join_type="left anti", use_threads=True))


def _by_type(changes: pa.Table) -> dict[str, int]:
    counts = pc.value_counts(changes["_change_type"]).to_pylist()
    return {c["values"]: c["counts"] for c in counts}


def _delta_by_type(cdf: pa.Table) -> dict[str, int]:
    counts = pc.value_counts(cdf["_change_type"]).to_pylist()
    return {c["values"]: c["counts"] for c in counts}


#: deltalake's change types by metatxn's names.
DELTA_TYPES = {"insert": "insert", "delete": "delete", "update_preimage": "update_preimage",
               "update_postimage": "update_postimage"}


@dataclass
class Measured:
    workload: str
    timings: dict[str, Timing] = field(default_factory=dict)
    facts: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    profile: str = ""


def measure(workload: str, tables: dict[str, Built], last: int, repeats: int, profile: bool) -> Measured:
    import txn

    result = Measured(workload)
    sides: dict[str, Callable[[], object]] = {}
    t = txn.open_table(str(tables["metatxn"].path))
    history = list(t.history(limit=last + 1))
    window = history[:last]
    start = history[last].instant
    changes = t.changes(start).to_arrow()
    instants = {e.instant for e in window}
    result.facts.append(
        f"metatxn: {len(window)} commits after instant {start}: "
        f"{', '.join(f'{k} {v:,}' for k, v in sorted(_by_type(changes).items()))}; "
        f"{t.snapshot().count():,} rows in the table")
    sides["changes"] = lambda: t.changes(start).to_arrow()
    # Where (a)'s time goes: planning the window (commit metadata only) and reading it.
    planned = t.changes(start)
    sides["plan"] = lambda: t.changes(start)
    sides["read"] = planned.to_arrow
    uri = str(tables["metatxn"].path)
    sides["open+changes"] = lambda: txn.open_table(uri).changes(start).to_arrow()

    if workload == "append":
        files = t.snapshot().file_table(stats=False)
        chosen = files.filter(pc.is_in(files["instant"], pa.array(sorted(instants))))
        paths = chosen["location"].to_pylist()

        def direct() -> pa.Table:
            # The fastest of pyarrow's ways tried for ten small files (pq.read_table per file,
            # or of the list, and a dataset's to_table() each take 1.5-2.5x as long here).
            return pa.concat_tables([pq.ParquetFile(p).read() for p in paths])

        def read_table() -> pa.Table:
            return pa.concat_tables([pq.read_table(p) for p in paths])

        plain = direct()
        mine = changes.drop_columns(list(txn.CHANGE_COLUMNS)).sort_by("o_orderkey")
        if not mine.equals(plain.select(mine.column_names).sort_by("o_orderkey")):
            result.wrong.append(f"{workload}: the changes are not the rows of the {len(paths)} files "
                                f"those commits wrote ({mine.num_rows} vs {plain.num_rows} rows)")
        result.facts.append(f"direct: {len(paths)} data files, {plain.num_rows:,} rows")
        sides["direct"] = direct
        sides["read_table"] = read_table

    def snapshot_diff() -> tuple[pa.Table, pa.Table]:
        return diff(t.snapshot(as_of=start).to_arrow(), t.to_arrow())

    inserted, deleted = snapshot_diff()
    kinds = _by_type(changes)
    # A row written and then replaced inside the window (an upsert of keys appended earlier in
    # it) is an insert, a pre-image and a post-image in the feed, and one inserted row in the
    # diff: the feed's added and removed rows are netted (equal rows cancel) before comparing.
    columns = [c for c in changes.column_names if c not in txn.CHANGE_COLUMNS]
    typed = changes["_change_type"]
    added = changes.filter(pc.is_in(typed, pa.array(["insert", "update_postimage"]))).select(columns)
    removed = changes.filter(pc.is_in(typed, pa.array(["delete", "update_preimage"]))).select(columns)
    net_added, net_removed = diff(removed, added)
    for what, mine, theirs in (("added", net_added, inserted), ("removed", net_removed, deleted)):
        if not mine.sort_by("o_orderkey").equals(theirs.select(columns).sort_by("o_orderkey")):
            result.wrong.append(f"{workload}: the diff finds {theirs.num_rows} rows {what}, the "
                                f"changes net {mine.num_rows}")

    if "deltalake" in tables:
        import deltalake

        dt = deltalake.DeltaTable(str(tables["deltalake"].path))
        version = dt.version()

        def cdf() -> pa.Table:
            # deltalake 1.x returns an arro3 reader: read through the Arrow C stream, no copy.
            return pa.RecordBatchReader.from_stream(
                dt.load_cdf(starting_version=version - last + 1, ending_version=version)).read_all()

        if dt.count() != t.snapshot().count():
            result.wrong.append(f"{workload}: deltalake's table holds {dt.count()} rows, metatxn's "
                                f"{t.snapshot().count()}")
        theirs = _delta_by_type(cdf())
        if {DELTA_TYPES[k]: v for k, v in kinds.items()} != theirs:
            result.wrong.append(f"{workload}: deltalake's feed has {theirs}, metatxn's {kinds}")
        result.facts.append(f"deltalake: versions {version - last + 1}..{version}: "
                            + ", ".join(f"{k} {v:,}" for k, v in sorted(theirs.items())))
        sides["load_cdf"] = cdf

    log(f"{workload}: timing {', '.join(sides)} ({repeats} each)")
    result.timings = interleaved(sides, repeats)
    # Seconds, not milliseconds: timed on its own (already run once above), fewer times.
    log(f"{workload}: timing the diff ({min(repeats, 3)} times)")
    result.timings["diff"] = Timing([_once(snapshot_diff) for _ in range(min(repeats, 3))])
    if profile:
        result.profile = _profile(lambda: t.changes(start).to_arrow())
    return result


def _profile(run: Callable[[], object], times: int = 20) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(times):
        run()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
    return out.getvalue()


# -- report ------------------------------------------------------------------------------------

@dataclass
class Report:
    machine: Machine
    args: dict[str, Any]
    built: list[Built]
    measured: list[Measured]
    notes: list[str]


def _ratio_row(what: str, top: Timing | None, bottom: Timing | None, target: str,
               ok: Callable[[float], bool] | None) -> list[str]:
    if top is None or bottom is None:
        return [what, "-", "-", "-", "-"]
    ratio = top.median / bottom.median
    verdict = "-" if ok is None else f"{target}: {'PASS' if ok(ratio) else 'FAIL'}"
    return [what, f"{ratio:.2f}x", f"{top.best / bottom.best:.2f}x", verdict,
            f"{top.median:,.2f} / {bottom.median:,.2f} ms"]


def render(report: Report) -> str:
    a = report.args
    sections = [machine_section(report.machine, str(a["cache"]))]
    for m in report.measured:
        t = m.timings
        rows = [[name, f"{timing.median:,.2f}", f"{timing.best:,.2f}"] for name, timing in t.items()]
        calls = {"changes": "t.changes(start).to_arrow()",
                 "plan": "t.changes(start): the window planned, nothing read",
                 "read": "scanner.to_arrow() of a scanner planned once",
                 "open+changes": "txn.open_table(uri).changes(start).to_arrow()",
                 "direct": "pq.ParquetFile(p).read() of those commits' files, concatenated",
                 "read_table": "pq.read_table(p) of the same files, concatenated",
                 "diff": "both snapshots to_arrow(), anti-joined both ways",
                 "load_cdf": "deltalake load_cdf(v - 9, v).read_all()"}
        sections.append("\n\n".join([
            f"### `{m.workload}`: the last {a['last']} of {a['commits']:,} commits of {a['rows']} rows "
            f"(median of {a['repeats']}, sides alternated)",
            _markdown_table(["side", "median ms", "best ms", "call"],
                            [[*r, calls.get(r[0], "")] for r in rows]),
            _markdown_table(["ratio", "median", "best", "target", "medians"], [
                _ratio_row("changes / direct", t.get("changes"), t.get("direct"), "< 2x",
                           lambda r: r < 2),
                _ratio_row("changes / read_table", t.get("changes"), t.get("read_table"), "", None),
                _ratio_row("diff / changes", t.get("diff"), t.get("changes"), ">= 10x",
                           lambda r: r >= 10),
                _ratio_row("changes / deltalake load_cdf", t.get("changes"), t.get("load_cdf"), "", None),
            ]),
            "\n".join(f"- {fact}" for fact in m.facts)]))
    builds = [[b.system, b.workload, f"{b.build_s:,.0f}", "reused from the cache" if b.reused else "built"]
              for b in report.built]
    sections.append("\n\n".join(["### Building the tables (untimed for the figures above)",
                                 _markdown_table(["system", "workload", "seconds of writes", "this run"],
                                                 builds)]))
    if report.notes:
        sections.append("\n".join(["### Notes", "", *(f"- {n}" for n in report.notes)]))
    return "\n\n".join(sections) + "\n"


def write_json(report: Report, path: Path) -> None:
    document = {
        "machine": report.machine.__dict__, "args": {k: str(v) for k, v in report.args.items()},
        "built": [b.__dict__ | {"path": str(b.path)} for b in report.built],
        "measured": [{"workload": m.workload, "facts": m.facts, "wrong": m.wrong,
                      "samples_ms": {k: v.samples for k, v in m.timings.items()}}
                     for m in report.measured],
        "notes": report.notes,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_changes",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="append,keyed (default: both)")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="metatxn,deltalake (default: both)")
    parser.add_argument("--commits", type=int, default=10_000)
    parser.add_argument("--rows", type=int, default=100, help="rows per commit")
    parser.add_argument("--last", type=int, default=10, help="commits in the change window")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--quick", action="store_true", help="1,000 commits, 5 repeats")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="where built tables are kept between runs (default: %(default)s)")
    parser.add_argument("--rebuild", action="store_true", help="build the tables again")
    parser.add_argument("--build-only", action="store_true", help="build (or find) the tables, time nothing")
    parser.add_argument("--profile", action="store_true", help="print cProfile of t.changes on stderr")
    parser.add_argument("--out", type=Path, help="also write the samples as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.commits, args.repeats = 1_000, 5
    began = time.monotonic()
    machine = machine_facts(("metatxn", "pyarrow", "deltalake"))
    systems = [s for s in args.systems.split(",") if s]
    built: list[Built] = []
    measured: list[Measured] = []
    notes: list[str] = []
    for workload in [w for w in args.workloads.split(",") if w]:
        tables: dict[str, Built] = {}
        for system in systems:
            if _writer_kind(system, workload) == "deltalake" and args.commits > DELTA_API_MAX_COMMITS:
                notes.append(f"deltalake `{workload}` not built at {args.commits:,} commits: through "
                             "write_deltalake, merge and delete each commit costs more the more "
                             f"versions the table has (over 1 s past 3,000 here); --commits "
                             f"{DELTA_API_MAX_COMMITS:,} or less (--quick) measures it")
                continue
            tables[system] = build(system, workload, args.commits, args.rows, args.cache, args.rebuild)
        built += tables.values()
        if not args.build_only:
            measured.append(measure(workload, tables, args.last, args.repeats, args.profile))
            if measured[-1].profile:
                print(measured[-1].profile, file=sys.stderr)
    machine = Machine(**{**machine.__dict__, "load_at_end": load_average()})
    report = Report(machine, {"commits": args.commits, "rows": args.rows, "last": args.last,
                              "repeats": args.repeats, "cache": args.cache}, built, measured, notes)
    return finish_run(report, markdown=render(report), out=args.out, write_json=write_json,
                      wrong=[w for m in measured for w in m.wrong], began=began, log=log)


if __name__ == "__main__":
    raise SystemExit(main())
