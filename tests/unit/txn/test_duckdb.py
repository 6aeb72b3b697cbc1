"""``txn.duckdb.register``: a DuckDB view of a snapshot's live rows (issue 25, item 2).

Every answer is compared with the reference reader, ``to_arrow()``, row for row.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
import txn.duckdb
from tests.unit.txn.external_data import write_file

duckdb = pytest.importorskip("duckdb")

SCHEMA = pa.schema([("id", pa.int64(), False), ("v", pa.string())])
STREAMING = {"streaming": "true"}


def rows(ids: Any) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]}, schema=SCHEMA)


def query(t_or_snap: txn.Table | txn.Snapshot, sql: str = "select * from t", *,
          name: str = "t") -> pa.Table:
    con = duckdb.connect()
    txn.duckdb.register(con, name, t_or_snap)
    return con.sql(sql).arrow().read_all()


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda row: json.dumps(row, sort_keys=True, default=str))


def same(found: pa.Table, expected: pa.Table) -> None:
    """The same columns, in order, with the same values, row for row (in any row order)."""
    assert found.column_names == expected.column_names
    cast = found.cast(pa.schema([f.with_metadata(None).with_nullable(True) for f in expected.schema]))
    assert sorted_rows(cast) == sorted_rows(expected)


def same_as_reference(t_or_snap: txn.Table | txn.Snapshot) -> None:
    snap = t_or_snap.snapshot() if isinstance(t_or_snap, txn.Table) else t_or_snap
    same(query(t_or_snap), snap.to_arrow())
    assert query(t_or_snap, "select count(*) as n from t")["n"].to_pylist() == [snap.count()]


def plan_nodes(con: Any, sql: str) -> list[dict[str, Any]]:
    """Every operator of DuckDB's plan for ``sql``, depth first."""
    [(_, text)] = con.sql(f"explain (format json) {sql}").fetchall()

    def walk(nodes: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for node in nodes:
            yield node
            yield from walk(node.get("children", []))

    return list(walk(json.loads(text)))


def parquet_scans(con: Any, sql: str) -> list[dict[str, Any]]:
    return [n["extra_info"] for n in plan_nodes(con, sql) if n["name"] == "READ_PARQUET"]


def arrow_scans(con: Any, sql: str) -> int:
    return sum(n["name"] == "PYTHON_ARROW_SCAN" for n in plan_nodes(con, sql))


# == the native path: the table's own Parquet files ===============================================

RICH = pa.schema([
    ("id", pa.int64(), False),
    ("na me", pa.string()),
    ('q"uote', pa.int32()),
    ("filename", pa.string()),
    ("ts", pa.timestamp("s")),
    ("tz", pa.timestamp("us", tz="UTC")),
    ("amount", pa.decimal128(15, 2)),
    ("day", pa.date32()),
    ("flag", pa.bool_()),
    ("s", pa.struct([("x", pa.int64()), ("y y", pa.string())])),
    ("l", pa.list_(pa.int64())),
    ("region", pa.string()),
])


def rich_rows(ids: Any) -> pa.Table:
    ids = list(ids)
    return pa.table({
        "id": ids,
        "na me": [f"n{i}" if i % 5 else None for i in ids],
        'q"uote': [i * 3 for i in ids],
        "filename": [f"f{i}" for i in ids],
        "ts": [dt.datetime(2026, 1, 1) + dt.timedelta(seconds=i) for i in ids],
        "tz": [dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(microseconds=i)
               for i in ids],
        "amount": [decimal.Decimal(i) / 100 for i in ids],
        "day": [dt.date(2026, 1, 1) + dt.timedelta(days=i % 3) for i in ids],
        "flag": [i % 2 == 0 for i in ids],
        "s": [{"x": i, "y y": str(i)} if i % 4 else None for i in ids],
        "l": [list(range(i % 3)) for i in ids],
        "region": ["eu" if i % 2 else "us" for i in ids],
    }, schema=RICH)


@pytest.fixture
def rich(local_uri: str) -> txn.Table:
    t = txn.create_table(local_uri, RICH, partition_by=["region", "day"], record_key="id")
    t.append(rich_rows(range(40)))
    t.append(rich_rows(range(40, 60)))
    return t


def test_select_star_equals_to_arrow_before_and_after_deletes(rich: txn.Table) -> None:
    """Types, partition columns (written into the files too), quoted names and a column named
    like DuckDB's ``filename`` read as the reference reader has them."""
    same_as_reference(rich)
    rich.delete(keys=[0, 3, 41])
    rich.delete(pc.field("na me").is_null())
    assert rich.snapshot().count() < 60
    same_as_reference(rich)
    con = duckdb.connect()
    txn.duckdb.register(con, "t", rich)
    assert parquet_scans(con, "select * from t"), "the local files are read by DuckDB itself"
    found = con.sql("select * from t").arrow().read_all()
    assert "__metatxn_filename" not in found.column_names
    assert "file_row_number" not in found.column_names


def test_every_row_deleted_and_an_empty_table(local_uri: str) -> None:
    t = txn.create_table(local_uri, SCHEMA, record_key="id")
    same_as_reference(t)
    assert query(t).schema.names == ["id", "v"]
    t.append(rows(range(5)))
    t.delete(keys=list(range(5)))
    assert query(t).num_rows == 0
    same_as_reference(t)


def test_filter_and_projection_reach_read_parquet(local_uri: str) -> None:
    t = txn.create_table(local_uri, SCHEMA, record_key="id")
    t.append(rows(range(100)))
    t.delete(keys=[5, 50])
    con = duckdb.connect()
    txn.duckdb.register(con, "t", t)
    sql = "select v from t where id < 10"
    [scan] = parquet_scans(con, sql)
    assert "id < 10" in scan["Filters"]
    projected = scan["Projections"]
    projected = projected if isinstance(projected, list) else [projected]
    assert "v" in projected and "id" not in projected, "only what the query needs is decoded"
    assert con.sql(sql).fetchall() == [(r,) for r in
                                       t.to_arrow(pc.field("id") < 10, columns=["v"])["v"].to_pylist()]


def test_a_column_named_file_row_number_is_read_through_the_stream(local_uri: str) -> None:
    schema = pa.schema([("id", pa.int64(), False), ("file_row_number", pa.int64())])
    t = txn.create_table(local_uri, schema, record_key="id")
    t.append(pa.table({"id": [1, 2, 3], "file_row_number": [7, 8, 9]}, schema=schema))
    t.delete(keys=[2])
    same_as_reference(t)
    con = duckdb.connect()
    txn.duckdb.register(con, "t", t)
    assert not parquet_scans(con, "select * from t")


# == external and streaming segments ==============================================================

FLAT = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])


def flat(ids: Any) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids], "score": [i / 2 for i in ids]},
                    schema=FLAT)


def test_external_parquet_and_csv_segments(tmp_path: Path) -> None:
    """External Parquet files are read by DuckDB (an extra column in them is not the table's);
    CSV files come through metatxn's reader; deletes apply to both."""
    t = txn.create_table(str(tmp_path / "table"), FLAT)
    t.append(flat(range(10)))
    for n, ids in enumerate((range(10, 20), range(20, 25))):
        extra = flat(ids).append_column("other", pa.array(ids, pa.int32()))
        write_file(tmp_path / "pq" / f"part-{n}.parquet", extra, "parquet")
    write_file(tmp_path / "csv" / "part-0.csv", flat(range(30, 40)), "csv")
    t.add_segment(tmp_path / "pq", "parquet")
    t.add_segment(tmp_path / "csv", "csv")
    same_as_reference(t)
    t.delete(pc.field("id").isin([1, 12, 21, 33]))
    same_as_reference(t)
    con = duckdb.connect()
    txn.duckdb.register(con, "t", t)
    assert len(parquet_scans(con, "select * from t")) == 2, "own files and external Parquet files"
    assert con.sql("select count(*) from t where id >= 10 and id < 25").fetchall() == [(13,)]


def test_external_parquet_of_a_partitioned_table(tmp_path: Path) -> None:
    """Its partition values are in folder names, not in the files: metatxn reads them."""
    schema = pa.schema([*FLAT, ("day", pa.int32())])
    t = txn.create_table(str(tmp_path / "table"), schema, partition_by=["day"])
    t.append(flat(range(5)).append_column("day", pa.array([1] * 5, pa.int32())))
    write_file(tmp_path / "ext" / "day=2" / "part-0.parquet", flat(range(5, 9)), "parquet")
    t.add_segment(tmp_path / "ext", "parquet", partition="day:int")
    t.delete(pc.field("id").isin([0, 6]))
    same_as_reference(t)
    con = duckdb.connect()
    txn.duckdb.register(con, "t", t)
    assert len(parquet_scans(con, "select * from t")) == 1, "the table's own file only"


def test_streaming_segments(local_uri: str) -> None:
    t = txn.create_table(local_uri, SCHEMA, properties={**STREAMING,
                                                        "streaming.auto_handoff": "false"})
    s = t.stream("job1")
    for batch_id in range(3):
        s.write(batch_id, rows(range(batch_id * 4, batch_id * 4 + 4)))
    assert {seg.status for seg in t.segments()} == {"Streaming"}
    same_as_reference(t)
    t.delete(pc.field("id").isin([1, 6, 11]))
    same_as_reference(t)


# == schema versions ==============================================================================

def test_files_of_older_schema_versions(local_uri: str) -> None:
    """Renamed, added, dropped and widened columns: older files' columns found by id and cast."""
    schema = pa.schema([("id", pa.int64(), False), ("n", pa.int32()), ("f", pa.float32()),
                        ("old", pa.string()), ("day", pa.date32()), ("amount", pa.decimal128(10, 2)),
                        ("gone", pa.string())])
    t = txn.create_table(local_uri, schema, record_key="id")
    t.append(pa.table({"id": [1, 2, 3], "n": [10, 20, 30], "f": [0.5, 1.5, 2.5],
                       "old": ["a", "b", "c"], "day": [dt.date(2026, 1, d) for d in (1, 2, 3)],
                       "amount": [decimal.Decimal("1.25"), None, decimal.Decimal("-3.50")],
                       "gone": ["x", "y", "z"]}, schema=schema))
    first = t.snapshot()
    t.rename_column("old", "new")
    t.alter_column("n", pa.int64())
    t.alter_column("f", pa.float64())
    t.alter_column("day", pa.timestamp("us"))
    t.alter_column("amount", pa.decimal128(15, 2))
    t.drop_columns(["gone"])
    t.add_columns([pa.field("added", pa.string()), pa.field("gone", pa.string())])
    t.append(pa.table({"id": [4], "n": [2**40], "f": [9.25], "new": ["d"],
                       "day": [dt.datetime(2026, 2, 1, 12)], "amount": [decimal.Decimal("1e10")],
                       "added": ["x"], "gone": ["new"]}, schema=t.snapshot().schema))
    t.delete(keys=[2])
    same_as_reference(t)
    same_as_reference(first)
    con = duckdb.connect()
    txn.duckdb.register(con, "t", t)
    assert len(parquet_scans(con, "select * from t")) == 2, "one scan per schema version"
    assert con.sql("select new, added, gone from t where id = 1").fetchall() == [("a", None, None)]


def test_a_renamed_struct_field_in_an_older_file(local_uri: str) -> None:
    """A cast cannot follow a struct field by id: that version comes through metatxn's reader."""
    schema = pa.schema([("id", pa.int64(), False), ("s", pa.struct([("a", pa.int64())]))])
    t = txn.create_table(local_uri, schema, record_key="id")
    t.append(pa.table({"id": [1, 2], "s": [{"a": 1}, {"a": 2}]}, schema=schema))
    t.rename_column("s.a", "b")
    t.append(pa.table({"id": [3], "s": [{"b": 3}]}, schema=t.snapshot().schema))
    t.delete(keys=[1])
    same_as_reference(t)
    con = duckdb.connect()
    txn.duckdb.register(con, "t", t)
    assert len(parquet_scans(con, "select * from t")) == 1, "the newer version's file only"
    assert arrow_scans(con, "select * from t") == 1, "the older file, its deletes applied by metatxn"


# == tables, snapshots, storage ===================================================================

def test_a_table_and_a_snapshot_side_by_side(local_uri: str) -> None:
    """Two registered tables on one connection, each with its deletes, do not mix."""
    t = txn.create_table(local_uri, SCHEMA, record_key="id")
    t.append(rows(range(10)))
    t.delete(keys=[1])
    before = t.snapshot()
    t.append(rows(range(10, 15)))
    t.delete(keys=[2, 12])
    con = duckdb.connect()
    txn.duckdb.register(con, "now", t)
    txn.duckdb.register(con, "old", before)
    same(con.sql("select * from now").arrow().read_all(), t.to_arrow())
    same(con.sql("select * from old").arrow().read_all(), before.to_arrow())
    assert con.sql("select count(*) from now").fetchall() == [(12,)]
    assert con.sql("select count(*) from old").fetchall() == [(9,)]
    old = t.snapshot(as_of=before.instant)
    same_as_reference(old)


def test_memory_storage_goes_through_the_stream(memory_uri: str) -> None:
    t = txn.create_table(memory_uri, SCHEMA, record_key="id")
    t.append(rows(range(10)))
    t.delete(keys=[3])
    same_as_reference(t)
    con = duckdb.connect()
    txn.duckdb.register(con, "t", t)
    assert not parquet_scans(con, "select * from t")
    assert arrow_scans(con, "select * from t") == 1
    assert con.sql("select sum(id) from t where id > 5").fetchall() == [(6 + 7 + 8 + 9,)]


def test_register_again_after_a_write_sees_it(local_uri: str) -> None:
    t = txn.create_table(local_uri, SCHEMA, record_key="id")
    t.append(rows(range(3)))
    con = duckdb.connect()
    txn.duckdb.register(con, "t", t)
    t.delete(keys=[0])
    t.append(rows([7]))
    assert con.sql("select count(*) from t").fetchall() == [(3,)], "the view is pinned"
    txn.duckdb.register(con, "t", t)
    assert sorted(con.sql("select id from t").fetchall()) == [(1,), (2,), (7,)]
    t.delete(keys=[1, 2, 7])
    txn.duckdb.register(con, "t", t)
    assert con.sql("select count(*) from t").fetchall() == [(0,)]


# == refused input ================================================================================

@pytest.mark.parametrize("name", ["1x", "a b", "", 'x"; drop', 3, None])
def test_bad_names_are_refused(memory_uri: str, name: Any) -> None:
    t = txn.create_table(memory_uri, SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match="name must be an identifier"):
        txn.duckdb.register(duckdb.connect(), name, t)


@pytest.mark.parametrize("con", [None, "duckdb", object()])
def test_a_connection_is_required(memory_uri: str, con: Any) -> None:
    t = txn.create_table(memory_uri, SCHEMA)
    with pytest.raises(txn.InvalidOptionError, match="con must be a DuckDB connection"):
        txn.duckdb.register(con, "t", t)


def test_a_table_or_snapshot_is_required() -> None:
    with pytest.raises(txn.InvalidOptionError, match=r"txn\.Table or txn\.Snapshot"):
        txn.duckdb.register(duckdb.connect(), "t", "memory://x")


def test_without_duckdb_the_error_names_the_extra(memory_uri: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    t = txn.create_table(memory_uri, SCHEMA)
    con = duckdb.connect()
    monkeypatch.setitem(sys.modules, "duckdb", None)  # import duckdb now raises ImportError
    with pytest.raises(txn.InvalidOptionError, match=r"pip install 'metatxn\[duckdb\]'"):
        txn.duckdb.register(con, "t", t)


def test_txn_duckdb_imports_without_duckdb() -> None:
    """Only register needs DuckDB: a program that never calls it runs without the extra."""
    code = ("import sys; sys.modules['duckdb'] = None\n"
            "import txn, txn.duckdb\n"
            "assert 'duckdb' not in vars(txn.duckdb) and sys.modules['duckdb'] is None\n"
            "print(txn.duckdb.__all__)")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, check=False)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "['register']"


# -- found by review: paths, folder names, case and types DuckDB reads its own way -----------


def test_a_table_folder_with_glob_characters_reads_its_own_files(tmp_path: Path) -> None:
    """``read_parquet`` takes a path as a pattern: ``t[1]`` would match ``t1``, a decoy folder
    beside it, and the deleted row would come back."""
    t = txn.create_table(str(tmp_path / "t[1]"), SCHEMA)
    t.append(rows([1, 2, 3]))
    decoy = tmp_path / "t1" / "segment_0"
    decoy.mkdir(parents=True)
    for f in (tmp_path / "t[1]" / "segment_0").glob("*.parquet"):
        (decoy / f.name).write_bytes(f.read_bytes())
    t.delete(pc.field("id") == 2)
    same_as_reference(t)
    assert query(t)["id"].to_pylist() == [1, 3]


def test_folder_names_are_not_values(tmp_path: Path) -> None:
    """DuckDB's Hive detection would read ``k=999`` (an external folder) as column k, and
    partition values it can cast (``0x10``) as numbers."""
    schema = pa.schema([("id", pa.int64()), ("k", pa.int64())])
    t = txn.create_table(str(tmp_path / "a"), schema)
    write_file(tmp_path / "ext" / "k=999" / "part-0.parquet",
               pa.table({"id": [1, 2], "k": [1, 2]}, schema=schema), "parquet")
    t.add_segment(str(tmp_path / "ext" / "k=999"))
    same_as_reference(t)
    strings = pa.schema([("id", pa.int64()), ("p", pa.string())])
    t = txn.create_table(str(tmp_path / "b"), strings, partition_by=["p"])
    t.append(pa.table({"id": [1, 2, 3, 4], "p": ["0x10", "-0", " 7", "8"]}, schema=strings))
    same_as_reference(t)
    assert query(t, "select id from t where p = '0x10'")["id"].to_pylist() == [1]


def test_names_that_differ_only_by_case(local_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("ID", pa.int64())])
    t = txn.create_table(local_uri, schema)
    t.append(pa.table({"id": [1, 2], "ID": [100, 200]}, schema=schema))
    found = query(t, "select * from t order by 1")
    # DuckDB's identifiers ignore case: it renames the second; the values are the table's.
    assert [c.to_pylist() for c in found.columns] == [[1, 2], [100, 200]]


@pytest.mark.parametrize("kind", [pa.duration("s"), pa.float16()])
def test_types_duckdbs_parquet_reader_reads_otherwise(local_uri: str, kind: pa.DataType) -> None:
    import numpy as np

    schema = pa.schema([("id", pa.int64()), ("x", kind)])
    t = txn.create_table(local_uri, schema)
    values = [np.float16(1.5), np.float16(2.5)] if kind == pa.float16() else [1, 2]
    t.append(pa.table({"id": [1, 2], "x": pa.array(values, kind)}, schema=schema))
    t.delete(pc.field("id") == 1)
    assert query(t, "select id from t")["id"].to_pylist() == [2]
    assert query(t, "select count(*) as n from t")["n"].to_pylist() == [1]


def test_an_external_file_with_a_column_named_file_row_number(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    extra = flat(range(3)).append_column("file_row_number", pa.array([7, 8, 9], pa.int64()))
    write_file(tmp_path / "pq" / "part-0.parquet", extra, "parquet")
    t.add_segment(tmp_path / "pq", "parquet")
    t.delete(pc.field("id") == 1)
    same_as_reference(t)


def test_a_relative_table_path_outlives_a_change_of_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    t = txn.create_table("relative", SCHEMA)
    t.append(rows([1, 2, 3]))
    t.delete(pc.field("id") == 3)
    con = duckdb.connect()
    txn.duckdb.register(con, "t", t)
    monkeypatch.chdir("/")
    assert sorted(r for (r,) in con.sql("select id from t").fetchall()) == [1, 2]
