"""Making a change feed: the window's bounds, its plan, and the reader of its parts."""

from __future__ import annotations

from collections.abc import Sequence

from indexes import SCHEMAS
from timeline import InvalidOptionError

from .._context import TableContext, latest_version
from ._plan import end_records, plan_window
from ._read import ChangeReader
from ._scanner import ChangeScanner
from ._window import bounds, check_readable


def changes(context: TableContext, start: object, end: object = None, *,
            columns: Sequence[str] | None = None, filter: object = None,
            batch_size: int | None = None) -> ChangeScanner:
    """See :meth:`txn.Table.changes`."""
    view = context.timeline.load()
    start_bound, end_bound, at_latest = bounds(context, view, start, end)
    check_readable(context, start_bound, start)

    def travel() -> dict[str, str] | None:
        # A window ending in the past resolves the metadata table as of its end, which may
        # reach instants archived off the active timeline.
        if at_latest:
            return None
        return {i.time: i.completed_at or "" for i in context.timeline.history() if i.is_completed}

    resolve_at = end_bound if view.last_completed() is not None else None
    metadata = context.metadata_at(view, resolve_at, (SCHEMAS,), travel())
    version = latest_version(metadata.versions, context.base_version)
    key = version.record_key
    record_key = [] if key is None else [key] if isinstance(key, str) else list(key)
    reader = ChangeReader(uri=context.uri, storage_options=context.storage_options,
                          versions=context.schemas_at(metadata.versions),
                          schema_id=version.schema_id, partition_by=version.partition_by,
                          record_key=record_key, store=context.store,
                          external_options=context.store.external_reader().options)
    if not isinstance(columns, (list, tuple, type(None))):
        raise InvalidOptionError(f"columns must be a list of table columns, got {columns!r}")
    window = plan_window(context, start_bound, end_bound, bool(record_key),
                         end_records(context, view, end_bound, travel))
    return ChangeScanner(window, reader, columns, filter, batch_size,
                         check_retained=lambda: check_readable(context, start_bound, start))
