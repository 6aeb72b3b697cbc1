"""The storage contract, written once and run against every backend; plus ``open_storage``.

``AbstractStorageTests`` states what ``timeline.Storage`` promises (see ``timeline/_storage.py``):
whole-object reads and writes, an atomic put-if-absent with exactly one winner, and folder
listings with table-relative, sorted keys. Each backend subclasses it and supplies only
``make_storage``.
"""

from __future__ import annotations

import itertools
import os
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import metatxn.timeline._local as local_module
from metatxn.timeline import (
    InvalidOptionError,
    LocalStorage,
    MemoryStorage,
    ObjectExistsError,
    ObjectNotFoundError,
    PrefixedStorage,
    Storage,
    StorageError,
    Temporary,
    TxnError,
    leftover_temporaries,
    open_storage,
)
from metatxn.timeline._storage import move

MakeStorage = Callable[[str], Storage]

RACERS = 16


def _warm_handles(make_storage: MakeStorage, count: int) -> list[Storage]:
    """Independent handles on one root, each having made one call already, so that a race is
    between writes and not between lazy client set-ups."""
    handles = [make_storage("table") for _ in range(count)]
    for handle in handles:
        handle.exists("warm-up")
    return handles


class AbstractStorageTests:
    """The contract every ``Storage`` backend meets.

    Subclasses provide ``make_storage(name)``: a fresh, empty storage rooted at ``name`` inside a
    sandbox private to the test, so that sibling roots can be compared.
    """

    @pytest.fixture
    def make_storage(self) -> MakeStorage:
        raise NotImplementedError

    @pytest.fixture
    def storage(self, make_storage: MakeStorage) -> Storage:
        return make_storage("table")

    # -- reading and creating ------------------------------------------------------------------

    def test_backend_satisfies_the_storage_protocol(self, storage: Storage) -> None:
        assert isinstance(storage, Storage)
        assert storage.uri

    def test_reading_a_missing_object_raises_object_not_found(self, storage: Storage) -> None:
        """A missing object is ``ObjectNotFoundError``, which generic handlers see as
        ``FileNotFoundError``."""
        with pytest.raises(ObjectNotFoundError) as info:
            storage.read("missing.json")
        assert isinstance(info.value, FileNotFoundError)
        assert isinstance(info.value, StorageError)
        assert isinstance(info.value, TxnError)
        assert info.value.path == "missing.json"

    def test_reading_a_folder_raises_object_not_found(self, storage: Storage) -> None:
        storage.put_if_absent("folder/inner.json", b"x")
        with pytest.raises(ObjectNotFoundError):
            storage.read("folder")

    def test_put_if_absent_then_read_returns_the_same_bytes(self, storage: Storage) -> None:
        storage.put_if_absent("a.json", b'{"v": 1}')
        assert storage.read("a.json") == b'{"v": 1}'

    def test_second_put_if_absent_loses_and_keeps_the_first_content(self, storage: Storage) -> None:
        """The loser gets ``ObjectExistsError`` (a ``FileExistsError``); the object is untouched."""
        storage.put_if_absent("a.json", b"first")
        with pytest.raises(ObjectExistsError) as info:
            storage.put_if_absent("a.json", b"second, and longer than the first")
        assert isinstance(info.value, FileExistsError)
        assert info.value.path == "a.json"
        assert storage.read("a.json") == b"first"
        assert storage.size("a.json") == len(b"first")

    def test_put_if_absent_loses_to_an_object_written_by_put(self, storage: Storage) -> None:
        storage.put("a.json", b"plain")
        with pytest.raises(ObjectExistsError):
            storage.put_if_absent("a.json", b"conditional")
        assert storage.read("a.json") == b"plain"

    def test_put_creates_a_missing_object(self, storage: Storage) -> None:
        storage.put("a.json", b"one")
        assert storage.read("a.json") == b"one"

    def test_put_overwrites_an_existing_object_whole(self, storage: Storage) -> None:
        """Last writer wins, and a shorter overwrite leaves no tail of the longer object."""
        storage.put_if_absent("a.json", b"a long first version")
        storage.put("a.json", b"short")
        assert storage.read("a.json") == b"short"
        assert storage.size("a.json") == 5

    def test_keys_in_nested_folders_are_created_on_demand(self, storage: Storage) -> None:
        storage.put_if_absent("a/b/c/d.json", b"deep")
        storage.put("x/y/z.json", b"deep too")
        assert storage.read("a/b/c/d.json") == b"deep"
        assert storage.read("x/y/z.json") == b"deep too"

    def test_empty_content_round_trips(self, storage: Storage) -> None:
        storage.put_if_absent("empty", b"")
        storage.put("also-empty", b"")
        assert storage.read("empty") == b""
        assert storage.read("also-empty") == b""
        assert storage.exists("empty")
        assert storage.size("empty") == 0
        assert storage.list("") == ["also-empty", "empty"]
        with pytest.raises(ObjectExistsError):
            storage.put_if_absent("empty", b"not empty")

    def test_binary_content_with_nul_bytes_round_trips(self, storage: Storage) -> None:
        data = b"\x00" + bytes(range(256)) * 4 + b"\x00\x00\xff\r\n\x00"
        storage.put_if_absent("binary.bin", data)
        storage.put("binary-put.bin", data)
        assert storage.read("binary.bin") == data
        assert storage.read("binary-put.bin") == data
        assert storage.size("binary.bin") == len(data)

    def test_large_content_is_read_back_whole(self, storage: Storage) -> None:
        data = random.Random(7).randbytes(5 * 1024 * 1024 + 3)
        storage.put_if_absent("large.bin", data)
        assert storage.size("large.bin") == len(data)
        assert storage.read("large.bin") == data

    def test_bytes_like_content_is_accepted(self, storage: Storage) -> None:
        storage.put_if_absent("view.bin", memoryview(b"viewed"))  # type: ignore[arg-type]
        storage.put("array.bin", bytearray(b"arrayed"))  # type: ignore[arg-type]
        assert storage.read("view.bin") == b"viewed"
        assert storage.read("array.bin") == b"arrayed"

    # -- exists, size, delete ------------------------------------------------------------------

    def test_exists_is_true_only_for_objects(self, storage: Storage) -> None:
        assert not storage.exists("a/b.json")
        storage.put_if_absent("a/b.json", b"x")
        assert storage.exists("a/b.json")
        assert not storage.exists("a"), "a folder is not an object"
        assert not storage.exists("a/b.jso")

    def test_size_is_the_byte_count_and_missing_objects_raise(self, storage: Storage) -> None:
        storage.put_if_absent("a.bin", b"12345")
        assert storage.size("a.bin") == 5
        with pytest.raises(ObjectNotFoundError):
            storage.size("missing.bin")

    def test_delete_removes_the_object(self, storage: Storage) -> None:
        storage.put_if_absent("a/b.json", b"x")
        storage.delete("a/b.json")
        assert not storage.exists("a/b.json")
        assert storage.list("a") == []
        with pytest.raises(ObjectNotFoundError):
            storage.read("a/b.json")

    def test_delete_is_idempotent(self, storage: Storage) -> None:
        """Deleting a missing object is not an error, however often it happens."""
        storage.delete("never-written.json")
        storage.put_if_absent("a.json", b"x")
        storage.delete("a.json")
        storage.delete("a.json")
        storage.delete("missing-folder/a.json")

    def test_a_deleted_key_can_be_created_again(self, storage: Storage) -> None:
        """put-if-absent checks the name now, not its history (the lock's GC relies on knowing
        this)."""
        storage.put_if_absent("a.json", b"old")
        storage.delete("a.json")
        storage.put_if_absent("a.json", b"new")
        assert storage.read("a.json") == b"new"

    def test_delete_leaves_siblings_alone(self, storage: Storage) -> None:
        storage.put_if_absent("f/a", b"a")
        storage.put_if_absent("f/b", b"b")
        storage.delete("f/a")
        assert storage.list("f") == ["f/b"]
        assert storage.read("f/b") == b"b"

    # -- moving (optional operation; timeline._storage.move) ------------------------------------

    @pytest.mark.parametrize("native", [True, False], ids=["backend", "through-the-protocol"])
    def test_move_puts_the_object_at_the_target_and_removes_the_source(
        self, storage: Storage, native: bool
    ) -> None:
        """The backend's own move and the portable one (read, put-if-absent, delete) agree."""
        store = storage if native else _Plain(storage)
        storage.put_if_absent("seg/a.parquet", b"payload")
        move(store, "seg/a.parquet", "_trash/1/seg/a.parquet")
        assert storage.read("_trash/1/seg/a.parquet") == b"payload"
        assert not storage.exists("seg/a.parquet")
        assert storage.list("", recursive=True) == ["_trash/1/seg/a.parquet"]
        move(store, "_trash/1/seg/a.parquet", "seg/a.parquet")  # and back: its folder is gone
        assert storage.list("", recursive=True) == ["seg/a.parquet"]

    @pytest.mark.parametrize("native", [True, False], ids=["backend", "through-the-protocol"])
    def test_move_never_overwrites_and_a_missing_source_is_object_not_found(
        self, storage: Storage, native: bool
    ) -> None:
        store = storage if native else _Plain(storage)
        storage.put_if_absent("a", b"source")
        storage.put_if_absent("b", b"target")
        with pytest.raises(ObjectExistsError) as exists:
            move(store, "a", "b")
        assert exists.value.path == "b"
        assert (storage.read("a"), storage.read("b")) == (b"source", b"target")
        with pytest.raises(ObjectNotFoundError) as missing:
            move(store, "missing", "c")
        assert missing.value.path == "missing"
        assert not storage.exists("c")

    def test_move_checks_both_keys(self, storage: Storage) -> None:
        storage.put_if_absent("a", b"x")
        for source, target in (("a", "../outside"), ("../outside", "a2"), ("a", "/abs")):
            with pytest.raises(InvalidOptionError):
                move(storage, source, target)
        assert storage.read("a") == b"x"

    def test_move_through_a_prefixed_view_stays_inside_it(self, storage: Storage) -> None:
        view = PrefixedStorage(storage, "_metadata")
        view.put_if_absent("x/a", b"1")
        move(view, "x/a", "y/a")
        assert storage.list("", recursive=True) == ["_metadata/y/a"]

    # -- listing -------------------------------------------------------------------------------

    def _populate(self, storage: Storage) -> None:
        for key in ("top.json", "f/a.json", "f/b.json", "f/sub/c.json", "f/sub/deeper/d.json",
                    "g/e.json"):
            storage.put_if_absent(key, key.encode())

    def test_list_without_recursive_returns_only_objects_directly_in_the_folder(
        self, storage: Storage
    ) -> None:
        self._populate(storage)
        assert storage.list("f") == ["f/a.json", "f/b.json"]
        assert storage.list("f/sub") == ["f/sub/c.json"]
        assert storage.list("") == ["top.json"]

    def test_list_recursive_returns_every_object_below_the_folder(self, storage: Storage) -> None:
        self._populate(storage)
        assert storage.list("f", recursive=True) == [
            "f/a.json", "f/b.json", "f/sub/c.json", "f/sub/deeper/d.json",
        ]
        assert storage.list("", recursive=True) == [
            "f/a.json", "f/b.json", "f/sub/c.json", "f/sub/deeper/d.json", "g/e.json", "top.json",
        ]

    def test_list_of_a_missing_folder_is_empty(self, storage: Storage) -> None:
        assert storage.list("nothing") == []
        assert storage.list("nothing", recursive=True) == []
        assert storage.list("") == []
        self._populate(storage)
        assert storage.list("f/nothing") == []

    def test_list_of_an_objects_own_key_is_empty(self, storage: Storage) -> None:
        """An object is not a folder: listing its key finds nothing under it."""
        storage.put_if_absent("f/a.json", b"x")
        assert storage.list("f/a.json") == []
        assert storage.list("f/a.json", recursive=True) == []

    def test_list_is_sorted_whatever_the_write_order(self, storage: Storage) -> None:
        names = [f"{n:03d}.json" for n in range(40)]
        shuffled = names[:]
        random.Random(3).shuffle(shuffled)
        for name in shuffled:
            storage.put_if_absent(f"log/{name}", b"")
        assert storage.list("log") == [f"log/{name}" for name in names]

    def test_list_keys_are_table_relative_and_readable(self, storage: Storage) -> None:
        """Every listed key can be passed straight back to ``read``."""
        self._populate(storage)
        for key in storage.list("", recursive=True):
            assert not key.startswith("/")
            assert storage.read(key) == key.encode()

    def test_a_trailing_slash_on_the_prefix_changes_nothing(self, storage: Storage) -> None:
        self._populate(storage)
        assert storage.list("f/") == storage.list("f")
        assert storage.list("f/", recursive=True) == storage.list("f", recursive=True)

    def test_list_matches_whole_folder_names_not_name_prefixes(self, storage: Storage) -> None:
        """Listing ``log`` must not pick up ``log2/...`` or ``logbook``: it is a folder, not a
        string prefix."""
        storage.put_if_absent("log/a", b"")
        storage.put_if_absent("log2/b", b"")
        storage.put_if_absent("logbook", b"")
        assert storage.list("log") == ["log/a"]
        assert storage.list("log", recursive=True) == ["log/a"]

    def test_sibling_roots_do_not_see_each_other(self, make_storage: MakeStorage) -> None:
        """A storage is confined to its root, even when another root's name extends it."""
        table = make_storage("table")
        sibling = make_storage("table2")
        table.put_if_absent("a.json", b"table")
        sibling.put_if_absent("a.json", b"sibling")
        sibling.put_if_absent("only-in-sibling.json", b"")
        assert table.read("a.json") == b"table"
        assert table.list("") == ["a.json"]
        assert table.list("", recursive=True) == ["a.json"]
        assert not table.exists("only-in-sibling.json")

    def test_two_handles_on_one_root_see_each_others_writes(
        self, make_storage: MakeStorage
    ) -> None:
        """Read-after-write and consistent listing across independent handles."""
        writer, reader = make_storage("table"), make_storage("table")
        writer.put_if_absent("_timeline/1.json", b"1")
        assert reader.exists("_timeline/1.json")
        assert reader.list("_timeline") == ["_timeline/1.json"]
        with pytest.raises(ObjectExistsError):
            reader.put_if_absent("_timeline/1.json", b"other")
        writer.delete("_timeline/1.json")
        assert reader.list("_timeline") == []

    # -- concurrency ---------------------------------------------------------------------------

    def test_concurrent_put_if_absent_has_exactly_one_winner(
        self, make_storage: MakeStorage
    ) -> None:
        """Of 16 writers racing on one key, one wins; every other one gets ObjectExistsError,
        and the object holds the winner's bytes exactly."""
        storages = _warm_handles(make_storage, RACERS)
        payloads = [f"writer {i}|".encode() * (1000 + i) for i in range(RACERS)]
        barrier = threading.Barrier(RACERS)
        outcomes: list[BaseException | str | None] = [None] * RACERS

        def race(i: int) -> None:
            try:
                barrier.wait(timeout=30)
                storages[i].put_if_absent("_timeline/commit.json", payloads[i])
                outcomes[i] = "won"
            except BaseException as exc:  # collect every outcome, never only the last
                outcomes[i] = exc

        threads = [threading.Thread(target=race, args=(i,)) for i in range(RACERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

        winners = [i for i, outcome in enumerate(outcomes) if outcome == "won"]
        losers = [o for o in outcomes if o != "won"]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, ObjectExistsError) for o in losers), outcomes
        assert storages[0].read("_timeline/commit.json") == payloads[winners[0]]
        assert storages[0].list("_timeline") == ["_timeline/commit.json"]

    def test_concurrent_put_if_absent_on_distinct_keys_all_succeed(
        self, make_storage: MakeStorage
    ) -> None:
        storages = _warm_handles(make_storage, RACERS)
        barrier = threading.Barrier(RACERS)
        errors: list[BaseException] = []

        def write(i: int) -> None:
            try:
                barrier.wait(timeout=30)
                storages[i].put_if_absent(f"_timeline/{i:02d}.json", str(i).encode())
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(RACERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)

        assert errors == []
        assert storages[0].list("_timeline") == [f"_timeline/{i:02d}.json" for i in range(RACERS)]
        for i in range(RACERS):
            assert storages[0].read(f"_timeline/{i:02d}.json") == str(i).encode()


class TestMemoryStorage(AbstractStorageTests):
    @pytest.fixture
    def make_storage(self, memory_uri: str) -> MakeStorage:
        return lambda name: open_storage(f"{memory_uri}/{name}")

    def test_stages_nothing_so_leaves_no_temporaries(self, storage: Storage) -> None:
        storage.put_if_absent("f/a.json", b"1")
        assert leftover_temporaries(storage, "", recursive=True) == []
        assert leftover_temporaries(PrefixedStorage(storage, "f"), "") == []


class TestLocalStorage(AbstractStorageTests):
    @pytest.fixture
    def make_storage(self, tmp_path: Path) -> MakeStorage:
        return lambda name: open_storage(tmp_path / name)

    def test_no_temporary_files_remain_after_writes_and_lost_races(self, storage: Storage) -> None:
        storage.put_if_absent("f/a.json", b"1")
        with pytest.raises(ObjectExistsError):
            storage.put_if_absent("f/a.json", b"2")
        storage.put("f/a.json", b"3")
        storage.put("f/b.json", b"4")
        assert isinstance(storage, LocalStorage)
        assert sorted(os.listdir(storage.root / "f")) == ["a.json", "b.json"]

    def test_listings_skip_temporary_files(self, storage: Storage) -> None:
        """A crashed writer's ``.<name>.<pid>.<tid>.<n>.tmp`` is never mistaken for an object."""
        assert isinstance(storage, LocalStorage)
        storage.put_if_absent("f/a.json", b"1")
        (storage.root / "f" / ".b.json.123.456.7.tmp").write_bytes(b"half")
        assert storage.list("f") == ["f/a.json"]
        assert storage.list("", recursive=True) == ["f/a.json"]

    def test_a_leftover_temporary_of_the_same_name_is_never_written_through(
        self, storage: Storage, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A writer killed between its link and its unlink leaves the temporary as a second name
        of the committed file. A later process whose pid, thread id and counter repeat that
        name must not open it for writing: that would rewrite the committed file in place."""
        assert isinstance(storage, LocalStorage)
        storage.put_if_absent("f/a.json", b"committed")
        leftover = storage.root / "f" / f".a.json.{os.getpid()}.{threading.get_ident()}.7.tmp"
        os.link(storage.root / "f" / "a.json", leftover)
        monkeypatch.setattr(local_module, "_counter", itertools.count(7))
        with pytest.raises(ObjectExistsError):
            storage.put_if_absent("f/a.json", b"a stale writer's")
        assert storage.read("f/a.json") == b"committed"
        storage.put_if_absent("f/b.json", b"2")
        assert storage.read("f/b.json") == b"2"

    def test_leftover_temporaries_name_the_key_each_was_staging(self, storage: Storage) -> None:
        """What a writer killed inside a put left, so cleanups can find and delete it."""
        assert isinstance(storage, LocalStorage)
        storage.put_if_absent("f/a.json", b"1")
        (storage.root / "f" / "g").mkdir()
        (storage.root / "f" / ".b.json.123.456.7.tmp").write_bytes(b"half")
        (storage.root / "f" / "g" / ".c.d.parquet.1.2.3.tmp").write_bytes(b"half")
        (storage.root / "f" / ".offsets.7f3c-uuid.tmp").write_bytes(b"not ours")
        staged = storage._temporary_beside(str(storage.root / "h" / "x.y.json"))
        (storage.root / "h").mkdir()
        Path(staged).write_bytes(b"as a put names it")
        assert [t.key for t in leftover_temporaries(storage, "h")] == ["h/x.y.json"]
        os.unlink(staged)
        os.utime(storage.root / "f" / ".b.json.123.456.7.tmp", (1_000, 1_000))
        top = leftover_temporaries(storage, "f")
        assert top == [Temporary("f/.b.json.123.456.7.tmp", "f/b.json", 1_000_000)]
        every = leftover_temporaries(storage, "", recursive=True)
        assert [(t.path, t.key) for t in every] == [
            ("f/.b.json.123.456.7.tmp", "f/b.json"), ("f/g/.c.d.parquet.1.2.3.tmp", "f/g/c.d.parquet")]
        inside = PrefixedStorage(storage, "f")
        assert [(t.path, t.key) for t in leftover_temporaries(inside, "g")] == [
            ("g/.c.d.parquet.1.2.3.tmp", "g/c.d.parquet")]
        storage.delete(top[0].path)
        assert [t.key for t in leftover_temporaries(storage, "", recursive=True)] == ["f/g/c.d.parquet"]
        assert leftover_temporaries(storage, "missing", recursive=True) == []


@pytest.mark.s3
class TestS3Storage(AbstractStorageTests):
    @pytest.fixture
    def make_storage(self, s3_uri) -> MakeStorage:  # type: ignore[no-untyped-def]
        return lambda name: s3_uri.sibling(name).open()

    def test_a_conditional_request_conflict_is_retried(self, s3_server, s3_uri) -> None:  # type: ignore[no-untyped-def]
        """S3 answers 409 ConditionalRequestConflict while another conditional write on the key
        is in flight; the backend retries, and the retry decides (here: wins)."""
        storage = s3_uri.open()
        s3_server.answer_conflicts(1)
        storage.put_if_absent("a.json", b"after a conflict")
        assert s3_server.pending_conflicts() == 0
        assert storage.read("a.json") == b"after a conflict"


# -- open_storage --------------------------------------------------------------------------------


def test_a_local_path_opens_local_storage_there(tmp_path: Path) -> None:
    for location in (str(tmp_path / "t"), tmp_path / "t"):
        storage = open_storage(location)
        assert isinstance(storage, LocalStorage)
        assert storage.root == (tmp_path / "t").resolve()
        assert storage.uri == str(tmp_path / "t")


def test_a_file_url_opens_local_storage_at_its_path(tmp_path: Path) -> None:
    storage = open_storage(f"file://{tmp_path}/t")
    assert isinstance(storage, LocalStorage)
    assert storage.root == (tmp_path / "t").resolve()
    storage.put_if_absent("a", b"x")
    assert (tmp_path / "t" / "a").read_bytes() == b"x"


def test_a_memory_url_opens_memory_storage(memory_uri: str) -> None:
    storage = open_storage(f"{memory_uri}/t")
    assert isinstance(storage, MemoryStorage)
    assert storage.uri == f"{memory_uri}/t"


def test_two_memory_handles_on_one_url_share_objects(memory_uri: str) -> None:
    open_storage(memory_uri).put_if_absent("a", b"shared")
    assert open_storage(memory_uri).read("a") == b"shared"


@pytest.mark.parametrize("scheme", ["s3", "s3a", "gs", "gcs", "az", "azure", "abfs", "abfss"])
def test_an_object_store_url_opens_object_storage(scheme: str) -> None:
    pytest.importorskip("obstore")
    from metatxn.timeline._object import ObjectStorage

    options = {"skip_signature": True}
    if scheme in ("az", "azure", "abfs", "abfss"):
        options["account_name"] = "account"
    storage = open_storage(f"{scheme}://bucket/table", options)
    assert isinstance(storage, ObjectStorage)
    assert storage.uri == f"{scheme}://bucket/table"


def test_an_abfs_url_names_the_account_and_the_container() -> None:
    pytest.importorskip("obstore")
    from metatxn.timeline._object import ObjectStorage

    storage = open_storage("abfss://data@acct.dfs.core.windows.net/t", {"skip_signature": True})
    assert isinstance(storage, ObjectStorage)
    resolved = storage.store_options
    assert (resolved.bucket, resolved.prefix) == ("data", "t")
    assert resolved.config["azure_storage_account_name"] == "acct"


@pytest.mark.parametrize("location", ["s3://", "gs://", "az://"])
def test_an_object_store_url_without_a_bucket_is_refused(location: str) -> None:
    pytest.importorskip("obstore")
    with pytest.raises(InvalidOptionError, match="names no bucket"):
        open_storage(location)


@pytest.mark.parametrize("location", ["hdfs://x", "wasb://c/t", "http://host/t"])
def test_an_unsupported_scheme_is_refused_naming_the_supported_ones(location: str) -> None:
    """Only schemes with an atomic put-if-absent are accepted; the error lists them."""
    with pytest.raises(InvalidOptionError) as info:
        open_storage(location)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert repr(location.split("://")[0]) in message
    for supported in ("file://", "memory://", "s3://"):
        assert supported in message


@pytest.mark.parametrize("location", ["LOCAL", "file://LOCAL"])
def test_storage_options_for_a_local_location_are_refused(tmp_path: Path, location: str) -> None:
    with pytest.raises(InvalidOptionError, match="storage_options"):
        open_storage(location.replace("LOCAL", str(tmp_path)), {"anon": True})


def test_storage_options_for_a_memory_location_are_refused(memory_uri: str) -> None:
    with pytest.raises(InvalidOptionError, match="storage_options"):
        open_storage(memory_uri, {"anon": True})


def test_empty_storage_options_are_accepted_everywhere(tmp_path: Path, memory_uri: str) -> None:
    assert isinstance(open_storage(tmp_path, {}), LocalStorage)
    assert isinstance(open_storage(memory_uri, {}), MemoryStorage)


def test_an_empty_location_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match="non-empty"):
        open_storage("")


class _Plain:
    """A storage with only the protocol's operations (no ``move``): what a wrapper such as the
    tests' ``FaultyStorage`` looks like to :func:`timeline._storage.move`."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner

    @property
    def uri(self) -> str:
        return self.inner.uri

    def read(self, path: str) -> bytes:
        return self.inner.read(path)

    def put_if_absent(self, path: str, data: bytes) -> None:
        self.inner.put_if_absent(path, data)

    def put(self, path: str, data: bytes) -> None:
        self.inner.put(path, data)

    def list(self, prefix: str, *, recursive: bool = False) -> list[str]:
        return self.inner.list(prefix, recursive=recursive)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def size(self, path: str) -> int:
        return self.inner.size(path)
