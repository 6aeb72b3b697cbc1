"""What the table's trash holds: the files CLEAN FILES moved there and may still restore."""

from __future__ import annotations

from .._context import TableContext
from .._files import TRASH_FOLDER


def trash(context: TableContext) -> dict[str, int]:
    """Table-relative path (``_trash/<T>/<path>``, as a clean's plan names it) -> size in bytes."""
    storage = context.storage
    return {path: storage.size(path) for path in storage.list(TRASH_FOLDER, recursive=True)}
