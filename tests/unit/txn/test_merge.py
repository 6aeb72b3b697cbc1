"""``Table.merge`` (the deltalake-style builder) and ``Table.update`` with expressions, against
a reference written here in plain Python (dicts and loops), and their refusals of bad input,
which leave the table exactly as it was."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from txn._files import open_storage as storage_of
from txn._write import _merger

SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.string()), ("v", pa.int64())])

Row = dict[str, Any]


def _listing(uri: str) -> list[str]:
    return storage_of(uri).list("", recursive=True)


def _instants(table: txn.Table) -> list[tuple[str, str, str]]:
    return [(i.time, i.action, i.state) for i in table.timeline()]


def _key(row: Row) -> tuple[Any, ...]:
    return (-1 if row["k"] is None else row["k"], row["g"] or "", row["v"])


def _rows(table: txn.Table) -> list[tuple[Any, ...]]:
    return sorted(map(_key, table.to_arrow().to_pylist()))


# -- the reference ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Clause:
    """One clause: how to add it to a merger, and what it does to a row in the reference."""

    name: str
    when: str  # "matched", "not_matched", "by_source"
    add: Callable[[txn.TableMerger], txn.TableMerger]
    #: The reference: (target row or None, source row or None) -> whether the clause applies.
    applies: Callable[[Row | None, Row | None], bool]
    #: The reference: the new row (update, insert), or None (delete).
    result: Callable[[Row | None, Row | None], Row | None]


S, T = pc.field("source.v"), pc.field("target.v")

CLAUSES = [
    Clause("matched update v=t+s if s.v>500", "matched",
           lambda m: m.when_matched_update({"v": T + S}, predicate=S > 500),
           lambda t, s: s["v"] > 500, lambda t, s: {**t, "v": t["v"] + s["v"]}),
    Clause("matched delete if t.g=='a'", "matched",
           lambda m: m.when_matched_delete(pc.field("target.g") == "a"),
           lambda t, s: t["g"] == "a", lambda t, s: None),
    Clause("matched update_all", "matched", lambda m: m.when_matched_update_all(),
           lambda t, s: True, lambda t, s: {**t, "g": s["g"], "v": s["v"]}),
    Clause("matched update g=s.g, v=t.v (swap-free)", "matched",
           lambda m: m.when_matched_update({"g": pc.field("source.g"), "v": T * 2}),
           lambda t, s: True, lambda t, s: {**t, "g": s["g"], "v": t["v"] * 2}),
    Clause("not matched insert_all if s.v<700", "not_matched",
           lambda m: m.when_not_matched_insert_all(predicate=S < 700),
           lambda t, s: s["v"] < 700, lambda t, s: dict(s)),
    Clause("not matched insert k, v*10", "not_matched",
           lambda m: m.when_not_matched_insert({"k": pc.field("source.k"), "v": S * 10}),
           lambda t, s: True, lambda t, s: {"k": s["k"], "g": None, "v": s["v"] * 10}),
    Clause("by source delete if t.v<200", "by_source",
           lambda m: m.when_not_matched_by_source_delete(T < 200),
           lambda t, s: t["v"] < 200, lambda t, s: None),
    Clause("by source update g='gone'", "by_source",
           lambda m: m.when_not_matched_by_source_update({"g": "gone"}),
           lambda t, s: True, lambda t, s: {**t, "g": "gone"}),
]


def reference(target: list[Row], source: list[Row], clauses: list[Clause]
              ) -> tuple[list[Row], tuple[int, int, int]] | type[Exception]:
    """The rows after the merge and (inserted, updated, deleted), or the error it must raise."""
    pairs = [(t, s) for t in target for s in source if t["k"] is not None and t["k"] == s["k"]]
    counts: dict[int, int] = {}
    for t, _ in pairs:
        counts[id(t)] = counts.get(id(t), 0) + 1
    # Delta's rule (the reference's one delete carries a predicate, so no exception applies).
    if any(c.when == "matched" for c in clauses) and any(n > 1 for n in counts.values()):
        return txn.MergeCardinalityError
    out: list[Row] = []
    inserted = updated = deleted = 0

    def first(when: str, t: Row | None, s: Row | None) -> Clause | None:
        return next((c for c in clauses if c.when == when and c.applies(t, s)), None)  # type: ignore[arg-type]

    for t in target:
        mine = [s for tt, s in pairs if tt is t]
        clause = first("matched", t, mine[0]) if mine else first("by_source", t, None)
        if clause is None:
            out.append(t)
            continue
        new = clause.result(t, mine[0] if mine else None)
        if new is None:
            deleted += 1
        else:
            updated += 1
            out.append(new)
    hit = {id(s) for _, s in pairs}
    for s in source:
        if id(s) in hit:
            continue
        clause = first("not_matched", None, s)
        if clause is not None:
            inserted += 1
            out.append(clause.result(None, s))  # type: ignore[arg-type]
    return out, (inserted, updated, deleted)


def _draw(rng: random.Random, keyed: bool) -> tuple[list[list[Row]], list[Row], list[Clause]]:
    groups = ["a", "b", None]
    keys = rng.sample(range(40), 24) if keyed else [rng.randrange(30) for _ in range(24)]
    rows = [{"k": k, "g": rng.choice(groups), "v": rng.randrange(1000)} for k in keys]
    loads = [rows[:8], rows[8:16], rows[16:]]  # three segments, disjoint key ranges when sorted
    if not keyed:
        loads = [sorted(load, key=lambda r: r["k"]) for load in loads]
    source_keys = rng.sample(range(50), 10) if keyed or rng.random() < 0.5 else [
        rng.randrange(35) for _ in range(10)]
    if not keyed and rng.random() < 0.3:
        source_keys[0] = None  # a null key matches nothing
    source = [{"k": k, "g": rng.choice(groups), "v": rng.randrange(1000)} for k in source_keys]
    clauses = [c for c in CLAUSES if rng.random() < 0.5] or [CLAUSES[2]]
    rng.shuffle(clauses)
    if keyed:  # an insert of a table without g or with a null key is fine; keys are unique
        source = [s for s in source if s["k"] is not None]
    return loads, source, clauses


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
@pytest.mark.parametrize("seed", range(8))
def test_a_merge_does_what_the_reference_does(memory_uri: str, keyed: bool, seed: int) -> None:
    rng = random.Random(seed * 2 + keyed)
    loads, source, clauses = _draw(rng, keyed)
    table = txn.create_table(memory_uri, SCHEMA, record_key="k" if keyed else None)
    for load in loads:
        table.append(pa.Table.from_pylist(load, schema=SCHEMA))
    # A delete first, so the merge reads through a delete delta.
    table.delete(where=pc.field("v") >= 950)
    target = [r for load in loads for r in load if r["v"] < 950]
    merger = table.merge(pa.Table.from_pylist(source, schema=SCHEMA), on="k")
    for clause in clauses:
        merger = clause.add(merger)
    expected = reference(target, source, clauses)
    before = (_instants(table), _listing(memory_uri))
    if not isinstance(expected, tuple):
        with pytest.raises(expected):
            merger.execute()
        assert (_instants(table), _listing(memory_uri)) == before
        return
    rows, (inserted, updated, deleted) = expected
    result = merger.execute()
    assert sorted(map(_key, rows)) == _rows(table), [c.name for c in clauses]
    assert (result.num_target_rows_inserted, result.num_target_rows_updated,
            result.num_target_rows_deleted, result.num_source_rows) == (inserted, updated, deleted,
                                                                        len(source))
    if inserted + updated + deleted == 0:
        assert result.commit is None and _instants(table) == before[0]
        return
    assert result.commit is not None and result.commit.operation == "merge"
    assert (result.commit.rows_added, result.commit.rows_deleted) == (inserted + updated,
                                                                      updated + deleted)
    assert len(_instants(table)) == len(before[0]) + 1  # one commit
    assert table.validate().ok
    if keyed:  # the record index follows: every live key is found where it is
        live = sorted(r["k"] for r in rows)
        assert sorted(table.lookup(live)["k"].to_pylist()) == live


def test_a_keyed_merge_on_the_key_finds_rows_through_the_record_index(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    table.append(pa.table({"k": [1, 2, 3], "g": ["a", "b", "c"], "v": [1, 2, 3]}))

    def no_scan(*args: object, **kwargs: object) -> None:
        raise AssertionError("a merge on the record key scanned the table")

    monkeypatch.setattr(_merger, "_scan", no_scan)
    source = pd.DataFrame({"k": [2, 9], "g": ["B", "N"], "v": [20, 90]})
    result = table.merge(source, on=["k"]).when_matched_update_all().when_not_matched_insert_all().execute()
    assert (result.num_target_rows_updated, result.num_target_rows_inserted) == (1, 1)
    assert _rows(table) == [(1, "a", 1), (2, "B", 20), (3, "c", 3), (9, "N", 90)]


def test_an_unkeyed_merge_reads_only_the_files_of_the_sources_key_range(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = txn.create_table(memory_uri, SCHEMA)
    table.append(pa.table({"k": [1, 2, 3], "g": ["a"] * 3, "v": [1, 2, 3]}))
    table.append(pa.table({"k": [10, 11, 12], "g": ["b"] * 3, "v": [10, 11, 12]}))
    read: list[str] = []
    scan = _merger.scan_file

    def counted(store: object, path: str, *args: Any, **kwargs: Any) -> Any:
        read.append(path)
        return scan(store, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_merger, "scan_file", counted)
    reader = pa.RecordBatchReader.from_batches(SCHEMA, pa.table(
        {"k": [11, 12], "g": ["x", "y"], "v": [0, 0]}, schema=SCHEMA).to_batches())
    table.merge(reader, "k").when_matched_update({"v": pc.field("target.v") + 100}).execute()
    assert len(read) == 1 and read[0].startswith("segment_1/"), read
    assert _rows(table) == [(1, "a", 1), (2, "a", 2), (3, "a", 3), (10, "b", 10), (11, "b", 111),
                            (12, "b", 112)]


def test_a_merge_on_another_column_of_a_keyed_table_refuses_an_insert_of_a_live_key(
        memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [1, 2]}))
    before = (_instants(table), _listing(memory_uri))
    source = pa.table({"k": [2], "g": ["z"], "v": [5]})
    with pytest.raises(txn.DuplicateKeyError, match="merge: inserted row"):
        table.merge(source, on="g").when_not_matched_insert_all().execute()
    assert (_instants(table), _listing(memory_uri)) == before
    table.merge(source, on="g").when_not_matched_by_source_update({"v": T * 3}).execute()
    assert _rows(table) == [(1, "a", 3), (2, "b", 6)]


def test_custom_aliases_and_an_unconditional_delete_of_a_row_matched_twice(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA)
    table.append(pa.table({"k": [1, 2, 3], "g": ["a", "b", "c"], "v": [1, 2, 3]}))
    source = pa.table({"k": [2, 2], "w": [7, 8]})
    result = (table.merge(source, "k", source_alias="s", target_alias="t")
              .when_matched_delete().execute())
    assert result.num_target_rows_deleted == 1 and _rows(table) == [(1, "a", 1), (3, "c", 3)]
    with pytest.raises(txn.MergeCardinalityError, match="more than one source row"):
        table.merge(pa.table({"k": [3, 3], "w": [7, 8]}), "k", source_alias="s", target_alias="t") \
            .when_matched_update({"v": pc.field("s.w")}).execute()


def test_an_idempotent_merge_commits_once(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    source = pa.table({"k": [1], "g": ["a"], "v": [1]})
    properties = txn.CommitProperties(app_id="job", version=1)
    first = table.merge(source, "k", commit_properties=properties).when_not_matched_insert_all().execute()
    again = table.merge(source, "k", commit_properties=properties).when_not_matched_insert_all().execute()
    assert first.commit is not None and again.commit is None and _rows(table) == [(1, "a", 1)]


@pytest.mark.parametrize(("build", "error", "match"), [
    (lambda t, s: t.merge(s, "nope"), txn.InvalidOptionError, "'nope' is not a column of the table"),
    (lambda t, s: t.merge(s.drop(["k"]), "k"), txn.InvalidOptionError, "'k' is not a column of the source"),
    (lambda t, s: t.merge(s, ["k", "k"]), txn.InvalidOptionError, "distinct column names"),
    (lambda t, s: t.merge(s.set_column(0, "k", pa.array(["x", "y"])), "k"), txn.SchemaMismatchError,
     "on column 'k' is string in the source and int64 in the table"),
    (lambda t, s: t.merge(s, "k").when_matched_update({"nope": 1}), txn.InvalidOptionError,
     "unknown column 'nope'"),
    (lambda t, s: t.merge(s, "k").when_matched_update({"k": pc.field("source.k")}),
     txn.InvalidOptionError, "cannot change record key column 'k'"),
    (lambda t, s: t.merge(s, "k").when_matched_update({"v": pc.field("source.nope")}),
     txn.InvalidOptionError, "does not apply to the columns"),
    (lambda t, s: t.merge(s, "k").when_matched_update({"v": pc.field("source.g")}).execute(),
     txn.SchemaMismatchError, "column 'v' has type string"),
    (lambda t, s: t.merge(s, "k").when_matched_update({"v": "x"}), txn.SchemaMismatchError,
     "does not fit its type int64"),
    (lambda t, s: t.merge(s, "k").when_not_matched_insert({"v": pc.field("target.v")}),
     txn.InvalidOptionError, "does not apply to the columns"),
    (lambda t, s: t.merge(s, "k").when_matched_delete(pc.field("target.v")), txn.InvalidOptionError,
     "is int64, not a boolean"),
    (lambda t, s: t.merge(s, "k").when_matched_delete("v > 1"), txn.InvalidOptionError,
     "must be a pyarrow.compute.Expression"),
    (lambda t, s: t.merge(s, "k").execute(), txn.InvalidOptionError, "at least one when_"),
    (lambda t, s: t.merge(s, "k", source_alias="x", target_alias="x"), txn.InvalidOptionError,
     "both 'x'"),
    (lambda t, s: t.merge(s, "k").when_matched_update({"v": pc.field("source.v").cast(pa.float64())
                                                       / 3}).execute(),
     txn.SchemaMismatchError, "does not fit the column's type int64 without loss"),
    (lambda t, s: t.merge(pa.table({"k": [1, 1], "g": ["a", "b"], "v": [1, 2]}), "k")
     .when_matched_update_all().execute(), txn.MergeCardinalityError, "more than one source row"),
    (lambda t, s: t.merge(pa.table({"k": [7, 7], "g": ["a", "b"], "v": [1, 2]}), "k")
     .when_not_matched_insert_all().execute(), txn.DuplicateKeyError, "repeats"),
    (lambda t, s: t.merge(42, "k"), txn.InvalidOptionError, "the source must be"),
])
def test_bad_input_is_refused_and_changes_nothing(memory_uri: str, build: Callable[..., Any],
                                                  error: type[Exception], match: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [1, 2]}))
    before = (_instants(table), _listing(memory_uri), _rows(table))
    with pytest.raises(error, match=match):
        build(table, pa.table({"k": [1, 5], "g": ["x", "y"], "v": [10, 50]}))
    assert (_instants(table), _listing(memory_uri), _rows(table)) == before


# -- update with expressions -----------------------------------------------------------------------

def test_an_update_evaluates_every_value_on_the_old_rows(memory_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("a", pa.int32()), ("b", pa.int32())])
    table = txn.create_table(memory_uri, schema, record_key="id")
    table.append(pa.table({"id": [1, 2, 30], "a": [1, 2, 3], "b": [10, 20, 30]}, schema=schema))
    commit = table.update(pc.field("id") < 10, {"a": pc.field("b"), "b": pc.field("a") * 2})
    assert commit is not None and commit.rows_added == 2
    # int64 results (the scalar) cast safely to int32: they fit
    table.update(pc.field("id") == 30, {"a": pc.field("a") + pc.scalar(100)})
    got = sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "a": 10, "b": 2}, {"id": 2, "a": 20, "b": 4}, {"id": 30, "a": 103, "b": 30}]
    with table.transaction() as tx:  # and in a transaction, staged rows included
        tx.append(pa.table({"id": [40], "a": [4], "b": [40]}, schema=schema))
        tx.update(pc.field("id") >= 30, {"b": pc.field("b") - pc.field("a")})
    assert sorted(zip(*[table.to_arrow()[c].to_pylist() for c in ("id", "b")], strict=True)) == [
        (1, 2), (2, 4), (30, -73), (40, 36)]


@pytest.mark.parametrize(("values", "error", "match"), [
    ({"a": pc.field("a").cast(pa.float64()) / 4}, txn.SchemaMismatchError,
     "column 'a' has type double, which does not fit the column's type int32"),
    ({"a": pc.field("b") * 1000_000_000}, txn.SchemaMismatchError, "column 'a'.*cannot be computed"),
    ({"a": pc.field("nope")}, txn.InvalidOptionError, "does not apply to the columns"),
    ({"a": pc.field("s")}, txn.SchemaMismatchError, "column 'a' has type string"),
    ({"id": pc.field("id") + 1}, txn.InvalidOptionError, "cannot change record key column 'id'"),
    ({"n": pc.field("s").cast(pa.int32())}, txn.SchemaMismatchError, "column 'n'.*cannot be computed"),
    ({"n": pc.scalar(None).cast(pa.int32())}, txn.SchemaMismatchError, "not nullable"),
])
def test_an_update_expression_that_does_not_fit_is_refused(memory_uri: str, values: dict[str, Any],
                                                           error: type[Exception], match: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("a", pa.int32()), ("b", pa.int32()), ("s", pa.string()),
                        pa.field("n", pa.int32(), nullable=False)])
    table = txn.create_table(memory_uri, schema, record_key="id")
    table.append(pa.table({"id": [1, 2], "a": [1, 2], "b": [3, 5], "s": ["1", "x"], "n": [1, 1]},
                          schema=schema))
    before = (_instants(table), _listing(memory_uri))
    with pytest.raises(error, match=match):
        table.update(None, values)
    assert (_instants(table), _listing(memory_uri)) == before


# -- conflicts -------------------------------------------------------------------------------------

@pytest.mark.parametrize("other", ["update of a matched row", "upsert of a key it inserts"])
def test_a_merge_loses_to_a_commit_that_changed_what_it_read(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch, other: str) -> None:
    from txn._write import _state

    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [1, 2]}))
    rival = txn.open_table(memory_uri)
    read_state = _state.read_state

    def then_other(context: Any) -> Any:
        state = read_state(context)
        monkeypatch.setattr(_state, "read_state", read_state)  # once
        if other.startswith("update"):
            rival.update(pc.field("k") == 2, {"v": 200})
        else:
            rival.upsert(pa.table({"k": [9], "g": ["r"], "v": [900]}))
        return state

    monkeypatch.setattr(_state, "read_state", then_other)
    merger = (table.merge(pa.table({"k": [2, 9], "g": ["x", "y"], "v": [20, 90]}), "k")
              .when_matched_update_all().when_not_matched_insert_all())
    with pytest.raises(txn.CommitConflictError):
        merger.execute()
    rows = _rows(table)
    assert (2, "b", 200) in rows or (9, "r", 900) in rows
    assert (2, "x", 20) not in rows and (9, "y", 90) not in rows
    # The retry reads the table as it is now.
    result = (table.merge(pa.table({"k": [2, 9], "g": ["x", "y"], "v": [20, 90]}), "k")
              .when_matched_update_all().when_not_matched_insert_all().execute())
    assert _rows(table) == [(1, "a", 1), (2, "x", 20), (9, "y", 90)]
    assert (result.num_target_rows_updated, result.num_target_rows_inserted) == (
        (1, 1) if other.startswith("update") else (2, 0))


def _after_read(monkeypatch: pytest.MonkeyPatch, other: Callable[[], object]) -> None:
    """Run ``other`` (another handle's commit) once, right after the next write read the table."""
    from txn._write import _state

    read_state = _state.read_state

    def then_other(context: Any) -> Any:
        state = read_state(context)
        monkeypatch.setattr(_state, "read_state", read_state)  # once
        other()
        return state

    monkeypatch.setattr(_state, "read_state", then_other)


@pytest.mark.parametrize("other", ["merge", "overwrite", "transaction", "append"])
def test_an_unkeyed_merge_loses_to_a_concurrent_write_that_read_the_table(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch, other: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA)
    table.append(pa.table({"k": [1], "g": ["a"], "v": [1]}))
    rival = txn.open_table(memory_uri)

    def upsert_9(on: txn.Table, v: int) -> txn.TableMerger:
        return (on.merge(pa.table({"k": [9], "g": ["m"], "v": [v]}), "k")
                .when_matched_update_all().when_not_matched_insert_all())

    def rival_write() -> None:
        if other == "merge":
            upsert_9(rival, 90).execute()
        elif other == "overwrite":
            rival.overwrite(pa.table({"k": [9], "g": ["o"], "v": [900]}))
        elif other == "transaction":
            with rival.transaction() as tx:
                tx.append(pa.table({"k": [9], "g": ["t"], "v": [9]}))
                tx.delete(where=pc.field("k") == 1)
        else:  # a blind append is ordered after the merge: no conflict
            rival.append(pa.table({"k": [9], "g": ["b"], "v": [9]}))

    _after_read(monkeypatch, rival_write)
    if other == "append":
        upsert_9(table, 91).execute()
        assert _rows(table) == [(1, "a", 1), (9, "b", 9), (9, "m", 91)]
        return
    with pytest.raises(txn.CommitConflictError, match="blind appends"):
        upsert_9(table, 91).execute()
    assert len([r for r in _rows(table) if r[0] == 9]) == 1 and (9, "m", 91) not in _rows(table)


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_source_rows_matching_a_deleted_row_twice_are_not_inserted(memory_uri: str, keyed: bool) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k" if keyed else None)
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [10, 20]}))
    source = pa.table({"k": [1, 1, 3], "g": ["x", "y", "z"], "v": [100, 101, 300]})
    result = table.merge(source, "k").when_matched_delete().when_not_matched_insert_all().execute()
    assert (result.num_target_rows_deleted, result.num_target_rows_inserted) == (1, 1)
    assert _rows(table) == [(2, "b", 20), (3, "z", 300)]


@pytest.mark.parametrize("insert", ["expression", "constant", "by source clause (a scan)"])
def test_an_inserted_key_other_than_the_sources_must_not_be_live(memory_uri: str, insert: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    table.append(pa.table({"k": [1, 101], "g": ["a", "b"], "v": [1, 101]}))
    before = (_instants(table), _listing(memory_uri))
    key = 101 if insert == "constant" else pc.field("source.k") + 96
    merger = table.merge(pa.table({"k": [5], "v": [5]}), "k").when_not_matched_insert(
        {"k": key, "v": pc.field("source.v")})
    if insert.startswith("by source"):
        merger = merger.when_not_matched_by_source_update({"v": T}, pc.scalar(False))
    with pytest.raises(txn.DuplicateKeyError, match=r"take record key\(s\) \[101\] live"):
        merger.execute()
    assert (_instants(table), _listing(memory_uri)) == before
    # A key this merge deletes is free again; one it updates is not.
    result = (table.merge(pa.table({"k": [1, 5], "v": [0, 5]}), "k").when_matched_delete()
              .when_not_matched_insert({"k": pc.field("source.k") - 4, "v": pc.field("source.v")})
              .execute())
    assert (result.num_target_rows_deleted, result.num_target_rows_inserted) == (1, 1)
    assert _rows(table) == [(1, "", 5), (101, "b", 101)]
    assert table.lookup([1]).num_rows == 1 and table.validate().ok
    with pytest.raises(txn.DuplicateKeyError, match=r"of row\(s\) this merge updates"):
        (table.merge(pa.table({"k": [101, 97], "v": [0, 7]}), "k").when_matched_update({"v": 0})
         .when_not_matched_insert({"k": pc.field("source.k") + 4, "v": 7}).execute())


def test_a_merge_on_another_column_deletes_a_key_and_inserts_it_again(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [10, 20]}))
    source = pa.table({"k": [7, 1], "g": ["a", "z"], "v": [0, 11]})
    result = table.merge(source, "g").when_matched_delete().when_not_matched_insert_all().execute()
    assert (result.num_target_rows_deleted, result.num_target_rows_inserted) == (1, 1)
    assert _rows(table) == [(1, "z", 11), (2, "b", 20)]
    assert table.lookup([1]).num_rows == 1 and table.validate().ok


def test_a_null_predicate_is_never_true(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA)
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [10, 20]}))
    result = (table.merge(pa.table({"k": [2, 3]}), "k").when_matched_delete(pc.scalar(None))
              .when_not_matched_insert_all(pc.scalar(None)).execute())
    assert result.commit is None and _rows(table) == [(1, "a", 10), (2, "b", 20)]


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "unkeyed"])
def test_a_merge_built_before_a_schema_change_plans_on_the_new_schema(
        memory_uri: str, keyed: bool) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k" if keyed else None)
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [10, 20]}))
    merger = (table.merge(pa.table({"k": [2, 3], "v": [200, 300]}), "k")
              .when_matched_update({"v": pc.field("source.v")}).when_not_matched_insert_all())
    other = txn.open_table(memory_uri)
    other.add_columns([pa.field("c", pa.string())])
    other.update(pc.field("k") == 2, {"c": "kept"})
    merger.execute()
    got = sorted(table.to_arrow().to_pylist(), key=lambda r: r["k"])
    assert got == [{"k": 1, "g": "a", "v": 10, "c": None}, {"k": 2, "g": "b", "v": 200, "c": "kept"},
                   {"k": 3, "g": None, "v": 300, "c": None}]
    # A clause that no longer applies is refused before anything begins.
    merger = table.merge(pa.table({"k": [2]}), "k").when_matched_update({"g": "x"})
    other.rename_column("g", "h")
    before = (_instants(table), _listing(memory_uri))
    with pytest.raises(txn.InvalidOptionError, match="unknown column 'g'"):
        merger.execute()
    assert (_instants(table), _listing(memory_uri)) == before


@pytest.mark.parametrize("change", ["add", "rename", "drop"])
def test_a_schema_change_while_a_merge_or_update_runs(
        memory_uri: str, monkeypatch: pytest.MonkeyPatch, change: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [10, 20]}))
    other = txn.open_table(memory_uri)
    alter = {"add": lambda: other.add_columns([pa.field("c", pa.string())]),
             "rename": lambda: other.rename_column("g", "h"),
             "drop": lambda: other.drop_columns(["g"])}[change]
    _after_read(monkeypatch, alter)
    (table.merge(pa.table({"k": [2, 3], "g": ["x", "y"], "v": [200, 300]}), "k")
     .when_matched_update_all().when_not_matched_insert_all().execute())
    table.update(pc.field("k") == 1, {"v": pc.field("v") + 1})
    got = {r["k"]: r for r in table.to_arrow().to_pylist()}
    assert [got[k]["v"] for k in (1, 2, 3)] == [11, 200, 300]
    if change != "drop":
        assert [got[k]["g" if change == "add" else "h"] for k in (1, 2, 3)] == ["a", "x", "y"]
    assert table.validate().ok


def test_an_update_while_the_schema_changes(memory_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k")
    table.append(pa.table({"k": [1, 2], "g": ["a", "b"], "v": [10, 20]}))
    other = txn.open_table(memory_uri)
    _after_read(monkeypatch, lambda: other.add_columns([pa.field("c", pa.string())]))
    table.update(pc.field("k") == 2, {"v": pc.field("v") * 2})
    got = sorted(table.to_arrow().to_pylist(), key=lambda r: r["k"])
    assert got == [{"k": 1, "g": "a", "v": 10, "c": None}, {"k": 2, "g": "b", "v": 40, "c": None}]
