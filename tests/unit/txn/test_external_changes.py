"""Issue 22, items 1 and 2: files metatxn does not own change, or are linked, after ADD SEGMENT.

An external file is read in place, so the table's rows, its delete deltas and its record index
(positions in the file) are only right while the file is what ADD SEGMENT recorded. A read or a
keyed write that finds it different fails with ``CorruptMetadataError`` naming the file, what was
recorded and what was found, and writes nothing (design/segments.md, "Files that change").

Symbolic links are resolved before ADD SEGMENT's same-file and inside-the-table checks, so a
linked file is one file, whatever folder links it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.unit.txn.external_data import write_file
from tests.unit.txn.test_add_segment import FLAT, KEYED, flat_rows, refused, table_state
from tests.unit.txn.test_add_segment import memory_root as memory_root  # a fixture


def ids(table: pa.Table) -> list[int]:
    return sorted(table["id"].to_pylist())


def written(t: txn.Table) -> dict[str, Any]:
    """What a refused write must leave as it was (``table_state`` less the rows, which cannot
    be read while the file is changed)."""
    return table_state(t, rows=False)


def later_mtime(path: Path, before: int) -> None:
    """Kernels without fine-grained timestamps give a rewrite within one clock tick the same
    mtime; a file rewritten after ADD SEGMENT is, in real use, rewritten later."""
    if os.stat(path).st_mtime_ns == before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def rewrite(path: Path, rows: pa.Table) -> None:
    before = os.stat(path).st_mtime_ns
    write_file(path, rows, "parquet")
    later_mtime(path, before)


def changed_error(caught: Any, path: Path) -> str:
    message = str(caught.value)
    assert isinstance(caught.value, txn.CorruptMetadataError)
    assert str(path) in message, message
    assert "recorded" in message, message
    return message


# == item 1: a file rewritten after ADD SEGMENT =====================================================

def test_read_of_external_file_rewritten_with_more_rows_fails(tmp_path: Path) -> None:
    """4 rows where 3 were recorded: not 7 rows in a table of 6."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    t.append(flat_rows([1, 2, 3]))
    path = tmp_path / "ext" / "p.parquet"
    write_file(path, flat_rows([10, 11, 12]), "parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet")
    assert t.to_arrow().num_rows == 6

    rewrite(path, flat_rows([10, 11, 12, 13]))

    for read in (lambda h: h.to_arrow(), lambda h: h.snapshot().count(pc.field("id") > 0),
                 lambda h: h.to_arrow(filter=pc.field("id") >= 10)):
        for handle in (t, txn.open_table(t.uri)):
            with pytest.raises(txn.TxnError) as caught:
                read(handle)
            message = changed_error(caught, path)
            assert "3 rows" in message, message
    assert any(p.kind == "changed external file" for p in t.validate().problems)


def test_read_of_external_file_reordered_with_the_same_size_fails(tmp_path: Path) -> None:
    """The same rows in another order, the same size: positions no longer name the same rows."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    path = tmp_path / "ext" / "p.parquet"
    write_file(path, flat_rows([10, 11, 12]), "parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet")
    t.delete(pc.field("id") == 12)  # a delta at position 2
    size = os.path.getsize(path)

    rewrite(path, flat_rows([12, 11, 10]))
    assert os.path.getsize(path) == size

    with pytest.raises(txn.TxnError) as caught:
        t.to_arrow()  # would return 11 and 12, the delta now deleting 10
    changed_error(caught, path)


def test_keyed_upsert_into_a_reordered_external_file_fails(tmp_path: Path) -> None:
    """The record index points key 12 at position 2, which now holds key 10: the upsert must not
    write a delta there (key 12 twice, key 10 gone)."""
    t = txn.create_table(str(tmp_path / "t"), KEYED, record_key="id")
    t.append(flat_rows([1, 2, 3], schema=KEYED))
    path = tmp_path / "ext" / "p.parquet"
    write_file(path, flat_rows([10, 11, 12]), "parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet")
    size, added = os.path.getsize(path), os.stat(path).st_mtime_ns

    rewrite(path, flat_rows([12, 11, 10]))
    assert os.path.getsize(path) == size
    before = written(t)

    new = pa.table({"id": pa.array([12], pa.int64()), "name": ["new"], "score": [0.0]}, schema=KEYED)
    for write in (lambda: t.upsert(new), lambda: t.delete(keys=[12]),
                  lambda: t.update(pc.field("id") == 12, {"score": 1.0})):
        with pytest.raises(txn.TxnError) as caught:
            write()
        changed_error(caught, path)
        assert written(t) == before

    # once the file is as it was added, everything works again
    write_file(path, flat_rows([10, 11, 12]), "parquet")
    os.utime(path, ns=(added, added))
    t.upsert(new)
    assert ids(t.to_arrow()) == [1, 2, 3, 10, 11, 12]
    assert t.lookup([12]).to_pylist()[0]["segment"] != "1"


def test_external_file_changed_on_another_filesystem_fails(memory_root: str) -> None:
    t = txn.create_table(f"{memory_root}/t", FLAT)
    url = write_file(f"{memory_root}/ext/p.parquet", flat_rows([10, 11, 12]), "parquet")
    t.add_segment(f"{memory_root}/ext", "parquet")
    write_file(url, flat_rows([12, 11, 10]), "parquet")  # same size, a new creation time
    with pytest.raises(txn.CorruptMetadataError, match="recorded"):
        t.to_arrow()


def test_records_without_a_version_keep_reading(tmp_path: Path, monkeypatch: Any) -> None:
    """Tables written before the version was recorded: their files still read, and a change
    of size or rows is still found."""
    from metatxn.indexes import FILES
    from txn._external import _listing

    monkeypatch.setattr(_listing, "file_version", lambda info: None)  # as an older ADD SEGMENT
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    path = tmp_path / "ext" / "p.parquet"
    write_file(path, flat_rows([10, 11, 12]), "parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet")
    monkeypatch.undo()
    context = t._context
    files = context.metadata_at(context.timeline.load(), None, (FILES,)).files
    assert files is not None and files["version"].to_pylist() == [None]
    assert ids(txn.open_table(t.uri).to_arrow()) == [10, 11, 12]
    assert t.validate().ok
    write_file(path, flat_rows([10, 11, 12, 13]), "parquet")
    with pytest.raises(txn.CorruptMetadataError, match="recorded"):
        txn.open_table(t.uri).to_arrow()


# == item 2: symbolic links =========================================================================

def test_refused_folder_linking_an_added_file(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    write_file(tmp_path / "ext" / "p.parquet", flat_rows([1, 2]), "parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "link.parquet").symlink_to(tmp_path / "ext" / "p.parquet")
    message = refused(t, txn.InvalidOptionError, str(tmp_path / "other"), "parquet")
    assert "link.parquet" in message and str(tmp_path / "ext" / "p.parquet") in message, message
    assert ids(t.to_arrow()) == [1, 2]


def test_refused_folder_holding_a_file_a_link_added_before(tmp_path: Path) -> None:
    """The other order: a link was added first, then the folder of the file it links."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    write_file(tmp_path / "data" / "p.parquet", flat_rows([1, 2]), "parquet")
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "p.parquet").symlink_to(tmp_path / "data" / "p.parquet")
    t.add_segment(str(tmp_path / "links"), "parquet")
    refused(t, txn.InvalidOptionError, str(tmp_path / "data"), "parquet")
    (tmp_path / "links2").mkdir()
    (tmp_path / "links2" / "q.parquet").symlink_to(tmp_path / "links" / "p.parquet")
    refused(t, txn.InvalidOptionError, str(tmp_path / "links2"), "parquet")
    assert ids(t.to_arrow()) == [1, 2]


def test_refused_folder_linking_a_table_data_file(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    t.append(flat_rows([1, 2]))
    [native] = t.snapshot().files()
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "p.parquet").symlink_to(native.path.removeprefix("file://"))
    message = refused(t, txn.InvalidOptionError, str(tmp_path / "ext"), "parquet")
    assert "inside the table" in message and "p.parquet" in message, message
    assert ids(t.to_arrow()) == [1, 2]


def test_refused_folder_holding_a_link_into_the_table(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    t.append(flat_rows([1, 2]))
    [native] = t.snapshot().files()
    write_file(tmp_path / "ext" / "own.parquet", flat_rows([5]), "parquet")
    (tmp_path / "ext" / "sub").symlink_to(os.path.dirname(native.path.removeprefix("file://")))
    message = refused(t, txn.InvalidOptionError, str(tmp_path / "ext"), "parquet")
    assert "inside the table" in message, message
    assert ids(t.to_arrow()) == [1, 2]


def test_refused_folder_holding_one_file_twice(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    write_file(tmp_path / "ext" / "a.parquet", flat_rows([1, 2]), "parquet")
    (tmp_path / "ext" / "b.parquet").symlink_to(tmp_path / "ext" / "a.parquet")
    message = refused(t, txn.InvalidOptionError, str(tmp_path / "ext"), "parquet")
    assert "are one file" in message, message


def test_refused_folder_holding_a_link_to_a_folder(tmp_path: Path) -> None:
    """The walk does not follow a link to a folder: refused by name, not read as a file."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    write_file(tmp_path / "data" / "a.parquet", flat_rows([1, 2]), "parquet")
    write_file(tmp_path / "ext" / "own.parquet", flat_rows([5]), "parquet")
    (tmp_path / "ext" / "sub").symlink_to(tmp_path / "data")
    message = refused(t, txn.InvalidOptionError, str(tmp_path / "ext"), "parquet")
    assert "not a regular file" in message and "sub" in message, message


def test_a_link_to_a_file_outside_everything_is_added_once(tmp_path: Path) -> None:
    """A link to a file no table holds is fine: it is read through the link."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    write_file(tmp_path / "data" / "p.parquet", flat_rows([1, 2]), "parquet")
    (tmp_path / "ext").mkdir()
    (tmp_path / "ext" / "p.parquet").symlink_to(tmp_path / "data" / "p.parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet")
    assert ids(t.to_arrow()) == [1, 2]
    assert t.validate().ok
    assert fsspec.filesystem("file").exists(str(tmp_path / "data" / "p.parquet"))


def test_external_file_rewritten_on_s3_within_the_second_fails(tmp_path: Path, s3_uri: Any) -> None:
    """S3's LastModified keeps whole seconds: the same size rewritten within one is told apart
    by its ETag, even though this process cached the folder's listing when it added it."""
    import s3fs

    from tests.unit.txn.external_data import encode

    options = s3_uri.storage_options
    filesystem = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    folder = f"s3://{s3_uri.bucket}/ext"
    filesystem.pipe(f"{folder}/p.parquet", encode(flat_rows([10, 11, 12]), "parquet"))
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    t.add_segment(folder, "parquet", storage_options=options)
    assert ids(t.to_arrow()) == [10, 11, 12]
    reordered = encode(flat_rows([12, 11, 10]), "parquet")
    assert len(reordered) == filesystem.size(f"{folder}/p.parquet")
    filesystem.pipe(f"{folder}/p.parquet", reordered)
    with pytest.raises(txn.CorruptMetadataError, match=r"p\.parquet.*recorded.*etag"):
        t.to_arrow()
