"""The commands that change a table, each one commit: compact, clean, add-segment,
delete-segment and drop-stream.

Each prints what it committed (``--json``: the commit, or the clean's result) and the segments it
made or changed, as SHOW SEGMENTS shows them.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection

from rich.console import RenderableType

from txn import CompactionKind, InvalidOptionError, ProducerKind, Table

from . import _json
from ._progress import working
from ._render import segments_table, show, size, table
from ._shared import Commands, add_command, moment, open_uri, segment_ids, storage_options

COMPACTION_KINDS = (CompactionKind.MINOR, CompactionKind.MAJOR, CompactionKind.CUSTOM,
                    CompactionKind.CLOSE_STREAMING)


def _show_segments(t: Table, ids: Collection[str] = (), *, instant: str | None = None) -> None:
    """The segments named by ``ids`` or created by ``instant``, as SHOW SEGMENTS shows them."""
    chosen = [s for s in t.segments() if s.id in ids or s.instant == instant]
    if chosen:
        show(segments_table(chosen))


def compact(args: argparse.Namespace) -> int:
    t = open_uri(args)
    ids = segment_ids([args.segments], "--segments") if args.segments is not None else None
    before = {s.id for s in t.segments() if s.merged_to is None}
    with working(f"compacting {t.uri} ({args.kind})"):
        t.compact(args.kind, segments=ids)
    # One call may run several compactions (MINOR level by level, one hand-off per finished
    # streaming segment) and returns the last: report each, from what the segments now say.
    after = t.segments()
    done = [(new, sorted((s.id for s in after if s.merged_to == new.id and s.id in before),
                         key=_segment_order))
            for new in sorted(after, key=lambda s: s.instant) if new.id not in before]
    done = [(new, merged) for new, merged in done if merged]
    if args.json:
        _json.emit([{"instant": new.instant, "segment": new.id, "segments_merged": merged,
                     "rows": new.rows} for new, merged in done])
    elif not done:
        show(f"nothing to compact: no segments qualify for a {args.kind} compaction")
    else:
        show("\n".join(f"compaction {new.instant}: segments {', '.join(merged)} -> segment "
                       f"{new.id}: {new.rows:,} rows" for new, merged in done))
        _show_segments(t, {new.id for new, _ in done} | {i for _, merged in done for i in merged})
    return 0


def _segment_order(segment_id: str) -> tuple[int, ...]:
    return tuple(int(part) for part in segment_id.split(".") if part.isdigit())


def clean(args: argparse.Namespace) -> int:
    t = open_uri(args)
    with working(f"cleaning {t.uri}" + (" (dry run)" if args.dry_run else "")):
        result = t.clean(dry_run=args.dry_run, force=args.force)
    if args.json:
        _json.emit(_json.clean(result))
        return 0
    reasons = ", ".join(f"{reason}: {count}" for reason, count in sorted(result.reasons.items())) or "-"
    # What leaves storage and what only moves into the trash are reported apart: the trash still
    # takes its space until clean.trash_hours (or a --force clean) deletes it.
    left = ([f"segment{'s' if len(result.segments) > 1 else ''} {', '.join(result.segments)} "
             f"{'would leave' if args.dry_run else 'left'} SHOW SEGMENTS (metatxn segments "
             "--history lists them)"] if result.segments else [])
    if args.dry_run:
        listing: list[RenderableType] = \
            [table(("File",), ((path,) for path in result.files)), ""] if result.files else []
        show(*listing,
             table(("Size To Be Freed", "To Be Moved To Trash", "Files", "Reasons"),
                   [(size(result.freed_bytes), size(result.trashed_bytes), len(result.files), reasons)],
                   numeric=("Files",)), "", *left, "dry run: nothing was removed")
    else:
        show(table(("Size Freed", "Moved To Trash", "Files", "Reasons", "Trash"),
                   [(size(result.freed_bytes), size(result.trashed_bytes), len(result.files), reasons,
                     result.trash or "-")],
                   numeric=("Files",)), *(["", *left] if left else []))
    return 0


def add_segment(args: argparse.Namespace) -> int:
    t = open_uri(args)
    options = storage_options(args.storage_option, "--storage-option")
    with working(f"adding {args.path} ({args.format})"):
        commit = t.add_segment(args.path, args.format, partition=args.partition,
                               storage_options=options)
    assert commit is not None  # None only for an idempotent add (commit_properties)
    if args.json:
        _json.emit(_json.commit(commit))
        return 0
    show(f"ADD SEGMENT {commit.instant}: {commit.files_added} files, {commit.rows_added:,} rows, "
         "read in place")
    _show_segments(t, instant=commit.instant)
    return 0


def delete_segment(args: argparse.Namespace) -> int:
    ids = segment_ids(args.ids, "segment ids")
    if bool(ids) == (args.before is not None):
        raise InvalidOptionError(
            "delete-segment needs either segment ids or --before, "
            f"got {'both' if ids else 'neither'}; expected for example 'delete-segment URI 0 3' "
            "or 'delete-segment URI --before 2026-01-31'")
    before = moment(args.before, "--before") if args.before is not None else None
    t = open_uri(args)
    commit = t.delete_segments(ids or None, before=before)
    if args.json:
        _json.emit(_json.commit(commit))
        return 0
    show(f"DELETE SEGMENT {commit.instant}: {', '.join(commit.segments_removed)} marked for delete "
         "(CLEAN FILES removes their files)")
    _show_segments(t, commit.segments_removed)
    return 0


def drop_stream(args: argparse.Namespace) -> int:
    t = open_uri(args)
    segment = next((i.segment for i in t.streams()
                    if i.name == args.name and i.kind == ProducerKind.STREAM), None)
    commit = t.drop_stream(args.name)
    if args.json:
        _json.emit(_json.commit(commit))
        return 0
    show(f"DROP STREAM {args.name} {commit.instant}: "
         + (f"its segment {segment} is finished" if segment else "it had no open segment"))
    if segment:
        _show_segments(t, {segment})
    return 0


def register(commands: Commands) -> None:
    kinds = "|".join(COMPACTION_KINDS)
    parser = add_command(commands, "compact", compact,
                         "merge segments into one (ALTER TABLE ... COMPACT)",
                         description="Merge segments into one, CarbonData-style (ALTER TABLE ... "
                                     "COMPACT), with a progress bar on a terminal.",
                         json_help="print the commit as JSON (null: nothing to compact)")
    parser.add_argument("--kind", default=CompactionKind.MINOR, metavar=kinds,
                        help="minor: by count per level; major: by size; custom: the --segments "
                             "given; close_streaming: finished streaming segments to columnar ones "
                             "(default: %(default)s)")
    parser.add_argument("--segments", metavar="IDS", help="with --kind custom: the segment ids to "
                                                         "merge, comma-separated (1,2)")

    parser = add_command(commands, "clean", clean,
                         "CLEAN FILES: remove what no snapshot needs",
                         description="CLEAN FILES: delete the files of Compacted and Marked for "
                                     "Delete segments past the retention (those segments then "
                                     "leave SHOW SEGMENTS: see segments --history), move files "
                                     "of no segment to the table's trash, and show the bytes "
                                     "freed and moved; --dry-run lists it and changes nothing.",
                         json_help="print what was (or would be) removed as JSON")
    parser.add_argument("--dry-run", action="store_true",
                        help="list what would be removed and change nothing")
    parser.add_argument("--force", action="store_true",
                        help="ignore the retention and empty the trash (never what a running "
                             "writer or the current snapshot needs; time travel to before the "
                             "last commit then expires)")

    parser = add_command(commands, "add-segment", add_segment,
                         "ADD SEGMENT: register files, read in place",
                         description="ADD SEGMENT: register existing files as external segment(s) "
                                     "(one per partition folder), read in place, never copied, "
                                     "moved or deleted. --storage-option is for PATH's "
                                     "filesystem (t.add_segment's storage_options); the table's "
                                     "own are --table-storage-option and "
                                     "$METATXN_STORAGE_OPTIONS.",
                         json_help="print the commit as JSON", table_option="--table-storage-option")
    parser.add_argument("path", metavar="PATH", help="the folder of existing files (path or URL)")
    parser.add_argument("--format", default="parquet", metavar="FORMAT",
                        help="parquet, orc, csv or json (default: %(default)s)")
    parser.add_argument("--partition", metavar="SPEC",
                        help="a partitioned table's partition columns with their types, in order, "
                             "as in \"day:int,hour:int\"")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an fsspec option for PATH's filesystem (repeatable; a VALUE that is "
                             "JSON, such as true or 5, is decoded)")

    parser = add_command(commands, "delete-segment", delete_segment,
                         "DELETE SEGMENT: mark segments by id or load time",
                         description="DELETE SEGMENT: mark segments Marked for Delete, by id or "
                                     "loaded before a time; readers stop seeing them at once and "
                                     "CLEAN FILES removes their files later.",
                         json_help="print the commit as JSON")
    parser.add_argument("ids", nargs="*", metavar="IDS", help="segment ids (space- or comma-separated)")
    parser.add_argument("--before", metavar="DATETIME",
                        help="every Success or Streaming Finish segment loaded before this "
                             "ISO-8601 time (local time without an offset, as SHOW SEGMENTS shows)")

    parser = add_command(commands, "drop-stream", drop_stream,
                         "DROP STREAM: finish a stream's open segment",
                         description="DROP STREAM: the stream leaves SHOW STREAMS and its open "
                                     "segment becomes Streaming Finish.",
                         json_help="print the commit as JSON")
    parser.add_argument("name", metavar="NAME", help="the stream's name (see 'metatxn streams')")
