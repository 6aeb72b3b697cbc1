"""Time travel racing table maintenance: a snapshot either reads exactly or raises.

Readers take no lock while maintenance compacts the metadata table and cleans what the new base
supersedes. The races are made deterministic by running maintenance (on a second handle, as
``maintenance.mode=async`` or a ``maintain()`` loop elsewhere would) at one chosen storage call
of the reader: between its resolution of the ``files`` partition and its listing of
``deletes``. The deltacommits that would reveal a block missing from that listing are taken as
unavailable (archived or unreadable, which the design admits leaves an instant unchecked), so
the answer must not depend on them. Found by issue 22 (17 rows where 12 were expected).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn import timeline
from metatxn.indexes import MetadataTable
from tests.unit.txn.helpers import CountingStorage, storage_of, table_on

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def batch(keys: list[int], value: str = "a") -> pa.Table:
    return pa.table({"k": keys, "v": [value] * len(keys)}, schema=SCHEMA)


class Hooked(CountingStorage):
    """Forwards every call; runs ``hook`` once, before the first call that ``when`` accepts."""

    def __init__(self, inner: timeline.Storage, when: Callable[[str, str], bool],
                 hook: Callable[[], object]) -> None:
        super().__init__(inner)
        self._when, self._hook, self.fired = when, hook, False

    def _log(self, op: str, path: str) -> None:
        super()._log(op, path)
        if not self.fired and self._when(op, path):
            self.fired = True
            self._hook()


def keyed_table(uri: str, retain: int) -> txn.Table:
    return txn.create_table(uri, SCHEMA, record_key="k", properties={
        "metadata.compact_after": "1", "metadata.retain_commits": str(retain),
        "maintenance.mode": "manual"})


def read_racing_maintenance(uri: str, as_of: str) -> pa.Table:
    """``as_of`` read through a handle whose ``deletes`` listing is preceded by a whole run of
    table maintenance on another handle."""
    maintainer = txn.open_table(uri)
    reader_storage = Hooked(storage_of(uri), lambda op, path: op == "list"
                            and path.rstrip("/") == "_metadata/deletes", maintainer.maintain)
    reader = table_on(uri, reader_storage)
    try:
        return reader.snapshot(as_of=as_of).to_arrow()
    finally:
        assert reader_storage.fired


@pytest.fixture
def unchecked_deltacommits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every deltacommit reads as unavailable (archived, or damaged)."""
    monkeypatch.setattr(MetadataTable, "recorded", lambda self, instant_time: None)


def test_a_snapshot_expired_while_it_is_read_raises(
        memory_uri: str, unchecked_deltacommits: None) -> None:
    """The issue's sequence: maintenance after the last delete moves the floor past the update
    three commits back while a read of it is under way. Before the fix the read used the
    ``files`` base it had read and a ``deletes`` listing without the base and blocks cleaning
    had just removed: the 5 rows the update replaced came back beside their new versions."""
    table = keyed_table(memory_uri, retain=2)
    table.append(batch(list(range(12))))
    table.maintain()
    update = table.update(pc.field("k") < 5, {"v": "b"})
    table.maintain()
    table.append(batch([100]))
    table.maintain()
    table.delete(pc.field("k") == 100)  # its maintenance runs inside the read below
    with pytest.raises(txn.SnapshotExpiredError):
        read_racing_maintenance(memory_uri, update.instant)
    with pytest.raises(txn.SnapshotExpiredError):  # and stays expired
        table.snapshot(as_of=update.instant).to_arrow()


def test_a_retained_snapshot_read_while_a_newer_base_replaces_its_own_is_exact(
        memory_uri: str, unchecked_deltacommits: None) -> None:
    """Maintenance completes a compaction the reader did not know and cleans everything older,
    the reader's base included; the snapshot stays retained (the new base resolves it), so the
    reader must resolve again from a fresh listing rather than miss the deltas cleaned away."""
    table = keyed_table(memory_uri, retain=1)
    table.append(batch(list(range(12))))
    table.maintain()
    table.append(batch([200]))
    table.maintain()
    table.delete(pc.field("k") == 200)
    table.maintain()
    update = table.update(pc.field("k") < 5, {"v": "b"})  # compacted inside the read below
    expected = sorted(table.to_arrow().to_pylist(), key=lambda row: row["k"])
    assert len(expected) == 12
    got = read_racing_maintenance(memory_uri, update.instant)
    assert sorted(got.to_pylist(), key=lambda row: row["k"]) == expected
    assert table.snapshot(as_of=update.instant).to_arrow().num_rows == 12


def test_time_travel_beside_a_maintenance_loop_reads_exactly_or_raises(memory_uri: str) -> None:
    """The issue's randomized form, bounded: a second handle runs ``maintain()`` in a loop while
    this one commits and reads each update back until it expires."""
    table = keyed_table(memory_uri, retain=2)
    table.append(batch(list(range(12))))
    stop = threading.Event()
    failures: list[BaseException] = []

    def maintain_forever() -> None:
        other = txn.open_table(memory_uri)
        while not stop.is_set():
            try:
                other.maintain()
            except Exception as exc:  # a failure here must not pass unnoticed
                failures.append(exc)
                return

    maintainer = threading.Thread(target=maintain_forever)
    maintainer.start()
    rng = random.Random(22)
    try:
        for round_ in range(3):  # each round about 4 s beside the maintainer thread
            update = table.update(pc.field("k") < 5, {"v": f"b{round_}"})
            expected = sorted(table.to_arrow().to_pylist(), key=lambda row: row["k"])
            table.append(batch([100 + round_]))
            table.delete(pc.field("k") == 100 + round_)
            for _ in range(rng.randint(5, 15)):
                try:
                    got = table.snapshot(as_of=update.instant).to_arrow()
                except txn.SnapshotExpiredError:
                    break
                assert sorted(got.to_pylist(), key=lambda row: row["k"]) == expected
    finally:
        stop.set()
        maintainer.join(30)
    assert not failures
