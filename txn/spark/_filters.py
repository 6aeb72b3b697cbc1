"""A SQL predicate as a pyarrow expression, for pruning files by their column ranges.

``txn.spark.read(filter="o_orderdate >= DATE '2026-03-01' AND o_orderstatus = 'O'")`` hands the
string to Spark, which filters the rows (with its own Parquet pushdown); this module only
translates the common shape of such predicates so the snapshot can skip whole files first:
comparisons of a column with a literal, ``BETWEEN``, ``IN (...)``, ``IS [NOT] NULL``, ``AND``,
``OR``, ``NOT`` and parentheses. Anything else translates to None, which prunes nothing; the
answer is the same either way, only slower.

Guarantee: every row Spark's predicate matches is in a file the translation keeps. So a
comparison is translated only where it means what Spark's means: the literal has the column's
own kind (a string for a string column, a whole number for an integer column, ...), because
Spark converts mismatched sides its own way (``name = 5`` reads the string as a number,
``ratio > 0.1`` on a ``float`` column compares in double precision), not the column's. A
comparison that cannot be translated makes the whole predicate None, except as a conjunct
outside any ``NOT``: ``a AND b`` prunes by ``a`` alone when only ``b`` is unknown.
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

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<string>'(?:[^']|'')*')
    | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    | (?P<op><=|>=|<>|!=|==|=|<|>|\(|\)|,)
    | (?P<word>`(?:[^`]|``)+`|[A-Za-z_][A-Za-z_0-9]*)
    )""", re.VERBOSE)
_COMPARE = {"=": "==", "==": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


class _Unsupported(Exception):
    pass


def to_expression(sql: str, schema: pa.Schema) -> ds.Expression | None:
    """``sql`` as a pyarrow expression over ``schema`` that keeps every row ``sql`` matches in
    Spark, or None if it is not of a known shape."""
    try:
        parser = _Parser(_tokens(sql), schema)
        expression = parser.disjunction()
        if parser.peek() is not None:
            return None
        return expression.expression
    except _Unsupported:
        return None


@dataclass(frozen=True)
class _Translated:
    """A translation: ``expression`` None when unknown; ``exact`` when it matches exactly the
    rows Spark's does (else it may match more: only right for pruning outside a NOT)."""

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
        tokens.append((kind, match.group(kind)))
        at = match.end()
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], schema: pa.Schema) -> None:
        self._tokens = tokens
        self._at = 0
        self._schema = schema

    def peek(self) -> tuple[str, str] | None:
        return self._tokens[self._at] if self._at < len(self._tokens) else None

    def _next(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise _Unsupported("unexpected end")
        self._at += 1
        return token

    def _keyword(self, *words: str) -> bool:
        token = self.peek()
        if token is not None and token[0] == "word" and token[1].upper() in words:
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
        token = self.peek()
        if token == ("op", "("):
            self._next()
            inner = self.disjunction()
            self._expect(")")
            return inner
        return self._predicate()

    def _predicate(self) -> _Translated:
        kind, name = self._next()
        if kind != "word":
            raise _Unsupported(name)
        if name.startswith("`"):
            name = name[1:-1].replace("``", "`")
        index = self._schema.get_field_index(name)
        if index < 0:
            raise _Unsupported(name)
        field, data_type = pc.field(name), self._schema.field(index).type
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
            known = [v for v in values if v is not None]
            if len(known) != len(values):
                return _UNKNOWN
            inside = field.isin(pa.array([v.as_py() for v in known], data_type))
            return _Translated(~inside if negated else inside, True)
        if negated:
            raise _Unsupported("NOT")
        kind, op = self._next()
        if kind != "op" or op not in _COMPARE:
            raise _Unsupported(op)
        value = self._literal(data_type)
        if value is None:
            return _UNKNOWN
        return _Translated({"==": field == value, "!=": field != value, "<": field < value,
                            "<=": field <= value, ">": field > value, ">=": field >= value}[_COMPARE[op]],
                           True)

    def _literal(self, data_type: pa.DataType) -> pa.Scalar | None:
        """The next literal as a value of the column's type; None when it is a literal of another
        kind than the column's (Spark would compare them its own way)."""
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
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError):
            return None  # out of the column's range or precision: Spark widens, so unknown

    def _value(self) -> tuple[str, Any]:
        """The next literal: its kind (string, integer, decimal, double, boolean, date,
        timestamp) and its value."""
        kind, text = self._next()
        if kind == "string":
            if "\\" in text:
                raise _Unsupported("Spark decodes backslash escapes in literals")
            return "string", text[1:-1].replace("''", "'")
        if kind == "number":
            if any(c in text for c in "eE"):
                return "double", float(text)
            return ("decimal", Decimal(text)) if "." in text else ("integer", int(text))
        if kind == "word" and text.upper() in ("TRUE", "FALSE"):
            return "boolean", text.upper() == "TRUE"
        if kind == "word" and text.upper() in ("DATE", "TIMESTAMP"):
            string_kind, raw = self._next()
            if string_kind != "string":
                raise _Unsupported(raw)
            raw = raw[1:-1]
            try:
                if text.upper() == "DATE":
                    return "date", dt.date.fromisoformat(raw)
                moment = dt.datetime.fromisoformat(raw)
            except ValueError:
                raise _Unsupported(raw) from None
            if moment.tzinfo is None:
                # Spark reads it in the session's time zone, which this translation does not know.
                raise _Unsupported("a timestamp literal without a time zone")
            return "timestamp", moment
        raise _Unsupported(text)


#: A date as text that Spark and ``date.fromisoformat`` read alike.
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


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
