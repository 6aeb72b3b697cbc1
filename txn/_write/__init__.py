"""Writing: what each write changes (keys found, rows matched, new rows), read from the latest
state and handed to the commit."""

from ._mutations import append, delete, lookup, overwrite, update, upsert
from ._state import State, find_keys, latest, read_state

__all__ = [
    "State",
    "append",
    "delete",
    "find_keys",
    "latest",
    "lookup",
    "overwrite",
    "read_state",
    "update",
    "upsert",
]
