"""Lock contention benchmark: commits/s and storage requests per commit, on a local S3 server.

One table on a moto S3 server (``tests/s3server.py``) on 127.0.0.1, in this process. For each
configuration, N writer processes append small batches (``--rows`` rows) to the table for
``--seconds``, and R reader processes read the whole table (``Table.to_arrow``) in a loop. Every
request the server answers is counted, by who sent it (writer or reader, told apart by the
User-Agent) and by whether it touched the lock folder ``_timeline/lock``.

Two wait policies of the table lock can be compared in one run (``--policies``):

* ``backoff``: the lock as it is (waits doubling from 20 ms to a cap, with jitter; see
  ``timeline/_lock.py``); ``--max-poll-ms`` changes the cap.
* ``fixed``: the lock's earlier behaviour, a fixed 20 ms poll without jitter (each writer
  process builds its locks with ``max_poll_ms = poll_ms`` and a jitter of 0).

Counting starts when every process is ready (imports done, one untimed warm-up commit per
writer) and ends when the last writer has finished the commit it had started at the deadline;
commits/s is the writers' commits over that window. Results go to stdout as Markdown.

Run from the repository root (moto comes with the test extra: ``pip install -e '.[test]'``)::

    .venv/bin/python -m bench.bench_lock                       # 1, 3, 6+2 writers+readers, both policies
    .venv/bin/python -m bench.bench_lock --configs 3 --seconds 5 --policies backoff
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import statistics
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (python bench/bench_lock.py): make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import load_average, machine_facts

POLICIES = ("backoff", "fixed")
WRITER_AGENT = "metatxn-bench-writer"
READER_AGENT = "metatxn-bench-reader"


# -- counting requests at the server ---------------------------------------------------------------


class RequestCounter:
    """WSGI middleware: count requests by (role, lock folder or not, operation)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, bool, str]] = Counter()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        agent = environ.get("HTTP_USER_AGENT", "")
        role = "writer" if WRITER_AGENT in agent else "reader" if READER_AGENT in agent else "other"
        target = urllib.parse.unquote(environ.get("PATH_INFO", "") + "?"
                                      + environ.get("QUERY_STRING", ""))
        method = environ.get("REQUEST_METHOD", "")
        query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        operation = "LIST" if method == "GET" and ("list-type" in query or "prefix" in query) \
            else method
        with self._lock:
            self.counts[(role, "_timeline/lock" in target, operation)] += 1
        return self._app(environ, start_response)

    def take(self) -> Counter[tuple[str, bool, str]]:
        """The counts so far, and start again from zero."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts


def start_server() -> tuple[Any, RequestCounter]:
    from tests.s3server import S3Server

    server = S3Server().start()
    # tests/s3server.py already reached into moto's werkzeug server to serialise conditional
    # PUTs (see there); count outside that, so every request is seen.
    wsgi: Any = server._server._server
    counter = RequestCounter(wsgi.app)
    wsgi.app = counter
    return server, counter


# -- the worker processes --------------------------------------------------------------------------


def _use_policy(policy: str, max_poll_ms: int | None) -> None:
    """Make every table lock this process builds wait by ``policy``."""
    import metatxn.timeline._timeline as timeline_module
    from metatxn.timeline._lock import TableLock

    class BenchLock(TableLock):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if policy == "fixed":
                kwargs["max_poll_ms"] = kwargs.get("poll_ms", 20)
                kwargs["jitter"] = lambda: 0.0
            elif max_poll_ms is not None:
                kwargs["max_poll_ms"] = max_poll_ms
            super().__init__(*args, **kwargs)

    setattr(timeline_module, "TableLock", BenchLock)  # noqa: B010 - Timeline looks it up there


def _options(storage_options: dict[str, Any], agent: str) -> dict[str, Any]:
    return {**storage_options, "config_kwargs": {"user_agent_extra": agent}}


def _batch(rows: int, writer: int, number: int) -> Any:
    import pyarrow as pa

    start = (writer * 1_000_000 + number) * rows
    return pa.table({"id": pa.array(range(start, start + rows), pa.int64()),
                     "payload": pa.array([f"w{writer}-{number}-{i}" for i in range(rows)])})


def _writer(index: int, uri: str, storage_options: dict[str, Any], policy: str,
            max_poll_ms: int | None, rows: int, seconds: float, ready: Any, go: Any,
            results: Any) -> None:
    try:
        import txn

        _use_policy(policy, max_poll_ms)
        table = txn.open_table(uri, _options(storage_options, WRITER_AGENT))
        table.append(_batch(rows, index, 0))  # warm-up: imports, clients, first-commit costs
        ready.put(index)
        go.wait()
        deadline = time.monotonic() + seconds
        latencies = []
        number = 1
        while time.monotonic() < deadline:
            started = time.perf_counter()
            table.append(_batch(rows, index, number))
            latencies.append(time.perf_counter() - started)
            number += 1
        results.put(("writer", index, latencies, None))
    except BaseException as exc:
        results.put(("writer", index, [], f"{type(exc).__name__}: {exc}"))


def _reader(index: int, uri: str, storage_options: dict[str, Any], seconds: float, ready: Any,
            go: Any, results: Any) -> None:
    try:
        import txn

        table = txn.open_table(uri, _options(storage_options, READER_AGENT))
        table.to_arrow()
        ready.put(-1 - index)
        go.wait()
        deadline = time.monotonic() + seconds
        latencies = []
        while time.monotonic() < deadline:
            started = time.perf_counter()
            table.to_arrow()
            latencies.append(time.perf_counter() - started)
        results.put(("reader", index, latencies, None))
    except BaseException as exc:
        results.put(("reader", index, [], f"{type(exc).__name__}: {exc}"))


# -- one configuration -----------------------------------------------------------------------------


@dataclass
class RunResult:
    policy: str
    writers: int
    readers: int
    seconds: float
    commits: int
    reads: int
    commit_p50_ms: float
    commit_max_ms: float
    requests: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def commits_per_s(self) -> float:
        return self.commits / self.seconds if self.seconds else 0.0

    def per_commit(self, key: str) -> float | None:
        return self.requests.get(key, 0) / self.commits if self.commits else None


def _summarise(counts: Counter[tuple[str, bool, str]]) -> dict[str, int]:
    totals: Counter[str] = Counter()
    for (role, lock, operation), count in counts.items():
        totals[f"{role}"] += count
        totals[f"{role}.{operation}"] += count
        if lock:
            totals[f"{role}.lock"] += count
            totals[f"{role}.lock.{operation}"] += count
    return dict(sorted(totals.items()))


def _collect(source: Any, processes: list[Any], *, timeout: float) -> list[Any]:
    """One item from each process; fail at once if a process died without sending one."""
    items: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(items) < len(processes):
        try:
            items.append(source.get(timeout=0.5))
        except queue.Empty:
            dead = [p.exitcode for p in processes if p.exitcode is not None]
            # A process that exited may still have its item in flight: look once more.
            if len(dead) > len(items) and source.empty():
                time.sleep(1)
                if source.empty():
                    raise RuntimeError(f"a worker process exited early (exit codes {dead})") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(items)} of {len(processes)} workers answered") from None
    return items


def run_one(server: Any, counter: RequestCounter, *, policy: str, writers: int, readers: int,
            seconds: float, rows: int, max_poll_ms: int | None) -> RunResult:
    import pyarrow as pa

    import txn

    location = server.new_location("lock-bench")
    txn.create_table(location.uri, pa.schema([("id", pa.int64()), ("payload", pa.string())]),
                     storage_options=location.storage_options)
    context = multiprocessing.get_context("spawn")
    ready, results, go = context.Queue(), context.Queue(), context.Event()
    processes = [
        context.Process(target=_writer, args=(i, location.uri, location.storage_options, policy,
                                              max_poll_ms, rows, seconds, ready, go, results))
        for i in range(writers)
    ] + [
        context.Process(target=_reader, args=(i, location.uri, location.storage_options, seconds,
                                              ready, go, results))
        for i in range(readers)
    ]
    for process in processes:
        process.start()
    try:
        _collect(ready, processes, timeout=300)
        counter.take()
        started = time.perf_counter()
        go.set()
        outcomes = _collect(results, processes, timeout=seconds + 300)
        elapsed = time.perf_counter() - started
        counts = counter.take()
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    commit_latencies = [s for role, _, samples, _ in outcomes if role == "writer" for s in samples]
    reads = sum(len(samples) for role, _, samples, _ in outcomes if role == "reader")
    return RunResult(
        policy=policy, writers=writers, readers=readers, seconds=round(elapsed, 2),
        commits=len(commit_latencies), reads=reads,
        commit_p50_ms=round(statistics.median(commit_latencies) * 1000, 1) if commit_latencies else 0,
        commit_max_ms=round(max(commit_latencies) * 1000, 1) if commit_latencies else 0,
        requests=_summarise(counts),
        errors=[f"{role} {index}: {error}" for role, index, _, error in outcomes if error],
    )


# -- report ----------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render(results: list[RunResult]) -> str:
    headers = ["policy", "writers", "readers", "commits", "s", "commits/s", "commit p50 ms",
               "commit max ms", "writer requests/commit", "lock-folder requests/commit",
               "lock-folder reads/commit (LIST+HEAD+GET)", "reads", "reader requests"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for r in results:
        lock_looks = None
        if r.commits:
            lock_looks = sum(r.requests.get(f"writer.lock.{op}", 0)
                             for op in ("LIST", "HEAD", "GET")) / r.commits
        row = [r.policy, str(r.writers), str(r.readers), str(r.commits), _fmt(r.seconds),
               _fmt(r.commits_per_s, 2), _fmt(r.commit_p50_ms), _fmt(r.commit_max_ms),
               _fmt(r.per_commit("writer")), _fmt(r.per_commit("writer.lock")),
               _fmt(lock_looks), str(r.reads), str(r.requests.get("reader", 0))]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def parse_configs(text: str) -> list[tuple[int, int]]:
    """``"1,3,6+2"``: writer counts, each optionally ``+readers``."""
    configs = []
    for part in text.split(","):
        writers, _, readers = part.strip().partition("+")
        configs.append((int(writers), int(readers or 0)))
    return configs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="1,3,6+2",
                        help="writers[+readers] per run, comma-separated (default 1,3,6+2)")
    parser.add_argument("--policies", default="fixed,backoff",
                        help="lock wait policies to run: backoff, fixed (default both)")
    parser.add_argument("--seconds", type=float, default=15.0, help="timed seconds per run")
    parser.add_argument("--rows", type=int, default=10, help="rows per append")
    parser.add_argument("--max-poll-ms", type=int, default=None,
                        help="cap on one wait for the backoff policy (default: the lock's)")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON")
    args = parser.parse_args(argv)
    policies = [p.strip() for p in args.policies.split(",")]
    unknown = set(policies) - set(POLICIES)
    if unknown:
        parser.error(f"unknown policies {sorted(unknown)}; choose from {POLICIES}")

    machine = machine_facts()
    server, counter = start_server()
    results = []
    try:
        for writers, readers in parse_configs(args.configs):
            for policy in policies:
                print(f"running {policy}: {writers} writers, {readers} readers, "
                      f"{args.seconds:g} s ...", file=sys.stderr, flush=True)
                result = run_one(server, counter, policy=policy, writers=writers,
                                 readers=readers, seconds=args.seconds, rows=args.rows,
                                 max_poll_ms=args.max_poll_ms)
                print(f"  {result.commits} commits, {result.commits_per_s:.2f}/s, "
                      f"{_fmt(result.per_commit('writer'))} writer requests/commit"
                      + (f"; errors: {result.errors}" if result.errors else ""),
                      file=sys.stderr, flush=True)
                results.append(result)
    finally:
        server.stop()

    print(f"Lock contention on the moto S3 server, {args.seconds:g} s per run, "
          f"{args.rows}-row appends, cap {args.max_poll_ms or 'default'}")
    print()
    print(render(results))
    print()
    print(f"Machine: {machine.date_utc} UTC, {machine.cpus} CPUs, {machine.memory_gib} GiB, "
          f"{machine.platform}, {machine.python}; load average {machine.load_at_start} at start, "
          f"{load_average()} at end")
    errors = [e for r in results for e in r.errors]
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"machine": asdict(machine),
                                        "results": [asdict(r) for r in results]}, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
