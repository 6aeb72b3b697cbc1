"""Local-disk storage.

Atomicity argument. ``put_if_absent`` writes the whole content to a uniquely named temporary file
in the destination folder, then gives it the final name with a call that fails with ``EEXIST``
when the name exists (``timeline._noreplace``): ``os.link(tmp, final)`` where the filesystem has
hard links; ``renameat2(RENAME_NOREPLACE)`` where it has not (SMB, exFAT, FUSE mounts) but has
that; else an ``O_EXCL`` create of the final name as a claim, then ``os.replace`` of the
temporary over the empty claim. Each is atomic with respect to the others on the same name, so
exactly one of several racing creators wins, in threads or processes. The first two show readers
no file or the complete one; the claim can show an empty file between its two calls (``read``
waits briefly for a fresh empty file to fill), never a prefix. The method that worked is kept
per storage. ``put`` uses ``os.replace`` of a temporary file, which is atomic in visibility (last
writer wins). Temporary files start with ``.`` and end with ``.tmp``; listings skip them.

Failures. Every key is checked before use (``check_key``: relative, normalised, no ``..``), so
no call reaches outside the root. An operating-system failure (disk full, permission denied, a
name too long) becomes :class:`StorageError` naming the key, the root and the reason, with the
original ``errno``; a write that fails removes its temporary file first, so a full disk is not
filled further by leftovers. A name too long to exist, or a path through a file, is simply
absent for ``read``, ``size`` and ``delete``.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.fs

from ._errors import ObjectExistsError, ObjectNotFoundError, StorageError
from ._noreplace import NoReplace
from ._storage import Temporary, check_key, check_prefix

_TMP_SUFFIX = ".tmp"
_counter = itertools.count()
#: Errors that mean "no object can be at this key": a component is a file, or a name is longer
#: than the filesystem allows.
_ABSENT_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG})
#: How long ``read`` waits for a fresh empty file to fill (a claim between its create and its
#: rename, two system calls apart), and how fresh "fresh" is.
_SETTLE_SECONDS = 0.05
_FRESH_SECONDS = 1.0


def _is_temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(_TMP_SUFFIX)


#: A temporary ``_temporary_beside`` names: ``.<name>.<pid>.<thread>.<n>.tmp``.
_STAGED = re.compile(r"\.(.+)\.\d+\.\d+\.\d+\.tmp")


def _staged_name(temporary: str) -> str | None:
    """The file name a temporary of ours was staging; None for any other name."""
    match = _STAGED.fullmatch(temporary)
    return match.group(1) if match else None


class LocalStorage:
    """Storage rooted at a folder on a local (POSIX) filesystem."""

    def __init__(self, root: str | os.PathLike[str], *, uri: str | None = None,
                 fsync: bool = False) -> None:
        self._root = Path(root).resolve()
        # Paths are built as strings: this is on every metadata call, and pathlib is slow.
        self._root_text = str(self._root)
        self._uri = uri if uri is not None else self._root_text
        self._fsync = fsync
        # Which no-overwrite call this filesystem supports, found by the first put_if_absent.
        self._noreplace = NoReplace()

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def root(self) -> Path:
        return self._root

    def _abs(self, path: str) -> str:
        return f"{self._root_text}/{check_key(path)}"

    def _failed(self, action: str, path: str, exc: OSError) -> StorageError:
        reason = exc.strerror or str(exc)
        error = StorageError(
            f"could not {action} {path!r} in the table folder {self._root_text!r}: {reason} "
            f"(errno {exc.errno}); expected the local filesystem to accept it (free space, "
            "permissions, name length)"
        )
        error.errno = exc.errno
        return error

    def _temporary_beside(self, final: str) -> str:
        # Unique per process, thread and call: never shared by two writers, so never torn.
        token = f"{os.getpid()}.{threading.get_ident()}.{next(_counter)}"
        folder, name = os.path.split(final)
        return os.path.join(folder, f".{name}.{token}{_TMP_SUFFIX}")

    def _write_temporary(self, path: str, final: str, data: bytes) -> str:
        while True:
            tmp = self._temporary_beside(final)
            try:
                handle = _create(tmp)
            except FileExistsError:
                # A killed process's leftover of this very name (its pid and thread id reused):
                # never write through it, it may be a second name of a committed file.
                continue
            except OSError as exc:
                _unlink_quietly(tmp)  # a full folder may fail the open after the file was made
                raise self._failed("write", path, exc) from exc
            break
        try:
            with handle:
                # Unbuffered: one write(2) for a small file, without a buffer object per put.
                view = memoryview(data)
                while view:
                    written = handle.write(view)
                    if not written:
                        raise OSError(errno.EIO, "the file took no bytes")
                    view = view[written:]
                if self._fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
        except BaseException as exc:
            # A full disk fails the write or the close; never leave the partial file behind.
            _unlink_quietly(tmp)
            if isinstance(exc, OSError):
                raise self._failed("write", path, exc) from exc
            raise
        return tmp

    def read(self, path: str) -> bytes:
        full = self._abs(path)
        try:
            with open(full, "rb") as handle:
                data = handle.read()
            if not data:
                data = _settle(full)
            return data
        except IsADirectoryError:
            raise ObjectNotFoundError(path) from None
        except OSError as exc:
            if exc.errno in _ABSENT_ERRNOS:
                raise ObjectNotFoundError(path) from None
            raise self._failed("read", path, exc) from exc

    def put_if_absent(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        tmp = self._write_temporary(path, final, data)
        try:
            self._noreplace.publish(tmp, final)
        except FileExistsError:
            raise ObjectExistsError(path) from None
        except OSError as exc:
            raise self._failed("create", path, exc) from exc
        finally:
            # After a rename the temporary name is gone already; after a link it is a second name.
            _unlink_quietly(tmp)
        if self._fsync:
            _fsync_folder(os.path.dirname(final))

    def put(self, path: str, data: bytes) -> None:
        final = self._abs(path)
        tmp = self._write_temporary(path, final, data)
        try:
            os.replace(tmp, final)
        except BaseException as exc:
            _unlink_quietly(tmp)
            if isinstance(exc, OSError):
                raise self._failed("replace", path, exc) from exc
            raise

    def _walk(self, prefix: str, *, recursive: bool = True) -> Iterator[tuple[str, list[str]]]:
        """``(folder key with its trailing "/", file names)`` for each folder under ``prefix``."""
        base = f"{self._root_text}/{prefix}" if prefix else self._root_text
        cut = len(self._root_text) + 1

        def failed(exc: OSError) -> None:
            # A folder removed while walking is simply gone; anything else is a failure.
            if exc.errno not in _ABSENT_ERRNOS:
                raise self._failed("list", prefix, exc) from exc

        for folder, _dirs, files in os.walk(base, onerror=failed):
            rel = folder[cut:].replace(os.sep, "/")
            yield (f"{rel}/" if rel else ""), files
            if not recursive:
                return

    def list_temporaries(self, prefix: str, *, recursive: bool = False) -> list[Temporary]:
        """Temporary files under ``prefix`` (see :class:`timeline.Staging`): a writer killed
        inside a put leaves its temporary behind."""
        found = []
        for rel, files in self._walk(check_prefix(prefix), recursive=recursive):
            for name in files:
                staged = _staged_name(name)
                if staged is None:
                    continue
                try:
                    modified = os.stat(f"{self._root_text}/{rel}{name}").st_mtime_ns // 1_000_000
                except FileNotFoundError:
                    continue  # its put has just returned
                except OSError as exc:
                    raise self._failed("stat", f"{rel}{name}", exc) from exc
                found.append(Temporary(f"{rel}{name}", f"{rel}{staged}", modified))
        found.sort()
        return found

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        prefix = check_prefix(prefix)
        keys: list[str] = []
        if recursive:
            for rel, files in self._walk(prefix):
                keys.extend(f"{rel}{name}" for name in files if not _is_temporary(name))
        else:
            base = f"{self._root_text}/{prefix}" if prefix else self._root_text
            try:
                entries = os.scandir(base)
            except OSError as exc:
                if exc.errno in _ABSENT_ERRNOS:
                    return []
                raise self._failed("list", prefix, exc) from exc
            with entries:
                for entry in entries:
                    if not _is_temporary(entry.name) and entry.is_file():
                        keys.append(f"{prefix}/{entry.name}" if prefix else entry.name)
        keys.sort()
        return keys

    def delete(self, path: str) -> None:
        try:
            os.unlink(self._abs(path))
        except OSError as exc:
            if exc.errno in _ABSENT_ERRNOS:
                return
            raise self._failed("delete", path, exc) from exc

    def move(self, source: str, target: str) -> None:
        """Move ``source`` to ``target``, which must not exist: a hard link, then an unlink (or,
        without hard links, the same no-overwrite rename as ``put_if_absent``).

        Every method refuses an existing name, so ``target`` is never overwritten, and the content
        is never copied. A crash between link and unlink leaves both names on the one file; a
        crash inside the claim fallback leaves the source whole and an empty target.
        """
        src, dst = self._abs(source), self._abs(target)
        if not os.path.isfile(src):
            raise ObjectNotFoundError(source)
        try:
            try:
                self._noreplace.publish(src, dst)
            except FileNotFoundError:
                if not os.path.isfile(src):
                    raise ObjectNotFoundError(source) from None
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                self._noreplace.publish(src, dst)
        except FileExistsError:
            raise ObjectExistsError(target) from None
        except OSError as exc:
            if exc.errno in _ABSENT_ERRNOS and not os.path.isfile(src):
                raise ObjectNotFoundError(source) from None
            raise self._failed("move", f"{source} -> {target}", exc) from exc
        if self._fsync:
            _fsync_folder(os.path.dirname(dst))
        if self._noreplace.method == "link":
            self.delete(source)
        if self._fsync:
            _fsync_folder(os.path.dirname(src))

    def exists(self, path: str) -> bool:
        return os.path.isfile(self._abs(path))

    def size(self, path: str) -> int:
        try:
            return os.stat(self._abs(path)).st_size
        except OSError as exc:
            if exc.errno in _ABSENT_ERRNOS:
                raise ObjectNotFoundError(path) from None
            raise self._failed("stat", path, exc) from exc

    def arrow_filesystem(self) -> tuple[pa.fs.FileSystem, str]:
        """A pyarrow filesystem and the root's path in it, for reading and writing data files."""
        return pa.fs.LocalFileSystem(), self._root.as_posix()

    def __repr__(self) -> str:
        return f"LocalStorage({str(self._root)!r})"


def _create(path: str) -> BinaryIO:
    """Open a file that must not exist yet for writing, creating its folder only when it is
    missing. Raises ``FileExistsError`` if the name exists."""
    try:
        return open(path, "xb", buffering=0)  # the caller's with-block closes it
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "xb", buffering=0)


def _settle(full: str) -> bytes:
    """The content of ``full``, which read empty: a claim (see ``timeline._noreplace``) is empty
    for the two system calls between its create and its rename, so a file changed within the
    last second gets a few short re-reads before its emptiness is believed."""
    deadline = time.monotonic() + _SETTLE_SECONDS
    delay = 0.001
    while time.time() - os.stat(full).st_mtime < _FRESH_SECONDS and time.monotonic() < deadline:
        time.sleep(delay)
        delay *= 2
        with open(full, "rb") as handle:
            data = handle.read()
        if data:
            return data
    return b""


def _unlink_quietly(path: str) -> None:
    # Called while another error is on its way out: that error is the one to report.
    with contextlib.suppress(OSError):
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
