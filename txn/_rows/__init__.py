"""Rows a user hands in: conforming them to the table schema, and their record keys."""

from ._codes import key_codes
from ._conform import conforms
from ._data import batches, first_and_rest
from ._keys import (
    SHOWN,
    check_not_null,
    check_unique,
    describe,
    index_keys,
    keys_argument,
    last_wins,
    repeated,
    user_keys,
)

__all__ = [
    "SHOWN",
    "batches",
    "check_not_null",
    "check_unique",
    "conforms",
    "describe",
    "first_and_rest",
    "index_keys",
    "key_codes",
    "keys_argument",
    "last_wins",
    "repeated",
    "user_keys",
]
