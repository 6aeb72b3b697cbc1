"""The change feed's vocabulary (``Table.changes``): what a change row is, and the per-instant
counts a summary reports."""

from __future__ import annotations

from typing import Final

import msgspec

from metatxn.timeline import Vocabulary


class ChangeType(Vocabulary):
    """What happened to a row, in the ``_change_type`` column of a change feed."""

    #: A row a commit wrote that replaces no row of the same key.
    INSERT = "insert"
    #: A row as it was before an update (or an upsert of its key) replaced it.
    UPDATE_PREIMAGE = "update_preimage"
    #: The row that replaced it.
    UPDATE_POSTIMAGE = "update_postimage"
    #: A row a commit deleted (or removed with its file: an overwrite, DELETE SEGMENT).
    DELETE = "delete"


#: The columns every change row carries after the table's own: its ``ChangeType``, the instant
#: that made the change (its requested time, 17 digits) and when that instant completed.
CHANGE_TYPE: Final = "_change_type"
COMMIT_INSTANT: Final = "_commit_instant"
COMMIT_TIME: Final = "_commit_time"
CHANGE_COLUMNS: Final = (CHANGE_TYPE, COMMIT_INSTANT, COMMIT_TIME)


class ChangeInstant(msgspec.Struct, frozen=True, kw_only=True):
    """One instant of a change feed's window that emits rows (``ChangeScanner.instants()``)."""

    #: The instant's (requested) time: what ``_commit_instant`` holds.
    instant: str
    #: Its completion time: the window's order, and a stream's offset.
    completed_at: str
    #: The write's ``txn.Operation`` (``append``, ``upsert``, ``delete``, ...).
    operation: str
    #: Data files and delete deltas the feed reads for it.
    files: int
    #: Rows it added plus rows it deleted: at least the change rows it emits, before a filter.
    rows: int


class ChangeSummary(msgspec.Struct, frozen=True, kw_only=True):
    """The change rows of one instant, counted by kind (``ChangeScanner.summary()``)."""

    instant: str
    completed_at: str
    operation: str
    inserted: int = 0
    #: Rows updated: one pre-image and one post-image each.
    updated: int = 0
    deleted: int = 0
