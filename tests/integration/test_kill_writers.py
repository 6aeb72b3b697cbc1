"""kill -9 of writer processes, at random moments, on a local table.

Three writer processes append new keys and upsert their own earlier keys, each printing an
acknowledgement line once a write returned. The test SIGKILLs a random writer a few times at
random moments (replacing it each time), stops the rest, and then checks with a fresh writer
whose clock is past every lease and heartbeat:

* its recovery rolls back every instant the dead writers left pending;
* every acknowledged append is present exactly once, and every acknowledged upsert's value (or a
  later one from the same writer, whose acknowledgement the kill swallowed) is what a read sees;
* recovery leaves no marker of a rolled-back instant, CLEAN FILES none at all, and
  ``validate()`` is clean.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import txn

KILLS = 6
WRITERS = 3

SCHEMA = pa.schema([("id", pa.int64(), False), ("writer", pa.int64()), ("version", pa.int64())])

#: One writer process: argv = table uri, process number, stop file. Alternates appends of fresh
#: keys and upserts of keys it appended earlier, printing "ACK <json>" after each write returned.
WRITER = r"""
import json, os, sys
import pyarrow as pa
import txn

uri, number, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
schema = pa.schema([("id", pa.int64(), False), ("writer", pa.int64()), ("version", pa.int64())])
table = txn.open_table(uri)
mine = []
version = 0
while not os.path.exists(stop):
    version += 1
    if version % 2 or not mine:
        ids = [number * 1_000_000 + version * 10 + i for i in range(5)]
        op = "append"
    else:
        ids = mine[-10:]
        op = "upsert"
    data = pa.table({"id": ids, "writer": [number] * len(ids), "version": [version] * len(ids)},
                    schema=schema)
    try:
        getattr(table, op)(data)
    except txn.TxnError as exc:  # e.g. a lock wait that timed out: not acknowledged
        print("ERROR " + json.dumps({"op": op, "error": repr(exc)}), flush=True)
        continue
    if op == "append":
        mine.extend(ids)
    print("ACK " + json.dumps({"op": op, "ids": ids, "version": version}), flush=True)
"""


def _start(uri: str, number: int, stop: Path, logs: Path) -> subprocess.Popen[bytes]:
    with open(logs / f"writer-{number}.out", "wb") as out:  # the child keeps its own copy
        return subprocess.Popen([sys.executable, "-c", WRITER, uri, str(number), str(stop)],
                                stdout=out, stderr=subprocess.STDOUT)


def _acks(logs: Path) -> list[dict[str, object]]:
    acks = []
    for log in sorted(logs.glob("writer-*.out")):
        number = int(log.stem.split("-")[1])
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("ACK "):
                acks.append({**json.loads(line[4:]), "writer": number})
    return acks


def kill_writers_at_random(uri: str, folder: Path, *, settle_s: float, linger_s: float,
                           stop_wait_s: float) -> Path:
    """``WRITERS`` writer processes on ``uri``; ``KILLS`` times a random one is SIGKILLed and
    replaced, after ``settle_s`` for the first ones to import and commit; ``linger_s`` later all
    are told to stop, and every survivor must exit cleanly. Gives the folder of their logs."""
    logs, stop = folder / "logs", folder / "stop"
    logs.mkdir()
    chance = random.Random(os.getpid())
    running = {n: _start(uri, n, stop, logs) for n in range(WRITERS)}
    next_number = WRITERS
    try:
        time.sleep(settle_s)
        for _ in range(KILLS):
            time.sleep(chance.uniform(0.5, 2.0))
            victim = chance.choice(sorted(running))
            running[victim].send_signal(signal.SIGKILL)
            running[victim].wait(timeout=30)
            del running[victim]
            running[next_number] = _start(uri, next_number, stop, logs)
            next_number += 1
        time.sleep(linger_s)
    finally:
        stop.touch()
        for process in running.values():
            try:
                process.wait(timeout=stop_wait_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    survivors = {n: p.returncode for n, p in running.items()}
    assert all(code == 0 for code in survivors.values()), (
        survivors, {n: (logs / f"writer-{n}.out").read_text()[-2000:] for n in survivors})
    return logs


def recovered_holds_every_ack(uri: str, logs: Path) -> tuple[txn.Table, dict[str, tuple[str, str]]]:
    """The checks after the kills, on any store: the writers got work done; a fresh writer,
    later than every lease and heartbeat, recovers with its first write (every pending instant
    rolled back); and the table holds every acknowledged row, each key once, at its version or
    later. Gives that writer's table and the timeline's states after it."""
    acks = _acks(logs)
    assert sum(1 for a in acks if a["op"] == "append") >= WRITERS, "the writers got work done"

    checker = txn.open_table(uri, clock=lambda: int(time.time() * 1000) + 10 * 60_000)
    pending = [i.time for i in checker.timeline() if i.state in ("requested", "inflight")]
    checker.append(pa.table({"id": [-1], "writer": [-1], "version": [0]}, schema=SCHEMA))
    states = {i.time: (i.action, i.state) for i in checker.timeline()}
    assert not [t for t, (_, s) in states.items() if s in ("requested", "inflight")]
    assert all(states[t][1] == "rolledback" or states[t] == ("rollback", "completed")
               for t in pending), {t: states[t] for t in pending}

    table = checker.to_arrow()
    ids = table["id"].to_pylist()
    assert len(ids) == len(set(ids)), "no key twice"
    found = {row["id"]: row for row in table.to_pylist()}
    for ack in acks:
        for key in ack["ids"]:  # type: ignore[attr-defined]
            assert key in found, (ack, key)
            row = found[key]
            assert row["writer"] == ack["writer"]
            assert row["version"] >= ack["version"], (ack, row)
    return checker, states


@pytest.mark.slow
@pytest.mark.multiprocess
def test_writers_killed_at_random_moments_leave_a_table_recovery_makes_whole(tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    txn.create_table(uri, SCHEMA, record_key="id",
                     properties={"lock.lease_ms": "5000", "lock.timeout_ms": "60000"})
    logs = kill_writers_at_random(uri, tmp_path, settle_s=2.0, linger_s=1.0, stop_wait_s=90)
    checker, states = recovered_holds_every_ack(uri, logs)

    # What a marker names is the instant time its name ends with (``..._<T>.parquet``), for a
    # half-written one (``.<marker>.<pid>.<thread>.<n>.tmp``) as well.
    markers = Path(uri) / "_markers"
    left = os.listdir(markers) if markers.exists() else []
    completed = {t for t, (_, s) in states.items() if s == "completed"}
    assert all(name.rsplit("_", 1)[-1][:17] in completed for name in left), (
        "recovery deletes the markers of the instants it rolls back, half-written ones too", left)
    checker.clean()  # sweeps the markers a writer killed after its commit point left
    assert not markers.exists() or os.listdir(markers) == [], "no stray markers after a clean"
    report = checker.validate()
    assert report.ok, report.problems


#: A writer that takes the table lock the way a commit does and holds it until it is killed.
HOLDER = r"""
import sys, time
import txn
table = txn.open_table(sys.argv[1])
lease = table._context.timeline.lock()
print("HELD", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_writer_killed_holding_the_table_lock_stalls_the_next_append_by_one_lease(
        tmp_path: Path) -> None:
    """The holder renews its 5 s lease for 12 s, then is killed with SIGKILL: the next append
    waits at most one lease (plus a second of bound), not a long fixed lease."""
    uri = str(tmp_path / "table")
    lease_ms = 5_000
    table = txn.create_table(uri, SCHEMA, properties={"lock.lease_ms": str(lease_ms)})
    row = pa.table({"id": [1], "writer": [0], "version": [0]}, schema=SCHEMA)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, uri], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "HELD"
        time.sleep(12.0)  # more than two leases: only renewal keeps the lock
        with pytest.raises(txn.LockTimeoutError):
            table._context.timeline.lock(timeout_ms=0)
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        killed = time.monotonic()
        table.append(row)
        waited_ms = (time.monotonic() - killed) * 1000
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert waited_ms <= lease_ms + 1_000, waited_ms
    assert table.snapshot().count() == 1
