"""The ``metatxn`` command line, run as users run it: the installed executable in a subprocess.

Tables are built with the Python API in ``tmp_path``; each command's output and exit status are
checked, and what a command changed is checked through the Python API afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import txn
from metatxn import timeline
from tests.unit.txn.helpers import SCHEMA, data_files_on_storage, rows
from txn._cli._demo import run
from txn._cli._render import partition_cell, plain, size, table
from txn._results import load_time_taken

EXECUTABLE = shutil.which("metatxn") or str(Path(sys.executable).parent / "metatxn")
#: Any ANSI escape sequence (colour, cursor movement).
ANSI = re.compile(r"\x1b\[")
#: What would make rich colour its output if the command line let rich decide by itself.
FORCING_COLOUR = {"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "TERM": "xterm-256color"}
#: Keep time travel short, so that CLEAN FILES has something to remove right after a compaction.
SHORT_RETENTION = {"clean.retain_commits": "1", "clean.retain_hours": "0"}


def metatxn(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EXECUTABLE, *args], capture_output=True, text=True, check=False,
                          env={**os.environ, **(env or {})}, timeout=120)


def ok(*args: str) -> str:
    """The stdout of a command that must succeed with nothing on stderr."""
    result = metatxn(*args)
    assert (result.returncode, result.stderr) == (0, ""), result
    return result.stdout


def ok_json(*args: str) -> object:
    return json.loads(ok(*args, "--json"))


def assert_one_line_error(result: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit 1, nothing on stdout, and on stderr exactly the error line and its help line."""
    assert result.returncode == 1, result
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith("metatxn: error: ") and message in lines[0], lines[0]
    assert lines[1].startswith("metatxn: help: "), lines[1]
    assert "Traceback" not in result.stderr


def body(output: str) -> list[list[str]]:
    """The rows of a plain table (below its header and dashes), cells split on 2+ spaces."""
    lines = output.splitlines()
    dashes = next(i for i, line in enumerate(lines) if line.startswith("--"))
    return [re.split(r"\s{2,}", line.strip()) for line in lines[dashes + 1:] if line.strip()]


@pytest.fixture
def loaded(tmp_path: Path) -> txn.Table:
    """Four loads of ten rows, partitioned by region (eu, us, eu, us)."""
    t = txn.create_table(str(tmp_path / "orders"), SCHEMA, partition_by=["region"], record_key="id",
                         properties=SHORT_RETENTION)
    for load in range(4):
        t.append(rows(range(load * 10, load * 10 + 10), region=("eu", "us")[load % 2]))
    return t


def test_the_executable_is_installed_and_its_help_lists_every_command() -> None:
    result = metatxn("--help", env={"COLUMNS": "80"})
    assert result.returncode == 0
    # argparse puts a name longer than its column (delete-segment) on a line of its own
    listed = dict(re.findall(r"^    (\S+)(?: +|\n {18})(\S.*)$", result.stdout, re.MULTILINE))
    assert set(listed) == {"describe", "segments", "timeline", "changes", "partitions", "streams",
                           "compact", "clean", "validate", "add-segment", "delete-segment",
                           "drop-stream", "demo"}
    assert all(listed.values()), "each command has a one-line help"
    unknown = metatxn("frobnicate", "x")
    assert unknown.returncode == 2 and "invalid choice" in unknown.stderr, "argparse's usage error"


def test_segments_shows_carbondata_columns_in_plain_text_when_not_a_terminal(
    loaded: txn.Table,
) -> None:
    loaded.compact("minor")
    result = metatxn("segments", loaded.uri, env=FORCING_COLOUR)
    assert (result.returncode, result.stderr) == (0, "")
    assert not ANSI.search(result.stdout), "no escape codes in a pipe, even with FORCE_COLOR"
    header = re.split(r"\s{2,}", result.stdout.splitlines()[0])
    assert header == ["ID", "Status", "Load Start Time", "Load Time Taken", "Partition", "Data Size",
                      "Index Size", "File Format", "Merged To", "Rows", "Path"]
    table_rows = body(result.stdout)
    assert [(r[0], r[1], r[8]) for r in table_rows] == [
        ("3", "Compacted", "0.1"), ("2", "Compacted", "0.1"), ("1", "Compacted", "0.1"),
        ("0.1", "Success", "NA"), ("0", "Compacted", "0.1")]
    segment_3 = table_rows[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", segment_3[2])
    assert re.fullmatch(r"(\d+H)?(\d+M)?(\d+(\.\d+)?S)?", segment_3[3])
    assert segment_3[4] == "{region=us}" and segment_3[7] == "parquet" and segment_3[9] == "10"
    assert re.fullmatch(r"\d+\.\d\dKB|\d+\.0B", segment_3[5]), "human-readable like CarbonData"
    assert all(line == line.rstrip() for line in result.stdout.splitlines()), "no trailing spaces"

    listed = ok_json("segments", loaded.uri)
    assert isinstance(listed, list)
    assert [(s["id"], s["status"], s["merged_to"]) for s in listed] == [
        (s.id, s.status, s.merged_to) for s in loaded.segments()]
    first = listed[0]
    assert isinstance(first["data_size"], int) and first["data_size"] == loaded.segments()[0].data_size
    assert datetime.fromisoformat(first["load_start"]) == loaded.segments()[0].load_start
    assert first["partitions"] == ["region=us"] and first["external"] is False


def test_timeline_lists_every_instant_and_its_state(loaded: txn.Table) -> None:
    tl = timeline.Timeline(timeline.open_storage(loaded.uri))
    pending = tl.request("commit")  # a write that has not completed (yet)
    instants = loaded.timeline()
    assert instants[-1].time == pending.time
    out = ok("timeline", loaded.uri)
    # issue 25 added what each instant did after these four columns (test below)
    assert re.split(r"\s{2,}", out.splitlines()[0])[:4] == ["Instant", "Action", "State", "Completed At"]
    assert [cells[:4] for cells in body(out)] == [[i.time, i.action, i.state, i.completed_at or "NA"]
                                                 for i in instants]
    assert body(out)[-1][:4] == [pending.time, "commit", "requested", "NA"]
    listed = ok_json("timeline", loaded.uri)
    assert isinstance(listed, list)
    assert [{k: i[k] for k in ("time", "action", "state", "completed_at")} for i in listed] == [
        {"time": i.time, "action": i.action, "state": i.state, "completed_at": i.completed_at}
        for i in instants]
    assert isinstance(listed, list) and listed[-1]["completed_at"] is None


def test_timeline_shows_what_each_completed_instant_did(loaded: txn.Table) -> None:
    """Operation, Segment, Rows +/-, Files +/-, Bytes +, Duration from ``t.history()``; ``NA``
    for an instant that did not complete; ``--json`` has every ``HistoryEntry`` field."""
    loaded.delete(keys=[1, 2])
    loaded.compact("custom", segments=["0", "1"])
    pending = timeline.Timeline(timeline.open_storage(loaded.uri)).request("commit")
    history = {e.instant: e for e in loaded.history()}
    out = ok("timeline", loaded.uri)
    assert re.split(r"\s{2,}", out.splitlines()[0]) == [
        "Instant", "Action", "State", "Completed At", "Operation", "Segment", "Rows +/-",
        "Files +/-", "Bytes +", "Duration"]
    shown = {cells[0]: cells[4:] for cells in body(out)}
    assert shown.keys() == {i.time for i in loaded.timeline()}
    for instant, e in history.items():
        assert shown[instant][:4] == [e.operation, e.segment or "NA", f"+{e.rows_added} -{e.rows_deleted}",
                                      f"+{e.files_added} -{e.files_removed}"]
        assert shown[instant][4] == size(e.bytes_added)
        assert re.fullmatch(r"(\d+(\.\d+)?S)", shown[instant][5]), shown[instant]
    assert shown[pending.time] == ["NA"] * 6
    delete = next(e for e in history.values() if e.operation == "delete")
    assert shown[delete.instant][:3] == ["delete", "NA", "+0 -2"]
    compaction = next(e for e in history.values() if e.operation == "compact")
    # the 18 live rows of segments 0 (eu) and 1 (us) rewritten, one file per partition
    assert shown[compaction.instant][:4] == ["compact", compaction.segment, "+18 -18", "+2 -2"]

    listed = ok_json("timeline", loaded.uri)
    assert isinstance(listed, list)
    by_time = {i["time"]: i for i in listed}
    for instant, e in history.items():
        expected = {k: list(v) if isinstance(v, tuple) else v
                    for k, v in msgspec.structs.asdict(e).items() if k not in ("instant", "action")}
        assert {k: by_time[instant][k] for k in expected} == expected
        assert by_time[instant]["time"] == instant and by_time[instant]["action"] == e.action
    assert by_time[pending.time]["operation"] is None and by_time[pending.time]["bytes_added"] is None
    assert set(by_time[pending.time]) == set(by_time[compaction.instant])


def test_describe_shows_layout_properties_and_columns(loaded: txn.Table) -> None:
    out = ok("describe", loaded.uri)
    assert re.search(r"^Partitioned By\s+region$", out, re.MULTILINE)
    assert re.search(r"^Record Key\s+id$", out, re.MULTILINE)
    assert re.search(r"^clean\.retain_commits\s+1$", out, re.MULTILINE)
    # issue 24 adds each column's id (last) to the Columns table and to --json's schema entries
    assert re.search(r"^day\s+date32\[day\]\s+True\s+\d+$", out, re.MULTILINE), "brackets printed as they are"
    described = ok_json("describe", loaded.uri)
    assert isinstance(described, dict)
    assert (described["partition_by"], described["record_key"], described["properties"]) == (
        ["region"], "id", SHORT_RETENTION)
    assert described["schema"][0] == {"name": "id", "type": "int64", "nullable": False, "id": 1}


def test_describe_shows_the_current_version_and_history_shows_every_version(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "shapes"), pa.schema([
        pa.field("id", pa.int64(), nullable=False), ("amt", pa.int32()),
        ("addr", pa.struct([("city", pa.string())]))]), record_key="id")
    t.append(pa.table({"id": [1], "amt": pa.array([5], pa.int32()), "addr": [{"city": "x"}]}))
    added = t.add_columns([pa.field("note", pa.string())])
    with t.update_schema() as u:
        u.rename_column("amt", "amount").alter_column("amount", pa.int64()).add_column("addr.zip", pa.int32())
    assert u.commit is not None
    properties = t.set_properties({"clean.retain_hours": "24"})

    out = ok("describe", t.uri)
    assert re.search(r"^Schema Version\s+3$", out, re.MULTILINE)
    columns = body(out.split("Columns\n", 1)[1])
    assert columns == [["id", "int64", "False", "1"], ["amount", "int64", "True", "2"],
                       ["addr", "struct<city: string, zip: int32>", "True", "3"],
                       ["addr.city", "string", "True", "4"], ["addr.zip", "int32", "True", "6"],
                       ["note", "string", "True", "5"]], "nested fields by their dotted path"
    described = ok_json("describe", t.uri)
    assert isinstance(described, dict) and described["version"] == 3
    assert [(c["name"], c["id"]) for c in described["schema"][2]["fields"]] == [("city", 4), ("zip", 6)]

    history = ok("describe", t.uri, "--history")
    versions = history.split("\n\n")
    assert [row[:1] + row[2:] for row in body(versions[0])] == [
        ["0", "create table"], ["1", "add column note string"],
        ["2", "rename column amt to amount; alter column amount type int64; add column addr.zip int32"],
        ["3", "set properties clean.retain_hours=24"]]
    instants = [row[1] for row in body(versions[0])]
    assert instants[0] == "NA" and instants[1:] == [added.instant, u.commit.instant, properties.instant]
    # version 3 changed only properties: its columns are version 2's, not shown twice
    assert [v.splitlines()[0] for v in versions[1:]] == [
        "Version 0 columns", "Version 1 columns", "Version 2 columns"]
    assert ["amt", "int32", "True", "2"] in body(versions[1])
    assert ["amount", "int64", "True", "2"] in body(versions[3])

    listed = ok_json("describe", t.uri, "--history")
    assert isinstance(listed, list) and [v["version"] for v in listed] == [0, 1, 2, 3]
    assert listed[0]["instant"] is None and listed[1]["changes"] == ["add column note string"]
    assert [(c["name"], c["type"], c["id"]) for c in listed[2]["schema"]] == [
        ("id", "int64", 1), ("amount", "int64", 2), ("addr", "struct<city: string, zip: int32>", 3),
        ("note", "string", 5)]
    assert listed[3]["properties"] == {"clean.retain_hours": "24"} and listed[3]["record_key"] == "id"


def test_partitions_lists_the_partition_values_that_hold_live_data(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "daily"), SCHEMA, partition_by=["region", "day"])
    t.append(rows(range(3), region="us", day=date(2026, 1, 2)))
    t.append(pa.concat_tables([rows(range(3, 5), region="eu", day=date(2026, 1, 1)),
                               rows(range(5, 7), region="us", day=date(2026, 1, 2))]))
    assert body(ok("partitions", t.uri)) == [["region=eu/day=2026-01-01"], ["region=us/day=2026-01-02"]]
    assert ok_json("partitions", t.uri) == [{"region": "eu", "day": "2026-01-01"},
                                            {"region": "us", "day": "2026-01-02"}]
    # SHOW SEGMENTS's Partition column: the first partition, CarbonData-style, and ", ..." for more
    assert [r[4] for r in body(ok("segments", t.uri))] == ["{region=eu,day=2026-01-01}, ...",
                                                           "{region=us,day=2026-01-02}"]


def test_streams_lists_and_drop_stream_finishes_the_open_segment(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "events"), pa.schema([("v", pa.int64())]),
                         properties={"streaming": "true", "streaming.auto_handoff": "false"})
    t.stream("job1").write(0, pa.table({"v": [1, 2, 3]}))
    (listed,) = body(ok("streams", t.uri))
    assert listed[:6] == ["job1", "stream", "Stopped", "0", "0", "3"], "not running in that process"
    infos = ok_json("streams", t.uri)
    assert isinstance(infos, list) and len(infos) == 1
    info = infos[0]
    assert (info["name"], info["segment"], info["last_batch_id"], info["rows"]) == ("job1", "0", 0, 3)
    assert datetime.fromisoformat(info["started"]).tzinfo is not None

    out = ok("drop-stream", t.uri, "job1")
    assert "DROP STREAM job1" in out and re.search(r"^0\s+Streaming Finish", out, re.MULTILINE)
    assert t.streams() == [] and [s.status for s in t.segments()] == ["Streaming Finish"]

    handed_off = ok_json("compact", t.uri, "--kind", "close_streaming")
    assert isinstance(handed_off, list) and [c["segments_merged"] for c in handed_off] == [["0"]]
    assert [(s.id, s.status) for s in t.segments()] == [("0.1", "Success"), ("0", "Compacted")]


def test_compact_merges_segments_and_reports_the_commit(loaded: txn.Table) -> None:
    out = ok("compact", loaded.uri, "--kind", "custom", "--segments", "1,3")
    assert "segments 1, 3 -> segment 1.1" in out
    assert re.search(r"^1\.1\s+Success", out, re.MULTILINE), "the new segment, as SHOW SEGMENTS"
    assert {s.id: s.status for s in loaded.segments()} == {
        "0": "Success", "1": "Compacted", "1.1": "Success", "2": "Success", "3": "Compacted"}

    # MINOR needs four segments of one level (compaction.level_threshold "4,3"): 0 and 2 only
    assert ok_json("compact", loaded.uri) == []
    assert ok("compact", loaded.uri) == "nothing to compact: no segments qualify for a minor compaction\n"
    done = ok_json("compact", loaded.uri, "--kind", "MAJOR")  # CarbonData's spelling works too
    assert isinstance(done, list) and len(done) == 1
    assert (done[0]["segment"], done[0]["segments_merged"], done[0]["rows"]) == ("0.1", ["0", "1.1", "2"], 40)
    assert datetime.strptime(done[0]["instant"], "%Y%m%d%H%M%S%f")
    assert [s.status for s in loaded.segments()].count("Success") == 1
    assert loaded.snapshot().count() == 40 and loaded.validate().ok


def test_clean_lists_in_a_dry_run_then_removes_with_the_bytes_freed(loaded: txn.Table) -> None:
    loaded.compact("minor")
    before = data_files_on_storage(loaded.uri)
    out = ok("clean", loaded.uri, "--dry-run")
    files, summary, note = out.split("\n\n")
    listed = [r[0] for r in body(files)]
    would_free = loaded.clean(dry_run=True)
    assert set(would_free.files) <= set(listed) and len(would_free.files) == 4
    assert body(summary) == [[size(would_free.bytes), "0.0B", "4", "compacted: 4"]]
    assert note == ("segments 0, 1, 2, 3 would leave SHOW SEGMENTS (metatxn segments --history "
                    "lists them)\ndry run: nothing was removed\n")
    assert data_files_on_storage(loaded.uri) == before, "a dry run changes nothing"

    cleaned = ok_json("clean", loaded.uri)
    assert isinstance(cleaned, dict)
    assert (cleaned["dry_run"], cleaned["bytes"], cleaned["reasons"]) == (
        False, would_free.bytes, {"compacted": 4})
    assert (cleaned["freed_bytes"], cleaned["trashed"], cleaned["segments"]) == (
        would_free.bytes, [], ["0", "1", "2", "3"])
    assert sorted(cleaned["files"]) == sorted(would_free.files)
    assert len(data_files_on_storage(loaded.uri)) == len(before) - 4
    assert body(ok("clean", loaded.uri)) == [["0.0B", "0.0B", "0", "-", "-"]], "nothing left to free"


def test_clean_reports_bytes_moved_to_the_trash_apart_from_bytes_freed(loaded: txn.Table) -> None:
    """Issue 22, item 11: files of no segment go to the trash; they are not freed space."""
    loaded.compact("minor")
    folder = next(Path(loaded.uri).glob("region=eu"))
    stale = folder / f"part-0-09999-0123456789abcdef_{loaded.timeline()[0].time}.parquet"
    stale.write_bytes(b"x" * 3000)
    freed = loaded.clean(dry_run=True).freed_bytes
    out = ok("clean", loaded.uri)
    [[size_freed, moved, files, reasons, trash]] = body(out.split("\n\n")[0])
    assert (size_freed, moved, files) == (size(freed), size(3000), "5")
    assert reasons == "compacted: 4, orphan: 1" and trash.startswith("_trash/")
    assert "segments 0, 1, 2, 3 left SHOW SEGMENTS" in out
    assert (Path(loaded.uri) / trash / stale.relative_to(loaded.uri)).exists()


def test_segments_history_lists_what_clean_files_removed(loaded: txn.Table) -> None:
    """Issue 22, item 10: after CLEAN FILES, ``metatxn segments`` shows only 0.1, as CarbonData's
    SHOW SEGMENTS does; ``--history`` lists the compacted segments too, with their final status,
    Visibility false and when they were cleaned."""
    loaded.compact("minor")
    ok("clean", loaded.uri)
    assert [(r[0], r[1]) for r in body(ok("segments", loaded.uri))] == [("0.1", "Success")]
    assert [s["id"] for s in ok_json("segments", loaded.uri)] == ["0.1"]
    out = ok("segments", loaded.uri, "--history")
    header = re.split(r"\s{2,}", out.splitlines()[0])
    assert header[-2:] == ["Visibility", "Cleaned At"]
    shown = body(out)
    assert [(r[0], r[1], r[8], r[-2]) for r in shown] == [
        ("0.1", "Success", "NA", "true"), ("3", "Compacted", "0.1", "false"),
        ("2", "Compacted", "0.1", "false"), ("1", "Compacted", "0.1", "false"),
        ("0", "Compacted", "0.1", "false")]
    assert shown[0][-1] == "NA" and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", shown[1][-1])
    listed = ok_json("segments", loaded.uri, "--history")
    assert isinstance(listed, list)
    clean = next(i for i in loaded.timeline() if i.action == "clean")
    assert [(s["id"], s["cleaned_instant"]) for s in listed] == [
        ("0.1", None), *((i, clean.time) for i in ("3", "2", "1", "0"))]


def test_add_segment_registers_a_folder_in_place(loaded: txn.Table, tmp_path: Path) -> None:
    folder = tmp_path / "legacy"
    for region in ("eu", "apac"):
        (folder / f"region={region}").mkdir(parents=True)
        pq.write_table(rows(range(1000 + len(region), 1002 + len(region)), region=None)
                       .drop_columns(["region"]), folder / f"region={region}" / "part-0.parquet")
    out = ok("add-segment", loaded.uri, str(folder), "--format", "parquet",
             "--partition", "region:string", "--storage-option", "auto_mkdir=false")
    assert "ADD SEGMENT" in out and "4 rows" in out
    external = [s for s in loaded.segments() if s.external]
    assert sorted(p for s in external for p in s.partitions) == ["region=apac", "region=eu"]
    assert {s.id for s in external} <= {r[0] for r in body(out)}, "the new segments are shown"
    assert loaded.snapshot().count() == 44

    refused = metatxn("add-segment", loaded.uri, str(folder), "--format", "parquet")
    assert_one_line_error(refused, "partition")
    assert loaded.snapshot().count() == 44


def test_delete_segment_by_ids_and_before_a_time(loaded: txn.Table) -> None:
    commit = ok_json("delete-segment", loaded.uri, "0,1", "2")
    assert isinstance(commit, dict) and commit["segments_removed"] == ["0", "1", "2"]
    # without an offset, local time: the time zone SHOW SEGMENTS shows Load Start Time in. In
    # New York (UTC-5 or -4) a minute from now, local, read as UTC would lie hours in the past
    # and mark nothing.
    new_york = {"TZ": "America/New_York"}
    soon = (datetime.now(ZoneInfo("America/New_York")) + timedelta(minutes=1)).strftime(
        "%Y-%m-%d %H:%M:%S")
    result = metatxn("delete-segment", loaded.uri, "--before", soon, env=new_york)
    assert (result.returncode, result.stderr) == (0, ""), result
    out = result.stdout
    assert "3 marked for delete" in out and re.search(r"^3\s+Marked for Delete", out, re.MULTILINE)
    assert [s.status for s in loaded.segments()] == ["Marked for Delete"] * 4
    assert loaded.snapshot().count() == 0


def test_a_compaction_call_that_runs_several_reports_each(tmp_path: Path) -> None:
    """MINOR compacts level by level: eight loads are two level-1 compactions in one call."""
    t = txn.create_table(str(tmp_path / "eight"), SCHEMA)
    for load in range(8):
        t.append(rows(range(load * 10, load * 10 + 10)))
    out = ok("compact", t.uri)
    assert "segments 0, 1, 2, 3 -> segment 0.1: 40 rows" in out
    assert "segments 4, 5, 6, 7 -> segment 4.1: 40 rows" in out
    assert {s.id for s in t.segments() if s.status == "Success"} == {"0.1", "4.1"}


def test_partitions_are_shown_as_the_folders_name_them(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("region", pa.string()), ("flag", pa.bool_())])
    t = txn.create_table(str(tmp_path / "parts"), schema, partition_by=["region", "flag"])
    t.append(pa.table({"id": [1, 2, 3], "region": [None, "a/b", "eu"], "flag": [True, False, True]},
                      schema=schema))
    shown = [cells[0] for cells in body(ok("partitions", t.uri))]
    assert sorted(shown) == ["region=__HIVE_DEFAULT_PARTITION__/flag=true", "region=a%2Fb/flag=false",
                             "region=eu/flag=true"]
    unpartitioned = txn.create_table(str(tmp_path / "flat"), SCHEMA)
    unpartitioned.append(rows(range(3)))
    assert_one_line_error(metatxn("partitions", unpartitioned.uri), "it is not partitioned")


def test_validate_exits_1_and_names_each_problem_of_a_damaged_table(loaded: txn.Table) -> None:
    assert ok("validate", loaded.uri).startswith("ok: 4 files agree")
    lost = data_files_on_storage(loaded.uri)[0]
    os.remove(os.path.join(loaded.uri, lost))
    result = metatxn("validate", loaded.uri)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert any(lost in cells for cells in body(result.stdout)), result.stdout
    assert "1 problem" in result.stdout
    as_json = metatxn("validate", loaded.uri, "--json")
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and report["ok"] is False
    assert [p["path"] for p in report["problems"]] == [lost]


@pytest.mark.allow_metatxn_warnings  # archival logs the instant it holds back
def test_validate_says_archival_is_blocked_by_a_damaged_completed_file(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, properties={
        "timeline.archive.trigger": "4", "timeline.archive.retain": "2"})
    t.append(rows([0]))
    first = timeline.Timeline(timeline.open_storage(t.uri)).load().completed()[0]
    damaged = f"_timeline/{first.file_name}"
    Path(t.uri, damaged).write_bytes(b"\x01 not an instant file")
    for i in range(1, 8):
        t.append(rows([i]))
    result = metatxn("validate", t.uri)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert ["archival blocked", damaged] in [cells[:2] for cells in body(result.stdout)], result.stdout
    as_json = metatxn("validate", t.uri, "--json")
    report = json.loads(as_json.stdout)
    assert as_json.returncode == 1 and report["ok"] is False
    blocked = [p for p in report["problems"] if p["kind"] == "archival blocked"]
    assert [p["path"] for p in blocked] == [damaged]
    assert "Rewrite the file" in blocked[0]["detail"]


@pytest.mark.parametrize(("args", "message"), [
    (("compact", "{uri}", "--kind", "sideways"), "compaction kind 'sideways'"),
    (("compact", "{uri}", "--kind", "custom", "--segments", "1,,2"), "--segments: '1,,2'"),
    (("compact", "{uri}", "--kind", "custom", "--segments", "99"), "no segment 99"),
    (("delete-segment", "{uri}", "42"), "Invalid segment id: 42"),
    (("delete-segment", "{uri}", "--before", "last tuesday"), "--before: 'last tuesday' is not a date"),
    (("delete-segment", "{uri}", "--before", "0001-01-01"), "--before: '0001-01-01' is not a date"),
    (("delete-segment", "{uri}"), "needs either segment ids or --before, got neither"),
    (("drop-stream", "{uri}", "nope"), "no stream 'nope'"),
    (("add-segment", "{uri}", "{uri}", "--storage-option", "anon"), "--storage-option: 'anon' is not"),
    (("add-segment", "{uri}", "/no/such/folder", "--partition", "region:string"), "/no/such/folder"),
    (("segments", "{uri}/absent"), "no metatxn table at"),
    (("timeline", "nope://bucket/t"), "unsupported table location 'nope://bucket/t'"),
])
def test_a_user_mistake_is_one_error_line_and_a_help_line_and_changes_nothing(
    loaded: txn.Table, args: tuple[str, ...], message: str,
) -> None:
    before = loaded.timeline()
    assert_one_line_error(metatxn(*(a.format(uri=loaded.uri) for a in args)), message)
    assert loaded.timeline() == before


def test_the_help_line_is_the_hint_the_error_carries_or_the_commands_help(loaded: txn.Table) -> None:
    missing = metatxn("streams", loaded.uri + "-absent").stderr.splitlines()
    assert missing[1] == "metatxn: help: create it with txn.create_table(uri, schema)"
    unknown = metatxn("drop-stream", loaded.uri, "nope").stderr.splitlines()
    assert unknown[1] == "metatxn: help: run 'metatxn drop-stream --help'"


def on_a_terminal(*args: str, columns: int = 200) -> tuple[int, str]:
    """Run ``metatxn args`` with stdout and stderr on a pseudo-terminal; its status and output."""
    import pty

    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns)}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen([EXECUTABLE, *args], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    return process.wait(timeout=60), output.decode()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a pseudo-terminal")
def test_on_a_terminal_tables_are_drawn_with_rich_and_long_work_shows_progress(
    loaded: txn.Table,
) -> None:
    status, text = on_a_terminal("segments", loaded.uri)
    assert status == 0
    assert ANSI.search(text) and "╭" in text, "rich's box and styles"
    assert "Success" in text and "Load Start Time" in text
    # too narrow for eleven columns: one record after the other, nothing cut short
    status, text = on_a_terminal("segments", loaded.uri, columns=80)
    plain_text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert status == 0 and "…" not in plain_text and "-[ 4 ]-" in plain_text
    assert re.search(r"Load Start Time\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", plain_text)
    status, text = on_a_terminal("validate", loaded.uri)
    assert status == 0
    assert "validating" in text, "the progress bar, erased when the work is done"
    assert "checking files" in text and "4/4" in text, "the library's own steps, counted"
    assert text.rstrip().endswith("ok: 4 files agree with the metadata table")


def test_values_are_shown_as_carbondata_shows_them() -> None:
    assert [size(n) for n in (912, 1260, 4_718_592, -1, None)] == [
        "912.0B", "1.23KB", "4.50MB", "NA", "NA"]
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert [load_time_taken(start, start + timedelta(milliseconds=ms)) for ms in (7026, 63_200, 0, 7_200_000)
            ] == ["7.026S", "1M3.2S", "0S", "2H"]
    assert load_time_taken(start, None) == "NA"
    assert load_time_taken(start, start - timedelta(seconds=1)) == "NA", "clocks that disagree"
    assert [partition_cell(p) for p in ([], ["a=1/b=x"], ["a=1/b=x", "a=2/b=y"])] == [
        "NA", "{a=1,b=x}", "{a=1,b=x}, ..."]
    text = plain(table(("name", "n"), [("[bold]x[/bold]", 1)], numeric=("n",)))
    assert text.splitlines() == ["name            n", "--------------- -", "[bold]x[/bold]  1"]


def test_the_module_entry_point_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "txn", "--help"], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0 and "segments" in result.stdout


# `long`: CI runs the same job as `make demo` (which ends with validate()); this test checks its
# output step by step, 30-50 s of the default run's budget.
@pytest.mark.long
@pytest.mark.spark
def test_the_demo_loads_reads_time_travels_and_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import txn.spark

    spark = txn.spark.local_session()  # the running session (the Spark tests' one) if there is one
    table = run(str(tmp_path), rows_per_load=2_000, spark=spark)
    out = capsys.readouterr().out
    assert spark.sparkContext._jsc is not None, "a session passed in is left running"
    # four loads compacted into 0.1 (CarbonData's walk-through), the upsert's segment, the
    # added folder's three partition folders; the delete writes delete deltas, no segment; the
    # clean deletes the compacted segments' files: they leave SHOW SEGMENTS for its history,
    # and of the walk-through's segments only 0.1 is shown, as in CarbonData
    external = [(s.id, s.format, s.external) for s in table.segments() if s.external]
    assert external == [("7", "parquet", True), ("6", "parquet", True), ("5", "parquet", True)]
    assert [(s.id, s.status, s.merged_to) for s in table.segments() if not s.external] == [
        ("4", "Success", None), ("0.1", "Success", None)]
    assert [(s.id, s.status, s.merged_to) for s in table.segments(history=True) if not s.visible] == [
        ("3", "Compacted", "0.1"), ("2", "Compacted", "0.1"), ("1", "Compacted", "0.1"),
        ("0", "Compacted", "0.1")]
    assert "SHOW HISTORY SEGMENTS adds 3, 2, 1, 0" in out
    assert [i.action for i in table.timeline()] == ["commit"] * 4 + ["compaction"] + ["commit"] * 3 + [
        "clean"]
    for step in ("== load", "== compact MINOR", "== upsert", "== delete", "== change feed", "== ADD SEGMENT",
                 "== selective read", "== time travel", "== CLEAN FILES", "== SHOW SEGMENTS",
                 "== timeline", "== validate"):
        assert step in out
    assert "untouched by CLEAN FILES" in out
    # the downstream job: since the last load, the upsert and the delete (not the compaction)
    feed = out.split("== change feed", 1)[1].split("\n== ", 1)[0]
    assert [cells[2] for cells in body(feed.split("\n", 1)[1])[:2]] == ["upsert", "delete"]
    assert "update_preimage" in feed and "update_postimage" in feed
    assert "the compaction in between changed no row" in feed and "0 rows so far" in feed
    # SHOW SEGMENTS through the command line's renderer: CarbonData's columns, then ours
    assert re.search(r"^ID\s+Status\s+Load Start Time\s+Load Time Taken\s+Partition\s+Data Size\s+"
                     r"Index Size\s+File Format\s+Merged To\s+Rows\s+Path$", out, re.MULTILINE)
    assert re.search(r"^0\.1\s+Success\s", out, re.MULTILINE)
    assert "== streaming" in out and re.search(r"^rate_job\s+stream\s+Running", out, re.MULTILINE), (
        "SHOW STREAMS while it runs")
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
    assert not ANSI.search(out)
    rows_now = table.snapshot().count()
    assert txn.spark.read(spark, table.uri).count() == rows_now
    assert table.validate().ok
    again = run(str(tmp_path), rows_per_load=2_000, spark=spark)
    assert again.snapshot().count() == rows_now, "the demo reruns from scratch"
    assert table.snapshot().count() == rows_now, "a stale Table object does not mix in the old table"
