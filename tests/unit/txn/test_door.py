"""Options and values checked at the door: what a user passes is refused with a TxnError naming it,
before anything is written, instead of silently changing rows or leaving a table unusable."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, rows, sorted_rows

COUNTED = pa.schema([("id", pa.int64(), False), ("n", pa.int32()), ("day", pa.date32()),
                     ("at", pa.timestamp("ms")), ("ratio", pa.float32())])


def _counted(uri: str) -> txn.Table:
    table = txn.create_table(uri, COUNTED)
    table.append(pa.table({"id": [1, 2], "n": [10, 20], "day": [date(2026, 1, 1)] * 2,
                           "at": [datetime(2026, 1, 1)] * 2, "ratio": [0.5, 0.25]}, schema=COUNTED))
    return table


# -- 1. update values are converted without loss ---------------------------------------------------


@pytest.mark.parametrize(("column", "value", "stored"), [
    ("n", 2.7, "2"),
    ("n", -0.5, "0"),
    ("day", datetime(2026, 3, 1, 12, 30), "datetime.date(2026, 3, 1)"),
    ("at", datetime(2026, 3, 1, 0, 0, 0, 1500), "2026, 3, 1, 0, 0, 0, 1000"),
    ("ratio", 1e40, "inf"),
])
def test_an_update_value_that_does_not_fit_without_loss_is_refused(
        memory_uri: str, column: str, value: Any, stored: str) -> None:
    table = _counted(memory_uri)
    before = (table.timeline(), sorted_rows(table.to_arrow()))
    with pytest.raises(txn.SchemaMismatchError) as caught:
        table.update(pc.field("id") == 1, {column: value})
    message = str(caught.value)
    assert repr(column) in message and repr(value) in message and str(COUNTED.field(column).type) in message
    assert stored in message
    assert (table.timeline(), sorted_rows(table.to_arrow())) == before


def test_an_update_value_that_fits_exactly_is_converted(memory_uri: str) -> None:
    table = _counted(memory_uri)
    table.update(pc.field("id") == 1, {"n": 3.0, "day": datetime(2026, 3, 1), "ratio": 0.1,
                                       "at": datetime(2026, 3, 1, 0, 0, 0, 2000)})
    row = sorted_rows(table.to_arrow())[0]
    assert (row["n"], row["day"], row["at"]) == (3, date(2026, 3, 1), datetime(2026, 3, 1, 0, 0, 0, 2000))
    assert row["ratio"] == pytest.approx(0.1)
    with pytest.raises(txn.SchemaMismatchError, match=r"'day'.*without loss"):  # a pyarrow scalar too
        table.update(None, {"day": pa.scalar(datetime(2026, 1, 1, 1), pa.timestamp("s"))})


# -- 12. a filter naming an unknown column is refused, however empty the table ---------------------


@pytest.mark.parametrize("filled", [False, True])
@pytest.mark.parametrize("read", ["to_arrow", "count", "files"])
def test_a_filter_on_an_unknown_column_is_refused_by_every_read(memory_uri: str, filled: bool,
                                                                read: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA)
    if filled:
        table.append(rows(range(3)))
    snapshot = table.snapshot()
    for bad in (pc.field("nope") == 1, pc.field("region") > pc.field("day")):
        with pytest.raises(txn.InvalidOptionError, match="does not apply to this table"):
            getattr(snapshot, read)(filter=bad)
    with pytest.raises(txn.InvalidOptionError, match="nope"):
        table.to_arrow(filter=pc.field("nope") == 1)
