"""CREATE TABLE ... AS SELECT creates its table staged: the table appears with its first commit.

Invariants:

* a CTAS whose write fails after its Spark job wrote the data files leaves no table (and no data
  file) at the location, and the same statement then succeeds with a clean timeline;
* a writer that commits at the location while a CTAS fails keeps its commit: nothing removes a
  folder after the failure (the old ``rm -r`` could remove a commit landed between its timeline
  check and the removal).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pytest

import txn
import txn.spark
from txn.spark import _write

pytestmark = pytest.mark.spark

STATEMENT = "CREATE TABLE x STORED AS metatxn AS SELECT id FROM range(5)"
OTHER = pa.table({"id": pa.array([99], pa.int64())})


def _failing_after_the_job(monkeypatch: pytest.MonkeyPatch, after: Any = None) -> None:
    """The write's Spark job runs (its files land), then the driver fails before the commit."""
    real = _write.run_job

    def run_then_fail(*args: Any, **kwargs: Any) -> Any:
        real(*args, **kwargs)
        if after is not None:
            after()
        raise RuntimeError("the driver failed after the job")

    monkeypatch.setattr(_write, "run_job", run_then_fail)


def test_a_create_table_as_select_failing_in_its_write_leaves_no_table(
        sql: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as patched:
        _failing_after_the_job(patched)
        with pytest.raises(RuntimeError, match="the driver failed"):
            sql(STATEMENT)
    location = str(warehouse / "x")
    with pytest.raises(txn.TableNotFoundError):
        txn.open_table(location)
    assert list((warehouse / "x").rglob("*.parquet")) == []
    sql(STATEMENT)
    table = txn.open_table(location)
    assert [(i.action, i.state) for i in table.timeline()] == [("commit", "completed")]
    assert sorted(table.to_arrow()["id"].to_pylist()) == list(range(5))


def test_a_writer_at_the_location_of_a_failing_create_table_as_select_keeps_its_commit(
        sql: Any, warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    location = str(warehouse / "x")
    failed: list[bool] = []
    other: list[txn.Table] = []

    def other_writer() -> None:
        try:  # the old CTAS created the table before writing: write into it
            txn.open_table(location).append(OTHER)
            other.append(txn.open_table(location))
        except txn.TableNotFoundError:  # staged: no table yet, so this writer creates it
            other.append(txn.create_table(location, OTHER.schema, data=OTHER))

    real_url_to_fs = fsspec.core.url_to_fs

    def racing(url: str, *args: Any, **kwargs: Any) -> Any:
        # The old cleanup's window: after its timeline check, before its rm -r.
        if failed and not other and str(url).rstrip("/").endswith("/x"):
            other_writer()
        return real_url_to_fs(url, *args, **kwargs)

    with monkeypatch.context() as patched:
        _failing_after_the_job(patched, after=lambda: failed.append(True))
        patched.setattr(fsspec.core, "url_to_fs", racing)
        with pytest.raises(RuntimeError, match="the driver failed"):
            sql(STATEMENT)
    if not other:  # nothing touched the location after the failure: the writer comes now
        other_writer()
    table = txn.open_table(location)
    assert table.to_arrow()["id"].to_pylist() == [99]
    assert table.validate().ok
