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

import contextlib
import time
from typing import Any

import pyarrow as pa
import pyarrow.fs

from ._errors import InvalidOptionError, ObjectExistsError, ObjectNotFoundError, StorageError

_CONFLICT_RETRIES = 5


def _load_s3fs() -> Any:
    try:
        import s3fs
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise InvalidOptionError(
            "s3:// tables need the s3fs package; install the extra: pip install 'metatxn[s3]'"
        ) from exc
    return s3fs


class S3Storage:
    """Storage rooted at ``s3://bucket/prefix``."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        s3fs = _load_s3fs()
        options = dict(storage_options or {})
        # Listings must never come from a cache: the timeline and the lock depend on fresh lists.
        options.setdefault("use_listings_cache", False)
        options.setdefault("skip_instance_cache", True)
        try:
            self._fs = s3fs.S3FileSystem(**options)
        except TypeError as exc:
            raise InvalidOptionError(
                f"storage_options for {uri!r} are not accepted by s3fs: {exc}"
            ) from exc
        self._uri = uri
        stripped = uri.split("://", 1)[1].strip("/")
        if not stripped:
            raise InvalidOptionError(f"S3 location {uri!r} names no bucket; expected s3://bucket/path")
        self._root = stripped
        self._bucket, _, self._prefix = stripped.partition("/")

    @property
    def uri(self) -> str:
        return self._uri

    def _abs(self, path: str) -> str:
        return f"{self._root}/{path}" if path else self._root

    def _key(self, path: str) -> str:
        return f"{self._prefix}/{path}" if self._prefix else path

    def read(self, path: str) -> bytes:
        try:
            data: bytes = self._fs.cat_file(self._abs(path))
        except FileNotFoundError:
            raise ObjectNotFoundError(path) from None
        return data

    def put_if_absent(self, path: str, data: bytes) -> None:
        for attempt in range(_CONFLICT_RETRIES):
            try:
                self._fs.call_s3(
                    "put_object", Bucket=self._bucket, Key=self._key(path), Body=bytes(data),
                    IfNoneMatch="*",
                )
                return
            except FileExistsError:
                # s3fs translates 412 Precondition Failed into FileExistsError.
                raise ObjectExistsError(path) from None
            except OSError as exc:
                if "ConditionalRequestConflict" in str(exc) and attempt + 1 < _CONFLICT_RETRIES:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise StorageError(f"conditional PUT of {path!r} failed: {exc}") from exc
        raise StorageError(f"conditional PUT of {path!r} kept conflicting")  # pragma: no cover

    def put(self, path: str, data: bytes) -> None:
        self._fs.pipe_file(self._abs(path), bytes(data))

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        base = self._abs(prefix.strip("/"))
        try:
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
        with contextlib.suppress(FileNotFoundError):
            self._fs.rm_file(self._abs(path))

    def exists(self, path: str) -> bool:
        try:
            return bool(self._fs.info(self._abs(path))["type"] == "file")
        except FileNotFoundError:
            return False

    def size(self, path: str) -> int:
        try:
            return int(self._fs.info(self._abs(path))["size"])
        except FileNotFoundError:
            raise ObjectNotFoundError(path) from None

    def arrow_filesystem(self) -> tuple[pa.fs.FileSystem, str]:
        """A pyarrow filesystem and the root's path in it, for reading and writing data files."""
        return pa.fs.PyFileSystem(pa.fs.FSSpecHandler(self._fs)), self._root

    def __repr__(self) -> str:
        return f"S3Storage({self._uri!r})"
