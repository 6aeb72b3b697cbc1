"""File pruning by column ranges, vectorised over the file table: one pass of Arrow kernels over
all files, instead of one guarantee expression per file for Arrow to simplify.

A filter is taken apart into its tree (pyarrow exposes no accessor for it, so the tree is read
from Arrow's own serialisation of the expression: an Arrow IPC file whose schema metadata lists
the nodes in prefix order and whose columns hold the literals and function options). Each node
becomes two boolean columns over the files:

* ``may_true``: some row of the file may make the node true;
* ``may_false``: some row may make it false.

``and``, ``or`` and ``not`` combine them exactly (``not`` swaps them); a comparison of a column
with a literal, ``is_null``, ``is_valid`` and ``is_in`` read the file's min, max, null count and
row count. A file is kept where the whole filter is ``may_true``: a row is selected only where the
filter is true, never where it is null.

Soundness: every column only ever over-approximates (a null, an unknown statistic or a node that
is not understood counts as "may"), so no file that holds a matching row is dropped. Statistics
are bounds (the writer leaves them unknown where a value is NaN or cannot be ordered). A filter
with a node this module does not understand (a cast, a function, two columns compared) still
prunes by the parts it understands; the result says it was not exact, and the caller then lets
Arrow simplify each remaining file's guarantee as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

#: ``is_in`` value sets up to this size are checked value by value; beyond, a file may match.
_MAX_SET = 64

_LINE = re.compile(r"^(call|end|field_ref|nested_field_ref|literal|options): '(.*)'$")
_FLIP = {"less": "greater", "less_equal": "greater_equal", "greater": "less",
         "greater_equal": "less_equal", "equal": "equal", "not_equal": "not_equal"}
_AND = ("and", "and_kleene")
_OR = ("or", "or_kleene")


class _Unknown(Exception):
    """The serialised expression has a shape this module does not read."""


@dataclass(frozen=True)
class _Node:
    kind: str  # "call", "field", "literal"
    name: str = ""  # function or field name
    args: tuple[_Node, ...] = ()
    value: Any = None  # a literal's pa.Scalar, a call's options (a struct scalar) or None


def _nodes(expression: ds.Expression) -> _Node:
    """The tree of ``expression``, from Arrow's serialisation of it (see the module docstring)."""
    buffer = expression.__reduce__()[1][0]
    reader = pa.ipc.open_file(buffer)
    literals = reader.read_all()
    text = reader.schema.to_string(show_field_metadata=False, show_schema_metadata=True,
                                   truncate_metadata=False)
    _, found, listing = text.partition("-- schema metadata --\n")
    if not found:
        raise _Unknown("no expression metadata")
    entries = []
    for line in listing.splitlines():
        match = _LINE.match(line)
        if match is None:  # a value with a line break (an odd column name): do not guess
            raise _Unknown(line)
        entries.append((match.group(1), match.group(2)))
    position = 0

    def parse() -> _Node:
        nonlocal position
        if position >= len(entries):
            raise _Unknown("truncated expression")
        key, value = entries[position]
        position += 1
        if key == "field_ref":
            return _Node("field", value)
        if key == "literal":
            return _Node("literal", value=literals.column(int(value))[0])
        if key == "nested_field_ref":
            position += int(value)
            return _Node("nested")
        if key != "call":
            raise _Unknown(key)
        args: list[_Node] = []
        options = None
        while True:
            if position >= len(entries):
                raise _Unknown("unterminated call")
            key, inner = entries[position]
            if key == "end":
                position += 1
                return _Node("call", value, tuple(args), options)
            if key == "options":
                options = literals.column(int(inner))[0]
                position += 1
                continue
            args.append(parse())

    root = parse()
    if position != len(entries):
        raise _Unknown("trailing entries")
    return root


class _Pruner:
    """Evaluates ``may_true``/``may_false`` of nodes over one file table's statistics."""

    def __init__(self, stats: pa.StructArray | None, rows: int) -> None:
        self._stats = stats
        self._rows = rows
        self.exact = True
        self._yes = pa.array([True] * rows, pa.bool_())
        self._no = pa.array([False] * rows, pa.bool_())

    def unknown(self) -> tuple[pa.Array, pa.Array]:
        self.exact = False
        return self._yes, self._yes

    def _column(self, name: str) -> tuple[pa.Array, pa.Array, pa.Array, pa.Array] | None:
        if self._stats is None or self._stats.type.get_field_index(name) < 0:
            return None
        # struct_field carries the parents' nulls down: a file without statistics, or without
        # them for this column, has every part unknown.
        column = pc.struct_field(self._stats, name)
        low, high, nulls, count = (pc.struct_field(column, part)
                                   for part in ("min", "max", "nulls", "count"))
        return low, high, nulls, count

    def visit(self, node: _Node) -> tuple[pa.Array, pa.Array]:
        if node.kind == "literal":
            value = node.value
            if isinstance(value, pa.BooleanScalar):
                if not value.is_valid:
                    return self._no, self._no
                return (self._yes, self._no) if value.as_py() else (self._no, self._yes)
            return self.unknown()
        if node.kind != "call":
            return self.unknown()
        name, args = node.name, node.args
        if name in _AND or name in _OR:
            left_true, left_false = self.visit(args[0])
            right_true, right_false = self.visit(args[1])
            if name in _AND:
                return pc.and_(left_true, right_true), pc.or_(left_false, right_false)
            return pc.or_(left_true, right_true), pc.and_(left_false, right_false)
        if name == "invert":
            may_true, may_false = self.visit(args[0])
            return may_false, may_true
        if name in _FLIP and len(args) == 2:
            return self._compare(name, args)
        if name in ("is_null", "is_valid") and len(args) == 1 and args[0].kind == "field":
            return self._nulls(name, args[0].name, node.value)
        if name == "is_in" and len(args) == 1 and args[0].kind == "field":
            return self._is_in(args[0].name, node.value)
        return self.unknown()

    def _compare(self, name: str, args: tuple[_Node, ...]) -> tuple[pa.Array, pa.Array]:
        left, right = args
        if left.kind == "literal" and right.kind == "field":
            name, left, right = _FLIP[name], right, left
        if left.kind != "field" or right.kind != "literal":
            return self.unknown()
        value: pa.Scalar = right.value
        if not value.is_valid:  # a comparison with null is null for every row: never true
            return self._no, self._no
        column = self._column(left.name)
        if column is None:
            return self.unknown()
        low, high, nulls, count = column
        try:
            some = pc.greater(pc.subtract(count, nulls), 0)  # the file has a non-null value
            below = pc.less(low, value)
            at_most = pc.less_equal(low, value)
            above = pc.greater(high, value)
            at_least = pc.greater_equal(high, value)
            single = pc.and_kleene(pc.equal(low, value), pc.equal(high, value))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            return self.unknown()  # no kernel for these types: Arrow will decide
        may_true, may_false = {
            "less": (below, at_least),
            "less_equal": (at_most, above),
            "greater": (above, at_most),
            "greater_equal": (at_least, below),
            "equal": (pc.and_kleene(at_most, at_least), pc.invert(single)),
            "not_equal": (pc.invert(single), pc.and_kleene(at_most, at_least)),
        }[name]
        return self._maybe(pc.and_kleene(some, may_true)), self._maybe(pc.and_kleene(some, may_false))

    def _nulls(self, name: str, field: str, options: Any) -> tuple[pa.Array, pa.Array]:
        column = self._column(field)
        if column is None or (options is not None and options.get("nan_is_null")
                              and options["nan_is_null"].as_py()):
            return self.unknown()
        _, _, nulls, count = column
        has_null = self._maybe(pc.greater(nulls, 0))
        has_value = self._maybe(pc.greater(pc.subtract(count, nulls), 0))
        return (has_null, has_value) if name == "is_null" else (has_value, has_null)

    def _is_in(self, field: str, options: Any) -> tuple[pa.Array, pa.Array]:
        column = self._column(field)
        if column is None or options is None:
            return self.unknown()
        values = options["value_set"].values
        if values is None or len(values) > _MAX_SET:
            return self.unknown()
        low, high, nulls, count = column
        some = pc.greater(pc.subtract(count, nulls), 0)
        inside = self._no
        try:
            for value in values:
                if value.is_valid:
                    inside = pc.or_kleene(inside, pc.and_kleene(pc.less_equal(low, value),
                                                                pc.greater_equal(high, value)))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            return self.unknown()
        may_true = self._maybe(pc.and_kleene(some, inside))
        if values.null_count:  # null rows may match a null in the set (or be null: never true)
            may_true = pc.or_(may_true, self._maybe(pc.greater(nulls, 0)))
        return may_true, self._yes  # whether a row may fall outside the set: not worth bounding

    def _maybe(self, mask: pa.Array) -> pa.Array:
        """Unknown (null) counts as "may"."""
        return pc.fill_null(mask, True) if mask.null_count else mask


@dataclass(frozen=True)
class Pruned:
    """Which files a filter may match: ``keep`` over the file table's rows. ``exact`` says every
    node was understood (no per-file check by Arrow can drop more)."""

    keep: pa.Array
    exact: bool


def prune(expression: ds.Expression, stats: pa.StructArray | None, rows: int) -> Pruned:
    """The files (rows of a file table with ``stats``, its statistics column) that may hold a
    row matching ``expression``, which was already bound to the table's schema."""
    try:
        root = _nodes(expression)
    except (_Unknown, pa.ArrowException, ValueError, IndexError, KeyError):
        return Pruned(pa.array([True] * rows, pa.bool_()), False)
    pruner = _Pruner(stats, rows)
    may_true, _ = pruner.visit(root)
    return Pruned(pruner._maybe(may_true), pruner.exact)
