"""metatxn tables in DuckDB: :func:`register` makes a view of a snapshot's live rows.

``import txn.duckdb`` works without DuckDB; :func:`register` needs it (``pip install
'metatxn[duckdb]'``, DuckDB 1.1 or newer).

Guarantees: the view holds exactly the rows ``snapshot.to_arrow()`` returns (deleted rows never
appear), under the snapshot's column names and types; it is pinned to the snapshot it was made
from (a ``Table`` means its latest snapshot when :func:`register` is called: call it again to
see later commits), like any Arrow table registered with DuckDB.

How the rows are read: where DuckDB can open the files itself (a table on the local file
system), its own Parquet scan reads them, so projections and filters reach ``READ_PARQUET``
(column pruning, row-group statistics), and the deleted rows are dropped by an anti join on
``(filename, file_row_number)`` with the snapshot's :meth:`~txn.Snapshot.deletes`. One scan per
schema version: a file written under an older version has its columns found by id (renamed,
cast, or null when added later). The other files (any storage but the local one, external ORC,
CSV and JSON files, external files of a partitioned table, whose partition values live in folder
names, and older versions whose nested columns changed shape) are read by metatxn and handed to
DuckDB as an Arrow stream, in the same view: correct, but DuckDB pushes nothing into them. So
are files DuckDB would read otherwise than metatxn: paths with glob characters (``read_parquet``
takes them as patterns), tables with durations or half floats (DuckDB reads the former as
integers and has no half float: float16 columns become FLOAT), column names that differ only by
case (DuckDB's identifiers ignore it), and external files with a column named like the scan's
row number. Folder names are never read as values (``hive_partitioning=false``).

Not guaranteed: an external file read by DuckDB is checked against what ADD SEGMENT recorded
when :func:`register` runs, not at each query; the table's own files DuckDB reads are not
checked against the table's schema as metatxn's reader checks each file (a file replaced by
another table's under its name); a clean that deletes the snapshot's files makes later queries
of the view fail with DuckDB's own error, not ``SnapshotExpiredError``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import field_id, nested_fields

from . import InvalidOptionError, Snapshot, Table

__all__ = ["register"]


#: The name the anti join matches files by; DuckDB's default ``filename`` may be a table column.
_FILENAME = "__metatxn_filename"
#: DuckDB's row-number column of ``read_parquet`` (it cannot be renamed).
_ROW_NUMBER = "file_row_number"


def _duckdb() -> Any:
    try:
        import duckdb
    except ImportError as exc:
        raise InvalidOptionError(
            "txn.duckdb.register needs the duckdb package; install the extra: "
            "pip install 'metatxn[duckdb]'") from exc
    return duckdb


def register(con: Any, name: str, t_or_snapshot: Table | Snapshot) -> None:
    """Create (or replace) the temporary view ``name`` on DuckDB connection ``con`` over the
    live rows of ``t_or_snapshot`` (a ``Table``: its latest snapshot now).

    Besides the view, objects named ``__metatxn_<name>_deletes`` and ``__metatxn_<name>_rest``
    may be registered on ``con`` (the deleted rows, and the rows DuckDB does not read itself);
    registering ``name`` again replaces them.

    Raises:
        InvalidOptionError: duckdb is not installed, ``con`` is not a DuckDB connection,
            ``name`` is not an identifier, or ``t_or_snapshot`` is neither a Table nor a
            Snapshot.

    Example:
        >>> import duckdb, pyarrow as pa, txn, txn.duckdb
        >>> t = txn.create_table("memory://doc/duck", pa.schema([("id", pa.int64())]), record_key="id")
        >>> _ = t.append(pa.table({"id": [1, 2, 3]})); _ = t.delete(keys=[2])
        >>> con = duckdb.connect()
        >>> txn.duckdb.register(con, "orders", t)
        >>> con.sql("select count(*), sum(id) from orders").fetchall()
        [(2, 4)]
    """
    duckdb = _duckdb()
    if not isinstance(con, duckdb.DuckDBPyConnection):
        raise InvalidOptionError(f"con must be a DuckDB connection (duckdb.connect()), got "
                                 f"{type(con).__name__}")
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidOptionError(f"name must be an identifier (letters, digits and _, not "
                                 f"starting with a digit), got {name!r}")
    if isinstance(t_or_snapshot, Table):
        snap = t_or_snapshot.snapshot()
    elif isinstance(t_or_snapshot, Snapshot):
        snap = t_or_snapshot
    else:
        raise InvalidOptionError(f"t_or_snapshot must be a txn.Table or txn.Snapshot, got "
                                 f"{type(t_or_snapshot).__name__}")
    _View(con, name, snap).create()


def _quoted(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _local_path(location: str) -> str | None:
    """The absolute path DuckDB opens a file of the local file system by (and names it by in
    ``filename``; absolute, so the view outlives a change of working folder), None for a file
    elsewhere."""
    if location.startswith("file://"):
        return os.path.abspath(location[len("file://"):])
    return None if "://" in location else os.path.abspath(location)


#: Characters that make a ``read_parquet`` path a glob pattern: such a file is not given to
#: DuckDB by name (it would read other files, or none).
_GLOB = frozenset("*?[{")


def _duckdb_reads(data_type: pa.DataType) -> bool:
    """Whether DuckDB's Parquet reader gives ``data_type``'s values as pyarrow does: not for
    durations (stored as plain INT64) and half floats, or a nested type holding them."""
    if pa.types.is_duration(data_type) or pa.types.is_float16(data_type) \
            or pa.types.is_interval(data_type):
        return False
    return all(_duckdb_reads(child.type) for child in nested_fields(data_type))


def _distinct_names(schema: pa.Schema) -> bool:
    """Whether ``schema``'s names differ other than by case: DuckDB's identifiers ignore it."""
    return len({name.lower() for name in schema.names}) == len(schema.names)


def _same_nested(source: pa.Field, target: pa.Field) -> bool:
    """Whether nested ``source`` reads as ``target`` by name alone: the same type and the same
    ids at every level (a struct field renamed or dropped and re-added needs an id mapping
    a cast cannot express)."""
    if source.type != target.type:
        return False
    return all(field_id(a) == field_id(b) and _same_nested(a, b)
               for a, b in zip(nested_fields(source.type), nested_fields(target.type), strict=True))


def _without_half_floats(data_type: pa.DataType) -> pa.DataType:
    """``data_type`` with float32 for every float16 in it: DuckDB has no half float."""
    if pa.types.is_float16(data_type):
        return pa.float32()
    if pa.types.is_struct(data_type):
        return pa.struct([f.with_type(_without_half_floats(f.type)) for f in nested_fields(data_type)])
    if pa.types.is_large_list(data_type):
        return pa.large_list(data_type.value_field.with_type(_without_half_floats(data_type.value_type)))
    if pa.types.is_list(data_type):
        return pa.list_(data_type.value_field.with_type(_without_half_floats(data_type.value_type)))
    return data_type


class _Stream:
    """The scanner's Arrow stream as DuckDB can take it: half floats widened to float32 (every
    float16 value is exactly a float32). A fresh stream per call, as the scanner's."""

    def __init__(self, scanner: Any) -> None:
        self._scanner = scanner
        self._schema = pa.schema([f.with_type(_without_half_floats(f.type)) for f in scanner.schema])

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        if self._schema == self._scanner.schema:
            return self._scanner.__arrow_c_stream__(requested_schema)
        reader = pa.RecordBatchReader.from_batches(
            self._schema, (batch.cast(self._schema) for batch in self._scanner.to_batches()))
        return reader.__arrow_c_stream__(requested_schema)


class _View:
    """The SQL and the registered objects of one :func:`register` call."""

    def __init__(self, con: Any, name: str, snap: Snapshot) -> None:
        self._con = con
        self._name = name
        self._snap = snap
        self._schema = snap.schema
        # DuckDB's spelling of each column's type: every scan casts to it, so all parts of the
        # view agree (a cast to the type a column has already is dropped by DuckDB's binder).
        types = con.from_arrow(pa.schema([f.with_type(_without_half_floats(f.type))
                                          for f in self._schema]).empty_table()).types
        self._types = {field.name: str(kind) for field, kind in zip(self._schema, types, strict=True)}

    def _object(self, kind: str) -> str:
        # ``kind`` is never a suffix of another kind: two names cannot share an object.
        return f"__metatxn_{self._name}_{kind}"

    def create(self) -> None:
        files = self._snap.file_table(stats=False)
        native = self._native(files)
        selects: list[str] = []
        groups = files.filter(native)
        deleted = groups.filter(pc.greater(groups["deleted_rows"], 0))
        deletes = self._object("deletes")
        rest = self._object("rest")
        self._con.unregister(deletes)
        self._con.unregister(rest)
        if deleted.num_rows:
            self._con.register(deletes, self._deletes(deleted))
        for (schema_id, external), group in self._grouped(groups):
            selects.append(self._select(group, schema_id, external=external,
                                        deletes=deletes if pc.any(pc.greater(
                                            group["deleted_rows"], 0)).as_py() else None))
        others = files.filter(pc.invert(native))
        if others.num_rows or not selects:
            # The scanner hands DuckDB a fresh stream each time it asks (once per query and
            # more): the view can be queried any number of times.
            self._con.register(rest, _Stream(self._snap._scanner(
                None, None, None, paths=others["path"].to_pylist())))
            # All columns as the stream has them, in the schema's order: naming them would
            # resolve names that differ only by case to one column (DuckDB ignores case).
            selects.append(f"SELECT * FROM {_quoted(rest)}")
        self._con.execute(f"CREATE OR REPLACE TEMP VIEW {_quoted(self._name)} AS "
                          + " UNION ALL BY NAME ".join(f"({s})" for s in selects))

    def _native(self, files: pa.Table) -> pa.Array:
        """Which files of the file table ``files`` DuckDB reads itself."""
        keep = []
        partitioned = bool(self._snap.file_reader().partition_by)
        for location, path, file_format, schema_id in zip(
                files["location"].to_pylist(), files["path"].to_pylist(),
                files["format"].to_pylist(), files["schema_id"].to_pylist(), strict=True):
            external = "://" in path
            local = _local_path(location)
            keep.append(local is not None and file_format == "parquet"
                        and not _GLOB.intersection(local)
                        and not (external and partitioned)
                        and self._expressible(schema_id))
        native = pa.array(keep, pa.bool_())
        return pc.and_(native, pc.invert(self._clashing(files.filter(native), files)))

    def _clashing(self, native: pa.Table, files: pa.Table) -> pa.Array:
        """Which rows of ``files`` are external files among ``native`` whose own columns clash
        with the columns the view's scan adds (they may hold columns the table does not):
        DuckDB reads their footers to tell."""
        external = native.filter(pc.match_substring(native["path"], "://"))
        clash: set[str] = set()
        if external.num_rows:
            self._check_external(external)  # a clear error before DuckDB opens them
            paths = {_local_path(loc): loc for loc in external["location"].to_pylist()}
            listed = ", ".join(_literal(p) for p in paths if p is not None)
            found = self._con.execute(
                f"SELECT DISTINCT file_name FROM parquet_schema([{listed}]) "
                f"WHERE lower(name) IN ({_literal(_ROW_NUMBER)}, {_literal(_FILENAME.lower())})"
            ).fetchall()
            clash = {paths[os.path.abspath(name)] for (name,) in found}
        return pc.is_in(files["location"], pa.array(sorted(clash), pa.string()))

    def _written(self, schema_id: int) -> pa.Schema:
        """The schema files of version ``schema_id`` were written with."""
        if schema_id == self._snap.schema_id:
            return self._schema
        return self._snap._versions[schema_id]

    def _expressible(self, schema_id: int) -> bool:
        """Whether files of version ``schema_id`` read as the snapshot's schema by renames and
        casts of whole columns (and read_parquet's row number does not clash with a column)."""
        written = self._written(schema_id)
        if any(f.name.lower() in (_ROW_NUMBER, _FILENAME) for f in written):
            return False
        if not all(_distinct_names(s) and all(_duckdb_reads(f.type) for f in s)
                   for s in (written, self._schema)):
            return False
        if written is self._schema:
            return True
        by_id = {i: f for f in written if (i := field_id(f)) is not None}
        for target in self._schema:
            source = by_id.get(field_id(target) or -1)
            if source is not None and nested_fields(target.type) and not _same_nested(source, target):
                return False
        return True

    def _grouped(self, files: pa.Table) -> Iterator[tuple[tuple[int, bool], pa.Table]]:
        """``files`` by (schema version, external): one ``read_parquet`` each."""
        external = pc.match_substring(files["path"], "://")
        for schema_id in sorted(set(files["schema_id"].to_pylist())):
            of_version = pc.equal(files["schema_id"], schema_id)
            for outside in (False, True):
                group = files.filter(pc.and_(of_version, external if outside else pc.invert(external)))
                if group.num_rows:
                    yield (schema_id, outside), group

    def _deletes(self, files: pa.Table) -> pa.Table:
        """The deleted rows of ``files`` (with deletes), as DuckDB names them in a scan."""
        deletes = self._snap.deletes()
        kept = deletes.filter(pc.is_in(deletes["location"], value_set=files["location"]))
        # Each file's path once, then taken for every deleted row of it.
        locations = pc.unique(kept["location"])
        paths = pa.array([_local_path(loc) for loc in locations.to_pylist()], pa.string())
        return pa.table({
            _FILENAME: paths.take(pc.index_in(kept["location"], value_set=locations)),
            _ROW_NUMBER: kept["position"],
        })

    def _check_external(self, files: pa.Table) -> None:
        """External files DuckDB reads must still be what ADD SEGMENT recorded: their deleted
        positions count rows of that file (metatxn's own reads check at every read)."""
        locations = set(files.filter(pc.match_substring(files["path"], "://"))["location"].to_pylist())
        if not locations:
            return
        reader = self._snap.file_reader()
        for file in self._snap.files():
            if file.path in locations:
                reader.check(file)

    def _select(self, files: pa.Table, schema_id: int, *, external: bool,
                deletes: str | None) -> str:
        written = self._written(schema_id)
        same = written is self._schema
        by_id = {i: f for f in written if (i := field_id(f)) is not None}
        columns = []
        for target in self._schema:
            source = target if same else by_id.get(field_id(target) or -1)
            kind = self._types[target.name]
            value = "NULL" if source is None else f"p.{_quoted(source.name)}"
            columns.append(f"CAST({value} AS {kind}) AS {_quoted(target.name)}")
        paths = ", ".join(_literal(_local_path(loc) or loc) for loc in files["location"].to_pylist())
        # External files may hold other columns besides the table's, and other types than the
        # table's: union_by_name makes one schema of them all (reading every footer at bind).
        # Folder names are not values: a partition's are the file's own columns (the table
        # writes them), and an external folder named "k=1" says nothing about column k.
        options = f"filename={_literal(_FILENAME)}, file_row_number=true, " \
            "hive_partitioning=false" + (", union_by_name=true" if external else "")
        sql = f"SELECT {', '.join(columns)} FROM read_parquet([{paths}], {options}) AS p"
        if deletes is not None:
            sql += (f" ANTI JOIN {_quoted(deletes)} AS d ON p.{_FILENAME} = d.{_FILENAME}"
                    f" AND p.{_ROW_NUMBER} = d.{_ROW_NUMBER}")
        return sql


def __dir__() -> list[str]:
    return list(__all__)
