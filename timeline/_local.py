"""Local-disk storage.

Atomicity argument. ``put_if_absent`` writes the whole content to a uniquely named temporary file
in the destination folder, then calls ``os.link(tmp, final)``. POSIX
``link(2)`` fails with ``EEXIST`` when ``final`` exists and is atomic with respect to other
``link``/``open(O_CREAT|O_EXCL)`` calls on the same name, so exactly one of several racing
creators wins, in threads or processes. Because the link points at an inode whose content was
complete and durable before the name appeared, no reader can see a torn file. ``put`` uses
``os.replace`` of a temporary file, which is atomic in visibility (last writer wins). Temporary
files start with ``.`` and end with ``.tmp``; listings skip them.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import threading
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.fs

from ._errors import ObjectExistsError, ObjectNotFoundError, StorageError

_TMP_SUFFIX = ".tmp"
_counter = itertools.count()


def _is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(_TMP_SUFFIX)


class LocalStorage:
    """Storage rooted at a folder on a local (POSIX) filesystem."""

    def __init__(self, root: str | os.PathLike[str], *, uri: str | None = None,
                 fsync: bool = False) -> None:
        self._root = Path(root).resolve()
        # Paths are built as strings: this is on every metadata call, and pathlib is slow.
        self._root_text = str(self._root)
        self._uri = uri if uri is not None else self._root_text
        self._fsync = fsync

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def root(self) -> Path:
        return self._root

    def _abs(self, path: str) -> str:
        return f"{self._root_text}/{path}" if path else self._root_text

    def _temporary_beside(self, final: str) -> str:
        # Unique per process, thread and call: never shared by two writers, so never torn.
        token = f"{os.getpid()}.{threading.get_ident()}.{next(_counter)}"
        folder, name = os.path.split(final)
        return os.path.join(folder, f".{name}.{token}{_TMP_SUFFIX}")

    def _write_temporary(self, final: str, data: bytes) -> str:
        tmp = self._temporary_beside(final)
        with _create(tmp) as handle:
            handle.write(data)
            if self._fsync:
                handle.flush()
                os.fsync(handle.fileno())
        return tmp

    def read(self, path: str) -> bytes:
        try:
            with open(self._abs(path), "rb") as handle:
                return handle.read()
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFoundError(path) from None
        except IsADirectoryError:
            raise ObjectNotFoundError(path) from None

    def put_if_absent(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        tmp = self._write_temporary(final, data)
        try:
            os.link(tmp, final)
        except FileExistsError:
            raise ObjectExistsError(path) from None
        except OSError as exc:
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                raise StorageError(
                    f"the filesystem under {str(self._root)!r} does not support hard links, "
                    "which metatxn needs for an atomic put-if-absent on local disk"
                ) from exc
            raise
        finally:
            _unlink_quietly(tmp)
        if self._fsync:
            _fsync_folder(os.path.dirname(final))

    def put(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        tmp = self._write_temporary(final, data)
        try:
            os.replace(tmp, final)
        except BaseException:
            _unlink_quietly(tmp)
            raise

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        prefix = prefix.strip("/")
        base = self._abs(prefix)
        keys: list[str] = []
        if recursive:
            cut = len(self._root_text) + 1
            for folder, _dirs, files in os.walk(base):
                rel = folder[cut:].replace(os.sep, "/")
                for name in files:
                    if not _is_temporary(name):
                        keys.append(f"{rel}/{name}" if rel else name)
        else:
            try:
                entries = os.scandir(base)
            except (FileNotFoundError, NotADirectoryError):
                return []
            with entries:
                for entry in entries:
                    if not _is_temporary(entry.name) and entry.is_file():
                        keys.append(f"{prefix}/{entry.name}" if prefix else entry.name)
        keys.sort()
        return keys

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._abs(path))

    def exists(self, path: str) -> bool:
        return os.path.isfile(self._abs(path))

    def size(self, path: str) -> int:
        try:
            return os.stat(self._abs(path)).st_size
        except FileNotFoundError:
            raise ObjectNotFoundError(path) from None

    def arrow_filesystem(self) -> tuple[pa.fs.FileSystem, str]:
        """A pyarrow filesystem and the root's path in it, for reading and writing data files."""
        return pa.fs.LocalFileSystem(), self._root.as_posix()

    def __repr__(self) -> str:
        return f"LocalStorage({str(self._root)!r})"


def _create(path: str) -> BinaryIO:
    """Open a new file for writing, creating its folder only when it is missing."""
    try:
        return open(path, "wb")  # the caller's with-block closes it
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "wb")


def _unlink_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _fsync_folder(folder: str) -> None:
    # Make the new directory entry durable too; some platforms cannot open folders, which is fine.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
