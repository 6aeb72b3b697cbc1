"""Instant values, instant times and instant file names: pure functions, no storage."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from metatxn.timeline import (
    ACTIONS,
    COMPLETED,
    INFLIGHT,
    REQUESTED,
    ROLLEDBACK,
    Instant,
    format_time,
    next_time,
    parse_file_name,
    parse_time,
    time_of,
)
from metatxn.timeline._instant import file_name, looks_like_instant, state_rank

# Years 1000..9999: every instant time a 17-digit yyyyMMddHHmmssSSS string can express.
MIN_MS = -30_610_224_000_000  # 1000-01-01T00:00:00.000Z
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

epoch_ms = st.integers(min_value=MIN_MS, max_value=MAX_MS)
times = epoch_ms.map(format_time)
actions = st.sampled_from(sorted(ACTIONS))
pending_or_rolledback = st.sampled_from([REQUESTED, INFLIGHT, ROLLEDBACK])

T = "20260101000000000"
C = "20260101000000123"


def test_the_range_constants_are_the_first_and_last_representable_milliseconds() -> None:
    assert format_time(MIN_MS) == "10000101000000000"
    assert format_time(MAX_MS) == "99991231235959999"


# -- file names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (f"{T}.commit.requested", Instant(time=T, action="commit", state=REQUESTED)),
        (f"{T}.deltacommit.inflight", Instant(time=T, action="deltacommit", state=INFLIGHT)),
        (f"{T}.rollback.rolledback", Instant(time=T, action="rollback", state=ROLLEDBACK)),
        (f"{T}_{C}.replacecommit",
         Instant(time=T, action="replacecommit", state=COMPLETED, completed_at=C)),
    ],
)
def test_each_state_has_one_file_name_that_parses_back_to_the_instant(
    name: str, expected: Instant
) -> None:
    """file_name and parse_file_name are inverse bijections between instants and names."""
    assert parse_file_name(name) == expected
    assert expected.file_name == name


@given(time=times, action=actions, state=pending_or_rolledback)
def test_pending_and_rolled_back_names_round_trip(time: str, action: str, state: str) -> None:
    """For every time, action and non-completed state: parse(format(i)) == i."""
    instant = Instant(time=time, action=action, state=state)  # type: ignore[arg-type]
    assert instant.file_name == f"{time}.{action}.{state}"
    assert parse_file_name(instant.file_name) == instant


@given(time=times, completed_at=times, action=actions)
def test_completed_names_round_trip_with_their_completion_time(
    time: str, completed_at: str, action: str
) -> None:
    """A completed instant's name carries both times; parsing recovers both exactly."""
    instant = Instant(time=time, action=action, state=COMPLETED, completed_at=completed_at)
    assert instant.file_name == f"{time}_{completed_at}.{action}"
    parsed = parse_file_name(instant.file_name)
    assert parsed == instant
    assert parsed is not None and parsed.is_completed and not parsed.is_pending


def test_a_completed_file_name_needs_a_completion_time() -> None:
    with pytest.raises(ValueError, match="completion time"):
        file_name(T, "commit", COMPLETED)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(f"{T[:-1]}.commit.requested", id="16-digit-time"),
        pytest.param(f"{T}0.commit.requested", id="18-digit-time"),
        pytest.param(f"{T}_{C[:-1]}.commit", id="16-digit-completion-time"),
        pytest.param(f"{T}_{C}0.commit", id="18-digit-completion-time"),
        pytest.param(f"{T}.bogus.requested", id="unknown-action"),
        pytest.param(f"{T}_{C}.bogus", id="unknown-completed-action"),
        pytest.param(f"{T}.Commit.requested", id="capitalised-action"),
        pytest.param(f"{T}.commit.completed", id="completed-as-a-suffix"),
        pytest.param(f"{T}.commit.done", id="unknown-state"),
        pytest.param(f"{T}_{C}.commit.requested", id="completion-time-and-state"),
        pytest.param(f"{T}_{C}.commit.inflight", id="completion-time-and-inflight"),
        pytest.param(f"{T}.commit", id="bare-time-and-action"),
        pytest.param(f"{T}.commit.requested.tmp", id="trailing-suffix"),
        pytest.param(f" {T}.commit.requested", id="leading-space"),
        pytest.param(f"{T}.commit.requested\n", id="trailing-newline"),
        pytest.param(f"{T}..requested", id="empty-action"),
        pytest.param(f"{T}", id="time-only"),
        pytest.param("20261301000000000.commit.requested", id="month-13"),
        pytest.param(f"{T}_20260230000000000.commit", id="completed-on-february-30"),
        pytest.param("table.json", id="unrelated-file"),
        pytest.param("", id="empty"),
        pytest.param("\u0662\u0660\u0662\u0666" + T[4:] + ".commit.requested",
                     id="non-ascii-digits"),
    ],
)
def test_malformed_names_are_not_instants(name: str) -> None:
    """Only names the timeline itself writes parse; everything else is None, never a guess."""
    assert parse_file_name(name) is None


def _valid_time(text: str) -> bool:
    try:
        parse_time(text)
    except ValueError:
        return False
    return True


digit_runs = st.one_of(times, st.text(alphabet="0123456789", min_size=15, max_size=19))


@given(time=digit_runs, completed_at=st.none() | digit_runs,
       action=st.sampled_from([*sorted(ACTIONS), "bogus", "Commit", ""]),
       state=st.sampled_from([None, REQUESTED, INFLIGHT, ROLLEDBACK, COMPLETED, "done"]))
def test_a_name_parses_exactly_when_every_part_is_canonical(
    time: str, completed_at: str | None, action: str, state: str | None
) -> None:
    """Assembled from near-miss parts, a name parses iff both times are valid 17-digit times,
    the action is known, and it has either a completion time or a non-completed state suffix
    (never both, never neither); and then it formats back to itself."""
    name = time + (f"_{completed_at}" if completed_at is not None else "") + f".{action}"
    name += f".{state}" if state is not None else ""
    canonical = (
        _valid_time(time)
        and (completed_at is None or _valid_time(completed_at))
        and action in ACTIONS
        and (completed_at is None) != (state is None)
        and state in (None, REQUESTED, INFLIGHT, ROLLEDBACK)
    )
    parsed = parse_file_name(name)
    assert (parsed is not None) == canonical
    if parsed is not None:
        assert parsed.file_name == name
        assert looks_like_instant(name)


def test_digit_led_names_look_like_instants_so_near_misses_are_reported_not_skipped() -> None:
    """looks_like_instant flags any digit-led name (only instant files start with a digit in
    ``_timeline/``), so load() reports a damaged instant file instead of hiding it."""
    assert looks_like_instant(f"{T}.bogus.requested")
    assert looks_like_instant("2026010100000000x.commit.requested")
    assert looks_like_instant(T)
    assert looks_like_instant("table.json") is False
    assert looks_like_instant(".tmp-20260101") is False


def test_states_rank_requested_then_inflight_then_the_two_terminal_states() -> None:
    assert state_rank(REQUESTED) < state_rank(INFLIGHT) < state_rank(COMPLETED)
    assert state_rank(COMPLETED) == state_rank(ROLLEDBACK)


def test_with_state_keeps_the_identity_and_sets_the_completion_time() -> None:
    requested = Instant(time=T, action="commit", state=REQUESTED)
    done = requested.with_state(COMPLETED, completed_at=C)
    assert (done.time, done.action, done.state, done.completed_at) == (T, "commit", COMPLETED, C)
    assert requested.with_state(INFLIGHT).completed_at is None
    assert str(done) == f"{T} commit completed @ {C}"
    assert str(requested) == f"{T} commit requested"


# -- instant times ------------------------------------------------------------------------------


@given(ms=epoch_ms)
def test_format_time_and_parse_time_round_trip_over_nine_millennia(ms: int) -> None:
    """parse_time(format_time(ms)) == ms, and the text is always 17 ASCII digits."""
    text = format_time(ms)
    assert len(text) == 17 and text.isascii() and text.isdigit()
    assert parse_time(text) == ms


@given(a=epoch_ms, b=epoch_ms)
def test_instant_times_sort_as_text_in_the_order_of_their_milliseconds(a: int, b: int) -> None:
    """Comparing 17-digit times as strings is the same as comparing the moments."""
    assume(a != b)
    assert (format_time(a) < format_time(b)) == (a < b)


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("19700101000000000", datetime(1970, 1, 1, tzinfo=timezone.utc)),
        ("20000229235959999", datetime(2000, 2, 29, 23, 59, 59, 999_000, tzinfo=timezone.utc)),
        ("20240229120000001", datetime(2024, 2, 29, 12, 0, 0, 1_000, tzinfo=timezone.utc)),
        ("19691231235959999", datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=timezone.utc)),
        ("99991231235959999", datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=timezone.utc)),
    ],
)
def test_parse_time_reads_utc_including_leap_days_and_times_before_the_epoch(
    text: str, moment: datetime
) -> None:
    expected_ms = (moment - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(milliseconds=1)
    assert parse_time(text) == expected_ms
    assert format_time(expected_ms) == text


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("2026010100000000", id="16-digits"),
        pytest.param("202601010000000000", id="18-digits"),
        pytest.param("2026010100000000x", id="non-digit"),
        pytest.param("-2026010100000000", id="signed"),
        pytest.param(" 2026010100000000", id="padded"),
        pytest.param("20261301000000000", id="month-13"),
        pytest.param("20260001000000000", id="month-0"),
        pytest.param("20260230000000000", id="february-30"),
        pytest.param("19000229000000000", id="1900-is-not-a-leap-year"),
        pytest.param("20230229000000000", id="2023-is-not-a-leap-year"),
        pytest.param("20260101240000000", id="hour-24"),
        pytest.param("20260101006000000", id="minute-60"),
        pytest.param("20260101000060000", id="second-60"),
        pytest.param("", id="empty"),
        pytest.param("\u0662\u0660\u0662\u0666" + T[4:], id="non-ascii-digits"),
    ],
)
def test_parse_time_rejects_anything_but_a_valid_seventeen_digit_utc_time(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)


@given(moment=st.datetimes(min_value=datetime(1000, 1, 1),
                           max_value=datetime(9999, 12, 31, 23, 59, 59, 999_999)))
def test_time_of_treats_naive_datetimes_as_utc_and_truncates_to_milliseconds(
    moment: datetime,
) -> None:
    text = time_of(moment)
    assert text == format_time(parse_time(text))
    aware = moment.replace(tzinfo=timezone.utc)
    assert time_of(aware) == text
    assert parse_time(text) == (aware - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(
        milliseconds=1
    )


@given(moment=st.datetimes(min_value=datetime(1001, 1, 1), max_value=datetime(9998, 12, 31),
                           timezones=st.integers(-14 * 60, 14 * 60).map(
                               lambda m: timezone(timedelta(minutes=m)))))
def test_time_of_converts_aware_datetimes_to_utc(moment: datetime) -> None:
    """Two spellings of the same moment in different zones give the same instant time."""
    assert time_of(moment) == time_of(moment.astimezone(timezone.utc))


def test_time_of_an_aware_datetime_east_of_utc_is_earlier_in_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    assert time_of(datetime(2026, 1, 1, 9, 0, tzinfo=tokyo)) == "20260101000000000"
    assert time_of(datetime(2026, 1, 1, 0, 0, 0, 999_999)) == "20260101000000999"


def test_time_of_passes_a_valid_time_string_through_and_rejects_an_invalid_one() -> None:
    assert time_of(T) == T
    with pytest.raises(ValueError, match="17 digits"):
        time_of("2026-01-01")
    with pytest.raises(ValueError):
        time_of("20261301000000000")


# -- next_time ----------------------------------------------------------------------------------


def test_next_time_uses_the_clock_when_it_is_ahead_of_the_last_time() -> None:
    now = parse_time(T)
    assert next_time(now, None) == T
    assert next_time(now + 5, T) == format_time(now + 5)


def test_next_time_bumps_one_millisecond_past_the_last_time_when_the_clock_stalls_or_goes_back(
) -> None:
    now = parse_time(T)
    assert next_time(now, T) == format_time(now + 1)
    assert next_time(now - 60_000, T) == format_time(now + 1)


@given(start=st.integers(parse_time("20000101000000000"), parse_time("21000101000000000")),
       steps=st.lists(st.integers(-10_000, 10_000), min_size=1, max_size=50))
def test_next_time_is_strictly_increasing_whatever_the_clock_does(
    start: int, steps: list[int]
) -> None:
    """Feeding each issued time back as ``after`` yields a strictly increasing sequence that
    never runs behind the clock: issued >= clock reading at issue."""
    now, last = start, None
    issued: list[str] = []
    for step in steps:
        now += step
        last = next_time(now, last)
        issued.append(last)
        assert parse_time(last) >= now
    assert issued == sorted(set(issued))
