"""Column types Parquet spells otherwise: a table keeps the type it was created with.

Parquet has no seconds unit and no millisecond date, so pyarrow writes ``timestamp[s]`` as
milliseconds, ``time32[s]`` as ``time32[ms]`` and ``date64`` as ``date32`` (and dictionary
columns come back with their own index type). The table's files hold what Parquet gives back and
every read casts it to the table's type exactly (a value that does not fit fails the read); a
type Parquet cannot hold at all is refused at ``create_table``, naming the column. Found by the
issue 22 follow-up: ``timestamp[s]`` tables could be written but never read.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

import txn

SECONDS = [pa.timestamp("s"), pa.timestamp("s", "UTC"), pa.timestamp("s", "Europe/Paris")]
DAYS = [dt.datetime(2026, 1, 1, 1, 2, 3) + dt.timedelta(days=i, seconds=i) for i in range(6)]


def _table(data_type: pa.DataType, ids: range) -> pa.Table:
    values = pa.array([DAYS[i % len(DAYS)] for i in ids], pa.timestamp("s")).cast(data_type)
    return pa.table({"id": pa.array(list(ids), pa.int64()), "ts": values})


def _schema(data_type: pa.DataType) -> pa.Schema:
    return pa.schema([("id", pa.int64()), ("ts", data_type)])


@pytest.mark.parametrize("data_type", SECONDS, ids=str)
def test_a_seconds_timestamp_column_reads_back_as_written(tmp_path: Path, data_type: pa.DataType) -> None:
    t = txn.create_table(str(tmp_path / "t"), _schema(data_type))
    t.append(_table(data_type, range(3)))
    t.append(_table(data_type, range(3, 6)))
    read = t.to_arrow()
    assert read.schema == _schema(data_type)
    assert read.sort_by("id").equals(_table(data_type, range(6)))
    middle = pa.scalar(DAYS[2], pa.timestamp("s")).cast(data_type)
    assert sorted(t.to_arrow(filter=ds.field("ts") <= middle)["id"].to_pylist()) == [0, 1, 2]
    assert t.to_arrow(columns=["ts"]).schema.field("ts").type == data_type
    t.delete(ds.field("id") == 4)
    t.compact("major")
    assert t.to_arrow().sort_by("id").equals(_table(data_type, [0, 1, 2, 3, 5]))
    assert t.validate().ok


def test_a_keyed_table_with_a_seconds_timestamp_upserts_and_looks_up(tmp_path: Path) -> None:
    data_type = pa.timestamp("s", "UTC")
    t = txn.create_table(str(tmp_path / "t"), _schema(data_type), record_key="id", sort_by=["ts"])
    t.append(_table(data_type, range(4)))
    t.upsert(_table(data_type, range(2, 6)).set_column(
        1, "ts", pa.array([DAYS[0]] * 4, pa.timestamp("s")).cast(data_type)))
    read = t.to_arrow().sort_by("id")
    assert read["ts"].to_pylist()[2:] == [DAYS[0].replace(tzinfo=dt.timezone.utc)] * 4
    assert t.lookup([3]).num_rows == 1
    t.compact("major")
    assert t.to_arrow().sort_by("id").equals(read)
    assert t.validate().ok


def test_a_seconds_timestamp_partition_column(tmp_path: Path) -> None:
    data_type = pa.timestamp("s")
    t = txn.create_table(str(tmp_path / "t"), _schema(data_type), partition_by=["ts"])
    t.append(_table(data_type, range(6)))
    assert t.to_arrow().sort_by("id").equals(_table(data_type, range(6)))
    t.overwrite(_table(data_type, [10]).set_column(1, "ts", pa.array([DAYS[1]], data_type)),
                partitions="dynamic")
    assert sorted(t.to_arrow()["id"].to_pylist()) == [0, 2, 3, 4, 5, 10]


@pytest.mark.parametrize(("data_type", "values"), [
    (pa.date64(), [dt.date(2026, 1, 1), None, dt.date(1969, 12, 31)]),
    (pa.time32("s"), [dt.time(1, 2, 3), None, dt.time(23, 59, 59)]),
    (pa.dictionary(pa.int8(), pa.string()), ["a", None, "b"]),
    (pa.list_(pa.timestamp("s")), [[DAYS[0], None], None, []]),
    (pa.struct([("d", pa.date64()), ("t", pa.time32("s"))]),
     [{"d": dt.date(2026, 1, 1), "t": dt.time(1, 2, 3)}, None, {"d": None, "t": None}]),
    (pa.large_string(), ["a", None, ""]),
    (pa.float16(), None),
    (pa.null(), [None, None, None]),
    (pa.uint32(), [0, None, 2**32 - 1]),
], ids=str)
def test_types_parquet_spells_otherwise_round_trip(tmp_path: Path, data_type: pa.DataType,
                                                   values: list[Any] | None) -> None:
    schema = pa.schema([("id", pa.int64()), ("c", data_type)])
    column = pa.array(values, data_type) if values is not None else pa.nulls(3, data_type)
    data = pa.table({"id": pa.array([0, 1, 2], pa.int64()), "c": column}, schema=schema)
    t = txn.create_table(str(tmp_path / "t"), schema)
    t.append(data)
    t.append(data.set_column(0, "id", pa.array([3, 4, 5], pa.int64())))
    t.compact("major")
    read = t.to_arrow().sort_by("id")
    assert read.schema == schema
    assert read.column("c").to_pylist() == column.to_pylist() * 2


@pytest.mark.parametrize(("data_type", "instead"), [
    (pa.month_day_nano_interval(), "a duration, or a struct of months, days and nanoseconds"),
    (pa.struct([("i", pa.month_day_nano_interval())]), "a type Parquet stores"),
], ids=str)
def test_a_type_parquet_cannot_store_is_refused_at_create(tmp_path: Path, data_type: pa.DataType,
                                                          instead: str) -> None:
    with pytest.raises(txn.InvalidOptionError, match=rf"column 'c' is {data_type}.*which Parquet cannot "
                                                     rf"store.*expected {instead}"):
        txn.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("c", data_type)]))
    assert not (tmp_path / "t").exists()


def test_an_external_folder_of_milliseconds_in_a_seconds_table(tmp_path: Path) -> None:
    data_type = pa.timestamp("s")
    t = txn.create_table(str(tmp_path / "t"), _schema(data_type))
    whole = tmp_path / "whole"
    whole.mkdir()
    pq.write_table(_table(pa.timestamp("ms"), range(3)), whole / "a.parquet")
    t.add_segment(str(whole))
    read = t.to_arrow()
    assert read.schema == _schema(data_type)
    assert read.sort_by("id").equals(_table(data_type, range(3)))
    # Milliseconds that are no whole second do not fit the table's type: refused, not truncated.
    fraction = tmp_path / "fraction"
    fraction.mkdir()
    ms = pa.table({"id": pa.array([7], pa.int64()), "ts": pa.array([1_500], pa.timestamp("ms"))})
    pq.write_table(ms, fraction / "b.parquet")
    before = [(i.time, i.state) for i in t.timeline()]
    with pytest.raises(txn.SchemaMismatchError,
                       match=r"b\.parquet holds timestamp\[ms\] values that are not whole s"):
        t.add_segment(str(fraction))
    assert [(i.time, i.state) for i in t.timeline()] == before
    assert t.to_arrow().num_rows == 3


def test_a_data_file_whose_values_do_not_fit_the_table_s_type_fails_the_read(tmp_path: Path) -> None:
    """A file of the table holding milliseconds that are no whole second (written by hand):
    every read refuses it, naming it, rather than truncating."""
    t = txn.create_table(str(tmp_path / "t"), _schema(pa.timestamp("s")))
    t.append(_table(pa.timestamp("s"), range(3)))
    (path,) = [f.path for f in t.snapshot().files()]
    ms = pa.table({"id": pa.array([0, 1, 2], pa.int64()), "ts": pa.array([1_500, 2_000, 3_000],
                                                                          pa.timestamp("ms"))})
    pq.write_table(ms, path.removeprefix("file://"))
    name = Path(path).name
    with pytest.raises(txn.CorruptMetadataError, match=name):
        t.to_arrow()
    with pytest.raises(txn.CorruptMetadataError, match=name):
        t.to_arrow(filter=ds.field("id") == 1)
    assert not t.validate().ok
