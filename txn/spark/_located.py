"""Where a table of Spark's catalog lives, for the ``metatxn`` data source.

Measured on PySpark 4.3 (design/spark.md, "Tables by name in Spark's catalog"): Spark's session
catalog takes ``CREATE TABLE t USING metatxn LOCATION '...'`` and instantiates the Python data
source afresh at every query of ``t`` (so each query plans the latest snapshot), but hands it no
options at all: neither the location nor the table's properties reach ``reader()``. What does
reach it is the schema the catalog stored at creation, field metadata included. So the source,
when Spark's catalog creates a table (its options then carry Spark's own ``provider``), tags
every field with the location, and a read without a ``path`` option takes the location from
there.

A write gets the schema of the rows written, not the table's (a DataFrame read from another
catalog table carries that table's tag), so a write never takes its location from a schema:
one without a ``path`` is refused (:data:`BY_NAME_WRITE`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The field-metadata key holding a catalog table's location.
LOCATION_KEY = "metatxn.location"

#: Options Spark's catalog adds of its own when it creates a table (not the source's options).
CATALOG_KEYS = frozenset({"location", "owner", "provider", "external", "option.path",
                          "is_managed_location", "comment"})

#: Why a write without a location is refused, and what to do instead.
BY_NAME_WRITE = (
    "a write to a metatxn table by its name in Spark's catalog (INSERT INTO, "
    "DataFrame.writeTo(...).append(), saveAsTable, insertInto) cannot be made: Spark 4 hands a "
    "Python data source's writer neither the table's location nor its name\n"
    "Help: write through txn.spark.sql(spark, \"INSERT INTO name ...\"), txn.spark.write(df, "
    "location), or df.writeTo(name).option(\"path\", location).append()")


def created_by_catalog(options: Mapping[str, str]) -> bool:
    """Whether these options are those of Spark's catalog creating a table."""
    return any(key.lower() == "provider" for key in options)


def source_options(options: Any) -> Any:
    """``options`` (Spark's case-insensitive dict) of Spark's catalog creating a table, without
    the keys the catalog adds (``path`` kept: it is the location). Only then: a user's option of
    one of these names is refused as unknown, as any misspelt option is."""
    for key in [key for key in options if key.lower() in CATALOG_KEYS]:
        del options[key]
    return options


def located(schema: Any, location: str) -> Any:
    """``schema`` (a Spark StructType) with every field tagged with the table's location."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, f.dataType, f.nullable, {**f.metadata, LOCATION_KEY: location})
                       for f in schema.fields])


def location_of(schema: Any) -> str | None:
    """The location a catalog table's schema was tagged with (None: not tagged)."""
    for field in getattr(schema, "fields", ()):
        location = field.metadata.get(LOCATION_KEY)
        if location:
            return str(location)
    return None
