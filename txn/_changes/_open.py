"""Making a change feed: the window's bounds, its plan, and the reader of its parts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pyarrow as pa

from metatxn.indexes import DELETES, FILES, SCHEMAS, TableVersion
from metatxn.timeline import InvalidOptionError, TimelineView

from .._context import TableContext, latest_version
from ._plan import FileRecords, plan_window
from ._read import ChangeReader
from ._scanner import ChangeScanner
from ._window import bounds, check_readable


def changes(context: TableContext, start: object, end: object = None, *,
            columns: Sequence[str] | None = None, filter: object = None,
            batch_size: int | None = None) -> ChangeScanner:
    """See :meth:`txn.Table.changes`."""
    if not isinstance(columns, (list, tuple, type(None))):
        raise InvalidOptionError(f"columns must be a list of table columns, got {columns!r}")
    view = context.timeline.load()
    start_bound, end_bound, at_latest = bounds(context, view, start, end)
    check_readable(context, start_bound, start)
    latest = view.last_completed()
    # The metadata table is read only at its latest state (incrementally cached by the handle):
    # it holds every table version, and the records of files removed since the window's start
    # (CLEAN FILES purges only records of files removed before its floor, which the window's
    # start is at or after). Metadata cleaning therefore never limits a feed.
    bound = latest.completed_at if latest is not None else None
    versions = context.metadata_at(view, bound, (SCHEMAS,)).versions or {}
    version = (latest_version(versions, context.base_version) if at_latest
               else _version_at(context, view, versions, end_bound))
    key = version.record_key
    record_key = [] if key is None else [key] if isinstance(key, str) else list(key)
    reader = ChangeReader(uri=context.uri, storage_options=context.storage_options,
                          versions=context.schemas_at(versions), schema_id=version.schema_id,
                          partition_by=version.partition_by, record_key=record_key,
                          store=context.store,
                          external_options=context.store.external_reader().options)

    def records() -> tuple[pa.Table, pa.Table]:
        metadata = context.metadata_at(view, bound, (FILES, DELETES))
        assert metadata.files is not None and metadata.deletes is not None
        return metadata.files, metadata.deletes

    window = plan_window(context, start_bound, end_bound, bool(record_key), FileRecords(records))
    return ChangeScanner(window, reader, columns, filter, batch_size,
                         check_retained=lambda: check_readable(context, start_bound, start))


def _version_at(context: TableContext, view: TimelineView, versions: Mapping[int, TableVersion],
                end: str) -> TableVersion:
    """The newest table version whose instant completed at or before ``end`` (a window ending
    in the past returns the schema of its end, as time travel to it does)."""
    completions = {i.time: i.completed_at or "" for i in view.completed()}
    if any(v.instant and v.instant not in completions for v in versions.values()):
        completions = {i.time: i.completed_at or "" for i in context.timeline.history()
                       if i.is_completed}  # a version made by an archived instant
    made = {n: v for n, v in versions.items()
            if not v.instant or completions.get(v.instant, end + "~") <= end}
    return latest_version(made, context.base_version)
