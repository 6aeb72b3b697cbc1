"""The storage contract (``test_storage_contract.AbstractStorageTests``) on GCS and Azure, and
put-if-absent raced by several processes on each: the default run's check of those stores.

S3's contract and race stay in ``test_storage_contract.py`` and ``test_put_if_absent_race.py``.
GCS runs on ``gcp-storage-emulator`` behind the front of ``tests/gcsserver.py`` that enforces
``x-goog-if-generation-match`` (no emulator on the package index does; design/storage.md,
"Testing the stores"); Azure on Azurite, which honours ``If-None-Match: *`` itself.

In the default run: 76 tests (38 contract tests a store, two races), 31.6 s with
``test_emulators.py``'s 3, measured one process at load average 13-20 on 2 CPUs (so inflated
several times): each race 6-8 s (three spawned processes import metatxn), the servers' start
2-2.5 s once per worker, every contract test under 2 s.
"""

from __future__ import annotations

import pytest

from tests.unit.timeline.test_put_if_absent_race import Race, assert_one_winner_per_key, run_race
from tests.unit.timeline.test_storage_contract import AbstractStorageTests, MakeStorage

#: Smaller than S3's race (3 x 4, 4 rounds): the contract already races 16 threads per key on
#: each store; this adds processes, each with its own client.
RACE = Race(processes=3, threads=2, rounds=3, payload_bytes=64 * 1024)


class TestGcsStorage(AbstractStorageTests):
    @pytest.fixture
    def make_storage(self, gcs_uri) -> MakeStorage:  # type: ignore[no-untyped-def]
        return lambda name: gcs_uri.sibling(name).open()


class TestAzureStorage(AbstractStorageTests):
    @pytest.fixture
    def make_storage(self, azure_uri) -> MakeStorage:  # type: ignore[no-untyped-def]
        return lambda name: azure_uri.sibling(name).open()


@pytest.mark.multiprocess
def test_processes_racing_on_gcs_have_exactly_one_winner_per_key(gcs_uri) -> None:  # type: ignore[no-untyped-def]
    by_round = run_race(gcs_uri.uri, gcs_uri.storage_options, RACE)
    assert_one_winner_per_key(gcs_uri.open(), RACE, by_round)


@pytest.mark.multiprocess
def test_processes_racing_on_azure_have_exactly_one_winner_per_key(azure_uri) -> None:  # type: ignore[no-untyped-def]
    by_round = run_race(azure_uri.uri, azure_uri.storage_options, RACE)
    assert_one_winner_per_key(azure_uri.open(), RACE, by_round)
