"""Values into columns: a value is stored only when the column's type holds it unchanged.

Spark puts a value into a column of another type with CAST, which truncates (3.45 into an int
column is 3), wraps or nulls an out-of-range number when ANSI mode is off, and parses strings.
``Table.update`` refuses such a value (``_lost_in_conversion`` in txn/_write/_mutations.py):
stored, then converted back to its own type, it must be what it was. UPDATE's SET values and
INSERT's query go through the same rule: Spark computes them in their own types, the rows are
pinned, every row is checked here, and only then cast to the columns' types, so the cast can no
longer lose anything. The check uses ``try_cast``, so it does not depend on
``spark.sql.ansi.enabled``.

By the value's type V and the column's type T:

* V is T (nullability aside), or V is NULL's type: stored as it is;
* T is a string: any scalar value, as its text (a number, a date, a boolean);
* V is a string and T a number: refused whatever the text, as Spark's own INSERT and
  ``Table.update`` refuse it (write the number, or CAST it);
* T is floating-point and V floating-point or decimal: floats round by nature; the value only
  has to stay finite (``Table.update``'s rule for floats);
* both decimals: the fraction is rounded to the column's scale (as CarbonData and Spark assign
  a decimal: ``price * 1.1`` into a ``decimal(10,2)``), the whole part must fit;
* a string into a date: it must read as a date without a time of day being dropped; into a
  timestamp or a boolean: it must read as one;
* anything else (number into number, date and timestamp into each other, nested types): the
  stored value cast back to V must equal the value, NULL only from NULL.

An explicit ``CAST(x AS INT)`` in the statement is the user's own conversion: its type is the
column's, and it is stored as it is.
"""

from __future__ import annotations

from typing import Any

from ... import SchemaMismatchError


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _kind(data_type: Any) -> str:
    from pyspark.sql import types as t

    if isinstance(data_type, t.NullType):
        return "null"
    if isinstance(data_type, (t.StringType, t.VarcharType, t.CharType)):
        return "string"
    if isinstance(data_type, (t.FloatType, t.DoubleType)):
        return "floating"
    if isinstance(data_type, t.DecimalType):
        return "decimal"
    if isinstance(data_type, t.NumericType):
        return "integral"
    if isinstance(data_type, (t.ArrayType, t.MapType, t.StructType)):
        return "nested"
    return str(data_type.typeName())


def _has_map(data_type: Any) -> bool:
    from pyspark.sql import types as t

    if isinstance(data_type, t.MapType):
        return True
    if isinstance(data_type, t.ArrayType):
        return _has_map(data_type.elementType)
    if isinstance(data_type, t.StructType):
        return any(_has_map(f.dataType) for f in data_type.fields)
    return False


def _refused(column: str, value_type: Any, column_type: Any, why: str) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {column!r} is {column_type.simpleString()}, but the statement gives it a "
        f"{value_type.simpleString()} value: {why}; nothing was written\n"
        f"Help: give a value of type {column_type.simpleString()}, or CAST it yourself")


def _lossy(column: str, value_type: Any, column_type: Any) -> str | None:
    """The SQL predicate true on a row whose value the column cannot hold unchanged (None: every
    value fits); raises for a value type the column never takes."""
    value, target = _kind(value_type), _kind(column_type)
    if value == "null" or value_type.simpleString() == column_type.simpleString() or \
            (target == "string" and value != "nested"):
        return None
    if target == "string":
        raise _refused(column, value_type, column_type, "a nested value is not text")
    if value == "string" and target in ("integral", "decimal", "floating"):
        raise _refused(column, value_type, column_type, "a string is not a number")
    if _has_map(value_type) or _has_map(column_type):
        raise _refused(column, value_type, column_type, "maps are stored only as the column's type")
    name = _quoted(column)
    stored = f"try_cast({name} AS {column_type.simpleString()})"
    if target == "floating" and value in ("floating", "decimal"):
        infinite = "CAST('Infinity' AS DOUBLE)"
        return f"(abs(CAST({stored} AS DOUBLE)) = {infinite} AND abs(CAST({name} AS DOUBLE)) < {infinite})"
    if value == "decimal" and target == "decimal":
        # Rounded to the column's scale, as CarbonData and Spark assign decimals; the whole
        # part must fit.
        return f"({name} IS NOT NULL AND {stored} IS NULL)"
    if value == "string" and target == "date":
        moment = f"try_cast({name} AS TIMESTAMP)"
        return (f"({name} IS NOT NULL AND ({stored} IS NULL OR ({moment} IS NOT NULL AND "
                f"CAST({stored} AS TIMESTAMP) <> {moment})))")
    if value == "string" and target in ("timestamp", "timestamp_ntz", "boolean", "binary"):
        return f"({name} IS NOT NULL AND {stored} IS NULL)"
    back = f"try_cast({stored} AS {value_type.simpleString()})"
    return f"({name} IS NOT NULL AND NOT ({back} <=> {name}))"


def converted(rows: Any, columns: dict[str, Any]) -> Any:
    """``rows`` with each of ``columns`` (name -> the table's Spark type) cast to its type, after
    checking that every row's value fits (SchemaMismatchError naming the column and the first
    value that does not). ``rows`` should be pinned: it is read once more for the check."""
    schema = {f.name: f.dataType for f in rows.schema.fields}
    lossy = {c: _lossy(c, schema[c], t) for c, t in columns.items()}
    checks = {c: p for c, p in lossy.items() if p is not None}
    if checks:
        found = rows.where(" OR ".join(checks.values())).selectExpr(*[
            expression for i, (c, p) in enumerate(checks.items()) for expression in (
                f"{p} AS `bad_{i}`", f"CAST({_quoted(c)} AS STRING) AS `value_{i}`",
                f"CAST(try_cast({_quoted(c)} AS {columns[c].simpleString()}) AS STRING) AS `stored_{i}`")
        ]).limit(1).collect()
        if found:
            row = found[0]
            index, column = next((i, c) for i, c in enumerate(checks) if row[f"bad_{i}"])
            stored = row[f"stored_{index}"]
            kept = "cannot be stored" if stored is None else f"would be stored as {stored}"
            raise _refused(column, schema[column], columns[column],
                           f"{row[f'value_{index}']} {kept}")
    return rows.selectExpr(*[
        f"CAST({_quoted(c)} AS {columns[c].simpleString()}) AS {_quoted(c)}" if c in columns
        else _quoted(c) for c in rows.columns])
