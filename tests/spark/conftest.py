"""The one SparkSession of the Spark tests (local[2], small memory, UTC, no UI).

Every test under ``tests/spark`` is marked ``spark`` (see each module's ``pytestmark``). Tables
live under ``tmp_path``: Spark reads local paths, not ``memory://``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    # Executors' Python workers must import metatxn: run them with this interpreter.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("metatxn-tests")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def warehouse(tmp_path: Any) -> Any:
    """The folder ``txn.spark.sql``'s table names map into (the ``sql`` fixture registers it)."""
    return tmp_path / "warehouse"


@pytest.fixture
def sql(spark: Any, warehouse: Any) -> Any:
    """``txn.spark.sql`` on the test's own warehouse: ``sql("SHOW SEGMENTS FOR TABLE t")``."""
    import txn.spark

    txn.spark.register(spark, warehouse=str(warehouse))
    return lambda statement: txn.spark.sql(spark, statement)
