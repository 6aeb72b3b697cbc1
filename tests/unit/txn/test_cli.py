"""The metatxn command line."""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow as pa
import pytest

import timeline
import txn
from txn._cli import main
from txn._cli._demo import run


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("timeline", "describe", "demo"):
        assert command in out


def test_timeline_prints_every_instant_with_its_state(
    local_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    txn.create_table(local_uri, pa.schema([("id", pa.int64())]))
    tl = timeline.Timeline(timeline.open_storage(local_uri))
    done = tl.start(tl.request("commit"))
    with tl.lock() as lease:
        done = tl.complete(done, lease=lease)
    pending = tl.request("commit")
    assert main(["timeline", local_uri]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["instant", "action", "state", "completed_at"]
    assert lines[2].split() == [done.time, "commit", "completed", done.completed_at]
    assert lines[3].split() == [pending.time, "commit", "requested"]


def test_describe_shows_layout_and_columns(local_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    txn.create_table(local_uri, pa.schema([("id", pa.int64()), ("day", pa.date32())]),
                     partition_by=["day"], record_key="id")
    assert main(["describe", local_uri]) == 0
    out = capsys.readouterr().out
    assert "['day']" in out and "key       id" in out and "date32[day]" in out


def test_a_missing_table_is_a_one_line_error_not_a_traceback(
    tmp_path, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    assert main(["timeline", str(tmp_path / "absent")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("metatxn: error: no metatxn table at")
    assert "Traceback" not in err


@pytest.mark.spark
def test_the_demo_loads_reads_time_travels_and_validates(
    tmp_path, capsys: pytest.CaptureFixture[str]  # type: ignore[no-untyped-def]
) -> None:
    import txn.spark

    spark = txn.spark.local_session()  # the running session (the Spark tests' one) if there is one
    table = run(str(tmp_path), rows_per_load=2_000, spark=spark)
    out = capsys.readouterr().out
    assert spark.sparkContext._jsc is not None, "a session passed in is left running"
    # four loads compacted into 0.1 (CarbonData's walk-through), the upsert's segment, the
    # added folder's three partition folders; the delete writes delete deltas, no segment; the
    # clean moves the compacted segments' files
    external = [(s.id, s.format, s.external) for s in table.segments() if s.external]
    assert external == [("7", "parquet", True), ("6", "parquet", True), ("5", "parquet", True)]
    assert [(s.id, s.status, s.merged_to) for s in table.segments() if not s.external] == [
        ("4", "Success", None), ("3", "Compacted", "0.1"), ("2", "Compacted", "0.1"),
        ("1", "Compacted", "0.1"), ("0.1", "Success", None), ("0", "Compacted", "0.1")]
    assert [i.action for i in table.timeline()] == ["commit"] * 4 + ["compaction"] + ["commit"] * 3 + [
        "clean"]
    for step in ("== load", "== compact MINOR", "== upsert", "== delete", "== ADD SEGMENT",
                 "== selective read", "== time travel", "== CLEAN FILES", "== SHOW SEGMENTS",
                 "== timeline", "== validate"):
        assert step in out
    assert "untouched by CLEAN FILES" in out
    assert "== streaming" in out and "rate_job  Running" in out, "SHOW STREAMS while it runs"
    assert "the query is stopped" in out and "each batch exactly once" in out
    events = txn.open_table(os.path.join(str(tmp_path), "events"))
    assert [(s.status, s.merged_to) for s in events.segments()] == [("Success", None),
                                                                    ("Compacted", "0.1")]
    assert events.streams() == [] and events.validate().ok
    assert "segments 0, 1, 2, 3 -> segment 0.1" in out
    assert "SnapshotExpiredError" in out and "oldest reachable" in out, "clean expired the last load"
    assert not table.clean().files, "nothing else to clean"
    assert "created by this write" in out, "the first Spark write creates the table"
    assert (table.partition_by, table.record_key, table.sort_by) == (
        ["o_orderstatus"], "o_orderkey", ["o_orderdate"])
    assert "rows replaced through delete deltas" in out and "record index: order" in out
    assert "skipped without being opened" in out and "ok: " in out
    assert "then: 8,000 rows" in out, "time travel before the clean"
    rows = table.snapshot().count()
    assert txn.spark.read(spark, table.uri).count() == rows
    assert table.validate().ok
    again = run(str(tmp_path), rows_per_load=2_000, spark=spark)
    assert again.snapshot().count() == rows, "the demo reruns from scratch"
    assert table.snapshot().count() == rows, "a stale Table object does not mix in the old table"


def test_the_console_script_entry_point_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "txn", "--help"], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0 and "timeline" in result.stdout
