"""Partition folder names escaped with Hive's and Spark's escape set (issue 29): round trips,
column names, bad input, and tables whose folders an earlier version named (``k=10:00``,
``k=%C3%BC``) written, read, overwritten and compacted by this one."""

from __future__ import annotations

from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

import txn
from tests.unit.txn.helpers import data_files_on_storage
from txn._files import _hive
from txn._files._hive import (
    ESCAPED_CHARACTERS,
    HIVE_NULL,
    escape_path_name,
    hive_value,
    parse_hive_folder,
    partition_folder,
    unescape_path_name,
)

#: Spark's ``ExternalCatalogUtils.charToEscape`` (off Windows), as its source lists it.
SPARK_ESCAPED = {chr(c) for c in range(1, 0x20)} | set("\"#%'*/:=?\\\x7f{[]^")

SCHEMA = pa.schema([("id", pa.int64(), False), ("k", pa.string())])
#: Values whose folder an earlier version named otherwise: ``:`` and ``&`` as they are,
#: non-ASCII as UTF-8 escapes.
AWKWARD = ["10:00", "ü", "a&b", "x"]


def test_the_escape_set_is_spark_s_plus_nul() -> None:
    assert SPARK_ESCAPED | {"\x00"} == ESCAPED_CHARACTERS
    assert escape_path_name("".join(map(chr, range(0x80)))) == "".join(
        f"%{c:02X}" if chr(c) in ESCAPED_CHARACTERS else chr(c) for c in range(0x80))


@pytest.mark.parametrize(("value", "folder"), [
    ("10:00", "k=10%3A00"), ("a/b", "k=a%2Fb"), ("100%", "k=100%25"), ("k=v", "k=k%3Dv"),
    ("#1", "k=%231"), ("eu west", "k=eu west"), ("Zürich", "k=Zürich"), ("<a|b>&!$()", "k=<a|b>&!$()"),
    ("{x}[0]^", "k=%7Bx}%5B0%5D%5E"), ("", "k="), (None, f"k={HIVE_NULL}"),
    (HIVE_NULL, "k=%5F_HIVE_DEFAULT_PARTITION__"), (True, "k=true"), (-3, "k=-3"),
])
def test_folder_names_as_spark_names_them(value: object, folder: str) -> None:
    assert partition_folder("k", value) == folder
    text = value if value is None or isinstance(value, str) else str(value).lower()
    assert parse_hive_folder(folder) == ("k", text)


@given(st.text())
def test_unescape_inverts_escape(text: str) -> None:
    escaped = escape_path_name(text)
    assert unescape_path_name(escaped) == text
    assert not (set(escaped) - {"%"}) & ESCAPED_CHARACTERS


@given(st.text(min_size=1), st.none() | st.text())
def test_folder_names_read_back_as_their_column_and_value(column: str, value: str | None) -> None:
    folder = _hive.hive_folder(column, value)
    assert folder.count("=") == 1 and "/" not in folder
    assert parse_hive_folder(folder) == (column, value)


def test_unescape_reads_utf8_escapes_and_other_bytes_one_by_one() -> None:
    """Earlier metatxn versions and pyarrow escape non-ASCII text as UTF-8 (``%C3%BC``); Spark
    reads any other escape as the character of that byte; text that is no escape stays."""
    assert unescape_path_name("Z%C3%BCrich") == "Zürich"
    assert unescape_path_name("%FF%C3%BC%41") == "\xffüA"
    assert unescape_path_name("50% off, %zz%4") == "50% off, %zz%4"


def test_a_value_that_is_no_unicode_text_is_refused(memory_uri: str) -> None:
    with pytest.raises(txn.InvalidOptionError, match="not valid Unicode"):
        partition_folder("k", "\udc80")
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["k"])
    table.append(pa.table({"id": [1], "k": ["a"]}, schema=SCHEMA))
    with pytest.raises(txn.InvalidOptionError, match="takes a string"):
        table.overwrite(pa.table({"id": [2], "k": ["a"]}, schema=SCHEMA), partitions={"k": "\udc80"})
    assert table.to_arrow()["id"].to_pylist() == [1]


def test_awkward_column_names_are_escaped_and_read_back(table_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("a/b=c:d", pa.string())])
    table = txn.create_table(table_uri, schema, partition_by=["a/b=c:d"])
    table.append(pa.table({"id": [1, 2], "a/b=c:d": ["x:y", None]}, schema=schema))
    assert folders(table_uri) == ["a%2Fb%3Dc%3Ad=__HIVE_DEFAULT_PARTITION__", "a%2Fb%3Dc%3Ad=x%3Ay"]
    assert table.partitions() == [{"a/b=c:d": None}, {"a/b=c:d": "x:y"}]
    assert table.to_arrow(filter=pc.field("a/b=c:d") == "x:y")["id"].to_pylist() == [1]
    assert table.partition_folder({"a/b=c:d": "x:y"}) == "a%2Fb%3Dc%3Ad=x%3Ay"
    table.rename_column("a/b=c:d", "t:z")  # folders keep the name they were written with
    table.append(pa.table({"id": [3], "t:z": ["x:y"]}, schema=table.schema))
    assert table.to_arrow(filter=pc.field("t:z") == "x:y")["id"].to_pylist() == [1, 3]
    assert len(table.partitions()) == 2


# -- tables whose folders an earlier version named ----------------------------------------------

def legacy_folder(column: str, value: object) -> str:
    """How metatxn before issue 29 named a folder: ``urllib.parse.quote`` with ``:`` and other
    punctuation kept, non-ASCII as UTF-8 escapes, column names as they are."""
    if isinstance(value, str):
        text = quote(value, safe=" -_.,:;@+~")
        return f"{column}={'%5F' + HIVE_NULL[1:] if text == HIVE_NULL else text}"
    return f"{column}={hive_value(value)}"


def folders(uri: str) -> list[str]:
    return sorted({path.rsplit("/", 1)[0] for path in data_files_on_storage(uri)})


def rows(ids: list[int], values: list[str | None]) -> pa.Table:
    return pa.table({"id": ids, "k": values}, schema=SCHEMA)


def by_value(table: txn.Table, value: str) -> list[int]:
    return sorted(table.to_arrow(filter=pc.field("k") == value)["id"].to_pylist())


def test_an_old_table_reads_and_writes_both_spellings_of_a_value(table_uri: str) -> None:
    """New files of a value go to its escaped folder; reads by value, the partitions listed, a
    delete and an upsert (record index) find the files of both folders."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_hive, "hive_folder", legacy_folder)
        table = txn.create_table(table_uri, SCHEMA, partition_by=["k"], record_key="id")
        table.append(rows([0, 1, 2, 3, 4], [*AWKWARD, None]))
    assert folders(table_uri) == sorted([f"k={HIVE_NULL}", "k=%C3%BC", "k=10:00", "k=a%26b", "k=x"])
    table = txn.open_table(table_uri)
    table.append(rows([10, 11, 12, 13, 14], [*AWKWARD, None]))
    assert folders(table_uri) == sorted([f"k={HIVE_NULL}", "k=%C3%BC", "k=10:00", "k=a%26b", "k=x",
                                         "k=10%3A00", "k=ü", "k=a&b"])
    assert sorted(table.partitions(), key=str) == sorted([{"k": v} for v in [*AWKWARD, None]], key=str)
    assert [by_value(table, v) for v in AWKWARD] == [[0, 10], [1, 11], [2, 12], [3, 13]]
    table.upsert(rows([0, 11], ["10:00", "10:00"]))  # 11 moves out of k=ü (old and new files)
    table.delete(pc.field("k") == "ü")
    assert [by_value(table, v) for v in AWKWARD] == [[0, 10, 11], [], [2, 12], [3, 13]]
    found = table.lookup([0, 1, 2, 11]).to_pylist()
    assert {r["id"]: r["file"].rsplit("/", 2)[-2] for r in found} == {
        0: "k=10%3A00", 2: "k=a%26b", 11: "k=10%3A00"}
    assert table.validate().ok


def test_an_old_table_overwrites_and_compacts_a_value_s_both_folders(table_uri: str) -> None:
    """A partition-scoped overwrite replaces a value's files in both folders; a compaction
    rewrites them into the escaped one only."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_hive, "hive_folder", legacy_folder)
        table = txn.create_table(table_uri, SCHEMA, partition_by=["k"])
        table.append(rows([0, 1, 2, 3], AWKWARD))
    table = txn.open_table(table_uri)
    table.append(rows([10, 11, 12, 13], AWKWARD))
    table.overwrite(rows([20], ["10:00"]), partitions={"k": "10:00"})
    table.overwrite(rows([21], ["ü"]), partitions="dynamic")
    assert [by_value(table, v) for v in AWKWARD] == [[20], [21], [2, 12], [3, 13]]
    assert table.compact("major") is not None
    live = {f.path.rsplit("/", 2)[-2] for f in table.snapshot().files()}
    assert live == {"k=10%3A00", "k=ü", "k=a&b", "k=x"}
    assert [by_value(table, v) for v in AWKWARD] == [[20], [21], [2, 12], [3, 13]]
    assert table.validate().ok


def test_an_old_table_keeps_writing_a_value_whose_escaped_folder_is_too_long(table_uri: str) -> None:
    """``:`` * 100 was a 102-byte folder before issue 29 and is 302 bytes escaped: the table keeps
    writing that value into the folder it has (appends, upserts, updates, compactions, a
    partition overwrite); a new table refuses the value."""
    long = ":" * 100
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_hive, "hive_folder", legacy_folder)
        table = txn.create_table(table_uri, SCHEMA, partition_by=["k"], record_key="id")
        table.append(rows([1, 2], [long, "x"]))
    old_folders = folders(table_uri)
    assert old_folders == sorted([f"k={long}", "k=x"])
    table = txn.open_table(table_uri)
    table.append(rows([3, 4], [long, "x"]))
    table.upsert(rows([1], [long]))
    table.update(pc.field("id") == 3, {"k": long})
    assert table.compact("major") is not None
    assert by_value(table, long) == [1, 3]
    keyless = f"{table_uri}-keyless"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_hive, "hive_folder", legacy_folder)
        txn.create_table(keyless, SCHEMA, partition_by=["k"]).append(rows([1, 2], [long, "x"]))
    txn.open_table(keyless).overwrite(rows([5], [long]), partitions={"k": long})
    assert sorted(txn.open_table(keyless).to_arrow()["id"].to_pylist()) == [2, 5]
    assert folders(table_uri) == old_folders and folders(keyless) == old_folders
    assert table.validate().ok
    fresh = txn.create_table(f"{table_uri}-fresh", SCHEMA, partition_by=["k"])
    with pytest.raises(txn.InvalidOptionError, match="302 bytes"):
        fresh.append(rows([1], [long]))


def test_an_old_table_whose_partition_column_name_looks_escaped(table_uri: str) -> None:
    """Before issue 29 column names were written as they are: the folder ``a%41=x`` of such a
    table is the column ``a%41`` (not ``aA``), for reads and for a partition overwrite."""
    schema = pa.schema([("id", pa.int64(), False), ("a%41", pa.string())])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_hive, "hive_folder", legacy_folder)
        table = txn.create_table(table_uri, schema, partition_by=["a%41"])
        table.append(pa.table({"id": [1, 2], "a%41": ["x", "y"]}, schema=schema))
    assert folders(table_uri) == ["a%41=x", "a%41=y"]
    table = txn.open_table(table_uri)
    assert sorted(f.partition["a%41"] for f in table.snapshot().files()) == ["x", "y"]
    assert sorted(table.partitions(), key=str) == [{"a%41": "x"}, {"a%41": "y"}]
    table.overwrite(pa.table({"id": [9], "a%41": ["x"]}, schema=schema), partitions={"a%41": "x"})
    assert sorted(table.to_arrow()["id"].to_pylist()) == [2, 9]
    assert parse_hive_folder("a%41=x", ["a%41"]) == ("a%41", "x")
    assert parse_hive_folder("a%41=x", ["aA", "a%41"]) == ("aA", "x")
    assert parse_hive_folder("a%41=x") == ("aA", "x")
