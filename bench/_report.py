"""Results of a commit benchmark run: the record, ratios, targets, and Markdown/JSON output.

The Markdown is meant to be pasted into ``bench/README.md`` as is. Ratios are always
``metatxn / peer`` (below 1 means metatxn is faster) or ``open@largest N / open@smallest N``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

SUBJECT = "metatxn"
LIBRARIES = ("metatxn", "pyarrow", "deltalake", "pyiceberg", "sqlalchemy")


@dataclass
class AppendResult:
    """Latency of appending one batch to an existing table, one sample per commit."""

    rows: int
    warmup: int
    samples_ms: list[float]
    median_ms: float
    p90_ms: float


@dataclass
class OpenResult:
    """Fresh open plus file listing after ``commits`` small appends, one sample per fresh process."""

    commits: int
    files: int
    samples_ms: list[float]
    median_ms: float
    build_s: float  # cumulative seconds of appends from an empty table to ``commits``
    facts: dict[str, object] = field(default_factory=dict)


@dataclass
class SystemResult:
    note: str = ""
    skipped: str | None = None  # set when the system did not run (or stopped): why
    limits: list[str] = field(default_factory=list)  # N values left out by --build-budget, and why
    append: AppendResult | None = None
    opens: list[OpenResult] = field(default_factory=list)

    def open_at(self, commits: int) -> OpenResult | None:
        return next((o for o in self.opens if o.commits == commits), None)


@dataclass
class Target:
    """An informational goal: ``status`` is PASS, FAIL or n/a (figures missing)."""

    status: str
    goal: str
    detail: str


@dataclass(frozen=True)
class RunConfig:
    """What was measured: set from the command line."""

    systems: list[str]
    commits: list[int]  # ascending
    appends: int
    warmup: int
    repeats: int
    append_rows: int
    build_rows: int
    build_budget_s: float  # 0: no limit
    workdir: str


@dataclass(frozen=True)
class Machine:
    date_utc: str
    cpus: int | None
    memory_gib: float | None
    platform: str
    python: str
    libraries: dict[str, str]
    # 1-minute load average when the run started and ended: other work on the machine skews every figure
    load_at_start: float | None
    load_at_end: float | None = None


@dataclass
class Report:
    machine: Machine
    config: RunConfig
    systems: dict[str, SystemResult]


def median_and_p90(samples: list[float]) -> tuple[float, float]:
    """Median and 90th percentile (inclusive method, so small sample sets stay within their range)."""
    if len(samples) == 1:
        return samples[0], samples[0]
    return statistics.median(samples), statistics.quantiles(samples, n=10, method="inclusive")[8]


def machine_facts(libraries: Sequence[str] = LIBRARIES) -> Machine:
    """What a reader needs to compare figures across machines (with the versions of ``libraries``)."""
    return Machine(
        date_utc=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M"),
        cpus=os.cpu_count(),
        memory_gib=_memory_gib(),
        platform=platform.platform(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        libraries={name: _version(name) for name in libraries},
        load_at_start=load_average(),
    )


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 1)
    except (AttributeError, OSError):  # not available on this platform
        return None


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (AttributeError, ValueError, OSError):  # not POSIX, or the value is not exposed
        return None


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _smallest_largest(report: Report) -> tuple[int, int]:
    """The smallest and largest N measured; (0, 0) when the open phase was not run."""
    commits = report.config.commits
    return (commits[0], commits[-1]) if commits else (0, 0)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def _append_median(report: Report, name: str) -> float | None:
    result = report.systems.get(name)
    return result.append.median_ms if result and result.append else None


def _open_median(report: Report, name: str, commits: int) -> float | None:
    result = report.systems.get(name)
    found = result.open_at(commits) if result else None
    return found.median_ms if found else None


def _scaling(report: Report, name: str) -> float | None:
    """open@largest N / open@smallest N for ``name``; None without two N values."""
    low, high = _smallest_largest(report)
    if low == high:
        return None
    return _ratio(_open_median(report, name, high), _open_median(report, name, low))


def ratios(report: Report) -> dict[str, float | None]:
    """Every ratio the report prints, keyed by a readable label."""
    low, high = _smallest_largest(report)
    peers = [name for name in report.systems if name != SUBJECT]
    out: dict[str, float | None] = {}
    for peer in peers:
        out[f"append median {SUBJECT}/{peer}"] = _ratio(
            _append_median(report, SUBJECT), _append_median(report, peer))
    for name in report.systems:
        out[f"{name} open@{high}/open@{low}"] = _scaling(report, name)
    for peer in peers:
        out[f"open@{high} {SUBJECT}/{peer}"] = _ratio(
            _open_median(report, SUBJECT, high), _open_median(report, peer, high))
    return out


def _verdict(ok: bool | None) -> str:
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def _append_target(report: Report) -> Target:
    ours, delta = _append_median(report, SUBJECT), _append_median(report, "deltalake")
    ok = None if ours is None or delta is None else ours <= delta
    return Target(_verdict(ok), f"{SUBJECT} median append latency <= deltalake's",
                  f"{_ms(ours)} vs {_ms(delta)}")


def _scaling_target(report: Report) -> Target:
    low, high = _smallest_largest(report)
    scale = _scaling(report, SUBJECT)
    return Target(_verdict(None if scale is None else scale <= 1.5),
                  f"{SUBJECT} open@{high} <= 1.5 x open@{low}",
                  "needs two N values and both figures" if scale is None else f"{scale:.2f} x")


def _open_target(report: Report) -> Target:
    _, high = _smallest_largest(report)
    at_high = {name: _open_median(report, name, high) for name in report.systems}
    ours = at_high.pop(SUBJECT, None)
    ok = None
    if ours is not None and at_high and all(v is not None for v in at_high.values()):
        ok = all(ours < v for v in at_high.values() if v is not None)
    return Target(_verdict(ok), f"{SUBJECT} open@{high} faster than {' and '.join(at_high) or 'the peers'}",
                  ", ".join(f"{name} {_ms(_open_median(report, name, high))}" for name in report.systems))


def targets(report: Report) -> list[Target]:
    """The three goals metatxn sets itself. Informational only: they never fail the run."""
    return [_append_target(report), _scaling_target(report), _open_target(report)]


def _markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _append_section(report: Report) -> str:
    config = report.config
    rows = []
    for name, result in report.systems.items():
        append = result.append
        rows.append([
            name,
            _fmt(append.median_ms if append else None),
            _fmt(append.p90_ms if append else None),
            "-" if name == SUBJECT else _fmt(
                _ratio(_append_median(report, SUBJECT), _append_median(report, name))),
        ])
    title = (f"### Append latency: {config.append_rows} rows per commit, {config.appends} appends "
             f"after {config.warmup} warm-up appends")
    return "\n\n".join([title, _markdown_table(
        ["system", "median ms", "p90 ms", f"{SUBJECT}/system (median)"], rows)])


def _open_section(report: Report) -> str:
    commits = report.config.commits
    low, high = _smallest_largest(report)
    rows = []
    for name, result in report.systems.items():
        files = result.open_at(high)
        rows.append([
            name,
            *(_fmt(_open_median(report, name, n)) for n in commits),
            str(files.files) if files else "-",
            _fmt(_scaling(report, name)),
            "-" if name == SUBJECT else _fmt(
                _ratio(_open_median(report, SUBJECT, high), _open_median(report, name, high))),
        ])
    headers = ["system", *(f"ms @{n}" for n in commits), f"files @{high}", f"@{high}/@{low}",
               f"{SUBJECT}/system @{high}"]
    title = (f"### Open + list files after N commits of {report.config.build_rows} rows "
             f"(median of {report.config.repeats} fresh process{'es' if report.config.repeats != 1 else ''})")
    return "\n\n".join([title, _markdown_table(headers, rows)])


def _build_section(report: Report) -> str:
    rows = []
    for name, result in report.systems.items():
        previous_commits, previous_s = 0, 0.0
        for o in result.opens:
            rate = _ratio(o.commits - previous_commits, o.build_s - previous_s)
            facts = ", ".join(f"{k}={v}" for k, v in o.facts.items()) or "-"
            rows.append([name, str(o.commits), _fmt(o.build_s, 1), _fmt(rate, 0), facts])
            previous_commits, previous_s = o.commits, o.build_s
    title = "### Building the tables (cumulative append time, commits/s since the previous N, layout)"
    return "\n\n".join([title, _markdown_table(["system", "N", "build s", "commits/s", "layout"], rows)])


def _targets_section(report: Report) -> str:
    lines = [f"- {t.status:<4}  {t.goal}: {t.detail}" for t in targets(report)]
    return "\n".join(["### Targets (informational)", "", *lines])


def _notes_section(report: Report) -> str:
    lines = [f"- {name}: {result.note}" for name, result in report.systems.items() if result.note]
    lines += [f"- {name} skipped: {result.skipped}" for name, result in report.systems.items()
              if result.skipped]
    lines += [f"- {name}: {limit}" for name, result in report.systems.items() for limit in result.limits]
    return "\n".join(["### Notes", "", *lines])


def _machine_section(report: Report) -> str:
    return machine_section(report.machine, report.config.workdir)


def machine_section(m: Machine, workdir: str) -> str:
    """The "Machine" section of a benchmark report (shared by every benchmark)."""
    return "\n".join([
        "### Machine",
        "",
        f"- {m.date_utc} UTC, {m.cpus} CPUs, {m.memory_gib} GiB RAM, {m.platform}",
        f"- {m.python}; " + ", ".join(f"{k} {v}" for k, v in m.libraries.items()),
        f"- load average {m.load_at_start} at start, {m.load_at_end} at end"
        + (" (busy machine: figures are skewed)" if _busy(m) else ""),
        f"- workdir: {workdir}",
    ])


@contextmanager
def run_folder(parent: Path | None, *, keep: bool, prefix: str,
               log: Callable[[str], None] = print) -> Iterator[Path]:
    """A fresh temporary folder (inside ``parent`` if given), removed afterwards unless ``keep``."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield folder
    finally:
        if keep:
            log(f"kept {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _busy(machine: Machine) -> bool:
    loads = [x for x in (machine.load_at_start, machine.load_at_end) if x is not None]
    return bool(loads and machine.cpus and max(loads) > machine.cpus / 2)


def render_markdown(report: Report) -> str:
    """The whole report as Markdown, ready to paste into bench/README.md."""
    sections = [_machine_section(report)]
    if report.config.appends:
        sections.append(_append_section(report))
    if report.config.commits:
        sections += [_open_section(report), _build_section(report)]
    sections += [_targets_section(report), _notes_section(report)]
    return "\n\n".join(sections) + "\n"


def write_json(report: Report, path: Path) -> None:
    """Write the report, its ratios and targets as JSON (samples included, for later analysis)."""
    document = {
        **dataclasses.asdict(report),
        "ratios": ratios(report),
        "targets": [dataclasses.asdict(t) for t in targets(report)],
        "argv": sys.argv[1:],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


def finish_run(report: Any, *, markdown: str, out: Path | None, write_json: Callable[[Any, Path], None],
               wrong: list[str], began: float, log: Callable[[str], None]) -> int:
    """The end every benchmark shares: the Markdown on stdout, the JSON if asked, the run's length,
    and exit status 1 (naming them) when any result was wrong."""
    print(markdown, end="")
    if out:
        write_json(report, out)
        log(f"wrote {out}")
    log(f"run took {(time.monotonic() - began) / 60:.1f} min")
    if wrong:
        log("WRONG RESULTS (exit status 1):\n" + "\n".join(f"  {w}" for w in wrong))
        return 1
    return 0


@dataclass
class Timing:
    """Samples of one side, in milliseconds."""

    samples: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)
