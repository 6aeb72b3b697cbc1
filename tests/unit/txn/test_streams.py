"""Streams: ``t.stream(name)``, ``s.write(batch_id, data)`` exactly once into streaming segments,
SHOW STREAMS and DROP STREAM (issue 14, items 1 and 2)."""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest

import txn

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.string())])
STREAMING = {"streaming": "true"}


def batch(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


def statuses(t: txn.Table) -> dict[str, tuple[str, int]]:
    return {s.id: (s.status, s.rows) for s in t.segments()}


def test_batches_commit_once_into_one_streaming_segment(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, properties=STREAMING)
    s = t.stream("job1")
    assert s.last_batch_id is None
    for batch_id in range(3):
        commit = s.write(batch_id, batch(batch_id))
        assert commit is not None and commit.segment == "0"
        assert commit.extra == {"stream": "job1", "batch_id": str(batch_id)}
    before = len(t.timeline())
    assert s.write(1, batch(100)) is None, "a replayed batch is skipped"
    assert s.write(2, batch(101)) is None
    assert len(t.timeline()) == before
    assert s.last_batch_id == 2
    assert statuses(t) == {"0": ("Streaming", 3)}
    assert sorted(t.to_arrow()["id"].to_pylist()) == [0, 1, 2]
    assert txn.open_table(memory_uri).stream("job1").last_batch_id == 2, "progress is the table's"
    assert t.validate().ok


def test_an_empty_batch_is_recorded(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, properties=STREAMING)
    s = t.stream("job1")
    s.write(0, batch(1))
    assert s.write(1, SCHEMA.empty_table()) is not None
    assert s.last_batch_id == 1 and s.write(1, batch(2)) is None
    assert t.snapshot().count() == 1


def test_past_the_size_limit_the_segment_finishes_and_a_new_one_opens(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, properties={
        **STREAMING, "streaming.segment.max_size": "1024", "streaming.auto_handoff": "false"})
    s = t.stream("job1")
    segments = [s.write(i, batch(i)) for i in range(4)]
    opened = [c.segment for c in segments if c is not None]
    assert opened[0] == "0" and opened[-1] != "0"
    found = statuses(t)
    assert found["0"][0] == "Streaming Finish"
    assert found[opened[-1]][0] == "Streaming"
    assert sum(rows for _, rows in found.values()) == 4
    assert t.snapshot().count() == 4


def test_show_streams_and_drop_stream(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, properties={**STREAMING, "streaming.auto_handoff": "false"})
    one, two = t.stream("job1"), t.stream("job2")
    one.write(0, batch(1, 2))
    two.write(7, batch(3))
    shown = {i.name: i for i in t.streams()}
    assert set(shown) == {"job1", "job2"}
    assert (shown["job1"].status, shown["job1"].segment, shown["job1"].last_batch_id,
            shown["job1"].rows) == ("Running", "0", 0, 2)
    assert shown["job2"].segment == "1", "each stream writes a segment of its own"
    two.close()
    assert {i.name: i.status for i in t.streams()}["job2"] == "Stopped"

    commit = t.drop_stream("job1")
    assert commit.operation == "drop_stream"
    assert [i.name for i in t.streams()] == ["job2"]
    assert statuses(t)["0"] == ("Streaming Finish", 2)
    assert one.closed, "DROP STREAM stops its writers in this process"
    with pytest.raises(txn.InvalidOptionError, match="closed"):
        one.write(1, batch(9))
    with pytest.raises(txn.StreamNotFoundError, match="job1"):
        t.drop_stream("job1")
    with pytest.raises(txn.StreamNotFoundError, match="nope"):
        t.drop_stream("nope")
    t.append(batch(20), app_id="nightly", version=1)  # an idempotent producer, also in SHOW STREAMS
    with pytest.raises(txn.StreamNotFoundError, match="'nightly' is the app_id of idempotent writes"):
        t.drop_stream("nightly")

    again = t.stream("job1")
    assert again.last_batch_id is None, "a dropped name starts afresh"
    assert again.write(0, batch(10)).segment not in ("0", "1")  # type: ignore[union-attr]
    assert t.snapshot().count() == 5
    assert t.validate().ok


def test_a_stream_needs_a_streaming_table(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match="streaming"):
        t.stream("job1")
    assert t.timeline() == []


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3", None])
def test_bad_batch_ids_are_refused(memory_uri: str, bad: Any) -> None:
    t = txn.create_table(memory_uri, SCHEMA, properties=STREAMING)
    with pytest.raises(txn.InvalidOptionError, match="batch_id"):
        t.stream("job1").write(bad, batch(1))
    assert t.timeline() == []


@pytest.mark.parametrize("bad", ["", "  ", 3, None])
def test_bad_stream_names_are_refused(memory_uri: str, bad: Any) -> None:
    t = txn.create_table(memory_uri, SCHEMA, properties=STREAMING)
    with pytest.raises(txn.InvalidOptionError, match="stream name"):
        t.stream(bad)


def test_a_batch_of_the_wrong_schema_writes_nothing(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, properties=STREAMING)
    s = t.stream("job1")
    with pytest.raises(txn.SchemaMismatchError):
        s.write(0, pa.table({"id": ["not an int"]}))
    assert t.timeline() == [] and s.last_batch_id is None


def test_keyed_streams_refuse_keys_already_in_the_table(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, record_key="id", properties=STREAMING)
    s = t.stream("job1")
    s.write(0, batch(1, 2))
    with pytest.raises(txn.DuplicateKeyError):
        s.write(1, batch(2, 3))
    assert s.last_batch_id == 0
    assert t.lookup([1])["segment"].to_pylist() == ["0"]


def test_streams_and_other_writes_side_by_side(memory_uri: str) -> None:
    """Several streams at once from threads (each into its own segment), with appends and a
    compaction beside them: every batch exactly once."""
    t = txn.create_table(memory_uri, SCHEMA, properties=STREAMING)
    errors: list[BaseException] = []

    def run(name: str, first: int) -> None:
        try:
            handle = txn.open_table(memory_uri).stream(name)
            for batch_id in range(10):
                handle.write(batch_id, batch(first + batch_id))
                handle.write(batch_id, batch(first + 1000 + batch_id))  # a replay: skipped
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"s{n}", n * 100)) for n in range(3)]
    for thread in threads:
        thread.start()
    for n in range(4):
        t.append(batch(5000 + n))
    t.compact("minor")
    for thread in threads:
        thread.join()
    assert not errors, errors
    ids = sorted(t.to_arrow()["id"].to_pylist())
    assert ids == sorted([n * 100 + b for n in range(3) for b in range(10)] + [5000, 5001, 5002, 5003])
    streaming = {s.id for s in t.segments() if s.status == "Streaming"}
    assert len(streaming) == 3
    assert {i.segment for i in t.streams()} == streaming
    assert t.validate().ok


def test_progress_is_read_from_the_latest_record_after_maintenance(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA,
                         properties={**STREAMING, "metadata.compact_after": "3"})
    s = t.stream("job1")
    for batch_id in range(10):
        s.write(batch_id, batch(batch_id))
    t.maintain()
    fresh = txn.open_table(memory_uri)
    assert fresh.stream("job1").last_batch_id == 9
    assert fresh.stream("job1").write(9, batch(99)) is None
    assert [(i.name, i.rows) for i in fresh.streams()] == [("job1", 10)]


def test_close_streaming_hands_finished_segments_off(memory_uri: str) -> None:
    """COMPACT 'CLOSE_STREAMING': every Streaming Finish segment becomes a columnar Success
    segment (sorted by sort_by), the old one Compacted with merged_to; open ones stay."""
    t = txn.create_table(memory_uri, SCHEMA, sort_by=["id"], properties={
        **STREAMING, "streaming.segment.max_size": "1024", "streaming.auto_handoff": "false"})
    s = t.stream("job1")
    for batch_id, ids in enumerate([(5, 3), (9, 1), (7, 2), (8, 0)]):
        s.write(batch_id, batch(*ids))
    finished = [x.id for x in t.segments() if x.status == "Streaming Finish"]
    assert finished
    before = sorted(t.to_arrow()["id"].to_pylist())
    last = t.compact("close_streaming")
    assert last is not None and last.extra == {"compaction": "close_streaming"}
    after = {x.id: x for x in t.segments()}
    for segment in finished:
        assert after[segment].status == "Compacted" and after[segment].merged_to is not None
        merged = after[after[segment].merged_to]
        assert merged.status == "Success"
    assert [x.status for x in t.segments()].count("Streaming") == 1, "the open segment stays"
    assert sorted(t.to_arrow()["id"].to_pylist()) == before
    assert t.compact("close_streaming") is None, "nothing left to hand off"
    assert t.validate().ok


def test_auto_handoff_after_the_commit_that_finished_a_segment(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA,
                         properties={**STREAMING, "streaming.segment.max_size": "1024"})
    s = t.stream("job1")
    for batch_id in range(4):
        s.write(batch_id, batch(batch_id))
    assert "Streaming Finish" not in [x.status for x in t.segments()]
    assert any(x.status == "Compacted" for x in t.segments())
    t.drop_stream("job1")
    assert {x.status for x in t.segments()} <= {"Compacted", "Success"}
    assert sorted(t.to_arrow()["id"].to_pylist()) == [0, 1, 2, 3]


def test_a_long_stream_keeps_few_files(memory_uri: str) -> None:
    """After batches, the open segment's small files are merged by size tier (a table service
    of its own): the files to read stay few, the rows and their keys exactly as written."""
    t = txn.create_table(memory_uri, SCHEMA, record_key="id", properties=STREAMING)
    s = t.stream("job1")
    for batch_id in range(96):
        s.write(batch_id, batch(2 * batch_id, 2 * batch_id + 1))
    files = t.snapshot().files()
    assert len(files) < 16, f"{len(files)} files after 96 batches"
    assert {f.segment for f in files} == {"0"} and statuses(t) == {"0": ("Streaming", 192)}
    assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(192))
    assert sorted(t.lookup([0, 191])["id"].to_pylist()) == [0, 191]
    merges = [i for i in t.timeline() if i.action == "compaction"]
    assert merges, "the merges are instants of their own"
    t.delete(keys=[5])
    s.write(96, batch(500))
    assert t.snapshot().count() == 192
    assert t.validate().ok


def test_a_hand_off_racing_batches_of_the_same_stream_loses_and_duplicates_nothing(
        memory_uri: str) -> None:
    """Batches roll the stream over every few commits while another handle hands finished
    segments off: every batch's rows exactly once, whichever commits first."""
    t = txn.create_table(memory_uri, SCHEMA, properties={
        **STREAMING, "streaming.segment.max_size": "1024", "streaming.auto_handoff": "false"})
    done = threading.Event()
    errors: list[BaseException] = []

    def hand_off() -> None:
        other = txn.open_table(memory_uri)
        while not done.is_set():
            try:
                other.compact("close_streaming")
            except txn.CommitConflictError:
                continue  # a batch changed what it read: the next round hands it off
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return

    worker = threading.Thread(target=hand_off)
    worker.start()
    s = t.stream("job1")
    try:
        for batch_id in range(40):
            s.write(batch_id, batch(batch_id))
    finally:
        done.set()
        worker.join()
    assert not errors, errors
    t.compact("close_streaming")
    assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(40))
    assert "Streaming Finish" not in {x.status for x in t.segments()}
    assert t.validate().ok


def _hand_off_in_child(uri: str, ready: Any, done: Any, results: Any) -> None:
    """A second process handing finished segments off until told to stop; reports its count."""
    try:
        other = txn.open_table(uri)
        ready.set()
        handed = 0
        while not done.is_set():
            try:
                handed += other.compact("close_streaming") is not None
            except txn.CommitConflictError:
                continue  # a batch changed what it read: the next round hands it off
        results.put(handed)
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put(f"{type(exc).__name__}: {exc}")


def test_a_hand_off_in_another_process_racing_batches_loses_and_duplicates_nothing(
        tmp_path: Any) -> None:
    """As above, across processes on local disk: the hand-off's commits and the stream's batches
    are ordered by the table lock and the timeline alone (no in-process state is shared)."""
    import multiprocessing
    import queue

    uri = str(tmp_path / "sink")
    t = txn.create_table(uri, SCHEMA, properties={
        **STREAMING, "streaming.segment.max_size": "1024", "streaming.auto_handoff": "false"})
    context = multiprocessing.get_context("spawn")
    ready, done, results = context.Event(), context.Event(), context.Queue()
    child = context.Process(target=_hand_off_in_child, args=(uri, ready, done, results))
    child.start()
    try:
        assert ready.wait(timeout=120), "the hand-off process did not start"
        s = t.stream("job1")
        for batch_id in range(60):
            s.write(batch_id, batch(batch_id))
        done.set()
        try:
            report = results.get(timeout=120)
        except queue.Empty:
            pytest.fail("the hand-off process did not report")
    finally:
        done.set()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    assert not isinstance(report, str), report
    assert child.exitcode == 0
    t.compact("close_streaming")
    assert sorted(t.to_arrow()["id"].to_pylist()) == list(range(60))
    assert "Streaming Finish" not in {x.status for x in t.segments()}
    assert t.validate().ok


def test_a_fresh_handles_replay_reads_the_streams_record_alone(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted producer's first batch is checked against its record without reading the
    table's live files (whose metadata grows with every file the stream ever wrote, until
    CLEAN FILES purges them): a replay costs the same after 10 batches or 100,000."""
    from txn._context import TableContext

    t = txn.create_table(memory_uri, SCHEMA, properties=STREAMING)
    s = t.stream("job1")
    for batch_id in range(3):
        s.write(batch_id, batch(batch_id))
    asked: list[tuple[str, ...]] = []
    resolve = TableContext.metadata_at

    def recorded(self: TableContext, view: Any, bound: Any,
                 partitions: tuple[str, ...] = ("files", "segments"), travel: Any = None) -> Any:
        asked.append(tuple(partitions))
        return resolve(self, view, bound, partitions, travel)

    monkeypatch.setattr(TableContext, "metadata_at", recorded)
    restarted = txn.open_table(memory_uri).stream("job1")
    assert restarted.write(2, batch(2)) is None
    assert asked and all("files" not in partitions for partitions in asked), asked
    assert restarted.write(3, batch(3)) is not None  # later batches take the usual path
    assert sorted(t.to_arrow()["id"].to_pylist()) == [0, 1, 2, 3]


def test_a_replay_is_skipped_whatever_its_rows(memory_uri: str) -> None:
    """A batch the stream committed already returns None even when its rows would be refused
    (a repeated key, the wrong schema): skipped is skipped. A new batch with them is refused."""
    t = txn.create_table(memory_uri, SCHEMA, record_key="id", properties=STREAMING)
    s = t.stream("job1")
    s.write(0, batch(1))
    s.write(1, batch(2))
    before = t.timeline()
    assert s.write(0, batch(5, 5)) is None
    assert s.write(1, pa.table({"other": [1]})) is None
    assert t.timeline() == before
    with pytest.raises(txn.DuplicateKeyError):
        s.write(2, batch(5, 5))
    with pytest.raises(txn.SchemaMismatchError):
        s.write(2, pa.table({"other": [1]}))


def _as_if_in_another_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """DROP STREAM closes the ``Stream`` objects of its own process; a producer in another
    process is out of its reach. Modelled here by a drop that reaches no ``Stream`` object."""
    from txn._streams import _drop

    monkeypatch.setattr(_drop, "close_running", lambda uri, name: None)


def test_a_dropped_streams_producer_elsewhere_is_refused_and_a_fresh_one_starts_afresh(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 22, item 4: the old producer's next batch used to be accepted and bring the dropped
    stream back (SHOW STREAMS listed it with last_batch_id 4), after which a fresh producer's
    batch 0 returned None, its rows never written."""
    _as_if_in_another_process(monkeypatch)
    t = txn.create_table(memory_uri, SCHEMA, properties={**STREAMING, "streaming.auto_handoff": "false"})
    old = t.stream("job1")
    for batch_id in range(4):
        old.write(batch_id, batch(batch_id))
    other = txn.open_table(memory_uri)  # the table handle of the process that drops it
    other.drop_stream("job1")
    before = t.timeline()
    assert not old.closed
    with pytest.raises(txn.StreamDroppedError, match="job1") as refused:
        old.write(4, batch(4))
    assert isinstance(refused.value, txn.TxnError)
    assert (refused.value.name, refused.value.generation) == ("job1", 0)
    with pytest.raises(txn.StreamDroppedError):
        old.write(2, batch(2))  # a replay of a batch it did commit: the stream is gone all the same
    assert t.timeline() == before, "nothing written"
    assert t.streams() == [] and other.streams() == []

    fresh = other.stream("job1")
    assert fresh.last_batch_id is None
    commit = fresh.write(0, batch(10))
    assert commit is not None and commit.rows_added == 1
    assert fresh.write(0, batch(11)) is None, "its own replay is still skipped"
    with pytest.raises(txn.StreamDroppedError, match="job1"):
        old.write(5, batch(5))  # the old producer stays fenced off the new generation
    assert old.last_batch_id is None, "the new generation's batches are not the old producer's"
    assert [(i.name, i.last_batch_id, i.rows) for i in t.streams()] == [("job1", 0, 1)]
    assert sorted(t.to_arrow()["id"].to_pylist()) == [0, 1, 2, 3, 10]
    assert t.validate().ok


def test_a_producer_opened_before_the_drop_is_refused_at_its_first_write(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``Stream`` belongs to the generation current when it was opened, written or not."""
    _as_if_in_another_process(monkeypatch)
    t = txn.create_table(memory_uri, SCHEMA, properties=STREAMING)
    t.stream("job1").write(0, batch(0))
    idle = txn.open_table(memory_uri).stream("job1")
    t.drop_stream("job1")
    with pytest.raises(txn.StreamDroppedError, match="job1"):
        idle.write(1, batch(1))
    assert t.stream("job1").write(0, batch(2)) is not None


def test_a_drop_committed_while_a_batch_runs_refuses_the_batch_under_the_lock(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The batch read the stream's record before the drop committed: the check at the commit
    point (under the table lock) refuses it, and the instant is rolled back."""
    from txn._streams import _stream

    _as_if_in_another_process(monkeypatch)
    t = txn.create_table(memory_uri, SCHEMA, properties={**STREAMING, "streaming.auto_handoff": "false"})
    s = t.stream("job1")
    s.write(0, batch(0))
    other = txn.open_table(memory_uri)
    step = _stream._step

    def dropped_meanwhile(*args: Any) -> Any:
        other.drop_stream("job1")
        return step(*args)

    monkeypatch.setattr(_stream, "_step", dropped_meanwhile)
    with pytest.raises(txn.StreamDroppedError, match="job1"):
        s.write(1, batch(1))
    monkeypatch.setattr(_stream, "_step", step)
    assert t.streams() == []
    assert sorted(t.to_arrow()["id"].to_pylist()) == [0]
    assert t.stream("job1").write(0, batch(5)) is not None
    assert t.validate().ok


def _write_after_the_drop_in_child(uri: str, opened: Any, dropped: Any, results: Any) -> None:
    """A producer in a process of its own: opens the stream, waits for the drop, writes on."""
    try:
        s = txn.open_table(uri).stream("job1")
        s.write(0, batch(0))
        opened.set()
        assert dropped.wait(timeout=120)
        try:
            s.write(1, batch(1))
            results.put("accepted")
        except txn.StreamDroppedError as exc:
            results.put(f"refused: {exc}")
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put(f"{type(exc).__name__}: {exc}")


def test_a_dropped_streams_producer_in_another_process_is_refused(tmp_path: Any) -> None:
    import multiprocessing

    uri = str(tmp_path / "sink")
    t = txn.create_table(uri, SCHEMA, properties=STREAMING)
    context = multiprocessing.get_context("spawn")
    opened, dropped, results = context.Event(), context.Event(), context.Queue()
    child = context.Process(target=_write_after_the_drop_in_child, args=(uri, opened, dropped, results))
    child.start()
    try:
        assert opened.wait(timeout=120), "the producer process did not start"
        t.drop_stream("job1")
        dropped.set()
        report = results.get(timeout=120)
    finally:
        dropped.set()
        child.join(timeout=60)
        if child.is_alive():
            child.kill()
    assert report.startswith("refused: ") and "job1" in report, report
    assert t.streams() == []
    fresh = t.stream("job1")
    assert fresh.write(0, batch(7)) is not None
    assert sorted(t.to_arrow()["id"].to_pylist()) == [0, 7]


@pytest.mark.parametrize("bad", [2**63, 2**70])
def test_a_batch_id_past_the_stored_range_is_refused(memory_uri: str, bad: int) -> None:
    """Issue 22, item 7: 2**70 raised a bare OverflowError."""
    t = txn.create_table(memory_uri, SCHEMA, properties=STREAMING)
    s = t.stream("job1")
    with pytest.raises(txn.InvalidOptionError, match=rf"batch_id.*{bad}.*{2**63 - 1}"):
        s.write(bad, batch(1))
    assert t.timeline() == [] and s.last_batch_id is None
    assert s.write(2**63 - 1, batch(1)) is not None, "the largest stored batch id is accepted"
    assert s.last_batch_id == 2**63 - 1
