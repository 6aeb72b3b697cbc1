"""File pruning by a SQL predicate against plain Spark: a differential test over generated
predicates.

``txn.spark.read(filter=p)``, ``UPDATE ... WHERE p`` and ``DELETE ... WHERE p`` prune files with
``to_expression(p, schema)`` (txn/spark/_filters.py) before Spark filters the rows itself. A
translation that means something else than Spark's predicate drops a file holding rows Spark's
predicate matches, and those rows go missing silently.

Invariants, over a table of many small files (overlapping ranges, nulls, NaN, -0.0 and
infinities, quotes, backslashes and non-ASCII text, a partition column, mixed-case names) and a
few hundred seeded predicates (quoting, escapes, adjacent literals, NULL logic, IN lists with
NULL, BETWEEN on dates and timestamps, typed and suffixed literals, case of names, backticks,
functions the translator does not know, inside AND, OR and NOT):

* every file the translation prunes holds no row on which Spark's predicate is true (one Spark
  job computes each predicate on every row of every file);
* ``txn.spark.read(filter=p)`` holds exactly the rows plain Spark's ``where(p)`` holds over the
  same files;
* ``DELETE ... WHERE p`` deletes, and ``UPDATE ... WHERE p`` changes, exactly those rows (on a
  sample of predicates that prune, each on its own copy of the table).

``PREDICATE_SEED`` (an environment variable) draws other predicates; the default is fixed.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import random
import shutil
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
import txn.spark
from txn.spark._filters import to_expression
from txn.spark._read import native_scan
from txn.spark._types import spark_schema

pytestmark = pytest.mark.spark

SEED = int(os.environ.get("PREDICATE_SEED", "28"))
PREDICATES = 360

SCHEMA = pa.schema([
    ("id", pa.int64(), False),
    ("Name", pa.string()),
    ("i32", pa.int32()),
    ("Big", pa.int64()),
    ("amt", pa.decimal128(10, 2)),
    ("score", pa.float64()),
    ("ratio", pa.float32()),
    ("day", pa.date32()),
    ("at", pa.timestamp("us", tz="UTC")),
    ("flag", pa.bool_()),
    ("region", pa.string()),
    ("tag", pa.int32()),
])
REGIONS = ["eu", "us", "apac", None]
#: Text a user's data holds: quotes, backslashes, comment-like text, non-ASCII, case.
TEXTS = sorted(["", "'", "''", "a", "a'b", "ab", "a b", "b", "back\\slash", "tab\\there", "\\",
                "a\\'b", "it's", "O'Brien", "-- c", "/* c */", "é", "é€😀", "Zürich", "zz", "NaN",
                "5", "05", "UPPER", "upper", "x;y", '"dq"', "Ab", "ab%", "a_b"])
FLOATS = [0.0, -0.0, 0.1, 0.5, 1.0, 1.5, 2.5, 7.0, 100.0, 1e3, -1.5, -100.0, 1e300,
          float("inf"), float("-inf"), float("nan")]
DAY0 = dt.date(2026, 1, 1)
AT0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
APPENDS = 12


def _rows(rng: random.Random, append: int, region: str | None, first_id: int) -> pa.Table:
    """A few rows for one file: each column's values in a window that moves with ``append``,
    some columns all null or holding special values."""
    n = rng.randint(2, 5)
    ids = list(range(first_id, first_id + n))

    def some(values: list[Any], null_all: float = 0.1, null_one: float = 0.15) -> list[Any]:
        if rng.random() < null_all:
            return [None] * n
        return [None if rng.random() < null_one else v for v in values]

    start = rng.randint(0, len(TEXTS) - 6)
    texts = some([TEXTS[start + rng.randint(0, 5)] for _ in ids])
    i32 = some([append * 10 + rng.randint(-3, 12) for _ in ids])
    if append == 5 and region == "us":
        i32[0] = 2147483647
    big = some([(append - 6) * 10**10 + rng.randint(0, 5) for _ in ids])
    amt = some([Decimal(append * 700 + rng.randint(-300, 300)) / 100 for _ in ids])
    fstart = rng.randint(0, len(FLOATS) - 4)
    score = some([FLOATS[fstart + rng.randint(0, 3)] for _ in ids])
    ratio = some([rng.choice([0.1, 0.25, 0.7, 1.5, -0.0, 3.0, float("nan")]) for _ in ids])
    days = some([DAY0 + dt.timedelta(days=append * 3 + rng.randint(0, 4)) for _ in ids])
    ats = some([AT0 + dt.timedelta(hours=append * 6 + rng.randint(0, 8),
                                   microseconds=rng.choice([0, 0, 1, 500000])) for _ in ids])
    flag = some([rng.choice([True, False]) if append % 3 == 0 else append % 3 == 1 for _ in ids])
    return pa.table({
        "id": pa.array(ids, pa.int64()), "Name": pa.array(texts, pa.string()),
        "i32": pa.array(i32, pa.int32()), "Big": pa.array(big, pa.int64()),
        "amt": pa.array(amt, pa.decimal128(10, 2)), "score": pa.array(score, pa.float64()),
        "ratio": pa.array(ratio, pa.float32()), "day": pa.array(days, pa.date32()),
        "at": pa.array(ats, pa.timestamp("us", tz="UTC")), "flag": pa.array(flag, pa.bool_()),
        "region": pa.array([region] * n, pa.string()), "tag": pa.array([0] * n, pa.int32()),
    }, schema=SCHEMA)


# -- the predicates ------------------------------------------------------------------------------

def _quoted(rng: random.Random, text: str) -> str:
    """``text`` as a Spark string literal, spelled one of the ways Spark reads as ``text``."""
    way = rng.randrange(6)
    if way == 1 and len(text) >= 2:  # adjacent literals concatenate
        cut = rng.randrange(1, len(text))
        return f"{_quoted(rng, text[:cut])} {_quoted(rng, text[cut:])}"
    if way == 2:  # backslash escapes
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if way == 3 and '"' not in text:  # a double-quoted string literal
        return '"' + text.replace("\\", "\\\\") + '"'
    if way == 4 and text and text.isascii() and text.isalpha():  # a unicode escape
        return f"'\\u{ord(text[0]):04x}{text[1:]}'"
    if "\\" in text:
        return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"
    return "'" + text.replace("'", "''") + "'"  # doubled quotes


def _name(rng: random.Random, column: str) -> str:
    """``column`` as a user may write it: any case (Spark resolves names case-insensitively),
    sometimes backticked."""
    spelled = rng.choice([column, column.lower(), column.upper()])
    return f"`{spelled}`" if rng.random() < 0.25 else spelled


def _day(rng: random.Random) -> dt.date:
    return DAY0 + dt.timedelta(days=rng.randint(-3, APPENDS * 3 + 6))


def _at(rng: random.Random) -> dt.datetime:
    return AT0 + dt.timedelta(hours=rng.randint(-5, APPENDS * 6 + 10), minutes=rng.choice([0, 0, 30]))


def _literal(rng: random.Random, kind: str) -> str:
    """A literal for a column of ``kind``, of its own type or of one Spark converts."""
    if kind == "text":
        return _quoted(rng, rng.choice([*TEXTS, "a'", "b'c", "ZZ", "é€", "Z", "upper "]))
    if kind == "int":
        value = rng.randint(-5, APPENDS * 10 + 15)
        tiny = f"{value}Y" if -128 <= value < 128 else str(value)
        return rng.choice([str(value), str(value), f"{value}L", f"{value}.0", tiny, f"{value}S", f"'{value}'",
                           f"{value}e0", f"{value}.5",
                           "2147483647", "3000000000", f"CAST({value} AS BIGINT)", f"{value}BD"])
    if kind == "big":
        value = rng.randint(-7, 7) * 10**10 + rng.randint(-1, 6)
        return rng.choice([str(value), f"{value}L", f"{value}.0", f"'{value}'", f"{value}D"])
    if kind == "decimal":
        cents = rng.randint(-400, APPENDS * 700 + 400)
        text = str(Decimal(cents) / 100)
        return rng.choice([text, f"{text}BD", str(cents // 100), f"{text}5", f"{text}e0", f"'{text}'",
                           f"CAST({text} AS DECIMAL(10, 2))", f"{text}D"])
    if kind == "double":
        value = rng.choice([*FLOATS[:-3], 0.25, 3.0, 1e3, 99.5])
        return rng.choice([repr(value), f"{value!r}D", f"{value:e}", str(int(value)), f"{value!r}BD",
                           "CAST('NaN' AS DOUBLE)", "double('NaN')", "'NaN'", "'Infinity'", "-0.0",
                           "0.0", "CAST('-Infinity' AS DOUBLE)", "1e3", "1.5BD", "-0.0D"])
    if kind == "float":
        value = rng.choice([0.1, 0.25, 0.7, 1.5, 3.0, 0.0, -0.0, 2.0])
        return rng.choice([repr(value), f"{value!r}F", f"{value!r}D", str(int(value)), "CAST('NaN' AS FLOAT)",
                           "-0.0", f"CAST({value!r} AS FLOAT)", "0.1BD"])
    if kind == "date":
        day = _day(rng)
        return rng.choice([f"DATE'{day}'", f"DATE '{day}'", f"'{day}'", f"'{day} 00:00:00'",
                           f"DATE '{day.year}-{day.month}-{day.day}'", f"TIMESTAMP '{day} 12:00:00'",
                           f"make_date({day.year}, {day.month}, {day.day})", f"'{day}T01:00'"])
    if kind == "timestamp":
        at = _at(rng)
        naive = at.strftime("%Y-%m-%d %H:%M:%S")
        return rng.choice([f"TIMESTAMP'{naive}'", f"TIMESTAMP '{naive}+00:00'", f"TIMESTAMP '{naive}+02:00'",
                           f"TIMESTAMP '{naive}Z'", f"'{naive}'", f"DATE '{at.date()}'",
                           f"TIMESTAMP '{naive}.5'", f"TIMESTAMP '{at:%Y-%m-%dT%H:%M}'",
                           f"'{at.date()}'", f"TIMESTAMP_NTZ '{naive}'", f"TIMESTAMP_LTZ '{naive}'"])
    if kind == "bool":
        return rng.choice(["TRUE", "FALSE", "true", "'true'", "'false'"])
    if kind == "region":
        return _quoted(rng, rng.choice(["eu", "us", "apac", "EU", "b", "z", "eu "]))
    raise AssertionError(kind)


COLUMNS = {"Name": "text", "i32": "int", "Big": "big", "amt": "decimal", "score": "double",
           "ratio": "float", "day": "date", "at": "timestamp", "flag": "bool", "region": "region",
           "id": "int"}
#: Functions the translator does not know, of a column (``{}``), keeping its kind.
FUNCTIONS = {
    "text": ["lower({})", "upper({})", "substr({}, 1, 2)", "coalesce({}, 'zz')", "trim({})",
             "concat({}, '')"],
    "int": ["abs({})", "{} - 1", "coalesce({}, 0)", "CAST({} AS BIGINT)", "-{}"],
    "big": ["abs({})", "{} + 1", "coalesce({}, 0)", "CAST({} AS DECIMAL(20, 0))"],
    "decimal": ["abs({})", "{} * 2", "round({}, 1)", "CAST({} AS DOUBLE)"],
    "double": ["abs({})", "coalesce({}, 0.0)", "nanvl({}, 0.0)", "CAST({} AS FLOAT)", "-{}"],
    "float": ["abs({})", "CAST({} AS DOUBLE)", "nanvl({}, 0.0)"],
    "date": ["date_add({}, 1)", "coalesce({}, DATE'2026-01-10')", "CAST({} AS TIMESTAMP)"],
    "timestamp": ["CAST({} AS DATE)", "date_trunc('DAY', {})", "{} + INTERVAL 1 HOUR"],
    "bool": ["coalesce({}, false)", "NOT {}"],
    "region": ["lower({})", "upper({})", "coalesce({}, 'none')"],
}
OPERATORS = ["=", "==", "<>", "!=", "<", "<=", ">", ">=", "<=>"]


def _atom(rng: random.Random) -> str:
    column = rng.choice(list(COLUMNS))
    kind = COLUMNS[column]
    side = _name(rng, column)
    if rng.random() < 0.12:
        side = rng.choice(FUNCTIONS[kind]).format(side)

    def lit() -> str:
        return _literal(rng, kind)

    shape = rng.randrange(16)
    if shape <= 6:
        op = rng.choice(OPERATORS)
        return f"{lit()} {op} {side}" if rng.random() < 0.15 else f"{side} {op} {lit()}"
    if shape == 7:
        return f"{side} IS {rng.choice(['', 'NOT '])}NULL"
    if shape == 8:
        return f"{side} {rng.choice(['=', '<>', '<', '>='])} NULL"
    if shape in (9, 10):
        values = [lit() for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.25:
            values.insert(rng.randrange(len(values) + 1), "NULL")
        return f"{side} {rng.choice(['IN', 'IN', 'NOT IN'])} ({', '.join(values)})"
    if shape == 11:
        return f"{side} {rng.choice(['BETWEEN', 'BETWEEN', 'NOT BETWEEN'])} {lit()} AND {lit()}"
    if shape == 12 and kind == "bool":
        return rng.choice([side, f"NOT {side}", f"{side} IS TRUE", f"{side} IS NOT FALSE"])
    if shape == 12 and kind == "text":
        pattern = rng.choice(["'a%'", "'%b'", "'_'"])
        return f"{side} {rng.choice(['LIKE', 'NOT LIKE'])} {pattern}"
    if shape == 13:
        return rng.choice(["NULL", "TRUE", "1 = 1", "NOT NULL", "CAST(NULL AS BOOLEAN)", "FALSE"])
    if shape == 14 and kind in ("double", "float"):
        return f"{rng.choice(['', 'NOT '])}isnan({side})"
    op = rng.choice(["=", "<", ">="])
    return f"{side} {op} {lit()}"


def _predicate(rng: random.Random, depth: int = 0) -> str:
    if depth >= 3 or rng.random() < 0.3:
        return _atom(rng)
    shape = rng.randrange(6)
    if shape == 0:
        return f"NOT ({_predicate(rng, depth + 1)})"
    if shape == 1:
        return f"NOT {_atom(rng)}"
    if shape == 2:
        return f"({_predicate(rng, depth + 1)})"
    glue = rng.choice([" AND ", " OR ", " and ", " AND ", " OR "])
    return glue.join(_predicate(rng, depth + 1) for _ in range(rng.randint(2, 3)))


#: One of each case the issue names, whatever the seed draws.
ANCHORS = [
    "name = 'it''s'", "name = 'a' 'b'", "name >= 'a' ''''", r"name = 'back\\slash'", r"name = 'a\'b'",
    "name = \"Z\" \"ürich\"", r"name < '\u00e9'", "name IN ('ab', NULL, 'b')", "name NOT IN ('ab', 'b')",
    "name = NULL OR i32 IS NULL", "NOT (i32 = 3 OR NULL)", "NOT (i32 > 50 AND NULL)", "i32 <=> NULL",
    "day BETWEEN DATE'2026-01-05' AND DATE '2026-01-09'", "day BETWEEN '2026-01-05' AND '2026-01-09'",
    "at BETWEEN TIMESTAMP '2026-01-02 00:00:00' AND TIMESTAMP '2026-01-03 00:00:00+00:00'",
    "day > TIMESTAMP '2026-01-10 12:00:00'", "amt >= 12.5BD AND amt < 30", "score >= 1e3",
    "score = -0.0", "score = CAST('NaN' AS DOUBLE)", "score > 'NaN'", "ratio > 0.5",
    "`Name` = 'ab' AND NAME = 'ab'", "REGION = 'eu' AND i32 < 40", "region IS NULL",
    "lower(name) = 'upper' OR region = 'us'", "substr(name, 1, 1) = 'a' AND region = 'us'",
    "coalesce(i32, 0) = 0 AND abs(big) > 10", "CAST(i32 AS STRING) = '40' AND flag",
]


def predicates() -> list[str]:
    rng = random.Random(SEED)
    return ANCHORS + [_predicate(rng) for _ in range(PREDICATES - len(ANCHORS))]


# -- the table and Spark's answers ---------------------------------------------------------------

class _World:
    """The table, its files, and on which rows Spark's predicate holds (``truth[p]``: ids)."""

    def __init__(self, spark: Any, warehouse: Path) -> None:
        self.spark, self.warehouse = spark, warehouse
        self.uri = str(warehouse / "base")
        rng = random.Random(SEED)
        table = txn.create_table(self.uri, SCHEMA, partition_by=["region"])
        first = 0
        for append in range(APPENDS):
            parts = [_rows(rng, append, region, first + 10 * i) for i, region in enumerate(REGIONS)
                     if rng.random() < 0.9]
            first += 10 * len(REGIONS)
            table.append(pa.concat_tables(parts))
        self.table = table
        self.snapshot = table.snapshot()
        self.files = self.snapshot.files()
        assert len(self.files) >= 40
        #: Plain Spark over exactly the table's files (its Parquet scan, without a listing job).
        self.plain = native_scan(spark, spark_schema(SCHEMA), [f.path for f in self.files])
        self.predicates = self._analysed(predicates())
        self.truth, self.by_file = self._evaluate(self.predicates)

    def _analysed(self, chosen: list[str]) -> list[str]:
        """The predicates Spark accepts (analysis only, no job): all at once, halves on a refusal."""
        from pyspark.errors import PySparkException
        from pyspark.sql import functions as F

        try:
            self.plain.select(*[F.expr(p) for p in chosen]).schema  # noqa: B018
        except PySparkException:
            if len(chosen) == 1:
                return []
            half = len(chosen) // 2
            return self._analysed(chosen[:half]) + self._analysed(chosen[half:])
        return chosen

    def _evaluate(self, chosen: list[str]) -> tuple[dict[str, set[int]], dict[str, set[str]]]:
        """Each predicate on every row, in one Spark job: the ids it holds on, and the files."""
        from pyspark.sql import functions as F

        rows = self.plain.select("id", F.col("_metadata.file_name").alias("file"),
                                 *[F.expr(p).alias(f"p{i}") for i, p in enumerate(chosen)]).collect()
        truth: dict[str, set[int]] = {p: set() for p in chosen}
        files: dict[str, set[str]] = {p: set() for p in chosen}
        for row in rows:
            for i, p in enumerate(chosen):
                if row[f"p{i}"] is True:
                    truth[p].add(row["id"])
                    files[p].add(row["file"])
        return truth, files

    def kept(self, predicate: str) -> set[str]:
        """The names of the files pruning by the predicate's translation keeps."""
        return {os.path.basename(f.path) for f in self.snapshot.files(to_expression(predicate, SCHEMA))}

    def copy(self, name: str) -> str:
        shutil.copytree(self.uri, self.warehouse / name)
        return name


@pytest.fixture(scope="module")
def world(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_World]:
    yield _World(spark, tmp_path_factory.mktemp("predicates") / "warehouse")


def test_the_generated_predicates_cover_what_they_are_meant_to(world: _World) -> None:
    every = " ".join(world.predicates).upper()
    assert len(world.predicates) >= 300
    for word in ("''", "\\\\", "\\'", "\\U", "' '", "IS NULL", "= NULL", "NOT (", " IN (", "NOT IN",
                 "NULL,", "BETWEEN", "DATE'", "TIMESTAMP '", "BD", "1E3", "-0.0", "'NAN'", "`",
                 "REGION", "LOWER(", "SUBSTR(", "COALESCE(", "ABS(", "CAST(", "<=>", " OR ", " AND "):
        assert word in every, word
    assert len({os.path.dirname(f.path) for f in world.files}) == len(REGIONS)


def test_the_translation_reads_atoms_and_leaves_the_rest_unknown() -> None:
    """Without Spark: what prunes (and by what), what does not (the differential tests below
    prove that the former never loses a row)."""
    known = {
        "NAME = 'a' AND lower(name) = 'b'": pc.field("Name") == "a",
        "`I32` BETWEEN 1 AND 5 AND abs(i32) BETWEEN 1 AND 2 AND flag":
            ((pc.field("i32") >= 1) & (pc.field("i32") <= 5)) & (pc.field("flag") == True),  # noqa: E712
        "5 < id": pc.field("id") > 5,
        "name = 'a' 'b''c'": pc.field("Name") == "ab'c",
        r"name = 'a\'b' AND i32 = 3": pc.field("i32") == 3,
        "name = \"x\" AND i32 = 4": pc.field("i32") == 4,
        "CASE WHEN i32 = 1 AND i32 = 2 THEN TRUE END AND i32 = 9": pc.field("i32") == 9,
        "(i32 = 1) = TRUE AND i32 = 2": pc.field("i32") == 2,
        "t.i32 = 5 AND i32 = 6": pc.field("i32") == 6,
        "i32 IN (1, NULL) AND i32 = 2": pc.field("i32") == 2,
        "at > TIMESTAMP '2026-01-01 00:00:00Z'": pc.field("at") > pa.scalar(AT0, SCHEMA.field("at").type),
    }
    for predicate, expected in known.items():
        assert str(to_expression(predicate, SCHEMA)) == str(expected), predicate
    for unknown in ["i32 = 5 -- AND i32 = 7", "i32 = 5 /* AND i32 = 7 */", "lower(name) = 'b' OR i32 = 1",
                    "NOT (lower(name) = 'b')", "i32 = 5L", "i32 = 1 OR", "(i32 = 1", "i32 <=> 1",
                    "i32 IN (1, NULL)", "at > TIMESTAMP '2026-01-01 00:00:00'", "day = DATE '2026-1-1'",
                    r"name = 'a\'b'", "NOT (i32 IN (1, NULL))", "flag IS TRUE", "NOT NULL", "ratio = 0.5F"]:
        assert to_expression(unknown, SCHEMA) is None, unknown
    # Under spark.sql.caseSensitive a name in another case may be a joined table's column.
    sensitive = to_expression("NAME = 'a' AND Name = 'b'", SCHEMA, case_sensitive=True)
    assert str(sensitive) == str(pc.field("Name") == "b")


def test_no_file_a_translation_prunes_holds_a_row_spark_matches(world: _World) -> None:
    wrong, pruning = [], 0
    every = {os.path.basename(f.path) for f in world.files}
    for predicate in world.predicates:
        kept = world.kept(predicate)
        pruning += kept != every
        if world.by_file[predicate] - kept:
            wrong.append((predicate, sorted(world.by_file[predicate] - kept)))
    assert wrong == []
    assert pruning >= len(world.predicates) // 4, pruning  # the test exercises pruning


def test_read_with_a_filter_holds_exactly_sparks_rows(world: _World) -> None:
    """A sample of the predicates that prune, and of the others (their read scans every file)."""
    from pyspark.sql import functions as F

    every = {os.path.basename(f.path) for f in world.files}
    pruning = [p for p in world.predicates if world.kept(p) != every]
    others = [p for p in world.predicates if p not in pruning]
    rng = random.Random(SEED)
    checked = rng.sample(pruning, min(24, len(pruning))) + rng.sample(others, min(6, len(others)))
    batch = 15
    for start in range(0, len(checked), batch):
        chosen = checked[start:start + batch]
        frames = [txn.spark.read(world.spark, world.uri, filter=p).select(F.lit(i).alias("q"), "id")
                  for i, p in enumerate(chosen)]
        found: dict[int, set[int]] = {i: set() for i in range(len(chosen))}
        for row in functools.reduce(lambda a, b: a.unionByName(b), frames).collect():
            found[row["q"]].add(row["id"])
        assert {p: found[i] for i, p in enumerate(chosen)} == {p: world.truth[p] for p in chosen}


def _pruning_sample(world: _World, size: int) -> list[str]:
    """Predicates that prune some files yet match rows: where a wrong translation loses rows."""
    every = {os.path.basename(f.path) for f in world.files}
    found = [p for p in world.predicates
             if world.truth[p] and world.kept(p) != every and len(world.truth[p]) < 60]
    return random.Random(SEED).sample(found, min(size, len(found)))


def _ids(uri: str, where: Callable[[dict[str, Any]], bool] = lambda r: True) -> set[int]:
    return {r["id"] for r in txn.open_table(uri).to_arrow().to_pylist() if where(r)}


def test_delete_and_update_match_exactly_sparks_rows(world: _World, spark: Any) -> None:
    txn.spark.register(spark, warehouse=str(world.warehouse))
    every = _ids(world.uri)
    for i, predicate in enumerate(_pruning_sample(world, 6)):
        name = world.copy(f"c{i}")
        uri = str(world.warehouse / name)
        expected = world.truth[predicate]
        if i % 2:
            answer = txn.spark.sql(spark, f"DELETE FROM {name} WHERE {predicate}")
            assert answer.first()[0] == len(expected), predicate
            assert _ids(uri) == every - expected, predicate
        else:
            answer = txn.spark.sql(spark, f"UPDATE {name} SET tag = 1 WHERE {predicate}")
            assert answer.first()[0] == len(expected), predicate
            assert _ids(uri, lambda r: r["tag"] == 1) == expected, predicate
            assert _ids(uri) == every, predicate
