"""CarbonData's SQL over metatxn tables, from PySpark: :func:`sql` (``txn.spark.sql``).

Table names map to folders of a warehouse set with ``txn.spark.register(spark, warehouse=...)``
(:mod:`._catalog`); design/sql.md lists the statements, their answers and their parsers.
"""

from ._catalog import Catalog, TableName, catalog_of, set_warehouse
from ._dispatch import sql

__all__ = ["Catalog", "TableName", "catalog_of", "set_warehouse", "sql"]


def __dir__() -> list[str]:
    return list(__all__)
