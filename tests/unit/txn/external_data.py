"""External data for the ADD SEGMENT tests: Hive-style folders written with pyarrow, on a local
path or any fsspec URL, and byte-for-byte views of them.

Nothing here touches a table: these are the "existing Parquet/ORC/CSV/JSON folders" a user
brings to ``t.add_segment``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pyarrow.orc as porc
import pyarrow.parquet as pq

EXTENSIONS = {"parquet": "parquet", "orc": "orc", "csv": "csv", "json": "json"}


def url_of(root: Any) -> str:
    """``root`` (a local path or a URL) as a URL."""
    text = str(root)
    return text if "://" in text else "file://" + text


def encode(table: pa.Table, file_format: str, *, header: bool = True) -> bytes:
    """``table`` as the bytes of one ``file_format`` file (CSV with or without a header line;
    JSON newline-delimited, one object per row)."""
    sink = io.BytesIO()
    if file_format == "parquet":
        pq.write_table(table, sink)
    elif file_format == "orc":
        porc.write_table(table, sink)
    elif file_format == "csv":
        pcsv.write_csv(table, sink, pcsv.WriteOptions(include_header=header))
    elif file_format == "json":
        for row in table.to_pylist():
            sink.write((json.dumps(row) + "\n").encode())
    else:
        raise ValueError(file_format)
    return sink.getvalue()


def write_file(url: Any, table: pa.Table, file_format: str, *, header: bool = True) -> str:
    """Write ``table`` as one file at ``url`` (parent folders created); returns its URL."""
    target = url_of(url)
    filesystem, path = fsspec.core.url_to_fs(target)
    filesystem.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with filesystem.open(path, "wb") as handle:
        handle.write(encode(table, file_format, header=header))
    return target


def write_bytes(url: Any, data: bytes) -> str:
    target = url_of(url)
    filesystem, path = fsspec.core.url_to_fs(target)
    filesystem.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    with filesystem.open(path, "wb") as handle:
        handle.write(data)
    return target


def hive_value(value: Any) -> str:
    return "__HIVE_DEFAULT_PARTITION__" if value is None else str(value)


def write_hive(root: Any, table: pa.Table, partition_by: Sequence[str], file_format: str, *,
               files_per_folder: int = 1, header: bool = True) -> list[str]:
    """Write ``table`` below ``root`` as Hive does: one ``a=1/b=x`` folder per distinct value of
    ``partition_by`` (those columns left out of the files), each holding ``files_per_folder``
    files ``part-<n>.<ext>`` that split its rows in order. Returns the files' URLs, sorted."""
    base = url_of(root).rstrip("/")
    written: list[str] = []
    keys = table.select(list(partition_by)).to_pylist() if partition_by else [{}] * table.num_rows
    distinct: list[dict[str, Any]] = []
    for key in keys:
        if key not in distinct:
            distinct.append(key)
    for key in distinct:
        mask = pa.array([k == key for k in keys])
        rows = table.filter(mask).drop_columns(list(partition_by))
        folder = "/".join([base, *(f"{name}={hive_value(key[name])}" for name in partition_by)])
        step = -(-rows.num_rows // files_per_folder)
        for n in range(files_per_folder):
            part = rows.slice(n * step, step)
            written.append(write_file(f"{folder}/part-{n}.{EXTENSIONS[file_format]}", part,
                                      file_format, header=header))
    return sorted(written)


def tree_bytes(root: Any) -> dict[str, bytes]:
    """Every file below ``root`` (relative path -> bytes): compare before and after to prove that
    nothing was written, moved or deleted there."""
    filesystem, path = fsspec.core.url_to_fs(url_of(root))
    found = filesystem.find(path)
    assert found, f"no files below {root}: nothing to compare"
    prefix = path.rstrip("/") + "/"
    return {name[len(prefix):] if name.startswith(prefix) else name: filesystem.cat_file(name)
            for name in sorted(found)}


def sort_rows(table: pa.Table, key: str = "id") -> pa.Table:
    """``table`` ordered by ``key``: reads return files in any order."""
    return table.take(pc.sort_indices(table, [(key, "ascending")]))
