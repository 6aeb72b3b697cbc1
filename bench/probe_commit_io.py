"""Where a streaming batch commit's time goes on local disk, window by window over a long stream.

``bench_streaming`` measures a batch commit's latency and how it drifts over 30,000 batches;
this probe says what bounds it. One streaming table, one stream, ``--batches`` 10-row batches
(``s.write(batch_id, batch)``), with the table's ``LocalStorage`` and its file creation counted
and timed (the counting costs a few microseconds per call, so latencies here run slightly above
``bench_streaming``'s). Per window of ``--window`` batches:

- the median batch commit (ms) and the main thread's CPU time per batch (ms): a commit that
  waits on nothing shows the two equal;
- storage calls per batch by kind (``list``, ``read``, ``put_if_absent``, ``put``, ``delete``),
  listed entries and bytes read per batch: flat when the commit path does no work that grows
  with the table;
- the mean cost of creating one file through ``LocalStorage`` (the temporary file a
  put-if-absent writes, then links into place);
- a probe after the window, outside any commit: creating and removing ``--probe-files`` small
  files in the table's own ``_timeline`` folder, and in a folder made fresh beside the table.
  It tells the filesystem's cost apart from metatxn's: the same system call in a folder that has
  seen the table's churn and in one that has not.

Every batch must commit (a None is a wrong result: exit status 1). Run from the repository root::

    .venv/bin/python -m bench.probe_commit_io --workdir /work/benchtmp      # 3,000 batches, ~1 min
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import pyarrow as pa

from bench._report import _markdown_table, machine_facts, machine_section, run_folder

SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.float64())])
STORAGE_CALLS = ("list", "read", "put_if_absent", "put", "delete")


@dataclass
class Window:
    first_batch: int
    batches: int
    median_ms: float
    cpu_ms: float
    calls: dict[str, float]  # storage calls per batch, by kind
    listed: float  # entries listed per batch
    read_bytes: float  # bytes read per batch
    create_us: float  # mean cost of one file creation inside the commits
    probe_table_us: float  # creating a file in the table's _timeline folder, outside commits
    probe_fresh_us: float  # the same in a folder made fresh beside the table


@dataclass
class Census:
    """What one window's commits did to storage."""

    calls: collections.Counter[str] = field(default_factory=collections.Counter)
    listed: int = 0
    read_bytes: int = 0
    creates: list[float] = field(default_factory=list)


@contextmanager
def counted_storage(census: Census) -> Iterator[None]:
    """Count and time ``LocalStorage``'s calls and file creations into ``census`` (restored after)."""
    import metatxn.timeline._local as local

    originals: dict[str, Any] = {name: getattr(local.LocalStorage, name) for name in STORAGE_CALLS}
    create = local._create

    def counting(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            value = call(self, *args, **kwargs)
            census.calls[name] += 1
            if name == "list":
                census.listed += len(value)
            elif name == "read":
                census.read_bytes += len(value)
            return value
        return counted

    def timed_create(path: str) -> Any:
        began = time.perf_counter()
        handle = create(path)
        census.creates.append(time.perf_counter() - began)
        return handle

    for name, call in originals.items():
        setattr(local.LocalStorage, name, counting(name, call))
    local._create = timed_create  # type: ignore[assignment]
    try:
        yield
    finally:
        for name, call in originals.items():
            setattr(local.LocalStorage, name, call)
        local._create = create  # type: ignore[assignment]


def probe_creates(folder: Path, files: int) -> float:
    """Mean microseconds to create (and write 200 bytes to) one new file in ``folder``; the files
    are removed afterwards."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f".probe-{os.getpid()}-{i}.tmp" for i in range(files)]
    began = time.perf_counter()
    for path in paths:
        with open(path, "wb") as handle:
            handle.write(b"x" * 200)
    took = time.perf_counter() - began
    for path in paths:
        path.unlink()
    return took / files * 1e6


def run(root: Path, batches: int, window: int, probe_files: int) -> tuple[list[Window], list[str]]:
    import txn

    table = txn.create_table(str(root / "streamed"), SCHEMA, properties={"streaming": "true"})
    stream = table.stream("probe")
    rng = np.random.default_rng(0)
    windows: list[Window] = []
    wrong: list[str] = []
    for first in range(0, batches, window):
        census = Census()
        wall: list[float] = []
        cpu: list[float] = []
        data = [pa.table({"id": np.arange(b * 10, b * 10 + 10), "value": rng.random(10)}, schema=SCHEMA)
                for b in range(first, min(first + window, batches))]
        with counted_storage(census):
            for offset, batch in enumerate(data):
                began, began_cpu = time.perf_counter(), time.thread_time()
                commit = stream.write(first + offset, batch)
                cpu.append(time.thread_time() - began_cpu)
                wall.append(time.perf_counter() - began)
                if commit is None:
                    wrong.append(f"batch {first + offset} was not committed")
        count = len(data)
        windows.append(Window(
            first_batch=first, batches=count, median_ms=statistics.median(wall) * 1e3,
            cpu_ms=statistics.median(cpu) * 1e3,
            calls={name: census.calls[name] / count for name in STORAGE_CALLS},
            listed=census.listed / count, read_bytes=census.read_bytes / count,
            create_us=statistics.mean(census.creates) * 1e6 if census.creates else 0.0,
            probe_table_us=probe_creates(root / "streamed" / "_timeline", probe_files),
            probe_fresh_us=probe_creates(root / f"fresh-{first}", probe_files)))
        last = windows[-1]
        print(f"[{time.strftime('%H:%M:%S')}] batches {first:,}+: median {last.median_ms:.2f} ms, "
              f"create {last.create_us:.0f} us, probe table/fresh {last.probe_table_us:.0f}/"
              f"{last.probe_fresh_us:.0f} us", file=sys.stderr, flush=True)
    if table.snapshot().count() != batches * 10:
        wrong.append(f"the table holds {table.snapshot().count()} rows, expected {batches * 10}")
    return windows, wrong


def render(windows: list[Window]) -> str:
    headers = ["batches", "median ms", "cpu ms", *(f"{name}/batch" for name in STORAGE_CALLS),
               "listed/batch", "KiB read/batch", "create us (in commits)",
               "create us (_timeline probe)", "create us (fresh folder probe)"]
    rows = [[f"{w.first_batch:,}-{w.first_batch + w.batches - 1:,}", f"{w.median_ms:.2f}",
             f"{w.cpu_ms:.2f}", *(f"{w.calls[name]:.1f}" for name in STORAGE_CALLS),
             f"{w.listed:.0f}", f"{w.read_bytes / 1024:.1f}", f"{w.create_us:.0f}",
             f"{w.probe_table_us:.0f}", f"{w.probe_fresh_us:.0f}"] for w in windows]
    return _markdown_table(headers, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=3_000)
    parser.add_argument("--window", type=int, default=500)
    parser.add_argument("--probe-files", type=int, default=300)
    parser.add_argument("--workdir", type=Path,
                        help="parent folder of the run's table (default: the system's temp)")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    with run_folder(args.workdir, keep=args.keep, prefix="probe-commit-io-") as folder:
        windows, wrong = run(folder, args.batches, args.window, args.probe_files)
        workdir = str(folder)
    print(machine_section(machine_facts(("metatxn", "pyarrow")), workdir).replace("### ", "#### ", 1))
    print()
    print(render(windows))
    if wrong:
        print("WRONG RESULTS:\n" + "\n".join(f"  {w}" for w in wrong), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
