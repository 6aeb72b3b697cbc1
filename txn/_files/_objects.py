"""``txn.open_storage``: the object store of a location, for an engine's own small files.

Engines on top (``txn.spark``) keep a few files beside the tables: a streaming query's id next to
its checkpoint, LOAD DATA's bad records. They write them through the same ``Storage`` layer as
metatxn's own files (atomic put-if-absent, every backend the tables support) instead of reaching
for fsspec or the timeline package underneath.
"""

from __future__ import annotations

import os
from typing import Any

from metatxn.timeline import Storage
from metatxn.timeline import open_storage as _open


def open_storage(uri: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> Storage:
    """The object store at ``uri`` (a local path, ``file://``, ``memory://`` or ``s3://``), with
    paths relative to it: ``read(path)`` (``txn.ObjectNotFoundError`` when missing),
    ``put(path, data)``, ``put_if_absent(path, data)`` (``txn.ObjectExistsError`` when another
    writer put it first: of two racing writers exactly one wins), ``exists(path)``, ``list(prefix)``
    and ``delete(path)``.

    Raises:
        InvalidOptionError: the location is not a non-empty path or URL, its scheme has no
            atomic put-if-absent here, or ``storage_options`` do not apply to the backend.
    """
    return _open(uri, storage_options)


__all__ = ["open_storage"]
