"""Long operations report how far they have come to a watcher (the command line's progress bars),
and run the same with nobody watching."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

import txn
from tests.unit.txn.helpers import SCHEMA, rows
from txn._context import watched

#: CLEAN FILES may remove what the compaction replaced at once.
SHORT_RETENTION = {"clean.retain_commits": "1", "clean.retain_hours": "0", "clean.trash_hours": "0"}


def watching(work: object) -> dict[str, list[tuple[int, int]]]:
    """Run ``work()`` watched; every report, by what it is about."""
    reports: dict[str, list[tuple[int, int]]] = {}

    def report(what: str, done: int, total: int) -> None:
        reports.setdefault(what, []).append((done, total))

    with watched(report):
        work()  # type: ignore[operator]
    return reports


def finished(steps: list[tuple[int, int]], total: int) -> None:
    """Reports count up from 0 to ``total``, never past it."""
    assert steps[0] == (0, total) and steps[-1] == (total, total)
    assert [done for done, _ in steps] == sorted(done for done, _ in steps)


def test_compaction_validate_and_clean_report_their_steps(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, properties=SHORT_RETENTION)
    for load in range(4):
        t.append(rows(range(load * 10, load * 10 + 10)))

    compaction = watching(lambda: t.compact("minor"))
    finished(compaction["reading files"], 4)
    finished([(0, 40), *compaction["rewriting rows"]], 40)

    checks = watching(t.validate)
    finished(checks["checking files"], 5)  # four compacted files and the new one

    cleaned = watching(t.clean)
    finished(cleaned["deleting files"], 4)  # expired compacted files are deleted, not trashed
    assert t.validate().ok and t.snapshot().count() == 40


def test_add_segment_reports_the_footers_it_reads(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    folder.mkdir()
    for part in range(3):
        pq.write_table(rows(range(part * 5, part * 5 + 5)), folder / f"part-{part}.parquet")
    t = txn.create_table(str(tmp_path / "t"), SCHEMA)
    added = watching(lambda: t.add_segment(str(folder), "parquet"))
    finished(added["reading file footers"], 3)
    assert t.snapshot().count() == 15

