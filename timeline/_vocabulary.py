"""The base of every closed vocabulary stored as strings (actions here; operations, segment
statuses, clean reasons and the like in the layers above)."""

from __future__ import annotations

import enum


class Vocabulary(str, enum.Enum):
    """A closed set of names, each member being its stored spelling.

    A member equals (and hashes as) its plain string, msgspec encodes it as that string, so what
    is on storage does not change and a record written before the type existed reads the same.
    Its ``repr`` is the string's too, so messages that quote a value (``{value!r}``) read as they
    did when values were plain strings. It pickles as the plain string: a reader without this
    class (Spark's JVM unpickler, given the rows of a SHOW command's DataFrame) gets a string.
    """

    # What ``enum.StrEnum`` (Python 3.11+) does; written out for 3.10, the oldest we support:
    # ``str()`` and format specs give the stored spelling, not ``Action.COMMIT``.
    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self.value)

    def __reduce_ex__(self, protocol: object) -> tuple[type[str], tuple[str]]:
        return str, (str(self.value),)
