"""kill -9 of writer processes at random moments, on each object store (``long``).

The workload and every check of ``tests/integration/test_kill_writers.py``'s first test (three
writers appending and upserting, a random one SIGKILLed and replaced ``KILLS`` times, then a
fresh writer whose clock is past every lease recovers), with the table on S3 (moto), GCS (the
emulator behind its enforcing front) or Azure (Azurite) instead of local disk. The writers are
the same script; they find the store's options in the environment (``tests/stores.py``).
Markers are listed through the table's storage instead of the local folder, and there are no
temporaries to look for: an object store's put is atomic by itself.

Figures (2026-11-29, ``pytest -n 2 -m long``, load average about 20 on 2 CPUs): S3 23.7 s,
GCS 30.3 s, Azure 23.3 s; all three passed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import txn
from metatxn.timeline import open_storage
from tests.integration.test_kill_writers import SCHEMA, kill_writers_at_random, recovered_holds_every_ack
from tests.stores import StoreRoot

pytestmark = [pytest.mark.long, pytest.mark.multiprocess]


def test_writers_killed_at_random_moments_leave_a_table_recovery_makes_whole_on_each_store(
        store_env: Any, tmp_path: Path) -> None:
    uri = StoreRoot(store_env) / "table"
    txn.create_table(uri, SCHEMA, record_key="id",
                     properties={"lock.lease_ms": "5000", "lock.timeout_ms": "60000"})
    # Slower than disk: the first writers get longer to import and commit, and to stop.
    logs = kill_writers_at_random(uri, tmp_path, settle_s=4.0, linger_s=2.0, stop_wait_s=120)
    checker, states = recovered_holds_every_ack(uri, logs)

    storage = open_storage(uri)
    left = [key.rsplit("/", 1)[-1] for key in storage.list("_markers", recursive=True)]
    completed = {t for t, (_, s) in states.items() if s == "completed"}
    assert all(name.rsplit("_", 1)[-1][:17] in completed for name in left), (
        "recovery deletes the markers of the instants it rolls back", left)
    checker.clean()  # sweeps the markers a writer killed after its commit point left
    assert storage.list("_markers", recursive=True) == [], "no stray markers after a clean"
    report = checker.validate()
    assert report.ok, report.problems
