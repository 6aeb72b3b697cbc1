"""The reader's check that every block a completed instant recorded exists, and its cost.

What each deltacommit recorded is read once per process (the cache is shared by every handle of
a table), only for instants of the window whose block is not in the listing, and the reads a
cold check needs are made in parallel once they prove slow.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import txn
from metatxn import timeline
from metatxn.indexes import DELETES, FILES, SEGMENTS, MetadataTable
from metatxn.indexes import _metadata_table as mt
from tests.unit.txn.helpers import SCHEMA, rows, storage_of

PARTITIONS = (FILES, SEGMENTS, DELETES, "record_index")


@pytest.fixture(autouse=True)
def _cold_process_cache() -> Iterator[None]:
    mt._RECORDED.clear()
    yield
    mt._RECORDED.clear()


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every deltacommit read from storage: (instant time, reading thread's name)."""
    seen: list[tuple[str, str]] = []
    original = timeline.Timeline.read_metadata

    def counting(self: timeline.Timeline, instant: timeline.Instant, type: Any = Any) -> Any:
        if instant.action == "deltacommit":
            seen.append((instant.time, threading.current_thread().name))
        return original(self, instant, type)

    monkeypatch.setattr(timeline.Timeline, "read_metadata", counting)
    return seen


def _mixed(uri: str) -> dict[str, txn.Commit]:
    """A keyed table whose instants write different partitions: appends (no deletes block),
    deletes (no segments block), an upsert (every partition)."""
    table = txn.create_table(uri, SCHEMA, record_key="id", properties={
        "record_index.shards": "2", "metadata.compact_after": "1000"})
    commits: dict[str, txn.Commit] = {}
    for i in range(6):
        commit = table.append(rows(range(i * 10, i * 10 + 5)))
        assert commit is not None
        commits.setdefault("append", commit)
        if i % 2:
            deleted = table.delete(keys=[i * 10])
            assert deleted is not None
            commits.setdefault("delete", deleted)
    upserted = table.upsert(rows([1, 100]))
    assert upserted is not None
    commits["upsert"] = upserted
    return commits


def _read_everything(table: txn.Table) -> None:
    table.to_arrow()
    table.segments()
    table.lookup([1, 2, 100])


def test_a_healthy_table_whose_instants_wrote_every_partition_read_reads_no_deltacommit(
    table_uri: str, reads: list[tuple[str, str]]
) -> None:
    """Only instants whose block is absent from the listing are looked up."""
    table = txn.create_table(table_uri, SCHEMA, properties={"metadata.compact_after": "1000"})
    for i in range(5):
        table.append(rows(range(i * 10, i * 10 + 5)))
    completed = {i.time: i.completed_at or "" for i in table.timeline() if i.state == "completed"}
    reads.clear()
    MetadataTable(storage_of(table_uri), table.schema).resolve(completed, partitions=(FILES, SEGMENTS))
    assert reads == []


def test_each_deltacommit_is_read_once_per_process_whatever_the_handle(
    table_uri: str, reads: list[tuple[str, str]]
) -> None:
    _mixed(table_uri)
    mt._RECORDED.clear()
    reads.clear()
    _read_everything(txn.open_table(table_uri))
    first = [time for time, _ in reads]
    assert first, "appends and deletes each lack a block some read needs"
    assert len(first) == len(set(first))
    reads.clear()
    for _ in range(3):
        table = txn.open_table(table_uri)
        _read_everything(table)
        assert table.snapshot().count() == 28
    table.append(rows([200]))  # its begin and commit check too, under the lock
    assert [time for time, _ in reads] == []


@pytest.mark.parametrize("partition", PARTITIONS)
def test_a_block_lost_after_another_handle_checked_it_is_still_an_error(
    table_uri: str, partition: str
) -> None:
    """The process cache holds what deltacommits recorded, never the outcome of a check: a
    block deleted after one handle read the table is missing for the next."""
    commits = _mixed(table_uri)
    _read_everything(txn.open_table(table_uri))
    assert len(mt._RECORDED)
    instant = (commits["delete"] if partition == DELETES else commits["upsert"]).instant
    lost = f"_metadata/{partition}/{instant}.log.arrow"
    storage_of(table_uri).delete(lost)
    reopened = txn.open_table(table_uri)
    read_of: dict[str, Callable[[], object]] = {
        FILES: reopened.to_arrow, DELETES: reopened.to_arrow, SEGMENTS: reopened.segments,
        "record_index": lambda: reopened.lookup([1, 100])}
    with pytest.raises(txn.CorruptMetadataError, match=re.escape(lost)):
        read_of[partition]()
    with pytest.raises(txn.CorruptMetadataError, match=re.escape(lost)):
        reopened.append(rows([300]))


@pytest.mark.parametrize("partition", [SEGMENTS, "record_index"])
def test_a_cold_check_reads_in_parallel_once_reads_are_slow_and_still_finds_a_lost_block(
    table_uri: str, partition: str, reads: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    commits = _mixed(table_uri)
    lost = f"_metadata/{partition}/{commits['upsert'].instant}.log.arrow"
    storage_of(table_uri).delete(lost)
    mt._RECORDED.clear()
    reads.clear()
    monkeypatch.setattr(mt, "_SERIAL_BUDGET_S", 0.0)  # as if each read took a round trip
    reopened = txn.open_table(table_uri)
    read: Callable[[], object] = (reopened.segments if partition == SEGMENTS
                                  else lambda: reopened.lookup([1, 100]))
    with pytest.raises(txn.CorruptMetadataError, match=re.escape(lost)):
        read()
    assert any(name.startswith("metatxn-deltacommit") for _, name in reads), reads


def test_healthy_reads_agree_with_or_without_the_process_cache(table_uri: str) -> None:
    _mixed(table_uri)
    warm = txn.open_table(table_uri)
    expected = (warm.to_arrow().sort_by("id"), warm.segments(), warm.lookup([1, 2, 100]))
    mt._RECORDED.clear()
    cold = txn.open_table(table_uri)
    assert (cold.to_arrow().sort_by("id"), cold.segments(), cold.lookup([1, 2, 100])) == expected


def test_an_unreadable_deltacommit_is_retried_by_the_next_handle(table_uri: str) -> None:
    """Only records that decoded are shared: a deltacommit damaged then repaired is read again
    (a damaged one leaves its instant unchecked; validate reports it)."""
    commits = _mixed(table_uri)
    storage = storage_of(table_uri)
    instant = commits["delete"].instant
    lost = f"_metadata/{DELETES}/{instant}.log.arrow"
    storage.delete(lost)
    [deltacommit] = [k for k in storage.list("_metadata/_timeline")
                     if k.rsplit("/", 1)[1].startswith(f"{instant}_") and k.endswith(".deltacommit")]
    good = storage.read(deltacommit)
    mt._RECORDED.clear()
    storage.put(deltacommit, b"{")
    txn.open_table(table_uri).to_arrow()  # nothing recorded to check against
    storage.put(deltacommit, good)
    with pytest.raises(txn.CorruptMetadataError, match=re.escape(lost)):
        txn.open_table(table_uri).to_arrow()


def _instant(time: str, completed_at: str) -> timeline.Instant:
    return timeline.Instant(time=time, action="deltacommit", state="completed",
                            completed_at=completed_at)


def test_the_cache_answers_only_for_the_location_and_deltacommit_file_it_read() -> None:
    cache = mt._RecordedCache(8)
    record = mt._Recorded(frozenset({FILES}), frozenset({1}))
    cache.put("memory://a", _instant("20260101000000001", "20260101000000002"), record)
    assert cache.get("memory://a", _instant("20260101000000001", "20260101000000002")) == record
    # Recorded again (another file, another completion time) or another table: not this entry.
    assert cache.get("memory://a", _instant("20260101000000001", "20260101000000003")) is None
    assert cache.get("memory://b", _instant("20260101000000001", "20260101000000002")) is None
    cache.forget("memory://a", "20260101000000001")
    assert cache.get("memory://a", _instant("20260101000000001", "20260101000000002")) is None


def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    cache = mt._RecordedCache(3)
    record = mt._Recorded(frozenset(), frozenset())
    instants = [_instant(f"2026010100000000{i}", f"2026010100000001{i}") for i in range(4)]
    for instant in instants[:3]:
        cache.put("loc", instant, record)
    assert cache.get("loc", instants[0]) == record  # now the most recently used
    cache.put("loc", instants[3], record)
    assert len(cache) == 3
    assert cache.get("loc", instants[1]) is None
    assert all(cache.get("loc", i) == record for i in (instants[0], instants[2], instants[3]))
