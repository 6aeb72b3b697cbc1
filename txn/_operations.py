"""The write operations: what each one writes, what it changes in the metadata table, and when it
conflicts with a concurrent commit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec
import pyarrow as pa

from indexes import (
    FILES_SCHEMA,
    MARKED_FOR_DELETE,
    SUCCESS,
    MetadataChanges,
    SegmentEntry,
    column_stats_schema,
    live,
    tombstones,
)
from timeline import CommitConflictError, Lease, TimelineView, parse_time

from ._data import batches
from ._options import target_file_bytes
from ._protocol import DATA_ACTIONS, Builder, Pending
from ._records import ACTION_OF, Commit, CommitMetadata
from ._writer import DataFileWriter, FileStatus

if TYPE_CHECKING:
    from ._table import Table


def _write_files(table: Table, pending: Pending, data: Any) -> list[FileStatus]:
    assert pending.segment is not None
    writer = DataFileWriter(
        table._store, table._schema, instant_time=pending.instant.time, segment=pending.segment,
        partition_by=table.partition_by, sort_by=table.sort_by, new_token=table._ids,
        target_file_bytes=target_file_bytes(table._config.properties),
    )
    return writer.write(data)


def _file_rows(statuses: Sequence[FileStatus], segment: str, instant_time: str) -> pa.Table:
    return pa.Table.from_pylist([
        {"path": s.path, "segment": segment, "partition": s.partition, "format": "parquet",
         "rows": s.rows, "size": s.size, "instant": instant_time, "deleted": False}
        for s in statuses
    ], schema=FILES_SCHEMA)


def _stats_rows(statuses: Sequence[FileStatus], schema: pa.Schema) -> pa.Table:
    stats_schema = column_stats_schema(schema)
    names = [f.name for f in stats_schema.field("columns").type]
    if not names:
        return stats_schema.empty_table()
    return pa.Table.from_pylist([
        {"path": s.path, "deleted": False,
         "columns": {name: ({"min": s.stats[name].min, "max": s.stats[name].max,
                             "nulls": s.stats[name].nulls, "count": s.stats[name].count}
                            if name in s.stats else None) for name in names}}
        for s in statuses
    ], schema=stats_schema)


def _new_segment(table: Table, pending: Pending, statuses: Sequence[FileStatus],
                 stats: pa.Table) -> SegmentEntry:
    assert pending.segment is not None
    return SegmentEntry(
        id=pending.segment, status=SUCCESS, format="parquet",
        partitions=tuple(sorted({s.partition for s in statuses if s.partition})),
        rows=sum(s.rows for s in statuses), data_size=sum(s.size for s in statuses),
        index_size=stats.nbytes, load_start_ms=parse_time(pending.instant.time),
        load_end_ms=table._clock(), instant=pending.instant.time,
    )


def _concurrent_data_commits(view: TimelineView, began: str) -> list[str]:
    return [i.time for i in view.completed_after(began) if i.action in DATA_ACTIONS]


def _to_commit(instant_time: str, completed_at: str, metadata: CommitMetadata) -> Commit:
    return Commit(
        instant=instant_time, completed_at=completed_at, operation=metadata.operation,
        segment=metadata.segment, files_added=len(metadata.files_added),
        rows_added=metadata.rows_added, rows_deleted=metadata.rows_deleted,
        paths_added=tuple(f.path for f in metadata.files_added), extra=dict(metadata.extra),
    )


def _load(table: Table, operation: str, data: Any, extra: dict[str, str] | None,
          replace: bool) -> Commit:
    rows = batches(data, table._schema)  # checks the schema before anything is written

    def build(pending: Pending, statuses: list[FileStatus]) -> Builder:
        def under_lock(lease: Lease, view: TimelineView) -> tuple[MetadataChanges, CommitMetadata]:
            files = _file_rows(statuses, pending.segment or "", pending.instant.time)
            stats = _stats_rows(statuses, table._schema)
            segments = [_new_segment(table, pending, statuses, stats)]
            removed_files: list[str] = []
            removed_segments: list[str] = []
            rows_deleted = 0
            if replace:
                concurrent = _concurrent_data_commits(view, pending.instant.time)
                if concurrent:
                    raise CommitConflictError(
                        f"overwrite {pending.instant.time} conflicts with commit(s) {concurrent}, "
                        "which completed after it began and would be silently replaced\n"
                        "Help: rerun the overwrite against the new state of the table"
                    )
                current = table._metadata_at(view, None)
                assert current.files is not None and current.segments is not None
                previous = live(current.files)
                removed_files = previous["path"].to_pylist()
                rows_deleted = sum(previous["rows"].to_pylist())
                for entry in current.segments.values():
                    if entry.is_live:
                        removed_segments.append(entry.id)
                        segments.append(msgspec.structs.replace(entry, status=MARKED_FOR_DELETE))
                files = pa.concat_tables([files, tombstones(FILES_SCHEMA, removed_files)])
                stats = pa.concat_tables([stats, tombstones(stats.schema, removed_files)])
            metadata = CommitMetadata(
                operation=operation, segment=pending.segment, files_added=statuses,
                files_removed=removed_files, segments_removed=removed_segments,
                rows_added=sum(s.rows for s in statuses), rows_deleted=rows_deleted,
                extra=dict(extra or {}),
            )
            return MetadataChanges(files=files, column_stats=stats, segments=segments), metadata

        return under_lock

    completed, metadata = table._protocol.run(
        operation, ACTION_OF[operation], new_segment=True,
        write=lambda pending: _write_files(table, pending, rows), build=build, extra=extra,
    )
    return _to_commit(completed.time, completed.completed_at or "", metadata)


def append(table: Table, data: Any, *, extra: dict[str, str] | None = None) -> Commit:
    return _load(table, "append", data, extra, replace=False)


def overwrite(table: Table, data: Any, *, extra: dict[str, str] | None = None) -> Commit:
    return _load(table, "overwrite", data, extra, replace=True)
