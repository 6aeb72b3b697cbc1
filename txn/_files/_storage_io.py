"""Data-file I/O: pyarrow on the same backend as the table's storage seam.

Metadata goes through :class:`timeline.Storage` (small objects, put-if-absent). Data files are
Parquet written and scanned by pyarrow, which needs a pyarrow filesystem; every backend provides
one rooted where the storage is. Data files are never commit points: a file only counts once the
instant that names it completes, so a torn or orphaned data file is never read.
"""

from __future__ import annotations

import contextlib
import inspect
import posixpath
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs
import pyarrow.parquet as pq

from metatxn.timeline import InvalidOptionError, Storage, StorageError, makes_folders, move

if TYPE_CHECKING:
    from ._foreign import ExternalReader

#: Decimals of up to 18 digits stored as INT32/INT64 rather than fixed-length byte arrays:
#: Spark's reader decodes byte-array decimals several times slower (TPC-H Q6 over
#: ``decimal(15,2)`` columns: 1.63x a Spark-written file, 1.05x with integers). pyarrow 16 added
#: the option; older ones keep the byte arrays.
_DECIMALS_AS_INTEGERS: dict[str, bool] = (
    {"store_decimal_as_integer": True}
    if "store_decimal_as_integer" in inspect.signature(pq.ParquetWriter.__init__).parameters
    or "store_decimal_as_integer" in (pq.ParquetWriter.__doc__ or "") else {})


class DataStore:
    """Reads and writes data files of one table, addressed by table-relative paths."""

    def __init__(self, storage: Storage, external: ExternalReader | None = None) -> None:
        self.storage = storage
        provider = getattr(storage, "arrow_filesystem", None)
        if provider is None:
            raise InvalidOptionError(f"storage {storage!r} offers no pyarrow filesystem for data files")
        self.filesystem, self.root = provider()
        #: On an object store, pyarrow's create_dir and its deletes and moves leave zero-byte
        #: folder markers that listings would show as keys: folders need no creating there, and
        #: deletes and moves go through the storage.
        self.folders = makes_folders(self.filesystem)
        self._made_folders: set[str] = set()
        #: Reads external segments' files (None: a store that only knows the table's own files).
        self.external = external

    def external_reader(self) -> ExternalReader:
        if self.external is None:
            raise InvalidOptionError(
                f"this handle on {self.storage.uri!r} cannot read external segments' files; "
                "expected one opened with txn.open_table")
        return self.external

    def full_path(self, path: str) -> str:
        return posixpath.join(self.root, path)

    def location(self, path: str) -> str:
        """The user-facing location of a table file (the table URI joined with ``path``)."""
        return f"{self.storage.uri.rstrip('/')}/{path}"  # "" gives the prefix of every file

    def write_parquet(self, path: str, table: pa.Table, *, row_group_rows: int,
                      statistics: bool | list[str] = True,
                      dictionary: bool | list[str] = True) -> int:
        """Write ``table`` to ``path``; return the file's size in bytes.

        ``statistics``: write Parquet statistics for every column, or only for those named.
        ``dictionary``: dictionary-encode every column, or only those named.
        """
        def encode(sink: pa.NativeFile) -> None:
            pq.write_table(table, sink, row_group_size=row_group_rows,
                           write_statistics=statistics, use_dictionary=dictionary,
                           **_DECIMALS_AS_INTEGERS)

        full = self.full_path(path)
        folder = posixpath.dirname(full)
        try:
            if self.folders and folder not in self._made_folders:
                self.filesystem.create_dir(folder, recursive=True)
                self._made_folders.add(folder)
            if self.folders:
                with self.filesystem.open_output_stream(full) as sink:
                    encode(sink)
                    size: int = sink.tell()
            else:
                # One PUT of the whole file through the storage: pyarrow's streaming multipart
                # upload took 1.7x as long on the S3 test server (design/storage.md, "The data
                # path").
                buffer = pa.BufferOutputStream()
                encode(buffer)
                data = buffer.getvalue().to_pybytes()
                self.storage.put(path, data)
                size = len(data)
        except OSError as exc:  # StorageError is one
            # A full disk would stay full of the partial file until the rollback, which itself
            # needs room to record that it started: remove it now (its marker still names it).
            with contextlib.suppress(OSError):
                if self.folders:
                    self.filesystem.delete_file(full)
                else:
                    self.storage.delete(path)
            error = StorageError(f"could not write data file {path!r} of the table at "
                                 f"{self.storage.uri!r}: {exc}; expected the storage to accept "
                                 "it (free space, permissions)")
            error.errno = exc.errno
            raise error from exc
        return size

    def make_folder(self, path: str) -> None:
        """Create the table folder ``path`` where folders exist (nothing on object stores)."""
        if self.folders:
            self.filesystem.create_dir(self.full_path(path), recursive=True)

    def move_file(self, source: str, target: str) -> None:
        """Move table file ``source`` to ``target`` (table-relative paths)."""
        if self.folders:
            self.filesystem.move(self.full_path(source), self.full_path(target))
        else:
            move(self.storage, source, target)

    def remove_folder(self, path: str) -> None:
        """Remove table folder ``path`` and everything in it; a missing folder is fine."""
        if self.folders:
            with contextlib.suppress(FileNotFoundError):
                self.filesystem.delete_dir(self.full_path(path))
            return
        for key in self.storage.list(path, recursive=True):
            self.storage.delete(key)

    def dataset(
        self,
        paths: Sequence[str],
        schema: pa.Schema,
        guarantees: Sequence[ds.Expression] | None = None,
    ) -> ds.FileSystemDataset:
        """A Parquet dataset over exactly ``paths``; ``guarantees`` describe each file's ranges.

        Arrow prunes a fragment whose guarantee contradicts a scan filter without opening it.
        """
        full = [self.full_path(p) for p in paths]
        return ds.FileSystemDataset.from_paths(
            full, schema=schema, format=ds.ParquetFileFormat(), filesystem=self.filesystem,
            partitions=list(guarantees) if guarantees is not None else None,
        )


