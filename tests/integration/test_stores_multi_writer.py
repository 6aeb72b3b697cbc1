"""The multi-writer tests on each object store: S3 (moto), GCS (emulator + enforcing front), Azure
(Azurite). Marked ``long``: the default run has these on local disk only.

The bodies are the local-disk tests themselves, unchanged: the processes of
``tests/unit/txn/test_concurrent_writers.py`` (disjoint upserts, overlapping upserts checked
against what was acknowledged, rounds in lockstep with one winner each), the thread tests of the
same module, and the lock-holder kill of ``tests/integration/test_kill_writers.py``. Each gets a
:class:`tests.stores.StoreRoot` for ``tmp_path``, so its ``str(tmp_path / "table")`` is a fresh
location on the store, and the store's options in the environment, where the child processes'
``txn.open_table(uri)`` finds them.

Figures (2026-11-29, ``pytest -n 2 -m long``, load average about 20 on 2 CPUs, so inflated
several times): 21 tests, 15-270 s each (Azure 15-68 s, S3 19-169 s, GCS 18-270 s: every GCS
request crosses the front and the single-threaded emulator); 11.4 min for 18 of them on two
workers. 20 of 21 passed; ``processes[gcs-overlapping-upserts]`` failed once with
``LockLostError`` (a lease ran out 0.3 s before its renewal, "the holder was paused or renewal
failed for a whole lease": the starved machine) and passed when run again (128 s).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration import test_kill_writers as kill
from tests.stores import StoreRoot
from tests.unit.txn import test_concurrent_writers as writers

pytestmark = [pytest.mark.long, pytest.mark.multiprocess]

PROCESS_TESTS: dict[str, Callable[[Any], None]] = {
    "disjoint-upserts": writers.test_processes_upserting_disjoint_keys_all_commit,
    "overlapping-upserts": writers.test_processes_upserting_overlapping_keys_keep_the_last_acknowledged_value,
    "lockstep-rounds": writers.test_processes_in_lockstep_have_exactly_one_winner_per_round,
}
THREAD_TESTS: dict[str, Callable[[str], None]] = {name: getattr(writers, function) for name, function in {
    "disjoint-keys": "test_threads_writing_disjoint_keys_through_one_table_all_commit",
    "overlapping-upserts": "test_threads_upserting_overlapping_keys_through_one_table_"
                           "keep_the_last_acknowledged_value",
    "deletes-and-inserts": "test_threads_deleting_keys_while_another_inserts_one_keep_the_acknowledged_order",
}.items()}


@pytest.mark.parametrize("name", sorted(PROCESS_TESTS))
def test_processes_writing_one_table_on_each_store(store_env: Any, name: str) -> None:
    PROCESS_TESTS[name](StoreRoot(store_env))


@pytest.mark.parametrize("name", sorted(THREAD_TESTS))
def test_threads_writing_one_table_on_each_store(store_env: Any, name: str) -> None:
    THREAD_TESTS[name](StoreRoot(store_env) / "table")


def test_a_writer_killed_holding_the_lock_stalls_the_next_append_by_one_lease_on_each_store(
        store_env: Any) -> None:
    kill.test_a_writer_killed_holding_the_table_lock_stalls_the_next_append_by_one_lease(
        StoreRoot(store_env))
