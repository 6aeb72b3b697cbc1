"""metatxn on Spark: executors write the data files, the caller's process commits.

``import txn.spark`` needs pyspark and sqlglot, which metatxn's core leaves out: ``pip install
'metatxn[spark]'`` brings them (without them the import raises ``ModuleNotFoundError`` saying
so). Spark's Python workers must be able to import metatxn: every write, read, stream and
:func:`register` checks that once per SparkContext and raises :class:`txn.WorkerEnvironmentError`
(naming both interpreters) when they cannot. In local mode point ``PYSPARK_PYTHON`` at the
interpreter that has metatxn, or use :func:`local_session`.
"""

from ._session import quiet_third_party_warnings

# Before pyspark's Arrow helpers are imported: they warn about pandas 3 on import.
quiet_third_party_warnings()

try:
    import pyspark  # noqa: F401
    import sqlglot  # noqa: F401
except ModuleNotFoundError as missing:
    # An ImportError, as for any optional part of a library (pandas, polars), so that
    # ``except ImportError`` works; its text names the extra. The command line prints it as an
    # error line and a help line, split at "Help:".
    raise ModuleNotFoundError(
        f"txn.spark needs {missing.name}, which is not installed (metatxn's core leaves Spark "
        f"out)\nHelp: install the extra: pip install 'metatxn[spark]'", name=missing.name) from None

from ._changes import read_changes  # noqa: E402
from ._compact import compact  # noqa: E402
from ._read import count, create_view, read  # noqa: E402
from ._session import local_session  # noqa: E402
from ._source import MetatxnDataSource, register  # noqa: E402
from ._sql import sql  # noqa: E402
from ._stream import write_stream  # noqa: E402
from ._tables import MODES  # noqa: E402
from ._write import write  # noqa: E402

__all__ = [
    "MODES",
    "MetatxnDataSource",
    "compact",
    "count",
    "create_view",
    "local_session",
    "read",
    "read_changes",
    "register",
    "sql",
    "write",
    "write_stream",
]


def __dir__() -> list[str]:
    return list(__all__)
