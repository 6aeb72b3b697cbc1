"""metatxn on Spark: executors write the data files, the caller's process commits.

``import txn.spark`` needs pyspark (the ``spark`` extra). Executors must be able to import
metatxn: install it into the executors' Python (in local mode, point ``PYSPARK_PYTHON`` at the
interpreter that has it).
"""

from ._read import create_view, read
from ._source import MetatxnDataSource, register
from ._stream import write_stream
from ._write import MODES, write

__all__ = [
    "MODES",
    "MetatxnDataSource",
    "create_view",
    "read",
    "register",
    "write",
    "write_stream",
]


def __dir__() -> list[str]:
    return list(__all__)
