"""``txn.spark.write_stream``: each micro-batch is one commit, exactly once.

The query runs ``foreachBatch`` in the caller's process. Every micro-batch is a batch of the
stream ``name`` (the query's name, else an id kept with the checkpoint: a file
``metatxn_stream_id`` beside Spark's own checkpoint files, so a query restarted from its
checkpoint keeps it), and its progress is the stream's record in the table's ``streams``
partition (design/streaming.md):

* on a streaming table (``streaming=true``) a batch is ``s.write(batch_id, rows)`` of
  ``t.stream(name)``: rows into the stream's open ``Streaming`` segment;
* on any other table a batch is ``txn.spark.write`` of the micro-batch (a segment per batch,
  written by the executors), committed with the stream's record moved to the batch id.

Why exactly once: Spark replays a micro-batch, with the same batch id and the same rows, when it
did not record the batch as done in its checkpoint (a crash between our commit and Spark's, or a
restart). A batch at or below the record's batch id is skipped, checked against that one record
before the batch, at its begin and at its commit under the lock. A crash before our commit point
leaves nothing visible, so the replay writes the batch for the first time.

A query writes the stream's generation current when it started: once the stream is dropped (by
any process), its next batch fails with ``StreamDroppedError`` (the query stops with it), and a
query started after the drop begins the next generation (design/streaming.md).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from typing import Any

import txn

from ._tables import Layout, resolve
from ._workers import ensure_workers_run_metatxn
from ._write import write

log = logging.getLogger("metatxn")

STREAM_ID_FILE = "metatxn_stream_id"
_STREAM_MODES = ("append", "upsert")


def stream_id(checkpoint_location: str) -> str:
    """The stream id kept with a checkpoint (created on first use, atomically)."""
    storage = txn.open_storage(checkpoint_location)
    with contextlib.suppress(txn.ObjectExistsError):  # another start of the query created it first
        storage.put_if_absent(STREAM_ID_FILE, secrets.token_hex(8).encode())
    return storage.read(STREAM_ID_FILE).decode()


def write_batch(frame: Any, uri: str, stream: str, batch_id: int, *, mode: str = "append",
                storage_options: dict[str, Any] | None = None,
                sink: txn.Stream | None = None, generation: int | None = None) -> txn.Commit | None:
    """Commit one micro-batch unless this stream already committed it (or a later one).

    ``generation``: the stream's generation when the query started (None: the current one); a
    batch of a generation the stream has left (dropped since) raises ``StreamDroppedError``.
    On a streaming table ``sink`` holds it."""
    if sink is not None:  # a streaming table: the batch goes to the stream's open segment
        return sink.write(batch_id, frame.toArrow())
    if generation is None:
        generation = txn.open_table(uri, storage_options).stream_generation(stream)
    progress = txn.StreamProgress(stream, batch_id, generation)
    return write(frame, uri, mode, storage_options=storage_options, progress=progress,
                 extra={"stream": stream, "batch": str(batch_id)})


def _streaming(properties: dict[str, str]) -> bool:
    """Whether ``properties`` make a new table a streaming one (what ``Table.streaming`` reads
    from an existing table's): checked before the table may be created."""
    return str(properties.get("streaming", "false")).lower() == "true"


def write_stream(df: Any, uri: str, *, checkpoint_location: str, mode: str = "append",
                 trigger: dict[str, Any] | None = None, query_name: str | None = None,
                 name: str | None = None,
                 partition_by: list[str] | None = None, record_key: str | list[str] | None = None,
                 sort_by: list[str] | None = None, properties: dict[str, str] | None = None,
                 storage_options: dict[str, Any] | None = None) -> Any:
    """Start a streaming query that commits each micro-batch of ``df`` to the table, exactly once.

    ``name``: the stream's name in SHOW STREAMS (default: ``query_name``, else an id kept with
    the checkpoint). Where no table exists, it is created now from the stream's schema and the
    layout options (as :func:`txn.spark.write` does); given for an existing table, they must
    agree with it. Returns the ``StreamingQuery``. ``trigger`` is passed to
    ``DataStreamWriter.trigger`` (for example ``{"processingTime": "5 seconds"}`` or
    ``{"availableNow": True}``). On a streaming table the stream shows ``Running`` in
    ``t.streams()`` while the query runs, and ``t.drop_stream(name)`` stops the query first.
    """
    if mode not in _STREAM_MODES:
        raise txn.InvalidOptionError(f"a stream writes with mode {list(_STREAM_MODES)}, got {mode!r}")
    if mode != "append" and isinstance(properties, dict) and _streaming(properties):
        # Before resolve() may create the table: a refused stream leaves no table.
        raise txn.InvalidOptionError(f"a stream on a streaming table appends; got mode {mode!r}")
    ensure_workers_run_metatxn(df.sparkSession)
    stream = name or query_name or stream_id(checkpoint_location)
    sink: list[txn.Stream] = []
    generation: list[int] = []

    def each(frame: Any, batch_id: int) -> None:
        write_batch(frame, uri, stream, batch_id, mode=mode, storage_options=storage_options,
                    sink=sink[0] if sink else None, generation=generation[0])

    # The query is configured (trigger arguments checked) before the table may be created.
    writer = df.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint_location)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    # Created at once, not staged: every batch opens the table by its location.
    table = resolve(uri, df.schema, mode, Layout(partition_by, record_key, sort_by, properties),
                    storage_options, staged=False)
    assert table is not None  # the stream modes never ignore an existing table
    if table.streaming:
        if mode != "append":
            raise txn.InvalidOptionError(f"a stream on a streaming table appends; got mode {mode!r}")
        sink.append(table.stream(stream))
    # Fixed at the start, as a Stream's: a DROP STREAM after it fences this query off.
    generation.append(table.stream_generation(stream))
    query = writer.start()
    if sink:
        sink[0].feed_by(lambda: bool(query.isActive), query.stop)
    return query
