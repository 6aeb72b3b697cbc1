"""The hand grammar of CarbonData's own statements: a tokenizer and a cursor over its tokens.

SHOW SEGMENTS, ALTER TABLE ... COMPACT / ADD SEGMENT, CLEAN FILES, DELETE FROM TABLE ... WHERE
SEGMENT, SHOW PARTITIONS and LOAD DATA ... OPTIONS are not Spark SQL: sqlglot's Spark and Hive
dialects parse them as an opaque ``Command`` at best. Each is a short fixed sequence of keywords,
a table name, string or number literals and an ``OPTIONS('k'='v', ...)`` list, so a cursor over
tokens with one method per element reads them exactly; every mistake becomes an
:class:`InvalidOptionError` that quotes the statement and the form it should have had.

The tokenizer reads any SQL text without failing (unknown characters are one-character symbols),
so the dispatcher can look at the first words of every statement, Spark's own included.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ... import InvalidOptionError, TxnError
from ._catalog import DEFAULT_DATABASE, TableName, name_problem

_TOKEN = re.compile(r"""
      (?P<space>\s+|--[^\n]*|/\*.*?\*/)
    | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
    | (?P<quoted>`(?:[^`]|``)+`)
    | (?P<number>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+)
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    | (?P<symbol>.)
""", re.VERBOSE | re.DOTALL)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "b": "\b"}


@dataclass(frozen=True)
class Token:
    kind: str  #: word, quoted (a backticked name), string, number or symbol
    value: str  #: a string's or quoted name's content unescaped; otherwise the text itself
    start: int
    end: int

    def is_word(self, *words: str) -> bool:
        return self.kind == "word" and self.value.upper() in words

    @property
    def is_name(self) -> bool:
        return self.kind in ("word", "quoted")


def _unescape(body: str, quote: str) -> str:
    """A SQL string literal's content, as Spark reads it: backslash escapes, doubled quotes."""
    out: list[str] = []
    at = 0
    while at < len(body):
        char = body[at]
        if char == "\\" and at + 1 < len(body):
            out.append(_ESCAPES.get(body[at + 1], body[at + 1]))
            at += 2
        elif char == quote and body[at + 1:at + 2] == quote:
            out.append(quote)
            at += 2
        else:
            out.append(char)
            at += 1
    return "".join(out)


def tokenize(text: str) -> list[Token]:
    tokens = []
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        assert kind is not None
        raw = match.group()
        if kind == "space":
            continue
        if kind == "string":
            value = _unescape(raw[1:-1], raw[0])
        elif kind == "quoted":
            value = raw[1:-1].replace("``", "`")
        else:
            value = raw
        tokens.append(Token(kind, value, match.start(), match.end()))
    return tokens


def without_terminator(text: str) -> str:
    """The statement without what surrounds its first and last token: blanks, comments and
    trailing semicolons (``DELETE FROM t; -- done`` is ``DELETE FROM t``)."""
    tokens = tokenize(text)
    while tokens and tokens[-1].kind == "symbol" and tokens[-1].value == ";":
        tokens.pop()
    return text[tokens[0].start:tokens[-1].end] if tokens else ""


#: Brackets that nest: a keyword or comma inside them belongs to an inner expression.
_OPENING = {"(": ")", "[": "]", "{": "}"}
_CLOSING = frozenset(_OPENING.values())


def depths(tokens: list[Token]) -> list[int]:
    """Each token's bracket depth (a bracket itself counts as outside what it encloses)."""
    found = []
    depth = 0
    for token in tokens:
        if token.kind == "symbol" and token.value in _CLOSING:
            depth = max(depth - 1, 0)
        found.append(depth)
        if token.kind == "symbol" and token.value in _OPENING:
            depth += 1
    return found


def split_top_level(tokens: list[Token], symbol: str) -> list[list[Token]]:
    """``tokens`` cut at each ``symbol`` outside brackets (the pieces may be empty)."""
    pieces: list[list[Token]] = [[]]
    for token, depth in zip(tokens, depths(tokens), strict=True):
        if depth == 0 and token.kind == "symbol" and token.value == symbol:
            pieces.append([])
        else:
            pieces[-1].append(token)
    return pieces


def enclosed(tokens: list[Token]) -> list[Token] | None:
    """What one pair of brackets around all of ``tokens`` encloses (None: they are not enclosed)."""
    if len(tokens) < 2 or tokens[0].kind != "symbol" or tokens[0].value != "(" \
            or tokens[-1].kind != "symbol" or tokens[-1].value != ")":
        return None
    if any(depth == 0 for depth in depths(tokens)[1:-1]):
        return None  # (a) + (b): the first bracket closes before the end
    return tokens[1:-1]


def source_text(statement: str, tokens: list[Token]) -> str:
    """The statement's own text from the first token to the last: what Spark is handed, never a
    re-printed tree (a printer can change what a literal means: ``'it''s'``)."""
    return statement[tokens[0].start:tokens[-1].end]


def refused(statement: str, problem: str, form: str) -> InvalidOptionError:
    """The error for a statement that names a metatxn feature wrongly."""
    return InvalidOptionError(f"{problem}, in: {statement!r}\nExpected: {form}")


class Cursor:
    """Reads one statement of a hand grammar, token by token; ``form`` is the statement's
    expected form, quoted by every error."""

    def __init__(self, statement: str, form: str, tokens: list[Token] | None = None) -> None:
        self.statement = statement
        self.form = form
        self.tokens = tokens if tokens is not None else tokenize(statement)
        self.at = 0

    # -- looking ---------------------------------------------------------------------------------

    def peek(self, offset: int = 0) -> Token | None:
        index = self.at + offset
        return self.tokens[index] if index < len(self.tokens) else None

    def at_word(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and token.is_word(*words)

    def at_end(self) -> bool:
        return self.at >= len(self.tokens)

    def error(self, problem: str) -> InvalidOptionError:
        return refused(self.statement, problem, self.form)

    def found(self) -> str:
        token = self.peek()
        return "the end of the statement" if token is None else repr(self.statement[token.start:token.end])

    # -- taking ----------------------------------------------------------------------------------

    def take(self) -> Token:
        token = self.peek()
        if token is None:
            raise self.error("the statement ends too early")
        self.at += 1
        return token

    def accept(self, *words: str) -> bool:
        if self.at_word(*words):
            self.at += 1
            return True
        return False

    def accept_symbol(self, symbol: str) -> bool:
        token = self.peek()
        if token is not None and token.kind == "symbol" and token.value == symbol:
            self.at += 1
            return True
        return False

    def expect(self, *words: str) -> str:
        if not self.at_word(*words):
            wanted = " or ".join(words)
            raise self.error(f"expected {wanted} but found {self.found()}")
        return self.take().value.upper()

    def expect_symbol(self, symbol: str) -> None:
        if not self.accept_symbol(symbol):
            raise self.error(f"expected {symbol!r} but found {self.found()}")

    def table_name(self) -> TableName:
        """``table``, ``db.table`` or ``` `db`.`table` ``` (lower-cased); each part letters,
        digits and underscores."""
        token = self.peek()
        if token is None or not token.is_name:
            raise self.error(f"expected a table name ([db.]table) but found {self.found()}")
        first = self.take().value
        if not self.accept_symbol("."):
            return self._named(DEFAULT_DATABASE, first.lower())
        token = self.peek()
        if token is None or not token.is_name:
            raise self.error(f"expected a table name after {first!r}. but found {self.found()}")
        second = self.take().value
        following = self.peek()
        if following is not None and following.kind == "symbol" and following.value == ".":
            raise self.error("a table name has at most two parts (db.table)")
        return self._named(first.lower(), second.lower())

    def _named(self, database: str, table: str) -> TableName:
        problem = name_problem(database, table)
        if problem is not None:
            raise self.error(problem)
        return TableName(database, table)

    def string(self, what: str) -> str:
        token = self.peek()
        if token is None or token.kind != "string":
            raise self.error(f"expected {what} as a quoted string but found {self.found()}")
        return self.take().value

    def integer(self, what: str) -> int:
        token = self.peek()
        if token is None or token.kind != "number" or not token.value.isdigit():
            raise self.error(f"expected {what} (a whole number) but found {self.found()}")
        return int(self.take().value)

    def segment_ids(self) -> list[str]:
        """``(0, 1, 2.1)``: segment ids as numbers (or quoted strings), at least one."""
        self.expect_symbol("(")
        ids: list[str] = []
        while True:
            token = self.peek()
            if token is None or token.kind not in ("number", "string"):
                raise self.error(f"expected a segment id (like 3 or 0.1) but found {self.found()}")
            ids.append(self.take().value.strip())
            if self.accept_symbol(")"):
                return ids
            self.expect_symbol(",")

    def options(self) -> dict[str, str]:
        """``('key'='value', ...)``: keys lower-cased (CarbonData's options are case-insensitive)."""
        self.expect_symbol("(")
        found: dict[str, str] = {}
        if self.accept_symbol(")"):
            return found
        while True:
            key = self.string("an option name").strip().lower()
            self.expect_symbol("=")
            value = self.string(f"the value of option {key!r}")
            if key in found:
                raise self.error(f"option {key!r} is given twice")
            found[key] = value
            if self.accept_symbol(")"):
                return found
            self.expect_symbol(",")

    def partition_spec(self) -> dict[str, str]:
        """``(col='value', ...)``: columns lower-cased, each at most once."""
        self.expect_symbol("(")
        found: dict[str, str] = {}
        while True:
            token = self.take()
            if not token.is_name:
                raise self.error(f"expected a partition column but found {token.value!r}")
            column = token.value.lower()
            self.expect_symbol("=")
            value = self.string(f"the value of partition column {token.value!r}")
            if column in found:
                raise self.error(f"partition column {column!r} is given twice")
            found[column] = value
            if self.accept_symbol(")"):
                return found
            self.expect_symbol(",")

    def end(self) -> None:
        if not self.at_end():
            raise self.error(f"unexpected {self.found()} after the end of the statement")


def leading_words(tokens: list[Token], count: int = 4) -> list[str]:
    """The first ``count`` tokens, upper-cased words (others as they are)."""
    return [t.value.upper() if t.kind == "word" else t.value for t in tokens[:count]]


def boolean_option(cursor: Cursor, options: dict[str, str], key: str, default: bool) -> bool:
    """A ``'true'``/``'false'`` option (any case)."""
    value = options.get(key)
    if value is None:
        return default
    if value.strip().lower() not in ("true", "false"):
        raise cursor.error(f"option {key!r} must be 'true' or 'false', got {value!r}")
    return value.strip().lower() == "true"


def spark_message(error: BaseException) -> str:
    """Spark's own message: its first line that says something (its error class and text; the
    plan and stack follow), else the error's type, so a reason is never empty."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


@contextmanager
def spark_errors(statement: str) -> Iterator[None]:
    """Make Spark's errors while metatxn runs ``statement`` an InvalidOptionError quoting it.

    Analysis errors (an unknown column) and runtime errors (``DIVIDE_BY_ZERO``, a value that
    does not cast) alike: the statement is metatxn's, so its failures are TxnErrors. Statements
    handed to ``spark.sql`` whole are Spark's own and keep Spark's errors.
    """
    # pyspark turns the JVM's errors into PySparkExceptions; a raw Py4JJavaError is what is
    # left when a call bypasses that conversion.
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JJavaError) as exc:
        raise InvalidOptionError(f"Spark cannot run it: {spark_message(exc)}, in: {statement!r}\n"
                                 "Nothing was written") from exc


@contextmanager
def quoting(statement: str) -> Iterator[None]:
    """Make every TxnError raised inside name the statement it comes from (the same error, its
    message extended, so its type and structured fields stay what the operation raised)."""
    try:
        yield
    except TxnError as exc:
        if repr(statement) not in str(exc):
            exc.args = (f"{exc}\nStatement: {statement!r}",)
        raise
