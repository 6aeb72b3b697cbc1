"""Timestamp partition columns (issue 22): folders named as Hive and Spark name them, values that
read back exactly in every unit and time zone, and files pruned by a filter on the column."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txn
from tests.unit.txn.external_data import url_of
from tests.unit.txn.helpers import data_files_on_storage

UTC = timezone.utc


def events(schema: pa.Schema, values: list[object]) -> pa.Table:
    return pa.table({"id": pa.array(range(len(values)), pa.int64()),
                     "ts": pa.array(values, schema.field("ts").type)}, schema=schema)


def folders(uri: str) -> list[str]:
    return sorted({path.rsplit("/", 1)[0] for path in data_files_on_storage(uri)})


def test_timestamp_partition_folders_escape_colons_as_spark_does(memory_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    table = txn.create_table(memory_uri, schema, partition_by=["ts"])
    values = [datetime(2026, 1, 1, 10, 0, tzinfo=UTC), datetime(2026, 1, 1, 10, 0, 0, 500, tzinfo=UTC),
              datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), None]
    table.append(events(schema, values))
    assert folders(memory_uri) == ["ts=1969-12-31 23%3A59%3A59.999999", "ts=2026-01-01 10%3A00%3A00",
                                   "ts=2026-01-01 10%3A00%3A00.0005", "ts=__HIVE_DEFAULT_PARTITION__"]
    assert table.to_arrow().sort_by("id").column("ts").to_pylist() == values
    assert {p["ts"] for p in table.partitions()} == set(values)


@pytest.mark.parametrize("unit", ["ms", "us", "ns"])
@pytest.mark.parametrize("zone", [None, "UTC", "Europe/Paris"])
def test_timestamp_partition_values_round_trip_exactly(memory_uri: str, unit: str, zone: str | None) -> None:
    """Every unit's finest tick, before and after 1970, in a naive and in zoned columns: the
    folder holds the instant's UTC wall time (a zoned column's zone is part of its type)."""
    data_type = pa.timestamp(unit, tz=zone)
    schema = pa.schema([("id", pa.int64()), ("ts", data_type)])
    ticks = [0, 1, -1, 1_767_261_600 * {"ms": 10**3, "us": 10**6, "ns": 10**9}[unit] + 7]
    table = txn.create_table(memory_uri, schema, partition_by=["ts"])
    data = pa.table({"id": pa.array(range(len(ticks)), pa.int64()),
                     "ts": pa.array(ticks, pa.int64()).cast(data_type)}, schema=schema)
    table.append(data)
    read = table.to_arrow().sort_by("id")
    assert read.schema == schema
    assert read.column("ts").cast(pa.int64()).to_pylist() == ticks
    for i, tick in enumerate(ticks):
        value = pa.scalar(tick, pa.int64()).cast(data_type)
        assert table.to_arrow(filter=pc.field("ts") == value).column("id").to_pylist() == [i]
        found = table.snapshot().files(filter=pc.field("ts") == value)
        # Column statistics keep microseconds: nanosecond values one microsecond apart prune.
        assert len(found) == 1 or unit == "ns", (tick, found)
    if unit == "ms" and zone == "Europe/Paris":  # the folder shows the UTC wall time
        assert "ts=2026-01-01 10%3A00%3A00.007" in folders(memory_uri)


def test_timestamp_partition_prunes_by_range_and_filters(memory_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("ms", tz="UTC"))])
    table = txn.create_table(memory_uri, schema, partition_by=["ts"])
    start = datetime(2026, 3, 1, tzinfo=UTC)
    table.append(events(schema, [start + timedelta(hours=h) for h in range(6)]))
    later = pc.field("ts") >= pa.scalar(start + timedelta(hours=4), pa.timestamp("ms", tz="UTC"))
    assert len(table.snapshot().files(filter=later)) == 2
    assert table.to_arrow(filter=later).sort_by("id").column("id").to_pylist() == [4, 5]
    zoned = pa.scalar(datetime(2026, 3, 1, 6, tzinfo=ZoneInfo("Europe/Paris")),  # 05:00 UTC
                      pa.timestamp("ms", tz="UTC"))
    assert table.to_arrow(filter=pc.field("ts") == zoned).column("id").to_pylist() == [5]


def test_date_and_timestamp_partitions_with_deletes_and_compaction(memory_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("ts", pa.timestamp("us"))])
    table = txn.create_table(memory_uri, schema, partition_by=["d", "ts"])
    moment = datetime(2026, 5, 4, 3, 2, 1)
    for n in range(2):
        table.append(pa.table({"id": pa.array([n * 2, n * 2 + 1], pa.int64()),
                               "d": pa.array([date(2026, 5, 4)] * 2, pa.date32()),
                               "ts": pa.array([moment, moment + timedelta(seconds=1)], pa.timestamp("us"))},
                              schema=schema))
    table.delete(pc.field("ts") == moment)
    table.compact("major")
    assert folders(memory_uri)[-2:] == ["d=2026-05-04/ts=2026-05-04 03%3A02%3A01",
                                        "d=2026-05-04/ts=2026-05-04 03%3A02%3A02"]
    assert sorted(table.to_arrow().column("id").to_pylist()) == [1, 3]
    assert table.validate().ok


def test_add_segment_reads_spark_timestamp_partition_folders(tmp_path: object, local_uri: str) -> None:
    """A Hive folder Spark wrote (``ts=2026-01-01 10%3A00%3A00``) adds with its exact value."""
    root = Path(str(tmp_path)) / "external"
    folder = root / "ts=2026-01-01 10%3A00%3A00.25"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([7], pa.int64())}), folder / "part-0.parquet")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    table = txn.create_table(local_uri, schema, partition_by=["ts"])
    table.add_segment(url_of(root), partition="ts:timestamp")
    assert table.to_arrow().to_pylist() == [
        {"id": 7, "ts": datetime(2026, 1, 1, 10, 0, 0, 250000, tzinfo=UTC)}]


def test_add_segment_of_nanosecond_timestamp_folders(tmp_path: object, local_uri: str) -> None:
    root = Path(str(tmp_path)) / "external"
    folder = root / "ts=2026-01-01 10%3A00%3A00.000000001"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": pa.array([7], pa.int64())}), folder / "part-0.parquet")
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("ns"))])
    table = txn.create_table(local_uri, schema, partition_by=["ts"])
    table.add_segment(url_of(root), partition="ts:timestamp")
    assert table.to_arrow().column("ts").cast(pa.int64()).to_pylist() == [1_767_261_600 * 10**9 + 1]
    later = pa.scalar(1_767_261_600 * 10**9 + 2, pa.int64()).cast(pa.timestamp("ns"))
    assert table.to_arrow(filter=pc.field("ts") < later).num_rows == 1
    assert table.validate().ok


def test_float_partition_columns_stay_refused(memory_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("x", pa.float64())])
    with pytest.raises(txn.InvalidOptionError, match="timestamps"):
        txn.create_table(memory_uri, schema, partition_by=["x"])
