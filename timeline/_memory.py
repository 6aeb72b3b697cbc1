"""In-memory storage on fsspec's memory filesystem, for tests and throwaway tables.

Atomicity argument. fsspec's memory filesystem keeps one process-wide dictionary of files. Every
operation here runs under one process-wide lock, and a file is installed in the dictionary as a
complete object, so a reader sees all of it or none of it, and the existence check plus insert of
``put_if_absent`` cannot interleave with another writer. The store is per process: tables on
``memory://`` are not shared across processes, so the race that matters is between threads.
Keys are checked like every backend's (``check_key``): none reaches outside the root.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pyarrow as pa
import pyarrow.fs

from ._errors import ObjectExistsError, ObjectNotFoundError
from ._storage import check_key, check_prefix

# One lock for every MemoryStorage: they may share fsspec's process-wide store.
_LOCK = threading.RLock()


class MemoryStorage:
    """Storage rooted at a folder of fsspec's memory filesystem."""

    def __init__(self, root: str, *, uri: str | None = None, fs: Any = None) -> None:
        import fsspec

        self._fs = fs if fs is not None else fsspec.filesystem("memory")
        self._root = "/" + root.strip("/")
        self._uri = uri if uri is not None else f"memory://{self._root}"

    @property
    def uri(self) -> str:
        return self._uri

    def _abs(self, path: str) -> str:
        return f"{self._root}/{check_key(path)}"

    def read(self, path: str) -> bytes:
        with _LOCK:
            try:
                data: bytes = self._fs.cat_file(self._abs(path))
            except (FileNotFoundError, IsADirectoryError):
                raise ObjectNotFoundError(path) from None
        return data

    def put_if_absent(self, path: str, data: bytes) -> None:
        with _LOCK:
            if self._fs.isfile(self._abs(path)):
                raise ObjectExistsError(path)
            self._fs.pipe_file(self._abs(path), bytes(data))

    def put(self, path: str, data: bytes) -> None:
        with _LOCK:
            self._fs.pipe_file(self._abs(path), bytes(data))

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        prefix = check_prefix(prefix)
        base = f"{self._root}/{prefix}" if prefix else self._root
        with _LOCK:
            if not self._fs.isdir(base):
                return []
            if recursive:
                found = self._fs.find(base)
            else:
                found = [e["name"] for e in self._fs.ls(base, detail=True) if e["type"] == "file"]
        # fsspec versions differ on the leading "/" of memory paths; normalise before cutting.
        offset = len(self._root) + 1
        return sorted(("/" + name.lstrip("/"))[offset:] for name in found)

    def delete(self, path: str) -> None:
        with _LOCK, contextlib.suppress(FileNotFoundError):
            self._fs.rm_file(self._abs(path))

    def move(self, source: str, target: str) -> None:
        """Move ``source`` to ``target`` (which must not exist), atomically under the lock."""
        with _LOCK:
            if not self._fs.isfile(self._abs(source)):
                raise ObjectNotFoundError(source)
            if self._fs.isfile(self._abs(target)):
                raise ObjectExistsError(target)
            self._fs.pipe_file(self._abs(target), self._fs.cat_file(self._abs(source)))
            self._fs.rm_file(self._abs(source))

    def exists(self, path: str) -> bool:
        with _LOCK:
            return bool(self._fs.isfile(self._abs(path)))

    def size(self, path: str) -> int:
        with _LOCK:
            try:
                return int(self._fs.size(self._abs(path)))
            except FileNotFoundError:
                raise ObjectNotFoundError(path) from None

    def arrow_filesystem(self) -> tuple[pa.fs.FileSystem, str]:
        """A pyarrow filesystem and the root's path in it, for reading and writing data files."""
        return pa.fs.PyFileSystem(pa.fs.FSSpecHandler(self._fs)), self._root

    def __repr__(self) -> str:
        return f"MemoryStorage({self._root!r})"
