"""What Parquet gives back for each Arrow type, so a table may hold types Parquet spells otherwise.

Parquet has no seconds unit for timestamps or times and no millisecond date: pyarrow writes
``timestamp[s]`` as milliseconds, ``time32[s]`` as ``time32[ms]`` and ``date64`` as days
(``date32``), and reads them back so (dictionary columns come back with other index types). A
table keeps the type it was created with; its files hold the type Parquet gives back, and every
read casts that to the table's type, exactly: the values came from the table's type, and a value
that does not fit (an external file's milliseconds in a seconds column) fails the read.

Found by writing a column of the type and reading its schema back, once per type, rather than
by a list of rules that a pyarrow release could make wrong.
"""

from __future__ import annotations

import functools

import pyarrow as pa
import pyarrow.parquet as pq


@functools.lru_cache(maxsize=512)
def stored_type(data_type: pa.DataType) -> pa.DataType:
    """The type a Parquet file written from a ``data_type`` column holds, as pyarrow reads it.

    Raises:
        pyarrow.ArrowNotImplementedError: Parquet cannot hold ``data_type`` at all.
    """
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"c": pa.nulls(0, data_type)}), sink)
    return pq.read_schema(pa.BufferReader(sink.getvalue())).field("c").type


def same_stored(found: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a file's column of type ``found`` holds a table column of type ``wanted``."""
    return _plain(found) in (_plain(wanted), _plain(stored_type(wanted)))


def _plain(data_type: pa.DataType) -> pa.DataType:
    # Dictionary encoding is how a file holds values, not what they are.
    return data_type.value_type if pa.types.is_dictionary(data_type) else data_type
