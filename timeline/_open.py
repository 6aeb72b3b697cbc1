"""Choose the storage backend for a table URI."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._errors import InvalidOptionError
from ._local import LocalStorage
from ._memory import MemoryStorage
from ._options import SCHEMES
from ._storage import Storage

SUPPORTED_SCHEMES = ("file", "memory", *SCHEMES)


def open_storage(uri: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> Storage:
    """Return the storage for ``uri``: a local path, ``file://``, ``memory://``, or an object
    store: ``s3://`` (``s3a://``), ``gs://`` (``gcs://``), ``az://`` (``azure://``, ``abfs://``,
    ``abfss://``), with deltalake's ``storage_options`` (see ``timeline/_options.py``).

    Raises:
        InvalidOptionError: the scheme has no atomic put-if-absent here, or the options do not
            apply to the backend.
    """
    text = os.fspath(uri) if isinstance(uri, os.PathLike) else uri
    if not isinstance(text, str) or not text:
        raise InvalidOptionError(
            f"table location must be a non-empty path or URL (a str or os.PathLike), got {uri!r}")
    if storage_options is not None and not (
            isinstance(storage_options, Mapping) and all(isinstance(k, str) for k in storage_options)):
        raise InvalidOptionError(
            f"storage_options for {text!r} must be a dict of option name -> value, or None; "
            f"got {storage_options!r} ({type(storage_options).__name__})")
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "file", text
    scheme = scheme.lower()
    if scheme in ("file", "local"):
        options = dict(storage_options or {})
        fsync = options.pop("fsync", False)
        _refuse_options(text, options, "local paths take only the option 'fsync' (bool)")
        if not isinstance(fsync, bool):
            raise InvalidOptionError(f"storage option fsync must be True or False, got {fsync!r}")
        return LocalStorage(os.path.abspath(os.path.expanduser(rest)), uri=text, fsync=fsync)
    if scheme == "memory":
        _refuse_options(text, storage_options, "memory:// tables take no storage_options")
        return MemoryStorage(rest, uri=text)
    if scheme in SCHEMES:
        from ._object import ObjectStorage

        # The location as given: its files' paths are built from it, and Spark's Hadoop reads
        # s3a:// (open-source Hadoop has no s3:// filesystem at all).
        return ObjectStorage(text, dict(storage_options or {}))
    raise InvalidOptionError(
        f"unsupported table location {text!r}: scheme {scheme!r} has no atomic put-if-absent in "
        f"metatxn; expected one of {', '.join(s + '://' for s in SUPPORTED_SCHEMES)} or a local path"
    )


def _refuse_options(uri: str, options: dict[str, Any] | None, why: str) -> None:
    if options:
        raise InvalidOptionError(
            f"storage_options {sorted(options)} given for {uri!r}, but {why}"
        )
