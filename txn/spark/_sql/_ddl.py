"""CREATE TABLE ... STORED AS metatxn: a table in the warehouse, from Spark SQL's column types.

Read by sqlglot. The format names metatxn's tables: ``STORED AS metatxn`` or ``USING metatxn``,
and CarbonData's ``carbondata`` for either (the seeds' statements run unchanged); any other
format is Spark's table, and the statement goes to ``spark.sql``.

* Columns: names lower-cased (Hive's and CarbonData's catalogs are case-insensitive), types
  read by Spark's own DDL parser and stored as Arrow types the way ``txn.spark.write`` stores a
  DataFrame's (``txn/spark/_types.py``); ``VARCHAR(n)`` and ``CHAR(n)`` are strings; ``NOT NULL``
  makes a column non-nullable; column comments are not kept.
* ``PARTITIONED BY (col type, ...)`` appends those columns to the schema, as Hive does;
  ``PARTITIONED BY (col, ...)`` names columns of the list.
* ``TBLPROPERTIES``: ``SORT_COLUMNS`` (``sort_by``), ``RECORD_KEY`` (``record_key``, comma
  separated for a compound key), ``streaming`` (``'true'``/``'sink'``, ``'false'``), CarbonData's
  compaction properties under metatxn's names; any other key is kept as a table property
  (lower-cased).
* ``AS SELECT ...``: the query runs to completion first (pinned with ``localCheckpoint``), then
  the table is created from its schema and its rows are written in one commit
  (``txn.spark.write``, which creates the table staged: it appears with that commit); a query
  or a write that fails creates nothing, a query of no rows creates the table without a commit.
* ``CREATE EXTERNAL | TEMPORARY | OR REPLACE TABLE ... STORED AS metatxn`` are refused: a metatxn
  table lives in the warehouse, beyond the session, and is never replaced wholesale.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from ... import InvalidOptionError, TableExistsError, create_table
from .._types import table_schema
from .._write import write
from ._alter_syntax import CARBON_PROPERTIES as _CARBON_PROPERTIES
from ._catalog import Catalog, TableName
from ._frames import no_result
from ._parse import Token, depths, refused, source_text, spark_message
from ._select import fresh_frame
from ._stream_sources import load as declared_source
from ._tree import new_name, parse, problem, spark_text

FORM = ("CREATE TABLE [IF NOT EXISTS] [db.]table (column type, ...) STORED AS metatxn "
        "[PARTITIONED BY (column type, ...)] [TBLPROPERTIES ('SORT_COLUMNS'='a,b', "
        "'RECORD_KEY'='k', 'streaming'='true', ...)] [AS SELECT ...]")

#: Format names of metatxn tables in ``STORED AS`` / ``USING``.
FORMATS = frozenset({"metatxn", "carbondata"})

#: Words between CREATE and TABLE that a metatxn table cannot have.
_MODIFIERS = ("OR", "REPLACE", "GLOBAL", "TEMPORARY", "TEMP", "EXTERNAL")



def names_metatxn_format(tokens: list[Token]) -> bool:
    """Whether a CREATE statement says ``STORED AS``/``USING`` metatxn or carbondata."""
    for index, token in enumerate(tokens):
        following = tokens[index + 1:index + 3]
        if token.is_word("USING") and following and following[0].value.lower() in FORMATS:
            return True
        if token.is_word("STORED") and len(following) == 2 and following[0].is_word("AS") \
                and following[1].value.lower() in FORMATS:
            return True
    return False


def _format_of(tree: exp.Create) -> str | None:
    properties = tree.args.get("properties")
    for prop in properties.expressions if properties is not None else []:
        if isinstance(prop, exp.FileFormatProperty):
            return prop.name.lower() if prop.name else spark_text(prop.this).lower()
    return None


def _column_type(statement: str, column: exp.ColumnDef) -> str:
    kind = column.args.get("kind")
    if not isinstance(kind, exp.DataType):
        raise refused(statement, f"column {column.name!r} has no type", FORM)
    if kind.is_type(exp.DataType.Type.VARCHAR, exp.DataType.Type.CHAR, exp.DataType.Type.NCHAR,
                    exp.DataType.Type.NVARCHAR):
        return "STRING"
    return spark_text(kind)


def _not_null(column: exp.ColumnDef) -> bool:
    return any(isinstance(c.args.get("kind"), exp.NotNullColumnConstraint) for c in column.constraints)


def _schema(spark: Any, statement: str, columns: list[exp.ColumnDef]) -> Any:
    """The Arrow schema of the column definitions, through Spark's DDL parser."""
    import pyarrow as pa
    from pyspark.sql.types import DataType

    names = [c.name.lower() for c in columns]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise refused(statement, f"column(s) {repeated} are declared twice", FORM)
    # A backtick inside a name is doubled, as Spark's own DDL writes it (`c``d`).
    ddl = ", ".join(f"`{name.replace('`', '``')}` {_column_type(statement, column)}"
                    for name, column in zip(names, columns, strict=True))
    try:
        struct = DataType.fromDDL(ddl)
    except Exception as exc:  # Spark's parser raises its own errors
        raise refused(statement, f"Spark cannot read the column types ({spark_message(exc)})",
                      FORM) from None
    schema = table_schema(struct)
    fields = [field.with_nullable(not _not_null(column))
              for field, column in zip(schema, columns, strict=True)]
    return pa.schema(fields)


def _column_list(text: str) -> list[str]:
    return [part.strip().lower() for part in text.split(",") if part.strip()]


def _layout(statement: str, tree: exp.Create) -> tuple[list[exp.ColumnDef], list[str], dict[str, str]]:
    """Partition columns (typed ones to append), partition names, and TBLPROPERTIES."""
    appended: list[exp.ColumnDef] = []
    partition_by: list[str] = []
    properties: dict[str, str] = {}
    listed = tree.args.get("properties")
    for prop in listed.expressions if listed is not None else []:
        if isinstance(prop, exp.FileFormatProperty):
            continue
        if isinstance(prop, exp.PartitionedByProperty):
            for column in prop.this.expressions if isinstance(prop.this, exp.Schema) else [prop.this]:
                if isinstance(column, exp.ColumnDef):
                    appended.append(column)
                partition_by.append(column.name.lower())
            continue
        if isinstance(prop, exp.Property) and isinstance(prop.this, exp.Literal) \
                and isinstance(prop.args.get("value"), exp.Literal):
            key = prop.this.name.strip().lower()
            if key in properties:
                raise refused(statement, f"table property {key!r} is given twice", FORM)
            properties[key] = prop.args["value"].name
            continue
        raise refused(statement, f"metatxn tables do not support {spark_text(prop)!r} (their location "
                                 "is the warehouse's, their format metatxn's)", FORM)
    return appended, partition_by, properties


def _options(statement: str, properties: dict[str, str]) -> dict[str, Any]:
    """``create_table``'s keyword arguments from TBLPROPERTIES."""
    rest = dict(properties)
    sort = rest.pop("sort_columns", None)
    key = rest.pop("record_key", None)
    kept: dict[str, str] = {}
    for name, value in rest.items():
        if name == "streaming":
            value = {"sink": "true"}.get(value.strip().lower(), value.strip().lower())
        kept[_CARBON_PROPERTIES.get(name, name)] = value
    record_key: list[str] | str | None = None
    if key is not None:
        columns = _column_list(key)
        if not columns:
            raise refused(statement, "'RECORD_KEY' names no column", FORM)
        record_key = columns[0] if len(columns) == 1 else columns
    return {"sort_by": _column_list(sort) if sort is not None else None, "record_key": record_key,
            "properties": kept or None}


def _creates_table(tokens: list[Token]) -> bool:
    """Whether the statement is CREATE [modifiers] TABLE."""
    for token in tokens[1:]:
        if token.is_word("TABLE"):
            return True
        if not token.is_word(*_MODIFIERS):
            return False
    return False


def _refused_modifiers(statement: str, tokens: list[Token]) -> None:
    modifiers = []
    for token in tokens[1:]:
        if token.is_word("TABLE"):
            break
        modifiers.append(token.value.upper())
    if not modifiers:
        return
    if modifiers[:2] == ["OR", "REPLACE"]:
        raise refused(statement, "CREATE OR REPLACE is not supported for metatxn tables (drop the "
                                 "old one by removing its folder, or INSERT OVERWRITE it)", FORM)
    raise refused(statement, f"CREATE {' '.join(modifiers)} TABLE is not supported for metatxn tables: "
                             "they live in the warehouse (neither external nor temporary)", FORM)


def create(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """Run a CREATE TABLE of a metatxn table; None when the statement is Spark's own."""
    if not _creates_table(tokens) or not names_metatxn_format(tokens):
        return None
    _refused_modifiers(statement, tokens)
    tree = parse(statement)
    if not isinstance(tree, exp.Create):
        raise refused(statement, f"cannot read the statement: {problem(statement)}", FORM)
    if str(tree.args.get("kind", "")).upper() != "TABLE" or (_format_of(tree) or "") not in FORMATS:
        return None
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    if not isinstance(target, exp.Table):
        raise refused(statement, "expected a table name ([db.]table)", FORM)
    try:
        name = new_name(target)
    except InvalidOptionError as exc:
        raise refused(statement, str(exc), FORM) from None
    columns = [c for c in tree.this.expressions if isinstance(c, exp.ColumnDef)] \
        if isinstance(tree.this, exp.Schema) else []
    appended, partition_by, properties = _layout(statement, tree)
    options = _options(statement, properties)
    query = tree.args.get("expression")
    location = catalog.location(name)
    source = declared_source(catalog, name)
    if tree.args.get("exists") and (source is not None or catalog.exists(name)):
        return no_result(spark)
    if source is not None:
        # A stream source's declaration holds the name: a table in its folder would hide it.
        raise _declared_as_source(location, name, statement)
    if query is not None:
        return _create_as_select(spark, catalog, statement, tokens, name, columns + appended,
                                 partition_by, options)
    if not columns:
        raise refused(statement, "a table needs a column list (or AS SELECT ...)", FORM)
    schema = _schema(spark, statement, columns + appended)
    create_table(location, schema, partition_by=partition_by or None, **options)
    return no_result(spark)


def _declared_as_source(location: str, name: TableName, statement: str) -> TableExistsError:
    error = TableExistsError(location)
    error.args = (f"table {name} is already declared as a stream source at {location!r}; expected "
                  f"a name no table or stream source uses\nStatement: {statement!r}\n"
                  "Help: choose another name",)
    return error


def _query_text(statement: str, tokens: list[Token]) -> str:
    """The text of CREATE TABLE ... AS's query: after the first AS outside brackets that is not
    STORED AS's."""
    for index, (token, depth) in enumerate(zip(tokens, depths(tokens), strict=True)):
        if depth == 0 and token.is_word("AS") and not tokens[index - 1].is_word("STORED") \
                and index + 1 < len(tokens):
            return source_text(statement, tokens[index + 1:])
    raise refused(statement, "cannot find the query after AS", FORM)


def _create_as_select(spark: Any, catalog: Catalog, statement: str, tokens: list[Token], name: TableName,
                      columns: list[exp.ColumnDef], partition_by: list[str], options: dict[str, Any]) -> Any:
    if columns:
        raise refused(statement, "CREATE TABLE ... AS SELECT takes its columns from the query, "
                                 "not from a column list", FORM)
    location = catalog.location(name)
    if catalog.exists(name):
        raise TableExistsError(location)
    frame = fresh_frame(spark, catalog, _query_text(statement, tokens))
    renamed = frame.toDF(*[c.lower() for c in frame.columns])
    if len(set(renamed.columns)) != len(renamed.columns):
        raise InvalidOptionError(f"the query's columns {frame.columns} repeat a name (names are "
                                 "case-insensitive); give each column its own alias")
    # The query runs to completion before the table exists: a query Spark cannot compute
    # leaves no table behind, and a retry of the statement finds the name free.
    pinned = renamed.localCheckpoint(eager=True)
    if pinned.isEmpty():
        create_table(location, table_schema(pinned.schema), partition_by=partition_by or None,
                     **options)
        return no_result(spark)
    # A staged create: the table appears with this commit, so a write that fails leaves none
    # (design/protocol.md, "Staged create"); "error": a table created meanwhile is an error.
    write(pinned, location, mode="error", partition_by=partition_by or None, **options)
    return no_result(spark)
