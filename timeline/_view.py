"""An immutable, materialised view of the active timeline."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cached_property

from ._errors import CorruptMetadataError
from ._instant import COMPLETED, INFLIGHT, REQUESTED, ROLLEDBACK, Instant, state_rank


class TimelineView:
    """The instants of the active timeline at the moment it was listed.

    Instants are ordered by requested time; :meth:`completed` is ordered by completion time, the
    order snapshots follow.
    """

    def __init__(self, instants: Iterable[Instant]) -> None:
        self._instants = tuple(sorted(instants, key=lambda i: i.time))
        self._by_time = {i.time: i for i in self._instants}

    @classmethod
    def from_state_files(cls, files: Sequence[tuple[str, Instant]]) -> TimelineView:
        """Fold state files (name, parsed instant) into one instant per requested time.

        Raises:
            CorruptMetadataError: two actions share a requested time, an instant has two
                completion files, or it is both completed and rolled back.
        """
        folded: dict[str, tuple[str, Instant]] = {}
        for name, seen in files:
            held = folded.get(seen.time)
            if held is None:
                folded[seen.time] = (name, seen)
                continue
            held_name, current = held
            if current.action != seen.action:
                raise CorruptMetadataError(
                    name, f"one action per instant time ({current.action!r} from {held_name!r})",
                    f"action {seen.action!r}",
                )
            terminal = {current.state, seen.state} & {COMPLETED, ROLLEDBACK}
            if len(terminal) == 2 or (
                current.state == seen.state == COMPLETED and current.completed_at != seen.completed_at
            ):
                raise CorruptMetadataError(
                    name, f"a single terminal state for instant {seen.time}",
                    f"also {held_name!r}",
                )
            if state_rank(seen.state) > state_rank(current.state):
                folded[seen.time] = (name, seen)
        return cls(instant for _, instant in folded.values())

    def with_instant(self, instant: Instant) -> TimelineView:
        """This view with ``instant`` added, or replacing the instant of the same time."""
        return TimelineView([i for i in self._instants if i.time != instant.time] + [instant])

    @property
    def instants(self) -> tuple[Instant, ...]:
        """Every active instant, by requested time."""
        return self._instants

    @cached_property
    def _completed(self) -> tuple[Instant, ...]:
        return tuple(sorted((i for i in self._instants if i.state == COMPLETED),
                            key=lambda i: i.completed_at or ""))

    def completed(self) -> tuple[Instant, ...]:
        """Completed instants in completion order."""
        return self._completed

    def pending(self) -> tuple[Instant, ...]:
        """Requested or inflight instants, by requested time."""
        return tuple(i for i in self._instants if i.state in (REQUESTED, INFLIGHT))

    def rolled_back(self) -> tuple[Instant, ...]:
        return tuple(i for i in self._instants if i.state == ROLLEDBACK)

    def get(self, time: str) -> Instant | None:
        return self._by_time.get(time)

    def last_completed(self) -> Instant | None:
        return self._completed[-1] if self._completed else None

    def completed_up_to(self, time_inclusive: str) -> tuple[Instant, ...]:
        """Completed instants with completion time in ``(-inf, time_inclusive]``."""
        return tuple(i for i in self._completed if (i.completed_at or "") <= time_inclusive)

    def completed_after(self, time_exclusive: str) -> tuple[Instant, ...]:
        """Completed instants with completion time in ``(time_exclusive, +inf)``.

        With the requested time of a pending write this is its concurrent set: everything that
        committed after it began.
        """
        return tuple(i for i in self._completed if (i.completed_at or "") > time_exclusive)

    def max_time(self) -> str | None:
        """The largest requested or completion time in the view."""
        times = [i.time for i in self._instants]
        times += [i.completed_at for i in self._completed if i.completed_at]
        return max(times, default=None)

    def __len__(self) -> int:
        return len(self._instants)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._instants)

    def __repr__(self) -> str:
        return f"TimelineView({len(self._instants)} instants, {len(self._completed)} completed)"
