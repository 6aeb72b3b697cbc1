"""A write's commit options, resolved once for every write: ``commit_properties=`` or the older
``extra=``/``app_id=``/``version=`` keywords, and whether an idempotent write has nothing to do."""

from __future__ import annotations

from dataclasses import dataclass, field

from metatxn.indexes import ProducerKind

from .._commit import Progress
from .._context import TableContext
from .._results import CommitProperties, commit_properties
from ._state import already_committed


@dataclass(frozen=True)
class WriteOptions:
    """What a write hands to the commit: its extra metadata and its producer's batch."""

    extra: dict[str, str] = field(default_factory=dict)
    #: The producer's batch of an idempotent write (None: not idempotent).
    progress: Progress | None = None


def write_options(context: TableContext, given: CommitProperties | None, *, extra: object = None,
                  app_id: object = None, version: object = None) -> WriteOptions | None:
    """The options of a write, or None when ``app_id`` committed ``version`` (or a later one)
    already: the write then does nothing and returns None. Checked before anything is read.

    Raises:
        InvalidOptionError: both forms given, or a bad value (see ``txn.CommitProperties``).
    """
    properties = commit_properties(given, extra=extra, app_id=app_id, version=version)
    progress = None
    if properties.idempotent:
        assert properties.app_id is not None and properties.version is not None
        progress = Progress(ProducerKind.APP, properties.app_id, properties.version)
    if already_committed(context, progress):
        return None
    return WriteOptions(dict(properties.extra), progress)
