"""Idempotent writes: ``app_id`` and ``version`` on every write commit a version at most once,
checked against the producer's record in the metadata table (issue 14, item 5)."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from txn import _write

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])


def rows(*ids: int, v: str = "x") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [v] * len(ids)})


def instants(t: txn.Table) -> int:
    return len(t.timeline())


def test_an_append_commits_each_version_once(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, record_key="id")
    assert t.append(rows(1), app_id="nightly", version=1) is not None
    before = instants(t)
    assert t.append(rows(2), app_id="nightly", version=1) is None, "a replay of version 1"
    assert t.append(rows(3), app_id="nightly", version=0) is None, "an older version"
    assert instants(t) == before, "a skipped write creates no instant"
    assert t.append(rows(4), app_id="nightly", version=2) is not None
    assert t.append(rows(5), app_id="other", version=1) is not None, "apps are independent"
    assert sorted(t.to_arrow()["id"].to_pylist()) == [1, 4, 5]


@pytest.mark.parametrize("operation", ["upsert", "delete", "update", "overwrite"])
def test_every_write_takes_app_id_and_version(memory_uri: str, operation: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, record_key="id")
    t.append(rows(1, 2, 3))
    calls: dict[str, Any] = {
        "upsert": lambda **kw: t.upsert(rows(1, v="new"), **kw),
        "delete": lambda **kw: t.delete(keys=[2], **kw),
        "update": lambda **kw: t.update(pc.field("id") == 3, {"v": "upd"}, **kw),
        "overwrite": lambda **kw: t.overwrite(rows(9), **kw),
    }
    assert calls[operation](app_id="job", version=7) is not None
    after = t.to_arrow().sort_by("id")
    assert calls[operation](app_id="job", version=7) is None
    assert t.to_arrow().sort_by("id").equals(after)


@pytest.mark.parametrize(("app_id", "version"), [
    ("job", None), (None, 3), ("", 1), ("job", -1), ("job", True), (7, 1), ("job", 1.5)])
def test_bad_app_id_or_version_is_refused(memory_uri: str, app_id: Any, version: Any) -> None:
    t = txn.create_table(memory_uri, SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match="app_id"):
        t.append(rows(1), app_id=app_id, version=version)
    assert t.timeline() == []


def test_two_writers_retrying_one_version_commit_it_once(memory_uri: str) -> None:
    """Both pass the check before they begin; the one that commits second finds the record
    under the lock and writes nothing."""
    t = txn.create_table(memory_uri, SCHEMA)
    handles = [txn.open_table(memory_uri) for _ in range(2)]
    barrier = threading.Barrier(2)
    results: list[Any] = []

    def write(table: txn.Table, value: int) -> None:
        barrier.wait()
        results.append(table.append(rows(value), app_id="retry", version=5))

    threads = [threading.Thread(target=write, args=(h, i)) for i, h in enumerate(handles)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(r is not None for r in results) == 1
    assert t.snapshot().count() == 1


def test_the_check_under_the_lock_stops_a_write_that_passed_the_first(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that read the table before the version committed elsewhere still writes nothing."""
    t = txn.create_table(memory_uri, SCHEMA)
    t.append(rows(1), app_id="late", version=1)
    monkeypatch.setattr(_write, "already_committed", lambda *a: False)
    before = instants(t)
    assert t.append(rows(2), app_id="late", version=1) is None
    assert instants(t) == before and t.snapshot().count() == 1


def test_progress_survives_metadata_compaction(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, properties={"metadata.compact_after": "3"})
    for version in range(8):
        t.append(rows(version), app_id="feed", version=version)
    t.maintain()
    fresh = txn.open_table(memory_uri)
    assert fresh.append(rows(100), app_id="feed", version=7) is None
    assert fresh.append(rows(8), app_id="feed", version=8) is not None
    assert fresh.snapshot().count() == 9


@pytest.mark.parametrize("bad", [2**63, 2**70])
@pytest.mark.parametrize("operation", ["append", "upsert", "delete", "update", "overwrite"])
def test_a_version_past_the_stored_range_is_refused(memory_uri: str, operation: str,
                                                     bad: int) -> None:
    """Issue 22, item 7: a version of 2**70 raised a bare OverflowError."""
    t = txn.create_table(memory_uri, SCHEMA, record_key="id")
    t.append(rows(1, 2, 3))
    calls: dict[str, Any] = {
        "append": lambda **kw: t.append(rows(4), **kw),
        "upsert": lambda **kw: t.upsert(rows(1, v="new"), **kw),
        "delete": lambda **kw: t.delete(keys=[2], **kw),
        "update": lambda **kw: t.update(pc.field("id") == 3, {"v": "upd"}, **kw),
        "overwrite": lambda **kw: t.overwrite(rows(9), **kw),
    }
    before = t.timeline()
    expected = rf"version \(an int from 0 to {2**63 - 1}.*version={bad}"
    with pytest.raises(txn.InvalidOptionError, match=expected):
        calls[operation](app_id="job", version=bad)
    assert t.timeline() == before and t.streams() == []
    assert calls[operation](app_id="job", version=2**63 - 1) is not None
    assert calls[operation](app_id="job", version=2**63 - 1) is None


@pytest.mark.parametrize("bad", [-1, 2**63, 2**70])
def test_spark_writes_check_the_version_range_before_spark_runs(memory_uri: str, bad: int) -> None:
    """``txn.spark.write`` takes the same ``version``: checked before the DataFrame is touched
    (a stand-in without a Spark session shows that no Spark work ran)."""
    from txn import spark

    t = txn.create_table(memory_uri, SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match=rf"version.*version={bad}"):
        spark.write(object(), memory_uri, app_id="job", version=bad)
    assert t.timeline() == []
