"""Object storage benchmark (issue 29, item 3): metatxn's path to S3 before and after the object-store
layer, against deltalake and Lance, all on one moto S3 server on 127.0.0.1.

Three workloads of TPC-H-orders-like rows (``bench_mutations.orders_for``: int64 key, int64
customer key, string status, ``decimal(15, 2)`` price, date, string comment):

1. **Append**: ``--warmup`` untimed, then ``--appends`` timed appends of ``--append-rows`` rows
   (100) through a handle kept open, into a fresh table: median and best, in ms.
2. **Load**: one append of ``--load-rows`` rows (1,000,000) into an empty table (the create is
   not timed); ``--repeats`` fresh tables.
3. **Read**: a table of ``--read-rows`` rows (10,000,000), built untimed in appends of at most
   1,000,000 rows, read whole into Arrow (open + read timed) in ``--repeats`` fresh processes,
   each of which first imports its library and reads a small other table, untimed.

- ``before``: metatxn as it was before issue 29 (``--before-ref``, unpacked with ``git archive``):
  commits through s3fs, data through ``pa.fs.PyFileSystem(FSSpecHandler(s3fs))``.
- ``metatxn``: metatxn of this working tree (the object-store layer once merged), given
  deltalake-style ``storage_options``.
- ``deltalake``: ``write_deltalake(dt, batch, mode="append")`` on a held ``DeltaTable``
  (``conditional_put=etag``); read ``DeltaTable(uri, storage_options=so).to_pyarrow_table()``.
- ``lance``: ``ds.insert(batch)``; read ``lance.dataset(uri, storage_options=so).to_table()``.

metatxn appends with ``t.append(batch)`` and reads with ``txn.open_table(uri, so).to_arrow()``.
Every workload of every system runs in a fresh child process, whose ``sys.path``
starts with that system's code, so ``before`` and ``metatxn`` never share an import; each child
reports which ``txn`` it imported. The server is moto's, in this process, with conditional PUTs
serialised (``tests/s3server.py``): every system pays for the same Python server, so the ratios
are about the clients; absolute figures are far below S3's. A read's rows are counted and must
equal the rows written (a wrong count exits 1). Ratios are ``metatxn / before`` (target: at most
1 on each workload) and each system over ``before``.

Run from the repository root::

    .venv/bin/python -m bench.bench_storage            # 100-row appends, 1M-row load, 10M-row read
    .venv/bin/python -m bench.bench_storage --quick    # 100k-row load, 1M-row read: a few minutes
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import _markdown_table, load_average, machine_facts, machine_section

REPO = Path(__file__).resolve().parent.parent
SYSTEMS = ("before", "metatxn", "deltalake", "lance")
WORKLOADS = ("append", "load", "read")
#: The last commit of main before issue 29's object-store layer: "today's path".
BEFORE_REF = "4b1e83d"
BUILD_CHUNK = 1_000_000
REGION = "us-east-1"


def log(message: str) -> None:
    """Progress goes to stderr so stdout stays the pasteable report."""
    print(message, file=sys.stderr, flush=True)


# -- what each system is given to reach the server -----------------------------------------------


def storage_options(system: str, endpoint: str) -> dict[str, Any]:
    from tests.s3server import ACCESS_KEY, SECRET_KEY

    if system == "before":  # s3fs's keyword arguments, the only form metatxn took before
        return {"key": ACCESS_KEY, "secret": SECRET_KEY,
                "client_kwargs": {"endpoint_url": endpoint, "region_name": REGION}}
    if system == "lance":
        return {"access_key_id": ACCESS_KEY, "secret_access_key": SECRET_KEY, "region": REGION,
                "endpoint": endpoint, "allow_http": "true"}
    options = {"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY,
               "aws_region": REGION, "aws_endpoint_url": endpoint, "aws_allow_http": "true"}
    if system == "deltalake":
        # delta-rs commits on S3 through conditional PUT when told the server has it (moto does).
        options["conditional_put"] = "etag"
    return options


# -- the child: one workload of one system -------------------------------------------------------


class _Metatxn:
    def __init__(self, options: dict[str, Any]) -> None:
        import txn

        self.txn = txn
        self.options = options

    def create(self, uri: str, schema: Any) -> Any:
        return self.txn.create_table(uri, schema, storage_options=self.options)

    def append(self, handle: Any, data: Any) -> Any:
        handle.append(data)
        return handle

    def read(self, uri: str) -> Any:
        return self.txn.open_table(uri, self.options).to_arrow()


class _Deltalake:
    def __init__(self, options: dict[str, Any]) -> None:
        import deltalake

        self.deltalake = deltalake
        self.options = options

    def create(self, uri: str, schema: Any) -> Any:
        return self.deltalake.DeltaTable.create(uri, schema, storage_options=self.options)

    def append(self, handle: Any, data: Any) -> Any:
        self.deltalake.write_deltalake(handle, data, mode="append")
        return handle

    def read(self, uri: str) -> Any:
        return self.deltalake.DeltaTable(uri, storage_options=self.options).to_pyarrow_table()


class _Lance:
    def __init__(self, options: dict[str, Any]) -> None:
        import lance

        self.lance = lance
        self.options = options

    def create(self, uri: str, schema: Any) -> Any:
        return self.lance.write_dataset(schema.empty_table(), uri, storage_options=self.options)

    def append(self, handle: Any, data: Any) -> Any:
        handle.insert(data)
        return handle

    def read(self, uri: str) -> Any:
        return self.lance.dataset(uri, storage_options=self.options).to_table()


def _adapter(system: str, options: dict[str, Any]) -> Any:
    if system in ("before", "metatxn"):
        return _Metatxn(options)
    return _Deltalake(options) if system == "deltalake" else _Lance(options)


def _orders(first: int, rows: int, seed: int) -> Any:
    import numpy as np
    import pyarrow as pa

    from bench.bench_mutations import orders_for

    return orders_for(pa.array(np.arange(first, first + rows, dtype=np.int64)), seed)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one workload as ``spec`` says; return the samples and what was imported."""
    import pyarrow as pa

    from bench.bench_mutations import ORDERS

    system, workload, uri = spec["system"], spec["workload"], spec["uri"]
    adapter = _adapter(system, spec["options"])
    result: dict[str, Any] = {"samples": []}
    if system in ("before", "metatxn"):
        from metatxn import timeline

        result["code"] = str(Path(adapter.txn.__file__).parent.parent)
        result["timeline"] = timeline.__file__
    if workload == "append":
        rows = spec["rows"]
        handle = adapter.create(uri, ORDERS)
        for number in range(spec["warmup"] + spec["count"]):
            batch = _orders(number * rows, rows, number)
            began = time.perf_counter()
            handle = adapter.append(handle, batch)
            elapsed = (time.perf_counter() - began) * 1000
            if number >= spec["warmup"]:
                result["samples"].append(elapsed)
    elif workload == "load":
        data = _orders(0, spec["rows"], 7)
        handle = adapter.create(uri, ORDERS)
        began = time.perf_counter()
        adapter.append(handle, data)
        result["samples"].append(time.perf_counter() - began)
    elif workload == "build":
        handle = adapter.create(uri, ORDERS)
        for index, first in enumerate(range(0, spec["rows"], BUILD_CHUNK)):
            rows = min(BUILD_CHUNK, spec["rows"] - first)
            handle = adapter.append(handle, _orders(first, rows, 100 + index))
        small = adapter.create(spec["warm_uri"], ORDERS)
        adapter.append(small, _orders(0, 10, 1))
    elif workload == "read":
        assert isinstance(adapter.read(spec["warm_uri"]), pa.Table)  # imports and set-up, untimed
        began = time.perf_counter()
        table = adapter.read(uri)
        result["samples"].append(time.perf_counter() - began)
        result["rows"] = table.num_rows
    return result


def child_main() -> None:
    spec = json.loads(sys.argv[-1])
    try:
        print(json.dumps({"ok": child(spec)}))
    except Exception as exc:  # reported by the parent as the system's skip reason
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}))


# -- the parent ----------------------------------------------------------------------------------


@dataclass
class Measure:
    system: str
    workload: str
    unit: str
    samples: list[float] = field(default_factory=list)
    error: str = ""
    code: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def best(self) -> float | None:
        return min(self.samples) if self.samples else None


class Runner:
    def __init__(self, endpoint: str, server: Any, folder: Path, before_code: Path | None) -> None:
        self.endpoint = endpoint
        self.server = server
        self.folder = folder
        self.before_code = before_code

    def code(self, system: str) -> Path:
        return self.before_code if system == "before" and self.before_code else REPO

    def run(self, system: str, spec: dict[str, Any]) -> dict[str, Any]:
        spec = {**spec, "system": system, "options": storage_options(system, self.endpoint)}
        paths = [str(self.code(system)), str(REPO)]
        bootstrap = (f"import sys; sys.path[:0] = {paths!r}; "
                     "from bench.bench_storage import child_main; child_main()")
        done = subprocess.run([sys.executable, "-c", bootstrap, json.dumps(spec)], cwd=self.folder,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return {"error": f"child exited {done.returncode}: {tail[:300]}"}
        answer: dict[str, Any] = json.loads(lines[-1])
        return answer

    def uri(self, system: str, name: str) -> str:
        return f"s3://{self.server.create_bucket()}/{system}-{name}"


def measure(runner: Runner, system: str, workload: str, args: argparse.Namespace,
            wrong: list[str]) -> Measure:
    unit = "ms" if workload == "append" else "s"
    result = Measure(system, workload, unit)

    def take(answer: dict[str, Any]) -> bool:
        if "error" in answer:
            result.error = answer["error"]
            log(f"  {system} {workload}: {result.error}")
            return False
        result.samples += answer["ok"]["samples"]
        result.code = answer["ok"].get("code", result.code)
        return True

    if workload == "append":
        take(runner.run(system, {"workload": "append", "uri": runner.uri(system, "append"),
                                 "rows": args.append_rows, "warmup": args.warmup, "count": args.appends}))
    elif workload == "load":
        for _ in range(args.repeats):
            if not take(runner.run(system, {"workload": "load", "uri": runner.uri(system, "load"),
                                            "rows": args.load_rows})):
                break
    else:
        uri, warm_uri = runner.uri(system, "read"), runner.uri(system, "warm")
        began = time.monotonic()
        built = runner.run(system, {"workload": "build", "uri": uri, "warm_uri": warm_uri,
                                    "rows": args.read_rows})
        if "error" in built:
            take(built)
            return result
        log(f"  {system}: built {args.read_rows:,} rows in {time.monotonic() - began:.0f} s")
        for _ in range(args.repeats):
            answer = runner.run(system, {"workload": "read", "uri": uri, "warm_uri": warm_uri})
            if not take(answer):
                break
            if answer["ok"]["rows"] != args.read_rows:
                wrong.append(f"{system} read {answer['ok']['rows']:,} rows of {args.read_rows:,}")
    if result.samples:
        log(f"  {system} {workload}: median {result.median:.3f} {unit} of {len(result.samples)}")
    return result


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if unit == "ms" else f"{value:,.2f}"


def _short(error: str) -> str:
    """An error cut to fit a table cell (the whole message went to stderr)."""
    return error if len(error) <= 90 else error[:87] + "..."


def _ratio(mine: float | None, base: float | None) -> str:
    return "-" if mine is None or base is None else f"{mine / base:.2f}x"


TITLES = {
    "append": ("Append: {append_rows} rows a commit through a kept handle, {appends} timed after "
               "{warmup} warm-up"),
    "load": "Load: {load_rows:,} rows in one append into an empty table, median of {repeats}",
    "read": "Read: open + whole table to Arrow, {read_rows:,} rows, median of {repeats} fresh processes",
}


def report(measures: list[Measure], args: argparse.Namespace) -> str:
    sections = []
    for workload in WORKLOADS:
        rows = [m for m in measures if m.workload == workload]
        if not rows:
            continue
        unit = rows[0].unit
        base = next((m.median for m in rows if m.system == "before"), None)
        table = [[m.system, _fmt(m.median, unit), _fmt(m.best, unit), _ratio(m.median, base),
                  _short(m.error)] for m in rows]
        sections.append(f"#### {TITLES[workload].format(**vars(args))}\n\n" + _markdown_table(
            ["system", f"median {unit}", f"best {unit}", "/ before", "note"], table))
    verdicts = []
    for workload in WORKLOADS:
        mine = next((m for m in measures if m.workload == workload and m.system == "metatxn"), None)
        base = next((m for m in measures if m.workload == workload and m.system == "before"), None)
        if mine is None or base is None or mine.median is None or base.median is None:
            continue
        ratio = mine.median / base.median
        verdicts.append([workload, f"{ratio:.2f}x", f"<= 1x: {'PASS' if ratio <= 1 else 'FAIL'}",
                         f"{_fmt(mine.median, mine.unit)} / {_fmt(base.median, base.unit)} {mine.unit}"])
    if verdicts:
        sections.append("#### Target: the new path at least as fast as today's\n\n" + _markdown_table(
            ["workload", "metatxn / before", "target", "medians"], verdicts))
    codes = sorted({f"- {m.system}: txn from `{m.code}`" for m in measures if m.code})
    if codes:
        sections.append("\n".join(codes))
    return "\n\n".join(sections) + "\n"


def unpack_before(ref: str, folder: Path) -> Path:
    """metatxn's packages at ``ref``, unpacked into ``folder/before`` (git archive, no checkout)."""
    target = folder / "before"
    target.mkdir()
    command = ["git", "-C", str(REPO), "archive", "--format=tar", ref, "txn", "timeline", "indexes"]
    archive = subprocess.run(command, capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as tar_file:
        tar_file.write(archive)
        tar_file.seek(0)
        with tarfile.open(fileobj=tar_file) as tar:
            tar.extractall(target, filter="data")
    return target


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_storage",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="before,metatxn,deltalake,lance")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="append,load,read")
    parser.add_argument("--append-rows", type=int, default=100)
    parser.add_argument("--appends", type=int, default=None, help="timed appends (default 30; quick 10)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed appends first (default 5; quick 3)")
    parser.add_argument("--load-rows", type=int, default=None, help="default 1,000,000; quick 100,000")
    parser.add_argument("--read-rows", type=int, default=None, help="default 10,000,000; quick 1,000,000")
    parser.add_argument("--repeats", type=int, default=None, help="loads and reads (default 3; quick 2)")
    parser.add_argument("--before-ref", default=BEFORE_REF,
                        help=f"the commit whose metatxn is 'before' (default {BEFORE_REF})")
    parser.add_argument("--quick", action="store_true", help="smaller tables and fewer repeats")
    parser.add_argument("--out", type=Path, help="also write the samples as JSON")
    args = parser.parse_args(argv)
    quick = args.quick
    for name, full, small in (("appends", 30, 10), ("warmup", 5, 3), ("load_rows", 1_000_000, 100_000),
                              ("read_rows", 10_000_000, 1_000_000), ("repeats", 3, 2)):
        if getattr(args, name) is None:
            setattr(args, name, small if quick else full)
    args.systems = [s for s in args.systems.split(",") if s]
    args.workloads = [w for w in args.workloads.split(",") if w]
    unknown = set(args.systems) - set(SYSTEMS) | set(args.workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown systems or workloads: {sorted(unknown)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from tests.s3server import S3Server

    began = time.monotonic()
    machine = machine_facts(("metatxn", "pyarrow", "deltalake", "pylance", "obstore", "s3fs", "moto"))
    server = S3Server().start()
    folder = Path(tempfile.mkdtemp(prefix="metatxn-bench-storage-"))
    measures: list[Measure] = []
    wrong: list[str] = []
    try:
        before = unpack_before(args.before_ref, folder) if "before" in args.systems else None
        runner = Runner(server.endpoint_url, server, folder, before)
        for workload in args.workloads:
            log(f"{workload}:")
            for system in args.systems:
                measures.append(measure(runner, system, workload, args, wrong))
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    machine = dataclasses.replace(machine, load_at_end=load_average())
    print(machine_section(machine, str(folder)) + "\n\n" + report(measures, args), end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"argv": sys.argv[1:], "measures": [vars(m) for m in measures]},
                                       indent=2) + "\n")
    log(f"run took {(time.monotonic() - began) / 60:.1f} min")
    if wrong:
        log("WRONG RESULTS (exit status 1):\n" + "\n".join(f"  {w}" for w in wrong))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
