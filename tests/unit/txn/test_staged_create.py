"""A staged create: ``create_table(..., data=...)`` makes the table appear with its first commit.

Invariants, on the durable state of storage:

* a load that fails before the commit point leaves no table (``open_table`` raises
  TableNotFoundError) and nothing under the location; the location can be created again and
  shows a clean timeline;
* a creator killed at any storage call leaves no table, the whole first commit, or (killed
  between ``table.json`` and the completed file) an empty table whose dead instant the next
  writer rolls back: never part of a commit;
* of two staged creators of one location exactly one commits; the other gets TableExistsError,
  and its instant rolls back and is forgotten (the winner's timeline holds only its own).

Faults are injected at the storage seam (``tests/faults.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import txn
from metatxn import timeline
from tests.conftest import FakeClock
from tests.faults import injected
from tests.unit.txn.helpers import SCHEMA, Faulty, batch_reader, rows, sorted_rows, states, storage_of
from txn._context import TABLE_CONFIG_PATH, StagedCreate, TableContext, create_context, encode_config
from txn._table import Table

#: Longer than both the default lock lease and the default heartbeat timeout (60 s each).
EXPIRY_MS = 10 * 60_000


def _broken_source() -> Iterator[pa.RecordBatch]:
    yield rows(range(3)).to_batches()[0]
    raise RuntimeError("the source broke")


def _files(uri: str) -> list[str]:
    return sorted(storage_of(uri).list("", recursive=True))


def _staged_on(uri: str, storage: timeline.Storage, clock: FakeClock, record_key: str | None = "id") -> Table:
    """A staged ``create_table`` at ``uri`` whose every I/O goes through ``storage``."""
    config = create_context(uri, SCHEMA, record_key=record_key, clock=clock, staged=True).config
    context = TableContext(uri, storage, config, clock=clock)
    context.staged = StagedCreate(storage, uri, encode_config(config))
    return Table._over(context)


def test_a_failed_load_leaves_no_table_and_the_location_can_be_created_again(table_uri: str) -> None:
    with pytest.raises(RuntimeError, match="the source broke"):
        txn.create_table(table_uri, SCHEMA, record_key="id",
                         data=batch_reader(SCHEMA, _broken_source()))
    with pytest.raises(txn.TableNotFoundError):
        txn.open_table(table_uri)
    # Removed by name: its data files, markers, metadata blocks and instant files.
    assert [f for f in _files(table_uri) if not f.startswith("_timeline/_lock")] == []
    table = txn.create_table(table_uri, SCHEMA, record_key="id")
    assert table.timeline() == [] and table.snapshot().to_arrow().num_rows == 0
    assert table.validate().ok


def test_a_refused_load_leaves_no_table(table_uri: str) -> None:
    with pytest.raises(txn.DuplicateKeyError):
        txn.create_table(table_uri, SCHEMA, record_key="id", data=rows([1, 1]))
    with pytest.raises(txn.TableNotFoundError):
        txn.open_table(table_uri)


def test_the_table_appears_with_its_first_commit(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id", data=rows(range(5)))
    reopened = txn.open_table(table_uri)
    assert states(reopened) == [("commit", "completed")]
    assert sorted_rows(reopened.snapshot().to_arrow()) == sorted_rows(rows(range(5)))
    assert reopened.table_id == table.table_id
    table.append(rows(range(5, 7)))  # the handle goes on as an ordinary table
    assert reopened.snapshot().to_arrow().num_rows == 7


def test_data_of_no_rows_creates_the_empty_table(table_uri: str) -> None:
    txn.create_table(table_uri, SCHEMA, data=rows([]))
    assert txn.open_table(table_uri).timeline() == []


def test_a_staged_create_refuses_a_location_that_holds_a_table(table_uri: str) -> None:
    txn.create_table(table_uri, SCHEMA)
    with pytest.raises(txn.TableExistsError):
        txn.create_table(table_uri, SCHEMA, data=rows(range(3)))
    assert txn.open_table(table_uri).timeline() == []


def test_of_two_staged_creators_of_one_location_exactly_one_commits(table_uri: str, clock: FakeClock) -> None:
    """The loser is writing its files (its instant pending, the lock free) when the winner
    commits; it finds ``table.json`` taken at its own commit and rolls back."""
    faulty = Faulty(storage_of(table_uri))
    winner: list[txn.Table] = []
    faulty.interleave(1, lambda: winner.append(txn.create_table(
        table_uri, SCHEMA, record_key="id", clock=clock, data=rows(range(10, 12)))),
        match=lambda path: path.startswith("_markers/"))
    # Unkeyed and streamed: a write that does not hold the lock while it writes its files.
    loser = _staged_on(table_uri, faulty, clock, record_key=None)
    with pytest.raises(txn.TableExistsError):
        loser.append(batch_reader(SCHEMA, iter(rows(range(3)).to_batches())))
    table = txn.open_table(table_uri, clock=clock)
    assert table.table_id == winner[0].table_id != loser.table_id
    assert sorted_rows(table.snapshot().to_arrow()) == sorted_rows(rows(range(10, 12)))
    # The loser's instant was never part of any table: forgotten by name after its rollback.
    assert states(table) == [("commit", "completed")]
    assert table.validate().ok


def test_of_two_staged_creators_racing_at_the_commit_point_exactly_one_commits(
        table_uri: str, clock: FakeClock) -> None:
    """An ordinary create (which takes no lock) lands between the staged creator's last check
    and its put of ``table.json``: the put-if-absent decides, and the staged write rolls back."""
    faulty = Faulty(storage_of(table_uri))
    winner: list[txn.Table] = []
    faulty.interleave(1, lambda: winner.append(txn.create_table(table_uri, SCHEMA, clock=clock)),
                      ops=["put_if_absent"], match=TABLE_CONFIG_PATH.__eq__)
    loser = _staged_on(table_uri, faulty, clock)
    with pytest.raises(txn.TableExistsError):
        loser.append(rows(range(3)))
    table = txn.open_table(table_uri, clock=clock)
    assert table.table_id == winner[0].table_id
    assert table.snapshot().to_arrow().num_rows == 0
    assert states(table) == []
    assert table.validate().ok


def _calls_of_a_staged_create(uri: str, clock: FakeClock) -> list[str]:
    faulty = Faulty(storage_of(uri))
    _staged_on(uri, faulty, clock).append(rows(range(5)))
    return [f"{c.op} {c.path}" for c in faulty.calls]


@pytest.mark.allow_metatxn_warnings  # a creator whose storage failed logs its failed rollback
@pytest.mark.parametrize("kind", ["death", "exception"])
def test_a_staged_create_failing_at_any_call_leaves_no_table_or_the_whole_commit(
        memory_uri: str, clock: FakeClock, kind: str) -> None:
    calls = _calls_of_a_staged_create(f"{memory_uri}/probe", clock)
    config_put = next(i for i, c in enumerate(calls, 1) if c == f"put_if_absent {TABLE_CONFIG_PATH}")
    completion = next(i for i, c in enumerate(calls, 1)
                      if c.startswith("put_if_absent _timeline/") and "_" in c.rsplit("/", 1)[1]
                      and c.endswith(".commit"))
    outcomes: set[str] = set()
    for nth in range(1, len(calls) + 1):
        uri = f"{memory_uri}/at{nth}"
        for when in ("before", "after"):
            uri_when = f"{uri}{when}"
            faulty = Faulty(storage_of(uri_when))
            faulty.arm(nth, when=when, crash=kind == "death")
            try:
                _staged_on(uri_when, faulty, clock).append(rows(range(5)))
            except Exception as exc:  # whatever the fault became
                assert injected(exc) is not None, (nth, when, exc)
            clock.advance(EXPIRY_MS)
            outcomes.add(_check_outcome(uri_when, clock, nth, when, config_put, completion))
    assert outcomes == {"no table", "committed", "empty table"}


def _check_outcome(uri: str, clock: FakeClock, nth: int, when: str, config_put: int,
                   completion: int) -> str:
    where = (nth, when)
    try:
        table = txn.open_table(uri, clock=clock)
    except txn.TableNotFoundError:
        assert nth < config_put or (nth == config_put and when == "before"), where
        again = txn.create_table(uri, SCHEMA, record_key="id", clock=clock, data=rows(range(20, 22)))
        assert sorted_rows(again.snapshot().to_arrow()) == sorted_rows(rows(range(20, 22))), where
        # What the failed creator left (rolled back now if it died) was forgotten by name.
        assert states(again) == [("commit", "completed")], where
        assert again.validate().ok, where
        return "no table"
    visible = table.snapshot().to_arrow()
    if visible.num_rows:
        assert sorted_rows(visible) == sorted_rows(rows(range(5))), where
    else:  # killed between table.json and the completed file: an empty table
        assert config_put <= nth <= completion, where
        table.append(rows(range(30, 31)))  # rolls the dead instant back
        assert table.snapshot().to_arrow().num_rows == 1, where
        assert table.validate().ok, where
        return "empty table"
    assert table.validate().ok, where
    return "committed"


def test_a_failed_load_on_s3_leaves_no_table_through_the_table_s_storage_options(s3_uri: Any) -> None:
    """Everything the failed create wrote is removed through its own storage (the old CTAS
    cleanup removed the folder through fsspec's defaults, ignoring ``storage_options``)."""
    uri, options = s3_uri
    with pytest.raises(RuntimeError, match="the source broke"):
        txn.create_table(uri, SCHEMA, storage_options=options,
                         data=batch_reader(SCHEMA, _broken_source()))
    with pytest.raises(txn.TableNotFoundError):
        txn.open_table(uri, options)
    storage = timeline.open_storage(uri, options)
    assert [f for f in storage.list("", recursive=True) if not f.startswith("_timeline/lock")] == []
    table = txn.create_table(uri, SCHEMA, storage_options=options, data=rows(range(3)))
    assert states(table) == [("commit", "completed")]
