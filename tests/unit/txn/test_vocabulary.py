"""The vocabularies stored as strings (actions, operations, segment statuses, clean reasons, ...)
are str-valued enums whose values are the spellings already on storage: a record written before
they existed decodes to the members, compares equal to the plain strings, and encodes back to the
same bytes."""

from __future__ import annotations

import pickle

import msgspec
import pyarrow as pa
import pytest

import txn
from metatxn.indexes import SEGMENTS_SCHEMA, STREAMS_SCHEMA, SegmentEntry
from metatxn.indexes._metadata_table import _Retention
from metatxn.indexes._segments import merge_segment, segments_from_arrow
from metatxn.indexes._streams import streams_from_arrow
from metatxn.timeline import Action, MemoryStorage, Timeline, Vocabulary, parse_file_name
from metatxn.timeline._archive import ArchivedInstant
from metatxn.timeline._timeline import InstantFile, RollbackPlan
from txn import CleanReason, Operation, ProducerKind, SegmentStatus
from txn._context import CleanPlan, CommitMetadata, WritePlan

#: Records as a writer before the enums wrote them (field types were ``str``).
OLD_RECORDS: list[tuple[type, bytes]] = [
    (WritePlan, b'{"kind":"write_plan","operation":"append","segment":"0","segments":[],"sources":[],'
                b'"read_at":null,"extra":{}}'),
    (CommitMetadata, b'{"kind":"commit","operation":"compact","segment":"0.1","files_added":[],'
                     b'"files_removed":[],"segments_removed":[],"segments_merged":[],"rows_added":0,'
                     b'"rows_deleted":0,"extra":{},"deltas_added":[],"deltas_removed":[],'
                     b'"index_shards":[],"read_at":null,"retries":0,"operations":[]}'),
    (CleanPlan, b'{"kind":"clean_plan","files":[{"path":"0/a.parquet","size":3,"reason":"orphan",'
                b'"removed_at":null,"record":null}],"floor":null,"retained_from":"","force":false,'
                b'"segments":[]}'),
    (InstantFile, b'{"kind":"instant","format_version":1,"time":"20260101000000000",'
                  b'"action":"replacecommit","state":"requested","completed_at":null,"owner":"",'
                  b'"payload":null}'),
    (RollbackPlan, b'{"kind":"rollback_plan","target_time":"20260101000000000",'
                   b'"target_action":"commit"}'),
    (ArchivedInstant, b'{"time":"20260101000000000","action":"clean","state":"completed",'
                      b'"completed_at":"20260101000000001","metadata":null}'),
    (_Retention, b'{"kind":"retention","resolvable_from":"20260101000000000","source":"clean"}'),
]


@pytest.mark.parametrize(("type_", "data"), OLD_RECORDS, ids=[t.__name__ for t, _ in OLD_RECORDS])
def test_a_record_written_with_plain_strings_decodes_to_members_and_encodes_back_unchanged(
        type_: type, data: bytes) -> None:
    record = msgspec.json.decode(data, type=type_)
    # Fields added since (CommitMetadata.schema_version, app_id and app_version; the retention
    # record's files_from and files_known) encode with their defaults after the rest.
    added = {CommitMetadata: b',"schema_version":null,"app_id":null,"app_version":null',
             _Retention: b',"files_from":null,"files_known":false'}.get(type_, b"")
    assert msgspec.json.encode(record) == data[:-1] + added + b"}"


def test_decoded_json_records_hold_members_equal_to_the_stored_strings() -> None:
    plan = msgspec.json.decode(OLD_RECORDS[0][1], type=WritePlan)
    assert plan.operation is Operation.APPEND and plan.operation == "append"
    clean = msgspec.json.decode(OLD_RECORDS[2][1], type=CleanPlan)
    assert clean.files[0].reason is CleanReason.ORPHAN and clean.files[0].reason == "orphan"
    envelope = msgspec.json.decode(OLD_RECORDS[3][1], type=InstantFile)
    assert envelope.action is Action.REPLACECOMMIT and envelope.action == "replacecommit"


def test_an_instant_file_name_parses_to_an_action_equal_to_its_spelling() -> None:
    instant = parse_file_name("20260101000000000_20260101000000001.replacecommit")
    assert instant is not None
    assert instant.action is Action.REPLACECOMMIT
    assert instant.action == "replacecommit" and {"replacecommit": 1}[instant.action] == 1


def test_an_instant_requested_by_its_plain_spelling_is_stored_and_loaded_as_the_member() -> None:
    storage = MemoryStorage("memory://vocabulary")
    tl = Timeline(storage)
    requested = tl.request("commit", {"note": "old caller"})
    assert requested.action is Action.COMMIT
    assert storage.list("_timeline") == [f"_timeline/{requested.time}.commit.requested"]
    assert [i.action for i in tl.load().instants] == [Action.COMMIT]


def test_a_segment_record_written_with_plain_strings_reads_as_the_member() -> None:
    """The ``segments`` partition stores statuses as an Arrow string column."""
    rows = [{"id": "0", "status": "Success", "format": "parquet", "external": False, "path": None,
             "partitions": [], "rows": 3, "data_size": 10, "index_size": 0, "load_start_ms": 1,
             "load_end_ms": 2, "merged_to": None, "instant": "20260101000000000", "cleaned": None}]
    (entry,) = segments_from_arrow(pa.Table.from_pylist(rows, schema=SEGMENTS_SCHEMA))
    assert entry.status is SegmentStatus.SUCCESS and entry.status == "Success"
    assert entry.is_live
    marked = SegmentEntry(id="0", status="Marked for Delete")  # type: ignore[arg-type]
    assert merge_segment(entry, marked).status == SegmentStatus.MARKED_FOR_DELETE
    assert txn.Segment.from_entry(entry).status == "Success"


def test_a_stream_record_written_with_plain_strings_reads_as_the_members() -> None:
    rows = [{"name": "job", "kind": "app", "generation": 0, "last_batch": 4, "rows": 0,
             "segment": None, "status": "Dropped", "started_ms": 0, "updated_ms": 0, "instant": ""}]
    (record,) = streams_from_arrow(pa.Table.from_pylist(rows, schema=STREAMS_SCHEMA))
    assert record.kind is ProducerKind.APP and record.kind == "app"
    assert record.status == "Dropped"


def test_members_show_as_their_spelling_in_messages() -> None:
    """A message quoting a value (``{value!r}``) reads as it did when values were plain strings."""
    for member in (Action.CLEAN, Operation.UPSERT, SegmentStatus.COMPACTED, CleanReason.LEFTOVER):
        assert isinstance(member, Vocabulary)
        assert f"{member}" == str(member) == member.value
        assert repr(member) == repr(member.value)
    assert f"{[Operation.APPEND]}" == "['append']"


def test_a_member_pickles_as_its_plain_string() -> None:
    """So a reader without the enum (Spark's JVM unpickler, reading a SHOW command's rows) gets
    a string, and a record pickled to another process still compares equal."""
    for member in (Action.COMMIT, SegmentStatus.STREAMING_FINISH, ProducerKind.STREAM):
        copied = pickle.loads(pickle.dumps(member))
        assert type(copied) is str and copied == member
