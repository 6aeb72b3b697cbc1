"""Timeline archival meeting a damaged completed file (issue 22, item 8).

Archival cannot move an instant whose completed file does not decode into the archive without
losing what the file says. It keeps that instant active and archives the ones around it;
``validate()`` says so (``archival blocked``, naming the file); a repaired file is archived at
the next archival; an instant past retention (CLEAN FILES' ``clean.retain_commits`` and
``clean.retain_hours``) is archived as damaged, its bytes kept in the archive, so that one damaged
file holds nothing back for good and nothing disappears silently.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import txn
from metatxn import timeline

SCHEMA = pa.schema([("id", pa.int64(), False)])
SMALL_ARCHIVAL = {
    "timeline.archive.trigger": "4",
    "timeline.archive.retain": "2",
    "metadata.compact_after": "3",
    "metadata.retain_commits": "2",
}
#: Retention that is over once three newer commits completed.
SHORT_RETENTION = {**SMALL_ARCHIVAL, "clean.retain_commits": "3", "clean.retain_hours": "0"}
GARBAGE = b"\x01garbage, not an instant file"

pytestmark = pytest.mark.allow_metatxn_warnings  # archival logs what it holds back or archives


def _append(table: txn.Table, count: int) -> None:
    for _ in range(count):
        table.append(pa.table({"id": pa.array([len(table.timeline())], pa.int64())}))


def _timeline(table: txn.Table) -> timeline.Timeline:
    return timeline.Timeline(timeline.open_storage(table.uri))


def _damaged_table(tmp_path: Path, properties: dict[str, str]) -> tuple[txn.Table, timeline.Instant, bytes]:
    """A table whose oldest commit's completed file was overwritten with garbage; returns the
    instant and the file's good bytes."""
    table = txn.create_table(str(tmp_path / "t"), SCHEMA, properties=properties)
    _append(table, 3)
    oldest = _timeline(table).load().completed()[0]
    path = Path(table.uri) / "_timeline" / oldest.file_name
    good = path.read_bytes()
    path.write_bytes(GARBAGE)
    return table, oldest, good


def _blocked(report: txn.ValidationReport) -> list[str]:
    return [p.path for p in report.problems if p.kind == "archival blocked"]


def test_validate_reports_archival_blocked_by_a_damaged_completed_file(tmp_path: Path) -> None:
    table, damaged, _ = _damaged_table(tmp_path, SMALL_ARCHIVAL)
    _append(table, 20)
    active = _timeline(table).load()
    # Within retention (clean.retain_hours is 168 by default): held active, the rest archived.
    assert active.get(damaged.time) == damaged
    assert len(active.completed()) <= 10, "the instants around the damaged one are archived"
    report = table.validate()
    path = f"_timeline/{damaged.file_name}"
    assert _blocked(report) == [path], report
    detail = next(p.detail for p in report.problems if p.kind == "archival blocked")
    assert "Rewrite the file" in detail and "clean.retain_hours" in detail
    assert table.to_arrow().num_rows == 23  # readers carry on


def test_archival_takes_the_instant_once_its_file_is_repaired(tmp_path: Path) -> None:
    table, damaged, good = _damaged_table(tmp_path, SMALL_ARCHIVAL)
    _append(table, 10)
    assert _timeline(table).load().get(damaged.time) == damaged
    assert _blocked(table.validate()) == [f"_timeline/{damaged.file_name}"]

    (Path(table.uri) / "_timeline" / damaged.file_name).write_bytes(good)
    _append(table, 10)
    tl = _timeline(table)
    assert tl.load().get(damaged.time) is None, "archived once repaired"
    assert damaged in tl.history()
    archived = timeline.read_archive(tl.storage)[damaged.time]
    assert archived.damaged is None
    assert tl.read_metadata(damaged, dict)["operation"] == "append"
    assert table.validate().ok


def test_an_instant_past_retention_is_archived_as_damaged_keeping_its_bytes(tmp_path: Path) -> None:
    table, damaged, _ = _damaged_table(tmp_path, SHORT_RETENTION)
    _append(table, 20)
    tl = _timeline(table)
    active = tl.load()
    assert active.get(damaged.time) is None, "past retention the damaged instant holds nothing back"
    assert len(active.completed()) <= 10
    assert damaged in tl.history(), "it is still an instant of the table, completed when it was"
    archived = timeline.read_archive(tl.storage)[damaged.time]
    assert (archived.damaged, archived.completed_at) == (GARBAGE, damaged.completed_at)
    path = f"_timeline/{damaged.file_name}"
    with pytest.raises(timeline.CorruptMetadataError, match=damaged.file_name) as raised:
        tl.read_metadata(damaged, dict)
    assert "archived as damaged" in str(raised.value)
    report = table.validate()
    assert [(p.kind, p.path) for p in report.problems] == [("damaged file", path)], report
    assert "archived as damaged" in report.problems[0].detail
    assert table.to_arrow().num_rows == 23


def test_retention_counts_archived_commits_too(tmp_path: Path) -> None:
    """``clean.retain_commits`` above what archival keeps active: the archived commits newer than
    the damaged instant count toward it, so the instant does leave the active timeline."""
    table, damaged, _ = _damaged_table(tmp_path, {**SHORT_RETENTION, "clean.retain_commits": "12"})
    _append(table, 8)
    assert _timeline(table).load().get(damaged.time) == damaged  # 10 newer commits: retained
    _append(table, 8)
    assert _timeline(table).load().get(damaged.time) is None
