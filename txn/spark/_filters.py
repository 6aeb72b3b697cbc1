"""A SQL predicate as a pyarrow expression, for pruning files by their column ranges.

``txn.spark.read(filter="o_orderdate >= DATE '2026-03-01' AND o_orderstatus = 'O'")`` (and SQL
``UPDATE``/``DELETE ... WHERE``) hands the string to Spark, which filters the rows; this module
only translates the common shape of such predicates so the snapshot can skip whole files first.

Guarantee (proven against Spark by tests/spark/test_predicates_differential.py): every row
Spark's predicate matches is in a file the translation keeps. The translation is built of
*atoms*, each read as Spark reads it or not at all:

* a column compared with a literal (either side; ``=``, ``==``, ``<>``, ``!=``, ``<``, ``<=``,
  ``>``, ``>=``), ``[NOT] BETWEEN``, ``[NOT] IN (...)``, ``IS [NOT] NULL``, a bare boolean
  column; a column named in any case (Spark resolves names case-insensitively), backticked or not;
* a literal only where Spark compares it as the column's own type: of the column's kind (a
  string for a string column, a whole number for an integer column, ...), because Spark converts
  mismatched sides its own way (``name = 5`` reads the string as a number, ``ratio > 0.1`` on a
  ``float`` column compares in double precision), and only spelled the way this module reads
  exactly as Spark does: no backslash (Spark's decoding of escapes depends on
  ``spark.sql.parser.escapedStringLiterals``), no double-quoted string (an identifier under
  ``spark.sql.ansi.doubleQuotedIdentifiers``), dates as ``yyyy-mm-dd``, timestamps with their
  time zone (else Spark reads them in the session's, which this module does not know).

Anything else (a function, arithmetic, a NULL literal, another literal) is an unknown atom: it
prunes nothing. ``a AND b`` prunes by ``a`` alone when ``b`` is unknown; an ``OR`` or ``NOT``
over an unknown part prunes nothing. A ``NOT`` is translated only over a part whose translation
is false exactly where Spark's is false. A predicate this module cannot even split into atoms
(an unbalanced parenthesis, a comment) translates to None, which prunes nothing: the answer is
the same either way, only slower.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

# Strings and backticked names as Spark's lexer ends them (a backslash escapes the next
# character, a doubled quote is a quote), so that what follows them is read where Spark reads it.
_TOKEN = re.compile(r"""
    \s*(?:
      (?P<comment>--|/\*)
    | (?P<string>'(?:[^'\\]|\\.|'')*')
    | (?P<dquoted>"(?:[^"\\]|\\.|"")*")
    | (?P<number>-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?(?:BD|[LSYDF])?(?![A-Za-z_0-9]))
    | (?P<op><=>|<=|>=|<>|!=|==|=|<|>|\(|\)|,|\|\||[-+*/%.])
    | (?P<word>`(?:[^`]|``)+`|[A-Za-z_][A-Za-z_0-9]*)
    )""", re.VERBOSE | re.DOTALL | re.IGNORECASE)
_COMPARE = {"=": "==", "==": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
#: A date and a timestamp with its zone as text that Spark and ``fromisoformat`` read alike.
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ISO_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})")
#: Words that end an atom (outside parentheses, and an AND not closing a BETWEEN).
_BOUNDARY = ("AND", "OR")


class _Unsupported(Exception):
    pass


def to_expression(sql: str, schema: pa.Schema, *, case_sensitive: bool = False) -> ds.Expression | None:
    """``sql`` as a pyarrow expression over ``schema`` that keeps every row ``sql`` matches in
    Spark, or None if no part of it is of a known shape. ``case_sensitive``: Spark's
    ``spark.sql.caseSensitive`` (then a name is only its exact column: another case may name a
    joined column)."""
    try:
        parser = _Parser(_tokens(sql), schema, case_sensitive)
        expression = parser.disjunction()
        if parser.peek() is not None:
            return None
        return expression.expression
    except _Unsupported:
        return None


@dataclass(frozen=True)
class _Translated:
    """A translation: ``expression`` None when unknown; ``exact`` when it is true where Spark's
    is true and false where Spark's is false (else it may be true on more rows: only right for
    pruning outside a NOT)."""

    expression: ds.Expression | None
    exact: bool


_UNKNOWN = _Translated(None, False)


def _both(left: _Translated, right: _Translated) -> _Translated:
    if left.expression is None or right.expression is None:
        return _Translated(left.expression if right.expression is None else right.expression, False)
    return _Translated(left.expression & right.expression, left.exact and right.exact)


def _either(left: _Translated, right: _Translated) -> _Translated:
    if left.expression is None or right.expression is None:
        return _UNKNOWN
    return _Translated(left.expression | right.expression, left.exact and right.exact)


def _negated(inner: _Translated) -> _Translated:
    return _Translated(~inner.expression, True) if inner.exact and inner.expression is not None else _UNKNOWN


def _tokens(sql: str) -> list[tuple[str, str]]:
    tokens, at = [], 0
    while at < len(sql):
        if sql[at:].strip() == "":
            break
        match = _TOKEN.match(sql, at)
        if match is None or match.end() == at:
            raise _Unsupported(sql[at:])
        kind = match.lastgroup
        assert kind is not None
        if kind == "comment":
            # Spark ignores the rest of the line (or up to ``*/``): one could hide an ``AND``.
            raise _Unsupported("a comment")
        tokens.append((kind, match.group(kind)))
        at = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], schema: pa.Schema, case_sensitive: bool) -> None:
        self._tokens = tokens
        self._at = 0
        self._schema = schema
        self._case_sensitive = case_sensitive

    def peek(self) -> tuple[str, str] | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _next(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise _Unsupported("unexpected end")
        self._at += 1
        return token

    def _is_word(self, token: tuple[str, str] | None, *words: str) -> bool:
        return token is not None and token[0] == "word" and token[1].upper() in words

    def _keyword(self, *words: str) -> bool:
        if self._is_word(self.peek(), *words):
            self._at += 1
            return True
        return False

    def _expect(self, value: str) -> None:
        _kind, text = self._next()
        if text.upper() != value:
            raise _Unsupported(text)

    def disjunction(self) -> _Translated:
        left = self._conjunction()
        while self._keyword("OR"):
            left = _either(left, self._conjunction())
        return left

    def _conjunction(self) -> _Translated:
        left = self._negation()
        while self._keyword("AND"):
            left = _both(left, self._negation())
        return left

    def _negation(self) -> _Translated:
        if self._keyword("NOT"):
            return _negated(self._negation())
        start = self._at
        if self.peek() == ("op", "("):
            self._next()
            inner = self.disjunction()
            if self.peek() == ("op", ")"):
                self._next()
                if self._at_boundary():
                    return inner
            # ``(a) = b``, ``(x + 1) > 2``: the parentheses were part of a larger atom.
        else:
            try:
                translated = self._atom()
                if self._at_boundary():
                    return translated
            except _Unsupported:
                pass
        self._at = start
        self._skip_atom()
        return _UNKNOWN

    def _at_boundary(self) -> bool:
        token = self.peek()
        return token is None or token == ("op", ")") or self._is_word(token, *_BOUNDARY)

    def _skip_atom(self) -> None:
        """Past one atom this module does not read: up to the next AND or OR outside
        parentheses, CASE ... END and BETWEEN ... AND, or a closing parenthesis."""
        depth, cases, betweens, skipped = 0, 0, 0, 0
        while (token := self.peek()) is not None:
            if depth == 0 and cases == 0:
                if token == ("op", ")"):
                    break
                if self._is_word(token, "OR") or (self._is_word(token, "AND") and betweens == 0):
                    break
            if token == ("op", "("):
                depth += 1
            elif token == ("op", ")"):
                depth -= 1
            elif self._is_word(token, "CASE"):
                cases += 1
            elif self._is_word(token, "END") and cases:
                cases -= 1
            elif depth == 0 and cases == 0 and self._is_word(token, "BETWEEN"):
                betweens += 1
            elif depth == 0 and cases == 0 and self._is_word(token, "AND"):
                betweens -= 1
            self._at += 1
            skipped += 1
        if skipped == 0 or depth != 0 or cases != 0 or betweens != 0:
            raise _Unsupported("an atom this module cannot delimit")

    def _column(self) -> tuple[str, pa.DataType] | None:
        """The next token as a column of the schema (exact name, else its only case-insensitive
        match), or None (the token is left unread)."""
        token = self.peek()
        if token is None or token[0] != "word":
            return None
        name = token[1]
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        elif name.upper() in ("NULL", "TRUE", "FALSE", "NOT", "DATE", "TIMESTAMP"):
            return None
        index = self._schema.get_field_index(name)
        if index < 0 and self._case_sensitive:
            return None
        if index < 0:
            folded = [i for i, n in enumerate(self._schema.names) if n.lower() == name.lower()]
            if len(folded) != 1:
                return None
            index = folded[0]
        following = self._tokens[self._at + 1] if self._at + 1 < len(self._tokens) else None
        if following in (("op", "("), ("op", ".")):
            return None  # a function of that name, or a struct field
        self._at += 1
        field = self._schema.field(index)
        return field.name, field.type

    def _atom(self) -> _Translated:
        column = self._column()
        if column is None:
            return self._literal_first()
        name, data_type = column
        field = pc.field(name)
        if self._at_boundary():
            if not pa.types.is_boolean(data_type):
                raise _Unsupported(name)
            return _Translated(field == pa.scalar(True), True)
        if self._keyword("IS"):
            negated = self._keyword("NOT")
            self._expect("NULL")
            return _Translated(~field.is_null() if negated else field.is_null(), True)
        negated = self._keyword("NOT")
        if self._keyword("BETWEEN"):
            low = self._literal(data_type)
            self._expect("AND")
            high = self._literal(data_type)
            if low is None or high is None:
                return _UNKNOWN
            inside = (field >= low) & (field <= high)
            return _Translated(~inside if negated else inside, True)
        if self._keyword("IN"):
            self._expect("(")
            values = [self._literal(data_type)]
            while self.peek() == ("op", ","):
                self._next()
                values.append(self._literal(data_type))
            self._expect(")")
            if any(v is None for v in values):
                return _UNKNOWN
            inside = field.isin(pa.array([v.as_py() for v in values if v is not None], data_type))
            return _Translated(~inside if negated else inside, True)
        if negated:
            raise _Unsupported("NOT")
        kind, op = self._next()
        if kind != "op" or op not in _COMPARE:
            raise _Unsupported(op)
        value = self._literal(data_type)
        return _UNKNOWN if value is None else _compared(field, _COMPARE[op], value)

    def _literal_first(self) -> _Translated:
        """``<literal> <op> <column>``, as ``<column> <flipped op> <literal>``."""
        start = self._at
        self._value()  # only to find where the literal ends
        kind, op = self._next()
        if kind != "op" or op not in _COMPARE:
            raise _Unsupported(op)
        column = self._column()
        if column is None:
            raise _Unsupported("no column")
        name, data_type = column
        end = self._at
        self._at = start
        value = self._literal(data_type)
        self._at = end
        return _UNKNOWN if value is None else _compared(pc.field(name), _FLIPPED[_COMPARE[op]], value)

    def _literal(self, data_type: pa.DataType) -> pa.Scalar | None:
        """The next literal as a value of the column's type; None when it is a literal of another
        kind than the column's (Spark would compare them its own way) or spelled in a way this
        module does not read exactly as Spark does."""
        kind, value = self._value()
        try:
            if not _comparable(kind, value, data_type):
                return None
            if kind == "string" and pa.types.is_date(data_type):
                value = dt.date.fromisoformat(value)
            if kind == "decimal" and pa.types.is_floating(data_type):
                value = float(value)  # correctly rounded, as Spark turns a decimal into a double
            if kind == "integer" and pa.types.is_decimal(data_type):
                value = Decimal(value)
            return pa.scalar(value).cast(data_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError, OverflowError):
            return None  # out of the column's range or precision: Spark widens, so unknown

    def _value(self) -> tuple[str, Any]:
        """The next literal: its kind (string, integer, decimal, double, boolean, date,
        timestamp, or other: one this module does not read) and its value."""
        kind, text = self._next()
        if kind == "string":
            parts = [text]
            while (token := self.peek()) is not None and token[0] in ("string", "dquoted"):
                parts.append(self._next()[1])  # adjacent literals: Spark concatenates them
            if any("\\" in p or p.startswith('"') for p in parts):
                return "other", None
            return "string", "".join(p[1:-1].replace("''", "'") for p in parts)
        if kind == "dquoted":
            while (token := self.peek()) is not None and token[0] in ("string", "dquoted"):
                self._next()
            return "other", None
        if kind == "number":
            return _number(text)
        if kind == "word" and text.upper() in ("TRUE", "FALSE"):
            return "boolean", text.upper() == "TRUE"
        following = self.peek()
        if kind == "word" and text.upper() in ("DATE", "TIMESTAMP") and following is not None \
                and following[0] == "string":
            raw = self._next()[1]
            if "\\" in raw or "''" in raw:
                return "other", None
            raw = raw[1:-1]
            if text.upper() == "DATE":
                return ("date", dt.date.fromisoformat(raw)) if _ISO_DATE.fullmatch(raw) else ("other", None)
            if not _ISO_TIMESTAMP.fullmatch(raw):
                # Without a zone Spark reads it in the session's time zone, unknown here.
                return "other", None
            return "timestamp", dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        raise _Unsupported(text)


def case_sensitive(spark: Any) -> bool:
    """Whether ``spark`` resolves names case-sensitively (``to_expression``'s ``case_sensitive``)."""
    return str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"


def _number(text: str) -> tuple[str, Any]:
    """A numeric literal's kind as Spark types it: ``5`` a whole number, ``1.5``/``1.5BD``
    decimals, ``1e3``/``1.5D`` doubles; ``5L``, ``5S``, ``5Y`` and ``1.5F`` (a float, rounded
    once from the text) are left unread."""
    upper = text.upper()
    if upper.endswith("BD"):
        return "decimal", Decimal(upper[:-2])
    suffix = upper[-1] if upper[-1] in "LSYDF" else ""
    body = upper[:-1] if suffix else upper
    if suffix in ("L", "S", "Y", "F"):
        return "other", None
    if suffix == "D" or "E" in body:
        return "double", float(body)
    if "." in body:
        return "decimal", Decimal(body)
    return "integer", int(body)


def _compared(field: ds.Expression, op: str, value: pa.Scalar) -> _Translated:
    return _Translated({"==": field == value, "!=": field != value, "<": field < value,
                        "<=": field <= value, ">": field > value, ">=": field >= value}[op], True)


def _comparable(kind: str, value: Any, data_type: pa.DataType) -> bool:
    """Whether Spark compares a literal of ``kind`` with a column of ``data_type`` as the column's
    type, exactly as pyarrow will (after the literal is cast to that type).

    Spark widens both sides to a common type: an integer literal to a ``float`` column's type,
    but ``float`` and a decimal literal to double, a string column and a number to a number, a
    date column and a timestamp to a timestamp. Only the pairs below compare the way the column's
    own values do; a cast that loses range or precision fails in pyarrow (and so does not prune).
    """
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return kind == "string"
    if pa.types.is_integer(data_type):
        return kind == "integer"
    if pa.types.is_float32(data_type):
        return kind == "integer"
    if pa.types.is_float64(data_type):
        return kind in ("integer", "decimal", "double")
    if pa.types.is_decimal(data_type):
        return kind in ("integer", "decimal")
    if pa.types.is_boolean(data_type):
        return kind == "boolean"
    if pa.types.is_date(data_type):
        return kind == "date" or (kind == "string" and _ISO_DATE.fullmatch(value) is not None)
    if pa.types.is_timestamp(data_type):
        return kind == "timestamp" and data_type.tz is not None
    return False
