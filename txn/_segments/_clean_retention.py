"""CLEAN FILES, retention: which removals may be cleaned, and when each removal happened.

A file removed by the commit completed at ``r`` is needed by the snapshots with a bound in
``[added, r)``; it may go once ``r <= floor`` (see :func:`retention_floor`). ``r`` is read from
the commit metadata of the completed data instants (``files_removed``, ``deltas_removed``),
archived ones included; a removal that cannot be found keeps its file.
"""

from __future__ import annotations

import logging

import msgspec

from metatxn.timeline import (
    ARCHIVE_FOLDER,
    CorruptMetadataError,
    Instant,
    TimelineView,
    TxnError,
    format_time,
    read_archive,
)

from .._context import DATA_ACTIONS, CommitMetadata, TableContext, WritePlan

log = logging.getLogger("metatxn")

HOUR_MS = 3_600_000


class History:
    """Completed data instants, the archived ones read only when needed (once)."""

    def __init__(self, context: TableContext, view: TimelineView) -> None:
        self._context = context
        self._view = view
        self._active = [i for i in view.completed() if i.action in DATA_ACTIONS]
        self._archived: list[tuple[Instant, msgspec.Raw]] | None = None

    def archived(self) -> list[tuple[Instant, msgspec.Raw]]:
        if self._archived is None:
            active = {i.time for i in self._view}
            try:
                records = list(read_archive(self._context.storage).values())
            except CorruptMetadataError as exc:
                # What a damaged archive holds stays unknown: its commits do not count toward
                # retain_commits and its removals are not found, so their files stay.
                log.warning("CLEAN FILES could not read the archived timeline: %s", exc)
                records = []
            self._archived = sorted(
                ((Instant(time=r.time, action=r.action, state="completed",
                          completed_at=r.completed_at), r.metadata)
                 for r in records if r.state == "completed" and r.completed_at
                 and r.action in DATA_ACTIONS and r.time not in active),
                key=lambda pair: pair[0].completed_at or "")
        return self._archived

    def completions(self, at_least: int) -> list[str]:
        """Completion times of the data commits, oldest first: all active ones, and the
        archived ones too when fewer than ``at_least`` are active."""
        done = [i.completed_at or "" for i in self._active]
        if len(done) < at_least:
            done = [i.completed_at or "" for i, _ in self.archived()] + done
        return done

    def removals(self, paths: set[str], upto: str) -> dict[str, str]:
        """``path -> completion time`` of the commit, completed at or before ``upto``, that
        removed it, for the ``paths`` found (a removal after ``upto`` keeps its file anyway)."""
        found: dict[str, str] = {}
        for instant in self._active:
            if (instant.completed_at or "") > upto:
                break
            try:
                record = self._context.timeline.read_metadata(instant, CommitMetadata)
            except (FileNotFoundError, TxnError) as exc:
                log.warning("CLEAN FILES keeps what instant %s removed: %s", instant.time, exc)
                continue
            self._note(found, paths, record, instant.completed_at or "")
        if len(found) < len(paths) and self._context.storage.list(ARCHIVE_FOLDER):
            for instant, raw in self.archived():
                if (instant.completed_at or "") > upto:
                    break
                try:
                    record = msgspec.json.decode(raw, type=CommitMetadata)
                except msgspec.DecodeError:
                    continue
                self._note(found, paths, record, instant.completed_at or "")
        return found

    @staticmethod
    def _note(found: dict[str, str], paths: set[str], record: CommitMetadata, done: str) -> None:
        for path in (*record.files_removed, *record.deltas_removed):
            if path in paths:
                found[path] = max(found.get(path, ""), done)


def retention_floor(context: TableContext, view: TimelineView, history: History, now: int,
                    retain_commits: int, retain_hours: int, force: bool) -> str:
    """Removals completed at or before this time may be cleaned ("": none).

    ``min(completion of the retain_commits-th last data commit, now - retain_hours, the last
    data commit)``; with ``force`` the last data commit. Either way never above the last
    completion before a live pending data instant began: that writer read a snapshot no newer.
    """
    completions = history.completions(retain_commits)
    if not completions:
        return ""
    latest = completions[-1]
    if force:
        floor = latest
    else:
        by_commits = completions[-retain_commits] if len(completions) >= retain_commits else ""
        by_hours = format_time(max(0, now - retain_hours * HOUR_MS))
        floor = min(by_commits, by_hours, latest)
    # A live writer read a snapshot before it began (its plan says which: ``read_at``; a plan
    # without it, before the writer began): keep what that snapshot needs.
    try:
        expired = {i.time for i in context.timeline.expired(view)}
    except TxnError:
        expired = set()
    for instant in view.pending():
        if instant.action not in DATA_ACTIONS or instant.time in expired:
            continue
        try:
            read_at = context.timeline.read_plan(instant, WritePlan).read_at
        except TxnError:
            read_at = None
        if read_at is None:
            read_at = max((i.completed_at or "" for i in view.completed()
                           if (i.completed_at or "") < instant.time), default="")
        floor = min(floor, read_at)
    return floor


__all__ = ["HOUR_MS", "History", "retention_floor"]
