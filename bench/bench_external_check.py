"""What checking external files against their ADD SEGMENT record costs (issue 22, item 1).

A file an external segment reads in place is compared, when it is opened, with what ADD SEGMENT
recorded (size, version, rows; design/segments.md, "Files that change"). Measured in one run,
the two variants alternating so that the machine's load falls on both alike:

1. **Read**: ``t.to_arrow()`` of a table whose one external segment is a folder of ``files`` Parquet
   files of ``rows`` rows each (bigint, double, string columns), for each ``--shapes`` entry
   ``<files>x<rows>``; with the check, and without it (``ExternalReader.remember`` a no-op: the
   reader then knows no record and compares nothing, which is the read of the code before it).
   Median CPU time of this process (``time.process_time``: other processes' load on a shared
   machine inflates wall time, not this) and wall time.
2. **Keyed write**: ``t.upsert`` of one key that lives in an external file (each upsert a key
   not touched before), with the check (one open and footer read of that file) and without it
   (``check_external_deletes`` a no-op).
3. **The check alone**, per file, over every file of the largest-count shape: what a read adds
   (the storage's ``info`` of the open file; the footer's row count is read by the read anyway)
   and what a keyed write adds (``ExternalReader.check``: open, ``info``, footer), median of
   ``--repeats`` passes.

Run from the repository root::

    .venv/bin/python -m bench.bench_external_check                  # about 1 minute
    .venv/bin/python -m bench.bench_external_check --repeats 5 --shapes 10x1000
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa
import pyarrow.parquet as pq

import txn
from bench._report import load_average, machine_facts, machine_section, run_folder
from txn._files import ExternalReader
from txn._write import _state

SCHEMA = pa.schema([("id", pa.int64(), False), ("amount", pa.float64()), ("note", pa.string())])


def rows_of(first: int, count: int) -> pa.Table:
    ids = pa.array(range(first, first + count), pa.int64())
    return pa.table({"id": ids, "amount": pa.array([i / 4 for i in range(count)], pa.float64()),
                     "note": pa.array([f"note {i % 97}" for i in range(count)])}, schema=SCHEMA)


def write_folder(folder: Path, files: int, rows: int) -> None:
    folder.mkdir(parents=True)
    for n in range(files):
        pq.write_table(rows_of(n * rows, rows), folder / f"part-{n:05d}.parquet")


@contextlib.contextmanager
def unchecked() -> Iterator[None]:
    """Readers and keyed writes as before the check: no record learnt, no file compared."""
    remember, deletes = ExternalReader.remember, _state.check_external_deletes
    ExternalReader.remember = lambda self, files: None  # type: ignore[method-assign]
    _state.check_external_deletes = lambda context, state, change: None  # type: ignore[assignment]
    try:
        yield
    finally:
        ExternalReader.remember = remember  # type: ignore[method-assign]
        _state.check_external_deletes = deletes


@dataclasses.dataclass(frozen=True)
class Pair:
    """Median ms with the check and without it: CPU time of this process, and wall time."""

    cpu_checked: float
    cpu_plain: float
    wall_checked: float
    wall_plain: float


def alternate(work: Callable[[], object], repeats: int, clear: Callable[[], None]) -> Pair:
    """``work`` with the check and without it, alternating; one warm-up each."""
    samples: dict[tuple[bool, str], list[float]] = {(c, k): [] for c in (True, False)
                                                    for k in ("cpu", "wall")}
    for n in range(repeats + 1):
        for checked in (True, False):
            clear()
            with contextlib.nullcontext() if checked else unchecked():
                cpu, wall = time.process_time(), time.perf_counter()
                work()
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            if n:
                samples[checked, "cpu"].append(cpu * 1000)
                samples[checked, "wall"].append(wall * 1000)
    median = {key: statistics.median(values) for key, values in samples.items()}
    return Pair(median[True, "cpu"], median[False, "cpu"], median[True, "wall"], median[False, "wall"])


def per_file_us(work: Callable[[str], object], urls: list[str], repeats: int) -> float:
    """Median over ``repeats`` passes of ``work`` on every URL, in µs per URL."""
    passes = []
    for _ in range(repeats):
        start = time.perf_counter()
        for url in urls:
            work(url)
        passes.append((time.perf_counter() - start) * 1e6 / len(urls))
    return statistics.median(passes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="100x10000,1000x100",
                        help="external folders to read, <files>x<rows per file>, comma separated")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--upserts", type=int, default=30)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    machine = machine_facts(("metatxn", "pyarrow", "fsspec"))
    lines = ["| read | files | rows | CPU ms with the check | without | difference | per file µs | "
             "wall ms with | without |", "|---|---|---|---|---|---|---|---|---|"]
    largest: tuple[int, txn.Table] | None = None
    with run_folder(args.workdir, keep=args.keep, prefix="bench-external-check-",
                    log=lambda m: print(m, file=sys.stderr)) as root:
        for shape in args.shapes.split(","):
            files, rows = (int(x) for x in shape.split("x"))
            folder = root / f"ext-{files}x{rows}"
            write_folder(folder, files, rows)
            t = txn.create_table(str(root / f"t-{files}x{rows}"), SCHEMA)
            t.add_segment(str(folder), "parquet")
            assert t.to_arrow().num_rows == files * rows
            reader = t._context.store.external_reader()
            print(f"reading {shape} ...", file=sys.stderr)
            pair = alternate(t.to_arrow, args.repeats, reader.recorded.clear)
            difference = pair.cpu_checked - pair.cpu_plain
            lines.append(f"| `t.to_arrow()` | {files:,} | {files * rows:,} | {pair.cpu_checked:.1f} | "
                         f"{pair.cpu_plain:.1f} | {difference:+.1f} ({difference / pair.cpu_plain:+.1%}) | "
                         f"{difference * 1000 / files:+.0f} | {pair.wall_checked:.1f} | "
                         f"{pair.wall_plain:.1f} |")
            if largest is None or files > largest[0]:
                largest = (files, t)
        lines += ["", "| keyed write | CPU ms with the check | without | difference | wall ms with "
                  "| without |", "|---|---|---|---|---|---|"]
        files, rows = 10, 1000
        folder = root / "keyed-ext"
        write_folder(folder, files, rows)
        t = txn.create_table(str(root / "keyed"), SCHEMA, record_key="id")
        t.add_segment(str(folder), "parquet")
        keys = iter(range(0, files * rows, 7))

        def upsert() -> None:
            key = next(keys)
            t.upsert(pa.table({"id": [key], "amount": [0.0], "note": ["new"]}, schema=SCHEMA))

        print("upserting ...", file=sys.stderr)
        pair = alternate(upsert, args.upserts, lambda: None)
        lines.append(f"| `t.upsert` of one key held by an external file | {pair.cpu_checked:.2f} | "
                     f"{pair.cpu_plain:.2f} | {pair.cpu_checked - pair.cpu_plain:+.2f} | "
                     f"{pair.wall_checked:.2f} | {pair.wall_plain:.2f} |")
        assert largest is not None
        count, table = largest
        reader = table._context.store.external_reader()
        table.to_arrow()  # the reader learns the records
        urls = sorted(reader.recorded)
        assert len(urls) == count
        stat = per_file_us(lambda url: reader.filesystem(url)[0].info(reader.filesystem(url)[1]),
                           urls, args.repeats)
        check = per_file_us(lambda url: reader.check(url, "parquet"), urls, args.repeats)
        lines += ["", f"| the check alone, per file ({count:,} local files) | µs |", "|---|---|",
                  f"| a read: the storage's `info` of the open file | {stat:.0f} |",
                  f"| a keyed write: `ExternalReader.check` (open, `info`, footer) | {check:.0f} |"]
        machine = dataclasses.replace(machine, load_at_end=load_average())
        print("\n".join([*lines, "", machine_section(machine, str(root))]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
