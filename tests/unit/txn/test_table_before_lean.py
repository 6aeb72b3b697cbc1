"""Tables of format 1, written by metatxn before the lean commit (``tests/fixtures/
table_before_lean`` and ``unkeyed_before_lean``, made by ``tests/fixtures/make_table_before_lean.py``
at commit 32163e0), and what format 2 changes.

A table keeps the format it was created with: a format-1 table opens, reads, validates and takes
every kind of write as before, written the format-1 way (a small write still leaves a requested
and an inflight file), so processes of earlier versions keep reading it. A new table is of
format 2: a small write, which holds the lock from its request to its commit, is requested
started (one inflight file holding its plan, no requested file); a writer that dies there leaves
a pending instant whose plan is found, and which the next writer rolls back once it expired.
"""

from __future__ import annotations

import json
import re
import shutil
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn.timeline import CorruptMetadataError
from tests.conftest import FakeClock
from tests.faults import InjectedFault
from tests.unit.txn.helpers import SCHEMA, Faulty, rows, storage_of, table_on
from txn._context import WritePlan
from txn._context._config import decode_config

FIXTURES = Path(__file__).parents[2] / "fixtures"
JAN1, JAN2 = date(2026, 1, 1), date(2026, 1, 2)
#: Longer than the default lock lease and heartbeat timeout.
EXPIRY_MS = 10 * 60_000


def _row(i: int, day: date, note: str | None = None, *, keyed: bool = True) -> dict[str, object]:
    found: dict[str, object] = {"id": i, "name": f"n{i}", "amt": i * 10, "day": day}
    if keyed:
        found["note"] = note
    return found


def _copy(name: str, tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / name, tmp_path / name)
    return tmp_path / name


def _format(root: Path) -> int:
    return int(json.loads((root / "_timeline" / "table.json").read_bytes())["format_version"])


def _timeline_files(root: Path, instant: str) -> list[str]:
    return sorted(p.name for p in (root / "_timeline").iterdir() if p.name.startswith(instant))


def test_a_keyed_format_1_table_reads_validates_and_takes_every_write_the_format_1_way(
        tmp_path: Path) -> None:
    root = _copy("table_before_lean", tmp_path)
    table = txn.open_table(str(root))
    expected = [_row(1, JAN1), _row(3, JAN1), _row(4, JAN2), _row(5, JAN2), _row(6, JAN2)]
    assert table.to_arrow().sort_by("id").to_pylist() == expected
    assert table.validate().ok

    new = pa.table({"id": [7, 8], "name": ["n7", "n8"], "amt": pa.array([70, 80], pa.int32()),
                    "day": [JAN2, JAN2], "note": ["x", "y"]}, schema=table.schema)
    commit = table.append(new)
    # Written the format-1 way: a requested and an inflight file before the completed one.
    assert _timeline_files(root, commit.instant) == [
        f"{commit.instant}.commit.inflight", f"{commit.instant}.commit.requested",
        f"{commit.instant}_{commit.completed_at}.commit"]
    assert _format(root) == 1
    with pytest.raises(txn.DuplicateKeyError):
        table.append(new.slice(0, 1))
    table.upsert(pa.table({"id": [3], "name": ["n3b"], "amt": pa.array([31], pa.int32()),
                           "day": [JAN1], "note": ["up"]}, schema=table.schema))
    table.delete(pc.field("id") == 4)
    expected = [_row(1, JAN1), {**_row(3, JAN1, "up"), "name": "n3b", "amt": 31}, _row(5, JAN2),
                _row(6, JAN2), _row(7, JAN2, "x"), _row(8, JAN2, "y")]
    for reader in (table, txn.open_table(str(root))):
        assert reader.to_arrow().sort_by("id").to_pylist() == expected
    assert table.lookup([5, 4]).column("id").to_pylist() == [5]
    table.compact("major")
    table.maintain()
    assert txn.open_table(str(root)).to_arrow().sort_by("id").to_pylist() == expected
    assert table.validate().ok
    assert _format(root) == 1


def test_an_unkeyed_format_1_table_reads_and_appends(tmp_path: Path) -> None:
    root = _copy("unkeyed_before_lean", tmp_path)
    table = txn.open_table(str(root))
    old = [_row(i, JAN1, keyed=False) for i in (1, 3)] + [_row(i, JAN2, keyed=False) for i in (4, 5)]
    assert table.to_arrow().sort_by("id").to_pylist() == old
    for i in range(12):  # past metadata compaction and archival
        table.append(pa.table({"id": [10 + i], "name": [f"n{10 + i}"], "amt": pa.array([i], pa.int32()),
                               "day": [JAN2]}, schema=table.schema))
    fresh = txn.open_table(str(root))
    assert fresh.snapshot().count() == 16
    assert sorted(int(s.id) for s in fresh.segments()) == list(range(14))
    assert fresh.validate().ok
    assert not any(p.name.endswith(".commit.inflight") and not (
        root / "_timeline" / p.name.replace(".inflight", ".requested")).exists()
        for p in (root / "_timeline").iterdir()), "format-1 instants always have their plan file"


def test_a_new_table_is_format_2_and_a_small_write_is_one_timeline_file_before_its_commit(
        table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    commit = table.append(rows(range(3)))
    storage = storage_of(table_uri)
    assert decode_config(storage.read("_timeline/table.json")).format_version == 2
    names = [k.rsplit("/", 1)[1] for k in storage.list("_timeline") if commit.instant in k]
    assert names == [f"{commit.instant}.commit.inflight",
                     f"{commit.instant}_{commit.completed_at}.commit"]
    instant = next(i for i in table.timeline() if i.time == commit.instant)
    plan = table._context.timeline.read_plan(instant, WritePlan)
    assert plan.operation == "append" and plan.segment == commit.segment
    assert table.validate().ok


def test_a_format_2_small_write_that_died_keeps_its_segment_reserved_then_is_rolled_back(
        table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    table.append(rows(range(3)))
    faulty = Faulty(storage_of(table_uri))
    faulty.arm(1, ops={"put_if_absent"}, crash=True,
               match=lambda p: re.fullmatch(r"_metadata/files/\d{17}\.log\.arrow", p) is not None)
    with pytest.raises(InjectedFault):
        table_on(table_uri, faulty, clock=clock).append(rows(range(3, 6)))
    dead = txn.open_table(table_uri, clock=clock).timeline()[-1]
    assert dead.state == "inflight"
    assert txn.open_table(table_uri, clock=clock).validate().ok, "its plan is in its inflight file"

    clock.advance(10_000)  # past the lock's lease, not the instant's expiry: its segment stays taken
    other = txn.open_table(table_uri, clock=clock)
    assert other.append(rows(range(6, 8))).segment == "2"

    clock.advance(EXPIRY_MS)
    survivor = txn.open_table(table_uri, clock=clock)
    survivor.append(rows(range(8, 9)))
    assert {i.time: i.state for i in survivor.timeline()}[dead.time] == "rolledback"
    assert survivor.snapshot().count() == 6
    assert survivor.validate().ok


def test_a_table_of_a_newer_format_is_refused() -> None:
    config = json.loads((FIXTURES / "table_before_lean" / "_timeline" / "table.json").read_bytes())
    decode_config(json.dumps({**config, "format_version": 2}).encode())
    with pytest.raises(CorruptMetadataError, match="format_version 3: written by a newer metatxn"):
        decode_config(json.dumps({**config, "format_version": 3}).encode())
