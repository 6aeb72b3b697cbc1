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


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """An Arrow batch from Spark, as the table's exact schema (column order, types, nullability)."""
    for field in schema:
        if not field.nullable and batch.column(field.name).null_count:
            raise SchemaMismatchError(f"column {field.name!r} is not nullable, but a row holds null")
    try:
        return pa.RecordBatch.from_arrays([batch.column(f.name).cast(f.type) for f in schema], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise SchemaMismatchError(f"a row does not fit the table schema: {exc}") from None
