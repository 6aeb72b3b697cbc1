"""Spark and Arrow types: what a table column is in Spark, and checking a DataFrame against it.

Spark gets a table's schema through pyspark's own Arrow conversion (``from_arrow_schema``):
integers, floats, decimals, strings (also large strings), binary, booleans, dates, timestamps
(with time zone -> ``TimestampType``, without -> ``TimestampNTZType``), durations (day-time
intervals), nulls, and lists, maps and structs of those. Refused, because Spark cannot hold or
read them: unsigned integers, float16, times of day, and nanosecond timestamps (Spark's are
microseconds; its Parquet reader refuses nanosecond columns).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from timeline import InvalidOptionError, SchemaMismatchError


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
            "Help: Spark has no unsigned integers, float16, durations or times of day; "
            "use a signed integer, float32/64, or a timestamp") from None


def check_dataframe(found: Any, schema: pa.Schema) -> None:
    """Raise SchemaMismatchError unless a DataFrame schema has the table's columns and types.

    Nullability is not compared here: a nullable Spark column may feed a non-nullable table
    column, and a null in it is refused when the rows are written.
    """
    expected = spark_schema(schema)
    want = {f.name: f.dataType for f in expected.fields}
    have = {f.name: f.dataType for f in found.fields}
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
