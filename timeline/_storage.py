"""The storage seam: the few operations the rest of metatxn is allowed to ask of a filesystem.

Every byte metatxn writes goes through a :class:`Storage`. Paths are table-relative, ``/``-separated
keys (``_timeline/20260101000000000.commit.requested``); a backend maps them under its root.

Guarantees every backend must give (and the contract tests in ``tests/unit/timeline`` check):

* **Atomic visibility.** A reader sees either no object or the whole object, never a prefix.
* **Mutual exclusion on create.** Of any number of concurrent ``put_if_absent`` calls on one
  key, exactly one succeeds; every other raises :class:`ObjectExistsError`, and the content read
  back afterwards is the winner's, byte for byte. This is the only primitive the commit protocol
  and the table lock rely on for correctness.
* **Read-after-write and consistent listing.** Once a put returned, ``read``, ``exists`` and
  ``list`` in any process see it.

Not guaranteed: ``put`` (plain overwrite) is atomic in visibility but is last-writer-wins, so it is
only used for files that are not commit points (heartbeats, archive files written under the
lock). ``delete`` of a missing key is not an error. fsspec's generic ``mode="create"`` is
documented as not atomic on most filesystems, so no backend uses it.

**Moving** (:func:`move`, CLEAN FILES moving files to the table's trash) is an optional
operation: a backend may offer ``move(source, target)`` (local disk: a hard link then an unlink,
or a no-overwrite rename where links fail, nothing copied; memory: under its lock; S3: a
server-side copy then a delete), and any other storage gets the same through the protocol (read,
put-if-absent, delete). Either way ``target`` is never overwritten and never seen partial, and a
crash part way leaves the object at ``source``, at ``target``, or whole at both: never at
neither (local disk's last fallback, the ``O_EXCL`` claim, can also leave an empty ``target``
beside the whole ``source``). It is not a commit point.

**Staging** (:func:`leftover_temporaries`) is optional too: a backend that stages each write in
a temporary object beside its key (local disk) lists the ones a process killed mid-write left
behind, with the key each was staging, so the cleanups that delete a decided instant's markers
delete its half-written markers too, and CLEAN FILES the other leftovers. Listings never show
temporaries; a backend whose puts are atomic by themselves (S3, memory) has none.

**Keys never leave the root.** Every backend checks each key with :func:`check_key` (and each
listing prefix with :func:`check_prefix`) before it touches storage: a key is non-empty,
relative, ``/``-separated, and has no empty, ``.`` or ``..`` segment and no NUL character. Keys
come from metatxn itself, but some are read back from storage (markers name data files), so a
damaged or hostile file must not be able to aim a delete outside the table.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol, runtime_checkable

from ._errors import InvalidOptionError, ObjectExistsError


@runtime_checkable
class Storage(Protocol):
    """Table-rooted object storage with an atomic put-if-absent.

    See the module docstring for the guarantees each method must give.
    """

    @property
    def uri(self) -> str:
        """The root this storage is bound to, as the user gave it."""
        ...

    def read(self, path: str) -> bytes:
        """Return the whole object. Raises ObjectNotFoundError if it does not exist."""
        ...

    def put_if_absent(self, path: str, data: bytes) -> None:
        """Create the object atomically. Raises ObjectExistsError if it already exists."""
        ...

    def put(self, path: str, data: bytes) -> None:
        """Create or replace the object; atomic in visibility, last writer wins."""
        ...

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        """Return the sorted keys of the objects under folder ``prefix``.

        Without ``recursive`` only objects directly in the folder are returned, not sub-folders.
        A missing folder lists as empty.
        """
        ...

    def delete(self, path: str) -> None:
        """Remove the object; a missing object is not an error."""
        ...

    def exists(self, path: str) -> bool:
        """Whether the object exists."""
        ...

    def size(self, path: str) -> int:
        """Size in bytes. Raises ObjectNotFoundError if it does not exist."""
        ...


@runtime_checkable
class Movable(Protocol):
    """A storage that moves objects itself (see :func:`move`)."""

    def move(self, source: str, target: str) -> None:
        """Move object ``source`` to ``target``; see :func:`move` for the contract."""
        ...


def move(storage: Storage, source: str, target: str) -> None:
    """Move object ``source`` to key ``target``, which must not exist yet.

    Uses the backend's own ``move`` when it has one, else read, put-if-absent and delete. A crash
    part way leaves the object at ``source``, at ``target``, or (whole) at both.

    Raises:
        ObjectNotFoundError: ``source`` does not exist (nothing changed).
        ObjectExistsError: ``target`` exists (nothing changed: ``source`` is still there).
    """
    if isinstance(storage, Movable):
        storage.move(source, target)
        return
    data = storage.read(source)
    try:
        storage.put_if_absent(target, data)
    except ObjectExistsError:
        raise ObjectExistsError(target) from None
    storage.delete(source)


class Temporary(NamedTuple):
    """A temporary object a put staged its content in."""

    path: str  #: its own key (``delete`` removes it)
    key: str  #: the key the put was writing
    modified_ms: int  #: when it was last written, by the storage's wall clock


@runtime_checkable
class Staging(Protocol):
    """A storage that stages each write in a temporary object beside its key."""

    def list_temporaries(self, prefix: str, *, recursive: bool = False) -> list[Temporary]:
        """The temporary objects under folder ``prefix``, sorted; ``recursive`` as for ``list``."""
        ...


def leftover_temporaries(storage: Storage, prefix: str, *,
                         recursive: bool = False) -> list[Temporary]:
    """The temporary objects under ``prefix`` (see :class:`Staging`); none for a backend that
    stages nothing. A live writer's temporary vanishes when its put returns, so callers delete
    only those of decided instants, or old enough that no put can still be writing them."""
    if isinstance(storage, Staging):
        return storage.list_temporaries(prefix, recursive=recursive)
    return []


def join(*parts: str) -> str:
    """Join key parts with ``/``, ignoring empty parts."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))


_BAD_SEGMENTS = frozenset({"", ".", ".."})


def check_key(path: str) -> str:
    """Return ``path`` if it is a key inside the root; raise :class:`InvalidOptionError` if not.

    A key is non-empty, relative, ``/``-separated and normalised: no empty, ``.`` or ``..``
    segment (so no leading, trailing or doubled ``/``), and no NUL character.
    """
    if not isinstance(path, str):
        raise InvalidOptionError(f"storage key {path!r} is not a string; expected a table-relative "
                                 "path such as '_timeline/table.json'")
    if "\x00" in path or _BAD_SEGMENTS.intersection(path.split("/")):
        raise InvalidOptionError(
            f"storage key {path!r} is not a normalised table-relative path; expected "
            "'/'-separated names with no empty, '.' or '..' segment, not absolute, which can "
            "never leave the table's root"
        )
    return path


def check_prefix(prefix: str) -> str:
    """A listing prefix without its outer ``/``: empty (the root) or a valid key."""
    stripped = prefix.strip("/")
    if stripped:
        check_key(stripped)
    return stripped
