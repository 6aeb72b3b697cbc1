"""Tables on S3 (a moto server on 127.0.0.1): the whole write and read path over the S3 backend."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn

pytestmark = pytest.mark.s3

SCHEMA = pa.schema([("k", pa.int64()), ("day", pa.date32()), ("v", pa.string())])


def _rows(first: int, count: int, day: date) -> pa.Table:
    return pa.table({"k": list(range(first, first + count)), "day": [day] * count,
                     "v": [f"v{i}" for i in range(first, first + count)]}, schema=SCHEMA)


def test_appends_overwrite_time_travel_and_validate_on_s3(s3_uri) -> None:  # type: ignore[no-untyped-def]
    uri, options = s3_uri
    table = txn.create_table(uri, SCHEMA, partition_by=["day"], sort_by=["k"],
                             storage_options=options,
                             properties={"metadata.compact_after": "2"})
    first = table.append(_rows(0, 10, date(2026, 1, 1)))
    second = table.append(_rows(10, 10, date(2026, 1, 2)))
    third = table.append(_rows(20, 5, date(2026, 1, 3)))

    reopened = txn.open_table(uri, storage_options=options)
    assert reopened.snapshot().count() == 25
    assert reopened.snapshot(as_of=first.instant).count() == 10
    assert sorted(reopened.to_arrow(pc.field("day") == date(2026, 1, 2))["k"].to_pylist()) == list(
        range(10, 20))
    assert len(reopened.snapshot().files(pc.field("k") >= 20)) == 1
    assert all(f.path.startswith(uri) for f in reopened.snapshot().files())

    replaced = reopened.overwrite(_rows(100, 3, date(2026, 2, 1)))
    assert replaced.rows_deleted == 25
    assert table.snapshot().count() == 3
    assert table.snapshot(as_of=third.instant).count() == 25
    assert table.snapshot(as_of=second.instant).count() == 20
    assert [s.status for s in table.segments()][:2] == ["Success", "Marked for Delete"]
    report = table.validate()
    assert report.ok, str(report)
