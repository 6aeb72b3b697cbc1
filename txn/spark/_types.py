"""Spark and Arrow types: what a table column is in Spark, and checking a DataFrame against it.

Both directions go through pyspark's own Arrow conversion. Table -> Spark
(``from_arrow_schema``): integers, floats, decimals, strings (also large strings), binary,
booleans, dates, timestamps (with time zone -> ``TimestampType``, without ->
``TimestampNTZType``), microsecond durations (``interval day to second``), and lists, maps and
structs of those. Refused, because Spark cannot hold or read them: unsigned integers, float16,
times of day, and nanosecond timestamps (Spark's are microseconds; its Parquet reader refuses
nanosecond columns).

Spark -> table (``to_arrow_schema``, when a Spark write creates the table): every column becomes
nullable, as Spark's own file sources and Delta do, and the inverse of the mapping above is used
(``timestamp`` -> ``timestamp[us, tz=UTC]``, ``timestamp_ntz`` -> ``timestamp[us]``, ``variant``
-> its ``struct<value, metadata>``). Refused before anything is written: types pyspark cannot
give Arrow (``interval year to month``, ``calendar interval``), ``void`` (a column of nulls has
no type to store), and types that would come back as another type (``interval day``, whose
Arrow duration reads back as ``interval day to second``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from .. import InvalidOptionError, SchemaMismatchError


def quoted(name: str) -> str:
    """A column name as Spark SQL reads it whatever it holds (a backtick inside is doubled)."""
    return "`" + name.replace("`", "``") + "`"


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark ``StructType`` of a table schema.

    Raises:
        InvalidOptionError: a column has a type Spark cannot represent (named in the message).
    """
    from pyspark.sql.pandas.types import from_arrow_schema

    for field in schema:
        data_type = field.type
        if (pa.types.is_timestamp(data_type) and data_type.unit == "ns") or pa.types.is_time(data_type):
            raise InvalidOptionError(
                f"column {field.name!r} is {data_type}, which Spark cannot read\n"
                "Help: store times as microsecond timestamps (pa.timestamp('us', tz))")
    try:
        return from_arrow_schema(schema)
    except Exception as exc:  # pyspark raises its own type errors
        raise InvalidOptionError(
            f"the table has a column Spark cannot represent: {exc}\n"
            "Help: Spark has no unsigned integers, float16 or times of day; "
            "use a signed integer, float32/64, or a timestamp") from None


def _nullable(data_type: Any) -> Any:
    """The type with every nested nullability flag set (pyspark >= 4.0 on complex types)."""
    to_nullable = getattr(data_type, "toNullable", None)
    return to_nullable() if to_nullable is not None else data_type


def table_schema(found: Any) -> pa.Schema:
    """The Arrow schema of a new table for a DataFrame schema (every column nullable).

    Raises:
        InvalidOptionError: a column's type cannot be stored (named, with the reason); nothing
            is written.
    """
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for field in found.fields:
        wanted = _nullable(field.dataType)
        simple = wanted.simpleString()
        if _holds_void(wanted):
            raise InvalidOptionError(
                f"column {field.name!r} is {simple}: a column of nulls has no type to store\n"
                "Help: cast it to the type it will hold, e.g. F.lit(None).cast('string')")
        try:
            arrow_type = to_arrow_type(wanted, timezone="UTC")
        except Exception as exc:  # pyspark raises its own type errors
            raise InvalidOptionError(
                f"column {field.name!r} is {simple}, which metatxn cannot store ({_first_line(exc)})\n"
                "Help: intervals are stored as 'interval day to second'; cast other types to one "
                "Arrow can hold") from None
        back = _nullable(from_arrow_schema_of(pa.field(field.name, arrow_type)))
        if back != wanted:
            raise InvalidOptionError(
                f"column {field.name!r} is {simple}, which would be stored as {arrow_type} and read "
                f"back as {back.simpleString()}\nHelp: cast it to {back.simpleString()} first")
        fields.append(pa.field(field.name, arrow_type, nullable=True))
    return pa.schema(fields)


def _holds_void(data_type: Any) -> bool:
    from pyspark.sql import types

    if isinstance(data_type, types.NullType):
        return True
    if isinstance(data_type, types.ArrayType):
        return _holds_void(data_type.elementType)
    if isinstance(data_type, types.MapType):
        return _holds_void(data_type.keyType) or _holds_void(data_type.valueType)
    if isinstance(data_type, types.StructType):
        return any(_holds_void(f.dataType) for f in data_type.fields)
    return False


def from_arrow_schema_of(field: pa.Field) -> Any:
    """The Spark type pyspark gives one Arrow field."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema([field])).fields[0].dataType


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def check_dataframe(found: Any, schema: pa.Schema) -> None:
    """Raise SchemaMismatchError unless a DataFrame schema has the table's columns and types.

    Nullability is not compared here, at any depth: a nullable Spark column may feed a
    non-nullable table column (a null in it is refused when the rows are written), and arrays or
    maps built without nulls feed nullable ones.
    """
    expected = spark_schema(schema)
    want = {f.name: _nullable(f.dataType) for f in expected.fields}
    have = {f.name: _nullable(f.dataType) for f in found.fields}
    missing = [n for n in want if n not in have]
    extra = [n for n in have if n not in want]
    wrong = [f"{n}: {have[n].simpleString()} (expected {want[n].simpleString()})"
             for n in want if n in have and have[n] != want[n]]
    if missing or extra or wrong:
        parts = []
        if missing:
            parts.append(f"lacks column(s) {missing}")
        if extra:
            parts.append(f"has column(s) {extra} the table does not")
        if wrong:
            parts.append("has different types: " + "; ".join(wrong))
        described = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in expected.fields)
        raise SchemaMismatchError(f"the DataFrame {' and '.join(parts)}; the table has {described}")


def _widens(narrow: pa.DataType, wide: pa.DataType) -> bool:
    """Whether ``narrow`` -> ``wide`` is a widening a merge write may apply or cast (the table's
    widening table: signed integers up, float32 -> float64, decimal precision up with the same
    scale, date -> timestamp)."""
    if pa.types.is_signed_integer(narrow) and pa.types.is_signed_integer(wide):
        return bool(narrow.bit_width <= wide.bit_width)
    if pa.types.is_decimal(narrow) and pa.types.is_decimal(wide):
        return bool(narrow.scale == wide.scale and narrow.precision <= wide.precision)
    return (narrow, wide) in ((pa.float32(), pa.float64()),) or (
        pa.types.is_date32(narrow) and pa.types.is_timestamp(wide))


def _mergeable(data_type: pa.DataType, table_type: pa.DataType) -> bool:
    """Whether a DataFrame column of ``data_type`` may go to a table column of ``table_type``
    with ``schema_mode="merge"``: the same type, a widening either way, or structs whose
    common children are so (children the table lacks are added)."""
    if data_type.equals(table_type) or _widens(data_type, table_type) or _widens(table_type, data_type):
        return True
    if pa.types.is_struct(data_type) and pa.types.is_struct(table_type):
        children = {c.name: c.type for c in data_type}
        return all(_mergeable(children[c.name], c.type) for c in table_type if c.name in children)
    return False


def check_mergeable(found: Any, schema: pa.Schema) -> None:
    """Raise SchemaMismatchError unless a DataFrame schema can be written to the table with
    ``schema_mode="merge"``: its columns (and struct fields) the table lacks are added, a column
    whose type is a widening of the table's widens it, one narrower than the table's is cast
    up, and a non-nullable table column cannot be missing. Anything else is refused before
    anything begins, as without merge."""
    from pyspark.sql.pandas.types import to_arrow_type

    have = {f.name: _nullable(f.dataType) for f in found.fields}
    missing = [f.name for f in schema if f.name not in have and not f.nullable]
    wrong = []
    for field in schema:
        if field.name not in have:
            continue
        table_type = _nullable(from_arrow_schema_of(field))
        if have[field.name] != table_type and not _mergeable(
                to_arrow_type(have[field.name], timezone="UTC"), field.type):
            wrong.append(f"{field.name}: {have[field.name].simpleString()} (the table has "
                         f"{table_type.simpleString()}, which it neither widens to nor holds "
                         "exactly)")
    if missing or wrong:
        parts = ([f"lacks non-nullable column(s) {missing}"] if missing else []) + (
            ["has types a merge cannot take: " + "; ".join(wrong)] if wrong else [])
        raise SchemaMismatchError(f"the DataFrame {' and '.join(parts)}; nothing was written")


def _aligned(ref: Any, data_type: Any, field: pa.Field) -> Any:
    """``ref`` (of Spark type ``data_type``) as ``field``'s type; struct fields by name (a
    struct cast would match them by position), those the DataFrame lacks as nulls."""
    from pyspark.sql import functions as F
    from pyspark.sql import types

    if isinstance(data_type, types.StructType) and pa.types.is_struct(field.type):
        children = {c.name: c.dataType for c in data_type.fields}
        built = F.struct(*[
            (_aligned(ref.getField(c.name), children[c.name], c) if c.name in children
             else F.lit(None).cast(from_arrow_schema_of(c))).alias(c.name) for c in field.type])
        return F.when(ref.isNull(), F.lit(None).cast(from_arrow_schema_of(field))).otherwise(built)
    return ref.cast(from_arrow_schema_of(field))


def aligned(df: Any, schema: pa.Schema) -> Any:
    """``df`` as exactly the columns of ``schema`` (after a merge): in its order, each cast to
    its Spark type (struct fields matched by name), a column the DataFrame lacks as nulls."""
    from pyspark.sql import functions as F

    have = {f.name: f.dataType for f in df.schema.fields}
    return df.select(*[
        (_aligned(F.col(quoted(f.name)), have[f.name], f) if f.name in have
         else F.lit(None).cast(from_arrow_schema_of(f))).alias(f.name) for f in schema])


def with_field_ids(schema: pa.Schema) -> Any:
    """The Spark schema of ``schema`` with each column's id (``PARQUET:field_id``, struct
    children too) as ``parquet.field.id`` metadata: Spark's Parquet writer then writes the
    ids into the files, as pyarrow does (``spark.sql.parquet.fieldId.write.enabled``, on by
    default)."""
    from pyspark.sql import types

    def identified(field: pa.Field, spark_type: Any) -> Any:
        if pa.types.is_struct(field.type) and isinstance(spark_type, types.StructType):
            spark_type = types.StructType([_field(child, c) for child, c in
                                           zip(field.type, spark_type.fields, strict=True)])
        return spark_type

    def _field(field: pa.Field, spark_field: Any) -> Any:
        value = (field.metadata or {}).get(b"PARQUET:field_id")
        metadata = dict(spark_field.metadata or {})
        if value is not None:
            metadata["parquet.field.id"] = int(value)
        return types.StructField(spark_field.name, identified(field, spark_field.dataType),
                                 spark_field.nullable, metadata)

    return types.StructType([_field(f, s) for f, s in
                             zip(schema, spark_schema(schema).fields, strict=True)])


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """An Arrow batch from Spark, as the table's exact schema (column order, types, nullability).
    A nullable column the batch lacks (a merge write's DataFrame need not have every column)
    is nulls."""
    present = set(batch.schema.names)
    for field in schema:
        if not field.nullable and (field.name not in present or batch.column(field.name).null_count):
            raise SchemaMismatchError(f"column {field.name!r} is not nullable, but a row holds null")
    try:
        return pa.RecordBatch.from_arrays(
            [batch.column(f.name).cast(f.type) if f.name in present else pa.nulls(batch.num_rows, f.type)
             for f in schema], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(f"a row does not fit the table schema: {exc}") from None
