"""Local storage where hard links fail (SMB, exFAT, FUSE mounts): the storage contract still holds.

Links are disabled by making ``os.link`` fail as those filesystems do; ``renameat2`` is disabled
by removing it (``timeline._noreplace.rename_noreplace = None``), which leaves the ``O_EXCL``
claim. See design/storage.md, "Local disk".
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import metatxn.timeline._local as local_module
import metatxn.timeline._noreplace as noreplace
from metatxn.timeline import LocalStorage, ObjectExistsError, Storage, StorageError, open_storage

from .test_put_if_absent_race import Race, _race_in_child, assert_one_winner_per_key, run_race
from .test_storage_contract import AbstractStorageTests, MakeStorage


def _refuse_links(code: int) -> Any:
    def link(*_args: object, **_kwargs: object) -> None:
        raise OSError(code, os.strerror(code))
    return link


def _disable(monkeypatch: pytest.MonkeyPatch, method: str, link_errno: int) -> None:
    """Make this process's filesystem support no method before ``method``."""
    monkeypatch.setattr(os, "link", _refuse_links(link_errno))
    if method == "claim":
        monkeypatch.setattr(noreplace, "rename_noreplace", None)
    elif noreplace.rename_noreplace is None:
        pytest.skip("renameat2 is not available on this platform")


class TestLocalStorageWithoutLinks(AbstractStorageTests):
    """Every contract test, with hard links refused (as SMB/exFAT/FUSE refuse them)."""

    @pytest.fixture(params=[("rename", errno.EPERM), ("rename", errno.EXDEV),
                            ("claim", errno.ENOTSUP), ("claim", errno.EMLINK)],
                    ids=["rename-EPERM", "rename-EXDEV", "claim-ENOTSUP", "claim-EMLINK"])
    def method(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
        method, code = request.param
        _disable(monkeypatch, method, code)
        return str(method)

    @pytest.fixture
    def make_storage(self, tmp_path: Path, method: str) -> MakeStorage:
        return lambda name: open_storage(tmp_path / name)

    def test_the_fallback_is_found_once_and_kept(
        self, storage: Storage, method: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The first put finds the method; later puts and moves do not retry links."""
        assert isinstance(storage, LocalStorage)
        calls: list[str] = []
        monkeypatch.setattr(os, "link", lambda *a: calls.append("link") or _refuse_links(
            errno.EPERM)())
        storage.put_if_absent("f/a.json", b"1")
        assert calls == ["link"]
        assert storage._noreplace.method == method
        storage.put_if_absent("f/b.json", b"2")
        with pytest.raises(ObjectExistsError):
            storage.put_if_absent("f/b.json", b"3")
        storage.move("f/b.json", "g/b.json")
        assert calls == ["link"]
        assert storage.read("g/b.json") == b"2"
        assert sorted(os.listdir(storage.root / "f")) == ["a.json"]


def test_a_real_failure_is_reported_not_taken_for_missing_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "link", _refuse_links(errno.ENOSPC))
    storage = LocalStorage(tmp_path)
    with pytest.raises(StorageError) as info:
        storage.put_if_absent("a.json", b"1")
    assert info.value.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []


def test_a_reader_waits_for_a_fresh_claim_to_fill(tmp_path: Path) -> None:
    """Between the claim's create and its rename a reader finds an empty file; it re-reads
    instead of returning the empty bytes."""
    storage = LocalStorage(tmp_path)
    (tmp_path / "a.json").write_bytes(b"")
    (tmp_path / ".a.json.1.2.3.tmp").write_bytes(b"whole")

    def finish() -> None:
        time.sleep(0.005)
        os.replace(tmp_path / ".a.json.1.2.3.tmp", tmp_path / "a.json")

    thread = threading.Thread(target=finish)
    thread.start()
    try:
        assert storage.read("a.json") == b"whole"
    finally:
        thread.join()


def test_an_old_empty_file_is_read_as_empty_at_once(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    storage.put_if_absent("a.json", b"")
    os.utime(tmp_path / "a.json", (1_000, 1_000))
    started = time.monotonic()
    assert storage.read("a.json") == b""
    assert time.monotonic() - started < local_module._SETTLE_SECONDS


@pytest.mark.skipif(noreplace.rename_noreplace is None, reason="renameat2 is not available")
def test_renameat2_refuses_an_existing_name(tmp_path: Path) -> None:
    assert noreplace.rename_noreplace is not None
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    with pytest.raises(FileExistsError):
        noreplace.rename_noreplace(str(tmp_path / "a"), str(tmp_path / "b"))
    noreplace.rename_noreplace(str(tmp_path / "a"), str(tmp_path / "c"))
    assert (tmp_path / "c").read_bytes() == b"a"
    assert (tmp_path / "b").read_bytes() == b"b"


def _race_with_method(method: str, uri: str, storage_options: Any, index: int, race: Race,
                      barrier: Any, outcomes: Any) -> None:
    """Child process: force ``method`` (links, renameat2 or the claim), then race."""
    if method != "link":
        os.link = _refuse_links(errno.EPERM)  # type: ignore[assignment]
    if method == "claim":
        noreplace.rename_noreplace = None
    _race_in_child(uri, storage_options, index, race, barrier, outcomes)


@pytest.mark.multiprocess
def test_processes_using_different_methods_still_exclude_each_other(tmp_path: Path) -> None:
    """A process with links, one with renameat2 only and one with neither race on each key
    (a share mounted two ways, say): one winner per key, its bytes whole."""
    methods = ["link", "claim"] + (["rename"] if noreplace.rename_noreplace else [])
    race = Race(processes=len(methods), threads=4, rounds=6, payload_bytes=64 * 1024)
    uri = str(tmp_path / "table")
    by_round = run_race(uri, None, race, child=_race_with_method,
                        leading=[(method,) for method in methods])
    assert_one_winner_per_key(open_storage(uri), race, by_round)
    names = os.listdir(tmp_path / "table" / "_timeline" / "race")
    assert len(names) == race.rounds  # no temporary and no claim left behind


@pytest.mark.parametrize("method", ["rename", "claim"])
def test_a_table_commits_and_reads_back_without_hard_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """Create, append, upsert, delete and clean a keyed, partitioned table with links refused."""
    import pyarrow as pa

    import txn

    _disable(monkeypatch, method, errno.EPERM)
    uri = str(tmp_path / "t")
    table = txn.create_table(uri, pa.schema([("id", pa.int64(), False), ("k", pa.string())]),
                             partition_by=["k"], record_key="id")
    table.append(pa.table({"id": [1, 2, 3], "k": ["a", "b", "a"]}))
    table.upsert(pa.table({"id": [3, 4], "k": ["a", "b"]}))
    table.delete(keys=[1])
    table.clean(force=True)
    rows = txn.open_table(uri).to_arrow().sort_by("id").to_pylist()
    assert rows == [{"id": 2, "k": "b"}, {"id": 3, "k": "a"}, {"id": 4, "k": "b"}]
    # os.link refuses every call, so every commit above went through the fallback.
    assert not [name for name in os.listdir(tmp_path / "t" / "_timeline") if name.endswith(".tmp")]
