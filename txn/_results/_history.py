"""One entry of a table's history (``Table.history``): what a completed instant did."""

from __future__ import annotations

import msgspec

from metatxn.timeline import Action


class HistoryEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A completed instant and what its commit recorded, as ``t.history()`` lists it.

    Built from what each instant already stores: its timeline entry and its commit metadata
    (a clean's or rollback's own metadata for those). Counts a commit does not record are 0;
    values it cannot tell are None.
    """

    #: The instant's (requested) time: its identity, accepted as ``as_of``.
    instant: str
    #: Its completion time (17 digits, UTC): the order of snapshots and of this history.
    completed_at: str
    #: The timeline action: ``commit``, ``replacecommit``, ``compaction``, ``clean``, ``rollback``.
    action: Action
    #: The write's ``txn.Operation`` (``append``, ``upsert``, ..., ``compact``), or the action
    #: of a clean or rollback; None when the instant's metadata cannot be decoded (damaged).
    operation: str | None
    #: A transaction's operations, in order (``operation`` is ``transaction``); else empty.
    operations: tuple[str, ...] = ()
    #: The segment the commit created (a compaction: the merged segment); None if none.
    segment: str | None = None
    rows_added: int = 0
    rows_deleted: int = 0
    #: Data files the commit added and removed (a clean: every file it deleted or moved to the
    #: trash, metadata files included; a rollback: the files it deleted).
    files_added: int = 0
    files_removed: int = 0
    #: Bytes of the data files the commit added (ADD SEGMENT: the external files it reads in
    #: place) and of the delete deltas it wrote.
    bytes_added: int = 0
    #: Bytes of the files it removed, from the metadata table's records of removed files (a
    #: clean: what it freed); None when a record is gone (CLEAN FILES purged it) or for a
    #: rollback, which records no sizes.
    bytes_removed: int | None = None
    #: Delete deltas the commit wrote (their bytes are in ``bytes_added``).
    deltas_added: int = 0
    #: Segments it marked ``Marked for Delete`` (overwrite, DELETE SEGMENT), and those a
    #: compaction merged into ``segment``.
    segments_removed: tuple[str, ...] = ()
    segments_merged: tuple[str, ...] = ()
    #: Caller-supplied metadata (``extra=``; streams record their batch ids here).
    extra: dict[str, str] = msgspec.field(default_factory=dict)
    #: The idempotent producer and its version (``app_id=``, ``version=`` of the write); None
    #: for other writes and for commits made before metatxn recorded them.
    app_id: str | None = None
    version: int | None = None
    #: Milliseconds from the instant's request to its completion.
    duration_ms: int = 0
    #: The table version the commit created (a schema or property change); None otherwise.
    schema_version: int | None = None
    #: Times the write was planned again after a compaction replaced files it had read.
    retries: int = 0
    #: Completion time of the snapshot the write read; None when it read nothing.
    read_at: str | None = None
