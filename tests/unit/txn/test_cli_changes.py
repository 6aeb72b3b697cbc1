"""``metatxn changes``: the change feed's summary by instant, run as users run it (the installed
executable in a subprocess, as in test_cli.py)."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, rows
from tests.unit.txn.test_cli import assert_one_line_error, body, metatxn, ok, ok_json
from txn._cli._render import CHANGES_HEADERS


@pytest.fixture
def changed(tmp_path: Path) -> tuple[txn.Table, list[str]]:
    """A keyed table: three loads of ten rows, an upsert (keys 1 and 2 repriced, 30 new), a
    compaction (no change rows), a delete of keys 3, 4 and 5; the data instants in order."""
    t = txn.create_table(str(tmp_path / "orders"), SCHEMA, record_key="id")
    loads = [t.append(rows(range(load * 10, load * 10 + 10))) for load in range(3)]
    instants = [c.instant for c in loads if c is not None]
    upserted = t.upsert(rows([1, 2, 30]))
    assert upserted is not None
    instants.append(upserted.instant)
    t.compact("custom", segments=["0", "1"])
    deleted = t.delete(keys=[3, 4, 5])
    assert deleted is not None
    instants.append(deleted.instant)
    return t, instants


def test_changes_lists_each_data_instant_with_the_rows_it_changed(
    changed: tuple[txn.Table, list[str]],
) -> None:
    t, instants = changed
    out = ok("changes", t.uri, "--since", instants[0])
    assert re.split(r"\s{2,}", out.splitlines()[0]) == list(CHANGES_HEADERS)
    completed = {e.instant: e.completed_at for e in t.history()}
    # the compaction rewrote rows and changed none: it is not listed
    assert body(out) == [
        [instants[1], completed[instants[1]], "append", "10", "0", "0"],
        [instants[2], completed[instants[2]], "append", "10", "0", "0"],
        [instants[3], completed[instants[3]], "upsert", "1", "2", "0"],
        [instants[4], completed[instants[4]], "delete", "0", "0", "3"],
    ]
    listed = ok_json("changes", t.uri, "--since", instants[0])
    assert listed == [msgspec.structs.asdict(s) for s in t.changes(instants[0]).summary()]
    assert isinstance(listed, list) and listed[2] == {
        "instant": instants[3], "completed_at": completed[instants[3]], "operation": "upsert",
        "inserted": 1, "updated": 2, "deleted": 0}


def test_the_window_is_bounded_by_until_and_since_takes_earliest_and_times(
    changed: tuple[txn.Table, list[str]],
) -> None:
    t, instants = changed
    first_two = ok_json("changes", t.uri, "--since", "earliest", "--until", instants[1])
    assert isinstance(first_two, list)
    assert [(c["instant"], c["inserted"]) for c in first_two] == [(instants[0], 10), (instants[1], 10)]
    everything = ok_json("changes", t.uri, "--since", "earliest")
    assert isinstance(everything, list) and [c["instant"] for c in everything] == instants
    # an ISO-8601 time is a completion bound as well (here: before the table was created)
    assert ok_json("changes", t.uri, "--since", "2000-01-01T00:00:00+00:00") == everything
    one = ok_json("changes", t.uri, "--since", instants[2], "--until", instants[3])
    assert isinstance(one, list) and [c["instant"] for c in one] == [instants[3]]


def test_an_empty_window_says_so(changed: tuple[txn.Table, list[str]]) -> None:
    t, instants = changed
    out = ok("changes", t.uri, "--since", instants[-1])
    assert out.startswith("no changes: no data instant completed in (") and "Instant" not in out
    assert ok_json("changes", t.uri, "--since", instants[-1]) == []


@pytest.mark.parametrize(("args", "message"), [
    (("--since", "last tuesday"), "last tuesday"),
    (("--since", "{last}", "--until", "{first}"), ""),
    (("--since", "earliest", "--until", "not-an-instant"), "not-an-instant"),
])
def test_a_bad_bound_is_one_error_line_and_changes_nothing(
    changed: tuple[txn.Table, list[str]], args: tuple[str, ...], message: str,
) -> None:
    t, instants = changed
    before = t.timeline()
    given = [a.format(first=instants[0], last=instants[-1]) for a in args]
    assert_one_line_error(metatxn("changes", t.uri, *given), message)
    assert t.timeline() == before


def test_since_is_required_and_a_missing_table_is_reported(tmp_path: Path) -> None:
    missing = metatxn("changes", str(tmp_path / "t"))
    assert missing.returncode == 2 and "--since" in missing.stderr, "argparse's usage error"
    assert_one_line_error(metatxn("changes", str(tmp_path / "absent"), "--since", "earliest"),
                          "no metatxn table at")


def test_a_window_past_what_clean_kept_names_the_oldest_readable_instant(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "short"), pa.schema([("id", pa.int64())]), properties={
        "clean.retain_commits": "1", "clean.retain_hours": "0"})
    appended = t.append(pa.table({"id": [1]}))
    assert appended is not None
    first = appended.instant
    for i in range(2, 6):
        t.append(pa.table({"id": [i]}))
    t.compact("major")
    t.clean()
    result = metatxn("changes", t.uri, "--since", first)
    assert_one_line_error(result, "")
    assert "oldest" in result.stderr, result.stderr
