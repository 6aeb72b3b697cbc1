"""The Spark write job under the internal commit path, for SQL ``UPDATE`` (``_sql/_dml.py``) and
Spark compaction (``_compact.py``) until they move onto the public two-phase write: the same
tasks as ``txn.spark.write`` (``txn.write_files``, or Spark's own writer with
``txn.adopt_files``), for an instant those callers began themselves."""

from __future__ import annotations

import contextlib
import functools
import pickle
from typing import Any

import txn

from .._commit import Pending, Written
from .._context import TableContext, delete_compaction_threshold, target_file_bytes
from .._files import LiveDeltas, Positions, stage_deletes
from .._twophase._driver import _remove_unreported
from .._twophase._staging import remove_staging, sweep_staging
from ._native import write_files, writes_natively
from ._write import _write_task


def run_job(table: TableContext, df: Any, pending: Pending, deleted: dict[str, Positions],
            current: LiveDeltas) -> Written:
    assert pending.segment is not None
    index = table.metadata.record_index
    ticket = txn.WriteTicket(
        uri=table.uri, storage_options=table.storage_options, operation=pending.instant.action,
        instant=pending.instant.time, segment=pending.segment,
        schema=table.schema.serialize().to_pybytes(), partition_by=tuple(table.partition_by),
        sort_by=tuple(table.sort_by), key_columns=tuple(table.record_key_columns),
        shards=index.shards if index is not None else 0,
        target_file_bytes=target_file_bytes(table.config.properties), root=table.store.location(""))
    if writes_natively(table.schema, table.partition_by, table.record_key_columns):
        sweep_staging(table.store, table.timeline)
        try:
            reports = [write_files(df, ticket, ticket.staging)]
        finally:
            with contextlib.suppress(Exception):
                remove_staging(table.store, ticket.instant)
    else:
        results = df.mapInArrow(functools.partial(_write_task, ticket), "payload binary").toArrow()
        reports = [pickle.loads(payload) for payload in results["payload"].to_pylist()]
    statuses = [s for r in reports for s in r.files]
    shards: dict[int, int] = {}
    for report in reports:
        for shard, count in report.index_shards.items():
            shards[shard] = shards.get(shard, 0) + count
    _remove_unreported(table, pending.instant.time, {s.path for s in statuses},
                       {r.index_part for r in reports if r.index_part is not None})
    deltas, replaced = stage_deletes(table.store, pending.instant.time, deleted, current,
                                     delete_compaction_threshold(table.config.properties))
    return Written(statuses=statuses, deltas=deltas, replaced=replaced, index_sizes=shards)
