"""S3 locations and options a user gets wrong: each is a TxnError naming the location, raised
before anything is written, never a TypeError or a botocore error from the first request."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import txn
from metatxn.timeline import open_storage
from tests.s3server import S3Location, S3Server

pytestmark = pytest.mark.s3

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def _objects(server: S3Server, bucket: str) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem(**server.storage_options, skip_instance_cache=True)
    return fs.find(bucket)


@pytest.mark.parametrize(("option", "hint"), [("bogus_option", "'bogus_option'"),
                                                ("aws_endpoint_ur", "did you mean 'aws_endpoint_url'"),
                                                ("aws_regoin", "did you mean 'aws_region'")])
def test_an_option_s3_tables_do_not_take_is_refused_before_any_request(
        s3_server: S3Server, s3_uri: S3Location, option: str, hint: str) -> None:
    uri, options = s3_uri
    bad = {**options, option: 1}
    with pytest.raises(txn.InvalidOptionError, match=f"storage_options for '{uri}' name .*{hint}"):
        txn.create_table(uri, SCHEMA, storage_options=bad)
    with pytest.raises(txn.InvalidOptionError, match="which S3 tables do not take; expected deltalake's"):
        txn.open_table(uri, storage_options=bad)
    assert _objects(s3_server, s3_uri.bucket) == []
    assert txn.create_table(uri, SCHEMA, storage_options=options).append(
        pa.table({"k": [1], "v": ["a"]}, schema=SCHEMA)) is not None


def test_storage_options_that_are_not_a_dict_are_refused(s3_uri: S3Location) -> None:
    with pytest.raises(txn.InvalidOptionError, match="must be a dict"):
        txn.create_table(s3_uri.uri, SCHEMA, storage_options="x")  # type: ignore[arg-type]


def test_a_missing_bucket_is_a_storage_error_naming_the_bucket(s3_server: S3Server) -> None:
    uri = "s3://metatxn-no-such-bucket/orders"
    options = s3_server.storage_options
    for attempt in (lambda: txn.create_table(uri, SCHEMA, storage_options=options),
                    lambda: txn.open_table(uri, storage_options=options)):
        with pytest.raises(txn.StorageError,
                           match=r"S3 bucket 'metatxn-no-such-bucket' does not exist \(table location "
                                 r"'s3://metatxn-no-such-bucket/orders'\)"):
            attempt()


def test_an_unreachable_endpoint_is_a_storage_error_naming_the_location(s3_uri: S3Location) -> None:
    uri, options = s3_uri
    unreachable: dict[str, Any] = {
        **options, "client_kwargs": {**options["client_kwargs"], "endpoint_url": "http://127.0.0.1:9"},
        "config_kwargs": {"connect_timeout": 1, "retries": {"max_attempts": 1}}}
    with pytest.raises(txn.StorageError, match=f"in the table at '{uri}' failed: .*error sending request"):
        txn.create_table(uri, SCHEMA, storage_options=unreachable)


def test_keys_outside_the_root_are_refused_by_the_s3_backend(s3_uri: S3Location) -> None:
    storage = open_storage(s3_uri.uri, s3_uri.storage_options)
    for key in ("../other/_timeline/table.json", "/abs", "a//b", "a/./b"):
        with pytest.raises(txn.InvalidOptionError, match="normalised table-relative path"):
            storage.read(key)
        with pytest.raises(txn.InvalidOptionError):
            storage.put(key, b"x")
        with pytest.raises(txn.InvalidOptionError):
            storage.delete(key)
    with pytest.raises(txn.InvalidOptionError):
        storage.list("../")
