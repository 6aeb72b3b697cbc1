"""``Table.validate``: the metadata table against the truth on storage.

Checks, for the latest snapshot:

* every file the metadata table lists (live, or removed but not yet cleaned) exists, with the
  recorded size, and live files have the recorded row count in their Parquet footer (files
  CLEAN FILES purged are neither: they are in the trash, or gone);
* every page of every live data file decodes, with the table's columns and types;
* every live file has column statistics, and belongs to a live segment whose row count is the
  sum of its files';
* no data file on storage is unknown to the metadata table, unless a pending instant's marker
  claims it (a write in progress) or a completed clean purged it (a leftover of a clean that
  died before deleting it, whose purge record a metadata compaction folded away); the trash
  (``_trash/``) holds no data of the table;
* every delete delta listed exists with its recorded size; live ones hold their recorded number
  of positions, all inside a live data file; none on storage is unknown (same marker rule);
* keyed tables: the record index has exactly one live entry per live row, pointing at the file
  and position that hold the key, and no live entry for a key that is not in the table;
* every file the table keeps decodes: instant files, archives, heartbeats and lock records of
  both timelines, every block and base of the metadata table and of the record index,
  ``retention.json``, data files, delete deltas and markers (``read_marker``'s check); and every
  block a completed instant recorded is there;
* no completed or rolled-back instant's file is too damaged to archive (``archival blocked``:
  archival keeps it active until it is repaired or, on the data timeline, past retention);
* no instant is left pending by a writer that stopped beating (not rolled back yet: recovery
  retries it, but one that keeps failing shows here), and no ``rollback`` instant is pending.

It never raises on damage: each damaged or missing file is a problem that names it.

Validation is the one operation that lists data folders; reads never do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import (
    COLUMN_STATS,
    DELETES,
    FILES,
    METADATA_FOLDER,
    SCHEMAS,
    SEGMENTS,
    STREAMS,
    TableVersion,
    field_id,
    live,
)
from metatxn.indexes._layout import base_path, parse_listing, partition_folder
from metatxn.timeline import (
    ARCHIVE_FOLDER,
    TIMELINE_FOLDER,
    Action,
    CorruptMetadataError,
    ObjectNotFoundError,
    TimelineView,
    TxnError,
    read_archive,
)

from .._context import (
    TableContext,
    progress,
)
from .._files import (
    DELTA_SUFFIX,
    MARKERS_FOLDER,
    RESERVED_FOLDERS,
    LiveDeltas,
    check_data_file,
    file_version,
    is_external,
    marker_instant,
    modified_ms,
    prefixes,
    read_marker,
    read_positions,
    scan_file,
    trash_folder,
)
from .._results import Problem, ProblemKind, ValidationReport
from .._rows import describe, index_keys, repeated
from ._clean import CleanMetadata

#: Folders whose files are not data files of the table: the timelines, the markers, the trash
#: CLEAN FILES moves removed files to (they are no longer the table's), and ``_staging/``, where a
#: Spark write's own writer stages its files before they are published under markers
#: (``txn.spark``); a staged file is never a table file.
_NOT_DATA = prefixes(RESERVED_FOLDERS)


def validate(context: TableContext) -> ValidationReport:
    """Report every disagreement and every damaged or missing file; never raises on damage."""
    storage = context.storage
    problems: list[Problem] = []
    try:
        view = context.timeline.load()
    except TxnError as exc:
        return ValidationReport(problems=[_damaged(exc)])
    problems += [_damaged(exc) for exc in context.timeline.damaged_files()]
    problems += _check_held_back(context)
    problems += _check_pending(context, view)
    last = view.last_completed()
    completed = {i.time: i.completed_at or "" for i in view.completed()}
    try:
        problems += [_damaged(exc) for exc in context.metadata.damaged_files(completed)]
        problems += _check_metadata_timeline(context, completed)
    except TxnError as exc:  # e.g. a file of the metadata timeline that cannot be named
        problems.append(_damaged(_in_metadata(exc)))
    marker_problems, in_progress = _check_markers(context, {i.time for i in view.completed()})
    problems += marker_problems
    try:
        metadata = context.metadata.resolve(completed, last.completed_at if last else None,
                                           partitions=(SCHEMAS, FILES, SEGMENTS, COLUMN_STATS, DELETES))
    except TxnError as exc:
        return ValidationReport(problems=_unique([*problems, _damaged(_in_metadata(exc))]))
    assert metadata.files is not None and metadata.segments is not None
    problems += _check_versions(metadata.versions or {})
    context.schemas_at(metadata.versions)  # every file's version known to check it against
    # Purged records (``deleted`` null) name files CLEAN FILES moved out: they must not exist.
    listed = [row for row in metadata.files.to_pylist() if row["deleted"] is not None]
    live_files = live(metadata.files)
    problems += _check_lost_completions(view, listed)

    moving = _moved_by_running_clean(context, view)
    for row in progress("checking files", listed, len(listed)):
        path = row["path"]
        if is_external(path):
            problems += _check_external(context, row)
            continue
        try:
            size = storage.size(path)
        except FileNotFoundError:
            if not moving(path):
                problems.append(Problem(ProblemKind.MISSING_FILE, path,
                                        "listed by the metadata table, not on storage"))
            continue
        if size != row["size"]:
            problems.append(Problem(ProblemKind.SIZE_MISMATCH, path, f"metadata says {row['size']} bytes, "
                                                          f"storage has {size}"))
            continue
        if not row["deleted"]:
            try:
                rows = check_data_file(context.store, path, context.schema,
                                       written=_written(context, row))
            except TxnError as exc:
                problems.append(_damaged(exc, ProblemKind.UNREADABLE_FILE))
                continue
            if rows != row["rows"]:
                problems.append(Problem(ProblemKind.ROW_COUNT_MISMATCH, path,
                                        f"metadata says {row['rows']} rows, the file has {rows}"))

    assert metadata.column_stats is not None
    with_stats = set(metadata.column_stats["path"].to_pylist())
    for path in live_files["path"].to_pylist():
        if path not in with_stats:
            problems.append(Problem(ProblemKind.MISSING_COLUMN_STATS, path, "a live file without statistics"))

    segment_rows: dict[str, int] = {}
    for row in live_files.to_pylist():
        segment_rows[row["segment"]] = segment_rows.get(row["segment"], 0) + row["rows"]
    for segment_id in segment_rows:
        entry = metadata.segments.get(segment_id)
        if entry is None or not entry.is_live:
            problems.append(Problem(ProblemKind.DEAD_SEGMENT, segment_id,
                                    f"live files belong to segment {segment_id}, which is "
                                    f"{entry.status if entry else 'unknown'}"))
    for entry in metadata.segments.values():
        if entry.is_live and not entry.external and entry.rows != segment_rows.get(entry.id, 0):
            problems.append(Problem(ProblemKind.SEGMENT_ROW_COUNT, entry.id,
                                    f"segment says {entry.rows} rows, its live files hold "
                                    f"{segment_rows.get(entry.id, 0)}"))

    assert metadata.deletes is not None
    file_rows = dict(zip(live_files["path"].to_pylist(), live_files["rows"].to_pylist(), strict=True))
    problems += _check_deltas(context, [row for row in metadata.deletes.to_pylist()
                                        if row["deleted"] is not None], file_rows, moving)
    if context.record_key_columns and last is not None:
        try:
            problems += _check_record_index(context, completed, last.completed_at or "", live_files,
                                            LiveDeltas.of(context.store, metadata.deletes))
        except TxnError as exc:
            problems.append(_damaged(exc))

    known = set(metadata.files["path"].to_pylist()) | set(metadata.deletes["path"].to_pylist())
    # Markers of an instant that is not completed claim their files (``in_progress``).
    unknown = [key for key in storage.list("", recursive=True)
               if not key.startswith(_NOT_DATA) and key.endswith((".parquet", DELTA_SUFFIX))
               and key not in known and key not in in_progress]
    leftovers = _purged_by_cleans(context, view, set(unknown)) if unknown else set()
    for key in unknown:
        if key not in leftovers:
            problems.append(Problem(ProblemKind.UNREFERENCED_FILE, key,
                                    "on storage but in no committed instant or pending write"))
    return ValidationReport(problems=_unique(problems), files_checked=len(listed))


def _damaged(error: TxnError, kind: ProblemKind = ProblemKind.DAMAGED_FILE) -> Problem:
    """A damaged (``kind``) or missing file, or a storage failure, as a problem naming the file."""
    if isinstance(error, CorruptMetadataError):
        kind = ProblemKind.MISSING_FILE if error.found.startswith("no such file") else kind
        return Problem(kind, error.path, f"expected {error.expected}"
                       + (f", found {error.found}" if error.found else ""))
    if isinstance(error, ObjectNotFoundError):
        return Problem(ProblemKind.MISSING_FILE, error.path, str(error))
    return Problem(ProblemKind.UNREADABLE_FILE, getattr(error, "path", "") or "", str(error))


def _unique(problems: list[Problem]) -> list[Problem]:
    """Problems in order, each damaged file reported once."""
    seen: set[tuple[str, str]] = set()
    kept = []
    for problem in problems:
        whole_file = problem.kind in (ProblemKind.DAMAGED_FILE, ProblemKind.MISSING_FILE)
        key = (problem.kind, problem.path) if whole_file \
            else (problem.kind, f"{problem.path}\n{problem.detail}")
        if key not in seen:
            seen.add(key)
            kept.append(problem)
    return kept


def _in_metadata(error: TxnError) -> TxnError:
    """``error`` of the metadata table, naming the file from the table root: the metadata
    timeline names its files ``_timeline/...`` relative to ``_metadata/``."""
    if isinstance(error, CorruptMetadataError) and error.path.startswith(f"{TIMELINE_FOLDER}/"):
        return CorruptMetadataError(f"{METADATA_FOLDER}/{error.path}", error.expected, error.found)
    return error


def _check_held_back(context: TableContext) -> list[Problem]:
    """Archival cannot move an instant whose terminal file does not decode: it stays active
    (the instants around it are archived). Said here, since archival only logs it."""
    problems = []
    try:
        held = context.timeline.held_back()
    except TxnError as exc:
        return [_damaged(exc)]
    for damage in held:
        problems.append(Problem(ProblemKind.ARCHIVAL_BLOCKED, damage.path, (
            f"archival keeps this instant on the active timeline: its file does not decode "
            f"({damage.found}). Rewrite the file with its content and the next archival takes it; "
            "otherwise it is archived as damaged, its bytes kept in the archive, once it is past "
            "retention (clean.retain_commits and clean.retain_hours)")))
    try:
        held = context.metadata.timeline.held_back()
    except TxnError as exc:
        return [*problems, _damaged(_in_metadata(exc))]
    for damage in held:
        problems.append(Problem(ProblemKind.ARCHIVAL_BLOCKED, f"{METADATA_FOLDER}/{damage.path}", (
            f"archival of the metadata timeline keeps this instant active: its file does not "
            f"decode ({damage.found}). Rewrite the file with its content and the next archival "
            "takes it")))
    return problems


def _check_metadata_timeline(context: TableContext, completed: dict[str, str]) -> list[Problem]:
    """The files of the metadata timeline that must be there: the completed file of a
    deltacommit left pending (requested or inflight) whose data instant completed (it completes
    before the data commit point; a deltacommit written whole leaves no trace when deleted), and
    the bases of the newest completed metadata compaction (cleaning never deletes those)."""
    mdt = context.metadata
    view = mdt.timeline.load()
    problems = []
    for instant in view.pending():
        if instant.action == Action.DELTACOMMIT and instant.time in completed:
            problems.append(Problem(
                ProblemKind.MISSING_FILE,
                f"{METADATA_FOLDER}/{TIMELINE_FOLDER}/{instant.time}_<completion>.deltacommit",
                f"the completed file of metadata deltacommit {instant.time}: data instant "
                f"{instant.time} completed, which it does only after its deltacommit did"))
    compactions = [i for i in view.completed() if i.action == Action.COMPACTION]
    if compactions:
        newest = compactions[-1]
        for partition in (FILES, SEGMENTS, COLUMN_STATS, DELETES, STREAMS, SCHEMAS):
            folder = partition_folder(partition)
            bases, logs = parse_listing(mdt.storage.list(folder))
            if any(b.compaction_time == newest.time for b in bases):
                continue
            if partition in (STREAMS, SCHEMAS) and not (bases or logs):
                # Tables from before the partition (or that never changed shape): no base until
                # the next metadata compaction after its first record.
                continue
            if partition == COLUMN_STATS and not mdt.schemas[partition].field("columns").type.num_fields:
                continue  # no column takes statistics: compactions write no base here
            horizon = (mdt.timeline.read_metadata(newest, dict) or {}).get("horizon", "<horizon>")
            problems.append(Problem(
                ProblemKind.MISSING_FILE, base_path(folder, newest.time, str(horizon), mdt.base_format),
                f"the {partition} base of metadata compaction {newest.time}, the newest completed"))
    return problems


def _check_lost_completions(view: TimelineView, listed: list[dict[str, object]]) -> list[Problem]:
    """A pending data instant whose files the metadata table lists lost its completed file: the
    metadata table lists only files of completed instants (a compaction folded them in)."""
    pending = {i.time: i for i in view.pending()}
    lost = {}
    for row in listed:
        instant = pending.get(marker_instant(str(row["path"])))
        if instant is not None:
            lost[instant.time] = instant
    return [Problem(ProblemKind.MISSING_FILE,
                    f"{TIMELINE_FOLDER}/{instant.time}_<completion>.{instant.action}",
                    f"the completed file of instant {instant.time}: the metadata table lists its "
                    "files, which only a completed instant's are; a rollback would delete them")
            for instant in lost.values()]


def _check_markers(context: TableContext, done: set[str]) -> tuple[list[Problem], set[str]]:
    """Every marker names, as ``read_marker`` checks, a file its instant wrote. Also returns the
    files claimed by markers of instants not in ``done``: a write in progress, or a rollback in
    progress (its target is already rolled back, its files not yet deleted)."""
    problems = []
    in_progress = set()
    for marker in context.storage.list(MARKERS_FOLDER):
        try:
            path = read_marker(context.storage, marker)
        except FileNotFoundError:
            continue  # listed, then gone: its write finished meanwhile
        except TxnError as exc:
            problems.append(_damaged(exc))
            continue
        if marker_instant(marker) not in done:
            in_progress.add(path)
    return problems, in_progress


def _check_pending(context: TableContext, view: TimelineView) -> list[Problem]:
    """Pending instants whose writer stopped beating (dead, not yet rolled back), and rollbacks
    left pending: recovery retries them, but one that keeps failing must not go unseen."""
    problems = []
    try:
        expired = {i.time for i in context.timeline.expired(view)}
    except TxnError as exc:
        return [_damaged(exc)]
    for instant in view.pending():
        path = f"{TIMELINE_FOLDER}/{instant.file_name}"
        if instant.time not in expired:
            continue  # its writer still beats: a write or a rollback in progress is no problem
        if instant.action == Action.ROLLBACK:
            problems.append(Problem(ProblemKind.PENDING_ROLLBACK, path, (
                f"rollback instant {instant.time} is not completed and its writer stopped beating: "
                "the next writer retries it (if this stays, see the warnings it logs)")))
        else:
            problems.append(Problem(ProblemKind.EXPIRED_INSTANT, path, (
                f"instant {instant.time} ({instant.action}) is pending and its writer stopped "
                "beating: not rolled back yet (the next writer retries; if this stays, the "
                "rollback keeps failing: see the warnings it logs)")))
    return problems


def _moved_by_running_clean(context: TableContext, view: TimelineView) -> Callable[[str], bool]:
    """Whether a file the metadata table lists is in the trash of a clean that did not complete
    (pending, or rolled back while its rollback still moves files back): moved, not lost. Its
    instant, or its rollback, is reported on its own if its writer died."""
    folders = [trash_folder(i.time) for i in view.instants
               if i.action == Action.CLEAN and not i.is_completed]
    return lambda path: any(context.storage.exists(f"{folder}/{path}") for folder in folders)


def _purged_by_cleans(context: TableContext, view: TimelineView, paths: set[str]) -> set[str]:
    """Those of ``paths`` that a completed clean purged (``CleanMetadata.removed``): leftovers of a
    clean that died between its commit point and deleting them, whose purge record a metadata
    compaction then folded away (a base keeps no record of a purged key). No snapshot needs
    them, and the next clean removes them (as orphans). Read only when unknown files are found:
    the active cleans first, the archived ones only for what those do not name."""
    found: set[str] = set()
    for instant in view.completed():
        if instant.action != Action.CLEAN:
            continue
        try:
            record = context.timeline.read_metadata(instant, CleanMetadata)
        except (FileNotFoundError, TxnError):
            continue  # damaged: reported on its own; what it removed stays unknown
        found.update(paths.intersection(record.removed))
    if found == paths or not context.storage.list(ARCHIVE_FOLDER):
        return found
    try:
        archived = read_archive(context.storage).values()
    except TxnError:
        return found  # a damaged archive is reported on its own
    for entry in archived:
        if entry.action != Action.CLEAN or entry.state != "completed":
            continue
        try:
            record = msgspec.json.decode(entry.metadata, type=CleanMetadata)
        except msgspec.DecodeError:
            continue
        found.update(paths.intersection(record.removed))
    return found


def _check_deltas(context: TableContext, deltas: list[dict[str, object]],
                  file_rows: dict[str, int], moving: Callable[[str], bool]) -> list[Problem]:
    problems = []
    for row in deltas:
        path = str(row["path"])
        try:
            size = context.storage.size(path)
        except FileNotFoundError:
            if not moving(path):
                problems.append(Problem(ProblemKind.MISSING_DELETE_DELTA, path,
                                        "listed by the metadata table, not on storage"))
            continue
        if size != row["size"]:
            problems.append(Problem(ProblemKind.SIZE_MISMATCH, path, f"metadata says {row['size']} bytes, "
                                                          f"storage has {size}"))
            continue
        if row["deleted"]:
            continue
        target = str(row["file"])
        if target not in file_rows:
            problems.append(Problem(ProblemKind.ORPHAN_DELETE_DELTA, path,
                                    f"a live delta of {target}, which is not a live data file"))
            continue
        try:
            positions = read_positions(context.store, path)
        except TxnError as exc:
            problems.append(_damaged(exc, ProblemKind.UNREADABLE_FILE))
            continue
        if len(positions) != row["rows"]:
            problems.append(Problem(ProblemKind.ROW_COUNT_MISMATCH, path, f"metadata says {row['rows']} "
                                                                f"positions, the delta has {len(positions)}"))
        if len(positions) and (positions.min() < 0 or positions.max() >= file_rows[target]):
            problems.append(Problem(ProblemKind.BAD_DELETE_DELTA, path,
                                    f"positions outside 0..{file_rows[target] - 1} of {target}"))
    return problems


def _column_ids(fields: Iterable[pa.Field]) -> Iterator[int | None]:
    """The id of every field of ``fields``, nested ones (struct, list, map children) too."""
    for field in fields:
        yield field_id(field)
        kind = field.type
        if pa.types.is_struct(kind):
            yield from _column_ids(kind)
        elif pa.types.is_map(kind):
            yield from _column_ids([kind.key_field, kind.item_field])
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
            yield from _column_ids([kind.value_field])


def _check_versions(versions: Mapping[int, TableVersion]) -> list[Problem]:
    """The ``schemas`` records (they decoded, or the resolution failed): versions numbered 0, 1,
    2, ... without a gap, each schema's column ids present and unique, ``last_column_id`` at
    least every id and never going back, each ``schema_id`` a version at or before its own."""
    problems = []
    subject = f"{METADATA_FOLDER}/{SCHEMAS}"
    numbers = sorted(versions)
    if numbers and numbers != list(range(len(numbers))):
        problems.append(Problem(ProblemKind.BAD_SCHEMA_VERSION, subject,
                                f"versions {numbers[:10]}; expected 0, 1, 2, ... without a gap"))
    last = 0
    for number in numbers:
        version = versions[number]
        name = f"{subject}: version {number}"
        ids = list(_column_ids(version.schema))
        known = [i for i in ids if i is not None]
        if len(known) != len(ids):
            problems.append(Problem(ProblemKind.BAD_SCHEMA_VERSION, name,
                                    f"{len(ids) - len(known)} field(s) without a column id"))
        repeated_ids = sorted({i for i in known if known.count(i) > 1})
        if repeated_ids:
            problems.append(Problem(ProblemKind.BAD_SCHEMA_VERSION, name,
                                    f"column id(s) {repeated_ids[:10]} on more than one field"))
        if version.last_column_id < max(known, default=0) or version.last_column_id < last:
            problems.append(Problem(
                ProblemKind.BAD_SCHEMA_VERSION, name,
                f"last_column_id {version.last_column_id}; expected at least its largest id "
                f"({max(known, default=0)}) and the previous version's ({last})"))
        last = max(last, version.last_column_id)
        if version.schema_id > number or version.schema_id not in versions:
            problems.append(Problem(ProblemKind.BAD_SCHEMA_VERSION, name,
                                    f"schema_id {version.schema_id}; expected a version at or "
                                    f"before {number}"))
    return problems


def _written(context: TableContext, row: dict[str, Any]) -> pa.Schema | None:
    """The schema file ``row`` (of ``files``) was written with, when not the current one: each
    file is checked against its own version (a file of version 0 lacks a column added since)."""
    schema_id = row.get("schema_id") or 0
    if schema_id == context.schema_id:
        return None
    try:
        return context.schema_of(schema_id)
    except KeyError:
        raise CorruptMetadataError(
            str(row["path"]), "a data file of a table version the schemas partition records",
            f"schema_id {schema_id}; the table's versions: {sorted(context.schemas_at(None))}") from None


def _check_external(context: TableContext, row: dict[str, Any]) -> list[Problem]:
    """An external segment's live file must be as it was added: the table reads it in place,
    and row positions (delete deltas, the record index) mean nothing in a changed file. A
    removed one is not the table's any more (never deleted by it): nothing to check."""
    path = row["path"]
    if row["deleted"]:
        return []
    try:
        filesystem, inner = context.store.external_reader().filesystem(path)
        info = filesystem.info(inner)
    except FileNotFoundError:
        return [Problem(ProblemKind.MISSING_EXTERNAL_FILE, path, "an external segment's file, added in "
                        "place, is gone from its folder")]
    except Exception as exc:  # any backend's failure: the file cannot be checked
        return [Problem(ProblemKind.UNREADABLE_FILE, path, f"{type(exc).__name__}: {exc}")]
    size = int(info.get("size") or 0)
    modified = modified_ms(info)
    version = file_version(info)
    if row.get("version") is not None:  # older records have the millisecond stamp only
        same = version == row["version"]
    else:
        same = row.get("modified_ms") is None or modified is None or modified == row["modified_ms"]
    if size != row["size"] or not same:
        return [Problem(ProblemKind.CHANGED_EXTERNAL_FILE, path,
                        f"added with {row['size']} bytes, modified at {row.get('modified_ms')} ms "
                        f"(version {row.get('version')}); now {size} bytes, modified at {modified} "
                        f"ms (version {version}): the table reads it in place, so its rows changed "
                        "outside the table")]
    try:
        rows = check_data_file(context.store, path, context.schema, row["format"],
                               written=_written(context, row))
    except TxnError as exc:
        return [_damaged(exc, ProblemKind.UNREADABLE_FILE)]
    if rows != row["rows"]:
        return [Problem(ProblemKind.ROW_COUNT_MISMATCH, path,
                        f"metadata says {row['rows']} rows, the file has {rows}")]
    return []


def _check_record_index(context: TableContext, completed: dict[str, str], bound: str, live_files: pa.Table,
                        deltas: LiveDeltas) -> list[Problem]:
    """Every live row has one index entry at its place; no live entry without a live row."""
    index = context.metadata.record_index
    assert index is not None
    columns = context.record_key_columns
    rows = []
    unreadable = []
    records = {row["path"]: row for row in live_files.to_pylist()}
    for path, file_format in zip(live_files["path"].to_pylist(), live_files["format"].to_pylist(),
                                 strict=True):
        try:
            keys, positions = scan_file(context.store, path, context.schema, filter=None,
                                        columns=columns, deleted=deltas.positions(path),
                                        file_format=file_format,
                                        written=_written(context, records[path]))
        except TxnError:
            unreadable.append(path)  # reported by the file checks; its entries are not judged
            continue
        located = index_keys(keys, columns)
        rows.append(located.append_column("file", pa.array([path] * keys.num_rows, pa.string()))
                    .append_column("position", pa.array(positions, pa.int64())))
    truth = pa.concat_tables(rows) if rows else index.schema.empty_table().select([*index.keys, "file",
                                                                                     "position"])
    problems = []
    twice = repeated(truth.select(index.keys))
    if twice.num_rows:
        problems.append(Problem(ProblemKind.DUPLICATE_KEY, "record_index",
                                f"{twice.num_rows} key(s) held by more than one live row: "
                                f"{describe(twice, columns)}"))
    entries = index.read_all(completed, bound, context.metadata.done_compactions(),
                             context.metadata.recorded_shards)
    readable = pc.invert(pc.is_in(live_files["path"], value_set=pa.array(unreadable, pa.string())))
    alive = entries.filter(pc.and_(pc.invert(entries["deleted"]), pc.is_in(
        entries["file"], value_set=live_files.filter(readable)["path"].combine_chunks())))
    at_place = truth.join(alive.select([*index.keys, "file", "position"]),
                          keys=[*index.keys, "file", "position"], join_type="inner")
    if at_place.num_rows != truth.num_rows:
        place = [*index.keys, "file", "position"]
        missing = truth.join(at_place.select(place), keys=place, join_type="left anti")
        problems.append(Problem(ProblemKind.RECORD_INDEX_ENTRY, "record_index",
                                f"{truth.num_rows - at_place.num_rows} live row(s) without an index "
                                f"entry at their place, e.g. keys {describe(missing, columns)}"))
    if alive.num_rows != at_place.num_rows:
        place = [*index.keys, "file", "position"]
        stray = alive.select(place).join(at_place.select(place), keys=place, join_type="left anti")
        problems.append(Problem(ProblemKind.RECORD_INDEX_ENTRY, "record_index",
                                f"{alive.num_rows - at_place.num_rows} live index entr(ies) for no "
                                f"live row, e.g. keys {describe(stray, columns)}"))
    return problems
