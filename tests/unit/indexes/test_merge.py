"""The merge rules of the metadata table's partitions.

``files`` and ``column_stats`` are two-phase sets keyed by path; ``segments`` records join over
the status lattice. Both merges must be commutative, associative and idempotent, so compaction
may fold log blocks in any grouping and a resolve may extend an earlier result: the answer never
depends on how the records were grouped into blocks or in which order the blocks are read.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pytest
from hypothesis import given
from hypothesis import strategies as st

import metatxn.indexes._records as records_module
from metatxn import indexes
from metatxn.indexes import (
    FILES_SCHEMA,
    SEGMENTS_SCHEMA,
    STATUS_RANK,
    SegmentEntry,
    SegmentStatus,
    column_stats_schema,
    extend_two_phase,
    merge_segment,
    merge_two_phase,
    purges,
    tombstones,
)
from metatxn.indexes._blocks import read_block
from metatxn.indexes._segments import segments_from_arrow, segments_to_arrow
from metatxn.timeline import MemoryStorage

KEYS = [f"seg/part-{k}.parquet" for k in "abcdefgh"]
STATS_SCHEMA = column_stats_schema(pa.schema([("id", pa.int64()), ("name", pa.string())]))


def _add(schema: pa.Schema, key: str) -> dict[str, Any]:
    """The one record that adds ``key``: a file is added once, by the instant that wrote it."""
    n = KEYS.index(key)
    if schema is FILES_SCHEMA:
        return {"path": key, "segment": str(n % 3), "partition": "", "format": "parquet",
                "rows": n + 1, "size": 100 * (n + 1), "instant": f"2026010100000{n:04d}",
                "deleted": False, "modified_ms": None, "version": None, "schema_id": None}
    return {"path": key, "deleted": False,
            "columns": {"1": {"min": n, "max": n + 10, "nulls": 0, "count": n + 1},
                        "2": {"min": None, "max": None, "nulls": n + 1, "count": n + 1}}}


def _records_table(schema: pa.Schema, records: list[tuple[str, bool]]) -> pa.Table:
    adds = [_add(schema, key) for key, is_add in records if is_add]
    removed = [key for key, is_add in records if not is_add]
    return pa.concat_tables([pa.Table.from_pylist(adds, schema=schema),
                             tombstones(schema, removed)])


def _merge(schema: pa.Schema, tables: list[pa.Table]) -> list[dict[str, Any]]:
    return merge_two_phase(tables, schema).to_pylist()


schemas = st.sampled_from([FILES_SCHEMA, STATS_SCHEMA])
record_sets = st.lists(st.tuples(st.sampled_from(KEYS), st.booleans()), max_size=24)


@st.composite
def blocks(draw: st.DrawFn) -> tuple[pa.Schema, list[pa.Table]]:
    """A schema and a random partition of a random record set into 1..5 blocks."""
    schema = draw(schemas)
    records = draw(record_sets)
    count = draw(st.integers(1, 5))
    owner = draw(st.lists(st.integers(0, count - 1), min_size=len(records), max_size=len(records)))
    grouped = [[r for r, o in zip(records, owner, strict=True) if o == b] for b in range(count)]
    return schema, [_records_table(schema, g) for g in grouped]


def _expected(schema: pa.Schema, tables: list[pa.Table]) -> list[dict[str, Any]]:
    """The set semantics: present if any record names the key, deleted if any removes it, and
    the adding record's fields whenever an add exists."""
    added: set[str] = set()
    deleted: set[str] = set()
    for table in tables:
        for row in table.to_pylist():
            (deleted if row["deleted"] else added).add(row["path"])
    result = []
    for key in sorted(added | deleted):
        row = _add(schema, key) if key in added else tombstones(schema, [key]).to_pylist()[0]
        result.append({**row, "deleted": key in deleted})
    return result


@given(blocks())
def test_two_phase_merge_has_set_semantics(case: tuple[pa.Schema, list[pa.Table]]) -> None:
    schema, tables = case
    assert _merge(schema, tables) == _expected(schema, tables)


@given(blocks(), st.randoms(use_true_random=False))
def test_two_phase_merge_is_commutative(case: tuple[pa.Schema, list[pa.Table]], rnd: Any) -> None:
    schema, tables = case
    shuffled = list(tables)
    rnd.shuffle(shuffled)
    assert _merge(schema, shuffled) == _merge(schema, tables)


@given(blocks(), st.data())
def test_two_phase_merge_is_associative(case: tuple[pa.Schema, list[pa.Table]], data: st.DataObject) -> None:
    """Folding groups of blocks first (what compaction and incremental resolves do), in any
    order, gives the same result as merging every block at once."""
    schema, tables = case
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(tables) - 1)), max_size=3)))
    groups = [tables[a:b] for a, b in zip([0, *cuts], [*cuts, len(tables)], strict=True)]
    folded = [merge_two_phase(g, schema) for g in groups if g]
    order = data.draw(st.permutations(folded))
    assert _merge(schema, list(order)) == _merge(schema, tables)


@given(blocks(), st.data())
def test_two_phase_merge_is_idempotent(case: tuple[pa.Schema, list[pa.Table]], data: st.DataObject) -> None:
    """Merging a block twice, or merging an already-merged result with blocks it already
    contains (before or after it), changes nothing."""
    schema, tables = case
    once = merge_two_phase(tables, schema)
    assert _merge(schema, tables + tables) == once.to_pylist()
    assert _merge(schema, [once]) == once.to_pylist()
    again = data.draw(st.lists(st.sampled_from(tables), max_size=3))
    assert _merge(schema, [*again, once]) == once.to_pylist()
    assert _merge(schema, [once, *again]) == once.to_pylist()


@given(blocks(), st.data())
def test_extending_a_merged_table_equals_merging_everything(
    case: tuple[pa.Schema, list[pa.Table]], data: st.DataObject
) -> None:
    """A reader extends a cached (or base) merge with newer blocks instead of re-merging all:
    the rows must be exactly those of the full merge, only their order may differ."""
    schema, tables = case
    cut = data.draw(st.integers(0, len(tables)))
    earlier = merge_two_phase(tables[:cut], schema)
    extended = extend_two_phase(earlier, tables[cut:], schema)
    assert extended.schema.equals(schema)
    key = lambda row: row["path"]  # noqa: E731 - a local sort key
    assert sorted(extended.to_pylist(), key=key) == sorted(_merge(schema, tables), key=key)


@given(blocks())
def test_extending_block_by_block_equals_merging_everything(
    case: tuple[pa.Schema, list[pa.Table]]
) -> None:
    """What a long-lived handle does: one extension per commit, each on the last one's result,
    whose rows are kept as slices (chunks) until there are too many (2 here, to merge often)."""
    schema, tables = case
    extended = schema.empty_table()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records_module, "_MAX_CHUNKS", 2)
        for table in tables:
            extended = extend_two_phase(extended, [table], schema)
            assert extended["path"].num_chunks <= 2
    assert extended.schema.equals(schema)
    key = lambda row: row["path"]  # noqa: E731 - a local sort key
    assert sorted(extended.to_pylist(), key=key) == sorted(_merge(schema, tables), key=key)


def test_an_extension_copies_none_of_the_rows_it_keeps() -> None:
    """A commit that only adds files extends the files partition without copying the rows of
    the removed files it keeps (they are most of it on a long-lived table)."""
    earlier = merge_two_phase([_records_table(FILES_SCHEMA, [(KEYS[1], True), (KEYS[3], True)])],
                              FILES_SCHEMA)
    held = earlier["path"].chunk(0).buffers()[2].address  # the string data
    added = _records_table(FILES_SCHEMA, [(KEYS[5], True)])
    extended = extend_two_phase(earlier, [added], FILES_SCHEMA)
    assert extended["path"].chunk(0).buffers()[2].address == held
    removing = _records_table(FILES_SCHEMA, [(KEYS[3], False)])
    again = extend_two_phase(extended, [removing], FILES_SCHEMA)
    assert again["path"].chunk(0).buffers()[2].address == held
    assert again.filter(pc.equal(again["path"], KEYS[3]))["deleted"].to_pylist() == [True]
    assert sorted(again.to_pylist(), key=lambda row: row["path"]) == \
        merge_two_phase([earlier, added, removing], FILES_SCHEMA).to_pylist()


def test_an_extension_touching_many_rows_copies_once_instead_of_slicing() -> None:
    """A clean's purge touches many scattered rows: that branch copies once instead of keeping
    a slice per gap (slower there, found by review), with the same rows."""
    paths = [f"seg/part-{i:05d}.parquet" for i in range(1_000)]
    adds = pa.Table.from_pylist(
        [{"path": p, "segment": "0", "partition": "", "format": "parquet", "rows": 1, "size": 10,
          "instant": "20260101000000000", "deleted": False, "modified_ms": None} for p in paths],
        schema=FILES_SCHEMA)
    earlier = merge_two_phase([adds], FILES_SCHEMA)
    gone = paths[::3]
    extended = extend_two_phase(earlier, [purges(FILES_SCHEMA, gone)], FILES_SCHEMA)
    assert extended["path"].num_chunks <= 2
    assert sorted(extended.to_pylist(), key=lambda row: row["path"]) == \
        merge_two_phase([earlier, purges(FILES_SCHEMA, gone)], FILES_SCHEMA).to_pylist()


def test_a_merged_result_is_sorted_by_path_and_keeps_the_schema() -> None:
    table = _records_table(FILES_SCHEMA, [(KEYS[3], True), (KEYS[1], True), (KEYS[3], False)])
    merged = merge_two_phase([table], FILES_SCHEMA)
    assert merged.schema.equals(FILES_SCHEMA)
    assert merged["path"].to_pylist() == [KEYS[1], KEYS[3]]
    assert merged["deleted"].to_pylist() == [False, True]
    assert merged["rows"].to_pylist() == [2, 4], "a removed file keeps the fields it was added with"
    assert indexes.live(merged)["path"].to_pylist() == [KEYS[1]]


def test_merging_nothing_gives_an_empty_table_of_the_schema() -> None:
    assert merge_two_phase([], FILES_SCHEMA).equals(FILES_SCHEMA.empty_table())
    assert merge_two_phase([FILES_SCHEMA.empty_table()], FILES_SCHEMA).num_rows == 0


# -- segments ---------------------------------------------------------------------------------------


@st.composite
def lifecycles(draw: st.DrawFn) -> list[SegmentEntry]:
    """The records one segment's life can produce, in any subset (they may sit in any blocks).

    A load is Success, then possibly Compacted and/or Marked for Delete; a streaming segment is
    Streaming, then Streaming Finish, then possibly Compacted and/or Marked for Delete.
    """
    segment = draw(st.sampled_from(["0", "1", "7", "12"]))
    start = draw(st.integers(1, 10_000))
    end = start + draw(st.integers(0, 5_000))
    created = SegmentEntry(
        id=segment, status=draw(st.sampled_from([SegmentStatus.SUCCESS, SegmentStatus.STREAMING])),
        format=draw(st.sampled_from(["parquet", "orc"])),
        partitions=tuple(sorted(draw(st.sets(st.sampled_from(["d=1", "d=2", "d=3"]))))),
        rows=draw(st.integers(0, 1_000)), data_size=draw(st.integers(0, 10**6)),
        index_size=draw(st.integers(0, 10**4)), load_start_ms=start, load_end_ms=end,
        instant=f"2026010100{start:07d}",
    )
    records = [created]
    if draw(st.booleans()):
        records.append(SegmentEntry(id=segment, status=SegmentStatus.INSERT_IN_PROGRESS, load_start_ms=start,
                                    instant=created.instant))
    if created.status == SegmentStatus.STREAMING and draw(st.booleans()):
        records.append(SegmentEntry(id=segment, status=SegmentStatus.STREAMING_FINISH,
                                    load_end_ms=end + draw(st.integers(0, 100))))
    if draw(st.booleans()):
        records.append(SegmentEntry(id=segment, status=SegmentStatus.COMPACTED, merged_to=f"{segment}.1",
                                    load_end_ms=end))
    if draw(st.booleans()):
        records.append(SegmentEntry(id=segment, status=SegmentStatus.MARKED_FOR_DELETE, load_end_ms=end))
    final = (SegmentStatus.COMPACTED, SegmentStatus.MARKED_FOR_DELETE)
    if records[-1].status in final and draw(st.booleans()):
        # CLEAN FILES records a copy of the whole entry with the clean instant set.
        records.append(msgspec.structs.replace(_join(records), cleaned="20260201000000000"))
    return draw(st.permutations(records))


def _join(entries: list[SegmentEntry]) -> SegmentEntry:
    return functools.reduce(merge_segment, entries)


@given(lifecycles())
def test_segment_merge_is_commutative(records: list[SegmentEntry]) -> None:
    for a in records:
        for b in records:
            assert merge_segment(a, b) == merge_segment(b, a)


@given(lifecycles(), st.data())
def test_segment_merge_is_associative_and_order_free(records: list[SegmentEntry],
                                                     data: st.DataObject) -> None:
    for a in records:
        for b in records:
            for c in records:
                assert merge_segment(merge_segment(a, b), c) == merge_segment(a, merge_segment(b, c))
    shuffled = data.draw(st.permutations(records))
    cut = data.draw(st.integers(0, len(records)))
    left, right = shuffled[:cut], shuffled[cut:]
    grouped = [_join(g) for g in (left, right) if g]
    assert _join(grouped) == _join(records)


@given(lifecycles())
def test_segment_merge_is_idempotent(records: list[SegmentEntry]) -> None:
    whole = _join(records)
    assert merge_segment(whole, whole) == whole
    for record in records:
        assert merge_segment(record, record) == record
        assert merge_segment(whole, record) == whole == merge_segment(record, whole)


@given(lifecycles())
def test_the_joined_segment_has_the_furthest_status_and_keeps_the_loads_facts(
    records: list[SegmentEntry],
) -> None:
    """A later status record never erases what the load recorded."""
    whole = _join(records)
    created = next(r for r in records if r.status in (SegmentStatus.SUCCESS, SegmentStatus.STREAMING))
    assert STATUS_RANK[whole.status] == max(STATUS_RANK[r.status] for r in records)
    assert whole.status in {r.status for r in records}
    assert (whole.rows, whole.data_size, whole.index_size, whole.partitions) == (
        created.rows, created.data_size, created.index_size, created.partitions)
    assert (whole.load_start_ms, whole.instant) == (created.load_start_ms, created.instant)
    assert whole.load_end_ms == max(r.load_end_ms for r in records)
    compacted = [r for r in records if r.status == SegmentStatus.COMPACTED]
    assert whole.merged_to == (compacted[0].merged_to if compacted else None)


@given(lifecycles())
def test_a_cleaned_segment_stays_cleaned_whatever_it_is_joined_with(records: list[SegmentEntry]) -> None:
    whole = _join(records)
    cleaned = [r.cleaned for r in records if r.cleaned]
    assert whole.cleaned == (cleaned[0] if cleaned else None)
    assert whole.visible == (not cleaned)
    assert segments_from_arrow(segments_to_arrow([whole])) == [whole]


def test_a_segments_block_written_before_segment_history_reads_every_segment_visible() -> None:
    """Blocks and bases of tables written before the ``cleaned`` column lack it: read as null."""
    entries = [SegmentEntry(id="0", status=SegmentStatus.COMPACTED, merged_to="0.1", rows=3),
               SegmentEntry(id="0.1", status=SegmentStatus.SUCCESS, rows=3)]
    old_schema = pa.schema([f for f in SEGMENTS_SCHEMA if f.name != "cleaned"])
    old = segments_to_arrow(entries).drop_columns(["cleaned"]).cast(old_schema)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, old_schema) as writer:
        writer.write_table(old)
    storage = MemoryStorage("/metatxn-old-segments-block")
    storage.put_if_absent("segments/1.log.arrow", bytes(sink.getvalue()))
    read = read_block(storage, "segments/1.log.arrow", SEGMENTS_SCHEMA)
    assert read.schema.equals(SEGMENTS_SCHEMA)
    assert segments_from_arrow(read) == entries
    assert all(e.visible and e.cleaned is None for e in segments_from_arrow(read))


@pytest.mark.parametrize(("low", "high"), [
    (SegmentStatus.INSERT_IN_PROGRESS, SegmentStatus.SUCCESS),
    (SegmentStatus.SUCCESS, SegmentStatus.COMPACTED),
    (SegmentStatus.SUCCESS, SegmentStatus.MARKED_FOR_DELETE),
    (SegmentStatus.STREAMING, SegmentStatus.STREAMING_FINISH),
    (SegmentStatus.STREAMING_FINISH, SegmentStatus.COMPACTED),
    (SegmentStatus.COMPACTED, SegmentStatus.MARKED_FOR_DELETE),
])
def test_statuses_only_move_forward(low: str, high: str) -> None:
    a = SegmentEntry(id="3", status=low, rows=5)
    b = SegmentEntry(id="3", status=high)
    assert merge_segment(a, b).status == merge_segment(b, a).status == high
    assert merge_segment(a, b).rows == 5


def test_segment_ids_order_numerically_with_compaction_levels() -> None:
    ids = ["10", "2", "0.1", "0", "1", "0.2", "1.1"]
    assert sorted(ids, key=indexes.segment_sort_key) == ["0", "0.1", "0.2", "1", "1.1", "2", "10"]


def test_the_copying_branch_keeps_the_chunk_bound_too() -> None:
    """Found by the ``dev`` profile: an extension touching more than ``_MAX_CHUNKS`` rows copies
    instead of slicing, but a filter keeps the chunks of what it filters, so a table already at
    the bound came back with one chunk more (4 with the bound patched to 2)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(records_module, "_MAX_CHUNKS", 2)
        chunked = pa.concat_tables([
            _records_table(FILES_SCHEMA, [(k, True) for k in KEYS[:3]]).combine_chunks(),
            _records_table(FILES_SCHEMA, [(k, True) for k in KEYS[3:6]]).combine_chunks(),
        ])
        assert chunked["path"].num_chunks == 2
        touching = _records_table(FILES_SCHEMA, [(KEYS[0], False), (KEYS[1], False), (KEYS[3], False)])
        extended = extend_two_phase(chunked, [touching], FILES_SCHEMA)
        assert extended["path"].num_chunks <= 2
    assert sorted(extended.to_pylist(), key=lambda row: row["path"]) == \
        merge_two_phase([chunked, touching], FILES_SCHEMA).to_pylist()
