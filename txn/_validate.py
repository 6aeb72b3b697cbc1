"""``Table.validate``: the metadata table against the truth on storage.

Checks, for the latest snapshot:

* every file the metadata table lists (live, or removed but not yet cleaned) exists, with the
  recorded size, and live files have the recorded row count in their Parquet footer;
* every live file has column statistics, and belongs to a live segment whose row count is the
  sum of its files';
* no data file on storage is unknown to the metadata table, unless a pending instant's marker
  claims it (a write in progress).

Validation is the one operation that lists data folders; reads never do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from indexes import COLUMN_STATS, FILES, METADATA_FOLDER, SEGMENTS, live

from ._records import Problem, ValidationReport
from ._writer import MARKERS_FOLDER

if TYPE_CHECKING:
    from ._table import Table

_NOT_DATA = ("_timeline/", f"{METADATA_FOLDER}/", f"{MARKERS_FOLDER}/")


def validate(table: Table) -> ValidationReport:
    storage = table._storage
    view = table._timeline.load()
    last = view.last_completed()
    completed = {i.time: i.completed_at or "" for i in view.completed()}
    metadata = table._metadata.resolve(completed, last.completed_at if last else None,
                                       partitions=(FILES, SEGMENTS, COLUMN_STATS))
    assert metadata.files is not None and metadata.segments is not None
    problems: list[Problem] = []
    listed = metadata.files.to_pylist()
    live_files = live(metadata.files)

    for row in listed:
        path = row["path"]
        try:
            size = storage.size(path)
        except FileNotFoundError:
            problems.append(Problem("missing file", path, "listed by the metadata table, not on storage"))
            continue
        if size != row["size"]:
            problems.append(Problem("size mismatch", path, f"metadata says {row['size']} bytes, "
                                                          f"storage has {size}"))
            continue
        if not row["deleted"]:
            try:
                rows = _footer_rows(table, path)
            except (pa.ArrowException, OSError) as exc:
                problems.append(Problem("unreadable file", path, f"not a readable Parquet file: {exc}"))
                continue
            if rows != row["rows"]:
                problems.append(Problem("row count mismatch", path,
                                        f"metadata says {row['rows']} rows, the file has {rows}"))

    assert metadata.column_stats is not None
    with_stats = set(metadata.column_stats["path"].to_pylist())
    for path in live_files["path"].to_pylist():
        if path not in with_stats:
            problems.append(Problem("missing column stats", path, "a live file without statistics"))

    segment_rows: dict[str, int] = {}
    for row in live_files.to_pylist():
        segment_rows[row["segment"]] = segment_rows.get(row["segment"], 0) + row["rows"]
    for segment_id in segment_rows:
        entry = metadata.segments.get(segment_id)
        if entry is None or not entry.is_live:
            problems.append(Problem("dead segment", segment_id,
                                    f"live files belong to segment {segment_id}, which is "
                                    f"{entry.status if entry else 'unknown'}"))
    for entry in metadata.segments.values():
        if entry.is_live and not entry.external and entry.rows != segment_rows.get(entry.id, 0):
            problems.append(Problem("segment row count", entry.id,
                                    f"segment says {entry.rows} rows, its live files hold "
                                    f"{segment_rows.get(entry.id, 0)}"))

    known = {row["path"] for row in listed}
    # Markers of an instant that is not completed claim their files: a write in progress, or a
    # rollback in progress (its target is already rolled back, its files not yet deleted).
    in_progress = set()
    done = {i.time for i in view.completed()}
    for marker in storage.list(MARKERS_FOLDER):
        if marker.rsplit("_", 1)[-1].removesuffix(".parquet") not in done:
            in_progress.add(storage.read(marker).decode())
    for key in storage.list("", recursive=True):
        if key.startswith(_NOT_DATA) or not key.endswith(".parquet"):
            continue
        if key not in known and key not in in_progress:
            problems.append(Problem("unreferenced file", key,
                                    "on storage but in no committed instant or pending write"))
    return ValidationReport(problems=problems, files_checked=len(listed))


def _footer_rows(table: Table, path: str) -> int:
    store = table._store
    with store.filesystem.open_input_file(store.full_path(path)) as handle:
        rows: int = pq.ParquetFile(handle).metadata.num_rows
    return rows

