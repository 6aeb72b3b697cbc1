"""Reading and writing the metadata table's files through the storage seam.

Log blocks are Arrow IPC files: they are small, written once per commit and read on every
snapshot until compaction folds them, so they use the format that costs least to write and
read. Bases are Arrow IPC too, sorted by key, with LZ4-compressed buffers: every snapshot reads
them whole, and decoding LZ4 IPC costs a fraction of decoding zstd Parquet (10,000 file rows:
about 0.2-1 ms against 2 ms). Bases written as Parquet by earlier versions are still read.
Each file is built in memory and stored with one put-if-absent: it is either whole or absent,
and a retried write of the same block cannot replace one that landed.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from metatxn.timeline import CorruptMetadataError, Storage, StorageError, TxnError

from ._records import ADDED_LATER

#: What decoding a damaged file can raise: pyarrow's errors (``ArrowInvalid`` is also a
#: ``ValueError``, ``ArrowIOError`` an ``OSError``), msgspec's, and lookups of missing columns
#: or schema metadata.
_DECODING_ERRORS = (pa.ArrowException, msgspec.DecodeError, KeyError, IndexError, ValueError,
                    TypeError, OSError)


@contextlib.contextmanager
def decoding(path: str, expected: str) -> Iterator[None]:
    """Turn any failure to decode ``path`` into :class:`CorruptMetadataError`.

    The one place where the metadata table's files are decoded: every reader of a block, a base,
    a record-index file or ``retention.json`` decodes inside it. A file that disappeared
    (``FileNotFoundError``) passes through unchanged: readers list again when cleaning raced
    them. An operating-system error with an errno (permission, I/O) becomes
    :class:`StorageError` whose ``.path`` names the file: the file may be fine.
    """
    try:
        yield
    except (TxnError, FileNotFoundError):
        raise
    except OSError as exc:
        if exc.errno is not None:  # the system refused the read: not the file's fault
            failed = StorageError(f"reading {path} failed: {exc}")
            failed.path = path  # type: ignore[attr-defined]  # so validate can name the file
            raise failed from exc
        raise CorruptMetadataError(path, expected, f"{type(exc).__name__}: {exc}") from None
    except _DECODING_ERRORS as exc:
        raise CorruptMetadataError(path, expected, f"{type(exc).__name__}: {exc}") from None


def encode_block(path: str, table: pa.Table, parquet_options: Mapping[str, Any] | None = None,
                 compression: str | None = None) -> bytes:
    """The bytes :func:`write_block` stores at ``path`` for ``table``."""
    if path.endswith(".parquet"):
        buffer = io.BytesIO()
        pq.write_table(table, buffer, **{"compression": "zstd", **(parquet_options or {})})
        return buffer.getvalue()
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, table.schema,
                      options=ipc.IpcWriteOptions(compression=compression)) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def write_block(storage: Storage, path: str, table: pa.Table, *,
                parquet_options: Mapping[str, Any] | None = None,
                compression: str | None = None) -> int:
    """Store ``table`` at ``path`` (Parquet for ``.parquet``, else Arrow IPC); return its size.

    ``parquet_options`` are passed to ``pyarrow.parquet.write_table``; ``compression`` is the
    Arrow IPC buffer codec (``"lz4"``, ``"zstd"``; None: uncompressed).
    """
    data = encode_block(path, table, parquet_options, compression)
    storage.put_if_absent(path, data)
    return len(data)


def read_block(storage: Storage, path: str, schema: pa.Schema, *, decode: bool = True,
               project: Callable[[pa.Table], pa.Table] | None = None) -> pa.Table:
    """Read a file written by :func:`write_block`, checking it has ``schema``'s columns.

    ``decode=False`` leaves dictionary-encoded columns encoded (the caller filters first and
    casts what is left to ``schema``). ``project`` turns the table as read into ``schema``'s
    shape first (``column_stats`` blocks of other table versions); what it raises is corruption.

    Raises:
        FileNotFoundError: the file is gone (cleaned after it was listed).
        CorruptMetadataError: the bytes do not hold a table with those columns.
    """
    return decode_block(path, storage.read(path), schema, decode=decode, project=project)


def decode_block(path: str, data: bytes, schema: pa.Schema, *, decode: bool = True,
                 project: Callable[[pa.Table], pa.Table] | None = None) -> pa.Table:
    """:func:`read_block` of ``data``, the bytes stored at ``path``."""
    with decoding(path, f"a metadata table file with columns {schema.names}"):
        if path.endswith(".parquet"):
            # Metadata files are small: decoding on this thread beats waking a thread pool.
            table = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
        else:
            table = ipc.open_file(pa.BufferReader(data)).read_all()
        if project is not None:
            table = project(table)
        table = with_added_columns(table, schema).select(schema.names)
        if not decode:
            for field in schema:
                found = table.schema.field(field.name).type
                if found != field.type and not (pa.types.is_dictionary(found)
                                                and found.value_type == field.type):
                    raise ValueError(f"column {field.name} is {found}, expected {field.type}")
            return table
        return table if table.schema.equals(schema) else table.cast(schema)


def with_added_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the columns of ``schema`` added to the format after it was written (field
    metadata ``ADDED_LATER``) as nulls, where it lacks them."""
    for field in schema:
        if field.metadata and ADDED_LATER in field.metadata and field.name not in table.column_names:
            table = table.append_column(field.name, pa.nulls(table.num_rows, field.type))
    return table


#: ``CorruptMetadataError.found`` of a file that is missing.
MISSING = "no such file, after listing again"


def missing_block(error: FileNotFoundError) -> CorruptMetadataError:
    """The error for a metadata file still missing after listing again: damage, not a race.

    Readers list, then read; cleaning may delete in between, so a missing file first makes them
    list again. A file a fresh listing or a completed instant still names, and that is gone,
    was lost.
    """
    path = getattr(error, "path", None) or error.filename or str(error)
    return CorruptMetadataError(str(path), "a metadata table file that a completed instant "
                                "recorded (its listing or its instant's deltacommit names it)",
                                MISSING)
