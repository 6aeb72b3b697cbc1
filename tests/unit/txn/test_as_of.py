"""``as_of``: an instant time, a ``datetime``, or an ISO-8601 date or timestamp string (UTC
unless it carries an offset; ``Z`` accepted; a date is its midnight UTC). Each string form reads
the same snapshot as the equivalent ``datetime``; anything else is refused naming the forms,
before the table is read (issue 25, item 5)."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

import txn
from metatxn.timeline import parse_time
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, rows, sorted_rows

UTC = timezone.utc
#: The fake clock's start: 2026-01-01T00:00:00Z.
DAY_1 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def table(tmp_path: Path, clock: FakeClock) -> txn.Table:
    """Rows 0-2 appended on 2026-01-01 just after midnight, rows 3-5 on 2026-01-02 at 10:00
    (UTC), then rows 6-8 on 2026-01-03 at 10:00."""
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, clock=clock)
    t.append(rows(range(3)))
    for day, ids in ((2, range(3, 6)), (3, range(6, 9))):
        clock.now_ms = int(datetime(2026, 1, day, 10, tzinfo=UTC).timestamp() * 1000)
        t.append(rows(ids))
    return t


def ids(t: txn.Table, as_of: object) -> list[int]:
    return sorted(t.to_arrow(columns=["id"], as_of=as_of)["id"].to_pylist())  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "moment"), [
    ("2026-01-02", datetime(2026, 1, 2)),
    ("2026-01-03", datetime(2026, 1, 3, tzinfo=UTC)),
    ("2026-01-02 10:00:00", datetime(2026, 1, 2, 10)),
    ("2026-01-02T09:59:59.999", datetime(2026, 1, 2, 9, 59, 59, 999_000)),
    ("2026-01-02T10:00:00.500Z", datetime(2026, 1, 2, 10, 0, 0, 500_000, tzinfo=UTC)),
    ("2026-01-02T12:00:00.500+02:00", datetime(2026, 1, 2, 10, 0, 0, 500_000, tzinfo=UTC)),
    ("2026-01-02T11:59:00+02:00", datetime(2026, 1, 2, 9, 59, tzinfo=UTC)),
    ("2026-01-03T05:00:00-05:00", datetime(2026, 1, 3, 10, tzinfo=UTC)),
])
def test_a_string_reads_what_the_equivalent_datetime_reads(
    table: txn.Table, text: str, moment: datetime,
) -> None:
    assert ids(table, text) == ids(table, moment)
    assert table.snapshot(text).instant == table.snapshot(moment).instant
    assert sorted_rows(table.snapshot(text).to_arrow()) == sorted_rows(table.to_arrow(as_of=moment))


def test_the_forms_reach_the_expected_instants(table: txn.Table) -> None:
    """A date is its midnight UTC; a time without an offset is UTC; an offset is converted."""
    assert ids(table, "2026-01-02") == [0, 1, 2]
    assert ids(table, "2026-01-02T09:59:59Z") == [0, 1, 2]
    assert ids(table, "2026-01-02T10:00:01") == [0, 1, 2, 3, 4, 5]
    assert ids(table, "2026-01-02T11:00:01+02:00") == [0, 1, 2], "09:00:01 UTC"
    assert ids(table, "2026-01-02T05:00:01-05:00") == [0, 1, 2, 3, 4, 5], "10:00:01 UTC"
    assert ids(table, "2026-01-04") == list(range(9))


def test_the_bound_is_inclusive_to_the_millisecond(table: txn.Table) -> None:
    second = table.history()[1]
    done = datetime.fromtimestamp(parse_time(second.completed_at) / 1000, tz=UTC)
    at = done.strftime("%Y-%m-%dT%H:%M:%S.") + f"{done.microsecond // 1000:03d}Z"
    assert table.snapshot(at).instant == second.instant
    before = done - timedelta(milliseconds=1)
    earlier = before.strftime("%Y-%m-%d %H:%M:%S.") + f"{before.microsecond // 1000:03d}"
    assert table.snapshot(earlier).instant != second.instant


def test_an_instant_time_keeps_its_meaning(table: txn.Table) -> None:
    second = table.history()[1]
    assert table.snapshot(second.instant).instant == second.instant
    assert ids(table, second.instant) == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("as_of", [
    "yesterday", "", "2026-13-01", "2026-01-02 25:00", "01/02/2026", "2026-01-02T10:00:00+2",
    20260102, 1, 1.5, date(2026, 1, 2), b"2026-01-02",
])
def test_anything_else_is_refused_naming_the_forms_and_nothing_changes(
    table: txn.Table, as_of: object,
) -> None:
    before = table.timeline()
    for read in (table.snapshot, lambda a: table.to_arrow(as_of=a)):
        with pytest.raises(txn.InvalidOptionError) as raised:
            read(as_of)
        message = str(raised.value)
        assert "ISO-8601 date or timestamp string" in message and "a datetime" in message
        assert "instant time" in message and repr(as_of) in message
    assert table.timeline() == before


@pytest.mark.parametrize("early", ["0999-01-01", "0001-01-01T00:00:00", "1969-12-31",
                                   datetime(999, 1, 1), datetime(1, 1, 1, tzinfo=UTC)])
def test_moments_before_the_epoch_and_year_1000_are_before_everything(
        table: txn.Table, early: object) -> None:
    """Found by review: a year before 1000 made a 16-digit bound that sorted after every
    instant (the latest snapshot instead of an empty one)."""
    assert ids(table, early) == []
    assert table.snapshot(early).instant is None  # type: ignore[arg-type]


@pytest.mark.parametrize("late", ["9999-12-31T23:59:59-01:00", datetime.max])
def test_moments_past_year_9999_in_utc_are_after_everything(table: txn.Table, late: object) -> None:
    assert ids(table, late) == list(range(9))
