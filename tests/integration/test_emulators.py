"""The test servers for GCS and Azure lose races the way the real stores do.

Before any metatxn test trusts an emulator, these check that an atomic create there really
fails for the second writer: GCS's ``x-goog-if-generation-match: 0`` and Azure's
``If-None-Match: *``, each through object_store's own client (obstore), once in sequence and
once among 16 concurrent threads. They also pin down why ``tests/gcsserver.py`` puts a front
before ``gcp-storage-emulator``: the emulator alone lets both uploads win.

Wall time: about 3 s, most of it starting Azurite (1.5 s) and the GCS emulator (0.5 s).
"""

from __future__ import annotations

import json
import threading
import urllib.request
from typing import Any

import pytest

obstore = pytest.importorskip("obstore")


def _race(store: Any, key: str, writers: int = 16) -> list[str]:
    """Start ``writers`` creates of one key at once; each returns "won" or its error's name."""
    outcomes: list[str] = []
    barrier = threading.Barrier(writers)

    def create(number: int) -> None:
        barrier.wait()
        try:
            obstore.put(store, key, str(number).encode(), mode="create")
            outcomes.append("won")
        except Exception as exc:
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(outcomes)


def _assert_atomic_create(store: Any) -> None:
    obstore.put(store, "t/_timeline/first.json", b"one", mode="create")
    with pytest.raises(obstore.exceptions.AlreadyExistsError):
        obstore.put(store, "t/_timeline/first.json", b"two", mode="create")
    assert bytes(obstore.get(store, "t/_timeline/first.json").bytes()) == b"one"

    outcomes = _race(store, "t/_timeline/race.json")
    assert outcomes == ["AlreadyExistsError"] * 15 + ["won"]


def test_gcs_front_fails_the_second_create(gcs_server: Any) -> None:
    from obstore.store import GCSStore

    bucket = gcs_server.create_bucket()
    options = gcs_server.storage_options
    store = GCSStore(bucket, config={"google_service_account": options["google_service_account"]},
                     client_options={"allow_http": True})
    _assert_atomic_create(store)
    # What else metatxn relies on, through the same client: listing one level, ranges, delete.
    obstore.put(store, "t/data/part.parquet", b"0123456789")
    listed = obstore.list_with_delimiter(store, "t")
    assert listed["common_prefixes"] == ["t/_timeline", "t/data"]
    assert bytes(obstore.get_range(store, "t/data/part.parquet", start=2, end=5)) == b"234"
    obstore.delete(store, "t/data/part.parquet")
    with pytest.raises(FileNotFoundError):
        obstore.get(store, "t/data/part.parquet")


def test_gcs_emulator_alone_lets_both_creates_win(gcs_server: Any) -> None:
    """Why the front exists: gcp-storage-emulator ignores ifGenerationMatch=0."""
    bucket = gcs_server.create_bucket()
    url = (f"{gcs_server.emulator_url}/upload/storage/v1/b/{bucket}/o"
           "?uploadType=media&name=k&ifGenerationMatch=0")

    def upload(data: bytes) -> int:
        request = urllib.request.Request(url, data=data, method="POST")
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)

    assert upload(b"one") == 200
    assert upload(b"two") == 200  # on GCS: 412 Precondition Failed
    with urllib.request.urlopen(f"{gcs_server.emulator_url}/storage/v1/b/{bucket}/o/k", timeout=30) as r:
        assert json.loads(r.read())["size"] == "3"


def test_azurite_fails_the_second_create(azure_server: Any) -> None:
    from obstore.store import AzureStore

    container = azure_server.create_container()
    options = azure_server.storage_options
    store = AzureStore(container, config={
        key: options[key] for key in
        ("azure_storage_account_name", "azure_storage_account_key", "azure_storage_endpoint")},
        client_options={"allow_http": True})
    _assert_atomic_create(store)
