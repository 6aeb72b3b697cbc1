"""What a commit records besides its data: the caller's key-value metadata and, for an
idempotent producer, its application id and version (delta-rs's ``CommitProperties``)."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from metatxn.indexes import MAX_BATCH
from metatxn.timeline import InvalidOptionError


class CommitProperties(msgspec.Struct, frozen=True):
    """Options of one commit, accepted by every write.

    ``extra``: string key-value pairs recorded in the commit (``Commit.extra``). ``app_id`` and
    ``version``: an idempotent write; the commit is skipped (the write returns None) when
    ``app_id`` committed ``version`` or a later one, so a producer that retries after a failure
    never commits a version twice, even from two processes at once. Checked when built: a bad
    value raises ``InvalidOptionError`` before anything is read or written.
    """

    extra: dict[str, str] = msgspec.field(default_factory=dict)
    app_id: str | None = None
    version: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.extra, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in self.extra.items()):
            raise InvalidOptionError(
                f"extra must be a dict of string keys to string values, got {self.extra!r}; "
                "nothing was written")
        if self.app_id is None and self.version is None:
            return
        if not isinstance(self.app_id, str) or not self.app_id or not _in_range(self.version):
            raise InvalidOptionError(
                f"an idempotent write needs both app_id (a non-empty string) and version (an int "
                f"from 0 to {MAX_BATCH}, stored as a 64-bit integer); got app_id={self.app_id!r}, "
                f"version={self.version!r}; nothing was written")

    @property
    def idempotent(self) -> bool:
        return self.app_id is not None

    @classmethod
    def of(cls, given: CommitProperties | None = None, *, extra: object = None, app_id: object = None,
           version: object = None) -> CommitProperties:
        """The options of a write that takes both ``commit_properties=`` (``given``) and the
        separate keywords ``extra=``, ``app_id=``, ``version=``: one form or the other, never
        both (``InvalidOptionError``). For engines whose writes take both, as ``Table``'s do."""
        return commit_properties(given, extra=extra, app_id=app_id, version=version)


class StreamProgress(msgspec.Struct, frozen=True):
    """Batch ``batch_id`` of stream ``stream`` (generation ``generation``), committed exactly once
    by a write that carries it (:meth:`txn.Table.begin_write`): the commit moves the stream's
    record in SHOW STREAMS to this batch, and a write of a batch at or below the record's is
    skipped. How a streaming engine's sink (``txn.spark.write_stream``) makes each micro-batch
    one commit on any table, streaming or not.

    ``generation``: the stream's generation the producer writes (:meth:`txn.Table.stream_generation`
    when it started); once the stream is dropped, a batch of an older generation raises
    ``StreamDroppedError``. Checked when built: a bad value raises ``InvalidOptionError``.
    """

    stream: str
    batch_id: int
    generation: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.stream, str) or not self.stream.strip():
            raise InvalidOptionError(
                f"StreamProgress: stream must be a non-empty string, got {self.stream!r}")
        for name, value in (("batch_id", self.batch_id), ("generation", self.generation)):
            if not _in_range(value):
                raise InvalidOptionError(f"StreamProgress: {name} must be an int from 0 to {MAX_BATCH} "
                                         f"(stored as a 64-bit integer), got {value!r}")


def _in_range(version: object) -> bool:
    return not isinstance(version, bool) and isinstance(version, int) and 0 <= version <= MAX_BATCH


def commit_properties(given: CommitProperties | None, *, extra: object = None, app_id: object = None,
                      version: object = None) -> CommitProperties:
    """The options of a write that takes both ``commit_properties=`` and the older keywords
    ``extra=``, ``app_id=``, ``version=``: one or the other, never both."""
    loose = extra is not None or app_id is not None or version is not None
    if given is not None:
        if not isinstance(given, CommitProperties):
            raise InvalidOptionError(
                f"commit_properties must be a txn.CommitProperties, got {type(given).__name__}")
        if loose:
            raise InvalidOptionError(
                "give commit options either as commit_properties= or as extra=/app_id=/version=, "
                "not both; nothing was written")
        return given
    extra = {} if extra is None else dict(extra) if isinstance(extra, Mapping) else extra
    return CommitProperties(extra=extra, app_id=app_id, version=version)  # type: ignore[arg-type]
