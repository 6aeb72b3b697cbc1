"""Purge records of the two-phase-set partitions (``files``, ``column_stats``, ``deletes``).

CLEAN FILES purges a removed file once it left the table: a record whose ``deleted`` is null. A
key with any purge record merges to the bare purge record, so the merge stays commutative,
associative and idempotent; a purged key is neither live nor removed; a compaction may leave
bare purge records out of its base.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given
from hypothesis import strategies as st

import txn
from metatxn.indexes import (
    DELETES_SCHEMA,
    FILES,
    FILES_SCHEMA,
    MetadataOptions,
    MetadataTable,
    column_stats_schema,
    extend_two_phase,
    live,
    merge_two_phase,
)
from metatxn.indexes._records import purges, removed, tombstones, without_purged
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, rows, storage_of

KEYS = [f"seg/part-{k}.parquet" for k in "abcdef"]
STATS_SCHEMA = column_stats_schema(pa.schema([("id", pa.int64())]))
ADD, REMOVE, PURGE = "add", "remove", "purge"


def _add(schema: pa.Schema, key: str) -> dict[str, Any]:
    n = KEYS.index(key)
    if schema is FILES_SCHEMA:
        return {"path": key, "segment": str(n), "partition": "", "format": "parquet", "rows": n + 1,
                "size": 10 * (n + 1), "instant": f"2026010100000{n:04d}", "deleted": False,
                "modified_ms": None, "version": None, "schema_id": None}
    if schema is DELETES_SCHEMA:
        return {"path": key, "file": f"data-{n}", "rows": n, "size": n * 7,
                "instant": f"2026010100000{n:04d}", "deleted": False}
    return {"path": key, "deleted": False, "columns": {"1": {"min": n, "max": n, "nulls": 0, "count": 1}}}


def _table(schema: pa.Schema, records: list[tuple[str, str]]) -> pa.Table:
    return pa.concat_tables([
        pa.Table.from_pylist([_add(schema, k) for k, what in records if what == ADD], schema=schema),
        tombstones(schema, [k for k, what in records if what == REMOVE]),
        purges(schema, [k for k, what in records if what == PURGE]),
    ])


@st.composite
def blocks(draw: st.DrawFn) -> tuple[pa.Schema, list[pa.Table]]:
    schema = draw(st.sampled_from([FILES_SCHEMA, STATS_SCHEMA, DELETES_SCHEMA]))
    records = draw(st.lists(st.tuples(st.sampled_from(KEYS), st.sampled_from([ADD, REMOVE, PURGE])),
                            max_size=20))
    count = draw(st.integers(1, 4))
    owner = draw(st.lists(st.integers(0, count - 1), min_size=len(records), max_size=len(records)))
    return schema, [_table(schema, [r for r, o in zip(records, owner, strict=True) if o == b])
                    for b in range(count)]


def _expected(schema: pa.Schema, tables: list[pa.Table]) -> list[dict[str, Any]]:
    seen: dict[str, set[str]] = {}
    for table in tables:
        for row in table.to_pylist():
            what = PURGE if row["deleted"] is None else REMOVE if row["deleted"] else ADD
            seen.setdefault(row["path"], set()).add(what)
    result = []
    for key in sorted(seen):
        if PURGE in seen[key]:
            result.append(purges(schema, [key]).to_pylist()[0])
        elif ADD in seen[key]:
            result.append({**_add(schema, key), "deleted": REMOVE in seen[key]})
        else:
            result.append(tombstones(schema, [key]).to_pylist()[0])
    return result


@given(blocks())
def test_a_purge_wins_over_every_other_record_of_its_key(case: tuple[pa.Schema, list[pa.Table]]) -> None:
    schema, tables = case
    assert merge_two_phase(tables, schema).to_pylist() == _expected(schema, tables)


@given(blocks(), st.data())
def test_the_merge_with_purges_is_commutative_associative_and_idempotent(
    case: tuple[pa.Schema, list[pa.Table]], data: st.DataObject
) -> None:
    schema, tables = case
    whole = merge_two_phase(tables, schema).to_pylist()
    assert merge_two_phase(data.draw(st.permutations(tables)), schema).to_pylist() == whole
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(tables) - 1)), max_size=2)))
    groups = [tables[a:b] for a, b in zip([0, *cuts], [*cuts, len(tables)], strict=True)]
    folded = [merge_two_phase(g, schema) for g in groups if g]
    assert merge_two_phase(data.draw(st.permutations(folded)), schema).to_pylist() == whole
    once = merge_two_phase(tables, schema)
    assert merge_two_phase([once, *tables], schema).to_pylist() == whole
    assert merge_two_phase([once, once], schema).to_pylist() == whole


@given(blocks(), st.data())
def test_extending_with_purges_equals_merging_everything(
    case: tuple[pa.Schema, list[pa.Table]], data: st.DataObject
) -> None:
    schema, tables = case
    cut = data.draw(st.integers(0, len(tables)))
    extended = extend_two_phase(merge_two_phase(tables[:cut], schema), tables[cut:], schema)
    key = lambda row: row["path"]  # noqa: E731 - a local sort key
    assert sorted(extended.to_pylist(), key=key) == sorted(_expected(schema, tables), key=key)


def test_a_purged_key_is_neither_live_nor_removed_and_compaction_may_drop_it() -> None:
    table = _table(FILES_SCHEMA, [(KEYS[0], ADD), (KEYS[1], ADD), (KEYS[1], REMOVE),
                                  (KEYS[2], ADD), (KEYS[2], REMOVE), (KEYS[2], PURGE)])
    merged = merge_two_phase([table], FILES_SCHEMA)
    assert merged["path"].to_pylist() == KEYS[:3]
    assert merged["deleted"].to_pylist() == [False, True, None]
    assert merged.filter(merged["deleted"].is_null())["rows"].to_pylist() == [None]
    assert live(merged)["path"].to_pylist() == [KEYS[0]]
    assert removed(merged)["path"].to_pylist() == [KEYS[1]]
    assert without_purged(merged)["path"].to_pylist() == KEYS[:2]
    assert merge_two_phase([purges(FILES_SCHEMA, [KEYS[3]])], FILES_SCHEMA).to_pylist() == \
        purges(FILES_SCHEMA, [KEYS[3]]).to_pylist(), "a lone purge stays a bare purge"


# -- in the metadata table ----------------------------------------------------------------------------


def test_compaction_leaves_purged_keys_out_of_its_bases_and_reads_agree(memory_uri: str) -> None:
    clock = FakeClock()
    table = txn.create_table(memory_uri, SCHEMA, clock=clock, properties={
        "clean.retain_commits": "1", "clean.retain_hours": "0", "metadata.compact_after": "4"})
    table.append(rows(range(5)))
    table.overwrite(rows(range(10, 12)))
    clock.advance(1_000)
    cleaned = table.clean()
    assert cleaned.files
    before = table._context.metadata.resolve(_completed(table), None, partitions=(FILES,)).files
    assert before is not None
    purged = before.filter(pc.is_null(before["deleted"]))
    assert sorted(purged["path"].to_pylist()) == cleaned.files
    table.append(rows(range(20, 21)))  # the fourth deltacommit (the clean's counts): a compaction
    bases = [k for k in storage_of(memory_uri).list("_metadata/files") if k.endswith(".base.arrow")]
    assert len(bases) == 1
    base = pa.ipc.open_file(pa.BufferReader(storage_of(memory_uri).read(bases[0]))).read_all()
    assert not set(cleaned.files) & set(base["path"].to_pylist()), "no record of a purged file"
    assert base.filter(pc.is_null(base["deleted"])).num_rows == 0
    after = MetadataTable(storage_of(memory_uri), SCHEMA).resolve(_completed(table), None,
                                                                  partitions=(FILES,)).files
    assert after is not None
    assert sorted(live(after)["path"].to_pylist()) == sorted(
        p.split(memory_uri + "/", 1)[1] for p in (f.path for f in table.snapshot().files()))
    assert table.validate().ok


def test_the_retention_floor_only_rises_and_names_who_raised_it(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, properties={
        "metadata.compact_after": "1", "metadata.retain_commits": "1"})
    for i in range(4):
        table.append(rows(range(i, i + 1)))
    metadata = table._context.metadata
    floor = metadata.retention_floor()
    assert floor is not None and floor.source == "metadata" and "metadata.retain_commits" in floor.help()
    high = "29991231235959999"
    with table._context.timeline.lock() as lease:
        assert metadata.raise_retention(high, source="clean", lease=lease) == high
        assert metadata.raise_retention(floor.resolvable_from, source="metadata", lease=lease) == high
    # Metadata cleaning after it must not lower the floor. (Run directly: a floor above every
    # completion, which no clean sets, expires every snapshot, so no write could read the table.)
    writes = sorted(_completed(table).items(), key=lambda item: item[1])
    with table._context.timeline.lock() as lease:
        metadata.compact(writes, lease=lease, data_max_time=writes[-1][1])
        assert metadata.clean(writes, lease=lease)
    raised = metadata.retention_floor()
    assert raised is not None and (raised.resolvable_from, raised.source) == (high, "clean")
    assert "clean.retain_commits" in raised.help() and "clean.retain_hours" in raised.help()


def test_cleanable_lists_what_metadata_cleaning_deletes(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, properties={"metadata.compact_after": "2",
                                                             "metadata.retain_commits": "1"})
    metadata = MetadataTable(storage_of(memory_uri), SCHEMA, options=MetadataOptions(
        compact_after=1000, retain_commits=1))
    for i in range(3):
        table.append(rows(range(i, i + 1)))
    writes = sorted(_completed(table).items(), key=lambda item: item[1])
    context = table._context
    with context.timeline.lock() as lease:
        context.metadata.compact(writes, lease=lease, data_max_time=writes[-1][1])
    table.append(rows(range(5, 6)))
    writes = sorted(_completed(table).items(), key=lambda item: item[1])
    doomed = metadata.cleanable(writes)
    listing = storage_of(memory_uri).list("", recursive=True)
    assert doomed and set(doomed) <= set(listing)
    with context.timeline.lock() as lease:
        assert sorted(metadata.clean(writes, lease=lease)) == doomed
    assert metadata.cleanable(writes) == []


def _completed(table: txn.Table) -> dict[str, str]:
    return {i.time: i.completed_at or "" for i in table.timeline() if i.state == "completed"}
