"""Schema evolution: change ops, the widening table, merge, and reading files of older versions.

Pure functions over Arrow schemas with column ids (``PARQUET:field_id``); committing a change
is ``txn._commit._writes.AlterTable``'s job, storing versions the metadata table's.
"""

from ._changes import (
    AddColumn,
    AlterColumn,
    Change,
    DropColumn,
    RenameColumn,
    SetProperties,
    Shape,
    UnsetProperties,
    apply_changes,
    schema_changed,
)
from ._merge import merge_schema
from ._project import read_columns, same_columns, version_projection
from ._widen import WIDENINGS, is_widening, widening_refusal

__all__ = [
    "WIDENINGS",
    "AddColumn",
    "AlterColumn",
    "Change",
    "DropColumn",
    "RenameColumn",
    "SetProperties",
    "Shape",
    "UnsetProperties",
    "apply_changes",
    "is_widening",
    "merge_schema",
    "read_columns",
    "same_columns",
    "schema_changed",
    "version_projection",
    "widening_refusal",
]


def __dir__() -> list[str]:
    return list(__all__)
