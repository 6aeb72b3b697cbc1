"""S3 storage through s3fs.

Atomicity argument. S3 makes a single PUT visible atomically (readers see the old state or the whole
new object). ``put_if_absent`` sends ``PutObject`` with ``If-None-Match: *``: S3 evaluates the
condition at commit time on the server and answers ``412 Precondition Failed`` to every writer
but the first, so exactly one of several racing creators wins, whatever process or machine they
run on. A ``409 ConditionalRequestConflict`` (two conditional writes in flight on one key) is
retried; the retry then sees the winner and gets 412. We call the S3 API through s3fs's own
client instead of fsspec's ``pipe_file(mode="create")`` so that the guarantee does not depend on
how a particular s3fs version implements ``mode``. S3 has been strongly consistent for reads and
listings since December 2020, which covers read-after-write and consistent listing.
"""

from __future__ import annotations

import asyncio
import difflib
import importlib
import inspect
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.fs

from ._errors import (
    InvalidOptionError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    TxnError,
)
from ._storage import check_key, check_prefix

_CONFLICT_RETRIES = 5
#: Options s3fs takes besides its constructor's own: its dircache's, fsspec's instance cache's.
_FSSPEC_OPTIONS = frozenset({"use_listings_cache", "listings_expiry_time", "max_paths",
                             "skip_instance_cache"})


def _load_s3fs() -> Any:
    try:
        import s3fs
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise InvalidOptionError(
            "s3:// tables need the s3fs package; install the extra: pip install 'metatxn[s3]'"
        ) from exc
    return s3fs


class S3Storage:
    """Storage rooted at ``s3://bucket/prefix`` (or ``s3a://``: the same objects; :attr:`uri`
    keeps the scheme as given)."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        s3fs = _load_s3fs()
        stripped = uri.split("://", 1)[1].strip("/")
        if not stripped:
            raise InvalidOptionError(f"S3 location {uri!r} names no bucket; expected s3://bucket/path")
        options = dict(storage_options or {})
        _check_options(uri, options, s3fs)
        # Listings must never come from a cache: the timeline and the lock depend on fresh lists.
        options.setdefault("use_listings_cache", False)
        options.setdefault("skip_instance_cache", True)
        try:
            self._fs = s3fs.S3FileSystem(**options)
        except (TypeError, ValueError, KeyError) as exc:
            raise InvalidOptionError(
                f"storage_options for {uri!r} are not accepted by s3fs: {exc}"
            ) from exc
        self._uri = uri
        self._root = stripped
        self._bucket, _, self._prefix = stripped.partition("/")

    @property
    def uri(self) -> str:
        return self._uri

    def _abs(self, path: str) -> str:
        return f"{self._root}/{check_key(path)}" if path else self._root

    def _key(self, path: str) -> str:
        check_key(path)
        return f"{self._prefix}/{path}" if self._prefix else path

    @contextmanager
    def _calling(self, action: str, path: str) -> Iterator[None]:
        """Turn what s3fs and botocore raise into the storage contract's errors.

        A missing object stays ``FileNotFoundError`` for the caller to map; a missing bucket, an
        unreachable endpoint, refused credentials and every other failure become
        :class:`StorageError` naming the location.
        """
        try:
            yield
        except TxnError:
            raise
        except FileNotFoundError as exc:
            if _no_such_bucket(exc):
                raise self._missing_bucket() from exc
            raise
        except FileExistsError:
            raise
        except Exception as exc:
            if not _is_backend_failure(exc):
                raise
            if _no_such_bucket(exc):
                raise self._missing_bucket() from exc
            raise StorageError(
                f"S3 {action} of {path!r} in the table at {self._uri!r} failed: "
                f"{type(exc).__name__}: {exc}") from exc

    def _missing_bucket(self) -> StorageError:
        return StorageError(
            f"S3 bucket {self._bucket!r} does not exist (table location {self._uri!r}); "
            "expected an existing bucket\nHelp: create the bucket, or check the location and "
            "the endpoint in storage_options")

    def read(self, path: str) -> bytes:
        try:
            with self._calling("read", path):
                data: bytes = self._fs.cat_file(self._abs(path))
        except FileNotFoundError:
            raise ObjectNotFoundError(path) from None
        return data

    def put_if_absent(self, path: str, data: bytes) -> None:
        key = self._key(path)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                with self._calling("conditional PUT", path):
                    self._fs.call_s3(
                        "put_object", Bucket=self._bucket, Key=key, Body=bytes(data),
                        IfNoneMatch="*",
                    )
                return
            except FileExistsError:
                # s3fs translates 412 Precondition Failed into FileExistsError.
                raise ObjectExistsError(path) from None
            except StorageError as exc:
                cause = exc.__cause__
                if ("ConditionalRequestConflict" in str(cause)
                        and attempt + 1 < _CONFLICT_RETRIES):
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise
            except FileNotFoundError as exc:
                raise StorageError(f"conditional PUT of {path!r} in the table at {self._uri!r} "
                                   f"failed: {exc}") from exc
        raise StorageError(f"conditional PUT of {path!r} kept conflicting")  # pragma: no cover

    def put(self, path: str, data: bytes) -> None:
        try:
            with self._calling("PUT", path):
                self._fs.pipe_file(self._abs(path), bytes(data))
        except FileNotFoundError as exc:
            raise StorageError(
                f"PUT of {path!r} in the table at {self._uri!r} failed: {exc}") from exc

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        folder = check_prefix(prefix)
        base = f"{self._root}/{folder}" if folder else self._root
        try:
            with self._calling("listing", folder):
                if recursive:
                    found = self._fs.find(base)
                else:
                    found = [e["name"] for e in self._fs.ls(base, detail=True, refresh=True)
                             if e["type"] == "file"]
        except FileNotFoundError:
            return []
        offset = len(self._root) + 1
        # s3fs lists a key that is itself an object as that object; only keys below the folder
        # are in it.
        return sorted(name[offset:] for name in found if name.startswith(base + "/"))

    def delete(self, path: str) -> None:
        try:
            with self._calling("delete", path):
                self._fs.rm_file(self._abs(path))
        except FileNotFoundError:
            pass

    def move(self, source: str, target: str) -> None:
        """Move ``source`` to ``target`` (which must not exist): a server-side copy, then a
        delete. Only CLEAN FILES moves, under its own instant, so no other writer races for
        ``target`` between the check and the copy."""
        if not self.exists(source):
            raise ObjectNotFoundError(source)
        if self.exists(target):
            raise ObjectExistsError(target)
        try:
            with self._calling("copy", source):
                self._fs.copy(self._abs(source), self._abs(target))
        except FileNotFoundError:
            raise ObjectNotFoundError(source) from None
        self.delete(source)

    def exists(self, path: str) -> bool:
        try:
            with self._calling("exists", path):
                return bool(self._fs.info(self._abs(path))["type"] == "file")
        except FileNotFoundError:
            return False

    def size(self, path: str) -> int:
        try:
            with self._calling("size", path):
                return int(self._fs.info(self._abs(path))["size"])
        except FileNotFoundError:
            raise ObjectNotFoundError(path) from None

    def arrow_filesystem(self) -> tuple[pa.fs.FileSystem, str]:
        """A pyarrow filesystem and the root's path in it, for reading and writing data files."""
        return pa.fs.PyFileSystem(pa.fs.FSSpecHandler(self._fs)), self._root

    def __repr__(self) -> str:
        return f"S3Storage({self._uri!r})"


def _accepted_options(s3fs: Any) -> frozenset[str] | None:
    """Names ``s3fs.S3FileSystem`` accepts: its own, fsspec's, and (passed on by s3fs) those of
    aiobotocore's session. None when they cannot be worked out (then s3fs decides)."""
    try:
        session = importlib.import_module("aiobotocore.session")
        names = set(_FSSPEC_OPTIONS)
        asyn = importlib.import_module("fsspec.asyn")
        for function in (s3fs.S3FileSystem.__init__, session.AioSession.__init__,
                         asyn.AsyncFileSystem.__init__):
            names.update(p.name for p in inspect.signature(function).parameters.values()
                         if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self")
    except (ImportError, TypeError, ValueError):  # pragma: no cover - another s3fs layout
        return None
    return frozenset(names)


def _check_options(uri: str, options: dict[str, Any], s3fs: Any) -> None:
    """Refuse option names s3fs does not know now: s3fs would only fail at the first request."""
    known = _accepted_options(s3fs)
    if known is None:
        return
    unknown = sorted(set(options) - known)
    if not unknown:
        return
    hints = [f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)
             for name in unknown for close in [difflib.get_close_matches(name, known, n=1)]]
    raise InvalidOptionError(
        f"storage_options for {uri!r} name {', '.join(hints)}, which s3fs does not accept; "
        f"expected options of s3fs.S3FileSystem such as {', '.join(_COMMON)}")


_COMMON = ("key", "secret", "token", "anon", "endpoint_url", "client_kwargs", "config_kwargs",
           "profile")


def _no_such_bucket(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        response = getattr(seen, "response", None)
        code = response.get("Error", {}).get("Code") if isinstance(response, dict) else None
        if code == "NoSuchBucket" or "bucket does not exist" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _is_backend_failure(exc: BaseException) -> bool:
    """An error of the S3 client or its transport (never a programming error of ours)."""
    if isinstance(exc, (OSError, asyncio.TimeoutError, TimeoutError)):
        return True
    module = type(exc).__module__
    return module.startswith(("botocore", "aiobotocore", "aiohttp", "s3fs", "urllib3"))
