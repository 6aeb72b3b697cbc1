"""``txn.FileReader``: the public per-file reader an engine ships to its workers
(``Snapshot.file_reader()``, issue 23 item 3): the table's Parquet files and external ORC/CSV
files, deletes applied, with positions, projection and filter, after a pickled round trip; a
changed external file raises ``CorruptMetadataError``."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.unit.txn.external_data import write_file
from tests.unit.txn.test_add_segment import FLAT, flat_rows
from tests.unit.txn.test_external_changes import rewrite

PARTITIONED = pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.int32())])


def shipped(snapshot: txn.Snapshot) -> txn.FileReader:
    """The snapshot's reader as a worker receives it."""
    return pickle.loads(pickle.dumps(snapshot.file_reader()))


def every_file(reader: txn.FileReader, files: list[txn.DataFile], **options: object) -> pa.Table:
    return pa.concat_tables([reader.read(f, **options) for f in files])  # type: ignore[arg-type]


def ids(table: pa.Table) -> list[int]:
    return sorted(table["id"].to_pylist())


@pytest.fixture
def mixed(tmp_path: Path) -> txn.Table:
    """A table of its own Parquet files and an external ORC and an external CSV segment, rows
    deleted from one own file and from both external files."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    t.append(flat_rows(range(10)))
    t.append(flat_rows(range(10, 20)))
    write_file(tmp_path / "orc" / "p.orc", flat_rows(range(100, 110)), "orc")
    t.add_segment(str(tmp_path / "orc"), "orc")
    write_file(tmp_path / "csv" / "p.csv", flat_rows(range(200, 210)), "csv")
    t.add_segment(str(tmp_path / "csv"), "csv")
    t.delete(pc.field("id").isin([3, 4, 104, 200, 209]))
    return t


def test_reading_every_file_gives_the_snapshot_rows(mixed: txn.Table) -> None:
    snapshot = mixed.snapshot()
    files = snapshot.files()
    assert sorted(f.format for f in files) == ["csv", "orc", "parquet", "parquet"]
    assert [f.external for f in files if f.format != "parquet"] == [True, True]
    assert not any(f.external for f in files if f.format == "parquet")
    for reader in (snapshot.file_reader(), shipped(snapshot)):
        assert every_file(reader, files).sort_by("id") == snapshot.to_arrow().sort_by("id")
        assert ids(every_file(reader, files)) == ids(snapshot.to_arrow())
        assert reader.schema == FLAT


def test_positions_are_the_rows_in_the_file_as_written(mixed: txn.Table) -> None:
    snapshot = mixed.snapshot()
    reader = shipped(snapshot)
    by_format = {f.format: f for f in snapshot.files() if f.external}
    orc = reader.read(by_format["orc"], positions=True)
    assert orc.column_names == ["id", "name", "score", txn.FileReader.POSITION_COLUMN]
    assert orc["_position"].to_pylist() == [0, 1, 2, 3, 5, 6, 7, 8, 9]  # 104 deleted
    assert (np.asarray(orc["id"]) - 100).tolist() == orc["_position"].to_pylist()
    csv = reader.read(by_format["csv"], positions="where", columns=["id"])
    assert csv.column_names == ["id", "where"]
    assert csv["where"].to_pylist() == list(range(1, 9))  # 200 and 209 deleted
    own = [f for f in snapshot.files() if not f.external and f.deleted_rows]
    assert len(own) == 1 and own[0].deleted_rows == 2
    read = reader.read(own[0], positions=True)
    assert read["_position"].to_pylist() == [0, 1, 2, 5, 6, 7, 8, 9]
    assert reader.deleted_positions(own[0]).tolist() == [3, 4]
    assert reader.deleted_positions(by_format["csv"]).tolist() == [0, 9]


def test_projection_and_filter(mixed: txn.Table) -> None:
    snapshot = mixed.snapshot()
    reader = shipped(snapshot)
    files = snapshot.files()
    wanted = pc.field("score") >= 4.0
    read = every_file(reader, files, columns=["id"], filter=wanted)
    assert read.column_names == ["id"]
    assert ids(read) == ids(snapshot.to_arrow(filter=wanted))
    assert sum(reader.read(f, columns=[]).num_rows for f in files) == snapshot.count()
    with_positions = every_file(reader, files, columns=["name"], filter=pc.field("id") == 105,
                                positions=True)
    assert with_positions.to_pylist() == [{"name": "n105", "_position": 5}]


def test_a_partitioned_external_file_takes_its_partition_values(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), PARTITIONED, partition_by=["day"])
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    write_file(tmp_path / "ext" / "day=7" / "p.orc", rows, "orc")
    t.add_segment(str(tmp_path / "ext"), "orc", partition="day:int")
    t.delete(pc.field("id") == 2)
    snapshot = t.snapshot()
    [data_file] = snapshot.files()
    read = shipped(snapshot).read(data_file, columns=["day", "id"], positions=True)
    assert read.to_pylist() == [{"day": 7, "id": 1, "_position": 0},
                                {"day": 7, "id": 3, "_position": 2}]


def test_a_changed_external_file_raises_corrupt_metadata(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    path = tmp_path / "ext" / "p.parquet"
    write_file(path, flat_rows([10, 11, 12]), "parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet")
    snapshot = t.snapshot()
    [data_file] = snapshot.files()
    reader = shipped(snapshot)
    assert reader.read(data_file).num_rows == 3
    reader.check(data_file)

    rewrite(path, flat_rows([10, 11, 12, 13]))

    for check in (lambda: reader.read(data_file), lambda: reader.check(data_file),
                  lambda: shipped(snapshot).read(data_file, columns=["id"])):
        with pytest.raises(txn.CorruptMetadataError, match=r"p\.parquet.*recorded"):
            check()


def test_bad_arguments_are_refused(mixed: txn.Table, tmp_path: Path) -> None:
    snapshot = mixed.snapshot()
    reader = snapshot.file_reader()
    data_file = snapshot.files()[0]
    with pytest.raises(txn.InvalidOptionError, match="unknown"):
        reader.read(data_file, columns=["nope"])
    with pytest.raises(txn.InvalidOptionError, match="does not apply"):
        reader.read(data_file, filter=pc.field("nope") > 1)
    with pytest.raises(txn.InvalidOptionError, match="positions"):
        reader.read(data_file, positions="id")
    with pytest.raises(txn.InvalidOptionError, match=r"txn\.DataFile"):
        reader.read(data_file.path)  # type: ignore[arg-type]
    other = txn.create_table(str(tmp_path / "other"), FLAT)
    other.append(flat_rows([1]))
    with pytest.raises(txn.InvalidOptionError, match="not a data file of the table"):
        reader.read(other.snapshot().files()[0])


def test_the_reader_pickles_small(mixed: txn.Table) -> None:
    """No positions, no file list: what a worker needs to open the table and the snapshot's
    deltas by name."""
    for _ in range(3):
        mixed.append(flat_rows(range(1000, 2000)))
    assert len(pickle.dumps(mixed.snapshot().file_reader())) < 4096



def test_another_process_reads_with_the_pickled_reader(mixed: txn.Table, tmp_path: Path) -> None:
    """What Ray, Dask or a plain worker process does: the reader and a file, pickled, read
    there with nothing but the pickle."""
    snapshot = mixed.snapshot()
    csv = next(f for f in snapshot.files() if f.format == "csv")
    job = tmp_path / "job.pickle"
    job.write_bytes(pickle.dumps((snapshot.file_reader(), csv)))
    script = ("import pickle, sys; reader, file = pickle.loads(open(sys.argv[1], 'rb').read()); "
              "print(reader.read(file, columns=['id'], positions=True).to_pydict())")
    done = subprocess.run([sys.executable, "-c", script, str(job)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str({"id": list(range(201, 209)), "_position": list(range(1, 9))})


def test_a_table_on_s3_is_read_with_its_storage_options(s3_uri) -> None:  # type: ignore[no-untyped-def]
    uri, options = s3_uri
    t = txn.create_table(uri, FLAT, storage_options=options)
    t.append(flat_rows(range(5)))
    t.delete(pc.field("id") == 1)
    snapshot = txn.open_table(uri, storage_options=options).snapshot()
    [data_file] = snapshot.files()
    assert shipped(snapshot).read(data_file, positions=True)["_position"].to_pylist() == [0, 2, 3, 4]
