"""The two-phase compaction: :class:`PendingCompaction`, a compaction whose rows are rewritten
elsewhere (Spark's executors, other workers) and committed by the driver.

``Table.begin_compaction`` plans and begins one round exactly as ``Table.compact`` does (the
same selection, target name, admission and instant: :func:`txn._segments.begin_compaction`);
the pending compaction then shows its source files and the reader of the snapshot it read, the
workers write the sources' live rows with its ticket (:func:`txn.write_files`, or a foreign
writer's files joined by :func:`txn.adopt_files`), and :meth:`PendingCompaction.commit` commits
what they report under the compaction's own conflict rule. It is the same round
``Table.compact`` runs with the rewrite done here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType

from metatxn.timeline import InvalidOptionError

from .._commit import Pending, Written
from .._context import TableContext
from .._read import FileReader, snapshot_at
from .._results import Commit, CompactionKind, DataFile
from .._segments import BegunCompaction, begin_compaction, check_kind
from ._driver import _remove_unreported, gathered, quietly, ticket_for
from ._staging import remove_staging, sweep_staging
from ._ticket import WriteTicket
from ._worker import WrittenFiles

_OPEN, _DONE = "open", "done"


def begin(context: TableContext, kind: str = CompactionKind.MINOR, *,
          segments: Sequence[str | int] | None = None) -> PendingCompaction | None:
    """See :meth:`txn.Table.begin_compaction`."""
    kind = check_kind(context, kind, segments)
    begun = begin_compaction(context, kind, segments)
    return None if begun is None else PendingCompaction(context, begun)


class PendingCompaction:
    """One round of a compaction, begun on the driver, whose rows are rewritten by workers (see
    :meth:`txn.Table.begin_compaction`). A context manager: it aborts on an exception, and when
    left without a commit."""

    def __init__(self, context: TableContext, begun: BegunCompaction) -> None:
        self._context = context
        self._begun = begun
        self._ticket = ticket_for(context, begun.planned.operation, begun.pending, begun.state)
        self._files: list[DataFile] | None = None
        self._reader: FileReader | None = None
        self._status = _OPEN

    # -- what it compacts ----------------------------------------------------------------------

    @property
    def kind(self) -> CompactionKind:
        return CompactionKind(self._begun.kind)

    @property
    def target(self) -> str:
        """The segment the sources become (``x.1``, ``x.2``, ...; a streaming segment's hand-off
        is named the same way)."""
        return self._begun.planned.merge.target

    @property
    def sources(self) -> list[str]:
        """The segments it compacts (``Compacted`` once it commits), in segment order."""
        return list(self._begun.planned.merge.sources)

    @property
    def rows(self) -> int:
        """The sources' live rows: what the workers must write, neither more nor fewer (the
        commit refuses another count)."""
        return self._begun.planned.merge.rows

    @property
    def size(self) -> int:
        """The bytes of the sources' data files."""
        return self._begun.planned.merge.size

    @property
    def instant(self) -> str:
        return self._ticket.instant

    def files(self) -> list[DataFile]:
        """The sources' live data files, as the snapshot the compaction read lists them (their
        delete deltas included): read each with :meth:`file_reader`."""
        if self._files is None:
            wanted = set(self._begun.planned.merge.files)
            location = self._context.store.location
            self._files = [f for f in self._snapshot_files()
                           if (f.path if f.external else f.path.removeprefix(location(""))) in wanted]
        return list(self._files)

    def file_reader(self) -> FileReader:
        """The reader of the snapshot the compaction read (``Snapshot.file_reader``): it reads a
        source file with its deleted rows dropped; picklable, for the workers."""
        if self._reader is None:
            self._snapshot_files()
        assert self._reader is not None
        return self._reader

    def _snapshot_files(self) -> list[DataFile]:
        state = self._begun.state
        snapshot = snapshot_at(self._context, state.view, None, state.read_at)
        self._reader = snapshot.file_reader()
        return snapshot.files()

    # -- what workers need ---------------------------------------------------------------------

    @property
    def ticket(self) -> WriteTicket:
        """What a worker needs (picklable): pass it to :func:`txn.write_files` with some of the
        sources' live rows; the files go to segment :attr:`target`."""
        return self._ticket

    def staging(self) -> str:
        """The folder a foreign writer writes this compaction's files to (then
        :func:`txn.adopt_files`), as :meth:`txn.PendingWrite.staging`."""
        sweep_staging(self._context.store, self._context.timeline)
        return self._ticket.staging

    # -- commit or abort -----------------------------------------------------------------------

    def commit(self, files: Iterable[WrittenFiles]) -> Commit:
        """Commit the workers' reports ``files`` as the compaction: the sources become
        ``Compacted`` with ``merged_to`` :attr:`target`, in one instant. Data files marked for
        the instant that no report names (failed or retried attempts) are deleted first.

        Raises:
            CommitConflictError: a commit completed after the snapshot read changed a source
                (a delete, update or upsert of its rows, DELETE SEGMENT, an overwrite): it
                wins, and the compaction is rolled back, as ``Table.compact``'s.
            TxnError: the reports hold another number of rows than :attr:`rows`; nothing was
                committed.
        """
        if self._status != _OPEN:
            raise InvalidOptionError(f"compaction {self.instant} was committed or aborted already")
        reports = list(files)
        wrong = [r for r in reports if not isinstance(r, WrittenFiles) or r.instant != self.instant]
        if wrong:
            raise InvalidOptionError(f"commit: {len(wrong)} report(s) are not txn.WrittenFiles of "
                                     f"instant {self.instant}; nothing was committed")
        statuses, parts, shards = gathered(reports)
        context = self._context

        def written(pending: Pending) -> Written:
            _remove_unreported(context, pending.instant.time, {s.path for s in statuses}, parts)
            return Written(statuses=statuses, index_sizes=shards)

        self._status = _DONE
        try:
            return self._begun.finish(written)
        finally:
            quietly(remove_staging, context.store, self.instant)

    def abort(self) -> None:
        """Roll the instant back and delete what the workers wrote (nothing after a commit)."""
        if self._status != _OPEN:
            return
        self._status = _DONE
        self._begun.abort()
        quietly(remove_staging, self._context.store, self.instant)

    def __enter__(self) -> PendingCompaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.abort()

    def __repr__(self) -> str:
        return (f"PendingCompaction({self.kind.value!r}, {self.sources} -> {self.target!r}, "
                f"instant={self.instant!r}, {self._status})")
