"""Commit benchmark: metatxn against deltalake and pyiceberg, on the same data, in one run.

What is measured, per system:

1. **Append latency.** One 100-row TPC-H-orders-like batch appended to an existing table, through
   a handle held by a long-lived writer: a few untimed warm-up appends, then ``--appends`` timed
   ones. Reports the median and p90. This is the cost every streaming or micro-batch writer pays
   per commit.
2. **Open + list after N commits.** The table is grown by 10-row appends to each N in
   ``--commits``; at each N a *fresh process* opens the table and lists its live data files
   (median of ``--repeats`` processes). This is what every reader pays before reading a byte, and
   how it grows with N shows whether the metadata layout scales with history.

Peers run with their defaults, as users get them (deltalake checkpoints every 100 commits;
pyiceberg fast-appends one manifest per commit). Results are printed as Markdown for
``bench/README.md`` and optionally written as JSON (``--out``). Targets are informational: the
exit status is 0 whatever the figures.

Run from the repository root::

    .venv/bin/python -m bench.bench_commits            # the full spec (N up to 10,000: slow)
    .venv/bin/python -m bench.bench_commits --quick    # smoke run
"""

from __future__ import annotations

import argparse
import datetime
import decimal
import multiprocessing
import random
import statistics
import sys
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

if __package__ in (None, ""):  # run as a file (python bench/bench_commits.py): make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

from bench._report import (
    AppendResult,
    OpenResult,
    Report,
    RunConfig,
    SystemResult,
    load_average,
    machine_facts,
    median_and_p90,
    render_markdown,
    run_folder,
    write_json,
)
from bench._systems import SYSTEMS, System, make_system, timed_open, unavailable_reason

ORDERS = pa.schema([
    ("o_orderkey", pa.int64()),
    ("o_custkey", pa.int64()),
    ("o_orderstatus", pa.string()),
    ("o_totalprice", pa.decimal128(15, 2)),
    ("o_orderdate", pa.date32()),
    ("o_comment", pa.string()),
])
APPEND_ROWS = 100
BUILD_ROWS = 10


@dataclass(frozen=True)
class Preset:
    """Default sizes of a run; explicit command-line flags override each field."""

    commits: tuple[int, ...]
    appends: int
    warmup: int
    repeats: int


FULL = Preset(commits=(100, 1000, 10000), appends=50, warmup=5, repeats=5)
QUICK = Preset(commits=(100, 300), appends=20, warmup=3, repeats=3)
T = TypeVar("T")
_WORDS = ("furiously", "regular", "deposits", "sleep", "carefully", "final", "packages", "boost",
          "blithely", "ironic", "accounts", "haggle", "quickly", "express", "requests", "nag")
_FIRST_DAY = datetime.date(1992, 1, 1)


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the pasteable report."""
    print(message, file=sys.stderr, flush=True)


def orders(index: int, rows: int) -> pa.Table:
    """Batch number ``index`` of ``rows`` orders: deterministic, so every system gets identical data."""
    rng = random.Random(index)
    first_key = index * rows
    return pa.table({
        "o_orderkey": list(range(first_key, first_key + rows)),
        "o_custkey": [rng.randrange(1, 150_000) for _ in range(rows)],
        "o_orderstatus": [rng.choice("FOP") for _ in range(rows)],
        "o_totalprice": [decimal.Decimal(rng.randrange(90_000, 55_000_000)).scaleb(-2) for _ in range(rows)],
        "o_orderdate": [_FIRST_DAY + datetime.timedelta(days=rng.randrange(2_405)) for _ in range(rows)],
        "o_comment": [" ".join(rng.choices(_WORDS, k=rng.randrange(3, 10))) for _ in range(rows)],
    }, schema=ORDERS)


def measure_appends(system: System, config: RunConfig) -> AppendResult:
    """Time ``config.appends`` appends of APPEND_ROWS rows to a table that already has commits."""
    system.create(ORDERS)
    for index in range(config.warmup):
        system.append(orders(index, APPEND_ROWS))
    samples = []
    for index in range(config.warmup, config.warmup + config.appends):
        data = orders(index, APPEND_ROWS)  # built before the clock starts
        start = time.perf_counter()
        system.append(data)
        samples.append((time.perf_counter() - start) * 1e3)
    median, p90 = median_and_p90(samples)
    return AppendResult(rows=APPEND_ROWS, warmup=config.warmup, samples_ms=samples, median_ms=median,
                        p90_ms=p90)


def duration(seconds: float) -> str:
    """Seconds as a person reads them: 42 s, 12 min, 3.5 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"


@dataclass
class Growth:
    """A table grown by one BUILD_ROWS append per commit, remembering what each append cost.

    The costs project how long growing further will take. Both peers pay more per append as
    commits accumulate (at least linearly, so building N commits is at least quadratic in N), which
    makes N = 10,000 take hours; the projection lets ``--build-budget`` refuse before starting.
    """

    system: System
    name: str
    costs: list[float] = field(default_factory=list)  # seconds per append, in commit order
    seconds: float = 0.0  # sum(costs), kept as we go

    @property
    def commits(self) -> int:
        return len(self.costs)

    def projected_seconds(self, target: int) -> float | None:
        """Seconds of appends from here to ``target`` commits, or None before there is enough to go on.

        A straight line is fitted to the cost per commit over the later half of the commits made:
        costs grow faster than linearly with pyiceberg, so the recent slope is the better guess
        (and still an underestimate there).
        """
        if len(self.costs) < 20:
            return None
        start = len(self.costs) // 2
        slope, intercept = statistics.linear_regression(range(start, len(self.costs)), self.costs[start:])
        count = target - self.commits
        return max(0.0, count * intercept + slope * count * (self.commits + target - 1) / 2)

    def grow_to(self, target: int, budget_s: float) -> bool:
        """Append until the table has ``target`` commits; False if ``budget_s`` (0: none) ran out first."""
        last_report = time.monotonic()
        while self.commits < target:
            if budget_s and self.seconds >= budget_s:
                return False
            data = orders(self.commits, BUILD_ROWS)  # built before the clock starts
            began = time.perf_counter()
            self.system.append(data)
            self.costs.append(time.perf_counter() - began)
            self.seconds += self.costs[-1]
            if time.monotonic() - last_report >= 10:
                last_report = time.monotonic()
                log(f"  {self.name}: {self.commits}/{target} commits, last append "
                    f"{self.costs[-1] * 1e3:.0f} ms, {self.seconds:.0f} s of appends so far")
        return True


def open_in_fresh_processes(name: str, root: Path, warm_root: Path, repeats: int) -> tuple[list[float], int]:
    """Run :func:`timed_open` ``repeats`` times, each in a new spawned process; ms samples and file count."""
    context = multiprocessing.get_context("spawn")
    samples, counts = [], set()
    for _ in range(repeats):
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            seconds, files = pool.submit(timed_open, name, str(root), str(warm_root)).result()
        samples.append(seconds * 1e3)
        counts.add(files)
    if len(counts) != 1:
        raise RuntimeError(f"{name} listed a different number of files on each open: {sorted(counts)}")
    return samples, counts.pop()


def within_budget(growth: Growth, target: int, budget_s: float, result: SystemResult) -> bool:
    """Log the projected cost of growing to ``target``; False (and a note) if it would break the budget."""
    projected = growth.projected_seconds(target)
    if projected is None:
        return True
    hint = " (--build-budget SECONDS skips such N)" if not budget_s and projected > 600 else ""
    log(f"  {growth.name}: growing to {target} commits, projected {duration(projected)} of appends{hint}")
    if not budget_s or growth.seconds + projected <= budget_s:
        return True
    result.limits.append(
        f"N >= {target} not built: {duration(growth.seconds + projected)} of appends projected, "
        f"over --build-budget {budget_s:.0f} s")
    return False


def measure_opens(name: str, root: Path, config: RunConfig, result: SystemResult) -> None:
    """Grow one table through each N of ``config.commits`` and time fresh opens at each N."""
    warm_root = root / "warm"
    warm = make_system(name, warm_root)
    warm.create(ORDERS)
    warm.append(orders(0, BUILD_ROWS))
    growth = Growth(make_system(name, root / "grown"), name)
    growth.system.create(ORDERS)
    for commits in config.commits:
        if not within_budget(growth, commits, config.build_budget_s, result):
            return
        if not growth.grow_to(commits, config.build_budget_s):
            result.limits.append(f"stopped at {growth.commits} commits: --build-budget "
                                 f"{config.build_budget_s:.0f} s used up before N = {commits}")
            return
        samples, files = open_in_fresh_processes(name, root / "grown", warm_root, config.repeats)
        if files != commits:
            log(f"  note: {name} lists {files} files after {commits} one-file appends")
        median, _ = median_and_p90(samples)
        log(f"  {name}: open + list @{commits} commits: {median:.2f} ms median, "
            f"{growth.seconds:.1f} s of appends to build")
        result.opens.append(OpenResult(commits=commits, files=files, samples_ms=samples, median_ms=median,
                                       build_s=growth.seconds, facts=growth.system.facts()))


def run_system(name: str, root: Path, config: RunConfig) -> SystemResult:
    """Run both measurements for one system; a failure is recorded, not raised."""
    result = SystemResult(note=SYSTEMS[name].note)
    phase = "append latency"
    try:
        if config.appends:
            log(f"{name}: append latency, {config.appends} x {APPEND_ROWS} rows")
            result.append = measure_appends(make_system(name, root / "append"), config)
            log(f"  {name}: median {result.append.median_ms:.2f} ms, p90 {result.append.p90_ms:.2f} ms")
        phase = "open + list"
        if config.commits:
            log(f"{name}: open + list after {', '.join(map(str, config.commits))} commits")
            measure_opens(name, root / "open", config, result)
    # One system failing (a peer's bug, or metatxn mid-development) must not lose the others'
    # figures, so any error is caught here, printed in full, and reported in the Notes.
    except Exception as exc:
        traceback.print_exc()
        result.skipped = f"failed during {phase}: {type(exc).__name__}: {exc}"
    return result


def run(config: RunConfig) -> Report:
    """Measure every available system in turn; unavailable ones are reported as skipped."""
    workdir = Path(config.workdir)
    machine = machine_facts()
    systems: dict[str, SystemResult] = {}
    for name in config.systems:
        reason = unavailable_reason(name, workdir / "probe" / name)
        if reason:
            log(f"{name}: skipped: {reason}")
            systems[name] = SystemResult(note=SYSTEMS[name].note, skipped=reason)
        else:
            systems[name] = run_system(name, workdir / name, config)
    return Report(machine=replace(machine, load_at_end=load_average()), config=config,
                  systems=systems)


def _int_list(text: str) -> list[int]:
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers like 100,1000, got {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _system_list(text: str) -> list[str]:
    names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown system(s) {unknown}; choose from {', '.join(SYSTEMS)}")
    return names


def _at_least(minimum: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    return _at_least(0, text)


def _positive(text: str) -> int:
    return _at_least(1, text)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.bench_commits",
        description="Append latency and open+list time after N commits: metatxn vs deltalake vs pyiceberg.",
    )
    parser.add_argument("--systems", type=_system_list, default=list(SYSTEMS),
                        help=f"comma-separated, from {','.join(SYSTEMS)} (default: all)")
    parser.add_argument("--commits", type=_int_list,
                        help=f"N values for open+list (default: {','.join(map(str, FULL.commits))})")
    parser.add_argument("--appends", type=_non_negative,
                        help=f"timed {APPEND_ROWS}-row appends; 0 skips them (default: {FULL.appends})")
    parser.add_argument("--warmup", type=_non_negative,
                        help=f"untimed appends before them (default: {FULL.warmup})")
    parser.add_argument("--repeats", type=_positive,
                        help=f"fresh-process opens per N (default: {FULL.repeats})")
    parser.add_argument("--build-budget", type=_seconds, default=0.0, metavar="SECONDS",
                        help="per system: do not grow a table to an N whose projected append time would "
                             "exceed this; 0 = no limit, the full spec (default: 0)")
    parser.add_argument("--quick", action="store_true",
                        help=f"smoke run: commits {','.join(map(str, QUICK.commits))}, {QUICK.appends} "
                             f"appends, {QUICK.warmup} warm-up, {QUICK.repeats} repeats; explicit flags win")
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
        commits=_flag_or(args.commits, list(preset.commits)),
        appends=_flag_or(args.appends, preset.appends),
        warmup=_flag_or(args.warmup, preset.warmup),
        repeats=_flag_or(args.repeats, preset.repeats),
        append_rows=APPEND_ROWS,
        build_rows=BUILD_ROWS,
        build_budget_s=args.build_budget,
        workdir=str(workdir),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with run_folder(args.workdir, keep=args.keep, prefix="bench-commits-", log=log) as folder:
        report = run(make_config(args, folder))
    print(render_markdown(report), end="")
    if args.out:
        write_json(report, args.out)
        log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
