"""``txn.spark.write_stream``: each micro-batch is one commit, exactly once.

The query runs ``foreachBatch`` in the caller's process: every micro-batch goes through
``txn.spark.write`` and records ``{"stream": <id>, "batch": <batch id>}`` in its commit's
``extra``. The stream id is created once per checkpoint location (a file ``metatxn_stream_id``
beside Spark's own checkpoint files), so a query restarted from its checkpoint keeps it.

Why exactly once: Spark replays a micro-batch, with the same batch id and the same rows, when it
did not record the batch as done in its checkpoint (a crash between our commit and Spark's, or
a restart). Before writing, a batch looks on the timeline for a completed commit of this stream
with a batch id at or above its own, and skips if there is one. A crash before our commit point
leaves nothing visible (the instant is rolled back once its heartbeat expires), so the replay
writes the batch for the first time.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from typing import Any

from timeline import InvalidOptionError, ObjectExistsError, open_storage

from .._context import DATA_ACTIONS, Commit, CommitMetadata, TableContext, open_context
from ._tables import Layout, resolve
from ._workers import ensure_workers_run_metatxn
from ._write import write

log = logging.getLogger("metatxn")

STREAM_ID_FILE = "metatxn_stream_id"
_STREAM_MODES = ("append", "upsert")


def stream_id(checkpoint_location: str) -> str:
    """The stream id kept with a checkpoint (created on first use, atomically)."""
    storage = open_storage(checkpoint_location)
    with contextlib.suppress(ObjectExistsError):  # another start of the query created it first
        storage.put_if_absent(STREAM_ID_FILE, secrets.token_hex(8).encode())
    return storage.read(STREAM_ID_FILE).decode()


def last_batch(table: TableContext, stream: str) -> int | None:
    """The largest batch id of ``stream`` committed to the table (None if none)."""
    for instants in (table.timeline.load().completed(), table.timeline.history()):
        for instant in reversed(instants):
            if instant.action not in DATA_ACTIONS or not instant.is_completed:
                continue
            extra = table.timeline.read_metadata(instant, CommitMetadata).extra
            if extra.get("stream") == stream:
                return int(extra["batch"])
    return None


def write_batch(frame: Any, uri: str, stream: str, batch_id: int, *, mode: str = "append",
                storage_options: dict[str, Any] | None = None) -> Commit | None:
    """Commit one micro-batch unless this stream already committed it (or a later one)."""
    table = open_context(uri, storage_options)
    done = last_batch(table, stream)
    if done is not None and done >= batch_id:
        log.info("stream %s: batch %d is already committed (up to %d): skipped", stream, batch_id, done)
        return None
    if frame.isEmpty():
        return None
    return write(frame, uri, mode, storage_options=storage_options,
                 extra={"stream": stream, "batch": str(batch_id)})


def write_stream(df: Any, uri: str, *, checkpoint_location: str, mode: str = "append",
                 trigger: dict[str, Any] | None = None, query_name: str | None = None,
                 partition_by: list[str] | None = None, record_key: str | list[str] | None = None,
                 sort_by: list[str] | None = None, properties: dict[str, str] | None = None,
                 storage_options: dict[str, Any] | None = None) -> Any:
    """Start a streaming query that commits each micro-batch of ``df`` to the table, exactly once.

    Where no table exists, it is created now from the stream's schema and the layout options
    (as :func:`txn.spark.write` does); given for an existing table, they must agree with it.
    Returns the ``StreamingQuery``. ``trigger`` is passed to ``DataStreamWriter.trigger`` (for
    example ``{"processingTime": "5 seconds"}`` or ``{"availableNow": True}``).
    """
    if mode not in _STREAM_MODES:
        raise InvalidOptionError(f"a stream writes with mode {list(_STREAM_MODES)}, got {mode!r}")
    ensure_workers_run_metatxn(df.sparkSession)
    stream = stream_id(checkpoint_location)

    def each(frame: Any, batch_id: int) -> None:
        write_batch(frame, uri, stream, batch_id, mode=mode, storage_options=storage_options)

    # The query is configured (trigger arguments checked) before the table may be created.
    writer = df.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint_location)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    table = resolve(uri, df.schema, mode, Layout(partition_by, record_key, sort_by, properties),
                    storage_options)
    assert table is not None  # the stream modes never ignore an existing table
    return writer.start()
