"""A staged create: a table whose ``table.json`` is put with its first commit.

``create_table(..., data=...)``, ``CREATE TABLE ... AS SELECT`` and a Spark write to a location
with no table build the table's context without writing anything; the commit protocol puts
``table.json`` under the table lock at the commit point of the first instant, just before that
instant completes (design/protocol.md, "Staged create"). A write that fails before leaves no
table, and the files of its rolled-back instant are removed by name.
"""

from __future__ import annotations

import threading

from metatxn.timeline import ObjectExistsError, Storage, TableExistsError

from ._config import TABLE_CONFIG_PATH


class StagedCreate:
    """The ``table.json`` a staged table puts with its first commit. Safe to share between threads."""

    def __init__(self, storage: Storage, uri: str, config: bytes) -> None:
        self._storage = storage
        self._uri = uri
        self._config = config
        self._guard = threading.Lock()
        self._published = False

    @property
    def published(self) -> bool:
        """Whether ``table.json`` is on storage: the table exists (or another one took its place)."""
        return self._published

    def check(self) -> None:
        """TableExistsError if a table appeared at the location meanwhile (a cheap early refusal:
        :meth:`publish` decides)."""
        if not self._published and self._storage.exists(TABLE_CONFIG_PATH):
            raise TableExistsError(self._uri)

    def publish(self) -> None:
        """Put ``table.json`` (put-if-absent): the table exists from here on.

        Called under the table lock just before the first instant completes, and by a create
        whose first write committed nothing. TableExistsError if another creator won; the
        caller's instant then rolls back.
        """
        with self._guard:
            if self._published:
                return
            try:
                self._storage.put_if_absent(TABLE_CONFIG_PATH, self._config)
            except ObjectExistsError:
                raise TableExistsError(self._uri) from None
            self._published = True

    def abandoned(self) -> bool:
        """Whether no table exists at the location: nothing committed there, so the files of this
        creator's rolled-back instants are nobody's history and may be removed."""
        return not self._published and not self._storage.exists(TABLE_CONFIG_PATH)


__all__ = ["StagedCreate"]
