"""MERGE INTO a metatxn table: Spark evaluates every expression, metatxn commits once.

The statement is read by :mod:`._merge_syntax`. Planned on the latest snapshot:

1. the snapshot's live rows with their data file and position (:func:`._positions.located_rows`)
   become a temporary view under the target's alias; the source (a table of any catalog, a
   metatxn table read at its latest snapshot, or a query) gets a marker column, so that a
   joined row says whether it has a target row, a source row or both;
2. Spark runs one query: the two joined on the ON condition (inner, left, right or full outer,
   as the clause kinds need), and for every joined row the first ``WHEN`` clause, in the
   statement's order, whose kind and condition hold (``CASE WHEN``: a NULL condition is not a
   match, as in Spark); each writing clause's new row is computed only for the rows that chose
   it (so an expression is never evaluated on a row its clause does not take). Rows that chose
   no clause are dropped and the rest pinned (``localCheckpoint``): what is counted is what is
   written;
3. checks, before anything begins: a target row that two source rows match with a MATCHED
   clause choosing it is refused (``MergeCardinalityError``; as Spark and Delta, not when the
   only MATCHED clause is an unconditional DELETE); values that do not fit their columns
   (``_assign``), NULL in a column that is not nullable, and on a keyed table NULL or repeated
   keys among the new rows, an INSERT of a key the snapshot holds (``DuplicateKeyError``, as a
   keyed append) and ``UPDATE SET *`` changing a row's key;
4. one commit: the positions of every target row an UPDATE or DELETE clause chose become delete
   deltas, and the UPDATE and INSERT rows a new segment written by the executors (the write
   job of ``txn.spark.write``); on a keyed table the deleted rows' keys are tombstoned in the
   record index. Through ``Table.begin_write("merge" | "delete", read_instant=snapshot)``, so
   it conflicts, and is planned again after a table service overtook it, as UPDATE does.

The answer is Delta's: ``num_affected_rows, num_updated_rows, num_deleted_rows,
num_inserted_rows``.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from ... import (
    DataFile,
    DuplicateKeyError,
    InvalidOptionError,
    KeyProbe,
    MergeCardinalityError,
    SchemaMismatchError,
    Snapshot,
    SnapshotExpiredError,
    Table,
    TableNotFoundError,
    TxnError,
    open_table,
)
from .._types import spark_schema
from .._write import REPLANS, run_job
from ._assign import converted
from ._catalog import DEFAULT_DATABASE, Catalog, TableName
from ._merge_syntax import FORM, MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE, Clause, Merge, read, target_name
from ._parse import Token, refused, spark_message
from ._positions import FILE, POSITION, located_rows
from ._select import fresh_views
from ._tree import parse

CLAUSE = "__metatxn_clause"
_IN_SOURCE = "__metatxn_in_source"
_RESULT = ("num_affected_rows", "num_updated_rows", "num_deleted_rows", "num_inserted_rows")


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _value(index: int, column: int) -> str:
    return f"__metatxn_v{index}_{column}"


@dataclass(frozen=True)
class _Plan:
    """What the statement does on one snapshot."""

    deletes: pa.Table  #: target rows an UPDATE or DELETE clause chose (file, position)
    retire: pa.Table  #: those a DELETE clause chose: keys that leave the table
    rows: Any  #: the new rows (a DataFrame), or None
    counts: tuple[int, int, int]  #: updated, deleted, inserted
    #: The target's rows were found by the source's record keys (only the files holding them
    #: read), not by a scan: concurrent writes conflict by key and file (``read_by_keys``).
    by_keys: bool = False


def _row_values(merge: Merge, clause: Clause, columns: dict[str, str], names: list[str],
                keys: list[str], source_columns: set[str], statement: str) -> dict[str, str]:
    """Table column -> the expression it takes in ``clause``'s new row."""
    target, source = _quoted(merge.target_alias), _quoted(merge.source_alias)
    if clause.star:
        missing = [c for c in names if c.lower() not in source_columns]
        if missing:
            verb = "UPDATE SET *" if clause.action == "UPDATE" else "INSERT *"
            raise refused(statement, f"{verb}: the source has no column(s) {missing} of the target; its "
                                     f"columns are {sorted(source_columns)}", FORM)
        return {c: f"{source}.{_quoted(c)}" for c in names}
    given: dict[str, str] = {}
    if clause.action == "INSERT" and not clause.listed:
        if len(clause.assignments) != len(names):
            raise refused(statement, f"INSERT VALUES gives {len(clause.assignments)} value(s) but the "
                                     f"table has {len(names)} column(s) {names}", FORM)
        given = {c: text for c, (_, text) in zip(names, clause.assignments, strict=True)}
    else:
        for column, text in clause.assignments:
            name = columns.get(column.lower())
            if name is None:
                raise refused(statement, f"unknown column {column!r} in WHEN {clause.kind} THEN "
                                         f"{clause.action}; the table's columns are {names}", FORM)
            if name in given:
                raise refused(statement, f"column {name!r} is given twice in one clause", FORM)
            given[name] = text
    if clause.action == "UPDATE":
        changed = [c for c in given if c in keys]
        if changed:
            raise refused(statement, f"record key column(s) {changed} cannot be updated; delete the rows "
                                     "and insert them under their new key", FORM)
        return {c: given.get(c, f"{target}.{_quoted(c)}") for c in names}
    return {c: given.get(c, "NULL") for c in names}


def _kind_test(kind: str, target: str, source: str) -> str:
    position, marker = f"{target}.{_quoted(POSITION)}", f"{source}.{_quoted(_IN_SOURCE)}"
    return {MATCHED: f"{position} IS NOT NULL AND {marker} IS NOT NULL", NOT_MATCHED: f"{position} IS NULL",
            NOT_MATCHED_BY_SOURCE: f"{marker} IS NULL"}[kind]


def _join(kinds: set[str]) -> str:
    outer_target, outer_source = NOT_MATCHED_BY_SOURCE in kinds, NOT_MATCHED in kinds
    if outer_target and outer_source:
        return "FULL OUTER JOIN"
    return "LEFT OUTER JOIN" if outer_target else "RIGHT OUTER JOIN" if outer_source else "JOIN"


def _source_table(merge: Merge) -> str:
    """The source as a relation, aliased as the statement aliases it."""
    relation = f"({merge.source})" if merge.source_is_query else merge.source
    return f"{relation} AS {_quoted(merge.source_alias)}"


def _side(merge: Merge, kind: str, relation: str, alias: str, values: dict[int, dict[str, str]],
          names: list[str], marker: str = "") -> str:
    """One side's rows (the source for NOT MATCHED clauses, the target for NOT MATCHED BY
    SOURCE), with the first of those clauses whose condition holds (:func:`_choice`) and its new
    row, evaluated on that side alone: Spark resolves these clauses against one side only, so an
    unqualified column is that side's, and the other side's columns are unknown."""
    quoted = _quoted(alias)
    columns = [f"{quoted}.*", *([f"TRUE AS {_quoted(marker)}"] if marker else [])]
    clauses = [(i, c) for i, c in enumerate(merge.clauses) if c.kind == kind]
    if clauses:
        whens = " ".join(f"WHEN ({c.condition or 'TRUE'}) THEN {i}" for i, c in clauses)
        choice = f"CASE {whens} END"
        columns.append(f"{choice} AS {_quoted(_choice(kind))}")
        columns += [f"CASE WHEN {choice} = {i} THEN ({values[i][c]}) END AS {_quoted(_value(i, j))}"
                    for i, _ in clauses if i in values for j, c in enumerate(names)]
    return f"(SELECT {', '.join(columns)} FROM {relation}) AS {quoted}"


def _choice(kind: str) -> str:
    return f"__metatxn_choice_{'source' if kind == NOT_MATCHED else 'target'}"


def _analysed(spark: Any, catalog: Catalog, query: str, statement: str, why: str) -> Any:
    """``spark.sql(query)`` (metatxn tables it names read at their latest snapshot); Spark's
    analysis errors refuse the statement, saying ``why`` the query was run."""
    from pyspark.errors import AnalysisException

    try:
        with fresh_views(spark, catalog, query) as rewritten:
            return spark.sql(rewritten)
    except AnalysisException as exc:
        raise refused(statement, f"{why}: {spark_message(exc)}", FORM) from None


@contextmanager
def _target_view(spark: Any, snapshot: Snapshot, keep: Callable[[DataFile], bool] | None) -> Iterator[str]:
    view = f"metatxn_merge_target_{secrets.token_hex(4)}"
    located_rows(spark, snapshot, None, keep).createOrReplaceTempView(view)
    try:
        yield view
    finally:
        spark.catalog.dropTempView(view)


def _sides(merge: Merge, view: str, values: dict[int, dict[str, str]], names: list[str]) -> tuple[str, str]:
    """The target's and the source's relations of the join."""
    target = _side(merge, NOT_MATCHED_BY_SOURCE, f"{_quoted(view)} AS {_quoted(merge.target_alias)}",
                   merge.target_alias, values, names)
    source = _side(merge, NOT_MATCHED, _source_table(merge), merge.source_alias, values, names,
                   marker=_IN_SOURCE)
    return target, source


def _check_scopes(spark: Any, catalog: Catalog, merge: Merge, sides: tuple[str, str], statement: str) -> None:
    """Each side with its own clauses analysed alone first, so that a NOT MATCHED clause using
    the target's columns (or a NOT MATCHED BY SOURCE clause the source's) is refused saying so."""
    for kind, relation, scope in (
            (NOT_MATCHED_BY_SOURCE, sides[0], "the target's columns only (there is no source row)"),
            (NOT_MATCHED, sides[1], "the source's columns only (there is no target row)")):
        if any(c.kind == kind for c in merge.clauses):
            _analysed(spark, catalog, f"SELECT * FROM {relation}", statement,
                      f"WHEN {kind} clauses may use {scope}")


def _joined_query(merge: Merge, sides: tuple[str, str], values: dict[int, dict[str, str]],
                  changes: dict[int, str], names: list[str]) -> str:
    """The query of every joined row a clause chooses: :data:`CLAUSE` (the clause's index), each
    writing clause's new row (``_value(i, j)``, NULL where another clause was chosen), and the
    target row's file and position."""
    target, source = _quoted(merge.target_alias), _quoted(merge.source_alias)
    kinds = {c.kind for c in merge.clauses}
    matched = _kind_test(MATCHED, target, source)
    choices = " ".join(f"WHEN {matched}{f' AND ({c.condition})' if c.condition else ''} THEN {i}"
                       for i, c in enumerate(merge.clauses) if c.kind == MATCHED)
    if NOT_MATCHED in kinds:
        choices += (f" WHEN {_kind_test(NOT_MATCHED, target, source)} "
                    f"THEN {source}.{_quoted(_choice(NOT_MATCHED))}")
    if NOT_MATCHED_BY_SOURCE in kinds:
        choices += (f" WHEN {_kind_test(NOT_MATCHED_BY_SOURCE, target, source)} "
                    f"THEN {target}.{_quoted(_choice(NOT_MATCHED_BY_SOURCE))}")
    chosen = f"CASE {choices} END"
    projection = [f"{chosen} AS {_quoted(CLAUSE)}",
                  f"{target}.{_quoted(FILE)} AS {_quoted(FILE)}",
                  f"{target}.{_quoted(POSITION)} AS {_quoted(POSITION)}"]
    for i, row in values.items():
        kind = merge.clauses[i].kind
        side = source if kind == NOT_MATCHED else target
        projection += [f"CASE WHEN {chosen} = {i} THEN ({row[c]}) END AS {_quoted(_value(i, j))}"
                       if kind == MATCHED else f"{side}.{_quoted(_value(i, j))} AS {_quoted(_value(i, j))}"
                       for j, c in enumerate(names)]
    projection += [f"CASE WHEN {chosen} = {i} THEN ({test}) END AS {_quoted(_change(i))}"
                   for i, test in changes.items()]
    inner = f"SELECT {', '.join(projection)} FROM {sides[0]} {_join(kinds)} {sides[1]} ON {merge.on}"
    return f"SELECT * FROM ({inner}) AS `__metatxn_joined` WHERE {_quoted(CLAUSE)} IS NOT NULL"


def _refuse_repeated_matches(changed: pa.Table, merge: Merge, name: TableName) -> None:
    """MergeCardinalityError if a MATCHED clause was chosen for one target row more than once
    (``changed``: the clause, file and position of every target row a clause changes)."""
    matched = [i for i, c in enumerate(merge.clauses) if c.kind == MATCHED]
    only = [merge.clauses[i] for i in matched]
    if not matched or (len(only) == 1 and only[0].action == "DELETE" and only[0].condition is None):
        return  # deleting a row twice deletes it once (Spark and Delta allow it too)
    rows = changed.filter(pc.is_in(changed[CLAUSE], pa.array(matched, changed.schema.field(CLAUSE).type)))
    counted = rows.group_by([FILE, POSITION]).aggregate([([], "count_all")])
    most = pc.max(counted["count_all"]).as_py() if counted.num_rows else 0
    if most > 1:
        raise MergeCardinalityError(
            f"MERGE INTO {name}: {most} rows of the source match one row of the target, and a WHEN "
            "MATCHED clause would change it (Spark: MERGE_CARDINALITY_VIOLATION; Delta: multiple "
            "source rows matched and attempted to modify the same target row); nothing was "
            "written\nHelp: make the source hold one row per target row (aggregate or de-duplicate "
            "it), or narrow the ON condition")


def _located(changed: pa.Table, indices: list[int]) -> pa.Table:
    """The distinct (file, position) of the rows the clauses ``indices`` chose."""
    rows = changed.filter(pc.is_in(changed[CLAUSE], pa.array(indices, changed.schema.field(CLAUSE).type)))
    rows = rows.group_by([FILE, POSITION]).aggregate([])
    return rows.select([FILE, POSITION]).rename_columns(["file", "position"])


def _check_new_keys(rows: Any, inserted: Any | None, keys: list[str], probe: KeyProbe,
                    name: TableName) -> None:
    """Keys of the new rows: set, once each, and an INSERT's not in the snapshot (a keyed
    append's rule)."""
    if rows.where(" OR ".join(f"{_quoted(c)} IS NULL" for c in keys)).limit(1).count():
        raise SchemaMismatchError(f"MERGE INTO {name}: a new row holds NULL in record key column(s) "
                                  f"{keys}; every row of a keyed table needs a key; nothing was written")
    repeated = rows.groupBy(*keys).count().where("count > 1").limit(3).collect()
    if repeated:
        shown = [tuple(r[c] for c in keys) if len(keys) > 1 else r[keys[0]] for r in repeated]
        raise DuplicateKeyError(f"MERGE INTO {name}: record key {keys} repeats among the rows it "
                                f"writes: {shown}; nothing was written\nHelp: make the source hold one "
                                "row per key")
    if inserted is None:
        return
    types = {f.name: f.dataType.simpleString() for f in inserted.schema.fields}
    schema = ", ".join([*(f"{_quoted(c)} {types[c]}" for c in keys), "file string", "position long"])
    found = inserted.select(*keys).mapInArrow(functools.partial(_find_task, probe), schema).toArrow()
    probe.refuse(found)  # DuplicateKeyError naming the keys, as a keyed append's


def _find_task(probe: KeyProbe, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        yield from probe.find(batch).to_batches()


def _keyed_on(merge: Merge, keys: list[str], columns: dict[str, str]) -> dict[str, str] | None:
    """Record key column -> the source column the ON condition equates it with, when the ON
    condition is a conjunction holding ``target.key = source.column`` for every key column (both
    qualified by their aliases); None otherwise."""
    if not keys:
        return None
    tree = parse(merge.on)
    conjuncts = list(tree.flatten()) if isinstance(tree, exp.And) else [tree]
    target, source = merge.target_alias.lower(), merge.source_alias.lower()
    found: dict[str, str] = {}
    for node in conjuncts:
        if not isinstance(node, exp.EQ):
            continue
        for one, other in ((node.this, node.expression), (node.expression, node.this)):
            if isinstance(one, exp.Column) and isinstance(other, exp.Column) and \
                    one.table.lower() == target and other.table.lower() == source:
                name = columns.get(one.name.lower())
                if name in keys:
                    found.setdefault(name, other.name)
    return found if set(found) == set(keys) else None


def _files_with_keys(spark: Any, catalog: Catalog, merge: Merge, keyed_on: dict[str, str], probe: KeyProbe,
                     types: dict[str, Any], statement: str) -> Callable[[DataFile], bool] | None:
    """Which data files hold a target row the ON condition can match, found through the record
    index (``KeyProbe``) by the source's keys: only those are read. None (read every file) when
    a source column's type is not its key column's (Spark would compare them converted)."""
    source = _quoted(merge.source_alias)
    frame = _analysed(spark, catalog, "SELECT " + ", ".join(
        f"{source}.{_quoted(column)} AS {_quoted(key)}" for key, column in keyed_on.items())
        + f" FROM {_source_table(merge)}", statement, "Spark cannot read the source")
    given = {f.name: f.dataType for f in frame.schema.fields}
    if any(given[key] != types[key] for key in keyed_on):
        return None
    schema = ", ".join([*(f"{_quoted(k)} {types[k].simpleString()}" for k in keyed_on),
                        "file string", "position long"])
    found = set(frame.mapInArrow(functools.partial(_find_task, probe), schema)
                .select("file").distinct().toArrow()["file"].to_pylist())

    def keep(data_file: DataFile) -> bool:
        parts = data_file.path.split("/")
        return any("/".join(parts[i:]) in found for i in range(len(parts)))

    return keep


def _plan(spark: Any, catalog: Catalog, merge: Merge, table: Table, snapshot: Snapshot,
          values: dict[int, dict[str, str]], changes: dict[int, str], keyed_on: dict[str, str] | None,
          statement: str) -> _Plan:
    names = table.schema.names
    keys = table.record_key_columns
    types = {f.name: f.dataType for f in spark_schema(snapshot.schema).fields}
    keep = None
    if keyed_on is not None and NOT_MATCHED_BY_SOURCE not in {c.kind for c in merge.clauses}:
        keep = _files_with_keys(spark, catalog, merge, keyed_on, table.key_probe(snapshot), types, statement)
    with _target_view(spark, snapshot, keep) as view:
        sides = _sides(merge, view, values, names)
        _check_scopes(spark, catalog, merge, sides, statement)
        joined = _analysed(spark, catalog, _joined_query(merge, sides, values, changes, names), statement,
                           "Spark cannot evaluate the MERGE")
        pinned = joined.localCheckpoint(eager=True)
    _refuse_key_change(pinned, changes, merge.target, keys)
    counts = {row[CLAUSE]: row["count"] for row in pinned.groupBy(CLAUSE).count().collect()}
    clauses = merge.clauses
    changing = [i for i, c in enumerate(clauses) if c.action in ("UPDATE", "DELETE")]
    # The target rows changed, to the driver (their positions are the commit's deletes).
    changed = pinned.where(f"{_quoted(CLAUSE)} IN ({', '.join(map(str, changing))})") \
        .select(CLAUSE, FILE, POSITION).toArrow() if any(counts.get(i) for i in changing) else \
        pa.table({CLAUSE: pa.array([], pa.int32()), FILE: pa.array([], pa.string()),
                  POSITION: pa.array([], pa.int64())})
    _refuse_repeated_matches(changed, merge, merge.target)
    deletes = _located(changed, changing)
    retire = _located(changed, [i for i, c in enumerate(clauses) if c.action == "DELETE"])
    parts: dict[str, list[Any]] = {"UPDATE": [], "INSERT": []}
    for index, clause in enumerate(clauses):
        if index not in values or not counts.get(index):
            continue
        rows = pinned.where(f"{_quoted(CLAUSE)} = {index}").select(
            *[pinned[_value(index, j)].alias(c) for j, c in enumerate(names)])
        parts[clause.action].append(converted(rows, types))
    frames = parts["UPDATE"] + parts["INSERT"]
    rows = functools.reduce(lambda a, b: a.unionByName(b), frames) if frames else None
    if rows is not None:
        not_null = [f.name for f in table.schema if not f.nullable and f.name not in keys]
        if not_null and rows.where(" OR ".join(f"{_quoted(c)} IS NULL" for c in not_null)).limit(1).count():
            raise SchemaMismatchError(f"MERGE INTO {merge.target}: column(s) {not_null} are not nullable, "
                                      "but a new row holds NULL in one of them; nothing was written")
        if keys:
            inserted = functools.reduce(lambda a, b: a.unionByName(b), parts["INSERT"]) \
                if parts["INSERT"] else None
            _check_new_keys(rows, inserted, keys, table.key_probe(snapshot), merge.target)
    updated = sum(counts.get(i, 0) for i, c in enumerate(clauses) if c.action == "UPDATE")
    inserted_count = sum(counts.get(i, 0) for i, c in enumerate(clauses) if c.action == "INSERT")
    return _Plan(deletes, retire, rows, (updated, retire.num_rows, inserted_count), by_keys=keep is not None)


def _key_changes(merge: Merge, values: dict[int, dict[str, str]], keys: list[str]) -> dict[int, str]:
    """UPDATE SET * sets the key columns too: allowed where they keep their value (an ON on the
    key), refused where a row's key would change, as UPDATE refuses setting a key. Per such
    clause, the predicate true on a row whose key it would change (its new row keeps the
    target's key)."""
    target = _quoted(merge.target_alias)
    found = {}
    for index, clause in enumerate(merge.clauses):
        if clause.star and clause.action == "UPDATE" and keys:
            found[index] = " OR ".join(f"NOT ({target}.{_quoted(c)} <=> ({values[index][c]}))" for c in keys)
            values[index] |= {c: f"{target}.{_quoted(c)}" for c in keys}
    return found


def _refuse_key_change(pinned: Any, changes: dict[int, str], name: TableName, keys: list[str]) -> None:
    for index in changes:
        if pinned.where(f"{_quoted(_change(index))}").limit(1).count():
            raise InvalidOptionError(
                f"MERGE INTO {name}: UPDATE SET * would change the record key {keys} of a row (the "
                "source row matched has another key); record key columns cannot be updated; nothing "
                "was written\nHelp: match on the key (ON t.key = s.key), or list the columns to set")


def _change(index: int) -> str:
    return f"__metatxn_key_change_{index}"


log = logging.getLogger("metatxn")


def _commit(table: Table, plan: Any) -> tuple[int, int, int]:
    """Plan on the latest snapshot and commit once (``"merge"``: new rows and deletes, recorded
    as the Python API's ``Table.merge`` is; ``"delete"``: deletes only); planned again when a
    table service overtook it, up to :data:`REPLANS` times, as UPDATE is. Returns the counts
    (updated, deleted, inserted)."""
    for retry in range(REPLANS + 1):
        pending = None
        try:
            snapshot = table.snapshot()
            planned: _Plan = plan(snapshot)
            if planned.rows is None and not planned.deletes.num_rows:
                return planned.counts
            operation = "merge" if planned.rows is not None else "delete"
            with table.begin_write(operation, read_instant=snapshot) as pending:
                reports = run_job(table, planned.rows, pending) if planned.rows is not None else []
                retire = planned.retire if operation == "merge" and planned.retire.num_rows else None
                pending.commit(reports, deletes=planned.deletes if planned.deletes.num_rows else None,
                               retire=retire, retries=retry,
                               read_by_keys=planned.by_keys and operation == "merge")
            return planned.counts
        except TxnError as exc:
            overtaken = (pending.retryable(exc) if pending is not None
                         else isinstance(exc, SnapshotExpiredError))
            if retry == REPLANS or not overtaken:
                raise
            log.info("MERGE planned again: %s (retry %d of %d)", exc, retry + 1, REPLANS)
    raise AssertionError("unreachable")  # pragma: no cover


def merge(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """MERGE INTO a metatxn table; None when the target is Spark's table."""
    try:
        name = target_name(statement, tokens)
    except InvalidOptionError:
        return None  # not a name metatxn can have: Spark's to judge
    if not catalog.exists(name):
        known = spark.catalog.tableExists(f"{name.database}.{name.table}") or (
            name.database == DEFAULT_DATABASE and spark.catalog.tableExists(name.table))  # a temporary view
        if known:
            return None  # Spark's own table or view: Spark's to run or refuse
        raise TableNotFoundError(f"MERGE INTO {name}: no such table in the warehouse "
                                 f"({catalog.location(name)!r}) nor in Spark's catalog; nothing was written")
    parsed = read(statement, tokens)
    table = open_table(catalog.location(name))
    names = table.schema.names
    columns = {c.lower(): c for c in names}
    source_columns = {c.lower() for c in _analysed(
        spark, catalog, f"SELECT * FROM {_source_table(parsed)}", statement,
        "Spark cannot read the source").columns}
    values = {i: _row_values(parsed, c, columns, names, table.record_key_columns, source_columns, statement)
              for i, c in enumerate(parsed.clauses) if c.action != "DELETE"}
    changes = _key_changes(parsed, values, table.record_key_columns)
    keyed_on = _keyed_on(parsed, table.record_key_columns, columns)
    updated, deleted, inserted = _commit(
        table, lambda snapshot: _plan(spark, catalog, parsed, table, snapshot, values, changes, keyed_on,
                                      statement))
    return _answer(spark, (updated + deleted + inserted, updated, deleted, inserted))


def _answer(spark: Any, counts: tuple[int, int, int, int]) -> Any:
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField(c, LongType(), False) for c in _RESULT])
    return spark.createDataFrame([counts], schema)
