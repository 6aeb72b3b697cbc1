"""The CarbonData concurrency matrix, one test per cell (reference carbondata.md §1.6, §3.1, §5.8,
§6 and §8.2; design/segments.md).

Operations: load (``append``, keyed and unkeyed), IUD (``delete``, ``update``, ``upsert``), insert
overwrite, compaction, DELETE SEGMENT and CLEAN FILES. CarbonData keeps these apart with table
locks (``compaction.lock``, ``update.lock``, ``delete_segment.lock``, ``clean_files.lock``, ...)
and "X is in progress for table db.t, Y operation is not allowed" refusals. metatxn takes no such
lock: every operation is one instant, checked for overlap under the short commit lock.

Every test has the same shape: operation A is *running* (its instant begun and inflight, its
files written) when operation B runs to completion; then A tries to commit. A's commit is the
interleaving point (``Protocol.commit`` is wrapped: B runs once, right before A's commit); B runs
through its own, untouched path. Each test says what happens: both commit and the table holds the
union of their effects, or which one fails with which error and that it left nothing, or that B
was refused at its start with a message naming A.

The base table: four loads of ten rows (ids 0-9 in segment 0, ... 30-39 in segment 3; price =
id / 2), so a MINOR compaction merges all four into ``0.1``. The CLEAN FILES cells use that table
compacted, plus four more loads, so that a clean has files to move.

Two cells have more tests: load x IUD when both insert the same key, and when a delete by keys
asks for a key the load inserts (``test_delete_by_keys_x_insert``); and IUD x CLEAN FILES
when a compaction overtook the IUD before a forced clean (other interleaving points: after the
IUD read its snapshot, and in its write phase).
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow.compute as pc
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, insert_keys, priced, relative, rows, storage_of
from txn._commit import Pending, Protocol
from txn._commit._writes import _base
from txn._segments import _compact
from txn._write import _state

MFD = "Marked for Delete"
SUCCESS = "Success"
COMPACTED = "Compacted"
BASE = range(40)
#: Keys a load adds (new to the base table).
LOADED = list(range(100, 105))


# -- the table and what is in it -------------------------------------------------------------------


def base(uri: str, *, keyed: bool = True) -> tuple[txn.Table, txn.Table]:
    """Four segments of ten rows; and a second, independent handle (writer B)."""
    table = txn.create_table(uri, SCHEMA, record_key="id" if keyed else None)
    for n in range(4):
        table.append(rows(range(n * 10, n * 10 + 10)))
    return table, txn.open_table(uri)


def initial() -> dict[int, float]:
    return {i: i / 2 for i in BASE}


def prices(table: txn.Table) -> dict[int, float]:
    """id -> price of the latest snapshot; fails if an id is held by two live rows."""
    data = table.to_arrow(columns=["id", "price"]).to_pylist()
    counts = collections.Counter(r["id"] for r in data)
    assert not [i for i, n in counts.items() if n > 1], f"ids held twice: {counts.most_common(3)}"
    return {r["id"]: r["price"] for r in data}


def statuses(table: txn.Table) -> dict[str, str]:
    """SHOW SEGMENTS, and its history: a segment CLEAN FILES removed ends with "(cleaned)"."""
    return {s.id: s.status + (f" -> {s.merged_to}" if s.merged_to else "")
            + ("" if s.visible else " (cleaned)") for s in table.segments(history=True)}


def cleaned(shown: dict[str, str]) -> dict[str, str]:
    """``shown`` as SHOW HISTORY SEGMENTS lists segments whose files CLEAN FILES removed."""
    return {segment: f"{status} (cleaned)" for segment, status in shown.items()}


def compacted(*ids: str, into: str = "0.1") -> dict[str, str]:
    return dict.fromkeys(ids, f"{COMPACTED} -> {into}")


def success(*ids: str) -> dict[str, str]:
    return dict.fromkeys(ids, SUCCESS)


def marked(*ids: str) -> dict[str, str]:
    return dict.fromkeys(ids, MFD)


# -- A running while B completes ------------------------------------------------------------------


@dataclass
class Race:
    """B's whole operation, run once right before A's commit (A begun, inflight, files written)."""

    table: txn.Table
    b: Callable[[], Any]
    a_instant: str | None = None
    b_result: Any = None
    b_error: txn.TxnError | None = None
    a_states_seen_by_b: list[str] = field(default_factory=list)

    def fire(self, pending: Pending) -> None:
        if self.a_instant is not None:
            return  # B's own commit (and A's retries) pass the same hook
        self.a_instant = pending.instant.time
        self.a_states_seen_by_b = [i.state for i in self.table.timeline() if i.time == self.a_instant]
        try:
            self.b_result = self.b()
        except txn.TxnError as exc:  # B refused: A goes on
            self.b_error = exc

    @property
    def b_commit(self) -> txn.Commit:
        assert self.a_instant is not None, "A never reached its commit: B did not run"
        assert self.b_error is None, f"B failed: {self.b_error}"
        assert isinstance(self.b_result, txn.Commit), self.b_result
        return self.b_result

    def b_refused(self, error: type[txn.TxnError]) -> str:
        assert self.a_instant is not None, "A never reached its commit: B did not run"
        assert isinstance(self.b_error, error), f"B was not refused with {error.__name__}: {self.b_error!r}"
        return str(self.b_error)


def race(monkeypatch: pytest.MonkeyPatch, table: txn.Table, b: Callable[[], Any]) -> Race:
    """Arrange for ``b`` to run inside the next commit of any handle on ``table``'s storage
    (which must be A's: call A right after this)."""
    run = Race(table, b)
    commit = Protocol.commit

    def b_then_commit(self: Protocol, pending: Pending, build: Any) -> Any:
        run.fire(pending)
        return commit(self, pending, build)

    monkeypatch.setattr(Protocol, "commit", b_then_commit)
    # A small write holds the lock from begin to commit, so nothing can complete beside it:
    # A must be a write with a window between the two (any write past the small-write bound).
    monkeypatch.setattr("txn._commit._writes._base.SMALL_WRITE_BYTES", -1)
    return run


def assert_a_was_running(run: Race) -> None:
    assert run.a_states_seen_by_b == ["inflight"], "B must run while A's instant is inflight"


def assert_left_nothing(table: txn.Table, uri: str, loser: str | None) -> None:
    """The failed instant is rolled back (by a completed rollback), nothing is pending, no file of
    it is left outside the timeline, and the table validates."""
    assert loser is not None
    history = table.timeline()
    assert [i.state for i in history if i.time == loser] == ["rolledback"], history
    assert [i.state for i in history if i.action == "rollback"] == ["completed"]
    assert [i for i in history if i.is_pending] == []
    leftovers = [key for key in storage_of(uri).list("", recursive=True)
                 if loser in key and not key.startswith("_timeline/")]
    assert leftovers == [], f"files of rolled-back instant {loser} left behind"
    report = table.validate()
    assert report.ok, str(report)


def assert_both_landed(table: txn.Table, *, rolled_back: int = 0) -> None:
    history = table.timeline()
    assert len([i for i in history if i.state == "rolledback"]) == rolled_back, history
    assert [i for i in history if i.is_pending] == []
    report = table.validate()
    assert report.ok, str(report)


# -- the operations --------------------------------------------------------------------------------

IUD = ["delete", "update", "upsert"]


def iud(table: txn.Table, op: str, key: int, price: float, *, keyed: bool = True) -> txn.Commit | None:
    """One IUD on the row ``key``: delete it, set its price, or upsert it with a new key
    ``key + 200``."""
    if op == "delete":
        return table.delete(keys=[key]) if keyed else table.delete(pc.field("id") == key)
    if op == "update":
        return table.update(pc.field("id") == key, {"price": price})
    assert op == "upsert" and keyed
    return table.upsert(priced([key, key + 200], price))


def iud_effect(model: dict[int, float], op: str, key: int, price: float) -> None:
    if op == "delete":
        del model[key]
    elif op == "update":
        model[key] = price
    else:
        model.update({key: price, key + 200: price})


def iud_params() -> list[Any]:
    """Every IUD on a keyed table, and delete and update on an unkeyed one (upsert needs a key)."""
    found = []
    for op in IUD:
        for keyed in (True, False):
            if keyed or op != "upsert":
                found.append(pytest.param(op, keyed, id=f"{op}-{'keyed' if keyed else 'unkeyed'}"))
    return found


# == load ==========================================================================================


@pytest.mark.parametrize("case", ["unkeyed", "keyed-disjoint-keys", "keyed-same-key"])
def test_load_x_load(monkeypatch: pytest.MonkeyPatch, memory_uri: str, case: str) -> None:
    """CarbonData: loads run in parallel; each holds ``Segment_<id>.lock`` on its own new
    segment and commits by re-reading ``tablestatus`` under ``tablestatus.lock`` (no refusal).

    metatxn: both commit, each as its own segment (the id is allocated under the lock at begin,
    counting running loads' segments: A gets 4, B 5). Unkeyed appends never conflict; keyed
    appends of disjoint keys both commit. When B inserted a key A also inserts, A fails with
    ``DuplicateKeyError`` naming B and leaves nothing.
    """
    a, b = base(memory_uri, keyed=case != "unkeyed")
    b_keys = [104, 110] if case == "keyed-same-key" else [110, 111]
    run = race(monkeypatch, a, lambda: b.append(priced(b_keys, 2.0)))
    model = {**initial(), **dict.fromkeys(b_keys, 2.0)}

    if case == "keyed-same-key":
        with pytest.raises(txn.DuplicateKeyError) as info:
            a.append(priced(LOADED, 1.0))
        assert str(info.value).startswith(
            f"append {run.a_instant}: record key(s) [104] were written by append {run.b_commit.instant}")
        assert_left_nothing(a, memory_uri, run.a_instant)
        assert statuses(a) == success("0", "1", "2", "3", "5")
    else:
        commit = a.append(priced(LOADED, 1.0))
        assert commit is not None and (commit.segment, run.b_commit.segment) == ("4", "5")
        model.update(dict.fromkeys(LOADED, 1.0))
        assert_both_landed(a)
        assert statuses(a) == success("0", "1", "2", "3", "4", "5")
    assert_a_was_running(run)
    assert prices(a) == model


LOAD_X_IUD = [
    pytest.param(first, op, keyed, id=f"{first}-running-{p.id}")
    for first in ("load", "iud") for p in iud_params() for op, keyed in [p.values]
]


@pytest.mark.parametrize(("first", "op", "keyed"), LOAD_X_IUD)
def test_load_x_iud(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str, op: str,
                    keyed: bool) -> None:
    """CarbonData: an UPDATE/DELETE is refused while a load runs ("loading is in progress for
    table db.t, data update operation is not allowed" / "... data delete operation is not
    allowed"); the IUD takes ``meta.lock``, ``compaction.lock`` and ``update.lock``, none of
    which a load takes.

    metatxn: both run and both commit, in either order; the table holds the load's new rows and
    the IUD's change. A load touches no existing file, so it never overlaps an IUD's delete
    deltas; the IUD changes what its snapshot held, so rows appended meanwhile are left alone.
    (Keys inserted by both are the one exception: see ``test_load_x_iud_same_new_key``.)
    """
    a, b = base(memory_uri, keyed=keyed)
    model = initial()
    if first == "load":
        run = race(monkeypatch, a, lambda: iud(b, op, 5, -2.0, keyed=keyed))
        commit = a.append(priced(LOADED, 1.0))
        assert commit is not None and commit.retries == 0
        assert run.b_commit.operation == op
    else:
        run = race(monkeypatch, a, lambda: b.append(priced(LOADED, 1.0)))
        commit = iud(a, op, 5, -2.0, keyed=keyed)
        assert commit is not None and commit.operation == op and commit.retries == 0
        assert run.b_commit.segment == ("5" if op != "delete" else "4")
    assert_a_was_running(run)
    iud_effect(model, op, 5, -2.0)
    model.update(dict.fromkeys(LOADED, 1.0))
    assert prices(a) == model
    assert_both_landed(a)


@pytest.mark.parametrize("first", ["load", "upsert"])
def test_load_x_iud_same_new_key(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str) -> None:
    """The load x IUD cell when both insert the same new key (205) into a keyed table.

    CarbonData: the IUD is refused while the load runs ("loading is in progress for table db.t,
    data update operation is not allowed"); CarbonData has no record key, so nothing would stop
    the duplicate either way.

    metatxn: whoever commits second fails and leaves nothing: a running append fails with
    ``DuplicateKeyError`` ("use upsert"), a running upsert with ``CommitConflictError`` naming
    the append and the key (retry: it then replaces the appended row).
    """
    a, b = base(memory_uri)
    model = initial()
    if first == "load":
        run = race(monkeypatch, a, lambda: b.upsert(priced([5, 205], 9.0)))
        with pytest.raises(txn.DuplicateKeyError) as info:
            a.append(priced([205, 206], 1.0))
        assert str(info.value).startswith(
            f"append {run.a_instant}: record key(s) [205] were written by upsert {run.b_commit.instant}")
        model.update({5: 9.0, 205: 9.0})
    else:
        run = race(monkeypatch, a, lambda: b.append(priced([205, 206], 1.0)))
        with pytest.raises(txn.CommitConflictError) as conflict:
            a.upsert(priced([5, 205], 9.0))
        assert str(conflict.value).startswith(
            f"upsert {run.a_instant} conflicts with append {run.b_commit.instant}")
        assert "1 record key(s) [205]" in str(conflict.value)
        model.update({205: 1.0, 206: 1.0})
    assert_a_was_running(run)
    assert_left_nothing(a, memory_uri, run.a_instant)
    assert prices(a) == model


#: The inserts of the delete-by-keys cell: a load, an upsert of a new key, a stream's batch and
#: ADD SEGMENT (each records its own operation name).
INSERTS = ["append", "upsert", "stream", "add_segment"]


def insert(table: txn.Table, how: str, ids: list[int], price: float, folder: Any) -> txn.Commit | None:
    return insert_keys(table, how, ids, price, folder)  # type: ignore[no-any-return]


# ADD SEGMENT commits under one hold of the lock, so nothing completes beside it: never running.
DELETE_BY_KEYS_X_INSERT = [
    pytest.param(first, keys, how, id=f"{first}-running-{how}-{keys}")
    for first, keys in [("delete", "its-absent-key"), ("delete", "other-keys"),
                        ("insert", "its-absent-key")]
    for how in INSERTS if not (first == "insert" and how == "add_segment")
]


@pytest.mark.parametrize(("first", "keys", "how"), DELETE_BY_KEYS_X_INSERT)
def test_delete_by_keys_x_insert(monkeypatch: pytest.MonkeyPatch, memory_uri: str, tmp_path: Any,
                                 first: str, keys: str, how: str) -> None:
    """The IUD x load cell for ``delete(keys=[5, 205])`` when key 205 is not in the table as the
    delete reads it, and the load (an append, an upsert, a stream's batch, ADD SEGMENT) inserts
    205 (``its-absent-key``) or only keys the delete did not ask for (206, 207).

    CarbonData: the DELETE is refused while the load runs (see ``test_load_x_iud``); it has no
    record key to delete by.

    metatxn (issue 22 item 3): a delete by keys conflicts with a commit completed after its
    read that wrote any key it asked for, found or not. A running delete fails with
    ``CommitConflictError`` naming the insert and key 205, and leaves nothing (had it committed,
    205 would outlive a delete acknowledged after its insert); the insert's rows stand. Inserts
    of other keys, or a running insert of 205 (the delete completed first, so it is ordered
    before the insert), both commit.
    """
    a = txn.create_table(memory_uri, SCHEMA, record_key="id", properties={"streaming": "true"})
    for n in range(4):
        a.append(rows(range(n * 10, n * 10 + 10)))
    b = txn.open_table(memory_uri)
    inserted = [205] if keys == "its-absent-key" else [206, 207]
    model = {**initial(), **dict.fromkeys(inserted, 1.0)}
    if first == "delete":
        run = race(monkeypatch, a, lambda: insert(b, how, inserted, 1.0, tmp_path / "ext"))
        if keys == "its-absent-key":
            with pytest.raises(txn.CommitConflictError) as info:
                a.delete(keys=[5, 205])
            message = str(info.value)
            assert message.startswith(f"delete {run.a_instant} conflicts with {how} {run.b_commit.instant}")
            assert "1 record key(s) [205]" in message and "retry the delete" in message
            assert_left_nothing(a, memory_uri, run.a_instant)
        else:
            commit = a.delete(keys=[5, 205])
            assert commit is not None and commit.rows_deleted == 1 and run.b_commit.operation == how
            del model[5]
            assert_both_landed(a)
    else:
        run = race(monkeypatch, a, lambda: b.delete(keys=[5, 205]))
        commit = insert(a, how, inserted, 1.0, tmp_path / "ext")
        assert commit is not None and commit.operation == how
        assert run.b_commit.rows_deleted == 1
        del model[5]
        assert_both_landed(a)
    assert_a_was_running(run)
    assert prices(a) == model


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
@pytest.mark.parametrize("first", ["load", "overwrite"])
def test_load_x_overwrite(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str,
                          keyed: bool) -> None:
    """CarbonData: insert overwrite excludes every load (its segment is ``Overwrite In
    Progress``; the re-implementation checklist: "overwrite ⟂ all loads").

    metatxn: a load running while an overwrite completes still commits, on top of it (as if it
    ran after the overwrite: the overwrite marked the segments live at its commit, and the
    running load's was not one). An overwrite running while a load completes fails with
    ``CommitConflictError`` ("would be silently replaced", rerun) and leaves nothing; the load's
    rows stay.
    """
    a, b = base(memory_uri, keyed=keyed)
    if first == "load":
        run = race(monkeypatch, a, lambda: b.overwrite(priced(range(500, 505), 5.0)))
        commit = a.append(priced(LOADED, 1.0))
        assert commit is not None and commit.segment == "4" and run.b_commit.segment == "5"
        assert prices(a) == {**dict.fromkeys(range(500, 505), 5.0), **dict.fromkeys(LOADED, 1.0)}
        assert statuses(a) == {**marked("0", "1", "2", "3"), **success("4", "5")}
        assert_both_landed(a)
    else:
        run = race(monkeypatch, a, lambda: b.append(priced(LOADED, 1.0)))
        with pytest.raises(txn.CommitConflictError) as info:
            a.overwrite(priced(range(500, 505), 5.0))
        assert str(info.value).startswith(
            f"overwrite {run.a_instant} conflicts with commit(s) ['{run.b_commit.instant}']")
        assert_left_nothing(a, memory_uri, run.a_instant)
        assert prices(a) == {**initial(), **dict.fromkeys(LOADED, 1.0)}
        assert statuses(a) == success("0", "1", "2", "3", "5")
    assert_a_was_running(run)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
@pytest.mark.parametrize("first", ["load", "compaction"])
def test_load_x_compaction(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str,
                           keyed: bool) -> None:
    """CarbonData: load and compaction run in parallel (§5.8): a load takes no
    ``compaction.lock``, compaction merges committed segments only (and skips a segment whose
    ``Segment_<id>.lock`` a load holds, CARBONDATA-4126), both commit through
    ``tablestatus.lock``.

    metatxn: the same, without the segment locks: both commit. A running load's segment is not
    committed, so a compaction never selects it; a running compaction's commit check passes
    appends (they touch no source). The load's segment number is allocated above the
    compaction's (``0.1`` counts as 0).
    """
    a, b = base(memory_uri, keyed=keyed)
    if first == "load":
        run = race(monkeypatch, a, lambda: b.compact())
        commit = a.append(priced(LOADED, 1.0))
        merged = run.b_commit
    else:
        run = race(monkeypatch, a, lambda: b.append(priced(LOADED, 1.0)))
        merged = a.compact()  # type: ignore[assignment]
        commit = run.b_commit
    assert_a_was_running(run)
    assert merged is not None and merged.segment == "0.1"
    assert commit is not None and commit.segment == "4"
    assert statuses(a) == {**compacted("0", "1", "2", "3"), **success("0.1", "4")}
    assert prices(a) == {**initial(), **dict.fromkeys(LOADED, 1.0)}
    assert_both_landed(a)


@pytest.mark.parametrize(("first", "target"), [
    ("load", "its-segment"),
    ("load", "by-date"),
    ("load", "other-segment"),
    ("delete-segment", "other-segment"),
])
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_load_x_delete_segment(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str,
                               target: str, keyed: bool) -> None:
    """CarbonData: DELETE SEGMENT takes ``delete_segment.lock``, ``clean_files.lock`` and
    ``tablestatus.lock``, none of which a load holds, so both run; the running load's own
    segment is refused while its ``Segment_<id>.lock`` is held ("Delete segment by Id is failed.
    Invalid ID is: <id>"), and delete by date skips live in-progress entries.

    metatxn: the same without locks. The running load's segment (``Insert In Progress`` in SHOW
    SEGMENTS) is refused at the delete's start with ``InvalidOptionError`` naming it ("4: Insert
    In Progress, a load is still writing it"); by date it is skipped. Otherwise both commit:
    the deleted segment's rows go, the load's rows land.
    """
    a, b = base(memory_uri, keyed=keyed)
    if first == "load":
        delete = {
            "its-segment": lambda: b.delete_segments(["4"]),
            "by-date": lambda: b.delete_segments(before=datetime(2100, 1, 1)),
            "other-segment": lambda: b.delete_segments(["0"]),
        }[target]
        run = race(monkeypatch, a, delete)
        commit = a.append(priced(LOADED, 1.0))
        assert commit is not None and commit.segment == "4"
    else:
        run = race(monkeypatch, a, lambda: b.append(priced(LOADED, 1.0)))
        a.delete_segments(["0"])
        assert run.b_commit.segment == "4"
    assert_a_was_running(run)
    model = {**initial(), **dict.fromkeys(LOADED, 1.0)}
    if target == "its-segment":
        message = run.b_refused(txn.InvalidOptionError)
        assert "4: Insert In Progress, a load is still writing it" in message
        assert statuses(a) == success("0", "1", "2", "3", "4")
    elif target == "by-date":
        assert run.b_commit.segments_removed == ("0", "1", "2", "3")
        model = dict.fromkeys(LOADED, 1.0)
        assert statuses(a) == {**marked("0", "1", "2", "3"), **success("4")}
    else:
        model = {k: v for k, v in model.items() if k >= 10}
        assert statuses(a) == {**marked("0"), **success("1", "2", "3", "4")}
    assert prices(a) == model
    assert_both_landed(a)


# == IUD ===========================================================================================

IUD_PAIRS = [pytest.param(a_op, b_op, rows_, id=f"{a_op}-running-{b_op}-{rows_}")
             for a_op in IUD for b_op in IUD for rows_ in ("same-row", "other-file")]


@pytest.mark.parametrize(("a_op", "b_op", "which"), IUD_PAIRS)
def test_iud_x_iud(monkeypatch: pytest.MonkeyPatch, memory_uri: str, a_op: str, b_op: str,
                   which: str) -> None:
    """CarbonData: a second UPDATE/DELETE is refused while one runs (``update.lock``:
    "update/delete is in progress for table db.t, ..."; "Table is locked for update. Please try
    after some time").

    metatxn: both run. If B changed the same rows' data file or the same keys, the one that
    commits second (A) fails with ``CommitConflictError`` naming B ("retry the <op>") and leaves
    nothing; B's change stands. IUDs of rows in different files and with different keys both
    commit.
    """
    a, b = base(memory_uri)
    b_key = 5 if which == "same-row" else 25  # 25 lives in another segment's file
    run = race(monkeypatch, a, lambda: iud(b, b_op, b_key, -2.0))
    model = initial()
    iud_effect(model, b_op, b_key, -2.0)
    if which == "same-row":
        with pytest.raises(txn.CommitConflictError) as info:
            iud(a, a_op, 5, -1.0)
        assert str(info.value).startswith(
            f"{a_op} {run.a_instant} conflicts with {b_op} {run.b_commit.instant}")
        assert f"retry the {a_op}" in str(info.value)
        assert_left_nothing(a, memory_uri, run.a_instant)
    else:
        commit = iud(a, a_op, 5, -1.0)
        assert commit is not None and commit.operation == a_op and run.b_commit.operation == b_op
        iud_effect(model, a_op, 5, -1.0)
        assert_both_landed(a)
    assert_a_was_running(run)
    assert prices(a) == model


@pytest.mark.parametrize("op", IUD)
@pytest.mark.parametrize("first", ["iud", "overwrite"])
def test_iud_x_overwrite(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str, op: str) -> None:
    """CarbonData: insert overwrite and UPDATE/DELETE are kept apart (the IUD's locks and the
    ``Overwrite In Progress`` segment); the reference lists no direct message for this pair.

    metatxn: both run; the one that commits second fails with ``CommitConflictError`` and leaves
    nothing. A running IUD fails because the overwrite removed the data file it changes (the
    overwrite's rows stand); a running overwrite fails because a data commit completed after it
    began and would be silently replaced ("rerun the overwrite"; the IUD's change stands).
    """
    a, b = base(memory_uri)
    if first == "iud":
        run = race(monkeypatch, a, lambda: b.overwrite(priced(range(500, 505), 5.0)))
        with pytest.raises(txn.CommitConflictError) as info:
            iud(a, op, 5, -1.0)
        assert str(info.value).startswith(
            f"{op} {run.a_instant} conflicts with overwrite {run.b_commit.instant}")
        model = dict.fromkeys(range(500, 505), 5.0)
    else:
        run = race(monkeypatch, a, lambda: iud(b, op, 5, -2.0))
        with pytest.raises(txn.CommitConflictError) as info:
            a.overwrite(priced(range(500, 505), 5.0))
        assert str(info.value).startswith(
            f"overwrite {run.a_instant} conflicts with commit(s) ['{run.b_commit.instant}']")
        model = initial()
        iud_effect(model, op, 5, -2.0)
    assert_a_was_running(run)
    assert_left_nothing(a, memory_uri, run.a_instant)
    assert prices(a) == model


@pytest.mark.parametrize(("op", "keyed"), iud_params())
@pytest.mark.parametrize("row", ["source-row", "other-row"])
@pytest.mark.parametrize("first", ["iud", "compaction"])
def test_iud_x_compaction(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str, row: str,
                          op: str, keyed: bool) -> None:
    """CarbonData: compaction and UPDATE/DELETE are mutually exclusive (``compaction.lock`` +
    ``update.lock``): "compaction is in progress for table db.t, update operation is not
    allowed"; "update is in progress for table db.t, compaction operation is not allowed"
    (CARBONDATA-3332: running both lost rows).

    metatxn: both run. An IUD that touched a source segment while a compaction ran wins: the
    compaction fails cleanly at its commit (``CommitConflictError``, "the <op> wins and the
    compaction wrote nothing"), all sources stay ``Success``. An IUD overtaken by a completed
    compaction of its rows is planned again on the compacted table and retried
    (``Commit.retries == 1``): a table service never fails the user's write. An IUD of rows
    outside the compaction (row 25, segment 2; the compaction merges 0 and 1) and the compaction
    simply both commit.
    """
    a, b = base(memory_uri, keyed=keyed)
    key = 5 if row == "source-row" else 25
    model = initial()
    expected = {**compacted("0", "1"), **success("0.1", "2", "3")}
    if op != "delete":
        expected["4"] = SUCCESS  # the IUD's new rows
    if first == "iud":
        run = race(monkeypatch, a, lambda: b.compact("custom", segments=["0", "1"]))
        commit = iud(a, op, key, -1.0, keyed=keyed)
        assert commit is not None and commit.retries == (1 if row == "source-row" else 0)
        assert run.b_commit.segment == "0.1"
        iud_effect(model, op, key, -1.0)
        assert statuses(a) == expected
        if row == "source-row":  # A's first attempt was rolled back, then A re-planned
            assert [i.state for i in a.timeline() if i.time == run.a_instant] == ["rolledback"]
        assert_both_landed(a, rolled_back=1 if row == "source-row" else 0)
    else:
        run = race(monkeypatch, a, lambda: iud(b, op, key, -2.0, keyed=keyed))
        iud_effect(model, op, key, -2.0)
        if row == "source-row":
            with pytest.raises(txn.CommitConflictError) as info:
                a.compact("custom", segments=["0", "1"])
            message = str(info.value)
            assert message.startswith(f"compaction {run.a_instant} of segment(s) ['0', '1'] into 0.1 "
                                      f"conflicts with {op} {run.b_commit.instant}")
            assert f"the {op} wins and the compaction wrote nothing" in message
            assert_left_nothing(a, memory_uri, run.a_instant)
            assert "0.1" not in statuses(a)
            assert {s for i, s in statuses(a).items() if i in "0123"} == {SUCCESS}
        else:
            commit = a.compact("custom", segments=["0", "1"])
            assert commit is not None and commit.segment == "0.1"
            assert statuses(a) == expected
            assert_both_landed(a)
    assert_a_was_running(run)
    assert prices(a) == model


@pytest.mark.parametrize(("op", "keyed"), iud_params())
@pytest.mark.parametrize(("first", "target"), [
    ("iud", "its-segment"), ("iud", "other-segment"),
    ("delete-segment", "its-segment"), ("delete-segment", "other-segment"),
])
def test_iud_x_delete_segment(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str,
                              target: str, op: str, keyed: bool) -> None:
    """CarbonData: DELETE SEGMENT (``delete_segment.lock``, ``clean_files.lock``,
    ``tablestatus.lock``) and UPDATE/DELETE (``meta.lock``, ``compaction.lock``,
    ``update.lock``) share no lock but ``tablestatus.lock`` at commit; the last writer of
    ``tablestatus`` wins.

    metatxn: both run. An IUD running while DELETE SEGMENT retires the segment holding its row
    fails with ``CommitConflictError`` naming the delete (it changed a file the delete removed;
    a retry finds the row gone) and leaves nothing. A DELETE SEGMENT running while an IUD
    changes a row of that segment commits after it, as if it ran second: the segment's rows go,
    a row the IUD rewrote into its own new segment (update, upsert) stays. Different segments:
    both commit.
    """
    a, b = base(memory_uri, keyed=keyed)
    segment = "0" if target == "its-segment" else "3"  # row 5 lives in segment 0
    model = initial()
    gone = range(10) if segment == "0" else range(30, 40)
    if first == "iud":
        run = race(monkeypatch, a, lambda: b.delete_segments([segment]))
        if target == "its-segment":
            with pytest.raises(txn.CommitConflictError) as info:
                iud(a, op, 5, -1.0, keyed=keyed)
            assert str(info.value).startswith(
                f"{op} {run.a_instant} conflicts with delete_segments {run.b_commit.instant}")
            assert_left_nothing(a, memory_uri, run.a_instant)
        else:
            commit = iud(a, op, 5, -1.0, keyed=keyed)
            assert commit is not None and commit.retries == 0
            iud_effect(model, op, 5, -1.0)
            assert_both_landed(a)
        for key in gone:
            model.pop(key, None)
    else:
        run = race(monkeypatch, a, lambda: iud(b, op, 5, -2.0, keyed=keyed))
        commit = a.delete_segments([segment])
        assert commit.segments_removed == (segment,)
        before = set(model)
        iud_effect(model, op, 5, -2.0)
        rewritten = {5, 205} if op != "delete" else set()  # now in the IUD's new segment "4"
        for key in gone:
            if key in before and key not in rewritten:
                model.pop(key, None)
        assert_both_landed(a)
    assert_a_was_running(run)
    assert statuses(a)[segment] == MFD
    assert prices(a) == model


# == insert overwrite ==============================================================================


def test_overwrite_x_overwrite(monkeypatch: pytest.MonkeyPatch, memory_uri: str) -> None:
    """CarbonData: a second insert overwrite is kept out while one runs (``Overwrite In
    Progress``; "overwrite ⟂ all loads").

    metatxn: both run; the one that commits second fails with ``CommitConflictError`` naming
    the other ("rerun the overwrite") and leaves nothing; the first overwrite's rows stand.
    """
    a, b = base(memory_uri)
    run = race(monkeypatch, a, lambda: b.overwrite(priced(range(600, 603), 6.0)))
    with pytest.raises(txn.CommitConflictError) as info:
        a.overwrite(priced(range(500, 505), 5.0))
    assert str(info.value).startswith(
        f"overwrite {run.a_instant} conflicts with commit(s) ['{run.b_commit.instant}']")
    assert_a_was_running(run)
    assert_left_nothing(a, memory_uri, run.a_instant)
    assert prices(a) == dict.fromkeys(range(600, 603), 6.0)
    assert statuses(a) == {**marked("0", "1", "2", "3"), **success("5")}


@pytest.mark.parametrize("first", ["overwrite", "compaction"])
def test_overwrite_x_compaction(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str) -> None:
    """CarbonData: compaction is refused at its start while an insert overwrite runs ("insert
    overwrite is in progress for table db.t, compaction operation is not allowed",
    CARBONDATA-1754); the overwrite marks every segment, compacted or not.

    metatxn: both run. An overwrite running while a compaction completes is not failed by it
    (a table service never fails the user's write): it replaces the compacted segment too, which
    becomes ``Marked for Delete``. A compaction running while an overwrite completes fails at
    its commit (``CommitConflictError``, "the overwrite wins") and leaves nothing.
    """
    a, b = base(memory_uri)
    if first == "overwrite":
        run = race(monkeypatch, a, lambda: b.compact())
        commit = a.overwrite(priced(range(500, 505), 5.0))
        assert commit.retries == 0 and run.b_commit.segment == "0.1"
        assert statuses(a) == {**compacted("0", "1", "2", "3"), **marked("0.1"), **success("4")}
        assert_both_landed(a)
    else:
        run = race(monkeypatch, a, lambda: b.overwrite(priced(range(500, 505), 5.0)))
        with pytest.raises(txn.CommitConflictError) as info:
            a.compact()
        assert f"conflicts with overwrite {run.b_commit.instant}" in str(info.value)
        assert "the overwrite wins and the compaction wrote nothing" in str(info.value)
        assert_left_nothing(a, memory_uri, run.a_instant)
        assert statuses(a) == {**marked("0", "1", "2", "3"), **success("4")}
    assert_a_was_running(run)
    assert prices(a) == dict.fromkeys(range(500, 505), 5.0)


@pytest.mark.parametrize("first", ["overwrite", "delete-segment"])
def test_overwrite_x_delete_segment(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str) -> None:
    """CarbonData: DELETE SEGMENT is refused at its start while an insert overwrite runs
    ("insert overwrite is in progress for table db.t, delete segment operation is not
    allowed").

    metatxn: both run; the one that commits second fails with ``CommitConflictError`` and leaves
    nothing. A running overwrite fails because a data commit (the delete) completed after it
    began ("rerun the overwrite"); a running DELETE SEGMENT fails because its segment is now
    ``Marked for Delete`` by the overwrite (checked again under the lock at commit).
    """
    a, b = base(memory_uri)
    if first == "overwrite":
        run = race(monkeypatch, a, lambda: b.delete_segments(["0"]))
        with pytest.raises(txn.CommitConflictError) as info:
            a.overwrite(priced(range(500, 505), 5.0))
        assert str(info.value).startswith(
            f"overwrite {run.a_instant} conflicts with commit(s) ['{run.b_commit.instant}']")
        model = {k: v for k, v in initial().items() if k >= 10}
        expected = {**marked("0"), **success("1", "2", "3")}
    else:
        run = race(monkeypatch, a, lambda: b.overwrite(priced(range(500, 505), 5.0)))
        with pytest.raises(txn.CommitConflictError) as info:
            a.delete_segments(["0"])
        message = str(info.value)
        assert message.startswith(f"delete segment of ['0'] conflicts with overwrite {run.b_commit.instant}")
        assert f"segment 0 is now {MFD}" in message and "nothing was deleted" in message
        model = dict.fromkeys(range(500, 505), 5.0)
        expected = {**marked("0", "1", "2", "3"), **success("4")}
    assert_a_was_running(run)
    assert_left_nothing(a, memory_uri, run.a_instant)
    assert prices(a) == model
    assert statuses(a) == expected


# == compaction ====================================================================================


@pytest.mark.parametrize("request_", ["minor", "custom-same-segments", "custom-other-segments"])
def test_compaction_x_compaction(monkeypatch: pytest.MonkeyPatch, memory_uri: str, request_: str) -> None:
    """CarbonData: one compaction per table at a time (``compaction.lock``); with
    ``carbon.concurrent.compaction=false`` a blocked request is queued ("Compaction is in
    progress, compaction request for table db.t is in queue.").

    metatxn: compactions of disjoint segments run side by side and both commit. The segments a
    running compaction reads are in its plan (``sources``): MINOR and MAJOR skip them (here
    nothing is left to merge, so B returns None), and a CUSTOM request naming one is refused at
    its start with ``CommitConflictError`` naming the running compaction.
    """
    a, b = base(memory_uri)
    request = {
        "minor": lambda: b.compact("minor"),
        "custom-same-segments": lambda: b.compact("custom", segments=["1", "2"]),
        "custom-other-segments": lambda: b.compact("custom", segments=["2", "3"]),
    }[request_]
    run = race(monkeypatch, a, request)
    commit = a.compact("custom", segments=["0", "1"])
    assert commit is not None and commit.segment == "0.1"
    assert_a_was_running(run)
    if request_ == "minor":
        assert run.b_error is None and run.b_result is None, "nothing left to compact"
        assert statuses(a) == {**compacted("0", "1"), **success("0.1", "2", "3")}
    elif request_ == "custom-same-segments":
        message = run.b_refused(txn.CommitConflictError)
        assert message.startswith(
            f"compaction {run.a_instant} is merging segment(s) ['1']; custom compaction of "
            "segment(s) ['1', '2'] is not allowed until it completes")
        assert statuses(a) == {**compacted("0", "1"), **success("0.1", "2", "3")}
    else:
        assert run.b_commit.segment == "2.1"
        assert statuses(a) == {**compacted("0", "1"), **compacted("2", "3", into="2.1"),
                               **success("0.1", "2.1")}
    assert prices(a) == initial()
    assert_both_landed(a)


@pytest.mark.parametrize(("first", "target"), [
    ("compaction", "source"), ("compaction", "other"),
    ("delete-segment", "minor"),
    ("delete-segment", "custom-same"),
    ("delete-segment", "custom-other"),
])
def test_compaction_x_delete_segment(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str,
                                     target: str) -> None:
    """CarbonData: DELETE SEGMENT and compaction share no lock; a compaction whose input was
    marked meanwhile aborts at its commit ("Compaction is aborted as the segment X is deleted
    after the compaction is started", §3.4/§5.8); a ``Compacted`` segment cannot be deleted.

    metatxn: decided at the start instead of wasting the rewrite. A DELETE SEGMENT of a segment
    a running compaction reads is refused with ``CommitConflictError`` naming it ("compaction T
    is merging segment(s) [...]; delete segment is not allowed until it completes"); a
    compaction beginning while a DELETE SEGMENT runs leaves its segments alone (MINOR skips them,
    CUSTOM naming one is refused naming the delete). Disjoint segments: both commit.
    """
    a, b = base(memory_uri)
    model = initial()
    if first == "compaction":
        run = race(monkeypatch, a, lambda: b.delete_segments(["0" if target == "source" else "3"]))
        commit = a.compact("custom", segments=["0", "1"])
        assert commit is not None and commit.segment == "0.1"
        if target == "source":
            message = run.b_refused(txn.CommitConflictError)
            assert message.startswith(
                f"compaction {run.a_instant} is merging segment(s) ['0']; delete segment is not allowed")
            assert statuses(a) == {**compacted("0", "1"), **success("0.1", "2", "3")}
        else:
            assert run.b_commit.segments_removed == ("3",)
            assert statuses(a) == {**compacted("0", "1"), **success("0.1", "2"), **marked("3")}
            model = {k: v for k, v in model.items() if k < 30}
    else:
        request = {
            "minor": lambda: b.compact("minor"),
            "custom-same": lambda: b.compact("custom", segments=["0", "1"]),
            "custom-other": lambda: b.compact("custom", segments=["1", "2"]),
        }[target]
        run = race(monkeypatch, a, request)
        a.delete_segments(["0"])
        model = {k: v for k, v in model.items() if k >= 10}
        if target == "minor":
            assert run.b_error is None and run.b_result is None, "1, 2, 3 are too few for MINOR"
            assert statuses(a) == {**marked("0"), **success("1", "2", "3")}
        elif target == "custom-same":
            message = run.b_refused(txn.CommitConflictError)
            assert str(run.a_instant) in message and "['0']" in message
            assert statuses(a) == {**marked("0"), **success("1", "2", "3")}
        else:
            assert run.b_commit.segment == "1.1"
            assert statuses(a) == {**marked("0"), **compacted("1", "2", into="1.1"), **success("1.1", "3")}
    assert_a_was_running(run)
    assert prices(a) == model
    assert_both_landed(a)
    if target == "custom-same":  # the refusal names what the running instant does
        assert f"delete segment {run.a_instant} is already deleting" in message, message


# == DELETE SEGMENT ================================================================================


@pytest.mark.parametrize("request_", ["same-segment", "by-date", "other-segment"])
def test_delete_segment_x_delete_segment(monkeypatch: pytest.MonkeyPatch, memory_uri: str,
                                         request_: str) -> None:
    """CarbonData: DELETE SEGMENT runs alone (``delete_segment.lock``); a second one fails "Delete
    segment by id is failed for db.t. Not able to acquire the delete segment lock ... Please
    try after some time."

    metatxn: two deletes of different segments both commit. A delete naming a segment a running
    delete is deleting (by id, or by date) is refused at its start with ``CommitConflictError``
    naming the running delete ("delete segment T is already deleting segment(s) [...]").
    """
    a, b = base(memory_uri)
    request = {
        "same-segment": lambda: b.delete_segments(["0"]),
        "by-date": lambda: b.delete_segments(before=datetime(2100, 1, 1)),
        "other-segment": lambda: b.delete_segments(["1"]),
    }[request_]
    run = race(monkeypatch, a, request)
    commit = a.delete_segments(["0"])
    assert commit.segments_removed == ("0",)
    assert_a_was_running(run)
    if request_ == "other-segment":
        assert run.b_commit.segments_removed == ("1",)
        assert statuses(a) == {**marked("0", "1"), **success("2", "3")}
        assert prices(a) == {k: v for k, v in initial().items() if k >= 20}
    else:
        message = run.b_refused(txn.CommitConflictError)
        assert message.startswith(f"delete segment {run.a_instant} is already deleting segment(s) ['0']")
        assert statuses(a) == {**marked("0"), **success("1", "2", "3")}
        assert prices(a) == {k: v for k, v in initial().items() if k >= 10}
    assert_both_landed(a)


# == CLEAN FILES ===================================================================================
#
# The table a clean has work on: the base table compacted (0-3 -> 0.1, their four files removed
# by that commit), then four more loads 4-7 (ids 40-79). ``clean(force=True)`` ignores retention,
# so it deletes exactly the four compacted files (for good, as CarbonData: segments 0-3 then
# leave SHOW SEGMENTS for its history), and never what a running writer announced (its markers)
# or what the current snapshot reads.

ALL = range(80)


def cleanable(uri: str, *, keyed: bool = True) -> tuple[txn.Table, txn.Table, set[str]]:
    a, b = base(uri, keyed=keyed)
    files = data_files(a)
    a.compact()
    for n in range(4, 8):
        a.append(rows(range(n * 10, n * 10 + 10)))
    return a, b, files


def data_files(table: txn.Table) -> set[str]:
    """The table-relative paths of the latest snapshot's data files."""
    return {relative(table, f) for f in table.snapshot().files()}


def everything() -> dict[int, float]:
    return {i: i / 2 for i in ALL}


LOADED_SEGMENTS = ("4", "5", "6", "7")


def assert_cleaned_compacted_files(result: txn.CleanResult, compacted_files: set[str],
                                   *spared: str) -> None:
    """The clean moved exactly the compacted sources' files, none of ``spared``."""
    assert result.instant is not None and not result.dry_run
    assert result.reasons.get("compacted") == len(compacted_files)
    assert {p for p in result.files if not p.startswith("_metadata/")} == compacted_files
    assert not set(spared) & set(result.files), "the clean moved a file a running writer announced"


def clean_of(run: Race) -> txn.CleanResult:
    assert run.a_instant is not None and run.b_error is None, run.b_error
    assert isinstance(run.b_result, txn.CleanResult), run.b_result
    return run.b_result


def assert_clean_completed(table: txn.Table, instant: str | None) -> None:
    assert [i.state for i in table.timeline() if i.time == instant] == ["completed"]


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
@pytest.mark.parametrize("first", ["load", "clean"])
def test_load_x_clean(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str, keyed: bool) -> None:
    """CarbonData: CLEAN FILES (``clean_files.lock``, ``delete_segment.lock``) and loads share no
    lock; a live load's ``In Progress`` entry is protected by its ``Segment_<id>.lock`` (only
    ``stale_inprogress`` with a free segment lock removes one). Before 2.1.1 the automatic
    cleanup at load start deleted live loads' and even all segments (CARBONDATA-1896, PR #3899).

    metatxn: both run and both commit. A clean never moves the files a running load announced
    (its markers; its instant is pending) nor anything the current snapshot reads: here it moves
    the four compacted files only. A load running while a clean moves files commits normally.
    """
    a, b, compacted_files = cleanable(memory_uri, keyed=keyed)
    if first == "load":
        run = race(monkeypatch, a, lambda: b.clean(force=True))
        commit = a.append(priced(LOADED, 1.0))
        assert commit is not None and commit.segment == "8"
        result = clean_of(run)
        assert_cleaned_compacted_files(result, compacted_files, *commit.paths_added)
    else:
        run = race(monkeypatch, a, lambda: b.append(priced(LOADED, 1.0)))
        result = a.clean(force=True)
        assert_cleaned_compacted_files(result, compacted_files)
        assert run.b_commit.segment == "8"
    assert_a_was_running(run)
    assert_clean_completed(a, result.instant)
    assert prices(a) == {**everything(), **dict.fromkeys(LOADED, 1.0)}
    assert statuses(a) == {**cleaned(compacted("0", "1", "2", "3")), **success("0.1", *LOADED_SEGMENTS, "8")}
    assert_both_landed(a)


@pytest.mark.parametrize(("op", "keyed"), iud_params())
@pytest.mark.parametrize("first", ["iud", "clean"])
def test_iud_x_clean(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str, op: str,
                     keyed: bool) -> None:
    """CarbonData: CLEAN FILES and UPDATE/DELETE share no lock but ``tablestatus.lock``; the docs
    warn that CLEAN FILES with force must not run concurrently with UPDATE/DELETE (it deletes
    stale delete-delta files at once).

    metatxn: both run and both commit. A clean never moves an IUD's announced delete deltas or
    new files, nor the live deltas the current snapshot reads; an IUD running while a clean
    moves files commits normally. (The race with a compaction in between is the next test.)
    """
    a, b, compacted_files = cleanable(memory_uri, keyed=keyed)
    model = everything()
    if first == "iud":
        run = race(monkeypatch, a, lambda: b.clean(force=True))
        commit = iud(a, op, 45, -1.0, keyed=keyed)
        assert commit is not None and commit.retries == 0
        result = clean_of(run)
        announced = {*commit.paths_added, *(p for p in storage_of(memory_uri).list("segment_4")
                                            if str(run.a_instant) in p)}
        assert announced, "the IUD wrote files"
        assert_cleaned_compacted_files(result, compacted_files, *announced)
        iud_effect(model, op, 45, -1.0)
    else:
        run = race(monkeypatch, a, lambda: iud(b, op, 45, -2.0, keyed=keyed))
        result = a.clean(force=True)
        assert_cleaned_compacted_files(result, compacted_files)
        assert run.b_commit.operation == op
        iud_effect(model, op, 45, -2.0)
    assert_a_was_running(run)
    assert_clean_completed(a, result.instant)
    assert prices(a) == model
    assert_both_landed(a)


@pytest.mark.parametrize(("point", "op", "keyed"), [
    pytest.param("after-read", "delete", True, id="after-read-delete-keyed"),
    pytest.param("after-read", "delete", False, id="after-read-delete-unkeyed"),
    pytest.param("after-read", "update", True, id="after-read-update-keyed"),
    pytest.param("after-read", "upsert", True, id="after-read-upsert-keyed"),
    pytest.param("write-phase", "delete", True, id="write-phase-delete-keyed"),
    pytest.param("write-phase", "delete", False, id="write-phase-delete-unkeyed"),
    pytest.param("write-phase", "update", True, id="write-phase-update-keyed"),
    pytest.param("write-phase", "upsert", True, id="write-phase-upsert-keyed"),
])
def test_iud_x_clean_after_a_compaction_overtook_the_iud(
        monkeypatch: pytest.MonkeyPatch, memory_uri: str, point: str, op: str, keyed: bool) -> None:
    """The IUD x CLEAN FILES cell when a compaction completed between the IUD's read and its
    begin, and a forced clean then ran: "after-read" (the clean runs before the IUD begins) or
    "write-phase" (the IUD has begun; the clean runs before it writes its files).

    CarbonData: impossible by locks (compaction ⟂ IUD), and force is documented as unsafe with a
    running UPDATE/DELETE.

    metatxn (documented): the IUD, overtaken only by a table service, is re-planned on the
    compacted table and retried (``Commit.retries == 1``); force never touches what a running
    writer needs. Row 1 was deleted first, so the data file of row 5 has a delete delta, which
    the compaction replaced and the clean moves.
    """
    a, b = base(memory_uri, keyed=keyed)
    a.delete(keys=[1]) if keyed else a.delete(pc.field("id") == 1)
    cleaned: list[txn.CleanResult] = []
    read_state = _state.read_state

    def after_read(context: Any) -> Any:
        state = read_state(context)
        monkeypatch.setattr(_state, "read_state", read_state)
        assert b.compact() is not None
        if point == "after-read":
            cleaned.append(b.clean(force=True))
        return state

    monkeypatch.setattr(_state, "read_state", after_read)
    if point == "write-phase":
        write = _base.write_phase

        def clean_then_write(context: Any, pending: Pending, change: Any) -> Any:
            if not cleaned and change.operation == op:
                cleaned.append(b.clean(force=True))
            return write(context, pending, change)

        monkeypatch.setattr(_base, "write_phase", clean_then_write)
        # Only a write past the small-write bound has a write phase outside the lock.
        monkeypatch.setattr(_base, "SMALL_WRITE_BYTES", -1)
    model = initial()
    del model[1]
    commit = iud(a, op, 5, -1.0, keyed=keyed)
    if point == "write-phase":
        # The running IUD's plan records the snapshot it read: even a forced clean keeps what
        # that snapshot needs (the compacted segments' files and deltas) while it runs.
        assert cleaned and not cleaned[0].reasons.get("compacted"), "a live writer's files stay"
    else:
        assert cleaned and cleaned[0].reasons.get("compacted", 0) >= 5, "the clean moved the old delta"
    # Planned again once at most: a clean before the IUD began is noticed while planning (the
    # state is read again, or the cleaned delta makes it plan again: retries 0 or 1); one in
    # its write phase makes the commit conflict with the compaction (retries 1).
    assert commit is not None and commit.retries == 1 if point == "write-phase" else commit.retries <= 1
    iud_effect(model, op, 5, -1.0)
    assert prices(a) == model
    report = a.validate()
    assert report.ok, str(report)


@pytest.mark.parametrize("first", ["overwrite", "clean"])
def test_overwrite_x_clean(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str) -> None:
    """CarbonData: CLEAN FILES is refused while an insert overwrite runs ("insert overwrite is in
    progress for table db.t, clean file operation is not allowed").

    metatxn: both run and both commit. A clean is no data commit, so a running overwrite does
    not conflict with it; the clean moves only files already removed (the compacted ones), never
    the overwrite's announced files, and the segments the overwrite marks stay on storage for a
    later clean.
    """
    a, b, compacted_files = cleanable(memory_uri)
    if first == "overwrite":
        run = race(monkeypatch, a, lambda: b.clean(force=True))
        commit = a.overwrite(priced(range(500, 505), 5.0))
        result = clean_of(run)
        assert_cleaned_compacted_files(result, compacted_files, *commit.paths_added)
    else:
        run = race(monkeypatch, a, lambda: b.overwrite(priced(range(500, 505), 5.0)))
        result = a.clean(force=True)
        assert_cleaned_compacted_files(result, compacted_files)
    assert_a_was_running(run)
    assert_clean_completed(a, result.instant)
    assert prices(a) == dict.fromkeys(range(500, 505), 5.0)
    assert statuses(a) == {**cleaned(compacted("0", "1", "2", "3")), **marked("0.1", *LOADED_SEGMENTS),
                           **success("8")}
    assert_both_landed(a)
    later = a.clean(force=True)  # what the overwrite marked goes now
    assert later.reasons.get("marked_for_delete") == 5
    assert prices(a) == dict.fromkeys(range(500, 505), 5.0) and a.validate().ok


@pytest.mark.parametrize("first", ["compaction-reading-sources", "compaction-committing", "clean"])
def test_compaction_x_clean(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str) -> None:
    """CarbonData: no lock in common; CLEAN FILES removes ``Compacted`` segments only once
    ``max(carbon.trash.retention.days, max.query.execution.time)`` passed since the compaction,
    so running queries still find them, and never the ``x.y`` files of a running (or crashed)
    compaction, which have no ``tablestatus`` entry.

    metatxn: both run and both commit. A clean while a compaction runs (before it reads its
    sources, or as it commits) moves the files of segments compacted earlier, never the running
    compaction's sources (live) nor its announced output; a compaction running while a clean
    moves files commits normally.
    """
    a, b, compacted_files = cleanable(memory_uri)
    sources = data_files(a) - data_files_of_segment(a, "0.1")
    if first == "clean":
        run = race(monkeypatch, a, lambda: b.compact())
        result = a.clean(force=True)
        assert_cleaned_compacted_files(result, compacted_files, *sources)
        assert run.b_commit.segment == "4.1"
    else:
        if first == "compaction-reading-sources":
            run = Race(a, lambda: b.clean(force=True))
            merged_rows = _compact._merged_rows

            def clean_then_read(context: Any, state: Any, files: list[str], formats: Any) -> Any:
                # A generator: this runs in A's write phase, before A reads a source row.
                run.a_instant = next(i.time for i in a.timeline() if i.is_pending)
                run.a_states_seen_by_b = [
                    i.state for i in a.timeline() if i.time == run.a_instant]
                run.b_result = run.b()
                yield from merged_rows(context, state, files, formats)

            monkeypatch.setattr(_compact, "_merged_rows", clean_then_read)
        else:
            run = race(monkeypatch, a, lambda: b.clean(force=True))
        commit = a.compact()
        assert commit is not None and commit.segment == "4.1"
        result = clean_of(run)
        assert_cleaned_compacted_files(result, compacted_files, *sources, *commit.paths_added)
    assert_a_was_running(run)
    assert_clean_completed(a, result.instant)
    assert prices(a) == everything()
    assert statuses(a) == {**cleaned(compacted("0", "1", "2", "3")),
                           **compacted(*LOADED_SEGMENTS, into="4.1"), **success("0.1", "4.1")}
    assert_both_landed(a)


def data_files_of_segment(table: txn.Table, segment: str) -> set[str]:
    return {relative(table, f) for f in table.snapshot().files() if f.segment == segment}


@pytest.mark.parametrize("first", ["delete-segment", "clean"])
def test_delete_segment_x_clean(monkeypatch: pytest.MonkeyPatch, memory_uri: str, first: str) -> None:
    """CarbonData: DELETE SEGMENT and CLEAN FILES exclude each other (``delete_segment.lock`` +
    ``clean_files.lock``): "Delete segment by id is failed for db.t. Not able to acquire the
    ... lock ... Please try after some time."; "Clean files request is failed for db.t. Not able
    to acquire the clean files lock due to another clean files operation is running in the
    background."

    metatxn: both run and both commit. The clean moves what was removed before it planned (the
    compacted files); the segment the delete marks meanwhile keeps its files until the next
    clean, which then moves them (``marked_for_delete``).
    """
    a, b, compacted_files = cleanable(memory_uri)
    segment_4 = data_files_of_segment(a, "4")
    if first == "delete-segment":
        run = race(monkeypatch, a, lambda: b.clean(force=True))
        commit = a.delete_segments(["4"])
        assert commit.segments_removed == ("4",)
        result = clean_of(run)
    else:
        run = race(monkeypatch, a, lambda: b.delete_segments(["4"]))
        result = a.clean(force=True)
        assert run.b_commit.segments_removed == ("4",)
    assert_a_was_running(run)
    assert_cleaned_compacted_files(result, compacted_files, *segment_4)
    assert_clean_completed(a, result.instant)
    model = {k: v for k, v in everything().items() if not 40 <= k < 50}
    assert prices(a) == model
    assert statuses(a) == {**cleaned(compacted("0", "1", "2", "3")), **marked("4"),
                           **success("0.1", "5", "6", "7")}
    assert_both_landed(a)
    later = a.clean(force=True)
    assert {p for p in later.files if not p.startswith(("_metadata/", "_trash/"))} == segment_4
    assert later.reasons.get("marked_for_delete") == len(segment_4)
    assert prices(a) == model and a.validate().ok


@pytest.mark.parametrize("request_", ["force", "within-retention"])
def test_clean_x_clean(monkeypatch: pytest.MonkeyPatch, memory_uri: str, request_: str) -> None:
    """CarbonData: one CLEAN FILES at a time (``clean_files.lock``): "Clean files request is
    failed for db.t. Not able to acquire the clean files lock due to another clean files
    operation is running in the background."

    metatxn: a second clean that has files to move is refused at its start (under the lock, after
    recovery) with ``CommitConflictError`` naming the running clean instant ("clean instant T is
    still running"; a dead one is rolled back instead once its heartbeat expires). A clean that
    finds nothing past retention begins no instant and returns an empty result.
    """
    a, b, compacted_files = cleanable(memory_uri)
    run = race(monkeypatch, a, lambda: b.clean(force=request_ == "force"))
    result = a.clean(force=True)
    assert_a_was_running(run)
    assert_cleaned_compacted_files(result, compacted_files)
    if request_ == "force":
        message = run.b_refused(txn.CommitConflictError)
        assert message.startswith(f"clean refused: clean instant {run.a_instant} is still running")
    else:
        assert run.b_error is None and run.b_result.files == [] and run.b_result.instant is None
    assert [i.action for i in a.timeline()].count("clean") == 1
    assert_clean_completed(a, result.instant)
    assert prices(a) == everything()
    assert_both_landed(a)
