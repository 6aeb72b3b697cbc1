"""``Table.validate()``: the metadata table against the truth on storage.

It is clean after any sequence of successful writes, and reports each kind of disagreement as a
``Problem`` naming its kind and path, never by raising.
"""

from __future__ import annotations

import io
import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txn
import txn._files._scan as txn_scan
from metatxn import timeline
from metatxn.indexes._blocks import decoding
from metatxn.timeline import RollbackPlan
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, data_files_on_storage, rows, storage_of
from txn._files import reading_file


def _loaded(uri: str, **kwargs: object) -> tuple[txn.Table, list[txn.Commit]]:
    table = txn.create_table(uri, SCHEMA, **kwargs)  # type: ignore[arg-type]
    commits = [table.append(rows(range(5), region="eu")),
               table.append(rows(range(5, 9), region="us"))]
    return table, commits


def _kinds(report: txn.ValidationReport) -> list[tuple[str, str]]:
    return sorted((p.kind, p.path) for p in report.problems)


def test_a_new_table_validates_clean(table_uri: str) -> None:
    report = txn.create_table(table_uri, SCHEMA).validate()
    assert isinstance(report, txn.ValidationReport)
    assert report.ok and report.problems == []


def test_appends_and_overwrites_validate_clean(table_uri: str) -> None:
    table, _ = _loaded(table_uri, partition_by=["region"],
                       properties={"metadata.compact_after": "2"})
    table.overwrite(rows(range(100, 103), region="apac"))
    table.append(rows(range(103, 104), region=None))
    table.overwrite(rows(range(200, 201)))
    report = table.validate()
    assert report.ok, str(report)
    assert report.files_checked == len(data_files_on_storage(table_uri)), (
        "replaced files are checked too until they are cleaned")
    assert str(report).startswith("ok")


def test_a_missing_data_file_is_reported(table_uri: str) -> None:
    table, commits = _loaded(table_uri)
    [gone] = commits[0].paths_added
    storage_of(table_uri).delete(gone)
    report = table.validate()
    assert not report.ok
    assert _kinds(report) == [("missing file", gone)]
    assert all(isinstance(p, txn.Problem) for p in report.problems)
    assert gone in str(report)


def test_a_data_file_with_other_bytes_is_a_size_mismatch(table_uri: str) -> None:
    table, commits = _loaded(table_uri)
    [changed] = commits[1].paths_added
    storage = storage_of(table_uri)
    other = pa.BufferOutputStream()
    pq.write_table(rows(range(50, 60)), other)
    storage.put(changed, other.getvalue().to_pybytes())
    report = table.validate()
    assert _kinds(report) == [("size mismatch", changed)]
    assert "bytes" in report.problems[0].detail


def test_a_corrupt_data_file_of_the_same_size_is_reported_not_raised(table_uri: str) -> None:
    table, commits = _loaded(table_uri)
    [broken] = commits[0].paths_added
    storage = storage_of(table_uri)
    storage.put(broken, b"\0" * storage.size(broken))
    assert _kinds(table.validate()) == [("unreadable file", broken)]


def _parquet_of_size(table: pa.Table, size: int) -> bytes:
    """A valid Parquet file holding ``table``, padded to exactly ``size`` bytes with footer
    key/value metadata."""

    def encode(padding: int) -> bytes:
        sink = pa.BufferOutputStream()
        with pq.ParquetWriter(sink, table.schema, store_schema=False) as writer:
            writer.write_table(table)
            writer.add_key_value_metadata({"pad": "x" * padding})
        return sink.getvalue().to_pybytes()

    shortfall = size - len(encode(0))
    assert shortfall >= 0, "the replacement must be smaller than the original"
    for padding in range(max(0, shortfall - 4), shortfall + 4):
        data = encode(padding)
        if len(data) == size:
            return data
    raise AssertionError(f"cannot pad a Parquet file to {size} bytes")


def test_a_file_with_another_row_count_but_the_same_size_is_reported(table_uri: str) -> None:
    table, commits = _loaded(table_uri)
    [swapped] = commits[0].paths_added
    storage = storage_of(table_uri)
    storage.put(swapped, _parquet_of_size(rows(range(2)), storage.size(swapped)))
    report = table.validate()
    assert _kinds(report) == [("row count mismatch", swapped)]
    assert "5 rows" in report.problems[0].detail and "2" in report.problems[0].detail


def test_an_unreferenced_parquet_file_in_the_table_folder_is_reported(table_uri: str) -> None:
    table, _ = _loaded(table_uri, partition_by=["region"])
    sink = pa.BufferOutputStream()
    pq.write_table(rows(range(3)), sink)
    stray = "region=eu/part-9-00000-stray_20990101000000000.parquet"
    storage_of(table_uri).put(stray, sink.getvalue().to_pybytes())
    report = table.validate()
    assert _kinds(report) == [("unreferenced file", stray)]
    assert table.snapshot().count() == 9, "a stray file is never read"


def test_files_that_are_not_parquet_or_live_under_metadata_are_not_data(table_uri: str) -> None:
    table, _ = _loaded(table_uri)
    storage = storage_of(table_uri)
    storage.put("README.txt", b"notes")
    storage.put("_metadata/scratch/old.parquet", b"x")
    assert table.validate().ok


def test_every_problem_is_reported_at_once(table_uri: str) -> None:
    table, commits = _loaded(table_uri)
    storage = storage_of(table_uri)
    storage.delete(commits[0].paths_added[0])
    storage.put(commits[1].paths_added[0], b"short")
    storage.put("segment_7/stray.parquet", b"PAR1")
    assert _kinds(table.validate()) == sorted([
        ("missing file", commits[0].paths_added[0]),
        ("size mismatch", commits[1].paths_added[0]),
        ("unreferenced file", "segment_7/stray.parquet"),
    ])


# -- damaged files are named by readers and reported by validate --------------------------------


@pytest.mark.parametrize("damage", ["truncated", "deleted"])
def test_a_damaged_data_file_is_named_not_blamed_on_the_filter(table_uri: str, damage: str) -> None:
    table, commits = _loaded(table_uri)
    [broken] = commits[1].paths_added
    storage = storage_of(table_uri)
    if damage == "deleted":
        storage.delete(broken)
    else:
        storage.put(broken, storage.read(broken)[:30])
    # A missing file is a StorageError that is also a FileNotFoundError.
    error = txn.StorageError if damage == "deleted" else txn.CorruptMetadataError
    with pytest.raises(error, match=re.escape(broken)) as info:
        table.to_arrow()
    assert getattr(info.value, "path", None) == broken
    assert damage != "deleted" or isinstance(info.value, FileNotFoundError)
    with pytest.raises(error, match=re.escape(broken)):
        table.snapshot().count(pc.field("id") > 2)
    assert _kinds(table.validate())[0][1] == broken


@pytest.mark.parametrize("damage", [b"", b"garbage", "deleted"])
def test_a_damaged_delete_delta_is_named(table_uri: str, damage: bytes | str) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id")
    table.append(rows(range(10)))
    table.delete(keys=[2, 3])
    [delta] = [p for p in storage_of(table_uri).list("", recursive=True) if p.endswith(".deletedelta")]
    storage = storage_of(table_uri)
    if damage == "deleted":
        storage.delete(delta)
    else:
        storage.put(delta, damage)  # type: ignore[arg-type]
    reopened = txn.open_table(table_uri)
    with pytest.raises(txn.TxnError, match=re.escape(delta)):
        reopened.to_arrow()
    report = reopened.validate()  # a keyed table: reports, never raises
    assert delta in {p.path for p in report.problems}


def test_a_keyed_table_with_a_truncated_data_file_is_reported_not_raised(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id")
    commit = table.append(rows(range(10)))
    table.append(rows(range(10, 20)))
    [broken] = commit.paths_added
    storage = storage_of(table_uri)
    storage.put(broken, b"\1" * storage.size(broken))
    assert _kinds(table.validate()) == [("unreadable file", broken)]


@pytest.mark.parametrize("content", [b"", b"\xff\xfe\x00", b"somewhere/else.parquet"])
def test_a_damaged_marker_is_reported_not_raised(table_uri: str, content: bytes) -> None:
    table, _ = _loaded(table_uri)
    marker = "_markers/part-0-00000-0123456789abcdef_20990101000000000.parquet"
    storage_of(table_uri).put(marker, content)
    assert _kinds(table.validate()) == [("damaged file", marker)]


# -- damage past the footer: every error names the file, never the filter -----------------------


def _damage_a_page(storage: timeline.Storage, path: str) -> None:
    """Overwrite the second half of the first column chunk's pages; the footer stays intact."""
    data = bytearray(storage.read(path))
    chunk = pq.ParquetFile(io.BytesIO(bytes(data))).metadata.row_group(0).column(0)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    end = start + chunk.total_compressed_size
    for i in range((start + end) // 2, end):
        data[i] = (7 * i + 13) % 256
    storage.put(path, bytes(data))
    assert pq.ParquetFile(io.BytesIO(bytes(data))).metadata.num_rows > 0, "the footer decodes"


def _reads_name(table: txn.Table, path: str, error: type[txn.TxnError] = txn.CorruptMetadataError,
                keyed: bool = False) -> None:
    reads = [lambda: table.to_arrow(), lambda: table.to_arrow(pc.field("id") > 2),
             lambda: table.snapshot().count(pc.field("id") > 2),
             lambda: table.to_arrow(pc.field("id") > 2, columns=["price"])]
    if keyed:
        reads.append(lambda: table.delete(pc.field("id") == 7))
    for read in reads:
        with pytest.raises(error, match=re.escape(path)) as info:
            read()
        assert getattr(info.value, "path", None) == path
        assert not isinstance(info.value, txn.InvalidOptionError)


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed-with-deltas"])
def test_a_damaged_page_behind_an_intact_footer_is_named_by_reads_and_validate(
        table_uri: str, keyed: bool) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id" if keyed else None)
    commit = table.append(rows(range(2000)))
    table.append(rows(range(5000, 5010)))
    if keyed:
        table.delete(keys=[3])  # the damaged file is scanned row group by row group
    [broken] = commit.paths_added
    _damage_a_page(storage_of(table_uri), broken)
    table = txn.open_table(table_uri)
    _reads_name(table, broken, keyed=keyed)
    assert _kinds(table.validate()) == [("unreadable file", broken)]


def _other_table(ids: range, **columns: pa.Array) -> pa.Table:
    return pa.table({"id": pa.array([str(i) for i in ids]), **columns}) if not columns \
        else pa.table(columns)


@pytest.mark.parametrize("columns", ["other-types", "other-names"])
@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "keyed-with-deltas"])
def test_a_parquet_file_of_another_table_is_named_by_reads(table_uri: str, keyed: bool,
                                                           columns: str) -> None:
    """Never read as nulls where the table's columns are missing: rows would change silently."""
    table = txn.create_table(table_uri, SCHEMA, record_key="id" if keyed else None)
    commit = table.append(rows(range(20)))
    table.append(rows(range(50, 55)))
    if keyed:
        table.delete(keys=[3])
    [swapped] = commit.paths_added
    other = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": [f"k{i}" for i in range(20)], "price": ["x"] * 20})
                   if columns == "other-types" else pa.table({"a": list(range(20))}), other)
    storage_of(table_uri).put(swapped, other.getvalue().to_pybytes())
    table = txn.open_table(table_uri)
    _reads_name(table, swapped, keyed=keyed)
    problems = txn.open_table(table_uri).validate().problems
    assert swapped in {p.path for p in problems}


def test_a_parquet_file_of_another_schema_and_the_same_size_is_reported(table_uri: str) -> None:
    table, commits = _loaded(table_uri)
    [swapped] = commits[0].paths_added
    storage = storage_of(table_uri)
    other = pa.table({"a": pa.array(range(5), pa.int64()), "b": pa.array(["x"] * 5)})
    storage.put(swapped, _parquet_of_size(other, storage.size(swapped)))
    report = table.validate()
    assert _kinds(report) == [("unreadable file", swapped)]
    assert "'id' missing" in report.problems[0].detail


@pytest.mark.parametrize("transient", [pa.ArrowIOError("connection reset"),
                                       pa.ArrowInvalid("connection reset mid-footer")])
def test_a_scan_that_fails_but_whose_files_all_read_again_is_a_storage_error(
        table_uri: str, monkeypatch: pytest.MonkeyPatch, transient: Exception) -> None:
    """The filter was checked up front: it is never blamed for a failure the files do not
    repeat when each is read again."""
    table, _ = _loaded(table_uri)

    class Flaky:
        def to_table(self, *args: object, **kwargs: object) -> None:
            raise transient

        count_rows = scanner = to_table

    monkeypatch.setattr(txn.Snapshot, "_dataset", lambda *args, **kwargs: Flaky())
    for read in (lambda: table.to_arrow(), lambda: table.to_arrow(pc.field("id") > 2),
                 lambda: table.snapshot().count(pc.field("id") > 2)):
        with pytest.raises(txn.StorageError, match="connection reset"):
            read()


def test_a_refused_read_of_a_data_file_is_reported_with_its_path(
        table_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    table, commits = _loaded(table_uri)
    [refused] = commits[0].paths_added
    real = txn_scan._fragment

    def fragment(store: object, path: str) -> object:
        if path == refused:
            raise PermissionError(13, "Permission denied", path)
        return real(store, path)  # type: ignore[arg-type]

    monkeypatch.setattr(txn_scan, "_fragment", fragment)
    report = table.validate()
    assert _kinds(report) == [("unreadable file", refused)]
    with pytest.raises(txn.StorageError) as info:
        txn_scan.read_data_file(table._context.store, refused, table.schema)
    assert info.value.path == refused  # type: ignore[attr-defined]


def test_storage_errors_of_the_shared_readers_carry_the_path() -> None:
    with pytest.raises(txn.StorageError) as info, reading_file("a/b.parquet", "a data file"):
        raise PermissionError(13, "Permission denied")
    assert info.value.path == "a/b.parquet"  # type: ignore[attr-defined]
    with pytest.raises(txn.StorageError) as info, decoding("_metadata/files/x.log.arrow", "a block"):
        raise PermissionError(13, "Permission denied")
    assert info.value.path == "_metadata/files/x.log.arrow"  # type: ignore[attr-defined]


@pytest.mark.parametrize("content", ["../x/{name}", "_timeline/{name}", "_metadata/{name}",
                                     "a/./{name}", "{name}"])
def test_a_marker_naming_a_path_read_marker_refuses_is_reported(table_uri: str, content: str) -> None:
    table, _ = _loaded(table_uri)
    name = "part-0-00000-0123456789abcdef_20990101000000000.parquet"
    marker = f"_markers/{name}"
    storage_of(table_uri).put(marker, content.format(name=name).encode())
    assert _kinds(table.validate()) == [("damaged file", marker)]


# -- instants left pending ----------------------------------------------------------------------


def test_an_expired_instant_and_a_pending_rollback_are_reported(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    table.append(rows(range(5)))
    dead = table._context.timeline.request("commit", None)
    assert table.validate().ok, "a pending write whose writer still beats is no problem"
    clock.advance(10 * 60_000)
    [problem] = table.validate().problems
    assert (problem.kind, problem.path) == ("expired instant", f"_timeline/{dead.file_name}")
    assert dead.time in problem.detail
    plan = RollbackPlan(target_time=dead.time, target_action="commit")
    rollback = table._context.timeline.request("rollback", plan)
    table._context.timeline.heartbeat(rollback).beat()
    kinds = _kinds(table.validate())
    assert ("pending rollback", f"_timeline/{rollback.file_name}") not in kinds, "still beating"
    clock.advance(10 * 60_000)
    kinds = _kinds(table.validate())
    assert ("pending rollback", f"_timeline/{rollback.file_name}") in kinds


@pytest.mark.parametrize("folder", ["_timeline", "_metadata/_timeline"])
def test_a_file_named_like_an_instant_but_not_one_is_reported_with_its_folder(
        table_uri: str, folder: str) -> None:
    _loaded(table_uri)
    path = f"{folder}/20260101000000000_x.commit"
    storage_of(table_uri).put(path, b"{}")
    report = txn.open_table(table_uri).validate()  # never raises
    assert path in {p.path for p in report.problems}, str(report)
