"""Partition-scoped overwrite (issue 22): ``t.overwrite(data, partitions="dynamic")`` replaces the
partitions ``data`` writes (Spark's dynamic partition overwrite, Hudi's ``insert_overwrite``,
CarbonData's INSERT OVERWRITE of a partitioned table), ``partitions={...}`` one named partition;
the default still replaces the whole table (Hudi's ``insert_overwrite_table``). It conflicts only
with concurrent commits that touched a partition it replaces."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, rows
from tests.unit.txn.test_concurrency_matrix import assert_left_nothing, race

MFD = "Marked for Delete"


def regions(table: txn.Table) -> dict[int, str]:
    return {r["id"]: r["region"] for r in table.to_arrow(columns=["id", "region"]).to_pylist()}


def statuses(table: txn.Table) -> dict[str, str]:
    return {s.id: s.status for s in table.segments()}


def loaded(uri: str) -> txn.Table:
    """Segment 0: eu 0-2 and us 3-5; segment 1: us 6-7; segment 2: apac 8."""
    table = txn.create_table(uri, SCHEMA, partition_by=["region"])
    table.append(pa.concat_tables([rows(range(3), region="eu"), rows(range(3, 6), region="us")]))
    table.append(rows(range(6, 8), region="us"))
    table.append(rows([8], region="apac"))
    return table


def test_dynamic_overwrite_replaces_only_the_partitions_written(table_uri: str) -> None:
    table = loaded(table_uri)
    before = table.snapshot().instant
    commit = table.overwrite(pa.concat_tables([rows([100], region="us"), rows([101], region="cn")]),
                             partitions="dynamic")
    assert commit is not None and commit.operation == "overwrite"
    assert (commit.rows_added, commit.rows_deleted) == (2, 5)
    assert regions(table) == {0: "eu", 1: "eu", 2: "eu", 8: "apac", 100: "us", 101: "cn"}
    # segment 1 held only us: marked for delete; segment 0 keeps its eu rows
    assert statuses(table) == {"3": "Success", "2": "Success", "1": MFD, "0": "Success"}
    assert sorted(p["region"] for p in table.partitions()) == ["apac", "cn", "eu", "us"]
    assert sorted(table.to_arrow(as_of=before)["id"].to_pylist()) == list(range(9))
    assert table.validate().ok


def test_static_partition_overwrite_replaces_the_named_partition_even_with_no_rows(table_uri: str) -> None:
    table = loaded(table_uri)
    table.overwrite(rows([200], region="eu"), partitions={"region": "eu"})
    assert regions(table) == {**dict.fromkeys(range(3, 8), "us"), 8: "apac", 200: "eu"}
    table.overwrite(rows([]), partitions={"region": "us"})
    assert regions(table) == {8: "apac", 200: "eu"}
    # segment 0's eu rows were deleted by the first overwrite: the second leaves it nothing
    assert statuses(table) == {"4": "Success", "3": "Success", "2": "Success", "1": MFD, "0": MFD}
    assert table.validate().ok
    with pytest.raises(txn.SchemaMismatchError, match="region"):
        table.overwrite(rows([300], region="us"), partitions={"region": "eu"})
    with pytest.raises(txn.InvalidOptionError, match="partition column"):
        table.overwrite(rows([300], region="eu"), partitions={"day": date(2026, 1, 1)})
    with pytest.raises(txn.InvalidOptionError, match="dynamic"):
        table.overwrite(rows([300]), partitions="everything")
    assert regions(table) == {8: "apac", 200: "eu"}


def test_whole_table_overwrite_stays_the_default(table_uri: str) -> None:
    table = loaded(table_uri)
    table.overwrite(rows([100], region="us"))
    assert regions(table) == {100: "us"}


def test_partition_overwrite_of_an_unpartitioned_or_keyed_table(memory_uri: str) -> None:
    plain = txn.create_table(memory_uri, SCHEMA)
    plain.append(rows(range(3)))
    with pytest.raises(txn.InvalidOptionError, match="not partitioned"):
        plain.overwrite(rows([9]), partitions="dynamic")
    keyed = txn.create_table(memory_uri + "-keyed", SCHEMA, partition_by=["region"], record_key="id")
    keyed.append(rows(range(3)))
    with pytest.raises(txn.InvalidOptionError, match="record_key"):
        keyed.overwrite(rows([9]), partitions="dynamic")


def test_overwrite_of_a_partition_does_not_conflict_with_a_commit_to_another(
        monkeypatch: pytest.MonkeyPatch, memory_uri: str) -> None:
    table = loaded(memory_uri)
    other = txn.open_table(memory_uri)
    run = race(monkeypatch, table, lambda: (other.append(rows([50], region="apac")),
                                            other.delete(pc.field("id") == 8)))
    table.overwrite(rows([100], region="us"), partitions="dynamic")
    assert run.b_error is None and run.a_instant is not None
    assert regions(table) == {0: "eu", 1: "eu", 2: "eu", 50: "apac", 100: "us"}
    assert table.validate().ok


@pytest.mark.parametrize("concurrent", ["append", "delete"])
def test_overwrite_of_a_partition_conflicts_with_a_commit_to_it(
        monkeypatch: pytest.MonkeyPatch, memory_uri: str, concurrent: str) -> None:
    table = loaded(memory_uri)
    other = txn.open_table(memory_uri)
    run = race(monkeypatch, table, (lambda: other.append(rows([50], region="us"))) if concurrent == "append"
               else (lambda: other.delete(pc.field("id") == 6)))
    with pytest.raises(txn.CommitConflictError, match="region=us"):
        table.overwrite(rows([100], region="us"), partitions="dynamic")
    assert_left_nothing(table, memory_uri, run.a_instant)
    expected = {**dict.fromkeys(range(3), "eu"), **dict.fromkeys(range(3, 8), "us"), 8: "apac"}
    if concurrent == "append":
        expected[50] = "us"
    else:
        del expected[6]
    assert regions(table) == expected
