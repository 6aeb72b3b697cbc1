"""A SQL predicate as a pyarrow expression, for pruning files by their column ranges.

``txn.spark.read(filter="o_orderdate >= DATE '2026-03-01' AND o_orderstatus = 'O'")`` hands the
string to Spark, which filters the rows (with its own Parquet pushdown); this module only
translates the common shape of such predicates so the snapshot can skip whole files first:
comparisons of a column with a literal, ``BETWEEN``, ``IN (...)``, ``IS [NOT] NULL``, ``AND``,
``OR``, ``NOT`` and parentheses. Anything else translates to None, which prunes nothing; the
answer is the same either way, only slower.
"""

from __future__ import annotations

import datetime as dt
import re
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
    | (?P<word>`[^`]+`|[A-Za-z_][A-Za-z_0-9]*)
    )""", re.VERBOSE)
_COMPARE = {"=": "==", "==": "==", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


class _Unsupported(Exception):
    pass


def to_expression(sql: str, schema: pa.Schema) -> ds.Expression | None:
    """``sql`` as a pyarrow expression over ``schema``, or None if it is not of a known shape."""
    try:
        parser = _Parser(_tokens(sql), schema)
        expression = parser.disjunction()
        if parser.peek() is not None:
            return None
        return expression
    except _Unsupported:
        return None


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

    def disjunction(self) -> ds.Expression:
        left = self._conjunction()
        while self._keyword("OR"):
            left = left | self._conjunction()
        return left

    def _conjunction(self) -> ds.Expression:
        left = self._negation()
        while self._keyword("AND"):
            left = left & self._negation()
        return left

    def _negation(self) -> ds.Expression:
        if self._keyword("NOT"):
            return ~self._negation()
        token = self.peek()
        if token == ("op", "("):
            self._next()
            inner = self.disjunction()
            self._expect(")")
            return inner
        return self._predicate()

    def _predicate(self) -> ds.Expression:
        kind, name = self._next()
        if kind != "word":
            raise _Unsupported(name)
        name = name.strip("`")
        index = self._schema.get_field_index(name)
        if index < 0:
            raise _Unsupported(name)
        field, data_type = pc.field(name), self._schema.field(index).type
        if self._keyword("IS"):
            negated = self._keyword("NOT")
            self._expect("NULL")
            return ~field.is_null() if negated else field.is_null()
        negated = self._keyword("NOT")
        if self._keyword("BETWEEN"):
            low = self._literal(data_type)
            self._expect("AND")
            high = self._literal(data_type)
            inside = (field >= low) & (field <= high)
            return ~inside if negated else inside
        if self._keyword("IN"):
            self._expect("(")
            values = [self._literal(data_type)]
            while self.peek() == ("op", ","):
                self._next()
                values.append(self._literal(data_type))
            self._expect(")")
            inside = field.isin(pa.array([v.as_py() for v in values], data_type))
            return ~inside if negated else inside
        if negated:
            raise _Unsupported("NOT")
        kind, op = self._next()
        if kind != "op" or op not in _COMPARE:
            raise _Unsupported(op)
        value = self._literal(data_type)
        return {"==": field == value, "!=": field != value, "<": field < value,
                "<=": field <= value, ">": field > value, ">=": field >= value}[_COMPARE[op]]

    def _literal(self, data_type: pa.DataType) -> pa.Scalar:
        kind, text = self._next()
        value: Any
        if kind == "string":
            if "\\" in text:
                raise _Unsupported("Spark decodes backslash escapes in literals")
            value = text[1:-1].replace("''", "'")
        elif kind == "number":
            value = Decimal(text) if pa.types.is_decimal(data_type) else (
                float(text) if any(c in text for c in ".eE") else int(text))
        elif kind == "word" and text.upper() in ("TRUE", "FALSE"):
            value = text.upper() == "TRUE"
        elif kind == "word" and text.upper() in ("DATE", "TIMESTAMP"):
            string_kind, raw = self._next()
            if string_kind != "string":
                raise _Unsupported(raw)
            raw = raw[1:-1]
            value = dt.date.fromisoformat(raw) if text.upper() == "DATE" else dt.datetime.fromisoformat(raw)
            if isinstance(value, dt.datetime) and value.tzinfo is None:
                # Spark reads it in the session's time zone, which this translation does not know.
                raise _Unsupported("a timestamp literal without a time zone")
        else:
            raise _Unsupported(text)
        try:
            if isinstance(value, str) and pa.types.is_date(data_type):
                value = dt.date.fromisoformat(value)
            return pa.scalar(value).cast(data_type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError) as exc:
            raise _Unsupported(str(exc)) from None
