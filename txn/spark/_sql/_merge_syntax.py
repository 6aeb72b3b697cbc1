"""MERGE INTO's grammar (Spark 3.4+ and 4): the statement cut into its parts, as their own text.

``MERGE INTO t [[AS] a] USING s | (query) [[AS] b] ON cond`` followed by ``WHEN`` clauses, in
Spark's order: every ``WHEN MATCHED [AND cond] THEN UPDATE SET c = e, ... | UPDATE SET * |
DELETE`` first, then ``WHEN NOT MATCHED [BY TARGET] [AND cond] THEN INSERT (c, ...) VALUES (e,
...) | INSERT *``, then ``WHEN NOT MATCHED BY SOURCE [AND cond] THEN UPDATE SET ... | DELETE``;
of each kind only the last clause may omit its condition (Spark's
``NON_LAST_MATCHED_CLAUSE_OMIT_CONDITION`` and its two siblings).

sqlglot reads the statement (its tree checks the structure: the clauses, their kinds and
actions, the columns set or inserted); every expression metatxn hands to Spark (the ON
condition, clause conditions, SET and VALUES expressions, the source query) is cut from the
statement's own text with the hand tokenizer, where ``CASE ... END`` nests as brackets do, so a
``WHEN`` or ``THEN`` of a ``CASE`` is never taken for the statement's. The cuts are checked
against the tree (as many clauses, assignments and values).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from ._catalog import TableName
from ._parse import Cursor, Token, enclosed, refused, source_text
from ._tree import name_of, parse, problem, spark_text

FORM = ("MERGE INTO [db.]table [[AS] alias] USING [db.]source | (query) [[AS] alias] ON condition "
        "WHEN MATCHED [AND condition] THEN UPDATE SET column = expression, ... | UPDATE SET * | DELETE "
        "... WHEN NOT MATCHED [BY TARGET] [AND condition] THEN INSERT (column, ...) VALUES "
        "(expression, ...) | INSERT * ... WHEN NOT MATCHED BY SOURCE [AND condition] THEN UPDATE "
        "SET ... | DELETE ...")

MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE = "MATCHED", "NOT MATCHED", "NOT MATCHED BY SOURCE"
_ORDER = (MATCHED, NOT_MATCHED, NOT_MATCHED_BY_SOURCE)


@dataclass(frozen=True)
class Clause:
    """One ``WHEN`` clause: its kind (:data:`MATCHED`, ...), condition (None: always), and action
    (``UPDATE``, ``DELETE`` or ``INSERT``). ``assignments``: column as written -> expression
    (UPDATE SET; INSERT's listed columns and values); ``star``: ``UPDATE SET *`` or
    ``INSERT *``."""

    kind: str
    condition: str | None
    action: str
    assignments: tuple[tuple[str, str], ...] = ()
    star: bool = False
    listed: bool = False  #: INSERT named its columns (or VALUES gave all in order)


@dataclass(frozen=True)
class Merge:
    """A MERGE statement's parts, each the statement's own text."""

    target: TableName
    target_alias: str
    source: str  #: a table name, or a query (without its brackets)
    source_is_query: bool
    source_alias: str
    on: str
    clauses: tuple[Clause, ...]


def _depths(tokens: list[Token]) -> list[int]:
    """Each token's depth: brackets nest, and so does ``CASE ... END`` (its WHEN, THEN, ELSE and
    AND belong to an expression, not to the statement)."""
    found = []
    depth = 0
    for token in tokens:
        closing = (token.kind == "symbol" and token.value in ")]}") or token.is_word("END")
        if closing:
            depth = max(depth - 1, 0)
        found.append(depth)
        if (token.kind == "symbol" and token.value in "([{") or token.is_word("CASE"):
            depth += 1
    return found


def _top(tokens: list[Token], word: str, after: int = 0) -> list[int]:
    """Where ``word`` is, at depth 0, from ``after`` on."""
    return [i for i, (token, depth) in enumerate(zip(tokens, _depths(tokens), strict=True))
            if i >= after and depth == 0 and token.is_word(word)]


def _split(statement: str, tokens: list[Token]) -> list[list[Token]]:
    """``tokens`` cut at top-level commas (CASE ... END nesting)."""
    pieces: list[list[Token]] = [[]]
    for token, depth in zip(tokens, _depths(tokens), strict=True):
        if depth == 0 and token.kind == "symbol" and token.value == ",":
            pieces.append([])
        else:
            pieces[-1].append(token)
    if any(not piece for piece in pieces):
        raise refused(statement, "an empty item in a list", FORM)
    return pieces


def _column(statement: str, node: exp.Expression) -> str:
    if not isinstance(node, exp.Column):
        raise refused(statement, f"{spark_text(node)!r} is not a column of the target", FORM)
    return node.name


def _clause(statement: str, tokens: list[Token], when: exp.When, target_alias: str) -> Clause:
    """One WHEN clause from its tokens (``WHEN`` first) and sqlglot's reading of it."""
    cursor = Cursor(statement, FORM, tokens)
    cursor.expect("WHEN")
    matched = not cursor.accept("NOT")
    cursor.expect("MATCHED")
    kind = MATCHED
    if not matched:
        kind = NOT_MATCHED
        if cursor.accept("BY"):
            kind = NOT_MATCHED_BY_SOURCE if cursor.expect("TARGET", "SOURCE") == "SOURCE" else NOT_MATCHED
    thens = _top(tokens, "THEN", cursor.at)
    if not thens:
        raise refused(statement, "a WHEN clause needs THEN", FORM)
    then = thens[0]
    condition = None
    if cursor.accept("AND"):
        if cursor.at >= then:
            raise refused(statement, "AND needs a condition", FORM)
        condition = source_text(statement, tokens[cursor.at:then])
    elif cursor.at != then:
        raise refused(statement, f"expected AND or THEN but found {cursor.found()}", FORM)
    if (when.args.get("condition") is None) != (condition is None):
        raise refused(statement, "cannot read a WHEN clause's condition", FORM)
    action = tokens[then + 1:]
    action_cursor = Cursor(statement, FORM, action)
    verb = action_cursor.expect("UPDATE", "DELETE", "INSERT")
    allowed = {MATCHED: ("UPDATE", "DELETE"), NOT_MATCHED: ("INSERT",),
               NOT_MATCHED_BY_SOURCE: ("UPDATE", "DELETE")}[kind]
    if verb not in allowed:
        raise refused(statement, f"WHEN {kind} THEN {verb} is not Spark's: WHEN {kind} takes "
                                 f"{' or '.join(allowed)}", FORM)
    then_node = when.args.get("then")
    if verb == "DELETE":
        action_cursor.end()
        return Clause(kind, condition, verb)
    if verb == "UPDATE":
        action_cursor.expect("SET")
        rest = action[action_cursor.at:]
        if len(rest) == 1 and rest[0].kind == "symbol" and rest[0].value == "*":
            if kind == NOT_MATCHED_BY_SOURCE:
                raise refused(statement, "WHEN NOT MATCHED BY SOURCE has no source row: UPDATE SET * is "
                                         "not allowed there (Spark refuses it too)", FORM)
            return Clause(kind, condition, verb, star=True)
        if not isinstance(then_node, exp.Update):
            raise refused(statement, "cannot read UPDATE SET", FORM)
        pieces = _split(statement, rest)
        if len(pieces) != len(then_node.expressions):
            raise refused(statement, "cannot read the SET list", FORM)
        assignments = []
        for piece, node in zip(pieces, then_node.expressions, strict=True):
            if not isinstance(node, exp.EQ):
                raise refused(statement, f"{spark_text(node)!r} is not an assignment", FORM)
            column = node.this
            qualifier = column.table if isinstance(column, exp.Column) else ""
            if qualifier and qualifier.lower() != target_alias.lower():
                raise refused(statement, f"SET {spark_text(column)}: the columns set are the target's "
                                         f"({target_alias}.column or column)", FORM)
            equals = next((i for i, (token, depth) in enumerate(zip(piece, _depths(piece), strict=True))
                           if depth == 0 and token.kind == "symbol" and token.value == "="), None)
            if equals is None or equals + 1 >= len(piece):
                raise refused(statement, "cannot read the SET list", FORM)
            assignments.append((_column(statement, column), source_text(statement, piece[equals + 1:])))
        return Clause(kind, condition, verb, tuple(assignments))
    rest = action[action_cursor.at:]
    if len(rest) == 1 and rest[0].kind == "symbol" and rest[0].value == "*":
        return Clause(kind, condition, verb, star=True)
    if not isinstance(then_node, exp.Insert):
        raise refused(statement, "cannot read INSERT (columns) VALUES (expressions)", FORM)
    values_at = _top(rest, "VALUES")
    if len(values_at) != 1:
        raise refused(statement, "expected INSERT [(column, ...)] VALUES (expression, ...)", FORM)
    listed_tokens = rest[:values_at[0]]
    value_tokens = enclosed(rest[values_at[0] + 1:])
    if value_tokens is None:
        raise refused(statement, "INSERT's VALUES must be one bracketed list", FORM)
    values = [source_text(statement, piece) for piece in _split(statement, value_tokens)]
    node = then_node.this
    if listed_tokens:
        if not isinstance(node, exp.Tuple) or enclosed(listed_tokens) is None:
            raise refused(statement, "cannot read INSERT's column list", FORM)
        columns = [_column(statement, c) for c in node.expressions]
        if len(columns) != len(values):
            raise refused(statement, f"INSERT names {len(columns)} column(s) but VALUES gives "
                                     f"{len(values)}", FORM)
        return Clause(kind, condition, verb, tuple(zip(columns, values, strict=True)), listed=True)
    return Clause(kind, condition, verb, tuple(("", v) for v in values), listed=False)


def _check_order(statement: str, clauses: list[Clause]) -> None:
    """Spark's order of clause kinds, and only the last of a kind without a condition."""
    ranks = [_ORDER.index(c.kind) for c in clauses]
    for before, after, clause in zip(ranks, ranks[1:], clauses[1:], strict=False):
        if after < before:
            raise refused(statement, f"WHEN {clause.kind} comes after a WHEN {_ORDER[before]} clause; "
                                     "Spark takes the MATCHED clauses first, then NOT MATCHED, then NOT "
                                     "MATCHED BY SOURCE", FORM)
    for index, clause in enumerate(clauses):
        later = [c for c in clauses[index + 1:] if c.kind == clause.kind]
        if clause.condition is None and later:
            raise refused(statement, f"only the last WHEN {clause.kind} clause may omit its condition "
                                     "(Spark: NON_LAST_MATCHED_CLAUSE_OMIT_CONDITION)", FORM)


def is_merge(tokens: list[Token]) -> bool:
    return len(tokens) >= 2 and tokens[0].is_word("MERGE") and tokens[1].is_word("INTO")


def target_name(statement: str, tokens: list[Token]) -> TableName:
    cursor = Cursor(statement, FORM, tokens)
    cursor.at = 2
    return cursor.table_name()


def read(statement: str, tokens: list[Token]) -> Merge:
    """The statement's parts (InvalidOptionError quoting it and :data:`FORM` when it is not a
    MERGE metatxn can read)."""
    tree = parse(statement)
    if not isinstance(tree, exp.Merge):
        raise refused(statement, f"cannot read the statement: {problem(statement)}", FORM)
    target = tree.this
    name = target_name(statement, tokens)
    if not isinstance(target, exp.Table) or name_of(target) != name:
        raise refused(statement, "expected one table to merge into", FORM)
    usings, ons, whens = _top(tokens, "USING"), _top(tokens, "ON"), _top(tokens, "WHEN")
    if len(usings) != 1 or not ons or not whens or not usings[0] < ons[0] < whens[0]:
        raise refused(statement, "expected USING source ON condition WHEN ...", FORM)
    using, on, first_when = usings[0], ons[0], whens[0]
    head = Cursor(statement, FORM, tokens[:using])
    head.at = 2
    head.table_name()
    target_alias = name.table
    if not head.at_end():
        head.accept("AS")
        token = head.take()
        if not token.is_name:
            raise refused(statement, f"expected an alias of the target but found {token.value!r}", FORM)
        target_alias = token.value
        head.end()
    source_tokens = tokens[using + 1:on]
    source_node = tree.args.get("using")
    alias = source_node.alias if isinstance(source_node, exp.Expression) else ""
    if alias:
        # The alias is the last token; AS before it is optional.
        body = source_tokens[:-2] if len(source_tokens) >= 2 and source_tokens[-2].is_word("AS") \
            else source_tokens[:-1]
    else:
        body = source_tokens
    inner = enclosed(body)
    if isinstance(source_node, exp.Subquery) and inner is not None:
        source, is_query = source_text(statement, inner), True
    elif isinstance(source_node, exp.Table) and body:
        cursor = Cursor(statement, FORM, body)
        cursor.table_name()
        cursor.end()
        source, is_query = source_text(statement, body), False
        alias = alias or body[-1].value
    else:
        raise refused(statement, "the source is a table name or a bracketed query", FORM)
    if not alias:
        raise refused(statement, "a source query needs an alias: USING (query) AS s", FORM)
    if first_when == on + 1:
        raise refused(statement, "ON needs a condition", FORM)
    condition = source_text(statement, tokens[on + 1:first_when])
    nodes = tree.args.get("whens")
    whens_read = nodes.expressions if isinstance(nodes, exp.Whens) else []
    bounds = [*whens, len(tokens)]
    if len(whens_read) != len(whens):
        raise refused(statement, "cannot read the WHEN clauses", FORM)
    clauses = [_clause(statement, tokens[start:end], node, target_alias)
               for start, end, node in zip(bounds, bounds[1:], whens_read, strict=False)]
    _check_order(statement, clauses)
    return Merge(name, target_alias, source, is_query, alias, condition, tuple(clauses))
