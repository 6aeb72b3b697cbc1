"""One thin adapter per table format, so the benchmark drives all three with the same code.

Each adapter does what a user of that library would do with default settings: no tuning, no
extra maintenance calls. Libraries are imported when an adapter is built, never at module import,
so a missing peer is reported and skipped instead of crashing the run.

Every adapter owns one folder (``root``) and keeps everything it writes inside it, so a fresh
process can rebuild an equivalent adapter from the folder alone (see :func:`timed_open`).
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Protocol

import pyarrow as pa

PEER_HINT = "pip install -r bench/requirements.txt"


class SystemUnavailableError(Exception):
    """The system cannot run here; the message says why and how to fix it."""


class System(Protocol):
    """What the benchmark needs from a table format: create, append, and open-and-list."""

    name: ClassVar[str]
    note: ClassVar[str]  # the defaults that shape the figures, printed with the results

    def __init__(self, root: Path) -> None:
        """Bind to ``root`` without touching the table; raise SystemUnavailableError if it cannot run."""

    def create(self, schema: pa.Schema) -> None:
        """Create an empty table and keep a handle to it for :meth:`append`."""

    def append(self, data: pa.Table) -> None:
        """Append ``data`` as one commit through the handle kept by :meth:`create`."""

    def open_and_list(self) -> int:
        """Open the table from storage with no cached state and return how many live data files it has."""

    def facts(self) -> dict[str, object]:
        """Describe the table's metadata layout (untimed), to explain the figures."""


def _require(module: str, hint: str = PEER_HINT) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise SystemUnavailableError(f"not installed ({hint}): {exc}") from None


class MetatxnSystem:
    """metatxn through its public API (``/work/shared/API.md``): an unkeyed, unpartitioned table."""

    name: ClassVar[str] = "metatxn"
    note: ClassVar[str] = "t.append(); open = txn.open_table(uri).snapshot().files(); default properties"

    def __init__(self, root: Path) -> None:
        self._txn: Any = _require("txn", hint="pip install -e . from the repository root")
        if not hasattr(self._txn.Table, "append"):
            raise SystemUnavailableError("txn.Table has no append() yet")
        self._uri = str(root / "table")
        self._table: Any = None

    def create(self, schema: pa.Schema) -> None:
        self._table = self._txn.create_table(self._uri, schema)

    def append(self, data: pa.Table) -> None:
        self._table.append(data)

    def open_and_list(self) -> int:
        return len(self._txn.open_table(self._uri).snapshot().files())

    def facts(self) -> dict[str, object]:
        return {"timeline_instants": len(self._txn.open_table(self._uri).timeline())}


class DeltalakeSystem:
    """delta-rs: ``write_deltalake(mode="append")`` on a held ``DeltaTable``, default table config.

    The default ``delta.checkpointInterval`` is 100, so opening reads the last checkpoint plus at
    most 99 JSON commits; that is what users get, so it is kept.
    """

    name: ClassVar[str] = "deltalake"
    note: ClassVar[str] = ("write_deltalake(dt, data, mode='append'); open = DeltaTable(uri).file_uris(); "
                           "default config, so a checkpoint every 100 commits (delta.checkpointInterval)")

    def __init__(self, root: Path) -> None:
        self._deltalake: Any = _require("deltalake")
        self._uri = str(root / "table")
        self._table: Any = None

    def create(self, schema: pa.Schema) -> None:
        self._table = self._deltalake.DeltaTable.create(self._uri, schema)

    def append(self, data: pa.Table) -> None:
        # Passing the DeltaTable (not the URI) reuses its loaded state, as a long-lived writer would.
        self._deltalake.write_deltalake(self._table, data, mode="append")

    def open_and_list(self) -> int:
        # deltalake 1.x removed DeltaTable.files(); file_uris() is the listing that remains.
        return len(self._deltalake.DeltaTable(self._uri).file_uris())

    def facts(self) -> dict[str, object]:
        log = Path(self._uri) / "_delta_log"
        return {
            "version": self._deltalake.DeltaTable(self._uri).version(),
            "checkpoints": sum(1 for _ in log.glob("*.checkpoint*.parquet")),
            "json_commits_on_disk": sum(1 for _ in log.glob("*.json")),
        }


class PyicebergSystem:
    """pyiceberg with a ``SqlCatalog`` on sqlite and a local file warehouse, default table properties.

    Appends are fast appends: every commit adds one manifest and a new manifest list naming all
    manifests so far (``commit.manifest-merge.enabled`` defaults to false), and a new
    ``metadata.json`` holding every snapshot. Listing is ``scan().plan_files()``, the call a reader
    makes to find live files. The catalog connection is made outside the timed region, like a
    client that is already connected.
    """

    name: ClassVar[str] = "pyiceberg"
    note: ClassVar[str] = ("SqlCatalog on sqlite, local file warehouse; table.append(); open = "
                           "catalog.load_table() + scan().plan_files(); default properties, so fast "
                           "appends with one manifest per commit and no manifest merging")
    _namespace: ClassVar[str] = "bench"
    _identifier: ClassVar[str] = "bench.orders"

    def __init__(self, root: Path) -> None:
        sql: Any = _require("pyiceberg.catalog.sql")
        _require("sqlalchemy")
        root.mkdir(parents=True, exist_ok=True)
        self._catalog: Any = sql.SqlCatalog(
            "bench",
            uri=f"sqlite:///{root / 'catalog.db'}",
            warehouse=(root / "warehouse").as_uri(),
        )
        self._table: Any = None

    def create(self, schema: pa.Schema) -> None:
        self._catalog.create_namespace_if_not_exists(self._namespace)
        self._table = self._catalog.create_table(self._identifier, schema)

    def append(self, data: pa.Table) -> None:
        self._table.append(data)

    def open_and_list(self) -> int:
        table = self._catalog.load_table(self._identifier)
        return sum(1 for _ in table.scan().plan_files())

    def facts(self) -> dict[str, object]:
        table = self._catalog.load_table(self._identifier)
        snapshot = table.current_snapshot()
        manifests = len(snapshot.manifests(table.io)) if snapshot is not None else 0
        metadata = Path(table.metadata_location.removeprefix("file://"))
        return {
            "snapshots": len(table.metadata.snapshots),
            "manifests_in_current_snapshot": manifests,
            "metadata_json_kib": round(metadata.stat().st_size / 1024),
        }


SYSTEMS: dict[str, type[System]] = {
    cls.name: cls for cls in (MetatxnSystem, DeltalakeSystem, PyicebergSystem)
}


def make_system(name: str, root: Path) -> System:
    """Build the adapter called ``name`` over ``root``; raises SystemUnavailableError if it cannot run."""
    return SYSTEMS[name](root)


def unavailable_reason(name: str, scratch: Path) -> str | None:
    """Return why ``name`` cannot run here, or None if it can."""
    try:
        make_system(name, scratch)
    except SystemUnavailableError as exc:
        return str(exc)
    return None


def timed_open(name: str, root: str, warm_root: str) -> tuple[float, int]:
    """Time one open-and-list of the table in ``root``; meant to run in a freshly spawned process.

    A fresh process is the only fair "cold open": pyiceberg keeps a process-wide manifest cache and
    any library may cache table state, which would hide how opening scales with the commit count.
    Opening ``warm_root`` first (untimed) pays one-off costs that are not about this table: lazy
    imports, the first use of the Parquet/Avro readers, sqlite connection set-up.

    Returns:
        Seconds taken by ``open_and_list`` on ``root`` and the number of files it listed.
    """
    make_system(name, Path(warm_root)).open_and_list()
    system = make_system(name, Path(root))
    start = time.perf_counter()
    files = system.open_and_list()
    return time.perf_counter() - start, files


# -- keyed tables (bench_keyed.py) --------------------------------------------------------------
#
# A second family of adapters: named tables under one root, created keyed or not, and every write
# bench_keyed times (append, upsert, delete of a key range) plus the reads it checks with. Lance and
# deltalake have no record key: their tables are plain, appends do no key check, and an upsert is
# their merge on the key column. The family is not in SYSTEMS: bench_commits runs the first one.


class KeyedSystem(Protocol):
    """A table format as bench_keyed drives it; ``handle`` is whatever the library's writer holds."""

    name: ClassVar[str]
    calls: ClassVar[dict[str, str]]  # operation -> the call timed, for the report

    def __init__(self, root: Path, *, keyed: bool = True) -> None:
        """Bind to ``root``; raise SystemUnavailableError if the library cannot run here."""

    def path(self, table: str) -> Path:
        """The folder of table ``table``: copying it copies the table."""

    def create(self, table: str, schema: pa.Schema, key: list[str]) -> Any:
        """Create an empty table (keyed by ``key`` where the system can be) and return a handle."""

    def open(self, table: str) -> Any:
        """Open the table from storage (the handle a new reader or writer starts from)."""

    def append(self, handle: Any, data: pa.Table) -> None: ...

    def upsert(self, handle: Any, data: pa.Table, key: list[str]) -> None: ...

    def delete_range(self, handle: Any, column: str, low: int, high: int) -> None:
        """Delete the rows whose ``column`` is in ``[low, high)``."""

    def count(self, handle: Any, where: Any = None) -> int:
        """Live rows (matching the ``pc.Expression`` ``where``) as the handle sees them."""

    def plan(self, table: str) -> int:
        """Open the table with no state and list what a reader must read; the number of files."""

    def list_files(self, table: str) -> int:
        """Open the table with no state and list its live data files (no statistics); how many."""

    def read(self, handle: Any, columns: list[str]) -> pa.Table:
        """Every live row's ``columns``."""


class MetatxnKeyed:
    """metatxn through its public API; ``keyed=False`` makes the same tables with no record key."""

    name: ClassVar[str] = "metatxn"
    calls: ClassVar[dict[str, str]] = {
        "append": "t.append(batch)",
        "upsert": "t.upsert(batch)",
        "delete": "t.delete(where=(pc.field(k) >= a) & (pc.field(k) < b))",
        "count": "t.count() (t.snapshot().count() where Table has no count)",
        "open": "txn.open_table(uri)",
        "plan": "txn.open_table(uri).snapshot().file_table() (.files() where there is no file_table)",
        "list": "txn.open_table(uri).snapshot().files()",
        "lookup": "t.lookup(keys)",
    }

    def __init__(self, root: Path, *, keyed: bool = True,
                 properties: dict[str, str] | None = None) -> None:
        self.txn: Any = _require("txn", hint="pip install -e . from the repository root")
        self.root, self.keyed = root, keyed
        #: Table properties of the tables it creates (default: none, the table defaults).
        self.properties = dict(properties or {})

    def path(self, table: str) -> Path:
        return self.root / table

    def create(self, table: str, schema: pa.Schema, key: list[str]) -> Any:
        record_key = (key[0] if len(key) == 1 else key) if self.keyed else None
        return self.txn.create_table(str(self.path(table)), schema, record_key=record_key,
                                     properties=self.properties)

    def open(self, table: str) -> Any:
        return self.txn.open_table(str(self.path(table)))

    def append(self, handle: Any, data: pa.Table) -> None:
        handle.append(data)

    def upsert(self, handle: Any, data: pa.Table, key: list[str]) -> None:
        handle.upsert(data)

    def delete_range(self, handle: Any, column: str, low: int, high: int) -> None:
        import pyarrow.compute as pc

        handle.delete(where=(pc.field(column) >= low) & (pc.field(column) < high))

    def count(self, handle: Any, where: Any = None) -> int:
        if where is None and callable(getattr(handle, "count", None)):
            return int(handle.count())
        return int(handle.snapshot().count(filter=where))

    def plan(self, table: str) -> int:
        snapshot = self.open(table).snapshot()
        file_table = getattr(snapshot, "file_table", None)
        return len(file_table()) if callable(file_table) else len(snapshot.files())

    def list_files(self, table: str) -> int:
        return len(self.open(table).snapshot().files())

    def read(self, handle: Any, columns: list[str]) -> pa.Table:
        return handle.to_arrow(columns=columns)

    def maintain(self, handle: Any) -> bool:
        """Run ``t.maintain()`` where the Table has one (untimed upkeep after a build); whether it ran."""
        maintain = getattr(handle, "maintain", None)
        if not callable(maintain):
            return False
        maintain()
        return True


class DeltalakeKeyed:
    """delta-rs with default table config: plain appends, ``merge`` for upserts, predicate deletes."""

    name: ClassVar[str] = "deltalake"
    calls: ClassVar[dict[str, str]] = {
        "append": "write_deltalake(dt, batch, mode='append')",
        "upsert": "dt.merge(batch, 't.k = s.k', 's', 't').when_matched_update_all()"
                  ".when_not_matched_insert_all().execute()",
        "delete": "dt.delete('k >= a AND k < b')",
        "count": "dt.count()",
        "open": "DeltaTable(uri)",
        "plan": "DeltaTable(uri).file_uris()",
        "list": "DeltaTable(uri).file_uris()",
    }

    def __init__(self, root: Path, *, keyed: bool = True) -> None:
        self._deltalake: Any = _require("deltalake")
        self.root = root

    def path(self, table: str) -> Path:
        return self.root / table

    def create(self, table: str, schema: pa.Schema, key: list[str]) -> Any:
        self.root.mkdir(parents=True, exist_ok=True)
        return self._deltalake.DeltaTable.create(str(self.path(table)), schema)

    def open(self, table: str) -> Any:
        return self._deltalake.DeltaTable(str(self.path(table)))

    def append(self, handle: Any, data: pa.Table) -> None:
        self._deltalake.write_deltalake(handle, data, mode="append")

    def upsert(self, handle: Any, data: pa.Table, key: list[str]) -> None:
        predicate = " AND ".join(f"t.{k} = s.{k}" for k in key)
        (handle.merge(data, predicate=predicate, source_alias="s", target_alias="t")
         .when_matched_update_all().when_not_matched_insert_all().execute())

    def delete_range(self, handle: Any, column: str, low: int, high: int) -> None:
        handle.delete(f"{column} >= {low} AND {column} < {high}")

    def count(self, handle: Any, where: Any = None) -> int:
        if where is None:
            return int(handle.count())
        return int(handle.to_pyarrow_dataset().count_rows(filter=where))

    def plan(self, table: str) -> int:
        return len(self.open(table).file_uris())

    def list_files(self, table: str) -> int:
        return self.plan(table)

    def read(self, handle: Any, columns: list[str]) -> pa.Table:
        return handle.to_pyarrow_table(columns=columns)


class LanceKeyed:
    """Lance (``pylance``) with default settings: no key, so an append does no key check.

    Writes go through the held ``LanceDataset`` (``ds.insert``, ``merge_insert``, ``delete``), which
    each move it to the version they made, as a long-lived writer's handle would.
    """

    name: ClassVar[str] = "lance"
    calls: ClassVar[dict[str, str]] = {
        "append": "ds.insert(batch)",
        "upsert": "ds.merge_insert(k).when_matched_update_all().when_not_matched_insert_all()"
                  ".execute(batch)",
        "delete": "ds.delete('k >= a AND k < b')",
        "count": "ds.count_rows()",
        "open": "lance.dataset(uri)",
        "plan": "lance.dataset(uri).get_fragments()",
        "list": "lance.dataset(uri).get_fragments()",
    }

    def __init__(self, root: Path, *, keyed: bool = True) -> None:
        self._lance: Any = _require("lance", hint="pip install pylance (pinned in bench/requirements.txt)")
        self.root = root

    def path(self, table: str) -> Path:
        return self.root / table

    def create(self, table: str, schema: pa.Schema, key: list[str]) -> Any:
        self.root.mkdir(parents=True, exist_ok=True)
        return self._lance.write_dataset(schema.empty_table(), str(self.path(table)))

    def open(self, table: str) -> Any:
        return self._lance.dataset(str(self.path(table)))

    def append(self, handle: Any, data: pa.Table) -> None:
        handle.insert(data)

    def upsert(self, handle: Any, data: pa.Table, key: list[str]) -> None:
        (handle.merge_insert(key[0] if len(key) == 1 else key)
         .when_matched_update_all().when_not_matched_insert_all().execute(data))

    def delete_range(self, handle: Any, column: str, low: int, high: int) -> None:
        handle.delete(f"{column} >= {low} AND {column} < {high}")

    def count(self, handle: Any, where: Any = None) -> int:
        return int(handle.count_rows() if where is None else handle.count_rows(filter=where))

    def plan(self, table: str) -> int:
        return len(self.open(table).get_fragments())

    def list_files(self, table: str) -> int:
        return self.plan(table)

    def read(self, handle: Any, columns: list[str]) -> pa.Table:
        return handle.to_table(columns=columns)


KEYED_SYSTEMS: dict[str, type[KeyedSystem]] = {
    cls.name: cls for cls in (MetatxnKeyed, DeltalakeKeyed, LanceKeyed)
}
