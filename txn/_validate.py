"""``Table.validate``: the metadata table against the truth on storage.

Checks, for the latest snapshot:

* every file the metadata table lists (live, or removed but not yet cleaned) exists, with the
  recorded size, and live files have the recorded row count in their Parquet footer;
* every live file has column statistics, and belongs to a live segment whose row count is the
  sum of its files';
* no data file on storage is unknown to the metadata table, unless a pending instant's marker
  claims it (a write in progress);
* every delete delta listed exists with its recorded size; live ones hold their recorded number
  of positions, all inside a live data file; none on storage is unknown (same marker rule);
* keyed tables: the record index has exactly one live entry per live row, pointing at the file
  and position that hold the key, and no live entry for a key that is not in the table.

Validation is the one operation that lists data folders; reads never do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from indexes import COLUMN_STATS, DELETES, FILES, METADATA_FOLDER, SEGMENTS, live

from ._deltas import DELTA_SUFFIX, LiveDeltas, read_positions
from ._keys import describe, index_keys, repeated
from ._records import Problem, ValidationReport
from ._scan import scan_file
from ._writer import MARKERS_FOLDER, marker_instant

if TYPE_CHECKING:
    from ._table import Table

_NOT_DATA = ("_timeline/", f"{METADATA_FOLDER}/", f"{MARKERS_FOLDER}/")


def validate(table: Table) -> ValidationReport:
    storage = table._storage
    view = table._timeline.load()
    last = view.last_completed()
    completed = {i.time: i.completed_at or "" for i in view.completed()}
    metadata = table._metadata.resolve(completed, last.completed_at if last else None,
                                       partitions=(FILES, SEGMENTS, COLUMN_STATS, DELETES))
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

    assert metadata.deletes is not None
    file_rows = dict(zip(live_files["path"].to_pylist(), live_files["rows"].to_pylist(), strict=True))
    problems += _check_deltas(table, metadata.deletes.to_pylist(), file_rows)
    if table.record_key_columns and last is not None:
        problems += _check_record_index(table, completed, last.completed_at or "", live_files,
                                        LiveDeltas.of(table._store, metadata.deletes))

    known = {row["path"] for row in listed} | set(metadata.deletes["path"].to_pylist())
    # Markers of an instant that is not completed claim their files: a write in progress, or a
    # rollback in progress (its target is already rolled back, its files not yet deleted).
    in_progress = set()
    done = {i.time for i in view.completed()}
    for marker in storage.list(MARKERS_FOLDER):
        if marker_instant(marker) not in done:
            in_progress.add(storage.read(marker).decode())
    for key in storage.list("", recursive=True):
        if key.startswith(_NOT_DATA) or not key.endswith((".parquet", DELTA_SUFFIX)):
            continue
        if key not in known and key not in in_progress:
            problems.append(Problem("unreferenced file", key,
                                    "on storage but in no committed instant or pending write"))
    return ValidationReport(problems=problems, files_checked=len(listed))


def _check_deltas(table: Table, deltas: list[dict[str, object]], file_rows: dict[str, int]) -> list[Problem]:
    problems = []
    for row in deltas:
        path = str(row["path"])
        try:
            size = table._storage.size(path)
        except FileNotFoundError:
            problems.append(Problem("missing delete delta", path, "listed by the metadata table, "
                                                                  "not on storage"))
            continue
        if size != row["size"]:
            problems.append(Problem("size mismatch", path, f"metadata says {row['size']} bytes, "
                                                          f"storage has {size}"))
            continue
        if row["deleted"]:
            continue
        target = str(row["file"])
        if target not in file_rows:
            problems.append(Problem("orphan delete delta", path,
                                    f"a live delta of {target}, which is not a live data file"))
            continue
        try:
            positions = read_positions(table._store, path)
        except (pa.ArrowException, OSError) as exc:
            problems.append(Problem("unreadable file", path, f"not a readable delete delta: {exc}"))
            continue
        if len(positions) != row["rows"]:
            problems.append(Problem("row count mismatch", path, f"metadata says {row['rows']} "
                                                                f"positions, the delta has {len(positions)}"))
        if len(positions) and (positions.min() < 0 or positions.max() >= file_rows[target]):
            problems.append(Problem("bad delete delta", path,
                                    f"positions outside 0..{file_rows[target] - 1} of {target}"))
    return problems


def _check_record_index(table: Table, completed: dict[str, str], bound: str, live_files: pa.Table,
                        deltas: LiveDeltas) -> list[Problem]:
    """Every live row has one index entry at its place; no live entry without a live row."""
    index = table._metadata.record_index
    assert index is not None
    columns = table.record_key_columns
    rows = []
    for path in live_files["path"].to_pylist():
        keys, positions = scan_file(table._store, path, table._schema, filter=None, columns=columns,
                                    deleted=deltas.positions(path))
        located = index_keys(keys, columns)
        rows.append(located.append_column("file", pa.array([path] * keys.num_rows, pa.string()))
                    .append_column("position", pa.array(positions, pa.int64())))
    truth = pa.concat_tables(rows) if rows else index.schema.empty_table().select([*index.keys, "file",
                                                                                     "position"])
    problems = []
    twice = repeated(truth.select(index.keys))
    if twice.num_rows:
        problems.append(Problem("duplicate key", "record_index",
                                f"{twice.num_rows} key(s) held by more than one live row: "
                                f"{describe(twice, columns)}"))
    entries = index.read_all(completed, bound, table._metadata.done_compactions())
    alive = entries.filter(pc.and_(pc.invert(entries["deleted"]),
                                   pc.is_in(entries["file"], value_set=live_files["path"].combine_chunks())))
    at_place = truth.join(alive.select([*index.keys, "file", "position"]),
                          keys=[*index.keys, "file", "position"], join_type="inner")
    if at_place.num_rows != truth.num_rows:
        place = [*index.keys, "file", "position"]
        missing = truth.join(at_place.select(place), keys=place, join_type="left anti")
        problems.append(Problem("record index entry", "record_index",
                                f"{truth.num_rows - at_place.num_rows} live row(s) without an index "
                                f"entry at their place, e.g. keys {describe(missing, columns)}"))
    if alive.num_rows != at_place.num_rows:
        place = [*index.keys, "file", "position"]
        stray = alive.select(place).join(at_place.select(place), keys=place, join_type="left anti")
        problems.append(Problem("record index entry", "record_index",
                                f"{alive.num_rows - at_place.num_rows} live index entr(ies) for no "
                                f"live row, e.g. keys {describe(stray, columns)}"))
    return problems


def _footer_rows(table: Table, path: str) -> int:
    store = table._store
    with store.filesystem.open_input_file(store.full_path(path)) as handle:
        rows: int = pq.ParquetFile(handle).metadata.num_rows
    return rows

