"""A table written by metatxn before schema versions existed (``tests/fixtures/
table_before_versions``, made by ``tests/fixtures/make_table_before_versions.py`` at commit
aeecb1c): no column ids, no ``schemas`` partition, name-keyed statistics. It opens, reads,
prunes and validates as before, and its first schema change records version 0 with the ids
``assign_ids`` gives its ``table.json`` schema."""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn.indexes import field_id

FIXTURE = Path(__file__).parents[2] / "fixtures" / "table_before_versions"


def row(i: int, day: date) -> dict[str, object]:
    return {"id": i, "name": f"n{i}", "amt": i * 10, "day": day, "addr": {"city": f"c{i}", "zip": i}}


JAN1, JAN2 = date(2026, 1, 1), date(2026, 1, 2)
ROWS = [row(1, JAN1), row(3, JAN1), row(4, JAN2), row(5, JAN2), row(6, JAN2)]


@pytest.fixture
def table(tmp_path: Path) -> txn.Table:
    shutil.copytree(FIXTURE, tmp_path / "t")
    return txn.open_table(str(tmp_path / "t"))


def test_it_reads_prunes_and_validates_as_it_did(table: txn.Table) -> None:
    assert table.to_arrow().sort_by("id").to_pylist() == ROWS
    assert [f.schema_id for f in table.snapshot().files()] == [0, 0, 0]
    # Its statistics are keyed by name: read through version 0's ids, they still prune.
    assert table.snapshot().file_table(pc.field("amt") > 55).num_rows == 1
    assert table.snapshot().file_table(pc.field("amt") > 1000).num_rows == 0
    assert table.validate().ok
    assert [v.version for v in table.schema_history()] == [0]
    assert [field_id(f) for f in table.schema] == [1, 2, 3, 4, 5]


def test_its_first_change_records_version_0_and_it_evolves(table: txn.Table) -> None:
    with table.update_schema() as u:
        u.rename_column("name", "full_name").alter_column("amt", pa.int64())
        u.add_column("addr.country", pa.string()).add_column("note", pa.string())
    history = txn.open_table(table.uri).schema_history()
    assert [v.version for v in history] == [0, 1]
    assert history[0].schema.names == ["id", "name", "amt", "day", "addr"]
    assert [field_id(f) for f in history[1].schema] == [1, 2, 3, 4, 5, 9]  # addr.country got 8
    table.append(pa.table({"id": [7], "full_name": ["n7"], "amt": [2 ** 40], "day": [JAN2],
                           "addr": [{"city": "c7", "zip": 7, "country": "fr"}], "note": ["new"]},
                          schema=table.schema))
    table.delete(pc.field("full_name") == "n3")
    table.update(pc.field("id") == 4, {"note": "updated"})
    expected = [{"id": r["id"], "full_name": r["name"], "amt": r["amt"], "day": r["day"],
                 "addr": {**r["addr"], "country": None}, "note": None} for r in ROWS if r["id"] != 3]
    expected[1]["note"] = "updated"
    expected.append({"id": 7, "full_name": "n7", "amt": 2 ** 40, "day": JAN2,
                     "addr": {"city": "c7", "zip": 7, "country": "fr"}, "note": "new"})
    assert table.to_arrow().sort_by("id").to_pylist() == expected
    assert table.snapshot().file_table(pc.field("amt") > 2 ** 39).num_rows == 1
    table.compact("major")
    assert table.to_arrow().sort_by("id").to_pylist() == expected
    assert table.validate().ok
