"""Tables for the command line and the demo: styled on a terminal, plain text otherwise.

Every table is a :class:`rich.table.Table` built here and printed with :func:`show`. On a
terminal it gets rich's box, colours and the terminal's width; when stdout is not a terminal
(a pipe, a file, a test's capture) it is printed as plain text with no ANSI escape codes: a
header line, a line of dashes, then one line per row, columns separated by at least two spaces,
no trailing spaces and no wrapping, so that ``grep`` and ``awk`` see stable lines. The plain
layout is part of the command line's interface; the terminal layout is not.

SHOW SEGMENTS is rendered as CarbonData shows it (ID, Status, Load Start Time, Load Time Taken,
Partition, Data Size, Index Size, File Format) followed by what metatxn adds (Merged To, Rows,
Path). Times are shown in the local time zone, as CarbonData shows them in the driver's.
"""

from __future__ import annotations

import copy
import io
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone

import pyarrow as pa
from rich import get_console
from rich.box import ROUNDED, Box
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from metatxn.indexes import field_id, nested_fields
from metatxn.timeline import Instant, parse_time
from txn import ChangeSummary, HistoryEntry, SchemaVersion, Segment, SegmentStatus, StreamInfo

from .._files import hive_folder
from .._results import load_time_taken, segment_size

#: CarbonData's placeholder for a value that is not known (no end time, no partition, ...).
NA = "NA"

#: The plain layout: no edges, a dashed line under the header, one space between columns
#: (plus each cell's right padding: two in all).
_PLAIN_BOX = Box("    \n    \n -  \n    \n    \n -  \n    \n    \n", ascii=True)
#: Wide enough that no cell of a plain table is ever wrapped: its lines are as long as its rows.
_PLAIN_WIDTH = 1_000_000

_STATUS_STYLES = {
    SegmentStatus.SUCCESS: "green",
    SegmentStatus.COMPACTED: "dim",
    SegmentStatus.MARKED_FOR_DELETE: "red",
    SegmentStatus.INSERT_IN_PROGRESS: "yellow",
    SegmentStatus.STREAMING: "cyan",
    SegmentStatus.STREAMING_FINISH: "blue",
    "Running": "green",
    "Stopped": "dim",
    "completed": "green",
    "inflight": "yellow",
    "requested": "yellow",
    "rolledback": "red",
}


def terminal() -> bool:
    """Whether stdout is a terminal (styled tables, progress) rather than a pipe or a file."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], *,
          numeric: Collection[str] = (), title: str | None = None) -> Table:
    """A table of ``rows`` under ``headers``; the ``numeric`` columns are right-aligned.

    Cells are shown as ``str(value)`` (None as empty), never read as rich markup: a value such
    as ``['day']`` or ``[bold]`` is printed as it is.
    """
    grid = Table(box=ROUNDED, header_style="bold", title=title, title_justify="left",
                 title_style="bold")
    for header in headers:
        # Fold rather than cut: a cell is never shortened with "…" (see also _fitted).
        grid.add_column(Text(header), justify="right" if header in numeric else "left",
                        overflow="fold")
    for row in rows:
        grid.add_row(*(_cell(value) for value in row))
    return grid


def _fitted(renderable: RenderableType, console: Console) -> RenderableType:
    """``renderable``, or, for a table wider than the terminal, its rows one after the other as
    ``column  value`` lines (psql's expanded display): eleven SHOW SEGMENTS columns squeezed
    into 80 characters would fold every cell into a narrow, unreadable stack."""
    if not isinstance(renderable, Table) or len(renderable.columns) <= 2 \
            or Measurement.get(console, console.options.update(max_width=_PLAIN_WIDTH),
                               renderable).maximum <= console.width:
        return renderable
    columns = renderable.columns
    headers = [c.header if isinstance(c.header, Text) else Text(str(c.header)) for c in columns]
    records: list[RenderableType] = []
    if renderable.title is not None:
        records.append(Text(str(renderable.title), style="bold"))
    for index in range(renderable.row_count):
        record = Table(box=None, show_header=False, padding=(0, 1), title=f"-[ {index + 1} ]-",
                       title_justify="left", title_style="dim")
        record.add_column(style="bold", no_wrap=True)
        record.add_column(overflow="fold")
        for header, column in zip(headers, columns, strict=True):
            record.add_row(header, list(column.cells)[index])
        records.append(record)
    return Group(*records)


def _cell(value: object) -> Text:
    if isinstance(value, Text):
        return value
    text = "" if value is None else str(value)
    return Text(text, style=_STATUS_STYLES.get(text, ""))


def plain(renderable: RenderableType) -> str:
    """``renderable`` as plain text (the layout used when stdout is not a terminal)."""
    if isinstance(renderable, Table):
        renderable = _plain_table(renderable)
    buffer = io.StringIO()
    console = Console(file=buffer, width=_PLAIN_WIDTH, color_system=None, force_terminal=False,
                      force_jupyter=False, force_interactive=False, no_color=True,
                      highlight=False, markup=False, emoji=False)
    console.print(renderable)
    # rich pads every cell to its column's width; the padding of the last column is noise.
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def _plain_table(grid: Table) -> Table:
    flat = copy.copy(grid)
    flat.box = _PLAIN_BOX
    flat.show_edge = False
    flat.pad_edge = False
    flat.padding = (0, 1, 0, 0)
    return flat


def show(*renderables: RenderableType) -> None:
    """Print each of ``renderables`` on stdout: styled on a terminal, plain text otherwise.

    A ``str`` is printed as it is, never read as rich markup.
    """
    renderables = tuple(Text(r) if isinstance(r, str) else r for r in renderables)
    if terminal():
        console = get_console()
        for renderable in renderables:
            console.print(_fitted(renderable, console))
        return
    for renderable in renderables:
        sys.stdout.write(plain(renderable))
    sys.stdout.flush()


# -- values --------------------------------------------------------------------------------------

def size(num_bytes: int | None) -> str:
    """A size as CarbonData's SHOW SEGMENTS shows it: ``912.0B``, ``1.23KB``, ...; ``NA`` unknown."""
    return segment_size(num_bytes)


def moment(at: datetime | None) -> str:
    """A time in the local time zone to the millisecond (``2026-01-31 17:59:40.819``), or ``NA``."""
    if at is None:
        return NA
    return at.astimezone().strftime("%Y-%m-%d %H:%M:%S.") + f"{at.microsecond // 1000:03d}"


def partition_cell(partitions: Sequence[str]) -> str:
    """CarbonData's Partition column: the first partition as ``{day=1,hour=2}``, with ``, ...``
    when the segment has more; ``NA`` for an unpartitioned segment."""
    if not partitions:
        return NA
    first = "{" + partitions[0].replace("/", ",") + "}"
    return first + (", ..." if len(partitions) > 1 else "")


# -- the SHOW commands ---------------------------------------------------------------------------

SEGMENT_HEADERS = ("ID", "Status", "Load Start Time", "Load Time Taken", "Partition", "Data Size",
                   "Index Size", "File Format", "Merged To", "Rows", "Path")


#: What SHOW HISTORY SEGMENTS adds (CarbonData's ``Visibility``, and when CLEAN FILES hid it).
HISTORY_HEADERS = ("Visibility", "Cleaned At")


def segments_table(segments: Iterable[Segment], *, history: bool = False) -> Table:
    """SHOW SEGMENTS, newest first as ``Table.segments()`` lists them.

    External segments (ADD SEGMENT) have no index of their own: Index Size is ``NA``, and Path
    is where their files are read in place (``NA`` for the table's own segments). ``history``:
    SHOW HISTORY SEGMENTS, with the Visibility and Cleaned At columns.
    """
    return table((*SEGMENT_HEADERS, *(HISTORY_HEADERS if history else ())), (
        (s.id, s.status, moment(s.load_start), load_time_taken(s.load_start, s.load_end),
         partition_cell(s.partitions), size(s.data_size), NA if s.external else size(s.index_size),
         s.format, s.merged_to or NA, f"{s.rows:,}", s.path or NA,
         *((str(s.visible).lower(), moment(s.cleaned)) if history else ()))
        for s in segments), numeric=("Data Size", "Index Size", "Rows"))


TIMELINE_HEADERS = ("Instant", "Action", "State", "Completed At", "Operation", "Segment",
                    "Rows +/-", "Files +/-", "Bytes +", "Duration")


def timeline_table(instants: Iterable[Instant], entries: Mapping[str, HistoryEntry]) -> Table:
    """Every instant: its (requested) time, action, state and completion time, then what a
    completed one did (``entries``: ``Table.history()`` by instant): operation, segment, rows
    and files added and removed (``+10 -2``), bytes added, and the time from its request to its
    completion as SHOW SEGMENTS' Load Time Taken shows it. ``NA`` where it did not complete."""
    return table(TIMELINE_HEADERS, (
        (i.time, i.action, i.state, i.completed_at or NA, *_did(entries.get(i.time)))
        for i in instants), numeric=("Bytes +", "Duration"))


def _did(entry: HistoryEntry | None) -> tuple[str, ...]:
    if entry is None:
        return (NA,) * 6
    start = datetime.fromtimestamp(parse_time(entry.instant) / 1000, tz=timezone.utc)
    return (entry.operation or NA, entry.segment or NA,
            f"+{entry.rows_added:,} -{entry.rows_deleted:,}",
            f"+{entry.files_added:,} -{entry.files_removed:,}", size(entry.bytes_added),
            load_time_taken(start, start + timedelta(milliseconds=entry.duration_ms)))


CHANGES_HEADERS = ("Instant", "Completed At", "Operation", "Inserted", "Updated", "Deleted")


def changes_table(summaries: Iterable[ChangeSummary]) -> Table:
    """``metatxn changes``: per instant of the window, in completion order, the rows it
    inserted, updated (post-images: each update also has its pre-image) and deleted."""
    return table(CHANGES_HEADERS, (
        (s.instant, s.completed_at, s.operation, f"{s.inserted:,}", f"{s.updated:,}", f"{s.deleted:,}")
        for s in summaries), numeric=("Inserted", "Updated", "Deleted"))


def partitions_table(partitions: Iterable[dict[str, object]]) -> Table:
    """SHOW PARTITIONS as Hive and CarbonData show it: one ``col=value/col=value`` per row, each
    value as the table's folders name it (null as ``__HIVE_DEFAULT_PARTITION__``, ``/`` and
    other unsafe characters %-escaped), so a row is unambiguous."""
    return table(("Partition",),
                 (("/".join(hive_folder(c, v) for c, v in p.items()),) for p in partitions))


def streams_table(streams: Iterable[StreamInfo]) -> Table:
    """SHOW STREAMS: every stream not dropped, then every idempotent producer (kind ``app``)."""
    return table(("Stream Name", "Kind", "Status", "Segment", "Last Batch Id", "Rows", "Start Time",
                  "Last Update"),
                 ((i.name, i.kind, i.status, i.segment or NA,
                   NA if i.last_batch_id is None else i.last_batch_id, f"{i.rows:,}",
                   moment(i.started), moment(i.updated)) for i in streams),
                 numeric=("Last Batch Id", "Rows"))


# -- schemas -------------------------------------------------------------------------------------

def columns_table(schema: pa.Schema, *, title: str) -> Table:
    """Every column with its type, nullability and id, then (right after it) each nested field
    as a dotted path (``addr.city``, ``tags.element``, ``m.key``): the names ``rename_column``
    and ``drop_columns`` take. A column without an id shows an empty Id."""
    return table(("Column", "Type", "Nullable", "Id"),
                 ((path, f.type, f.nullable, field_id(f)) for path, f in _fields(schema, "")),
                 numeric=("Id",), title=title)


def _fields(fields: Iterable[pa.Field], prefix: str) -> Iterable[tuple[str, pa.Field]]:
    for f in fields:
        path = prefix + f.name
        yield path, f
        yield from _fields(nested_fields(f.type), path + ".")


def versions_table(versions: Iterable[SchemaVersion]) -> Table:
    """Every schema version, oldest first: the instant that created it (``NA`` for version 0,
    the table's creation) and what it changed, one change after the other."""
    return table(("Version", "Instant", "Changes"),
                 ((v.version, v.instant or NA, "; ".join(v.changes)) for v in versions),
                 numeric=("Version",))
