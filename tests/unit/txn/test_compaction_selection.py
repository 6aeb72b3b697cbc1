"""Compaction and DELETE SEGMENT selection: CarbonData's rules (reference sections 3 and 5.1-5.4)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from metatxn.indexes import SegmentEntry, SegmentStatus, segment_sort_key
from metatxn.timeline import InvalidOptionError, SegmentNotFoundError
from txn._segments._selection import (
    DEFAULT_LEVEL_THRESHOLD,
    check_custom,
    merged_name,
    parse_level_threshold,
    select_delete_before,
    select_delete_by_id,
    select_major,
    select_minor,
)

ALL_STATUSES = (SegmentStatus.SUCCESS, SegmentStatus.COMPACTED, SegmentStatus.MARKED_FOR_DELETE,
                SegmentStatus.STREAMING, SegmentStatus.STREAMING_FINISH, SegmentStatus.INSERT_IN_PROGRESS)


def seg(segment_id: str, status: str = SegmentStatus.SUCCESS, **fields: object) -> SegmentEntry:
    return SegmentEntry(id=segment_id, status=status, **fields)  # type: ignore[arg-type]


def table(*entries: SegmentEntry) -> dict[str, SegmentEntry]:
    return {e.id: e for e in entries}


def loads(*ids: str) -> list[SegmentEntry]:
    """Success loads (or merge results) with these ids."""
    return [seg(i) for i in ids]


def sized(*sizes: int) -> list[SegmentEntry]:
    """Loads 0, 1, 2, ... with the given data sizes."""
    return [seg(str(n), data_size=size) for n, size in enumerate(sizes)]


class Simulated:
    """A table's status list driven the way CarbonData drives it: loads, then compaction loops."""

    def __init__(self) -> None:
        self.entries: dict[str, SegmentEntry] = {}
        self.merges: list[tuple[str, list[str]]] = []
        self.next_load = 0

    def load(self) -> str:
        segment_id = str(self.next_load)
        self.next_load += 1
        self.entries[segment_id] = seg(segment_id)
        return segment_id

    def merge(self, ids: list[str]) -> str:
        name = merged_name(ids)
        for i in ids:
            self.entries[i] = seg(i, SegmentStatus.COMPACTED, merged_to=name)
        self.entries[name] = seg(name)
        self.merges.append((name, ids))
        return name

    def compact_minor(self, threshold: tuple[int, int], preserve: int = 0) -> None:
        """CarbonData's MINOR loop: select, merge, re-read, select again until nothing is left."""
        while ids := select_minor(self.entries.values(), threshold, preserve=preserve):
            self.merge(ids)

    def live(self) -> list[str]:
        return sorted((i for i, e in self.entries.items() if e.status == SegmentStatus.SUCCESS),
                      key=segment_sort_key)


# --- parse_level_threshold ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4,3", (4, 3)),
        (" 4 , 3 ", (4, 3)),
        ("3,2", (3, 2)),
        ("0,0", (0, 0)),
        ("10000,10000", (10000, 10000)),
        ("6,1", (6, 0)),  # CarbonData: an L2 count of 1 means 0
        ("1,1", (1, 0)),
        ("1,2", (1, 2)),  # L1 of 1 is kept as written; select_minor treats it as disabled
        ("04,03", (4, 3)),
    ],
)
def test_level_threshold_parses_two_counts(text: str, expected: tuple[int, int]) -> None:
    assert parse_level_threshold(text) == expected


def test_the_default_level_threshold_is_carbondatas() -> None:
    assert DEFAULT_LEVEL_THRESHOLD == "4,3"
    assert parse_level_threshold(DEFAULT_LEVEL_THRESHOLD) == (4, 3)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("4", "1 value"),
        ("4,3,2", "3 values"),
        ("4;3", "1 value"),
        ("a,3", "'a' is not a whole number"),
        ("4,", "'' is not a whole number"),
        ("-1,3", "'-1' is not a whole number"),
        ("+4,3", "'+4' is not a whole number"),
        ("4.0,3", "'4.0' is not a whole number"),
        ("4_0,3", "'4_0' is not a whole number"),
        ("\u0664,3", "is not a whole number"),  # an Arabic-Indic four: int() takes it, we do not
        ("10001,3", "level-1 count 10001 is above 10000"),
        ("4,99999", "level-2 count 99999 is above 10000"),
    ],
)
def test_a_bad_level_threshold_is_refused_not_defaulted(text: str, problem: str) -> None:
    # CarbonData logs and falls back to "4,3"; we refuse, naming property, value and form.
    with pytest.raises(InvalidOptionError) as caught:
        parse_level_threshold(text)
    message = str(caught.value)
    assert "compaction.level_threshold" in message
    assert repr(text) in message
    assert problem in message
    assert "two comma-separated whole numbers from 0 to 10000" in message and "'4,3'" in message


def test_a_level_threshold_that_is_not_text_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match="it is a tuple"):
        parse_level_threshold((4, 3))  # type: ignore[arg-type]


# --- merged_name ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        (["0", "1", "2", "3"], "0.1"),
        (["4", "5", "6", "7"], "4.1"),
        (["0.1", "4.1", "8.1"], "0.2"),
        (["0.1", "3.1"], "0.2"),
        (["3", "4", "5"], "3.1"),
        (["12.2", "16.2"], "12.3"),
        (["7"], "7.1"),  # CUSTOM on one segment (a re-sort)
        (["0.9"], "0.10"),  # the level is a number, not a digit
        (["0.2", "1"], "0.3"),  # CUSTOM mixing levels: named after the first id
        (["10", "9", "11"], "9.1"),  # numerically first, not first as given or as text
        (["8.1", "0.1", "4.1"], "0.2"),
    ],
)
def test_merged_name_is_carbondatas_get_merged_load_name(ids: list[str], expected: str) -> None:
    assert merged_name(ids) == expected


@pytest.mark.parametrize("ids", [[], ["a"], ["1", "x.1"], ["-1"], ["1.1.1"], [""], "0123"])
def test_merged_name_refuses_what_is_not_a_list_of_ids(ids: list[str]) -> None:
    with pytest.raises(InvalidOptionError):
        merged_name(ids)


# --- select_minor: CarbonData's own examples ------------------------------------------------------


def test_minor_4_3_merges_four_loads_then_three_level_one_segments() -> None:
    table_ = Simulated()
    for _ in range(12):
        table_.load()
        table_.compact_minor((4, 3))  # auto-merge after each load
    assert table_.merges == [
        ("0.1", ["0", "1", "2", "3"]),
        ("4.1", ["4", "5", "6", "7"]),
        ("8.1", ["8", "9", "10", "11"]),
        ("0.2", ["0.1", "4.1", "8.1"]),  # in the same compaction command as 8.1 (the loop)
    ]
    assert table_.live() == ["0.2"]
    # More loads: 0.2 is level 2 and never merged by MINOR again.
    for _ in range(16):
        table_.load()
        table_.compact_minor((4, 3))
    assert table_.live() == ["0.2", "12.2", "24.1"]


def test_minor_3_2_with_two_preserved_segments() -> None:
    table_ = Simulated()
    for _ in range(8):
        table_.load()
        table_.compact_minor((3, 2), preserve=2)
    assert table_.merges == [
        ("0.1", ["0", "1", "2"]),  # after load 4: 0..4 valid, 3 and 4 preserved
        ("3.1", ["3", "4", "5"]),  # after load 7: 0.1, 3..7 valid, 6 and 7 preserved
        ("0.2", ["0.1", "3.1"]),
    ]
    assert table_.live() == ["0.2", "6", "7"]


def test_minor_on_a_batch_of_twelve_loads_reaches_the_same_end() -> None:
    table_ = Simulated()
    for _ in range(12):
        table_.load()
    table_.compact_minor((4, 3))
    assert [name for name, _ in table_.merges] == ["0.1", "4.1", "8.1", "0.2"]


# --- select_minor: rules --------------------------------------------------------------------------


def test_minor_returns_nothing_below_the_threshold() -> None:
    assert select_minor(loads("0", "1", "2"), (4, 3)) == []
    assert select_minor([], (4, 3)) == []


def test_minor_takes_the_first_l1_loads_in_numeric_order() -> None:
    entries = loads("11", "2", "10", "9", "30")
    assert select_minor(entries, (4, 3)) == ["2", "9", "10", "11"]


def test_minor_level_two_list_can_fill_first() -> None:
    entries = loads("0.1", "4.1", "8.1", "12", "13")
    assert select_minor(entries, (4, 3)) == ["0.1", "4.1", "8.1"]


def test_minor_level_one_list_can_fill_first() -> None:
    entries = loads("0.1", "4", "5", "6", "7", "8.1", "12.1")
    assert select_minor(entries, (4, 3)) == ["4", "5", "6", "7"]


def test_minor_counts_only_success_and_skips_the_rest_without_breaking_the_run() -> None:
    entries = [
        seg("0"),
        seg("1", SegmentStatus.COMPACTED, merged_to="0.1"),
        seg("2", SegmentStatus.MARKED_FOR_DELETE),
        seg("3", SegmentStatus.STREAMING),
        seg("4", SegmentStatus.STREAMING_FINISH),
        seg("5", SegmentStatus.INSERT_IN_PROGRESS),
        seg("6"),
        seg("7"),
        seg("8"),
    ]
    assert select_minor(entries, (4, 3)) == ["0", "6", "7", "8"]


def test_minor_skips_external_and_foreign_format_segments() -> None:
    entries = [
        seg("0"),
        seg("1", external=True, path="s3://elsewhere/1"),
        seg("2", format="csv", external=True, path="/in/2"),
        seg("3", format="orc"),
        seg("4"),
        seg("5"),
    ]
    assert select_minor(entries, (3, 3)) == ["0", "4", "5"]


def test_minor_skips_level_two_and_above() -> None:
    entries = loads("0.2", "12.2", "24.3", "36.1", "40.1")
    assert select_minor(entries, (4, 2)) == ["36.1", "40.1"]
    assert select_minor(loads("0.2", "12.2", "24.2"), (4, 3)) == []


def test_minor_skips_major_results() -> None:
    entries = loads("0.1", "4.1", "8.1", "12")
    assert select_minor(entries, (4, 3), major_results=["4.1"]) == []
    assert select_minor(entries, (4, 3), major_results={"12"}) == ["0.1", "4.1", "8.1"]
    entries += loads("16.1")
    assert select_minor(entries, (4, 3), major_results=("4.1",)) == ["0.1", "8.1", "16.1"]


def test_minor_preserve_keeps_the_latest_valid_segments_out() -> None:
    entries = loads("0", "1", "2", "3", "4")
    assert select_minor(entries, (4, 3), preserve=1) == ["0", "1", "2", "3"]
    assert select_minor(entries, (4, 3), preserve=2) == []
    assert select_minor(entries, (4, 3), preserve=50) == []


def test_minor_preserve_counts_by_id_and_only_valid_native_segments() -> None:
    entries = [
        *loads("0", "1", "2", "3"),
        seg("4", SegmentStatus.MARKED_FOR_DELETE),  # not valid: does not use up the preserve count
        seg("5", external=True),  # not native: neither
        seg("6", SegmentStatus.STREAMING),
    ]
    assert select_minor(entries, (3, 3), preserve=1) == ["0", "1", "2"]
    # "Latest" means highest id, not latest loaded: a merge result 8.2 is preserved before 7.
    assert select_minor(loads("0.2", "4", "5", "6", "7"), (4, 3), preserve=1) == []
    assert select_minor(loads("4", "5", "6", "7", "8.2"), (4, 3), preserve=1) == ["4", "5", "6", "7"]


def test_minor_preserve_counts_segments_minor_then_skips() -> None:
    # CarbonData preserves first, then skips level-2 and major results: 12.2 uses up preserve=1.
    entries = loads("0", "1", "2", "12.2")
    assert select_minor(entries, (3, 3), preserve=1) == ["0", "1", "2"]


@pytest.mark.parametrize("preserve", [-1, True, 1.5])
def test_minor_refuses_a_bad_preserve(preserve: int) -> None:
    with pytest.raises(InvalidOptionError, match="preserve"):
        select_minor(loads("0", "1"), (2, 2), preserve=preserve)


def test_a_zero_threshold_disables_its_level() -> None:
    assert select_minor(loads("0", "1", "2", "3", "4"), (0, 3)) == []
    assert select_minor(loads("0.1", "4.1", "8.1", "12.1"), (4, 0)) == []
    assert select_minor(loads("0.1", "4.1", "8", "9"), (0, 2)) == ["0.1", "4.1"]
    assert select_minor(loads("0.1", "4.1", "8", "9"), (2, 0)) == ["8", "9"]


def test_a_threshold_below_two_disables_its_level() -> None:
    # Merging one segment is not a compaction. CarbonData maps L2 = 1 to 0 itself; for L1 = 1 it
    # returns one segment that its caller ignores. We skip level 1, so level 2 still works.
    assert select_minor(loads("0", "1", "2"), (1, 3)) == []
    assert select_minor(loads("0", "0.1", "4.1", "8.1"), (1, 3)) == ["0.1", "4.1", "8.1"]
    assert select_minor(loads("0.1", "4.1", "8.1"), (4, 1)) == []
    assert select_minor(loads("0", "1"), (-3, -3)) == []


def test_minor_size_limit_skips_large_segments_when_set() -> None:
    entries = [seg("0", data_size=10), seg("1", data_size=100), seg("2", data_size=99), seg("3", data_size=5)]
    assert select_minor(entries, (3, 3)) == ["0", "1", "2"]
    assert select_minor(entries, (3, 3), max_segment_bytes=100) == ["0", "2", "3"]
    assert select_minor(entries, (3, 3), max_segment_bytes=99) == []
    assert select_minor(entries, (3, 3), max_segment_bytes=0) == ["0", "1", "2"]


def test_minor_takes_any_iterable_once() -> None:
    assert select_minor(iter(loads("0", "1")), (2, 2)) == ["0", "1"]


# --- select_minor: property -----------------------------------------------------------------------


@st.composite
def segment_tables(draw: st.DrawFn) -> list[SegmentEntry]:
    """Loads and merge results of levels 0..3, mostly valid native segments so selections happen."""
    # The size is drawn on its own so that large tables are as common as small ones.
    count = draw(st.integers(0, 40))
    numbers = draw(st.permutations(range(60)))[:count]
    entries = []
    for load in numbers:
        level = draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))
        entries.append(
            seg(
                f"{load}.{level}" if level else str(load),
                draw(st.sampled_from((SegmentStatus.SUCCESS,) * len(ALL_STATUSES) + ALL_STATUSES)),
                format=draw(st.sampled_from(["parquet"] * 9 + ["csv"])),
                external=draw(st.sampled_from([False] * 9 + [True])),
                data_size=draw(st.integers(0, 100)),
            )
        )
    return entries


@given(
    entries=segment_tables(),
    threshold=st.tuples(st.integers(0, 5), st.integers(0, 5)),
    preserve=st.integers(0, 3),
    data=st.data(),
)
def test_minor_result_is_a_contiguous_same_level_run_of_exactly_the_threshold(
    entries: list[SegmentEntry],
    threshold: tuple[int, int],
    preserve: int,
    data: st.DataObject,
) -> None:
    major = data.draw(st.sets(st.sampled_from([e.id for e in entries])) if entries else st.just(set()))
    result = select_minor(entries, threshold, preserve=preserve, major_results=major)
    event("selected" if result else "nothing selected")
    if not result:
        return
    by_id = {e.id: e for e in entries}
    assert len(set(result)) == len(result)
    assert all(by_id[i].status == SegmentStatus.SUCCESS for i in result)
    assert all(not by_id[i].external and by_id[i].format == "parquet" for i in result)
    assert not set(result) & major
    levels = {0 if "." not in i else int(i.split(".")[1]) for i in result}
    assert len(levels) == 1
    (level,) = levels
    assert level in (0, 1)
    assert len(result) == threshold[level] >= 2
    # Contiguous in sorted candidate order: the candidates of that level, less the preserved.
    valid = sorted(
        (e.id for e in entries
         if e.status == SegmentStatus.SUCCESS and not e.external and e.format == "parquet"),
        key=segment_sort_key,
    )
    kept = valid[: len(valid) - preserve]
    candidates = [
        i for i in kept if (0 if "." not in i else int(i.split(".")[1])) == level and i not in major
    ]
    assert result == sorted(result, key=segment_sort_key)
    start = candidates.index(result[0])
    assert candidates[start : start + len(result)] == result
    assert start == 0, "the first list to fill is returned as soon as it fills"
    assert merged_name(result) == f"{result[0].split('.')[0]}.{level + 1}"


# --- select_major ---------------------------------------------------------------------------------


def test_major_collects_while_the_total_stays_below_the_limit() -> None:
    assert select_major(sized(3, 3, 3, 3), 10) == ["0", "1", "2"]
    assert select_major(sized(1, 1, 1, 1, 1), 10) == ["0", "1", "2", "3", "4"]


def test_major_stops_when_the_total_would_reach_the_limit() -> None:
    # 3 + 3 + 4 = 10 is not below 10: the group 0, 1 is done.
    assert select_major(sized(3, 3, 4, 1), 10) == ["0", "1"]


def test_major_restarts_with_the_current_segment_when_only_one_was_collected() -> None:
    # 5 + 5 reaches the limit with one collected: start again from segment 1 (5), then 1 + 2.
    assert select_major(sized(5, 5, 4), 10) == ["1", "2"]
    assert select_major(sized(5, 5), 10) == []


def test_major_a_segment_larger_than_the_limit_restarts_after_it() -> None:
    assert select_major(sized(3, 20, 3, 3), 10) == ["2", "3"]
    assert select_major(sized(20, 3, 3), 10) == ["1", "2"]
    assert select_major(sized(3, 20, 3), 10) == []


def test_major_a_segment_larger_than_the_limit_ends_a_group_of_two() -> None:
    assert select_major(sized(3, 3, 20, 1, 1, 1), 10) == ["0", "1"]


def test_major_a_segment_exactly_at_the_limit_is_not_larger_but_reaches_it() -> None:
    # 10 is not > 10, but the total 10 is not < 10: a group of its own, replaced by the next.
    assert select_major(sized(10, 3, 3), 10) == ["1", "2"]
    assert select_major(sized(3, 3, 10), 10) == ["0", "1"]
    assert select_major(sized(10, 10, 10), 10) == []


def test_major_needs_two_segments() -> None:
    assert select_major([], 10) == []
    assert select_major(sized(3), 10) == []
    assert select_major(sized(11, 11, 11), 10) == []


def test_major_counts_unknown_sizes_as_zero() -> None:
    assert select_major(sized(0, 0, 0), 1) == ["0", "1", "2"]


def test_major_scans_in_numeric_order_over_any_level() -> None:
    entries = [
        seg("10", data_size=1),
        seg("0.2", data_size=1),
        seg("9", data_size=1),
        seg("4.1", data_size=1),
    ]
    assert select_major(entries, 100) == ["0.2", "4.1", "9", "10"]


def test_major_takes_only_valid_native_segments_and_skips_without_breaking_the_group() -> None:
    entries = [
        seg("0", data_size=2),
        seg("1", SegmentStatus.STREAMING, data_size=2),
        seg("2", SegmentStatus.STREAMING_FINISH, data_size=2),
        seg("3", SegmentStatus.MARKED_FOR_DELETE, data_size=2),
        seg("4", SegmentStatus.COMPACTED, data_size=2),
        seg("5", SegmentStatus.INSERT_IN_PROGRESS, data_size=2),
        seg("6", external=True, data_size=2),
        seg("7", format="orc", data_size=2),
        seg("8", data_size=2),
    ]
    assert select_major(entries, 100) == ["0", "8"]


def test_major_preserve_keeps_the_latest_out() -> None:
    assert select_major(sized(1, 1, 1, 1), 100, preserve=2) == ["0", "1"]
    assert select_major(sized(1, 1, 1, 1), 100, preserve=3) == []


@pytest.mark.parametrize("limit", [0, -1, True])
def test_major_refuses_a_limit_that_can_never_be_met(limit: int) -> None:
    with pytest.raises(InvalidOptionError, match="positive number of bytes"):
        select_major(sized(1, 1), limit)


@given(sizes=st.lists(st.integers(0, 50), max_size=20), limit=st.integers(1, 60))
def test_major_result_is_a_contiguous_run_below_the_limit(sizes: list[int], limit: int) -> None:
    result = select_major(sized(*sizes), limit)
    if not result:
        return
    positions = [int(i) for i in result]
    assert len(positions) >= 2
    assert positions == list(range(positions[0], positions[0] + len(positions)))
    assert sum(sizes[p] for p in positions) < limit


# --- check_custom ---------------------------------------------------------------------------------


def test_custom_returns_the_ids_sorted_numerically_without_duplicates() -> None:
    entries = table(*loads("0.1", "2", "9", "10", "11"))
    assert check_custom(entries, ["10", "2", "9", "10", "0.1"]) == ["0.1", "2", "9", "10"]
    assert check_custom(entries, [10, "9", 9]) == ["9", "10"]


def test_custom_allows_one_segment_a_re_sort() -> None:
    assert check_custom(table(*loads("0", "1")), ["1"]) == ["1"]


def test_custom_ignores_level_preserve_and_major_rules() -> None:
    entries = table(*loads("0.2", "12.1", "16"))
    assert check_custom(entries, ["0.2", "12.1", "16"]) == ["0.2", "12.1", "16"]


def test_custom_refuses_an_empty_list() -> None:
    with pytest.raises(InvalidOptionError, match="segments must not be empty for custom compaction"):
        check_custom(table(*loads("0")), [])


def test_custom_unknown_ids_are_named_with_what_exists() -> None:
    entries = table(*loads("0", "1"), seg("2", SegmentStatus.MARKED_FOR_DELETE))
    with pytest.raises(SegmentNotFoundError) as caught:
        check_custom(entries, ["1", "7", "30", "abc"])
    message = str(caught.value)
    assert "no segments 7, 30, 'abc'" in message
    assert "its segments are 0, 1, 2" in message


def test_custom_lists_many_existing_segments_briefly() -> None:
    entries = table(*loads(*map(str, range(20))))
    with pytest.raises(SegmentNotFoundError) as caught:
        check_custom(entries, ["99"])
    message = str(caught.value)
    assert "no segment 99 " in message
    assert "0, 1, 2, 3, ..., 17, 18, 19 (20 in all)" in message


def test_custom_refuses_segments_that_are_not_success_naming_each_status() -> None:
    entries = table(
        seg("0", SegmentStatus.COMPACTED, merged_to="0.1"),
        seg("0.1"),
        seg("1", SegmentStatus.MARKED_FOR_DELETE),
        seg("2", SegmentStatus.STREAMING),
        seg("3", SegmentStatus.STREAMING_FINISH),
        seg("4", SegmentStatus.INSERT_IN_PROGRESS),
    )
    with pytest.raises(InvalidOptionError) as caught:
        check_custom(entries, ["4", "3", "2", "1", "0", "0.1"])
    message = str(caught.value)
    for part in (
        "0 (Compacted into 0.1)",
        "1 (Marked for Delete)",
        "2 (Streaming)",
        "3 (Streaming Finish)",
        "4 (Insert In Progress)",
        "only Success segments",
    ):
        assert part in message
    assert "0.1 (" not in message


def test_custom_takes_external_segments() -> None:
    """CarbonData refuses them; here CUSTOM is how external rows become a native segment. MINOR
    and MAJOR still never choose them."""
    entries = table(seg("0"), seg("1", format="csv", external=True, path="/in"), seg("2", external=True))
    assert check_custom(entries, ["0", "1", "2"]) == ["0", "1", "2"]
    with pytest.raises(InvalidOptionError, match="1 \\(Compacted"):
        check_custom(table(seg("1", SegmentStatus.COMPACTED, format="csv", external=True)), ["1"])


def test_custom_unknown_ids_are_reported_before_invalid_ones() -> None:
    entries = table(seg("0", SegmentStatus.MARKED_FOR_DELETE))
    with pytest.raises(SegmentNotFoundError, match="no segment 5"):
        check_custom(entries, ["0", "5"])


@pytest.mark.parametrize("ids", ["0,1", [0.1], [None], [True]])
def test_custom_refuses_ids_of_the_wrong_type(ids: list[str]) -> None:
    with pytest.raises(InvalidOptionError):
        check_custom(table(*loads("0", "1")), ids)


# --- select_delete_by_id --------------------------------------------------------------------------


def _statuses() -> dict[str, SegmentEntry]:
    return table(
        seg("0", SegmentStatus.COMPACTED, merged_to="0.1"),
        seg("1", SegmentStatus.COMPACTED, merged_to="0.1"),
        seg("0.1"),
        seg("2", SegmentStatus.MARKED_FOR_DELETE),
        seg("3", SegmentStatus.STREAMING),
        seg("4", SegmentStatus.STREAMING_FINISH),
        seg("5", SegmentStatus.INSERT_IN_PROGRESS),  # stale: its load died
        seg("6", SegmentStatus.INSERT_IN_PROGRESS),  # live
        seg("7", format="csv", external=True, path="/in/7"),
        seg("8"),
        seg("10"),
    )


def test_delete_by_id_takes_success_streaming_finish_stale_loads_and_external_segments() -> None:
    ids = ["10", "8", "7", "5", "4", "0.1"]
    assert select_delete_by_id(_statuses(), ids, live_in_progress={"6"}) == ["0.1", "4", "5", "7", "8", "10"]


def test_delete_by_id_accepts_ints_and_collapses_duplicates() -> None:
    assert select_delete_by_id(_statuses(), [10, "8", 8, "10", " 4 "]) == ["4", "8", "10"]


def test_delete_by_id_unknown_id_is_not_found() -> None:
    with pytest.raises(SegmentNotFoundError) as caught:
        select_delete_by_id(_statuses(), ["8", "99"])
    assert "99: no such segment" in str(caught.value)
    assert "nothing was deleted" in str(caught.value)


def test_delete_by_id_already_deleted_is_not_found() -> None:
    with pytest.raises(SegmentNotFoundError, match="2: already Marked for Delete"):
        select_delete_by_id(_statuses(), [2])


@pytest.mark.parametrize(
    ("segment_id", "reason"),
    [
        ("0", "0: Compacted (its rows now live in 0.1)"),
        ("3", "3: Streaming, still being written"),
        ("6", "6: Insert In Progress, a load is still writing it"),
    ],
)
def test_delete_by_id_refuses_compacted_streaming_and_live_loads(segment_id: str, reason: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        select_delete_by_id(_statuses(), [segment_id, "8"], live_in_progress=["6"])
    assert not isinstance(caught.value, SegmentNotFoundError)
    assert reason in str(caught.value)


def test_delete_by_id_is_all_or_nothing_and_lists_every_bad_id() -> None:
    with pytest.raises(InvalidOptionError) as caught:
        select_delete_by_id(_statuses(), ["8", "6", "3", "1", "0", "4"], live_in_progress={"6"})
    message = str(caught.value)
    assert "Invalid segment ids: 0: Compacted" in message
    for bad in ("0: ", "1: ", "3: ", "6: "):
        assert bad in message
    assert "8: " not in message and "4: " not in message


def test_delete_by_id_mixed_unknown_and_invalid_is_not_found_listing_both() -> None:
    with pytest.raises(SegmentNotFoundError) as caught:
        select_delete_by_id(_statuses(), ["0", "99", "2"])
    message = str(caught.value)
    assert "0: Compacted" in message and "2: already Marked for Delete" in message
    assert "99: no such segment" in message
    assert message.index("0: ") < message.index("2: ") < message.index("99: "), "numeric order"


def test_delete_by_id_refuses_an_empty_list() -> None:
    with pytest.raises(InvalidOptionError, match="must not be empty"):
        select_delete_by_id(_statuses(), [])


@pytest.mark.parametrize("bad", [0.1, None, True, b"3", ("3",)])
def test_delete_by_id_refuses_ids_that_are_not_str_or_int(bad: object) -> None:
    with pytest.raises(InvalidOptionError, match=r"expected a str such as '3' or '0\.1', or an int"):
        select_delete_by_id(_statuses(), ["8", bad])  # type: ignore[list-item]


def test_delete_by_id_refuses_a_bare_string() -> None:
    with pytest.raises(InvalidOptionError, match=r"pass \['10'\] for one id"):
        select_delete_by_id(_statuses(), "10")


def test_delete_by_id_quotes_ids_that_are_not_ids() -> None:
    with pytest.raises(SegmentNotFoundError, match="'x': no such segment"):
        select_delete_by_id(_statuses(), ["x"])


def test_delete_by_id_takes_in_progress_as_stale_unless_told_it_is_live() -> None:
    # Without the live set every in-progress entry is taken for stale (CarbonData: lock acquirable).
    assert select_delete_by_id(_statuses(), ["5", "6"]) == ["5", "6"]


# --- select_delete_before -------------------------------------------------------------------------


def _timed(entries: Iterable[tuple[str, str, int]]) -> list[SegmentEntry]:
    return [seg(i, status, load_start_ms=ms) for i, status, ms in entries]


def test_delete_before_marks_success_and_streaming_finish_loaded_strictly_before() -> None:
    entries = _timed([
        ("10", SegmentStatus.SUCCESS, 100),
        ("2", SegmentStatus.SUCCESS, 200),
        ("3", SegmentStatus.STREAMING_FINISH, 300),
        ("4", SegmentStatus.SUCCESS, 400),  # at the boundary: not before it
        ("5", SegmentStatus.SUCCESS, 500),
    ])
    assert select_delete_before(entries, 400) == ["2", "3", "10"]


def test_delete_before_skips_compacted_streaming_in_progress_and_deleted() -> None:
    entries = _timed([
        ("0", SegmentStatus.COMPACTED, 1),
        ("1", SegmentStatus.STREAMING, 1),
        ("2", SegmentStatus.INSERT_IN_PROGRESS, 1),
        ("3", SegmentStatus.MARKED_FOR_DELETE, 1),
        ("4", SegmentStatus.SUCCESS, 1),
    ])
    assert select_delete_before(entries, 1_000) == ["4"]


def test_delete_before_judges_a_merge_result_by_its_own_start_time() -> None:
    entries = _timed([("0", SegmentStatus.COMPACTED, 10), ("1", SegmentStatus.COMPACTED, 20),
                      ("0.1", SegmentStatus.SUCCESS, 900)])
    assert select_delete_before(entries, 500) == []
    assert select_delete_before(entries, 901) == ["0.1"]


def test_delete_before_includes_external_segments_and_may_be_empty() -> None:
    entries = [seg("0", external=True, format="csv", load_start_ms=5)]
    assert select_delete_before(entries, 6) == ["0"]
    assert select_delete_before(entries, 5) == []
    assert select_delete_before([], 10**15) == []


# --- purity ---------------------------------------------------------------------------------------


def test_selection_does_not_change_its_inputs() -> None:
    entries = _statuses()
    before: Mapping[str, SegmentEntry] = dict(entries)
    select_minor(entries.values(), (2, 2))
    select_major(entries.values(), 10)
    check_custom(entries, ["8", "10"])
    select_delete_by_id(entries, ["8"])
    select_delete_before(entries.values(), 10)
    assert entries == before
