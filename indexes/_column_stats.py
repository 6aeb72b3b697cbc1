"""Reading ``column_stats`` blocks and bases in one schema: the latest table version's.

Blocks are written in the schema of the version their writer began with (a write of an older
version may commit after a schema change), so the blocks one resolution merges can differ. Each is
projected, by column id, to the statistics schema of the resolution's current version:

- a child the block has: kept, its ``min``/``max`` cast exactly when they are of a narrower type
  (an admitted widening, e.g. int32 -> int64);
- a child the block lacks (a column added since the file was written): ``min``/``max`` null and
  ``nulls = count =`` the file's rows (any other child's ``count`` in the row), so the old file
  prunes as all-null; the whole child null if the row has no other child to take it from;
- a child the current version lacks (a dropped column): left out.

Blocks without the ``metatxn.stats_key`` marker were written before column ids and name their
children by column name: only version-0 files can have them, so names are translated through
version 0's ids.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ._records import STATS_KEY, STATS_KEY_ID


def project_stats(table: pa.Table, target: pa.Schema, version0_ids: Mapping[str, int]) -> pa.Table:
    """``table`` (a block or base as read) with its ``columns`` projected to ``target``'s.

    ``version0_ids``: version 0's column name -> id, for blocks without the marker.

    Raises:
        KeyError, ValueError, pa.ArrowException: the block is not a statistics block, or a
            range does not cast exactly (callers report it as corruption).
    """
    metadata = table.schema.metadata or {}
    by_id = metadata.get(STATS_KEY) == STATS_KEY_ID
    target_type = target.field("columns").type
    found_type = table.schema.field("columns").type
    if by_id and found_type == target_type:
        return table.select(target.names).replace_schema_metadata(target.metadata)
    columns = table["columns"].combine_chunks()
    if isinstance(columns, pa.ChunkedArray):  # an empty table
        columns = pa.array([], found_type)
    # ``flatten`` merges the struct's own nulls (tombstones) into each child.
    children = dict(zip((found_type.field(i).name for i in range(found_type.num_fields)),
                        columns.flatten(), strict=True))
    if not by_id:
        children = {str(version0_ids[name]): child for name, child in children.items()
                    if name in version0_ids}
    count = len(columns)
    counts = [child.field("count") for child in children.values()]
    rows = (pc.coalesce(*counts) if len(counts) > 1 else counts[0]) if counts \
        else pa.nulls(count, pa.int64())
    projected = []
    for i in range(target_type.num_fields):
        field = target_type.field(i)
        child = children.get(field.name)
        if child is None:
            # Added since the file was written: every row of it is null.
            nothing = pa.nulls(count, field.type.field("min").type)
            projected.append(pa.StructArray.from_arrays(
                [nothing, nothing, rows, rows], fields=list(field.type),
                mask=pc.is_null(rows)))
        elif child.type == field.type:
            projected.append(child)
        else:
            value_type = field.type.field("min").type
            projected.append(pa.StructArray.from_arrays(
                [pc.cast(child.field("min"), value_type, safe=True),
                 pc.cast(child.field("max"), value_type, safe=True),
                 child.field("nulls").cast(pa.int64()), child.field("count").cast(pa.int64())],
                fields=list(field.type), mask=pc.is_null(child)))
    valid = pc.is_valid(columns)
    if projected:
        result = pa.StructArray.from_arrays(projected, fields=list(target_type),
                                            mask=pc.invert(valid))
    else:
        result = pa.array([{} if v else None for v in valid.to_pylist()], target_type)
    return pa.table([table["path"].cast(pa.string()), table["deleted"].cast(pa.bool_()), result],
                    schema=target)
