"""Delete deltas: which rows of a data file are deleted, without rewriting the file.

A delete delta (CarbonData's ``.deletedelta``) is a small Parquet file beside its data file,
``<data file stem>_<T>.deletedelta``, holding one sorted ``position`` column: the row numbers, in
the data file as written, that instant ``T`` deleted (or replaced, for updates and upserts). It
is announced by a marker like a data file, so a rollback deletes it, and it counts only once
``T`` completed: the ``deletes`` partition of the metadata table lists it (two-phase set keyed by
the delta's path, with the data file it refers to and its row count).

Horizontal compaction (CarbonData's, threshold ``deletes.compaction.threshold``, default 1):
when a write would leave a data file with more live deltas than the threshold, it writes the
union of the file's deleted positions as one delta instead and removes the older ones in the
same commit. With the default a data file therefore never has more than one live delta, and the
live deltas of a file are always disjoint (a write deletes only rows that are live).
"""

from __future__ import annotations

import contextlib
import hashlib
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from metatxn.indexes import DELETES_SCHEMA, live
from metatxn.timeline import CorruptMetadataError, ObjectNotFoundError, StorageError, TxnError

from ._foreign import is_external
from ._storage_io import DataStore
from ._writer import marker_path

DELTA_SUFFIX = ".deletedelta"

Positions = npt.NDArray[np.int64]


class DeltaStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A delete delta one commit wrote."""

    path: str
    #: The data file whose rows it deletes.
    file: str
    rows: int
    size: int


#: Where the delete deltas of external segments' files go: inside the table, never beside the
#: files, which the table does not own.
EXTERNAL_DELTAS_FOLDER = "external_deltas"


def delta_path(data_file: str, instant_time: str) -> str:
    if is_external(data_file):
        # The URL's hash keeps deltas of equally named files (part-0.parquet in every partition
        # folder) apart; the name keeps them recognisable.
        digest = hashlib.sha1(data_file.encode()).hexdigest()[:16]
        stem = posixpath.basename(data_file).split(".", 1)[0]
        return f"{EXTERNAL_DELTAS_FOLDER}/{digest}-{stem}_{instant_time}{DELTA_SUFFIX}"
    return f"{data_file.removesuffix('.parquet')}_{instant_time}{DELTA_SUFFIX}"


def write_delta(store: DataStore, data_file: str, instant_time: str, positions: Positions) -> DeltaStatus:
    path = delta_path(data_file, instant_time)
    store.storage.put_if_absent(marker_path(posixpath.basename(path)), path.encode())
    table = pa.table({"position": pa.array(np.sort(positions), pa.int64())})
    size = store.write_parquet(path, table, row_group_rows=1 << 20)
    return DeltaStatus(path=path, file=data_file, rows=len(positions), size=size)


def storage_error(path: str, error: OSError) -> StorageError:
    """The :class:`StorageError` for a read of ``path`` the system refused; ``.path`` names it."""
    failed = StorageError(f"reading {path} failed: {error}")
    failed.path = path  # type: ignore[attr-defined]
    return failed


@contextlib.contextmanager
def reading_file(path: str, expected: str) -> Iterator[None]:
    """Turn a failure to read table file ``path`` (a data file or a delete delta) into a
    ``TxnError`` naming it: :class:`ObjectNotFoundError` when it is gone,
    :class:`CorruptMetadataError` when its bytes are not ``expected``, :class:`StorageError`
    when the system refused the read (its ``.path`` names the file)."""
    try:
        yield
    except TxnError:
        raise
    except FileNotFoundError:
        raise ObjectNotFoundError(path) from None
    except PermissionError as exc:  # refused, not damaged: the file may be fine
        raise storage_error(path, exc) from exc
    except OSError as exc:
        if exc.errno is not None:
            raise storage_error(path, exc) from exc
        raise CorruptMetadataError(path, expected, f"{type(exc).__name__}: {exc}") from None
    except (pa.ArrowException, KeyError, ValueError, TypeError) as exc:
        raise CorruptMetadataError(path, expected, f"{type(exc).__name__}: {exc}") from None


def read_positions(store: DataStore, path: str, rows: int | None = None) -> Positions:
    """The positions a delete delta holds; ``rows``: how many its ``deletes`` record says.

    Raises:
        ObjectNotFoundError: the delta is gone.
        CorruptMetadataError: it is not a Parquet file of ``rows`` int64 positions.
    """
    expected = "a Parquet delete delta with an int64 'position' column"
    with reading_file(path, expected):
        with store.filesystem.open_input_file(store.full_path(path)) as handle:
            table = pq.ParquetFile(handle).read(columns=["position"], use_threads=False)
        positions = np.asarray(table["position"].to_numpy(), dtype=np.int64)
    if rows is not None and len(positions) != rows:
        raise CorruptMetadataError(path, f"{expected} of {rows} positions (its deletes record)",
                                   f"{len(positions)} positions")
    return positions


@dataclass
class LiveDeltas:
    """The live delete deltas of a snapshot, by data file; positions are read on demand."""

    store: DataStore
    #: data file -> [(delta path, rows), ...]
    by_file: dict[str, list[tuple[str, int]]]
    _positions: dict[str, Positions] = field(default_factory=dict)

    @classmethod
    def of(cls, store: DataStore, deletes: pa.Table | None) -> LiveDeltas:
        by_file: dict[str, list[tuple[str, int]]] = {}
        if deletes is not None and deletes.num_rows:
            current = live(deletes)
            for path, file, rows in zip(current["path"].to_pylist(), current["file"].to_pylist(),
                                        current["rows"].to_pylist(), strict=True):
                by_file.setdefault(file, []).append((path, rows))
        return cls(store, by_file)

    def rows(self, data_file: str) -> int:
        return sum(rows for _, rows in self.by_file.get(data_file, ()))

    def paths(self, data_file: str) -> list[str]:
        return [path for path, _ in self.by_file.get(data_file, ())]

    def positions(self, data_file: str) -> Positions:
        """The deleted positions of ``data_file``, sorted (empty if none)."""
        cached = self._positions.get(data_file)
        if cached is None:
            parts = [read_positions(self.store, path, rows)
                     for path, rows in self.by_file.get(data_file, ())]
            cached = np.sort(np.concatenate(parts)) if parts else np.empty(0, np.int64)
            self._positions[data_file] = cached
        return cached


def stage_deletes(store: DataStore, instant_time: str, deleted: Mapping[str, Positions],
                  current: LiveDeltas, threshold: int) -> tuple[list[DeltaStatus], list[str]]:
    """Write the deltas of ``instant_time``; return (deltas written, older deltas they replace).

    ``deleted`` maps data files to newly deleted positions (live rows only).
    """
    written: list[DeltaStatus] = []
    replaced: list[str] = []
    for data_file, positions in sorted(deleted.items()):
        if len(positions) == 0:
            continue
        older = current.paths(data_file)
        if len(older) + 1 > threshold:
            positions = np.union1d(current.positions(data_file), positions)
            replaced += older
        written.append(write_delta(store, data_file, instant_time, positions))
    return written, replaced


def delete_rows(deltas: list[DeltaStatus], instant_time: str) -> pa.Table:
    """``deletes`` partition rows adding ``deltas``."""
    return pa.Table.from_pylist([
        {"path": d.path, "file": d.file, "rows": d.rows, "size": d.size, "instant": instant_time,
         "deleted": False} for d in deltas], schema=DELETES_SCHEMA)
