"""Record schemas of the ``files``, ``column_stats`` and ``deletes`` partitions, and their merge rule.

All three are two-phase sets keyed by data-file path: a file is added once, by the instant
that wrote it, and may later be removed once (a tombstone row with ``deleted = true``). A file is
never re-added after removal, because file names carry their writer's instant time. (In
``deletes`` the key is the path of a delete-delta file, which likewise is written once, by one
instant, and removed once: when horizontal compaction merges it into a newer delta, or when its
data file is removed.) Merging is
therefore a set operation: a key is present if any record adds it and deleted if any record
deletes it. It does not depend on the order or grouping of the inputs (commutative, associative,
idempotent), so compaction can fold blocks without regard to the instants still pending.

A third phase, **purged**, is written by CLEAN FILES once a removed file left the table (moved to
its trash): a record whose ``deleted`` is null (every field but the key null too). A key with any
purge record merges to that bare purge record, whatever else it has, so the rule is still a set
operation (present, deleted, purged: each "if any record says so", purged winning). A purged key
is neither live (:func:`live` drops a null ``deleted``) nor removed (listings of removed files
ask ``deleted == true``). A purge is only ever written after the add and the tombstone of its
key completed, so compaction may drop bare purge records from a base (:func:`without_purged`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from ._column_ids import assign_ids, field_id

KEY: Final = "path"
DELETED: Final = "deleted"
_BARE: Final = "__bare_tombstone__"
_PURGED: Final = "__purged__"
#: Field metadata of a column added after the format's first version: blocks and bases written
#: before it lack the column, and read it as nulls.
ADDED_LATER: Final = b"metatxn.added_later"

FILES_SCHEMA: Final = pa.schema([
    (KEY, pa.string()),
    ("segment", pa.string()),
    #: The Hive-style partition path ("day=2026-01-01/region=eu"), "" when unpartitioned.
    ("partition", pa.string()),
    ("format", pa.string()),
    ("rows", pa.int64()),
    ("size", pa.int64()),
    #: The instant that wrote the file.
    ("instant", pa.string()),
    (DELETED, pa.bool_()),
    #: Last modification (epoch ms) of an external segment's file when it was added: validate()
    #: reports the file if it changed since. Null for files the table wrote (never modified).
    pa.field("modified_ms", pa.int64(), metadata={ADDED_LATER: b"1"}),
    #: An external segment's file: what its storage changes with every write (S3's ETag, the
    #: modification time elsewhere) when it was added; readers refuse a file that differs.
    pa.field("version", pa.string(), metadata={ADDED_LATER: b"1"}),
    #: The table version whose schema the file was written with (``schemas`` partition); null
    #: in blocks written before versions existed, which means version 0.
    pa.field("schema_id", pa.int64(), metadata={ADDED_LATER: b"1"}),
])

DELETES_SCHEMA: Final = pa.schema([
    #: The delete-delta file: the row positions (within ``file``) that are deleted.
    (KEY, pa.string()),
    #: The data file the positions refer to.
    ("file", pa.string()),
    #: How many positions the delta holds. The live deltas of one data file are disjoint.
    ("rows", pa.int64()),
    ("size", pa.int64()),
    ("instant", pa.string()),
    (DELETED, pa.bool_()),
])

STAT_FIELDS: Final = ("min", "max", "nulls", "count")


def stats_eligible(data_type: pa.DataType) -> bool:
    """Whether a column gets min/max statistics: primitive, orderable values."""
    return not (pa.types.is_nested(data_type) or pa.types.is_null(data_type)
                or pa.types.is_dictionary(data_type))


#: Schema metadata of a ``column_stats`` block or base: what its per-column children are named
#: by. ``id``: the column's id (``"3"``). Blocks without it were written before column ids, and
#: name their children by column name (version 0's names).
STATS_KEY: Final = b"metatxn.stats_key"
STATS_KEY_ID: Final = b"id"


def column_stats_schema(table_schema: pa.Schema) -> pa.Schema:
    """One row per data file: its path, a tombstone flag, and per column min/max/nulls/count.

    Statistics are typed like their column, so a file's ranges become an Arrow guarantee
    expression directly. They sit in one struct column ``columns`` so table column names cannot
    collide with ``path`` or ``deleted``; its children are named by column id (``"3"``), so a
    rename keeps every file's statistics and a column dropped and added again never inherits
    the old one's. A ``table_schema`` without ids is version 0's (``table.json`` of a table
    created before ids): it gets ``assign_ids``'s.
    """
    per_column = [
        pa.field(str(field_id(field)), pa.struct([
            ("min", field.type), ("max", field.type), ("nulls", pa.int64()), ("count", pa.int64()),
        ]))
        for field in assign_ids(table_schema) if stats_eligible(field.type)
    ]
    return pa.schema([(KEY, pa.string()), (DELETED, pa.bool_()), ("columns", pa.struct(per_column))],
                     metadata={STATS_KEY: STATS_KEY_ID})


def tombstones(schema: pa.Schema, paths: Sequence[str]) -> pa.Table:
    """Rows that remove ``paths`` from a two-phase-set partition with ``schema``."""
    columns = {
        name: pa.array(list(paths), pa.string()) if name == KEY
        else pa.array([True] * len(paths), pa.bool_()) if name == DELETED
        else pa.nulls(len(paths), schema.field(name).type)
        for name in schema.names
    }
    return pa.table(columns, schema=schema)


def purges(schema: pa.Schema, paths: Sequence[str]) -> pa.Table:
    """Rows that purge ``paths`` (CLEAN FILES moved them out of the table) from a two-phase-set
    partition with ``schema``: the key, and every other field null, ``deleted`` included."""
    columns = {
        name: pa.array(list(paths), pa.string()) if name == KEY
        else pa.nulls(len(paths), schema.field(name).type)
        for name in schema.names
    }
    return pa.table(columns, schema=schema)


def merge_two_phase(tables: Iterable[pa.Table], schema: pa.Schema) -> pa.Table:
    """Merge records of a two-phase-set partition; the result is sorted by key.

    For each key the result holds the adding record's fields and ``deleted`` true if any input
    deletes it. (If only tombstones exist for a key, the tombstone itself is kept.) A key with a
    purge record (``deleted`` null) merges to the bare purge record.
    """
    parts = [t.select(schema.names).cast(schema) for t in tables if t.num_rows]
    if not parts:
        return schema.empty_table()
    combined = pa.concat_tables(parts)
    # Adds sort before tombstones of the same key, and bare tombstones (nothing but the key) after
    # merged rows that were deleted but still carry the file's fields: the first row of each key
    # run carries the fields whatever order the inputs came in, the last says whether any record
    # deleted it (every bare tombstone is deleted). Purge records sort last of all, so the last
    # row of a run says whether any record purged the key.
    purged = pc.is_null(combined[DELETED])
    bare = pc.fill_null(combined[DELETED], False)
    for name in schema.names:
        if name not in (KEY, DELETED):
            bare = pc.and_(bare, pc.is_null(combined[name]))
    ordered = (combined.append_column(_BARE, bare).append_column(_PURGED, purged)
               .sort_by([(KEY, "ascending"), (_PURGED, "ascending"), (_BARE, "ascending"),
                         (DELETED, "ascending")])
               .drop_columns([_BARE, _PURGED]))
    keys = ordered[KEY]
    count = ordered.num_rows
    if count == 1:
        return _bare_purges(ordered, schema)
    changes = pc.not_equal(keys.slice(1), keys.slice(0, count - 1))
    starts = pc.indices_nonzero(pa.concat_arrays([pa.array([True]), changes.combine_chunks()]))
    ends = pc.indices_nonzero(pa.concat_arrays([changes.combine_chunks(), pa.array([True])]))
    first = ordered.take(starts)
    deleted = ordered[DELETED].take(ends)
    return _bare_purges(first.set_column(first.schema.get_field_index(DELETED), DELETED, deleted),
                        schema)


def _bare_purges(merged: pa.Table, schema: pa.Schema) -> pa.Table:
    """``merged`` (one row per key, sorted) with every purged key's row reduced to its key."""
    purged = pc.is_null(merged[DELETED])
    if not pc.any(purged).as_py():
        return merged
    kept = merged.filter(pc.invert(purged))
    gone = purges(schema, merged.filter(purged)[KEY].to_pylist())
    return pa.concat_tables([kept, gone]).sort_by([(KEY, "ascending")])


def without_purged(merged: pa.Table) -> pa.Table:
    """A merged table without its purge records (what a compaction may leave out of a base)."""
    if merged.num_rows == 0:
        return merged
    return merged.filter(pc.is_valid(merged[DELETED]))


def removed(merged: pa.Table) -> pa.Table:
    """The rows of a merged two-phase-set partition that are removed but not purged: files whose
    removal completed and that are still on storage for older snapshots."""
    if merged.num_rows == 0:
        return merged
    return merged.filter(pc.fill_null(merged[DELETED], False))


def extend_two_phase(merged: pa.Table, blocks: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """Merge ``blocks`` into ``merged``, an already merged table, without re-sorting all of it.

    Equal to ``merge_two_phase([merged, *blocks])`` as a set of rows: only the rows of ``merged``
    whose keys the blocks touch are merged again; the others keep their place. The result is
    not sorted by key (readers need no order; compaction sorts what it writes).

    Every commit extends the files partition this way, and ``merged`` keeps a row for each
    removed file until CLEAN FILES purges it, so the rows that stay are not copied: they are
    kept as zero-copy slices around the touched ones (copied instead when more than
    ``_MAX_CHUNKS`` rows are touched, as a clean's purge does), and the chunks that pile up are
    merged once there are ``_MAX_CHUNKS`` of them. What remains proportional to ``merged`` is one
    hash lookup per key (``is_in``) and a scan of the resulting booleans.
    """
    new = merge_two_phase(blocks, schema)
    if new.num_rows == 0:
        return merged
    if merged.num_rows == 0:
        return _bounded_chunks(new)
    merged = merged.select(schema.names)
    touched = pc.is_in(merged[KEY], value_set=new[KEY])
    positions = pc.indices_nonzero(touched).to_pylist()
    if len(positions) > _MAX_CHUNKS:  # a clean's purge: one copy beats thousands of slices
        new = merge_two_phase([merged.filter(touched), new], schema)
        return _bounded_chunks(pa.concat_tables([merged.filter(pc.invert(touched)), new]))
    kept, start = [], 0
    for position in positions:
        if position > start:
            kept.append(merged.slice(start, position - start))
        start = position + 1
    if start < merged.num_rows:
        kept.append(merged.slice(start))
    if positions:
        new = merge_two_phase([merged.take(positions), new], schema)
    return _bounded_chunks(pa.concat_tables([*kept, new]))


def _bounded_chunks(table: pa.Table) -> pa.Table:
    """``table``, merged into one chunk once it has more than ``_MAX_CHUNKS``.

    Every path out of ``extend_two_phase`` goes through here: a filter keeps the chunks of the
    table it filters, so the copying branch can pile them up as surely as the slicing one."""
    if table[KEY].num_chunks > _MAX_CHUNKS:
        return table.combine_chunks()
    return table


#: Chunks an extended table may have before ``extend_two_phase`` merges them (each chunk costs
#: every later kernel a little; merging copies the table, so not too often).
_MAX_CHUNKS = 64


def live(table: pa.Table) -> pa.Table:
    """The rows of a merged two-phase-set partition that are not deleted (nor purged)."""
    if table.num_rows == 0:
        return table
    return table.filter(pc.invert(table[DELETED]))
