"""A storage view rooted at a folder of another storage.

The metadata table is a table of its own inside ``_metadata/``; giving it a ``PrefixedStorage``
lets it use the same ``Timeline`` code (``_metadata/_timeline/``) with no path juggling. Every
guarantee of the inner storage holds unchanged, since each call maps to exactly one inner call.
"""

from __future__ import annotations

from ._storage import Storage, Temporary, check_key, check_prefix, leftover_temporaries, move


class PrefixedStorage:
    """``inner`` seen from ``prefix``: key ``k`` here is key ``prefix/k`` there."""

    def __init__(self, inner: Storage, prefix: str) -> None:
        self._inner = inner
        self._prefix = prefix.strip("/")

    @property
    def inner(self) -> Storage:
        return self._inner

    @property
    def uri(self) -> str:
        return f"{self._inner.uri.rstrip('/')}/{self._prefix}"

    def _key(self, path: str) -> str:
        # Checked here too, so an error names the key as this view's caller gave it.
        return f"{self._prefix}/{check_key(path)}"

    def read(self, path: str) -> bytes:
        return self._inner.read(self._key(path))

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._inner.put_if_absent(self._key(path), data)

    def put(self, path: str, data: bytes) -> None:
        self._inner.put(self._key(path), data)

    def _folder(self, prefix: str) -> str:
        """Listing prefix ``prefix`` of this view as the inner storage's prefix."""
        prefix = check_prefix(prefix)
        return f"{self._prefix}/{prefix}" if prefix else self._prefix

    def list_temporaries(self, prefix: str, *, recursive: bool = False) -> list[Temporary]:
        cut = len(self._prefix) + 1
        return [Temporary(found.path[cut:], found.key[cut:], found.modified_ms) for found
                in leftover_temporaries(self._inner, self._folder(prefix), recursive=recursive)]

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        cut = len(self._prefix) + 1
        return [key[cut:] for key in self._inner.list(self._folder(prefix), recursive=recursive)]

    def delete(self, path: str) -> None:
        self._inner.delete(self._key(path))

    def exists(self, path: str) -> bool:
        return self._inner.exists(self._key(path))

    def move(self, source: str, target: str) -> None:
        """Move within the view (the inner storage's own move if it has one)."""
        move(self._inner, self._key(source), self._key(target))

    def size(self, path: str) -> int:
        return self._inner.size(self._key(path))

    def __repr__(self) -> str:
        return f"PrefixedStorage({self._inner!r}, {self._prefix!r})"
