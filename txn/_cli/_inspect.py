"""The commands that look at a table and change nothing: describe, segments, timeline,
changes, partitions, streams and validate."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone

from rich.table import Table as Grid

from metatxn.timeline import parse_time
from txn import InvalidOptionError, Table

from . import _json
from ._progress import working
from ._render import (
    changes_table,
    columns_table,
    moment,
    partitions_table,
    segments_table,
    show,
    streams_table,
    table,
    timeline_table,
    versions_table,
)
from ._shared import Commands, add_command, open_uri


def describe(args: argparse.Namespace) -> int:
    t = open_uri(args)
    history = t.schema_history()
    if args.history:
        if args.json:
            _json.emit([_json.schema_version(v) for v in history])
        else:
            # A version that changed only properties keeps its predecessor's columns: not repeated.
            changed = [v for i, v in enumerate(history)
                       if i == 0 or not v.schema.equals(history[i - 1].schema, check_metadata=True)]
            show(versions_table(history),
                 *(part for v in changed
                   for part in ("", columns_table(v.schema, title=f"Version {v.version} columns"))))
        return 0
    if args.json:
        _json.emit(_json.description(t, history[-1].version))
        return 0
    show(_layout(t, history[-1].version), "",
         table(("Property", "Value"), sorted(t.properties.items()), title="Table properties"), "",
         columns_table(t.schema, title="Columns"))
    return 0


def _layout(t: Table, version: int) -> Grid:
    created = datetime.fromtimestamp(parse_time(t.created_at) / 1000, tz=timezone.utc)
    key = t.record_key if isinstance(t.record_key, str) or t.record_key is None else ", ".join(t.record_key)
    return table(("Table", t.uri), (
        ("Table Id", t.table_id),
        ("Created", f"{moment(created)} (instant {t.created_at})"),
        ("Partitioned By", ", ".join(t.partition_by) or "-"),
        ("Record Key", key or "-"),
        ("Record Index Shards", t.record_index_shards or "-"),
        ("Sort Columns", ", ".join(t.sort_by) or "-"),
        ("Schema Version", version),
    ))


def segments(args: argparse.Namespace) -> int:
    found = open_uri(args).segments(history=args.history)
    if args.json:
        _json.emit([_json.segment(s) for s in found])
    else:
        show(segments_table(found, history=args.history))
    return 0


def timeline(args: argparse.Namespace) -> int:
    t = open_uri(args)
    instants = t.timeline()
    entries = {e.instant: e for e in t.history()}
    if args.json:
        _json.emit([_json.instant(i, entries.get(i.time)) for i in instants])
    else:
        show(timeline_table(instants, entries))
    return 0


def changes(args: argparse.Namespace) -> int:
    """What each instant completed in ``(--since, --until]`` changed, from the change feed's
    summary (``t.changes(since, until).summary()``): the bounds are passed as given, so every
    form ``t.changes`` accepts works here and its errors are reported as they are."""
    scanner = open_uri(args).changes(args.since, args.until)
    found = scanner.summary()
    if args.json:
        _json.emit([_json.change_summary(s) for s in found])
    elif found:
        show(changes_table(found))
    else:
        show(f"no changes: no data instant completed in ({scanner.start}, {scanner.end}]")
    return 0


def partitions(args: argparse.Namespace) -> int:
    t = open_uri(args)
    if not t.partition_by:
        # As Spark, Hive and CarbonData answer SHOW PARTITIONS on such a table.
        raise InvalidOptionError(f"SHOW PARTITIONS is not allowed on the table at {t.uri!r}: it "
                                 "is not partitioned; expected a table created with partition_by")
    found = t.partitions()
    if args.json:
        _json.emit(found)
    else:
        show(partitions_table(found))
    return 0


def streams(args: argparse.Namespace) -> int:
    found = open_uri(args).streams()
    if args.json:
        _json.emit([_json.stream(i) for i in found])
    else:
        show(streams_table(found))
    return 0


def validate(args: argparse.Namespace) -> int:
    """Exit 0 when the metadata table agrees with storage, 1 (each problem listed) otherwise."""
    t = open_uri(args)
    with working(f"validating {t.uri}"):
        report = t.validate()
    if args.json:
        _json.emit(_json.validation(report))
    elif report.ok:
        show(f"ok: {report.files_checked:,} files agree with the metadata table")
    else:
        count = len(report.problems)
        show(table(("Problem", "Path", "Detail"), ((p.kind, p.path, p.detail) for p in report.problems)),
             f"{count} problem{'s' if count != 1 else ''}: the metadata table disagrees with storage "
             f"({report.files_checked:,} files checked)")
    return 0 if report.ok else 1


def register(commands: Commands) -> None:
    parser = add_command(commands, "describe", describe, "show a table's schema, layout and properties",
                         description="Show a table's layout, properties and columns (with their "
                                     "ids), as of its current schema version.")
    parser.add_argument("--history", action="store_true",
                        help="every schema version instead, oldest first: the instant that "
                             "created it, what changed, and its columns with their ids")
    parser = add_command(
        commands, "segments", segments, "SHOW SEGMENTS: each segment's status and sizes",
        description="SHOW SEGMENTS: every segment, newest first, with CarbonData's columns (ID, "
                    "Status, Load Start Time, Load Time Taken, Partition, Data Size, Index Size, "
                    "File Format), then Merged To, Rows and Path (external segments). A Compacted "
                    "or Marked for Delete segment leaves it once CLEAN FILES removed its files.")
    parser.add_argument("--history", action="store_true",
                        help="SHOW HISTORY SEGMENTS: also the segments CLEAN FILES removed, after "
                             "the others, with Visibility false and when they were cleaned")
    add_command(commands, "timeline", timeline, "list every instant of a table and what it did",
                description="Every instant of the table, archived ones included, by requested "
                            "time: its action, state and completion time, and for a completed "
                            "one what it did (t.history()): Operation, Segment, Rows +/- and "
                            "Files +/- (added, removed), Bytes + (written) and Duration (from "
                            "request to completion).")
    parser = add_command(
        commands, "changes", changes, "what each instant changed since an instant",
        description="The change feed's summary (t.changes(since, until).summary()): one row per "
                    "data instant that completed after --since and no later than --until, in "
                    "completion order: its instant, completion time, operation, and the rows it "
                    "inserted, updated (post-images) and deleted. Table services (compaction, "
                    "clean, rollback) change no rows and are not listed.")
    parser.add_argument("--since", required=True, metavar="INSTANT",
                        help="exclusive: an instant time (as 'metatxn timeline' lists them; its "
                             "completion is the bound), an ISO-8601 time (UTC unless it has an "
                             "offset), or 'earliest' (before the first instant)")
    parser.add_argument("--until", metavar="INSTANT",
                        help="inclusive, the same forms (default: the latest completed instant)")
    add_command(commands, "partitions", partitions, "SHOW PARTITIONS: partitions holding live data")
    add_command(commands, "streams", streams, "SHOW STREAMS: the table's streams and producers",
                description="SHOW STREAMS: every stream not dropped, then every idempotent producer "
                            "(app_id). Running means open in the process that shows it.")
    add_command(commands, "validate", validate, "compare metadata with storage; exit 1 on problems",
                description="Compare the metadata table with what is on storage: exit 0 when they "
                            "agree, 1 with every problem listed when they do not.")
