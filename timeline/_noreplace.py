"""Give a complete file a second name that must not exist yet, on any local filesystem.

Three methods, each of which creates the new name only if it is absent, atomically in the kernel
or the file server, so writers using different methods still exclude each other:

``link``
    ``link(2)``: the new name points at the complete file; the old name stays (the caller
    unlinks it). POSIX and every Linux disk filesystem.
``rename``
    ``renameat2(RENAME_NOREPLACE)`` (Linux 3.15+, glibc 2.28+, reached through ctypes because
    Python has no binding): the file moves to the new name, which must be absent. ext4, xfs,
    btrfs, tmpfs and others; what delta-rs's local store uses.
``claim``
    ``open(O_CREAT | O_EXCL)`` of the new name (an empty file: the claim; SMB and NFSv3+ honour
    ``O_EXCL`` on the server), then ``rename(2)`` of the complete file over the claim. Mutual
    exclusion is the ``O_EXCL`` create; the rename replaces the empty claim whole. A reader can
    see the empty claim between the two calls (or forever, if the writer is killed between
    them), never a prefix of the content.

SMB, exFAT and many FUSE mounts refuse hard links; some also refuse ``RENAME_NOREPLACE``.
:class:`NoReplace` tries the methods in that order and keeps the first that works, so each call
after the first costs one attempt.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
from collections.abc import Callable

#: Errors that say "this filesystem cannot do that", not "this call failed".
UNSUPPORTED_ERRNOS = frozenset(
    (
        errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK, errno.ENOSYS,
        errno.EINVAL,
    )
)
METHODS = ("link", "rename", "claim")

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _load_renameat2() -> Callable[[str, str], None] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.renameat2
    except (OSError, AttributeError, TypeError):
        return None  # not Linux, or a libc older than glibc 2.28
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    function.restype = ctypes.c_int

    def renameat2(source: str, target: str) -> None:
        if function(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target),
                    _RENAME_NOREPLACE) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), source, None, target)

    return renameat2


#: ``renameat2(source, target, RENAME_NOREPLACE)``, or None where libc lacks it. Tests set it to
#: None to stand for such a platform.
rename_noreplace = _load_renameat2()


class NoReplace:
    """Publishes a complete temporary file under a final name that must be absent.

    ``publish(tmp, final)`` raises ``FileExistsError`` if ``final`` exists and any other
    ``OSError`` as the filesystem reported it; the temporary name may remain (the caller removes
    it quietly). ``method`` is the method that worked, or None before the first publish.
    """

    def __init__(self, method: str | None = None) -> None:
        if method is not None and method not in METHODS:
            raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
        self.method = method

    def publish(self, tmp: str, final: str) -> None:
        if self.method is not None:
            _PUBLISH[self.method](tmp, final)
            return
        for method in METHODS:
            try:
                _PUBLISH[method](tmp, final)
            except FileExistsError:
                self.method = method  # the method works: the name was simply taken
                raise
            except OSError as exc:
                if exc.errno in UNSUPPORTED_ERRNOS and method != "claim":
                    continue
                raise
            self.method = method
            return


def _link(tmp: str, final: str) -> None:
    os.link(tmp, final)


def _rename(tmp: str, final: str) -> None:
    if rename_noreplace is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available", final)
    rename_noreplace(tmp, final)


def _claim(tmp: str, final: str) -> None:
    fd = os.open(final, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    os.close(fd)
    try:
        os.replace(tmp, final)
    except BaseException:
        # Nobody else creates this name while it exists, so the empty claim is ours to remove.
        with contextlib.suppress(OSError):
            os.unlink(final)
        raise


_PUBLISH: dict[str, Callable[[str, str], None]] = {
    "link": _link, "rename": _rename, "claim": _claim}
