"""Spark sessions for metatxn: a local session, and quiet third-party warnings.

PySpark 4.x warns ``PySpark does not yet fully support pandas >= 3.0.0`` whenever one of its
Arrow helpers starts (``mapInArrow``, the data source API) with pandas 3 installed. metatxn hands
Spark Arrow data only and never goes through pandas, so the warning says nothing about what
metatxn does; it is silenced for warnings raised inside pyspark only, with that exact message
(``warnings.filterwarnings("default", PANDAS3_WARNING)`` after importing ``txn.spark`` brings it
back).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from typing import Any

#: The start of PySpark's warning about pandas 3.
PANDAS3_WARNING = "PySpark does not yet fully support pandas"


def quiet_third_party_warnings() -> None:
    """Silence PySpark's pandas-3 warning (raised inside pyspark, about pandas features)."""
    warnings.filterwarnings("ignore", message=PANDAS3_WARNING, category=FutureWarning,
                            module="pyspark")


#: Spark's console logging at ERROR from the JVM's start (``setLogLevel`` only takes effect once
#: the session runs, after the start-up warnings). The gateway's level is the one pyspark's shell
#: mode would otherwise announce, and reset to WARN, when it differs from the root's.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


def local_session(app_name: str = "metatxn", *, cores: int = 2, driver_memory: str = "1g",
                  config: dict[str, str] | None = None) -> Any:
    """A local SparkSession for metatxn: ``local[cores]``, no UI, UTC, errors-only logs.

    Spark's Python workers run this process's interpreter unless ``PYSPARK_PYTHON`` is already
    set (they must import metatxn, as this process does). ``config`` adds Spark settings.
    ``getOrCreate`` returns the session already running in this process, if there is one.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    quiet_third_party_warnings()
    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory(prefix="metatxn-spark-") as folder:
        log_config = os.path.join(folder, "log4j2.properties")
        with open(log_config, "w") as file:
            file.write(_LOG4J2)
        builder = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
                   .config("spark.driver.memory", driver_memory)
                   .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile=file:{log_config}")
                   .config("spark.sql.shuffle.partitions", str(2 * cores))
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.sql.session.timeZone", "UTC"))
        for key, value in (config or {}).items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
