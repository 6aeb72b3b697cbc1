"""``t.history(limit=None)``: one ``txn.HistoryEntry`` per completed instant, newest first,
archived ones included, built from what each commit recorded (issue 25, item 5).

Counts are checked against what each write returned (``Commit``), bytes against the sizes of
the files each instant wrote as storage reports them (data files and delete deltas are named
after their instant), and removed bytes against the live files' sizes before the removal.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txn
from metatxn import timeline
from tests.conftest import FakeClock
from tests.unit.txn.helpers import (
    METADATA_PREFIXES,
    SCHEMA,
    CountingStorage,
    rows,
    storage_of,
    table_on,
)
from txn._context import CommitMetadata

NO_RETENTION = {"clean.retain_commits": "1", "clean.retain_hours": "0"}
FIXTURE = Path(__file__).parents[2] / "fixtures" / "table_before_versions"


def written_bytes(t: txn.Table, instant: str) -> int:
    """The bytes of every file of the table (not its metadata) that ``instant`` wrote: data
    files and delete deltas carry their instant's time in their names."""
    storage = storage_of(t.uri)
    return sum(storage.size(k) for k in storage.list("", recursive=True)
               if not k.startswith(METADATA_PREFIXES) and f"_{instant}" in k.rsplit("/", 1)[-1])


def live_bytes(t: txn.Table, segments: set[str] | None = None) -> int:
    """The size of the live data files (of ``segments`` only, when given)."""
    return sum(f.size for f in t.snapshot().files() if segments is None or f.segment in segments)


def entry_of(t: txn.Table, instant: str) -> txn.HistoryEntry:
    (found,) = [e for e in t.history() if e.instant == instant]
    return found


def matches(entry: txn.HistoryEntry, commit: txn.Commit) -> None:
    """The entry says what the write's ``Commit`` said."""
    assert (entry.instant, entry.completed_at, entry.operation, entry.segment) == (
        commit.instant, commit.completed_at, commit.operation, commit.segment)
    assert (entry.rows_added, entry.rows_deleted, entry.files_added) == (
        commit.rows_added, commit.rows_deleted, commit.files_added)
    assert entry.extra == commit.extra and entry.operations == commit.operations
    assert entry.segments_removed == commit.segments_removed
    assert entry.segments_merged == commit.segments_merged
    assert entry.schema_version == commit.schema_version
    assert entry.duration_ms == timeline.parse_time(entry.completed_at) - timeline.parse_time(entry.instant)
    assert entry.duration_ms > 0


def test_every_data_operation_has_its_entry_with_counts_and_bytes(tmp_path: Path, clock: FakeClock) -> None:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id", clock=clock,
                         properties=NO_RETENTION)
    written: dict[str, int] = {}
    removed: dict[str, int] = {}
    commits: list[txn.Commit] = []

    def did(commit: txn.Commit | None) -> txn.Commit:
        assert commit is not None
        commits.append(commit)
        written[commit.instant] = written_bytes(t, commit.instant)
        clock.advance(1_000)
        return commit

    append = did(t.append(rows(range(10)), extra={"source": "crm"}))
    did(t.append(rows(range(10, 20))))
    upsert = did(t.upsert(rows([5, 20])))
    delete = did(t.delete(keys=[0, 1]))
    update = did(t.update(pc.field("id") == 2, {"price": 99.0}))
    with t.transaction() as tx:
        tx.delete(keys=[3])
        tx.append(rows([30]))
    transaction = did(tx.result)
    external = tmp_path / "ext"
    external.mkdir()
    pq.write_table(rows([40, 41, 42]), external / "part.parquet")
    added = did(t.add_segment(str(external)))
    written[added.instant] = (external / "part.parquet").stat().st_size  # read in place
    merged_sources = {"0", "1"}
    removed_before = live_bytes(t, merged_sources)
    compaction = did(t.compact("custom", segments=sorted(merged_sources)))
    removed[compaction.instant] = removed_before
    everything = live_bytes(t)
    overwrite = did(t.overwrite(rows([100, 101])))
    removed[overwrite.instant] = everything
    alter = did(t.add_columns([pa.field("note", pa.string())]))

    history = t.history()
    by_instant = {e.instant: e for e in history}
    assert [e.completed_at for e in history] == sorted((e.completed_at for e in history), reverse=True)
    assert len(history) == len(commits), "one entry per completed instant"
    for commit in commits:
        entry = by_instant[commit.instant]
        matches(entry, commit)
        assert entry.bytes_added == written[commit.instant] > 0 or commit is alter
        assert (entry.app_id, entry.version) == (None, None)

    assert by_instant[append.instant].extra == {"source": "crm"}
    assert by_instant[append.instant].action == "commit" and by_instant[append.instant].operation == "append"
    assert by_instant[upsert.instant].deltas_added == 1 and by_instant[upsert.instant].rows_deleted == 1
    assert by_instant[delete.instant].rows_deleted == 2 and by_instant[delete.instant].files_added == 0
    assert by_instant[delete.instant].deltas_added >= 1 and by_instant[delete.instant].read_at is not None
    assert (by_instant[update.instant].rows_added, by_instant[update.instant].rows_deleted) == (1, 1)
    assert by_instant[added.instant].operation == "add_segment" and by_instant[added.instant].rows_added == 3

    tx_entry = by_instant[transaction.instant]
    assert (tx_entry.operation, tx_entry.operations) == ("transaction", ("delete", "append"))
    assert (tx_entry.rows_added, tx_entry.rows_deleted) == (1, 1)

    merged = by_instant[compaction.instant]
    assert (merged.action, merged.operation) == ("compaction", "compact")
    assert merged.segments_merged == ("0", "1") and merged.files_removed == 2
    assert merged.bytes_removed == removed[compaction.instant]

    replaced = by_instant[overwrite.instant]
    assert (replaced.action, replaced.operation) == ("replacecommit", "overwrite")
    assert replaced.files_removed > 0 and replaced.bytes_removed == removed[overwrite.instant]

    altered = by_instant[alter.instant]
    assert (altered.operation, altered.schema_version) == ("alter_table", 1)
    assert (altered.rows_added, altered.files_added, altered.bytes_added) == (0, 0, 0)

    # CLEAN FILES: its own entry, and the removed files' sizes outlive the records it purged
    # (they come from the commits that added them).
    clock.advance(1_000)
    cleaned = t.clean()
    assert cleaned.instant is not None and cleaned.files
    first = t.history()[0]
    assert (first.instant, first.action, first.operation) == (cleaned.instant, "clean", "clean")
    assert (first.files_removed, first.bytes_removed) == (len(cleaned.files), cleaned.bytes)
    assert (first.rows_added, first.files_added, first.bytes_added) == (0, 0, 0)
    assert t.history()[1:] == history
    assert txn.open_table(t.uri).history() == t.history(), "a fresh handle reads the same"


def test_a_streaming_batch_has_its_entry(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = txn.create_table(str(tmp_path / "s"), schema, properties={"streaming": "true"})
    stream = t.stream("job1")
    commits = [stream.write(i, pa.table({"id": [i], "v": [f"v{i}"]}, schema=schema)) for i in range(2)]
    history = t.history()
    assert [e.instant for e in history] == [c.instant for c in reversed(commits) if c is not None]
    for commit in commits:
        assert commit is not None
        entry = entry_of(t, commit.instant)
        matches(entry, commit)
        assert entry.operation == "stream" and entry.extra == commit.extra
        assert entry.bytes_added == written_bytes(t, commit.instant) > 0
        assert entry.app_id is None, "a stream's batch ids are in extra, not app_id"


@pytest.mark.allow_metatxn_warnings  # the failed write's rollback is what it provokes
def test_a_rollback_is_listed_with_the_files_it_deleted(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows([1]))
    bad = rows([2]).cast(SCHEMA.set(0, pa.field("id", pa.int64(), nullable=True)))
    bad = bad.set_column(0, pa.field("id", pa.int64(), nullable=True), pa.array([None], pa.int64()))
    reader = pa.RecordBatchReader.from_batches(bad.schema, [*rows([3]).cast(bad.schema).to_batches(),
                                                           *bad.to_batches()])
    with pytest.raises(txn.SchemaMismatchError):
        t.append(reader)
    rollback = [e for e in t.history() if e.action == "rollback"]
    assert len(rollback) == 1 and rollback[0].operation == "rollback"
    assert rollback[0].rows_added == 0 and rollback[0].bytes_removed is None
    assert [e.operation for e in t.history()] == ["rollback", "append"]


def test_idempotent_writes_show_their_app_id_and_version(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id")
    first = t.append(rows([1]), app_id="loader", version=7)
    upsert = t.upsert(rows([2]), commit_properties=txn.CommitProperties(app_id="loader", version=8))
    assert t.append(rows([3]), app_id="loader", version=8) is None, "a replayed version is skipped"
    with t.transaction(commit_properties=txn.CommitProperties(app_id="batch-job", version=1)) as tx:
        tx.append(rows([4]))
    plain = t.append(rows([5]))
    assert first is not None and upsert is not None and plain is not None
    found = [(e.operation, e.app_id, e.version) for e in t.history()]
    assert found == [("append", None, None), ("transaction", "batch-job", 1), ("upsert", "loader", 8),
                     ("append", "loader", 7)]


def test_limit_gives_the_newest_and_reads_only_what_it_needs(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, properties={
        "timeline.archive.trigger": "4", "timeline.archive.retain": "2"})
    commits = [t.append(rows([i])) for i in range(12)]
    archive = storage_of(t.uri).list(timeline.ARCHIVE_FOLDER)
    assert archive, "the oldest instants were archived"
    active = {i.time for i in timeline.Timeline(storage_of(t.uri)).load().completed()}
    history = t.history()
    assert [e.instant for e in history] == [c.instant for c in reversed(commits) if c is not None]
    archived = [e for e in history if e.instant not in active]
    assert archived and all(e.operation == "append" and e.rows_added == 1 for e in archived)

    counting = CountingStorage(storage_of(t.uri))
    handle = table_on(t.uri, counting)
    assert handle.history(limit=2) == history[:2]
    assert not [p for op, p in counting.calls if p.startswith(timeline.ARCHIVE_FOLDER) and op == "read"], (
        "the newest two are active: no archive file is read")
    instant_files = [p for op, p in counting.calls if op == "read" and p.startswith("_timeline/")
                     and p.rsplit("/", 1)[-1][:1].isdigit()]
    assert len(instant_files) == 2, instant_files
    counting.calls.clear()
    assert handle.history(limit=len(active) + 1) == history[:len(active) + 1]
    read = [p for op, p in counting.calls if op == "read" and p.startswith(timeline.ARCHIVE_FOLDER)]
    assert read == [max(archive, key=lambda p: p.rsplit("_", 1)[-1])], "only the newest archive file"
    assert handle.history(limit=100) == history


@pytest.mark.parametrize("limit", [0, -1, True, "3", 2.0])
def test_a_bad_limit_is_refused(tmp_path: Path, limit: object) -> None:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, data=rows([1]))
    with pytest.raises(txn.InvalidOptionError, match="positive int"):
        t.history(limit=limit)  # type: ignore[arg-type]


@pytest.mark.allow_metatxn_warnings  # the damaged instant is reported, not raised
def test_an_instant_whose_metadata_is_damaged_is_listed_without_it(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA)
    first = t.append(rows([1]))
    second = t.append(rows([2]))
    assert first is not None and second is not None
    damaged = timeline.Timeline(storage_of(t.uri)).load().get(first.instant)
    assert damaged is not None
    Path(t.uri, "_timeline", damaged.file_name).write_bytes(b"\x01 not an instant file")
    history = t.history()
    assert [(e.instant, e.operation) for e in history] == [(second.instant, "append"), (first.instant, None)]
    assert history[1].completed_at == first.completed_at


def test_a_commit_written_before_app_id_existed_decodes() -> None:
    old = b'{"kind":"commit","operation":"append","segment":"0","rows_added":3}'
    decoded = msgspec.json.decode(old, type=CommitMetadata)
    assert (decoded.app_id, decoded.app_version, decoded.rows_added) == (None, None, 3)


def test_a_table_written_before_these_fields_lists_its_history(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "t")
    t = txn.open_table(str(tmp_path / "t"))
    history = t.history()
    assert history and all(e.operation is not None and e.app_id is None for e in history)
    assert sum(e.rows_added for e in history) >= t.snapshot().count()
    assert [e.instant for e in history] == [i.time for i in sorted(
        (i for i in t.timeline() if i.is_completed), key=lambda i: i.completed_at or "", reverse=True)]


def test_removed_bytes_come_from_the_metadata_table_until_clean_purges_the_records(
    tmp_path: Path, clock: FakeClock,
) -> None:
    """With ``limit``, the commits that added the removed files are not read: their sizes come
    from the ``files`` records of removed files, and are unknown (None) once CLEAN FILES purged
    them; the whole history still finds them in the adding commits."""
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, clock=clock, properties=NO_RETENTION)
    t.append(rows([1]))
    t.append(rows([2]))
    before = live_bytes(t)
    clock.advance(1_000)
    overwrite = t.overwrite(rows([3]))
    assert overwrite is not None
    assert t.history(limit=1)[0].bytes_removed == before
    clock.advance(1_000)
    assert t.clean().files
    newest = t.history(limit=2)
    assert [e.operation for e in newest] == ["clean", "overwrite"]
    assert newest[1].bytes_removed is None and newest[1].files_removed == 2
    assert entry_of(t, overwrite.instant).bytes_removed == before
