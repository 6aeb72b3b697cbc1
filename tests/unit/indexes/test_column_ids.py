"""Column ids: ``assign_ids`` numbers every field in Iceberg's order and keeps ids it finds."""

from __future__ import annotations

import pyarrow as pa

from metatxn.indexes import FIELD_ID, assign_ids, field_id, ids_by_name, last_column_id


def _ids(data_type: pa.DataType) -> list[int | None]:
    """The ids of a nested type's children, depth-first (what a test can compare)."""
    fields: list[pa.Field] = []
    if pa.types.is_struct(data_type):
        fields = list(data_type)
    elif pa.types.is_map(data_type):
        fields = [data_type.key_field, data_type.item_field]
    elif pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        fields = [data_type.value_field]
    found: list[int | None] = []
    for child in fields:
        found += [field_id(child), *_ids(child.type)]
    return found


NESTED = pa.schema([
    ("id", pa.int64()),
    ("addr", pa.struct([("city", pa.string()), ("geo", pa.struct([("lat", pa.float64())]))])),
    ("tags", pa.list_(pa.string())),
    ("attrs", pa.map_(pa.string(), pa.int32())),
    ("events", pa.large_list(pa.struct([("at", pa.int64())]))),
])


def test_top_level_fields_first_then_children_level_by_level() -> None:
    schema = assign_ids(NESTED)
    assert ids_by_name(schema) == {"id": 1, "addr": 2, "tags": 3, "attrs": 4, "events": 5}
    # Level 2: addr.city 6, addr.geo 7, tags.element 8, attrs.key 9, attrs.value 10,
    # events.element 11; level 3: addr.geo.lat 12, events.element.at 13.
    assert _ids(schema.field("addr").type) == [6, 7, 12]
    assert _ids(schema.field("tags").type) == [8]
    assert _ids(schema.field("attrs").type) == [9, 10]
    assert _ids(schema.field("events").type) == [11, 13]
    assert last_column_id(schema) == 13
    assert schema.names == NESTED.names and schema.equals(NESTED), "ids are metadata only"


def test_deterministic_and_idempotent() -> None:
    once = assign_ids(NESTED)
    assert assign_ids(NESTED).equals(once, check_metadata=True)
    assert assign_ids(once).equals(once, check_metadata=True), "ids present are kept"


def test_existing_ids_are_kept_and_new_ones_follow_the_largest() -> None:
    schema = pa.schema([
        pa.field("a", pa.int64(), metadata={FIELD_ID: b"7"}),
        ("b", pa.string()),
        pa.field("c", pa.struct([("x", pa.int8())]), metadata={FIELD_ID: b"3", b"other": b"kept"}),
    ])
    assigned = assign_ids(schema)
    assert ids_by_name(assigned) == {"a": 7, "b": 8, "c": 3}
    assert _ids(assigned.field("c").type) == [9]
    assert assigned.field("c").metadata[b"other"] == b"kept"


def test_start_numbers_new_ids() -> None:
    assigned = assign_ids(pa.schema([("a", pa.int64()), ("b", pa.list_(pa.int64()))]), start=100)
    assert ids_by_name(assigned) == {"a": 100, "b": 101}
    assert _ids(assigned.field("b").type) == [102]


def test_without_ids() -> None:
    assert field_id(pa.field("a", pa.int64())) is None
    assert last_column_id(NESTED) == 0
    assert ids_by_name(NESTED) == {}
    assert last_column_id(pa.schema([])) == 0


def test_schema_metadata_survives() -> None:
    schema = NESTED.with_metadata({b"k": b"v"})
    assert assign_ids(schema).metadata == {b"k": b"v"}
