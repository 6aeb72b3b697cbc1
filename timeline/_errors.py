"""The error tree of the metatxn distribution.

It lives in the bottom package so that every layer (``timeline``, ``indexes``, ``txn``) raises the
same classes; ``txn`` re-exports all of them as the public surface. The tree is flat under one
root, :class:`TxnError`. Where a builtin exception fits, it is mixed in so that generic handlers
(``except FileNotFoundError``) keep working. Errors carry structured fields so tests and callers
can inspect them without parsing messages.
"""

from __future__ import annotations


class TxnError(Exception):
    """Root of every error metatxn raises on purpose."""

    _init_args: tuple[object, ...] | None = None

    def __reduce__(self):  # type: ignore[no-untyped-def]
        # Errors with structured constructors must survive pickling (Spark executors and
        # worker processes send them back to the driver).
        if self._init_args is not None:
            return (type(self), self._init_args)
        return super().__reduce__()


class TableNotFoundError(TxnError, FileNotFoundError):
    """No metatxn table exists at the given location."""

    def __init__(self, uri: str, detail: str = "") -> None:
        self._init_args = (uri, detail)
        self.uri = uri
        message = f"no metatxn table at {uri!r}"
        if detail:
            message += f": {detail}"
        message += "\nHelp: create it with txn.create_table(uri, schema)"
        super().__init__(message)


class TableExistsError(TxnError, FileExistsError):
    """A table already exists where a new one was to be created."""

    def __init__(self, uri: str) -> None:
        self._init_args = (uri,)
        self.uri = uri
        super().__init__(
            f"a metatxn table already exists at {uri!r}\n"
            "Help: open it with txn.open_table(uri), or choose another location"
        )


class SchemaMismatchError(TxnError, ValueError):
    """Data or files do not have the schema the table expects."""


class DuplicateKeyError(TxnError, ValueError):
    """A record key that must be unique was found more than once."""


class DuplicateMatchError(TxnError, ValueError):
    """A merge would change one target row by two source rows (Delta's and Spark's rule): the
    result would depend on the order of the source, so nothing is committed."""


class CommitConflictError(TxnError):
    """The commit definitely did not land: a concurrent commit won.

    It is safe to delete what the losing writer staged and to retry against the new state.
    """


class SchemaChangedError(CommitConflictError):
    """A write that would change the table's schema lost to a schema change committed since it
    began: the ids its files carry could clash with the new version's. Safe to retry."""


class CommitStateUnknownError(TxnError):
    """The outcome of a commit is unknown (for example storage failed after the write was sent).

    Never delete staged files after this error: the commit may have landed.
    """


class InvalidOptionError(TxnError, ValueError):
    """An argument, option or table property has a value metatxn does not accept."""


class SchemaEvolutionError(InvalidOptionError):
    """A schema change metatxn refuses: it would narrow a type, drop or retype a record-key or
    partition column, or otherwise make old files read wrong. The message names the column and
    the rule. (An ``InvalidOptionError``: the change asked for is not one the table takes.)"""


class SegmentNotFoundError(TxnError, LookupError):
    """A segment id that does not exist in the table."""


class StreamNotFoundError(TxnError, LookupError):
    """A stream name the table has no (undropped) stream of."""


class StreamDroppedError(StreamNotFoundError):
    """A producer's stream was dropped after the producer (its ``Stream``) was opened: its
    batches are refused, and nothing is written. ``generation`` is the producer's, ``current``
    the stream's now (the generation a new ``t.stream(name)`` writes)."""

    def __init__(self, name: str, generation: int, current: int) -> None:
        self._init_args = (name, generation, current)
        self.name = name
        self.generation = generation
        self.current = current
        super().__init__(
            f"stream {name!r} was dropped after this producer opened it (its generation "
            f"{generation}; the stream's is now {current}); nothing was written\n"
            f"Help: open the stream again with t.stream({name!r}) to start it afresh, from "
            "batch ids of your choosing")


class CorruptMetadataError(TxnError, ValueError):
    """A metadata file cannot be decoded or contradicts its own name.

    ``path`` names the file (relative to the table root); ``expected`` says what should be there.
    """

    def __init__(self, path: str, expected: str, found: str = "") -> None:
        self._init_args = (path, expected, found)
        self.path = path
        self.expected = expected
        self.found = found
        message = f"corrupt metadata file {path!r}: expected {expected}"
        if found:
            message += f", found {found}"
        super().__init__(message)


class IllegalTransitionError(TxnError):
    """An instant was asked to move to a state its lifecycle does not allow."""

    def __init__(self, instant: str, current: str, requested: str, reason: str = "") -> None:
        self._init_args = (instant, current, requested, reason)
        self.instant = instant
        self.current = current
        self.requested = requested
        message = f"instant {instant} cannot move from {current!r} to {requested!r}"
        if reason:
            message += f": {reason}"
        super().__init__(message)


class StorageError(TxnError, OSError):
    """A storage backend failed in a way metatxn cannot recover from by itself."""


class ObjectExistsError(StorageError, FileExistsError):
    """``put_if_absent`` lost: an object with that name already exists."""

    def __init__(self, path: str) -> None:
        self._init_args = (path,)
        self.path = path
        super().__init__(f"object {path!r} already exists (put-if-absent lost the race)")


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The object does not exist."""

    def __init__(self, path: str) -> None:
        self._init_args = (path,)
        self.path = path
        super().__init__(f"object {path!r} does not exist")


class LockTimeoutError(TxnError, TimeoutError):
    """The table lock could not be taken in time because another writer holds it."""

    def __init__(self, owner: str, expires_ms: int, waited_ms: int) -> None:
        self._init_args = (owner, expires_ms, waited_ms)
        self.owner = owner
        self.expires_ms = expires_ms
        self.waited_ms = waited_ms
        super().__init__(
            f"table lock is held by {owner!r} (lease ends at epoch ms {expires_ms}); "
            f"gave up after waiting {waited_ms} ms\n"
            "Help: retry later, or raise the lock timeout if commits are long"
        )


class LockLostError(TxnError):
    """The lease on the table lock ended before the holder finished its critical section.

    Nothing was committed by the call that raised it.
    """


class WorkerEnvironmentError(TxnError, RuntimeError):
    """Spark's Python workers cannot run metatxn (another interpreter than the driver's, or one
    without metatxn or pyarrow installed)."""

    def __init__(self, worker_python: str, driver_python: str, reason: str) -> None:
        self._init_args = (worker_python, driver_python, reason)
        self.worker_python = worker_python
        self.driver_python = driver_python
        self.reason = reason
        super().__init__(
            f"Spark's Python workers cannot import metatxn: they run {worker_python}, where "
            f"{reason}; this driver runs {driver_python}\n"
            f"Help: give the workers the driver's interpreter (PYSPARK_PYTHON={driver_python}, set "
            "before the SparkSession starts), or install metatxn into the Python the workers run"
        )


# The public home of these names is the ``txn`` facade (API.md). Report them there in tracebacks
# and pickles, whichever package the caller imported; ``txn`` is part of the same distribution.
for _error in (TxnError, TableNotFoundError, TableExistsError, SchemaMismatchError,
               DuplicateKeyError, CommitConflictError, CommitStateUnknownError, InvalidOptionError,
               SegmentNotFoundError, CorruptMetadataError, IllegalTransitionError, StorageError,
               LockTimeoutError, LockLostError, WorkerEnvironmentError, StreamDroppedError):
    _error.__module__ = "txn"
del _error
