"""The grammar of CarbonData's StreamSQL, read by hand (pure: no Spark, no storage).

``CREATE STREAM``, ``SHOW STREAMS``, ``DROP STREAM`` and ``STMPROPERTIES`` are CarbonData's own
words, which no SQL parser on PyPI knows, and of a stream source declaration only the
``TBLPROPERTIES`` and the text of the column list matter (Spark's own DDL parser reads the
columns). So these statements are read with the package's token cursor (``_parse``); the query
after ``AS`` is kept as text for ``spark.sql`` and only scanned for the tables it reads
(``FROM``/``JOIN`` operands), so that the stream's source can be put in its place.

Every parse error is an :class:`InvalidOptionError` quoting the statement and its expected form.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import InvalidOptionError
from ._catalog import TableName
from ._parse import Cursor, Token, leading_words, refused, tokenize, without_terminator

CREATE_SOURCE_FORM = (
    "CREATE TABLE [IF NOT EXISTS] [db.]name (column type, ...) STORED AS carbondata "
    "TBLPROPERTIES('streaming'='source', 'format'='socket', 'host'='...', 'port'='...', "
    "'record_format'='csv', 'delimiter'=',')")
CREATE_STREAM_FORM = (
    "CREATE STREAM [IF NOT EXISTS] name ON TABLE [db.]sink "
    "STMPROPERTIES('trigger'='ProcessingTime', 'interval'='10 seconds') "
    "AS SELECT ... FROM source [WHERE ...]")
SHOW_STREAMS_FORM = "SHOW STREAMS [ON TABLE [db.]table]"
DROP_STREAM_FORM = "DROP STREAM [IF EXISTS] name"

# Words after a table in FROM that are not its alias (Spark's reserved words of that position).
_NOT_ALIAS = frozenset({
    "ANTI", "CLUSTER", "CROSS", "DISTRIBUTE", "EXCEPT", "FULL", "GROUP", "HAVING", "INNER",
    "INTERSECT", "JOIN", "LATERAL", "LEFT", "LIMIT", "MINUS", "NATURAL", "OFFSET", "ON", "ORDER",
    "PIVOT", "RIGHT", "SEMI", "SORT", "TABLESAMPLE", "UNION", "UNPIVOT", "USING", "WHERE",
    "WINDOW"})

# Functions whose argument lists use FROM for something other than a table.
_FROM_IN_ARGUMENTS = ("EXTRACT", "TRIM", "SUBSTRING", "SUBSTR", "POSITION", "OVERLAY")


@dataclass(frozen=True)
class SourceDeclaration:
    """``CREATE TABLE ... TBLPROPERTIES('streaming'='source', ...)``."""

    name: TableName
    if_not_exists: bool
    #: The column list as written, for Spark's DDL parser.
    columns: str
    stored_as: str | None
    #: Names lower-cased, values as written.
    properties: dict[str, str]


@dataclass(frozen=True)
class TableReference:
    """Where a stream's query may name a table: the name as written, its span in the query
    text, and whether an alias follows it."""

    name: str
    start: int
    end: int
    aliased: bool


@dataclass(frozen=True)
class CreateStream:
    name: str
    if_not_exists: bool
    sink: TableName
    #: STMPROPERTIES, names lower-cased, values as written.
    properties: dict[str, str]
    query: str
    tables: tuple[TableReference, ...]


@dataclass(frozen=True)
class ShowStreams:
    table: TableName | None


@dataclass(frozen=True)
class DropStream:
    name: str
    if_exists: bool


Statement = SourceDeclaration | CreateStream | ShowStreams | DropStream


def parse(statement: str) -> Statement | None:
    """The stream statement ``statement`` is, or None when it is none of them.

    A ``CREATE TABLE`` is one only when its ``TBLPROPERTIES`` say ``'streaming'='source'``.

    Raises:
        InvalidOptionError: it is a stream statement, but not a well-formed one.
    """
    text = without_terminator(statement)
    tokens = tokenize(text)
    words = leading_words(tokens, 2)
    if words == ["CREATE", "TABLE"]:
        if not _declares_source(tokens):
            return None
        return _source_declaration(Cursor(text, CREATE_SOURCE_FORM, tokens))
    if words == ["CREATE", "STREAM"]:
        return _create_stream(Cursor(text, CREATE_STREAM_FORM, tokens))
    if words == ["SHOW", "STREAMS"]:
        cursor = Cursor(text, SHOW_STREAMS_FORM, tokens)
        cursor.expect("SHOW")
        cursor.expect("STREAMS")
        table = None
        if cursor.accept("ON"):
            cursor.expect("TABLE")
            table = cursor.table_name()
        cursor.end()
        return ShowStreams(table)
    if words == ["DROP", "STREAM"]:
        cursor = Cursor(text, DROP_STREAM_FORM, tokens)
        cursor.expect("DROP")
        cursor.expect("STREAM")
        if_exists = _accept_words(cursor, "IF", "EXISTS")
        name = _identifier(cursor, "the stream's name")
        cursor.end()
        return DropStream(name, if_exists)
    return None


def _declares_source(tokens: list[Token]) -> bool:
    """Whether a ``TBLPROPERTIES(...)`` of the statement sets ``'streaming'='source'``.

    Lenient on purpose: a CREATE TABLE this module does not read is left, unjudged, to the
    handler of the other statements.
    """
    for i, token in enumerate(tokens):
        if not token.is_word("TBLPROPERTIES"):
            continue
        for j in range(i + 1, len(tokens) - 2):
            key, equals, value = tokens[j:j + 3]
            if key.kind == "symbol" and key.value == ")":
                break
            if (key.kind == "string" and key.value.strip().lower() == "streaming"
                    and equals.value == "=" and value.kind == "string"
                    and value.value.strip().lower() == "source"):
                return True
    return False


def _accept_words(cursor: Cursor, *words: str) -> bool:
    """Take ``words`` if they all come next (``IF NOT EXISTS``), else take nothing."""
    ahead = [cursor.peek(i) for i in range(len(words))]
    if all(t is not None and t.is_word(w) for t, w in zip(ahead, words, strict=True)):
        cursor.at += len(words)
        return True
    return False


def _identifier(cursor: Cursor, what: str) -> str:
    token = cursor.peek()
    if token is None or not token.is_name:
        found = "the end of the statement" if token is None else repr(token.value)
        raise cursor.error(f"expected {what} but found {found}")
    return cursor.take().value


def _parenthesised_text(cursor: Cursor) -> str:
    """The text between a ``(`` and its matching ``)``."""
    cursor.expect_symbol("(")
    opening = cursor.tokens[cursor.at - 1]
    depth = 1
    while depth:
        token = cursor.peek()
        if token is None:
            raise cursor.error("expected ')' closing the column list but found the end of the statement")
        cursor.take()
        if token.kind == "symbol":
            depth += {"(": 1, ")": -1}.get(token.value, 0)
    return cursor.statement[opening.end:cursor.tokens[cursor.at - 1].start]


def _source_declaration(cursor: Cursor) -> SourceDeclaration:
    cursor.expect("CREATE")
    cursor.expect("TABLE")
    if_not_exists = _accept_words(cursor, "IF", "NOT", "EXISTS")
    name = cursor.table_name()
    columns = _parenthesised_text(cursor)
    stored_as: str | None = None
    properties: dict[str, str] | None = None
    while not cursor.at_end():
        if _accept_words(cursor, "STORED", "AS") or cursor.accept("USING"):
            if stored_as is not None:
                raise cursor.error("the format (STORED AS) is given twice")
            stored_as = _identifier(cursor, "a format name (carbondata)").lower()
        elif cursor.accept("TBLPROPERTIES"):
            if properties is not None:
                raise cursor.error("TBLPROPERTIES is given twice")
            properties = cursor.options()
        else:
            token = cursor.peek()
            assert token is not None
            raise cursor.error(f"a stream source takes STORED AS carbondata and TBLPROPERTIES "
                               f"only, but found {token.value!r}")
    assert properties is not None  # parse() saw 'streaming'='source' in them
    return SourceDeclaration(name, if_not_exists, columns, stored_as, properties)


def _create_stream(cursor: Cursor) -> CreateStream:
    cursor.expect("CREATE")
    cursor.expect("STREAM")
    if_not_exists = _accept_words(cursor, "IF", "NOT", "EXISTS")
    name = _identifier(cursor, "the stream's name")
    cursor.expect("ON")
    cursor.expect("TABLE")
    sink = cursor.table_name()
    properties = cursor.options() if cursor.accept("STMPROPERTIES") else {}
    cursor.expect("AS")
    if cursor.at_end():
        raise cursor.error("expected the stream's query (SELECT ... FROM source) after AS")
    query_tokens = cursor.tokens[cursor.at:]
    offset = query_tokens[0].start
    tables = tuple(TableReference(r.name, r.start - offset, r.end - offset, r.aliased)
                   for r in tables_read(cursor.statement, query_tokens))
    return CreateStream(name, if_not_exists, sink, properties, cursor.statement[offset:], tables)


def tables_read(text: str, tokens: list[Token]) -> list[TableReference]:
    """Where the query ``tokens`` (of ``text``) may name a table: after ``FROM`` or ``JOIN``,
    and after a comma in a FROM list.

    Names that turn out to be CTEs, views or Spark tables are the caller's to tell apart.
    """
    found: list[TableReference] = []
    # For each open parenthesis: whether it holds the arguments of EXTRACT, TRIM, ... .
    in_arguments: list[bool] = []
    at = 0
    while at < len(tokens):
        token = tokens[at]
        if token.kind == "symbol" and token.value == "(":
            in_arguments.append(at > 0 and tokens[at - 1].is_word(*_FROM_IN_ARGUMENTS))
        elif token.kind == "symbol" and token.value == ")":
            if in_arguments:
                in_arguments.pop()
        elif token.is_word("FROM", "JOIN") and not (in_arguments and in_arguments[-1]):
            at = _from_list(text, tokens, at + 1, found)
            continue
        at += 1
    return found


def _from_list(text: str, tokens: list[Token], at: int, found: list[TableReference]) -> int:
    """Read ``name [[AS] alias] [, name [[AS] alias]]...`` from ``tokens[at]``; the next index."""
    while at < len(tokens) and tokens[at].is_name:
        first = last = tokens[at]
        at += 1
        while (at + 1 < len(tokens) and tokens[at].kind == "symbol" and tokens[at].value == "."
               and tokens[at + 1].is_name):
            last = tokens[at + 1]
            at += 2
        following = tokens[at] if at < len(tokens) else None
        aliased = following is not None and (
            following.is_word("AS") or following.kind == "quoted"
            or (following.kind == "word" and not following.is_word(*_NOT_ALIAS)))
        found.append(TableReference(text[first.start:last.end], first.start, last.end, aliased))
        if following is not None and aliased:
            at += 2 if following.is_word("AS") else 1
        if at < len(tokens) and tokens[at].kind == "symbol" and tokens[at].value == ",":
            at += 1
            continue
        break
    return at


def statement_error(statement: str, problem: str, form: str) -> InvalidOptionError:
    """An InvalidOptionError saying ``problem``, quoting ``statement`` and the expected form."""
    return refused(without_terminator(statement), problem, form)


def first_line(error: BaseException) -> str:
    """The first line of an error's message (Spark's carry the plan and a stack below it)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
