"""``txn.polars.scan``: a snapshot as a Polars LazyFrame (issue 25, item 3).

Every answer is compared with the snapshot's own reader: ``collect()`` holds the rows of
``to_arrow()`` (sorted by id: a LazyFrame has no row order), and a filtered frame the rows Polars
itself keeps of them (``pl.from_arrow(snap.to_arrow()).filter(...)``), so a predicate the scan
translated for pruning never changes an answer. Tables on memory:// go through the IO plugin
only; local tables read their own files of the snapshot's schema version with Polars' Parquet
scan and the rest through the plugin (design/open-reads.md, section 4).
"""

from __future__ import annotations

import decimal
import subprocess
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
import txn.polars
from tests.unit.txn.external_data import write_file

SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("flag", pa.bool_()),
    ("day", pa.date32()), ("at", pa.timestamp("us", tz="UTC")), ("amt", pa.decimal128(10, 2)),
])


def rows(ids: range) -> pa.Table:
    """Rows with nulls and a NaN among them: name null where id % 7 == 3, score NaN where
    id % 11 == 4 and null where id % 13 == 5."""
    ids = list(ids)
    score = [None if i % 13 == 5 else float("nan") if i % 11 == 4 else i / 2 for i in ids]
    return pa.table({
        "id": ids,
        "name": [None if i % 7 == 3 else f"n{i}" for i in ids],
        "score": score,
        "flag": [i % 2 == 0 for i in ids],
        "day": [date(2026, 1, 1 + i % 28) for i in ids],
        "at": [datetime(2026, 1, 1, i % 24, tzinfo=timezone.utc) for i in ids],
        "amt": [decimal.Decimal(i) / 4 for i in ids],
    }, schema=SCHEMA)


def build(uri: str, schema: pa.Schema = SCHEMA, **kwargs: Any) -> txn.Table:
    """Three appends (three files), then deletes in two of them."""
    t = txn.create_table(uri, schema, **kwargs)
    for start in (0, 100, 200):
        t.append(rows(range(start, start + 100)).select(schema.names).cast(schema))
    return t


def by_id(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: r["id"])


def same_rows(frame: pl.DataFrame, table: pa.Table) -> None:
    """``frame`` holds the rows of ``table``, its columns in order (NaN compared as NaN)."""
    assert frame.columns == table.column_names
    expected = pl.from_arrow(table)
    assert isinstance(expected, pl.DataFrame)
    assert frame.schema == expected.schema
    assert frame.height == table.num_rows
    if "id" in frame.columns:
        frame, expected = frame.sort("id"), expected.sort("id")
    assert frame.equals(expected), (frame, expected)


def polars_keeps(snap: txn.Snapshot, predicate: pl.Expr) -> pl.DataFrame:
    """What Polars keeps of the snapshot's rows: the answer a pushed-down predicate must give."""
    frame = pl.from_arrow(snap.to_arrow())
    assert isinstance(frame, pl.DataFrame)
    return frame.filter(predicate)


class Spy:
    """Records the arguments the plugin gives the snapshot's scanner."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[dict[str, Any]] = []
        self.heads: list[int] = []
        scanner, head = txn.Snapshot._scanner, txn.Scanner.head

        def spied_scanner(snap: txn.Snapshot, columns: Any, filter: Any, batch_size: Any = None,
                          *, paths: Any = None) -> txn.Scanner:
            self.calls.append({"columns": columns, "filter": filter, "batch_size": batch_size,
                               "paths": paths})
            return scanner(snap, columns, filter, batch_size, paths=paths)

        def spied_head(sc: txn.Scanner, n: int = 5) -> pa.Table:
            self.heads.append(n)
            return head(sc, n)

        monkeypatch.setattr(txn.Snapshot, "_scanner", spied_scanner)
        monkeypatch.setattr(txn.Scanner, "head", spied_head)


# == answers ======================================================================================

def test_collect_equals_to_arrow_before_and_after_deletes(table_uri: str) -> None:
    t = build(table_uri)
    same_rows(txn.polars.scan(t).collect(), t.to_arrow())
    t.delete(pc.field("id").isin([3, 150, 151, 299]))
    t.delete(pc.field("id") == 0)
    snap = t.snapshot()
    frame = txn.polars.scan(t).collect()
    same_rows(frame, snap.to_arrow())
    assert frame.height == 295 and not {0, 3, 150, 151, 299} & set(frame["id"])
    assert txn.polars.scan(t).select(pl.len()).collect().item() == 295
    projected = txn.polars.scan(t).select("amt", "id").collect()
    same_rows(projected, snap.to_arrow(columns=["amt", "id"]))


def test_a_local_table_reads_its_own_files_natively(local_uri: str) -> None:
    """Polars' Parquet scan reads the local files, deleted rows dropped by position; the
    plugin is not called at all."""
    t = build(local_uri)
    t.delete(pc.field("id").isin([1, 2, 199, 250]))
    lf = txn.polars.scan(t)
    plan = lf.explain()
    assert "Parquet SCAN" in plan and "PYTHON SCAN" not in plan, plan
    same_rows(lf.collect(), t.to_arrow())
    where = (pl.col("id") >= 190) & (pl.col("id") < 260)
    filtered = lf.filter(where)
    assert "SELECTION" in filtered.explain()  # the predicate is Polars' Parquet reader's
    same_rows(filtered.collect(), t.to_arrow(filter=(pc.field("id") >= 190) & (pc.field("id") < 260)))
    head = lf.head(4).collect()
    assert head.height == 4 and not {1, 2} & set(head["id"])
    for engine in ("in-memory", "streaming"):
        same_rows(lf.collect(engine=engine), t.to_arrow())


def test_a_column_named_like_the_row_index_is_read(local_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("__metatxn_row", pa.int64())])
    t = txn.create_table(local_uri, schema)
    t.append(pa.table({"id": range(10), "__metatxn_row": range(100, 110)}, schema=schema))
    t.delete(pc.field("id") == 4)
    same_rows(txn.polars.scan(t).collect(), t.to_arrow())


def test_empty_table_and_every_row_deleted(table_uri: str) -> None:
    t = txn.create_table(table_uri, SCHEMA)
    empty = txn.polars.scan(t).collect()
    assert empty.height == 0 and empty.schema == pl.from_arrow(SCHEMA.empty_table()).schema
    t.append(rows(range(5)))
    t.delete(pc.field("id") < 100)
    assert txn.polars.scan(t).collect().height == 0
    assert txn.polars.scan(t).select(pl.len()).collect().item() == 0


def test_partitioned_table(table_uri: str) -> None:
    t = build(table_uri, partition_by=["flag"])
    t.delete(pc.field("id").isin([10, 11, 12]))
    lf = txn.polars.scan(t)
    same_rows(lf.collect(), t.to_arrow())
    same_rows(lf.filter(pl.col("flag")).collect(), t.to_arrow(filter=pc.field("flag")))


def test_nested_columns_go_through_the_plugin(local_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("tags", pa.list_(pa.string())),
                        ("addr", pa.struct([("city", pa.string())]))])
    t = txn.create_table(local_uri, schema)
    t.append(pa.table({"id": [1, 2, 3], "tags": [["a"], [], None],
                       "addr": [{"city": "x"}, None, {"city": None}]}, schema=schema))
    t.delete(pc.field("id") == 2)
    lf = txn.polars.scan(t)
    assert "PYTHON SCAN" in lf.explain()
    same_rows(lf.collect(), t.to_arrow())


def test_external_parquet_and_csv_segments(tmp_path: Path) -> None:
    t = build(str(tmp_path / "t"))
    flat = SCHEMA.remove(SCHEMA.get_field_index("amt")).remove(SCHEMA.get_field_index("at"))
    narrow = txn.create_table(str(tmp_path / "narrow"), flat)
    narrow.append(rows(range(3)).select(flat.names))
    parquet = rows(range(1000, 1010))
    csv = rows(range(2000, 2005)).select(["id", "name", "score", "flag", "day"])
    write_file(tmp_path / "pq" / "part-0.parquet", parquet, "parquet")
    write_file(tmp_path / "csv" / "part-0.csv", csv, "csv")
    t.add_segment(tmp_path / "pq", "parquet")
    narrow.add_segment(tmp_path / "csv", "csv")
    for table in (t, narrow):
        same_rows(txn.polars.scan(table).collect(), table.to_arrow())
    t.delete(pc.field("id").isin([1003, 5, 150]))
    narrow.delete(pc.field("id").isin([2001, 1]))
    for table in (t, narrow):
        lf = txn.polars.scan(table)
        plan = lf.explain()
        assert "Parquet SCAN" in plan and "PYTHON SCAN" in plan, plan
        same_rows(lf.collect(), table.to_arrow())
        same_rows(lf.collect(engine="streaming"), table.to_arrow())
        same_rows(lf.filter(pl.col("id") >= 1000).collect(),
                  table.to_arrow(filter=pc.field("id") >= 1000))


def test_streaming_segment(table_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = txn.create_table(table_uri, schema, properties={"streaming": "true"})
    s = t.stream("job")
    for batch_id in range(3):
        s.write(batch_id, pa.table({"id": [batch_id * 10 + i for i in range(5)],
                                    "v": [f"v{batch_id}"] * 5}, schema=schema))
    same_rows(txn.polars.scan(t).collect(), t.to_arrow())
    t.delete(pc.field("id").isin([1, 12, 24]))
    same_rows(txn.polars.scan(t).collect(), t.to_arrow())
    same_rows(txn.polars.scan(t).filter(pl.col("v") == "v1").collect(),
              t.to_arrow(filter=pc.field("v") == "v1"))


def test_files_of_an_older_schema_version(table_uri: str) -> None:
    """v0 files (``amt`` int32, ``name``) beside files of the latest version (``amt`` widened
    to int64, ``name`` renamed ``label``, ``extra`` added): read by column id."""
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amt", pa.int32())])
    t = txn.create_table(table_uri, schema)
    t.append(pa.table({"id": range(10), "name": [f"n{i}" for i in range(10)],
                       "amt": pa.array(range(10), pa.int32())}, schema=schema))
    t.rename_column("name", "label")
    t.alter_column("amt", pa.int64())
    t.add_columns([pa.field("extra", pa.string())])
    t.append(pa.table({"id": [20, 21], "label": ["n20", "n21"], "amt": [2**40, 5],
                       "extra": ["x", None]}))
    t.delete(pc.field("id").isin([3, 21]))
    lf = txn.polars.scan(t)
    if "://" not in table_uri:  # both versions' files by Polars' Parquet scan, by column id
        plan = lf.explain()
        assert plan.count("Parquet SCAN") == 2 and "PYTHON SCAN" not in plan, plan
    assert lf.collect_schema() == pl.Schema({"id": pl.Int64, "label": pl.String, "amt": pl.Int64,
                                             "extra": pl.String})
    same_rows(lf.collect(), t.to_arrow())
    same_rows(lf.filter(pl.col("label") == "n4").collect(), t.to_arrow(filter=pc.field("label") == "n4"))
    same_rows(lf.filter(pl.col("amt") > 2**31).select("id", "amt").collect(),
              t.to_arrow(filter=pc.field("amt") > 2**31, columns=["id", "amt"]))
    same_rows(lf.filter(pl.col("extra").is_null()).collect(),
              t.to_arrow(filter=pc.field("extra").is_null()))


def test_a_version_polars_cannot_cast_goes_through_the_plugin(local_uri: str) -> None:
    """A date widened to a timestamp: Polars' cast is not pyarrow's, so the plugin reads it."""
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("tags", pa.list_(pa.int32()))])
    t = txn.create_table(local_uri, schema)
    t.append(pa.table({"id": [1, 2, 3], "day": [date(2026, 1, 1)] * 3, "tags": [[1], [], None]},
                      schema=schema))
    t.drop_columns(["tags"])  # an older version with a type Polars' native path does not read
    t.append(pa.table({"id": [4], "day": [date(2026, 1, 2)]}))
    t.alter_column("day", pa.timestamp("us"))
    t.append(pa.table({"id": [5], "day": [datetime(2026, 1, 3, 4)]}))
    t.delete(pc.field("id").isin([2, 4]))
    lf = txn.polars.scan(t)
    plan = lf.explain()
    assert plan.count("Parquet SCAN") == 1 and "PYTHON SCAN" in plan, plan
    same_rows(lf.collect(), t.to_arrow())
    same_rows(lf.filter(pl.col("day") < datetime(2026, 1, 2, 12)).collect(),
              t.to_arrow(filter=pc.field("day") < pa.scalar(datetime(2026, 1, 2, 12), pa.timestamp("us"))))


# == predicates ===================================================================================

PREDICATES = [
    pl.col("id") > 150,
    pl.lit(150) < pl.col("id"),
    (pl.col("id") >= 10) & (pl.col("id") < 20),
    pl.col("id").is_between(40, 60, closed="left"),
    pl.col("id").is_in([1, 5, 205, 5000]),
    ~pl.col("id").is_in([1, 5, 205]),
    pl.col("name") == "n17",
    pl.col("name").is_null(),
    ~pl.col("name").is_not_null() | (pl.col("id") == 1),
    pl.col("name").is_in(["n1", None], nulls_equal=True),
    pl.col("score") > 100.0,  # NaN is above every number in Polars
    pl.col("score") != 2.0,
    ~(pl.col("score") <= 100.0),
    pl.col("score").is_in([0.5, float("nan")]),
    pl.col("flag"),
    ~pl.col("flag") & (pl.col("id") < 50),
    pl.col("day") == date(2026, 1, 5),
    pl.col("at") < datetime(2026, 1, 1, 3, tzinfo=timezone.utc),
    pl.col("amt") < 10,
    pl.col("amt").is_between(1.5, 2.5),  # a float bound on a decimal: Polars' own comparison
    (pl.col("id") % 3 == 0) & (pl.col("id") < 30),  # partly translatable
    (pl.col("id") % 3 == 0) | (pl.col("id") < 30),  # not translatable
    ~((pl.col("id") + 1) > 3),
    pl.col("name").str.starts_with("n1"),
    pl.any_horizontal(pl.col("id") == 3, pl.col("id") == 250),
]


@pytest.mark.parametrize("predicate", PREDICATES, ids=[str(p) for p in PREDICATES])
def test_a_filter_gives_polars_own_answer(table_uri: str, predicate: pl.Expr) -> None:
    t = build(table_uri)
    t.delete(pc.field("id").isin([1, 17, 205]))
    snap = t.snapshot()
    got = txn.polars.scan(t).filter(predicate).collect()
    expected = polars_keeps(snap, predicate)
    assert got.sort("id").equals(expected.sort("id")), (predicate, got, expected)


def test_select_filter_and_head_reach_the_scanner(memory_uri: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    t = build(memory_uri)
    t.delete(pc.field("id") == 0)
    lf = txn.polars.scan(t)
    spy = Spy(monkeypatch)

    assert lf.select("name", "id").collect().columns == ["name", "id"]
    [call] = spy.calls
    assert sorted(call["columns"]) == ["id", "name"] and call["paths"] is None
    assert call["filter"] is None and isinstance(call["batch_size"], int)

    spy.calls.clear()
    got = lf.filter((pl.col("id") > 250) & pl.col("name").str.ends_with("1")).select("id").collect()
    assert sorted(got["id"]) == [251, 261, 271, 281, 291]
    [call] = spy.calls
    assert sorted(call["columns"]) == ["id", "name"]
    assert call["filter"].equals(pc.field("id") > 250)  # the part pyarrow can prune with

    spy.calls.clear()
    head = lf.head(3).collect()
    assert head.height == 3 and 0 not in set(head["id"])
    assert spy.heads == [3] and spy.calls[0]["filter"] is None


def test_an_untranslatable_predicate_still_filters(memory_uri: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    t = build(memory_uri)
    spy = Spy(monkeypatch)
    predicate = (pl.col("id") * 2 + 1) % 7 == 0
    got = txn.polars.scan(t).filter(predicate).collect()
    assert got.sort("id").equals(polars_keeps(t.snapshot(), predicate).sort("id"))
    assert got.height == 43
    assert [c["filter"] for c in spy.calls] == [None]


def test_head_then_filter_counts_rows_before_the_predicate(memory_uri: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``head(n).filter(p)``: Polars pushes both; the n rows are taken before ``p``."""
    t = build(memory_uri)
    spy = Spy(monkeypatch)
    got = txn.polars.scan(t).head(5).filter(pl.col("id") % 2 == 0).collect()
    first = t.scanner().head(5)
    assert sorted(got["id"]) == sorted(i for i in first["id"].to_pylist() if i % 2 == 0)
    assert spy.calls[0]["filter"] is None


def test_predicate_translation() -> None:
    def translate(predicate: pl.Expr) -> str | None:
        found = txn.polars._arrow_filter(predicate, SCHEMA)
        return None if found is None else str(found)

    assert translate(pl.col("id") > 3) == "(id > 3)"
    assert translate(pl.lit(3) >= pl.col("id")) == "(id <= 3)"
    assert translate((pl.col("id") > 3) & (pl.col("id") + 1 > 2)) == "(id > 3)"
    assert translate((pl.col("id") > 3) | (pl.col("id") + 1 > 2)) is None
    assert translate(~(pl.col("id") > 3)) == "invert((id > 3))"
    assert translate(~pl.col("id").is_in([1, 2])) is None  # is_in is a superset only
    assert translate(pl.col("name").is_null()) == "is_null(name, {nan_is_null=false})"
    assert translate(pl.col("id").is_between(1, 5, closed="right")) == "((id > 1) and (id <= 5))"
    # NaN is above every float in Polars: "greater" is written as "not less or equal"
    assert translate(pl.col("score") > 1.0) == "invert((score <= 1))"
    assert translate(pl.col("score") > float("nan")) is None
    # no mixed kinds: a float bound on a decimal or an integer column, a string on a date
    assert translate(pl.col("amt") < 2.5) is None
    assert translate(pl.col("id") < 2.5) is None
    assert translate(pl.col("day") == "2026-01-01") is None
    assert translate(pl.col("amt") < 10) == "(amt < 10.00)"
    assert translate(pl.col("missing") > 1) is None


# == inputs and snapshots =========================================================================

def test_uri_table_and_snapshot_inputs(table_uri: str) -> None:
    t = build(table_uri)
    t.delete(pc.field("id") == 7)
    expected = t.to_arrow()
    for source in (t, table_uri, t.snapshot()):
        same_rows(txn.polars.scan(source).collect(), expected)
    if "://" not in table_uri:
        same_rows(txn.polars.scan(Path(table_uri)).collect(), expected)
    with pytest.raises(txn.InvalidOptionError, match="Snapshot"):
        txn.polars.scan(t.snapshot(), as_of=t.timeline()[0].time)
    with pytest.raises(txn.InvalidOptionError, match=r"txn\.Table"):
        txn.polars.scan(42)  # type: ignore[arg-type]


def test_as_of_and_a_frame_does_not_drift(table_uri: str) -> None:
    t = build(table_uri)
    first = t.timeline()[0].time
    lf = txn.polars.scan(t)
    t.delete(pc.field("id") < 50)
    t.append(rows(range(500, 510)))
    same_rows(lf.collect(), t.to_arrow(as_of=t.timeline()[2].time))  # pinned at scan()
    same_rows(txn.polars.scan(t).collect(), t.to_arrow())
    same_rows(txn.polars.scan(t, as_of=first).collect(), t.to_arrow(as_of=first))
    same_rows(txn.polars.scan(table_uri, as_of=first).collect(), rows(range(100)))
    at = t.timeline()[0].completed_at
    assert at is not None
    when = datetime.strptime(at, "%Y%m%d%H%M%S%f").replace(tzinfo=timezone.utc)
    same_rows(txn.polars.scan(t, as_of=when.isoformat()).collect(), rows(range(100)))


def test_a_missing_table_is_the_usual_error(tmp_path: Path) -> None:
    with pytest.raises(txn.TableNotFoundError):
        txn.polars.scan(str(tmp_path / "nothing"))


def test_without_polars_the_error_names_the_extra(memory_uri: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    t = build(memory_uri)
    monkeypatch.setitem(sys.modules, "polars", None)  # import polars raises ImportError
    with pytest.raises(txn.InvalidOptionError, match=r"pip install 'metatxn\[polars\]'"):
        txn.polars.scan(t)


def test_importing_the_module_needs_no_polars() -> None:
    code = "import sys; sys.modules['polars'] = None; import txn.polars; print(txn.polars.__all__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['scan']"


def test_from_arrow_of_a_reader_and_the_capsule(table_uri: str) -> None:
    t = build(table_uri)
    t.delete(pc.field("id") == 3)
    expected = t.to_arrow()
    same_rows(pl.from_arrow(t.scanner().to_reader()), expected)  # type: ignore[arg-type]
    same_rows(pl.DataFrame(t.scanner()), expected)
    same_rows(pl.DataFrame(t.snapshot()), expected)


def test_a_table_folder_with_glob_characters(tmp_path: Path) -> None:
    """Found by review: ``scan_parquet`` took the table's paths as patterns (``t[1]`` matched
    nothing, or a decoy folder ``t1`` beside it)."""
    t = build(str(tmp_path / "t[1]"))
    decoy = tmp_path / "t1"
    decoy.mkdir()
    t.delete(pc.field("id") == 5)
    same_rows(txn.polars.scan(t).collect(), t.to_arrow())
    t2 = build(str(tmp_path / "a**b"))
    same_rows(txn.polars.scan(t2).collect(), t2.to_arrow())
