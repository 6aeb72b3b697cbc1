"""Every reader of data files besides the snapshot's reads a file of an older schema version by
column id: delete/update/upsert and transaction scans, compaction, validate(), external segments,
partition folders named under an older version (design/schema-evolution.md, sections 2 and 3)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txn

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amt", pa.int32()),
                    ("addr", pa.struct([("city", pa.string())])), ("day", pa.string())])


def rows(ids: range, day: str, amt: int = 1) -> pa.Table:
    return pa.table({"id": list(ids), "name": [f"n{i}" for i in ids],
                     "amt": pa.array([amt] * len(ids), pa.int32()),
                     "addr": [{"city": f"c{i}"} for i in ids], "day": [day] * len(ids)},
                    schema=SCHEMA)


def by_id(table: pa.Table) -> list[dict[str, object]]:
    return sorted(table.to_pylist(), key=lambda row: row["id"])  # type: ignore[arg-type, return-value]


@pytest.fixture
def evolved(tmp_path: Path) -> txn.Table:
    """A keyed, partitioned table with files of five versions: v0 rows 0-3; add ``extra`` (v1)
    and rows 10-11; rename ``name`` -> ``full_name``, widen ``amt`` to int64, add ``addr.zip``
    (v2-v4) and rows 20-21; drop ``extra`` and re-add it as a string (v5, v6) and row 30."""
    t = txn.create_table(str(tmp_path / "t"), SCHEMA, record_key="id", partition_by=["day"])
    t.append(rows(range(4), "d1"))
    t.add_columns([pa.field("extra", pa.int32())])
    t.append(pa.table({"id": [10, 11], "name": ["n10", "n11"], "amt": pa.array([5, 5], pa.int32()),
                       "addr": [{"city": "c10"}, {"city": "c11"}], "day": ["d1", "d2"],
                       "extra": pa.array([7, 8], pa.int32())}))
    t.rename_column("name", "full_name")
    t.alter_column("amt", pa.int64())
    t.add_columns([pa.field("addr.zip", pa.int32())])
    t.append(pa.table({"id": [20, 21], "full_name": ["n20", "n21"], "amt": [2**40, 9],
                       "addr": [{"city": "c20", "zip": 1}, {"city": "c21", "zip": 2}],
                       "day": ["d2", "d2"], "extra": pa.array([9, None], pa.int32())}))
    t.drop_columns(["extra"])
    t.add_columns([pa.field("extra", pa.string())])
    t.append(pa.table({"id": [30], "full_name": ["n30"], "amt": [3],
                       "addr": [{"city": "c30", "zip": 3}], "day": ["d1"], "extra": ["x"]}))
    return t


def expected(ids: list[int]) -> list[dict[str, object]]:
    amt = {10: 5, 11: 5, 20: 2**40, 21: 9, 30: 3}
    day = {11: "d2", 20: "d2", 21: "d2"}
    zips = {20: 1, 21: 2, 30: 3}
    return [{"id": i, "full_name": f"n{i}", "amt": amt.get(i, 1),
             "addr": {"city": f"c{i}", "zip": zips.get(i)}, "day": day.get(i, "d1"),
             "extra": "x" if i == 30 else None} for i in sorted(ids)]


ALL = [0, 1, 2, 3, 10, 11, 20, 21, 30]


def test_delete_by_renamed_column_touches_old_files(evolved: txn.Table) -> None:
    assert by_id(evolved.to_arrow()) == expected(ALL)
    assert {f.schema_id for f in evolved.snapshot().files()} == {0, 1, 4, 6}
    evolved.delete(pc.field("full_name") == "n1")
    evolved.delete(pc.field("full_name").isin(["n10", "n20"]))
    assert by_id(evolved.to_arrow()) == expected([0, 2, 3, 11, 21, 30])
    assert evolved.lookup(pa.table({"id": [1, 10, 20, 2]}))["id"].to_pylist() == [2]


def test_delete_by_readded_column_matches_null_in_old_files(evolved: txn.Table) -> None:
    evolved.delete(pc.field("extra").is_null())  # the old int extra (7, 8, 9) is another column
    assert by_id(evolved.to_arrow()) == expected([30])


def test_update_and_upsert_over_old_files(evolved: txn.Table) -> None:
    evolved.upsert(pa.table({"id": [1, 10, 40], "full_name": ["a", "b", "c"], "amt": [7, 7, 7],
                             "addr": [{"city": "z", "zip": 9}] * 3, "day": ["d1", "d1", "d1"],
                             "extra": ["e", None, None]}))
    got = {row["id"]: row for row in evolved.to_arrow().to_pylist()}
    assert sorted(got) == sorted([*ALL, 40])
    assert got[1]["full_name"] == "a" and got[1]["extra"] == "e" and got[10]["full_name"] == "b"
    evolved.delete(pc.field("id").isin([1, 10, 40]))
    commit = evolved.update(pc.field("amt") < 6, {"full_name": "u"})
    got = by_id(evolved.to_arrow())
    want = expected([i for i in ALL if i not in (1, 10)])
    for row in want:
        if row["amt"] < 6:  # type: ignore[operator]
            row["full_name"] = "u"
    assert got == want
    current = evolved.schema_history()[-1].version
    added = {f.schema_id for f in evolved.snapshot().files()
             if f.path.endswith(tuple(commit.paths_added))}
    assert added == {current} and commit.paths_added


def test_transaction_over_old_files(evolved: txn.Table) -> None:
    with evolved.transaction() as tx:
        tx.delete(pc.field("full_name") == "n0")
        tx.update(pc.field("full_name") == "n11", {"amt": 100})
        positions = {}
        for f in evolved.snapshot().files():
            if f.schema_id == 0:
                positions[f.path.removeprefix(evolved.uri.rstrip("/") + "/")] = [1]
        tx.delete_rows(positions)
    got = {row["id"]: row for row in evolved.to_arrow().to_pylist()}
    assert 0 not in got and 1 not in got and got[11]["amt"] == 100
    assert evolved.lookup(pa.table({"id": [0, 1, 11]}))["id"].to_pylist() == [11]


def test_compaction_across_versions_and_time_travel(evolved: txn.Table) -> None:
    instants = {v.version: v.instant for v in evolved.schema_history()}

    def at_rename() -> None:  # the rename's instant: its schema, old files read by projection
        old = evolved.snapshot(as_of=instants[2])
        assert old.schema.names == ["id", "full_name", "amt", "addr", "day", "extra"]
        got = by_id(old.to_arrow())
        assert [r["full_name"] for r in got] == ["n0", "n1", "n2", "n3", "n10", "n11"]
        assert [r["extra"] for r in got] == [None] * 4 + [7, 8]
        assert got[0]["amt"] == 1 and old.schema.field("amt").type == pa.int32()

    at_rename()
    evolved.delete(pc.field("full_name") == "n2")
    before = by_id(evolved.to_arrow())
    assert evolved.compact("major") is not None
    current = evolved.schema_history()[-1].version
    assert by_id(evolved.to_arrow()) == before
    assert {f.schema_id for f in evolved.snapshot().files()} == {current}
    assert evolved.validate().ok
    at_rename()


def test_validate_clean_then_reports_tampered_old_file(evolved: txn.Table) -> None:
    report = evolved.validate()
    assert report.ok, report
    old = next(f for f in evolved.snapshot().files() if f.schema_id == 0)
    local = old.path.removeprefix("file://")
    pq.write_table(pa.table({"id": [1], "other": ["x"]}), local)
    report = evolved.validate()
    assert not report.ok
    assert any(old.path.endswith(p.path) for p in report.problems), report


def test_partition_column_rename(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "p"), SCHEMA, partition_by=["day"])
    t.append(rows(range(3), "d1"))
    t.append(rows(range(3, 5), "d2"))
    t.rename_column("day", "date")
    assert [f.partition for f in t.snapshot().files()] == [{"date": "d1"}, {"date": "d2"}] or \
        sorted(str(f.partition) for f in t.snapshot().files()) == ["{'date': 'd1'}", "{'date': 'd2'}"]
    assert all(set(p) == {"date"} for p in t.partitions())
    new = rows(range(10, 12), "d1").rename_columns(["id", "name", "amt", "addr", "date"])
    t.append(new)
    assert any("date=d1" in f.path for f in t.snapshot().files())
    t.overwrite(rows(range(20, 21), "d1").rename_columns(["id", "name", "amt", "addr", "date"]),
                partitions={"date": "d1"})
    got = by_id(t.to_arrow())
    assert [r["id"] for r in got] == [3, 4, 20]
    assert t.validate().ok


def _external(tmp_path: Path) -> tuple[txn.Table, str]:
    flat = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.string())])
    t = txn.create_table(str(tmp_path / "e"), flat, partition_by=["day"])
    folder = tmp_path / "ext" / "day=d1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": [1, 2], "name": ["a", "b"]}), folder / "part-0.parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet", partition="day:string")
    return t, str(tmp_path / "ext")


def test_external_segment_after_add_and_rename(tmp_path: Path) -> None:
    t, _ = _external(tmp_path)
    t.add_columns([pa.field("score", pa.float64())])
    assert t.to_arrow().sort_by("id").to_pylist() == [
        {"id": 1, "name": "a", "day": "d1", "score": None},
        {"id": 2, "name": "b", "day": "d1", "score": None}]
    t.rename_column("name", "label")
    t.rename_column("day", "date")
    got = t.to_arrow().sort_by("id").to_pylist()
    assert got == [{"id": 1, "label": "a", "date": "d1", "score": None},
                   {"id": 2, "label": "b", "date": "d1", "score": None}]
    assert [f.partition for f in t.snapshot().files()] == [{"date": "d1"}]
    t.delete(pc.field("label") == "a")
    assert t.to_arrow()["id"].to_pylist() == [2]
    assert t.validate().ok
    assert all(f.schema_id == 0 for f in t.snapshot().files())


def test_external_segment_added_under_a_later_version(tmp_path: Path) -> None:
    flat = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.string())])
    t = txn.create_table(str(tmp_path / "e"), flat, partition_by=["day"])
    t.rename_column("name", "label")
    folder = tmp_path / "ext" / "day=d1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": [1], "label": ["a"]}), folder / "part-0.parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet", partition="day:string")
    assert [f.schema_id for f in t.snapshot().files()] == [1]
    t.add_columns([pa.field("score", pa.float64())])
    assert t.to_arrow().to_pylist() == [{"id": 1, "label": "a", "day": "d1", "score": None}]


def test_validate_after_metadata_compaction_of_an_evolved_table(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "m"), SCHEMA, partition_by=["day"],
                         properties={"metadata.compact_after": "2"})
    t.append(rows(range(3), "d1"))
    t.rename_column("name", "full_name")
    for start in (10, 20, 30):
        t.append(rows(range(start, start + 2), "d2").rename_columns(
            ["id", "full_name", "amt", "addr", "day"]))
    t.maintain()
    t.add_columns([pa.field("extra", pa.int8())])
    report = t.validate()
    assert report.ok, str(report)
    assert [r["full_name"] for r in by_id(t.to_arrow())][:3] == ["n0", "n1", "n2"]


def test_validate_reports_broken_schema_versions() -> None:
    from metatxn.indexes import TableVersion, assign_ids
    from txn._segments._validate import _check_versions

    schema = assign_ids(pa.schema([("a", pa.int64()), ("s", pa.struct([("b", pa.int8())]))]))
    blob = schema.serialize().to_pybytes()
    good = {0: TableVersion(version=0, schema_id=0, arrow_schema=blob, last_column_id=3),
            1: TableVersion(version=1, schema_id=0, arrow_schema=blob, last_column_id=3)}
    assert _check_versions(good) == []
    twice = pa.schema([schema.field("a"), schema.field("s").with_name("c")
                       .with_type(pa.struct([schema.field("a").with_name("b")]))])
    bad = {0: good[0],
           2: TableVersion(version=2, schema_id=5, arrow_schema=twice.serialize().to_pybytes(),
                           last_column_id=1)}
    details = [p.detail for p in _check_versions(bad)]
    assert all(p.kind == txn.ProblemKind.BAD_SCHEMA_VERSION for p in _check_versions(bad))
    assert any("without a gap" in d for d in details)
    assert any("column id(s) [1]" in d for d in details)
    assert any("last_column_id 1" in d for d in details)
    assert any("schema_id 5" in d for d in details)


def test_stream_batches_across_a_rename(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = txn.create_table(str(tmp_path / "s"), schema, properties={"streaming": "true"})
    s = t.stream("job")
    s.write(0, pa.table({"id": [1, 2], "v": ["a", "b"]}, schema=schema))
    t.rename_column("v", "w")
    t.add_columns([pa.field("n", pa.int32())])
    s.write(1, pa.table({"id": [3], "w": ["c"], "n": pa.array([7], pa.int32())}))
    t.delete(pc.field("w") == "a")
    assert t.to_arrow().sort_by("id").to_pylist() == [
        {"id": 2, "w": "b", "n": None}, {"id": 3, "w": "c", "n": 7}]
    assert t.validate().ok


def test_two_phase_delete_of_old_files_after_a_key_rename(evolved: txn.Table) -> None:
    evolved.rename_column("id", "key")
    snapshot = evolved.snapshot()
    old = next(f for f in snapshot.files() if f.schema_id == 0)
    with evolved.begin_write("delete", read_instant=snapshot) as pending:
        commit = pending.commit(deletes={old.path: [0, 1]})
    assert commit is not None and commit.rows_deleted == 2
    assert sorted(evolved.to_arrow()["key"].to_pylist()) == [2, 3, 10, 11, 20, 21, 30]
    assert evolved.lookup(pa.table({"key": [0, 1, 2]}))["key"].to_pylist() == [2]
    assert evolved.validate().ok
