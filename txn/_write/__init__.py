"""Writing: what each write changes (keys found, rows matched, new rows), read from the latest
state and handed to the commit; transactions of several writes; the options of a commit."""

from ._alter import SchemaUpdate, add_columns, alter_table, column_names, schema_history
from ._merge import SCHEMA_MODES, merging, write_schema
from ._merger import TableMerger
from ._mutations import append, delete, lookup, overwrite, refuse_existing_keys, update, upsert
from ._options import WriteOptions, write_options
from ._scope import layout_scope, overwrite_scope
from ._state import (
    REPLANS,
    State,
    already_committed,
    app_progress,
    commit_once,
    commit_planned,
    find_keys,
    latest,
    read_state,
)
from ._transaction import Transaction

__all__ = [
    "REPLANS",
    "SCHEMA_MODES",
    "SchemaUpdate",
    "State",
    "TableMerger",
    "Transaction",
    "WriteOptions",
    "add_columns",
    "already_committed",
    "alter_table",
    "app_progress",
    "append",
    "column_names",
    "commit_once",
    "commit_planned",
    "delete",
    "find_keys",
    "latest",
    "layout_scope",
    "lookup",
    "merging",
    "overwrite",
    "overwrite_scope",
    "read_state",
    "refuse_existing_keys",
    "schema_history",
    "update",
    "upsert",
    "write_options",
    "write_schema",
]
