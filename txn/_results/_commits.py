"""What a write is (its operation, a compaction's kind) and what it returns (:class:`Commit`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from metatxn.timeline import Vocabulary


class Operation(Vocabulary):
    """The kind of write a commit is, as its plan and commit metadata store it."""

    APPEND = "append"
    OVERWRITE = "overwrite"
    UPSERT = "upsert"
    DELETE = "delete"
    UPDATE = "update"
    #: ``Table.merge(...).execute()``: matched rows updated or deleted, others inserted.
    MERGE = "merge"
    #: ADD SEGMENT: external files join the table in place.
    ADD_SEGMENT = "add_segment"
    #: A stream's micro-batch.
    STREAM = "stream"
    DROP_STREAM = "drop_stream"
    #: A compaction (a table service: see ``_commit._conflicts``).
    COMPACT = "compact"
    DELETE_SEGMENTS = "delete_segments"
    #: Several writes in one instant (``Table.transaction``); ``operations`` lists them.
    TRANSACTION = "transaction"
    #: A schema or table-property change (``add_columns``, ``set_properties``, ALTER TABLE).
    ALTER_TABLE = "alter_table"


class CompactionKind(Vocabulary):
    """What a compaction merges (``t.compact(kind)``; commits record it in ``extra``)."""

    #: By count per level (table property ``compaction.level_threshold``).
    MINOR = "minor"
    #: By size (segments together under ``compaction.major.size_mb``).
    MAJOR = "major"
    #: Exactly the segments given.
    CUSTOM = "custom"
    #: A streaming table's finished streaming segments into columnar ones.
    CLOSE_STREAMING = "close_streaming"
    #: The small files of an open streaming segment, merged inside it (never asked for: the
    #: stream runs it).
    STREAM_FILES = "stream_files"


@dataclass(frozen=True)
class Commit:
    """The outcome of one write: one completed instant."""

    instant: str
    completed_at: str
    operation: Operation
    segment: str | None
    files_added: int
    rows_added: int
    rows_deleted: int
    #: Table-relative paths of the data files the commit added.
    paths_added: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)
    #: Times the write was re-planned after a compaction replaced files it had read.
    retries: int = 0
    #: Segments the commit marked ``Marked for Delete`` (DELETE SEGMENT, overwrite), and the
    #: segments a compaction merged into ``segment`` (now ``Compacted``).
    segments_removed: tuple[str, ...] = ()
    segments_merged: tuple[str, ...] = ()
    #: A transaction's operations, in order (``operation`` is ``"transaction"``); empty for a
    #: single write.
    operations: tuple[str, ...] = ()
    #: The table version the commit created (a schema or property change); None otherwise.
    schema_version: int | None = None


@dataclass(frozen=True)
class MergeResult:
    """What ``TableMerger.execute()`` did: its commit (None when no clause applied to any row)
    and the counts deltalake's ``execute()`` reports."""

    commit: Commit | None
    num_source_rows: int
    num_target_rows_inserted: int
    num_target_rows_updated: int
    num_target_rows_deleted: int

