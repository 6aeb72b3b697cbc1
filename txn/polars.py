"""metatxn on Polars: a table's snapshot as a ``polars.LazyFrame``.

``txn.polars.scan(t_or_uri)`` pins a snapshot and plans its read in two parts
(design/open-reads.md, section 4):

* the table's own Parquet files, when they are local files, are read by Polars' own
  ``scan_parquet`` (parallel decoding, row-group pruning by the whole predicate), one scan per
  schema version (an older version's columns selected by column id, renamed and widened), their
  deleted rows dropped by a row index over the files;
* every other file (external segments, versions Polars cannot cast as pyarrow does, tables
  on other storage) comes from the snapshot's scanner through Polars' IO-plugin interface
  (``polars.io.plugins.register_io_source``): Polars hands it the columns, predicate, row limit
  and batch size of the query, so only those columns are decoded and files and row groups are
  pruned by their column ranges.

The IO plugin's predicate is a Polars expression. What of it translates to a pyarrow expression
(comparisons of a column with a literal, ``is_in``, ``is_between``, ``is_null``/``is_not_null``,
boolean columns, and/or/not over those) goes to the scanner for pruning; the rest only weakens
pruning. Every batch is then filtered by the whole Polars predicate, so the answer is Polars'
own whatever part was translated (the translation keeps to what both agree on: Polars orders
NaN above every float, pyarrow makes comparisons with NaN false).

Not guaranteed: the files Polars reads itself are not checked as metatxn's reader checks each
file, so a data file gone or damaged after :func:`scan` (a clean that expired the pinned
snapshot, another table's file under its name) fails ``collect()`` with Polars' own error
(``ComputeError``, ``SchemaError``), not ``SnapshotExpiredError`` or ``CorruptMetadataError``.

``import txn.polars`` works without Polars; :func:`scan` needs the extra
(``pip install 'metatxn[polars]'``).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

import txn
from metatxn.indexes import field_id

if TYPE_CHECKING:
    import polars as pl

__all__ = ["scan"]


def __dir__() -> list[str]:
    return list(__all__)


def _polars() -> Any:
    try:
        import polars
    except ImportError as exc:
        raise txn.InvalidOptionError(
            "txn.polars needs the polars package; install the extra: pip install 'metatxn[polars]'"
        ) from exc
    return polars


def scan(t_or_uri: txn.Table | txn.Snapshot | str | os.PathLike[str],
         as_of: str | datetime | None = None) -> pl.LazyFrame:
    """The table as a ``polars.LazyFrame``, with projection, predicate and row-limit pushdown.

    ``t_or_uri``: a :class:`txn.Table`, a URI or path (opened with :func:`txn.open_table`; a
    table that needs storage options is opened by the caller and passed as a Table), or a
    :class:`txn.Snapshot` (then ``as_of`` must be None). The snapshot is resolved now, as of
    ``as_of`` (None: the latest; an instant time, a ``datetime``, or an ISO-8601 date or
    timestamp string, UTC unless it carries an offset: see :meth:`txn.Table.snapshot`), and
    every ``collect()`` of the frame reads that snapshot: a later commit does not change it
    (scan again to see it). Rows come in no particular order, as from ``pl.scan_parquet`` of many
    files.

    Raises:
        TableNotFoundError: there is no table at the URI.
        InvalidOptionError: Polars is not installed, or ``as_of`` is given with a Snapshot.
    """
    pl = _polars()
    snapshot = _snapshot(t_or_uri, as_of)
    schema = pl.from_arrow(snapshot.schema.empty_table()).schema
    native, rest = _native(pl, snapshot)
    frames = [native] if native is not None else []
    if native is None or rest:
        from polars.io.plugins import register_io_source

        frames.append(register_io_source(_Source(snapshot, rest), schema=schema))
    return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")


def _snapshot(t_or_uri: object, as_of: str | datetime | None) -> txn.Snapshot:
    if isinstance(t_or_uri, txn.Snapshot):
        if as_of is not None:
            raise txn.InvalidOptionError(
                "as_of applies to a table or a URI; a Snapshot is already one instant "
                "(pass the Table, or table.snapshot(as_of))")
        return t_or_uri
    if isinstance(t_or_uri, txn.Table):
        return t_or_uri.snapshot(as_of)
    if isinstance(t_or_uri, (str, os.PathLike)):
        return txn.open_table(t_or_uri).snapshot(as_of)
    raise txn.InvalidOptionError(
        f"txn.polars.scan takes a txn.Table, a txn.Snapshot or a table URI, "
        f"got {type(t_or_uri).__name__}")


# --- the native path: Polars' own Parquet scan of the table's local files ---------------------

#: Column types Polars reads from Parquet exactly as ``pl.from_arrow`` converts them; a table
#: with any other type is read through the IO plugin only.
_NATIVE_TYPES: tuple[Callable[[pa.DataType], bool], ...] = (
    pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean, pa.types.is_string,
    pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary, pa.types.is_date32,
    pa.types.is_timestamp, pa.types.is_decimal128,
)


def _native(polars: Any, snapshot: txn.Snapshot) -> tuple[pl.LazyFrame | None, list[str] | None]:
    """Polars' own scan of the files it can read itself, and the file table paths of the rest
    (None: all files, nothing read natively).

    Polars' Parquet reader decodes in parallel and prunes row groups and pages by the whole
    predicate, which the IO plugin cannot match (design/open-reads.md, section 4). It reads the
    table's own Parquet files when they are local files, one scan per schema version (an older
    version's columns selected by column id, renamed and widened, an added column as nulls);
    their deleted rows are dropped by a row index over the files (each file's offset is the
    running sum of the file table's ``rows``: no file is opened to plan), which keeps row-group
    pruning. External files, versions whose columns Polars cannot read as the snapshot's, and
    other storage go through the plugin."""
    if not _readable(snapshot.schema):
        return None, None
    files = snapshot.file_table(stats=False)
    local = pa.array([_local_path(location) is not None for location in files["location"].to_pylist()],
                     pa.bool_())
    own = pc.and_(pc.and_(pc.invert(pc.match_substring(files["path"], "://")), local),
                  pc.equal(files["format"], "parquet"))
    frames: list[pl.LazyFrame] = []
    taken: set[str] = set()
    deletes: list[pa.Table] = []  # read once, for the first version with deletes
    for schema_id in sorted(set(files.filter(own)["schema_id"].to_pylist())):
        written = snapshot.schema if schema_id == snapshot.schema_id else \
            snapshot._versions.get(schema_id)
        projection = _projection(polars, written, snapshot.schema) if written is not None \
            else None
        if written is None or projection is None:
            continue
        group = files.filter(pc.and_(own, pc.equal(files["schema_id"], schema_id)))
        # Paths are names, not patterns (a table folder may be called "t[1]"), and folder
        # names are not values (a partition's are in the files, which the table wrote).
        options = {"schema": polars.from_arrow(written.empty_table()).schema,
                   "hive_partitioning": False, "glob": False}
        deleted = pc.greater(group["deleted_rows"], 0)
        clean, with_deletes = group.filter(pc.invert(deleted)), group.filter(deleted)
        if (pc.sum(with_deletes["rows"]).as_py() or 0) >= 2 ** 32 - 1:
            with_deletes = with_deletes.slice(0, 0)  # beyond a 32-bit row index: the plugin's
        parts = []
        if clean.num_rows:
            parts.append(polars.scan_parquet(_paths_of(clean), **options))
        if with_deletes.num_rows:
            if not deletes:
                deletes.append(snapshot.deletes())
            parts.append(_without_deleted(polars, snapshot, with_deletes, deletes[0], options))
        frames.extend(part if projection == [] else part.select(projection) for part in parts)
        taken.update(clean["path"].to_pylist(), with_deletes["path"].to_pylist())
    if not frames:
        return None, None
    rest = [path for path in files["path"].to_pylist() if path not in taken]
    return (frames[0] if len(frames) == 1 else polars.concat(frames, how="vertical")), rest


def _readable(schema: pa.Schema) -> bool:
    """Whether Polars reads every column of ``schema`` from Parquet as ``pl.from_arrow``
    converts it."""
    return all(any(kind(f.type) for kind in _NATIVE_TYPES) for f in schema)


#: Widenings Polars' cast makes exactly as pyarrow's (integers, floats, decimal precision); a
#: version with another (a date widened to a timestamp) is read by the plugin.
_CASTS: tuple[Callable[[pa.DataType], bool], ...] = (
    pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal128,
)


def _projection(polars: Any, written: pa.Schema, schema: pa.Schema) -> list[pl.Expr] | None:
    """How a file written with ``written`` reads as ``schema``, matched by column id: ``[]``
    when as it is, select expressions otherwise, None when Polars cannot (a column type it
    does not read natively, a column without an id, another kind of type change)."""
    if written.equals(schema, check_metadata=True):
        return []
    if not _readable(written):
        return None
    by_id = {field_id(f): f for f in written}
    if None in by_id or any(field_id(f) is None for f in schema):
        return None
    types = polars.from_arrow(schema.empty_table()).schema
    projection = []
    for field in schema:
        old = by_id.get(field_id(field))
        if old is None:
            projection.append(polars.lit(None, dtype=types[field.name]).alias(field.name))
            continue
        if old.type != field.type and not any(k(old.type) and k(field.type) for k in _CASTS):
            return None
        projection.append(polars.col(old.name).cast(types[field.name]).alias(field.name))
    return projection


def _without_deleted(polars: Any, snapshot: txn.Snapshot, files: pa.Table, deletes: pa.Table,
                     options: dict[str, Any]) -> pl.LazyFrame:
    """``scan_parquet`` of ``files`` (a file table) less the rows of ``deletes`` (the
    snapshot's ``deletes()``) in them."""
    index = "__metatxn_row"
    while index in snapshot.schema.names or index in options["schema"]:
        index += "_"
    rows = files["rows"].to_numpy()
    offsets = dict(zip(files["path"].to_pylist(), np.cumsum(rows) - rows, strict=True))
    deletes = deletes.filter(pc.is_in(deletes["path"], files["path"]))
    starts = np.array([offsets[p] for p in deletes["path"].to_pylist()], dtype=np.int64)
    dropped = polars.Series(starts + deletes["position"].to_numpy(), dtype=polars.get_index_type())
    frame: pl.LazyFrame = (polars.scan_parquet(_paths_of(files), row_index_name=index, **options)
                           .filter(~polars.col(index).is_in(dropped.implode()))
                           .drop(index))
    return frame


def _local_path(location: str) -> str | None:
    """The absolute local path of a file location, or None for another storage's."""
    if location.startswith("file://"):
        return location[len("file://"):]
    return None if "://" in location else os.path.abspath(location)


def _paths_of(files: pa.Table) -> list[str]:
    return [str(_local_path(location)) for location in files["location"].to_pylist()]


# --- the IO plugin: the snapshot's scanner ----------------------------------------------------


class _Source:
    """The IO source Polars calls on each ``collect()``: the scanner of one pinned snapshot,
    over the files ``paths`` (file table keys; None: all)."""

    def __init__(self, snapshot: txn.Snapshot, paths: list[str] | None) -> None:
        self._snapshot = snapshot
        self._paths = paths

    def __call__(self, with_columns: list[str] | None, predicate: pl.Expr | None,
                 n_rows: int | None, batch_size: int | None) -> Iterator[pl.DataFrame]:
        pl = _polars()
        batches: Iterator[pa.RecordBatch]
        if n_rows is not None:
            # n_rows counts rows before the predicate (Polars passes both for head(n).filter(p)),
            # so the scanner gets no filter; head() stops reading once it has the rows.
            head = self._scanner(with_columns, None, batch_size).head(max(n_rows, 0))
            batches = iter(head.to_batches())
        else:
            filter = (_arrow_filter(predicate, self._snapshot.schema)
                      if predicate is not None else None)
            batches = self._scanner(with_columns, filter, batch_size).to_batches()
        for batch in batches:
            frame = pl.from_arrow(batch, rechunk=False)
            if predicate is not None:
                frame = frame.filter(predicate)
            if frame.height:
                yield frame

    def _scanner(self, columns: list[str] | None, filter: ds.Expression | None,
                 batch_size: int | None) -> txn.Scanner:
        return self._snapshot._scanner(columns, filter, batch_size, paths=self._paths)


# --- Polars predicate -> pyarrow expression -------------------------------------------------

_COMPARE = {"Eq": "equal", "NotEq": "not_equal", "Lt": "less", "LtEq": "less_equal",
            "Gt": "greater", "GtEq": "greater_equal"}
_FLIPPED = {"Eq": "Eq", "NotEq": "NotEq", "Lt": "Gt", "LtEq": "GtEq", "Gt": "Lt", "GtEq": "LtEq"}
#: On floats Polars orders NaN above every number (NaN > 1 is true, NaN == NaN too), pyarrow
#: makes every comparison with NaN false: these are written as the negation of the comparison
#: that is false for NaN in both, which keeps them exact (a null stays null either way).
_NEGATED = {"Gt": "less_equal", "GtEq": "less", "NotEq": "equal"}
_BETWEEN = {"Both": ("GtEq", "LtEq"), "Left": ("GtEq", "Lt"), "Right": ("Gt", "LtEq"),
            "None": ("Gt", "Lt")}


class _Translated(NamedTuple):
    """A pyarrow expression true at least wherever the Polars one is (None: nothing known);
    ``exact``: true, false and null exactly where the Polars one is (what a negation needs)."""

    expression: ds.Expression | None
    exact: bool


_UNKNOWN = _Translated(None, False)


def _arrow_filter(predicate: pl.Expr, schema: pa.Schema) -> ds.Expression | None:
    """A pyarrow filter keeping every row ``predicate`` keeps (more is allowed: the caller
    re-applies ``predicate``), or None when nothing of it translates."""
    try:
        tree = json.loads(predicate.meta.serialize(format="json"))
        translated = _Walker(schema).node(tree).expression
        if translated is not None:
            schema.empty_table().filter(translated)  # binds: a type mix pyarrow refuses
        return translated
    except Exception:  # any shape this walker does not know only costs pruning
        return None


class _Walker:
    """Reads the JSON form of a Polars expression (``Expr.meta.serialize(format="json")``): an
    enum tree ``{"BinaryExpr": {...}}``, ``{"Function": {...}}``, ``{"Column": name}``,
    ``{"Literal": ...}``. Literals are evaluated by Polars itself (deserialised and selected),
    so their encoding is never read here."""

    def __init__(self, schema: pa.Schema) -> None:
        self._schema = schema

    def node(self, tree: Any) -> _Translated:
        if not isinstance(tree, dict) or len(tree) != 1:
            return _UNKNOWN
        [(kind, body)] = tree.items()
        if kind == "BinaryExpr":
            return self._binary(body)
        if kind == "Function":
            return self._function(body)
        if kind == "Column":
            return self._boolean_column(body)
        return _UNKNOWN

    def _binary(self, body: dict[str, Any]) -> _Translated:
        op, left, right = body["op"], body["left"], body["right"]
        if op in ("And", "LogicalAnd"):
            return _and([self.node(left), self.node(right)])
        if op in ("Or", "LogicalOr"):
            return _or([self.node(left), self.node(right)])
        if op in _COMPARE:
            if _column(left) is None and _column(right) is not None:
                left, right, op = right, left, _FLIPPED[op]
            return self._compare(_column(left), op, right)
        return _UNKNOWN

    def _function(self, body: dict[str, Any]) -> _Translated:
        function, inputs = body["function"], body["input"]
        boolean = function.get("Boolean") if isinstance(function, dict) else None
        if boolean == "Not" and len(inputs) == 1:
            inner = self.node(inputs[0])
            if inner.exact and inner.expression is not None:
                return _Translated(~inner.expression, True)
            return _UNKNOWN
        if boolean == "AllHorizontal":
            return _and([self.node(i) for i in inputs])
        if boolean == "AnyHorizontal":
            return _or([self.node(i) for i in inputs])
        if boolean in ("IsNull", "IsNotNull") and len(inputs) == 1:
            name = _column(inputs[0])
            if name is None or name not in self._schema.names:
                return _UNKNOWN
            field = pc.field(name)
            return _Translated(field.is_null() if boolean == "IsNull" else field.is_valid(), True)
        if isinstance(boolean, dict) and "IsBetween" in boolean and len(inputs) == 3:
            low, high = _BETWEEN.get(boolean["IsBetween"].get("closed"), (None, None))
            name = _column(inputs[0])
            if low is None or high is None or name is None:
                return _UNKNOWN
            return _and([self._compare(name, low, inputs[1]), self._compare(name, high, inputs[2])])
        if isinstance(boolean, dict) and "IsIn" in boolean and len(inputs) == 2:
            return self._is_in(_column(inputs[0]), inputs[1], boolean["IsIn"])
        return _UNKNOWN

    def _boolean_column(self, name: Any) -> _Translated:
        if name in self._schema.names and pa.types.is_boolean(self._schema.field(name).type):
            return _Translated(pc.field(name), True)
        return _UNKNOWN

    def _literal(self, name: str, tree: Any, *, many: bool = False) -> pa.Array | None:
        """The literal ``tree`` as Arrow values (a list literal's items with ``many``), or None
        where it is not a literal, or not of the kind of column ``name`` (pyarrow and Polars
        cast mixed kinds differently, e.g. a float bound on a decimal column)."""
        if not isinstance(tree, dict) or set(tree) != {"Literal"}:
            return None
        pl = _polars()
        expression = pl.Expr.deserialize(io.StringIO(json.dumps(tree)), format="json")
        series = pl.select(expression).to_series()
        if many:
            if series.len() != 1 or not isinstance(series.dtype, pl.List):
                return None
            series = series.explode()
        elif series.len() != 1:
            return None
        values = series.to_arrow()
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        column = self._schema.field(name).type
        if not _same_kind(column, values.type):
            return None
        if pa.types.is_decimal(column) and pa.types.is_integer(values.type):
            # pyarrow compares a decimal with an integer only as decimals of one type (and
            # casts an integer type to a decimal only where all its values would fit).
            try:
                values = pa.array([None if v is None else Decimal(v) for v in values.to_pylist()],
                                  column)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        return values

    def _bound(self, translated: _Translated) -> _Translated:
        """``translated`` if pyarrow can apply it to the table's columns, else nothing known."""
        try:
            self._schema.empty_table().filter(translated.expression)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            return _UNKNOWN
        return translated

    def _compare(self, name: str | None, op: str, literal: Any) -> _Translated:
        if name is None or name not in self._schema.names:
            return _UNKNOWN
        values = self._literal(name, literal)
        if values is None or values.null_count:
            return _UNKNOWN
        value = values[0]
        field = pc.field(name)
        if pa.types.is_floating(self._schema.field(name).type):
            if pc.is_nan(value).as_py():
                return _UNKNOWN
            if op in _NEGATED:
                return self._bound(_Translated(~_call(_NEGATED[op], field, value), True))
        return self._bound(_Translated(_call(_COMPARE[op], field, value), True))

    def _is_in(self, name: str | None, literal: Any, options: dict[str, Any]) -> _Translated:
        if name is None or name not in self._schema.names:
            return _UNKNOWN
        values = self._literal(name, literal, many=True)
        if values is None:
            return _UNKNOWN
        field = pc.field(name)
        present = values.drop_null()
        translated = pc.is_in(field, value_set=present, skip_nulls=True)
        # A superset only: a null row is null in Polars (false here), and nulls_equal keeps
        # null rows where the list holds a null; NaN rows are kept for floats.
        if values.null_count and options.get("nulls_equal", True):
            translated = translated | field.is_null()
        if pa.types.is_floating(self._schema.field(name).type):
            translated = translated | pc.is_nan(field)
        return self._bound(_Translated(translated, False))


def _call(function: str, field: ds.Expression, value: pa.Scalar) -> ds.Expression:
    operator: Callable[[Any, Any], ds.Expression] = getattr(pc, function)
    return operator(field, value)


def _column(tree: Any) -> str | None:
    if isinstance(tree, dict) and set(tree) == {"Column"} and isinstance(tree["Column"], str):
        return tree["Column"]
    return None


def _and(parts: list[_Translated]) -> _Translated:
    known = [p.expression for p in parts if p.expression is not None]
    if not known:
        return _UNKNOWN
    expression = known[0]
    for other in known[1:]:
        expression = expression & other
    return _Translated(expression, all(p.exact for p in parts))


def _or(parts: list[_Translated]) -> _Translated:
    known = [p.expression for p in parts if p.expression is not None]
    if not parts or len(known) < len(parts):
        return _UNKNOWN
    expression = known[0]
    for other in known[1:]:
        expression = expression | other
    return _Translated(expression, all(p.exact for p in parts))


def _same_kind(column: pa.DataType, literal: pa.DataType) -> bool:
    """Whether a literal of type ``literal`` compares with a column of type ``column`` the same
    way in Polars and pyarrow: the same family of types, or an integer against any number."""
    if pa.types.is_integer(literal):
        return bool(pa.types.is_integer(column) or pa.types.is_floating(column)
                    or pa.types.is_decimal(column))
    families: list[Callable[[pa.DataType], bool]] = [
        pa.types.is_floating, pa.types.is_decimal, pa.types.is_boolean, pa.types.is_date,
        pa.types.is_timestamp, pa.types.is_time, pa.types.is_duration,
        lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
        lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t),
    ]
    if pa.types.is_timestamp(column) and pa.types.is_timestamp(literal):
        return bool(column.tz == literal.tz)
    return any(family(column) and family(literal) for family in families)
