"""The public helpers the SQL layer shows tables with: partition folders and values, the trash,
a streaming sink, and SHOW SEGMENTS' texts."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

import txn
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, rows, storage_of
from tests.unit.txn.test_clean import NO_RETENTION, _orphan, _overwritten

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _segment(**changes: object) -> txn.Segment:
    fields: dict[str, object] = {
        "id": "0", "status": "Success", "format": "parquet", "external": False, "path": None,
        "partitions": [], "rows": 1, "data_size": 1264, "index_size": 912, "load_start": START,
        "load_end": START + timedelta(minutes=1, seconds=3, milliseconds=200), "merged_to": None,
        "instant": "20260101000000000"}
    return txn.Segment(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_segment_shows_its_time_and_sizes_as_carbondata_does() -> None:
    shown = _segment()
    assert (shown.load_time_taken, shown.data_size_text, shown.index_size_text) == \
        ("1M3.2S", "1.23KB", "912.0B")
    running = _segment(load_end=None, external=True)
    assert (running.load_time_taken, running.index_size_text) == ("NA", "NA")


def test_partition_folders_and_values_are_the_writer_s(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region", "day"])
    assert table.partition_folder({"day": date(2026, 1, 2), "region": None}) == \
        "region=__HIVE_DEFAULT_PARTITION__/day=2026-01-02"
    assert table.partition_folder({"region": "a/b"}) == "region=a%2Fb"
    assert table.partition_value("day", "2026-01-02") == date(2026, 1, 2)
    with pytest.raises(txn.InvalidOptionError, match="'monday' of column 'day' is not a date32"):
        table.partition_value("day", "monday")
    with pytest.raises(txn.InvalidOptionError, match="not a partition column"):
        table.partition_value("price", "1")
    with pytest.raises(txn.InvalidOptionError, match=r"\['price'\] are not partition columns"):
        table.partition_folder({"price": 1.0})
    table.append(rows(range(3), day=date(2026, 1, 2)))
    [values] = table.partitions()
    assert table.partition_folder(values) == "region=eu/day=2026-01-02"


def test_streaming_says_whether_the_table_is_a_sink(table_uri: str) -> None:
    assert not txn.create_table(table_uri, SCHEMA).streaming
    assert txn.create_table(f"{table_uri}/sink", SCHEMA, properties={"streaming": "true"}).streaming


def test_trash_lists_what_clean_files_moved_there(table_uri: str, clock: FakeClock) -> None:
    table, _ = _overwritten(table_uri, clock, **NO_RETENTION)
    assert table.trash() == {}
    orphan = _orphan(table)
    result = table.clean()
    moved = f"{result.trash}/{orphan}"
    assert table.trash() == {moved: storage_of(table_uri).size(moved)}
    assert sum(table.trash().values()) == result.trashed_bytes > 0
