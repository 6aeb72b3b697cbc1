"""Storage backends under hostile keys and failing disks.

* No key reaches outside a backend's root: ``..``, absolute, empty or unnormalised keys are
  refused with ``InvalidOptionError`` before any filesystem call, by the local and memory
  backends and by a prefixed view.
* On local disk an operating-system failure (disk full, permission denied) is a ``StorageError``
  naming the key, with the original ``errno``, and a failed write leaves no temporary file.
  The disk-full case runs twice: on a real 1 MB tmpfs where the machine lets us mount one, and
  with ``ENOSPC`` injected at the ``open``/``link`` calls of the backend so it runs everywhere.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import metatxn.timeline._local as local_module
from metatxn.timeline import (
    InvalidOptionError,
    LocalStorage,
    MemoryStorage,
    ObjectNotFoundError,
    PrefixedStorage,
    Storage,
    StorageError,
)
from tests.faults import FullDisk, temporary_files

ESCAPING_KEYS = [
    "../victim.txt",
    "a/../../victim.txt",
    "/victim.txt",
    "",
    ".",
    "a/./b",
    "a//b",
    "a/",
    "..",
    "a\x00b",
]


@pytest.fixture(params=["local", "memory", "prefixed"])
def rooted(request: pytest.FixtureRequest, tmp_path: Path, memory_uri: str) -> Iterator[
        tuple[Storage, Callable[[], bool]]]:
    """A storage whose root is a folder with a sibling file ``victim.txt`` beside it; and a
    check that the victim is still there, unchanged."""
    if request.param == "local":
        (tmp_path / "victim.txt").write_bytes(b"keep me")
        storage: Storage = LocalStorage(tmp_path / "table")
        yield storage, lambda: (tmp_path / "victim.txt").read_bytes() == b"keep me"
        return
    inner = MemoryStorage(memory_uri.removeprefix("memory://"))
    inner.put("victim.txt", b"keep me")
    if request.param == "memory":
        storage = MemoryStorage(memory_uri.removeprefix("memory://") + "/table")
    else:
        storage = PrefixedStorage(inner, "table")
    yield storage, lambda: inner.read("victim.txt") == b"keep me"


@pytest.mark.parametrize("key", ESCAPING_KEYS)
def test_keys_that_leave_the_root_or_are_not_normalised_are_refused_by_every_call(
    rooted: tuple[Storage, Callable[[], bool]], key: str
) -> None:
    storage, victim_intact = rooted
    calls: list[Callable[[], Any]] = [
        lambda: storage.read(key),
        lambda: storage.put_if_absent(key, b"x"),
        lambda: storage.put(key, b"x"),
        lambda: storage.delete(key),
        lambda: storage.exists(key),
        lambda: storage.size(key),
    ]
    for call in calls:
        with pytest.raises(InvalidOptionError, match="normalised table-relative path"):
            call()
    assert victim_intact()


@pytest.mark.parametrize("prefix", ["..", "../", "a/../..", "a//b", "x\x00"])
def test_listing_prefixes_that_leave_the_root_are_refused(
    rooted: tuple[Storage, Callable[[], bool]], prefix: str
) -> None:
    storage, _ = rooted
    for recursive in (False, True):
        with pytest.raises(InvalidOptionError):
            storage.list(prefix, recursive=recursive)
    assert storage.list("") == [] and storage.list("/") == []


def test_ordinary_keys_with_dots_in_names_are_fine(rooted: tuple[Storage, Callable[[], bool]]) -> None:
    storage, _ = rooted
    for key in (".hidden", "a/..b", "a/b..", "_timeline/20260101000000000.commit.requested"):
        storage.put(key, b"1")
        assert storage.read(key) == b"1"


# -- local disk: typed failures and no temporary files left -----------------------------------


@pytest.mark.parametrize("op", ["put_if_absent", "put"])
def test_an_injected_full_disk_is_a_storage_error_naming_the_key_and_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str
) -> None:
    storage = LocalStorage(tmp_path / "table")
    storage.put("_timeline/existing", b"1")
    monkeypatch.setattr(local_module, "open", FullDisk(tmp_path, at="write"), raising=False)
    for key in ("_timeline/heartbeats/20260101000000000", "_markers/new-folder/part_1.parquet"):
        with pytest.raises(StorageError, match=f"could not write {key!r}.*No space left") as info:
            getattr(storage, op)(key, b"content")
        assert info.value.errno == errno.ENOSPC
        assert not storage.exists(key)
    assert temporary_files(tmp_path) == []
    monkeypatch.undo()
    storage.put_if_absent("_timeline/after", b"2")
    assert storage.read("_timeline/after") == b"2"


def test_a_full_disk_at_the_link_is_a_storage_error_and_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = LocalStorage(tmp_path / "table")

    def full(source: str, target: str) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), target)

    monkeypatch.setattr(os, "link", full)
    with pytest.raises(StorageError, match="could not create '_timeline/x'") as info:
        storage.put_if_absent("_timeline/x", b"content")
    assert info.value.errno == errno.ENOSPC
    assert temporary_files(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")
def test_permission_denied_is_a_storage_error_naming_the_key(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "table")
    storage.put("locked/a", b"1")
    (tmp_path / "table" / "locked").chmod(0o500)
    try:
        with pytest.raises(StorageError, match="could not delete 'locked/a'") as info:
            storage.delete("locked/a")
        assert info.value.errno == errno.EACCES
        with pytest.raises(StorageError, match="could not write 'locked/b'"):
            storage.put("locked/b", b"2")
    finally:
        (tmp_path / "table" / "locked").chmod(0o700)


def test_deleting_a_folder_is_a_storage_error_not_a_bare_os_error(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "table")
    storage.put("folder/a", b"1")
    with pytest.raises(StorageError, match="could not delete 'folder'"):
        storage.delete("folder")
    assert storage.read("folder/a") == b"1"


def test_a_name_too_long_to_exist_is_absent(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "table")
    key = "part=" + "x" * 300 + "/file.parquet"
    storage.delete(key)
    assert not storage.exists(key)
    with pytest.raises(ObjectNotFoundError):
        storage.read(key)
    with pytest.raises(ObjectNotFoundError):
        storage.size(key)
    with pytest.raises(StorageError, match="File name too long") as info:
        storage.put(key, b"1")
    assert info.value.errno == errno.ENAMETOOLONG


# -- a real full disk --------------------------------------------------------------------------


def test_a_real_full_disk_is_a_storage_error_and_leaves_no_temporary_file(tiny_disk: Path) -> None:
    storage = LocalStorage(tiny_disk / "table")
    storage.put_if_absent("_timeline/small", b"1")
    for attempt in range(11):
        with pytest.raises(StorageError, match="No space left on device") as info:
            storage.put_if_absent(f"_timeline/big-{attempt}", os.urandom(2 * 1024 * 1024))
        assert info.value.errno == errno.ENOSPC
        with pytest.raises(StorageError, match="No space left on device"):
            storage.put(f"_timeline/big-{attempt}", os.urandom(2 * 1024 * 1024))
    assert temporary_files(tiny_disk) == []
    assert storage.list("_timeline") == ["_timeline/small"]
    storage.put_if_absent("_timeline/after", b"2")
    assert storage.read("_timeline/after") == b"2"
