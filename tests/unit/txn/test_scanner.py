"""``txn.Scanner`` (issue 25 item 1): a snapshot's rows as record batches, read as they are
pulled, deletes applied per batch.

The reference is a model of the rows the test wrote and deleted (``to_arrow`` itself reads
through the scanner now), checked on tables of every kind of file a snapshot holds: its own
Parquet files with and without deletes, external Parquet/ORC/CSV segments, streaming segments,
files of an older schema version and a partitioned table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txn
from tests.unit.txn.external_data import write_file
from tests.unit.txn.test_add_segment import FLAT, flat_rows

Model = dict[int, dict[str, Any]]


def _rows(table: pa.Table) -> Model:
    return {row["id"]: row for row in table.to_pylist()}


def _plain(tmp_path: Path) -> tuple[txn.Table, Model]:
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    model: Model = {}
    for start in range(0, 3000, 1000):
        rows = flat_rows(range(start, start + 1000))
        t.append(rows)
        model |= _rows(rows)
    return t, model


def _deleted(tmp_path: Path) -> tuple[txn.Table, Model]:
    t, model = _plain(tmp_path)
    gone = [i for i in model if i % 97 == 5 or 1200 <= i < 1300]
    t.delete(pc.field("id").isin(gone))
    return t, {i: r for i, r in model.items() if i not in gone}


def _external(tmp_path: Path) -> tuple[txn.Table, Model]:
    t, model = _plain(tmp_path)
    for fmt, start in (("parquet", 5000), ("orc", 6000), ("csv", 7000)):
        rows = flat_rows(range(start, start + 300))
        write_file(tmp_path / fmt / f"p.{fmt}", rows, fmt)
        t.add_segment(str(tmp_path / fmt), fmt)
        model |= _rows(rows)
    gone = [5, 5001, 6002, 7299]
    t.delete(pc.field("id").isin(gone))
    return t, {i: r for i, r in model.items() if i not in gone}


def _streaming(tmp_path: Path) -> tuple[txn.Table, Model]:
    t = txn.create_table(str(tmp_path / "t"), FLAT, properties={"streaming": "true"})
    stream = t.stream("job")
    model: Model = {}
    for batch_id in range(4):
        rows = flat_rows(range(batch_id * 100, batch_id * 100 + 100))
        stream.write(batch_id, rows)
        model |= _rows(rows)
    t.delete(pc.field("id") == 150)
    del model[150]
    return t, model


def _evolved(tmp_path: Path) -> tuple[txn.Table, Model]:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float32())])
    t = txn.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "score": [0.5, 1.5, 2.5]},
                      schema=schema))
    t.append(pa.table({"id": [4, 5], "name": ["d", "e"], "score": [3.5, 4.5]}, schema=schema))
    t.delete(pc.field("id") == 5)  # an older version's file with deletes: read one by one
    t.rename_column("name", "label")
    t.alter_column("score", type=pa.float64())
    t.add_columns([pa.field("extra", pa.int32())])
    t.append(pa.table({"id": [6], "label": ["f"], "score": [5.5], "extra": [7]},
                      schema=t.schema))
    model = {i: {"id": i, "label": label, "score": score, "extra": None}
             for i, label, score in ((1, "a", 0.5), (2, "b", 1.5), (3, "c", 2.5), (4, "d", 3.5))}
    model[6] = {"id": 6, "label": "f", "score": 5.5, "extra": 7}
    return t, model


def _partitioned(tmp_path: Path) -> tuple[txn.Table, Model]:
    schema = pa.schema([("id", pa.int64()), ("day", pa.int32()), ("v", pa.string())])
    t = txn.create_table(str(tmp_path / "t"), schema, partition_by=["day"])
    rows = pa.table({"id": list(range(60)), "day": [i % 3 for i in range(60)],
                     "v": [f"v{i}" for i in range(60)]}, schema=schema)
    t.append(rows)
    t.delete(pc.field("id") < 4)
    return t, {i: r for i, r in _rows(rows).items() if i >= 4}


TABLES: dict[str, Callable[[Path], tuple[txn.Table, Model]]] = {
    "plain": _plain, "deleted": _deleted, "external": _external, "streaming": _streaming,
    "evolved": _evolved, "partitioned": _partitioned,
}


@pytest.fixture(params=sorted(TABLES))
def table(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[txn.Table, Model]:
    return TABLES[request.param](tmp_path)


def _by_id(table: pa.Table) -> Model:
    found = _rows(table)
    assert len(found) == table.num_rows, "no row twice"
    return found


def test_the_batches_are_the_snapshot(table: tuple[txn.Table, Model]) -> None:
    t, model = table
    scanner = t.scanner(batch_size=128)
    batches = list(scanner.to_batches())
    assert all(0 < b.num_rows <= 128 for b in batches)
    assert all(b.schema == scanner.schema == t.schema for b in batches)
    got = pa.Table.from_batches(batches, schema=scanner.schema)
    assert _by_id(got) == model
    assert got == t.to_arrow(), "to_arrow is the same rows in the same order"
    assert scanner.count_rows() == len(model) == t.snapshot().count()


def test_projection_filter_and_no_columns(table: tuple[txn.Table, Model]) -> None:
    t, model = table
    keep = {i for i in model if i & 3 == 1 and i > 2}
    flt = (pc.equal(pc.bit_wise_and(pc.field("id"), 3), 1)) & (pc.field("id") > 2)
    scanner = t.scanner(columns=["id"], filter=flt, batch_size=50)
    got = scanner.to_arrow()
    assert got.column_names == ["id"] and sorted(got["id"].to_pylist()) == sorted(keep)
    assert scanner.count_rows() == len(keep)
    counted = t.scanner(columns=[], filter=flt, batch_size=50)
    assert sum(b.num_rows for b in counted.to_batches()) == len(keep)
    assert counted.to_arrow().num_rows == len(keep) and counted.schema == pa.schema([])


def test_any_arrow_consumer_takes_the_capsule(table: tuple[txn.Table, Model]) -> None:
    t, model = table
    snap = t.snapshot()
    assert _by_id(pa.table(snap)) == model
    scanner = snap.scanner(batch_size=100)
    reader = pa.RecordBatchReader.from_stream(scanner)
    assert _by_id(reader.read_all()) == model
    assert _by_id(pa.table(scanner)) == model, "a scanner can be read again"
    assert _by_id(scanner.to_reader().read_all()) == model


def test_head_gives_the_first_rows_of_the_scan(table: tuple[txn.Table, Model]) -> None:
    t, model = table
    scanner = t.scanner()
    head = scanner.head(7)
    assert head.num_rows == min(7, len(model))
    assert head == scanner.to_arrow().slice(0, 7)
    assert scanner.head(0).num_rows == 0
    assert t.scanner(columns=["id"]).head(len(model) + 10).num_rows == len(model)


def test_head_reads_only_the_first_file(tmp_path: Path) -> None:
    t, _ = _plain(tmp_path)
    locations = t.snapshot().file_table(stats=False)["location"].to_pylist()
    snap = t.snapshot()
    for location in locations[1:]:  # head must never open these
        Path(location).unlink()
    assert snap.scanner().head(10)["id"].to_pylist() == list(range(10))
    with pytest.raises(txn.ObjectNotFoundError):
        snap.scanner().to_arrow()


def test_to_pandas(tmp_path: Path) -> None:
    t, model = _deleted(tmp_path)
    frame = t.to_pandas(columns=["id", "name"], filter=pc.field("id") < 100)
    assert sorted(frame["id"]) == sorted(i for i in model if i < 100)
    assert list(frame.columns) == ["id", "name"]
    before = t.snapshot()
    t.delete(pc.field("id") == 0)
    assert len(t.to_pandas(as_of=before.instant)) == len(model) == len(before.to_pandas())


@pytest.mark.parametrize("options", [
    {"batch_size": 0}, {"batch_size": -1}, {"batch_size": 1.5}, {"batch_size": True},
    {"memory_budget": 0}, {"memory_budget": "1GB"}, {"columns": ["nope"]}, {"columns": "id"},
    {"filter": "id > 3"}, {"filter": pc.field("nope") > 1},
])
def test_bad_options_are_refused_before_reading(tmp_path: Path, options: dict[str, Any]) -> None:
    t, _ = _plain(tmp_path)
    with pytest.raises(txn.InvalidOptionError):
        t.scanner(**options)
    with pytest.raises(txn.InvalidOptionError):
        t.scanner().head(-1)


def test_a_damaged_file_mid_scan_is_named(tmp_path: Path) -> None:
    t, _ = _deleted(tmp_path)
    files = t.snapshot().file_table(stats=False)
    clean = [loc for loc, d in zip(files["location"].to_pylist(),
                                   files["deleted_rows"].to_pylist(), strict=True) if d == 0]
    victim = clean[-1] if clean else files["location"].to_pylist()[-1]
    Path(victim).write_bytes(b"not parquet at all")
    with pytest.raises(txn.CorruptMetadataError, match=Path(victim).name):
        for _ in t.scanner(batch_size=100).to_batches():
            pass


def test_another_tables_file_in_place_of_a_data_file_is_refused(tmp_path: Path) -> None:
    """Arrow reads a missing column as nulls: a filter on it would match nothing, silently."""
    t, _ = _plain(tmp_path)
    victim = t.snapshot().file_table(stats=False)["location"].to_pylist()[0]
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), victim)
    with pytest.raises(txn.CorruptMetadataError, match="column 'name'"):
        t.scanner(filter=pc.field("name") == "n1").to_arrow()


def test_the_snapshot_is_fixed_while_the_table_moves_on(tmp_path: Path) -> None:
    t, model = _plain(tmp_path)
    scanner = t.scanner(batch_size=500)
    t.append(flat_rows(range(9000, 9010)))
    t.delete(pc.field("id") < 500)
    assert _by_id(scanner.to_arrow()) == model
    assert scanner.snapshot.instant != t.snapshot().instant


def test_an_empty_table_scans_to_nothing(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    assert list(t.scanner().to_batches()) == []
    assert pa.table(t.snapshot()).num_rows == 0 and t.scanner().head(3).schema == FLAT



def test_count_rows_takes_a_further_filter(tmp_path: Path) -> None:
    t, model = _deleted(tmp_path)
    scanner = t.scanner(filter=pc.field("id") < 1500)
    assert scanner.count_rows(pc.field("id") >= 1000) == len([i for i in model if 1000 <= i < 1500])
    assert scanner.count_rows() == len([i for i in model if i < 1500])
    with pytest.raises(txn.InvalidOptionError):
        scanner.count_rows(pc.field("nope") > 1)


def test_duckdb_and_polars_take_a_table_or_snapshot_by_name(tmp_path: Path) -> None:
    """The issue's first try: ``duckdb.sql("select count(*) from t")`` on a Table or a
    Snapshot (DuckDB's replacement scan of a Python variable with an Arrow stream)."""
    import duckdb
    import polars as pl

    t, model = _deleted(tmp_path)
    snap = t.snapshot()
    assert duckdb.sql("select count(*) from t").fetchall() == [(len(model),)]
    assert duckdb.sql("select count(*), sum(id) from snap").fetchall() == [
        (len(model), sum(model))]
    assert pl.from_arrow(snap.scanner(columns=["id"]).to_reader()).height == len(model)
    assert sorted(pl.DataFrame(t)["id"].to_list()) == sorted(model)


def test_a_clean_under_a_long_scan_expires_it(tmp_path: Path) -> None:
    """A scan pulled slowly while compaction and CLEAN FILES remove the files it reads: the
    error says the snapshot expired, not that a file is damaged or gone."""
    t = txn.create_table(str(tmp_path / "t"), FLAT, properties={
        "clean.retain_commits": "1", "clean.retain_hours": "0", "maintenance.mode": "manual"})
    for start in range(0, 400, 100):
        t.append(flat_rows(range(start, start + 100)))
    # Files with deletes are read one at a time, by metatxn (a dataset scan of files this
    # small would have read them all ahead by now).
    t.delete(pc.field("id").isin([0, 100, 200, 300]))
    batches = t.scanner(batch_size=10).to_batches()
    assert next(batches).num_rows == 9
    t.compact("major")
    t.append(flat_rows(range(1000, 1001)))
    t.clean(force=True)
    with pytest.raises(txn.SnapshotExpiredError):
        for _ in batches:
            pass
