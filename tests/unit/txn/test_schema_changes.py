"""Schema change ops, the widening table, merge_schema and reading by column id (txn._schema)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from metatxn.indexes import assign_ids, field_id
from metatxn.timeline import InvalidOptionError, SchemaEvolutionError
from txn._schema import (
    AddColumn,
    AlterColumn,
    DropColumn,
    RenameColumn,
    SetProperties,
    Shape,
    UnsetProperties,
    apply_changes,
    is_widening,
    merge_schema,
    read_columns,
    schema_changed,
    version_projection,
)

ADDR = pa.struct([("city", pa.string()), ("zip", pa.int32())])
BASE = assign_ids(pa.schema([("id", pa.int64()), ("name", pa.string()), ("amt", pa.int32()),
                             ("day", pa.string()), ("addr", ADDR)]))


def shape(**changes: object) -> Shape:
    values: dict[str, object] = {"schema": BASE, "record_key": "id", "partition_by": ("day",),
                                     "sort_by": ("amt",), "properties": {"a": "1"}, "last_column_id": 7}
    values.update(changes)
    return Shape(**values)  # type: ignore[arg-type]


def ids(schema: pa.Schema) -> dict[str, int | None]:
    return {f.name: field_id(f) for f in schema}


def test_ids_survive_rename_and_widening_and_new_columns_get_fresh_ones() -> None:
    after = apply_changes(shape(), [RenameColumn("name", "full_name"),
                                    AlterColumn("amt", type=pa.int64()),
                                    DropColumn("amt"), AddColumn(pa.field("amt", pa.int64()))])
    assert ids(after.schema) == {"id": 1, "full_name": 2, "day": 4, "addr": 5, "amt": 8}
    assert after.last_column_id == 8
    # The dropped sort column leaves sort_by; the re-added one is a new column.
    assert after.sort_by == ()


def test_add_after_and_nested() -> None:
    after = apply_changes(shape(), [AddColumn(pa.field("x", pa.int8()), after="id"),
                                    AddColumn(pa.field("addr.country", pa.string()))])
    assert after.schema.names == ["id", "x", "name", "amt", "day", "addr"]
    addr = after.schema.field("addr").type
    assert [c.name for c in addr] == ["city", "zip", "country"]
    assert field_id(addr.field("country")) == 9 and field_id(after.schema.field("x")) == 8


def test_a_user_given_id_is_ignored() -> None:
    given = pa.field("x", pa.int8(), metadata={b"PARQUET:field_id": b"2"})
    after = apply_changes(shape(), [AddColumn(given)])
    assert field_id(after.schema.field("x")) == 8


def test_rename_carries_the_layout() -> None:
    after = apply_changes(shape(), [RenameColumn("id", "key"), RenameColumn("day", "d"),
                                    RenameColumn("amt", "amount"), RenameColumn("addr.city", "town")])
    assert (after.record_key, after.partition_by, after.sort_by) == ("key", ("d",), ("amount",))
    assert [c.name for c in after.schema.field("addr").type] == ["town", "zip"]
    composite = apply_changes(shape(record_key=("id", "name")), [RenameColumn("name", "n")])
    assert composite.record_key == ("id", "n")


def test_changes_apply_in_order() -> None:
    after = apply_changes(shape(), [AddColumn(pa.field("a", pa.int8())), RenameColumn("a", "b")])
    assert "b" in after.schema.names
    with pytest.raises(SchemaEvolutionError, match="'name' does not exist"):
        apply_changes(shape(), [RenameColumn("name", "n"), DropColumn("name")])


def test_same_type_is_no_change() -> None:
    assert apply_changes(shape(), [AlterColumn("id", type=pa.int64())]) == shape()


@pytest.mark.parametrize(("change", "match"), [
    (AlterColumn("amt", type=pa.int16()), "'amt': int32 -> int16 narrows the type"),
    (AlterColumn("amt", type=pa.float64()), "'amt': int32 -> double is not exact"),
    (AlterColumn("name", type=pa.large_string()), "'name': string -> large_string is not a widening"),
    (DropColumn("id"), "'id' is a record-key column: it cannot be dropped"),
    (DropColumn("day"), "'day' is a partition column: it cannot be dropped"),
    (AlterColumn("day", type=pa.large_string()), "'day' is a partition column"),
    (AddColumn(pa.field("x", pa.int8(), nullable=False)), "'x': a NOT NULL column cannot be added"),
    (AddColumn(pa.field("name", pa.int8())), "'name' already exists"),
    (AddColumn(pa.field("name.x", pa.int8())), "'name' is string, not a struct"),
    (AddColumn(pa.field("x", pa.int8()), after="nope"), "after='nope' is not a column"),
    (RenameColumn("name", "amt"), "to 'amt': that name exists"),
    (RenameColumn("nope", "x"), "'nope' does not exist"),
    (DropColumn("addr.nope"), "'addr.nope' does not exist"),
    (AlterColumn("amt", nullable=False), "'amt': NOT NULL cannot be added"),
])
def test_refusals(change: object, match: str) -> None:
    before = shape()
    with pytest.raises(SchemaEvolutionError, match=match):
        apply_changes(before, [change])  # type: ignore[list-item]


def test_not_null_can_be_relaxed_never_added() -> None:
    strict = shape(schema=assign_ids(pa.schema([pa.field("id", pa.int64(), nullable=False),
                                                ("v", pa.int32())])), partition_by=(), sort_by=())
    assert apply_changes(strict, [AlterColumn("id", nullable=True)]).schema.field("id").nullable
    with pytest.raises(SchemaEvolutionError, match="NOT NULL cannot be added"):
        apply_changes(strict, [AlterColumn("v", nullable=False)])


def test_last_columns_cannot_be_dropped() -> None:
    one = shape(schema=assign_ids(pa.schema([("v", pa.int32()), ("s", pa.struct([("a", pa.int8())]))])),
                record_key=None, partition_by=(), sort_by=())
    with pytest.raises(SchemaEvolutionError, match="last column of struct 's'"):
        apply_changes(one, [DropColumn("s.a")])
    with pytest.raises(SchemaEvolutionError, match="last column of the table"):
        apply_changes(one, [DropColumn("v"), DropColumn("s")])


def test_malformed_arguments() -> None:
    with pytest.raises(InvalidOptionError):
        apply_changes(shape(), [])
    with pytest.raises(InvalidOptionError, match=r"pyarrow\.Field"):
        apply_changes(shape(), [AddColumn("x")])  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match=r"type must be a pyarrow\.DataType"):
        apply_changes(shape(), [AlterColumn("amt", type="int64")])  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="give type=, nullable= or both"):
        apply_changes(shape(), [AlterColumn("amt")])


def test_properties() -> None:
    after = apply_changes(shape(), [SetProperties({"b": "2"}), UnsetProperties(["a"])])
    assert after.properties == {"b": "2"}
    assert not schema_changed(shape(), after)
    with pytest.raises(InvalidOptionError, match=r"\['zz'\] are not set"):
        apply_changes(shape(), [UnsetProperties(["zz"])])
    assert apply_changes(shape(), [UnsetProperties(["zz"], missing_ok=True)]).properties == {"a": "1"}


@pytest.mark.parametrize(("source", "target", "widens"), [
    (pa.int8(), pa.int16(), True), (pa.int8(), pa.int64(), True), (pa.int64(), pa.int32(), False),
    (pa.uint8(), pa.int16(), True), (pa.uint32(), pa.int32(), False), (pa.uint16(), pa.uint64(), True),
    (pa.float32(), pa.float64(), True), (pa.float64(), pa.float32(), False),
    (pa.int32(), pa.float64(), False), (pa.int64(), pa.float64(), False),
    (pa.decimal128(10, 2), pa.decimal128(12, 2), True), (pa.decimal128(10, 2), pa.decimal128(12, 3), False),
    (pa.date32(), pa.timestamp("us"), True), (pa.date32(), pa.timestamp("ms", tz="UTC"), True),
    (pa.date32(), pa.timestamp("ns"), False), (pa.string(), pa.large_string(), False),
    (pa.timestamp("ms"), pa.timestamp("us"), False), (pa.int32(), pa.int32(), False),
])
def test_widening_table(source: pa.DataType, target: pa.DataType, widens: bool) -> None:
    assert is_widening(source, target) is widens
    if widens:  # exact: the extremes of the source survive the cast and come back
        if pa.types.is_date32(source):
            values = pa.array([-719162, 2932896], source)  # 0001-01-01 and 9999-12-31
        elif pa.types.is_integer(source):
            info = np.iinfo(source.to_pandas_dtype())
            values = pa.array([int(info.min), int(info.max)], source)
        else:
            return
        assert values.cast(target).cast(source).equals(values)


def test_merge_schema_adds_and_widens_only() -> None:
    data = pa.schema([("id", pa.int64()), ("amt", pa.int64()), ("name", pa.int32()),
                      ("addr", pa.struct([("zip", pa.int32()), ("country", pa.string())])),
                      ("extra", pa.float64())])
    changes = merge_schema(BASE, data)
    assert [c.describe() for c in changes] == [
        "alter column amt type int64", "add column addr.country string", "add column extra double"]
    assert merge_schema(BASE, BASE) == []


def test_projection_reads_an_old_file_by_id() -> None:
    after = apply_changes(shape(), [RenameColumn("name", "full_name"), DropColumn("amt"),
                                    AddColumn(pa.field("amt", pa.int64())),
                                    AddColumn(pa.field("addr.country", pa.string())),
                                    RenameColumn("addr.city", "town"),
                                    AlterColumn("addr.zip", type=pa.int64())]).schema
    old = pa.table({"id": [1, 2], "name": ["a", "b"], "amt": pa.array([5, 6], pa.int32()),
                    "day": ["d", "d"], "addr": pa.array([{"city": "x", "zip": 1}, None], ADDR)},
                   schema=BASE)
    read = ds.dataset(old).to_table(columns=version_projection(BASE, after))
    assert read.to_pylist() == [
        {"id": 1, "full_name": "a", "day": "d", "addr": {"town": "x", "zip": 1, "country": None},
         "amt": None},
        {"id": 2, "full_name": "b", "day": "d", "addr": None, "amt": None}]
    assert read.schema.field("addr").type == after.field("addr").type
    assert read_columns(BASE, after, ["full_name", "amt"]) == ["name"]
