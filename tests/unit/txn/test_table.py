"""Creating and opening tables, and every way a user can get it wrong."""

from __future__ import annotations

import threading
from datetime import date

import pyarrow as pa
import pytest

import txn
from metatxn import timeline
from metatxn.indexes import FIELD_ID, field_id
from tests.conftest import FakeClock, make_ids

ORDERS = pa.schema([
    ("o_orderkey", pa.int64(), False),
    ("o_custkey", pa.int64()),
    ("o_orderstatus", pa.string()),
    ("o_totalprice", pa.decimal128(15, 2)),
    ("o_orderdate", pa.date32()),
    ("o_weight", pa.float64()),
    ("o_tags", pa.list_(pa.string())),
])


def _listing(uri: str) -> list[str]:
    return timeline.open_storage(uri).list("", recursive=True)


def test_create_then_open_round_trips_every_table_attribute(table_uri: str) -> None:
    created = txn.create_table(
        table_uri, ORDERS, partition_by=["o_orderstatus"], record_key="o_orderkey",
        sort_by=["o_orderdate"], properties={"streaming": "true", "team": "sales"},
    )
    opened = txn.open_table(table_uri)
    for table in (created, opened):
        assert table.uri == table_uri
        # The schema carries each column's id (PARQUET:field_id), and otherwise what was given.
        assert [field_id(f) for f in table.schema] == list(range(1, len(ORDERS) + 1))
        assert [(f.name, f.type, f.nullable) for f in table.schema] == [
            (f.name, f.type, f.nullable) for f in ORDERS]
        assert table.schema.metadata == ORDERS.metadata
        assert [{k: v for k, v in (f.metadata or {}).items() if k != FIELD_ID} for f in table.schema] \
            == [dict(f.metadata or {}) for f in ORDERS]
        assert table.schema.field("o_orderkey").nullable is False
        assert table.partition_by == ["o_orderstatus"]
        assert table.record_key == "o_orderkey"
        assert table.record_key_columns == ["o_orderkey"]
        assert table.sort_by == ["o_orderdate"]
        assert table.properties == {"streaming": "true", "team": "sales"}
    assert opened.table_id == created.table_id


def test_a_composite_record_key_is_kept_as_a_list(table_uri: str) -> None:
    txn.create_table(table_uri, ORDERS, record_key=["o_custkey", "o_orderkey"])
    table = txn.open_table(table_uri)
    assert table.record_key == ["o_custkey", "o_orderkey"]
    assert table.partition_by == [] and table.sort_by == []


def test_file_url_and_plain_path_open_the_same_table(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "orders"
    txn.create_table(f"file://{path}", ORDERS)
    assert txn.open_table(str(path)).table_id == txn.open_table(f"file://{path}").table_id


def test_creation_uses_the_injected_clock_and_id_source(table_uri: str) -> None:
    clock = FakeClock(start_ms=1_767_225_600_123)
    table = txn.create_table(table_uri, ORDERS, clock=clock, ids=make_ids("tbl"))
    assert table.table_id == "tbl000000"
    assert table.created_at == "20260101000000123"


def test_schema_metadata_survives_the_round_trip(table_uri: str) -> None:
    schema = ORDERS.with_metadata({"owner": "finance"})
    txn.create_table(table_uri, schema)
    assert txn.open_table(table_uri).schema.metadata == {b"owner": b"finance"}


def test_a_new_table_has_an_empty_timeline(table_uri: str) -> None:
    assert txn.create_table(table_uri, ORDERS).timeline() == []


def test_the_timeline_lists_what_was_committed_in_order(table_uri: str) -> None:
    table = txn.create_table(table_uri, ORDERS)
    tl = timeline.Timeline(timeline.open_storage(table_uri))
    first = tl.start(tl.request("commit"))
    second = tl.start(tl.request("commit"))
    with tl.lock() as lease:
        tl.complete(second, lease=lease)
    instants = table.timeline()
    assert [(i.time, i.state) for i in instants] == [
        (first.time, "inflight"), (second.time, "completed"),
    ]
    assert all(isinstance(i, timeline.Instant) for i in instants)
    assert instants[1].completed_at is not None and instants[0].completed_at is None


# -- bad input: a clear TxnError subclass, and nothing written ------------------------------------


def test_creating_over_an_existing_table_raises_table_exists_and_keeps_it(table_uri: str) -> None:
    original = txn.create_table(table_uri, ORDERS, record_key="o_orderkey")
    before = _listing(table_uri)
    with pytest.raises(txn.TableExistsError, match="already exists") as info:
        txn.create_table(table_uri, pa.schema([("x", pa.int32())]))
    assert isinstance(info.value, FileExistsError)
    assert _listing(table_uri) == before
    assert txn.open_table(table_uri).table_id == original.table_id


def test_racing_creators_produce_exactly_one_table(local_uri: str) -> None:
    """Of many concurrent create_table calls on one location exactly one wins."""
    barrier = threading.Barrier(8)
    outcomes: list[object] = []

    def create(n: int) -> None:
        barrier.wait()
        try:
            outcomes.append(txn.create_table(local_uri, ORDERS, properties={"n": str(n)}))
        except txn.TableExistsError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=create, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [o for o in outcomes if isinstance(o, txn.Table)]
    assert len(outcomes) == 8 and len(winners) == 1
    assert txn.open_table(local_uri).properties == winners[0].properties


def test_opening_a_missing_table_raises_table_not_found(table_uri: str) -> None:
    with pytest.raises(txn.TableNotFoundError, match="no metatxn table") as info:
        txn.open_table(table_uri)
    assert isinstance(info.value, FileNotFoundError)
    assert _listing(table_uri) == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"partition_by": ["nope"]}, "partition_by names unknown column 'nope'"),
        ({"record_key": "nope"}, "record_key names unknown column 'nope'"),
        ({"sort_by": ["o_orderdate", "nope"]}, "sort_by names unknown column 'nope'"),
        ({"partition_by": ["o_weight"]}, "partition_by column 'o_weight' has type double"),
        ({"partition_by": ["o_totalprice"]}, "expected integers, strings, dates, timestamps or booleans"),
        ({"partition_by": ["o_tags"]}, "partition_by column 'o_tags'"),
        ({"record_key": "o_weight"}, "record_key column 'o_weight' has type double"),
        ({"record_key": ["o_orderkey", "o_tags"]}, "record_key column 'o_tags'"),
        ({"record_key": []}, "record_key is an empty list"),
        ({"sort_by": ["o_tags"]}, "sort_by column 'o_tags'"),
        ({"partition_by": "o_orderstatus"}, "partition_by must be a list of column names"),
        ({"partition_by": ["o_orderstatus", "o_orderstatus"]}, "more than once"),
        ({"sort_by": ["o_orderstatus"], "partition_by": ["o_orderstatus"]}, "sort_by names partition"),
        ({"properties": {"streaming": "yes"}}, "streaming='yes': expected 'true' or 'false'"),
        ({"properties": {"streaming": True}}, "keys and values must be strings"),
        ({"properties": ["streaming"]}, "properties must be a dict"),
        ({"properties": {"timeline.archive.trigger": "0"}}, "expected a whole number from 2 to"),
        ({"properties": {"timeline.archive.trigger": "5", "timeline.archive.retain": "9"}},
         "archive_trigger .5. must be greater than archive_retain .9."),
        ({"storage_options": {"anon": True}}, r"take (no storage_options|only the option .fsync.)"),
    ],
)
def test_bad_options_raise_invalid_option_naming_what_was_wrong(
    table_uri: str, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(txn.InvalidOptionError, match=message):
        txn.create_table(table_uri, ORDERS, **kwargs)  # type: ignore[arg-type]
    assert _listing(table_uri) == []


def test_partitioning_by_every_column_is_refused(table_uri: str) -> None:
    schema = pa.schema([("day", pa.date32()), ("region", pa.string())])
    with pytest.raises(txn.InvalidOptionError, match="covers every column"):
        txn.create_table(table_uri, schema, partition_by=["day", "region"])


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"a": "int64"}, "schema must be a pyarrow.Schema, got dict"),
        (pa.schema([]), "schema has no columns"),
        (pa.schema([("a", pa.int8()), ("a", pa.int16())]), "column 'a' more than once"),
    ],
)
def test_a_bad_schema_raises_invalid_option(table_uri: str, schema: object, message: str) -> None:
    with pytest.raises(txn.InvalidOptionError, match=message):
        txn.create_table(table_uri, schema)  # type: ignore[arg-type]
    assert _listing(table_uri) == []


@pytest.mark.parametrize("uri", ["hdfs://nn/table", "ftp://host/table", ""])
def test_an_unsupported_location_raises_invalid_option(uri: str) -> None:
    with pytest.raises(txn.InvalidOptionError):
        txn.create_table(uri, ORDERS)


@pytest.mark.parametrize(
    ("content", "found"),
    [
        (b"", "Input data was truncated"),
        (b'{"kind": "table", "format_version": 1, "table_id"', "truncated"),
        (b"\x00\xffgarbage", "malformed"),
        (b'{"kind": "something-else"}', "Invalid value 'something-else'"),
        (b'{"kind": "table", "format_version": 99, "table_id": "x", "created_at": "x", '
         b'"arrow_schema": "", "columns": []}', "written by a newer metatxn"),
        (b'{"kind": "table", "format_version": 1, "table_id": "x", "created_at": "x", '
         b'"arrow_schema": "AAAA", "columns": []}', ""),
    ],
)
def test_a_corrupt_table_json_raises_corrupt_metadata_naming_the_file(
    table_uri: str, content: bytes, found: str
) -> None:
    txn.create_table(table_uri, ORDERS)
    storage = timeline.open_storage(table_uri)
    storage.put("_timeline/table.json", content)
    with pytest.raises(txn.CorruptMetadataError) as info:
        txn.open_table(table_uri)
    assert info.value.path.endswith("_timeline/table.json")
    assert table_uri.rstrip("/") in info.value.path
    assert found in str(info.value)
    assert storage.read("_timeline/table.json") == content


def test_table_json_naming_an_unknown_layout_column_is_corrupt(table_uri: str) -> None:
    txn.create_table(table_uri, ORDERS, partition_by=["o_orderstatus"])
    storage = timeline.open_storage(table_uri)
    text = storage.read("_timeline/table.json").replace(b'"o_orderstatus"]', b'"gone"]')
    storage.put("_timeline/table.json", text)
    with pytest.raises(txn.CorruptMetadataError, match=r"unknown .'gone'."):
        txn.open_table(table_uri)


def test_a_corrupt_instant_file_raises_corrupt_metadata_naming_it(table_uri: str) -> None:
    table = txn.create_table(table_uri, ORDERS)
    storage = timeline.open_storage(table_uri)
    storage.put("_timeline/20260101000000000.commit.requested", b'{"kind": "instant", "ti')
    tl = timeline.Timeline(storage)
    pending = tl.load().pending()[0]
    with pytest.raises(txn.CorruptMetadataError) as info:
        tl.read_plan(pending)
    assert info.value.path.endswith("_timeline/20260101000000000.commit.requested")
    storage.put("_timeline/2026010100000000.commit.requested", b"{}")
    with pytest.raises(txn.CorruptMetadataError, match=r"2026010100000000\.commit\.requested"):
        table.timeline()


def test_every_public_error_is_a_txn_error_importable_from_txn() -> None:
    names = ["TxnError", "TableNotFoundError", "TableExistsError", "SchemaMismatchError",
             "DuplicateKeyError", "CommitConflictError", "InvalidOptionError",
             "SegmentNotFoundError", "CorruptMetadataError", "MergeCardinalityError"]
    for name in names:
        error = getattr(txn, name)
        assert issubclass(error, txn.TxnError)
        assert error.__module__ == "txn"


def test_the_orders_fixture_types_are_realistic() -> None:
    """Guards the fixture: dates and decimals must be the types the checks reason about."""
    assert pa.types.is_date32(ORDERS.field("o_orderdate").type)
    assert date(2026, 1, 1).year == 2026


def test_a_keyed_table_fixes_its_record_index_shard_count_at_creation(table_uri: str) -> None:
    """A key's shard must never change, so the count is recorded once, in table.json."""
    keyed = txn.create_table(table_uri, ORDERS, record_key="o_orderkey")
    # One root since issue 27 (it was 64): a table starts as one shard and splits as it grows.
    assert keyed.record_index_shards == 1
    assert txn.open_table(table_uri).record_index_shards == 1
    assert keyed.properties == {}, "the default is recorded in table.json, not as a property"


def test_the_record_index_shard_count_can_be_chosen(table_uri: str) -> None:
    table = txn.create_table(table_uri, ORDERS, record_key="o_orderkey",
                             properties={"record_index.shards": "8"})
    assert txn.open_table(table_uri).record_index_shards == 8
    assert table.properties == {"record_index.shards": "8"}


def test_an_unkeyed_table_has_no_record_index(table_uri: str) -> None:
    assert txn.create_table(table_uri, ORDERS).record_index_shards is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"record_key": "o_orderkey", "properties": {"record_index.shards": "0"}}, "whole number from 1"),
        ({"record_key": "o_orderkey", "properties": {"record_index.shards": "many"}}, "digits 0-9"),
        ({"properties": {"record_index.shards": "8"}}, "only to tables with a record_key"),
    ],
)
def test_a_bad_record_index_shard_count_is_refused(
    table_uri: str, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(txn.InvalidOptionError, match=message):
        txn.create_table(table_uri, ORDERS, **kwargs)  # type: ignore[arg-type]
    assert _listing(table_uri) == []
