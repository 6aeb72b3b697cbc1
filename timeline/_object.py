"""Object-store storage (S3 and S3-compatible endpoints, GCS, Azure Blob / ADLS Gen2) through
obstore, the Python binding of Rust's ``object_store`` (what delta-rs runs on).

Atomicity argument. Each store makes a single PUT visible atomically (readers see no object or
the whole object) and decides a conditional create on the server, at commit time, so exactly one
of several racing creators wins whatever process or machine it runs on. ``put_if_absent`` is
obstore's ``put(..., mode="create")``, which sends:

* **S3**: ``PutObject`` with ``If-None-Match: *``; every loser gets ``412 Precondition Failed``.
  S3 answers ``409 ConditionalRequestConflict`` while another conditional write on the key is in
  flight; object_store reports that as "already exists" too, which would be a lie (the other
  write may still fail), so it is retried here and the retry decides.
* **GCS**: an upload with ``ifGenerationMatch=0`` (only if no live generation exists); losers
  get ``412``.
* **Azure**: ``Put Blob`` with ``If-None-Match: *``; losers get ``409 BlobAlreadyExists``.

All three are strongly consistent for reads after writes and for listings, which covers the
contract's other guarantees. Listings are never cached: each ``list`` is a request.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from ._errors import InvalidOptionError, ObjectExistsError, ObjectNotFoundError, StorageError, TxnError
from ._options import StoreOptions, store_options
from ._storage import check_key, check_prefix

_CONFLICT_RETRIES = 5
_PART = 64 * 1024 * 1024


def _obstore() -> Any:
    try:
        import obstore
        import obstore.store
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise InvalidOptionError(
            "tables on S3, GCS or Azure need the obstore package; install the extra: "
            "pip install 'metatxn[s3]' (or [gcs], [azure])") from exc
    return obstore


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _missing_container(exc: BaseException) -> bool:
    text = str(exc)
    return any(code in text for code in ("NoSuchBucket", "ContainerNotFound",
                                         "The specified bucket does not exist",
                                         "The specified container does not exist"))


class ObjectStorage:
    """Storage rooted at ``s3://bucket/prefix``, ``gs://...`` or ``az://container/...`` (and
    the other spellings :func:`timeline.open_storage` takes; :attr:`uri` keeps the one given)."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None) -> None:
        obstore = _obstore()
        self._options: StoreOptions = store_options(uri, storage_options)
        self._uri = uri
        self._obs = obstore
        options = self._options
        make = {"s3": obstore.store.S3Store, "gcs": obstore.store.GCSStore,
                "azure": obstore.store.AzureStore}[options.kind]
        try:
            self._store = make(options.bucket, prefix=options.prefix or None,
                               config=options.config, client_options=options.client or None,
                               retry_config=options.retry or None)
        except Exception as exc:
            raise InvalidOptionError(
                f"storage_options for {uri!r} are not accepted by the {options.name} client: "
                f"{_first_line(exc)}") from exc
        self._filesystem: tuple[pa.fs.FileSystem, str] | None = None

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def store_options(self) -> StoreOptions:
        """The resolved location and options (options over the environment)."""
        return self._options

    @contextmanager
    def _calling(self, action: str, path: str) -> Iterator[None]:
        """Turn what obstore raises into the storage contract's errors.

        A missing object stays ``FileNotFoundError`` for the caller to map; a missing bucket, an
        unreachable endpoint, refused credentials and every other failure become
        :class:`StorageError` naming the location.
        """
        try:
            yield
        except TxnError:
            raise
        except FileNotFoundError as exc:
            if _missing_container(exc):
                raise self._missing_bucket() from exc
            raise
        except Exception as exc:
            errors = self._obs.exceptions
            if isinstance(exc, (errors.AlreadyExistsError, errors.PreconditionError)) or (
                    not isinstance(exc, (errors.BaseError, OSError, TimeoutError))):
                raise
            if _missing_container(exc):
                raise self._missing_bucket() from exc
            raise StorageError(
                f"{self._options.name} {action} of {path!r} in the table at {self._uri!r} "
                f"failed: {type(exc).__name__}: {_first_line(exc)}") from exc

    def _missing_bucket(self) -> StorageError:
        what = "container" if self._options.kind == "azure" else "bucket"
        return StorageError(
            f"{self._options.name} {what} {self._options.bucket!r} does not exist (table location "
            f"{self._uri!r}); expected an existing {what}\nHelp: create the {what}, or check the "
            "location and the endpoint in storage_options")

    def read(self, path: str) -> bytes:
        check_key(path)
        try:
            with self._calling("read", path):
                return bytes(self._obs.get(self._store, path).bytes())
        except FileNotFoundError:
            raise ObjectNotFoundError(path) from None

    def put_if_absent(self, path: str, data: bytes) -> None:
        check_key(path)
        exists = (self._obs.exceptions.AlreadyExistsError, self._obs.exceptions.PreconditionError)
        for attempt in range(_CONFLICT_RETRIES):
            try:
                with self._calling("conditional PUT", path):
                    self._obs.put(self._store, path, bytes(data), mode="create",
                                  use_multipart=False)
                return
            except exists as exc:
                if "ConditionalRequestConflict" in str(exc) and attempt + 1 < _CONFLICT_RETRIES:
                    time.sleep(0.05 * (attempt + 1))
                    continue
                raise ObjectExistsError(path) from None
            except FileNotFoundError as exc:
                raise StorageError(f"conditional PUT of {path!r} in the table at {self._uri!r} "
                                   f"failed: {_first_line(exc)}") from exc
        raise StorageError(f"conditional PUT of {path!r} kept conflicting")  # pragma: no cover

    def put(self, path: str, data: bytes) -> None:
        check_key(path)
        try:
            with self._calling("PUT", path):
                # Above 64 MiB in parts (several in flight), as s3fs did above its 50 MB blocks.
                self._obs.put(self._store, path, bytes(data), use_multipart=len(data) > _PART,
                              chunk_size=_PART)
        except FileNotFoundError as exc:
            raise StorageError(
                f"PUT of {path!r} in the table at {self._uri!r} failed: {_first_line(exc)}") from exc

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        folder = check_prefix(prefix)
        try:
            with self._calling("listing", folder):
                if recursive:
                    found = [meta["path"] for batch in self._obs.list(self._store, folder or None)
                             for meta in batch]
                else:
                    found = [meta["path"] for meta in self._obs.list_with_delimiter(
                        self._store, folder or None)["objects"]]
        except FileNotFoundError:
            return []
        # object_store lists by whole path segments; a key that is itself the folder is not in it.
        base = f"{folder}/" if folder else ""
        return sorted(name for name in found if name.startswith(base) and name != folder)

    def delete(self, path: str) -> None:
        check_key(path)
        try:
            with self._calling("delete", path):
                self._obs.delete(self._store, path)
        except FileNotFoundError:
            pass

    def move(self, source: str, target: str) -> None:
        """Move ``source`` to ``target`` (which must not exist): a server-side copy, then a
        delete. GCS and Azure copy only if ``target`` is absent (atomically); S3 has no such
        copy, so the check comes first: only CLEAN FILES moves, under its own instant, so no
        other writer races for ``target`` between the check and the copy."""
        check_key(target)
        if not self.exists(source):
            raise ObjectNotFoundError(source)
        atomic = self._options.kind != "s3"
        if not atomic and self.exists(target):
            raise ObjectExistsError(target)
        try:
            with self._calling("copy", source):
                self._obs.copy(self._store, source, target, overwrite=not atomic)
        except FileNotFoundError:
            raise ObjectNotFoundError(source) from None
        except (self._obs.exceptions.AlreadyExistsError, self._obs.exceptions.PreconditionError):
            raise ObjectExistsError(target) from None
        self.delete(source)

    def _head(self, path: str) -> dict[str, Any]:
        check_key(path)
        with self._calling("HEAD", path):
            meta: dict[str, Any] = self._obs.head(self._store, path)
        return meta

    def exists(self, path: str) -> bool:
        try:
            self._head(path)
        except FileNotFoundError:
            return False
        return True

    def size(self, path: str) -> int:
        try:
            return int(self._head(path)["size"])
        except FileNotFoundError:
            raise ObjectNotFoundError(path) from None

    def arrow_filesystem(self) -> tuple[pa.fs.FileSystem, str]:
        """A pyarrow filesystem and the root's path in it, for reading and writing data files
        (pyarrow's native one for the store; see ``timeline/_arrowfs.py``)."""
        if self._filesystem is None:
            from ._arrowfs import arrow_filesystem

            self._filesystem = arrow_filesystem(self._options)
        return self._filesystem

    def __repr__(self) -> str:
        return f"ObjectStorage({self._uri!r})"
