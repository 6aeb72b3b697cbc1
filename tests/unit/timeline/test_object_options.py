"""Object-store locations and storage_options, resolved without a request: deltalake's keys, the
s3fs spellings S3 tables took before, the environment, and the pyarrow filesystem of the data
path. (The stores themselves: test_storage_contract.py on moto, the emulators' tests.)"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.fs
import pytest

from metatxn.timeline import InvalidOptionError, ObjectStorage, fsspec_options, makes_folders, open_storage
from metatxn.timeline._options import AZURITE_ACCOUNT, store_options

pytest.importorskip("obstore")

DELTALAKE = {"aws_access_key_id": "AK", "aws_secret_access_key": "SK", "aws_region": "eu-west-1",
             "aws_endpoint_url": "http://127.0.0.1:9000"}
S3FS = {"key": "AK", "secret": "SK",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}}


def test_s3fs_spellings_resolve_as_deltalake_s_keys() -> None:
    new, old = (store_options("s3://b/t", options, environ={}) for options in (DELTALAKE, S3FS))
    assert new == old
    assert new.config == {**DELTALAKE}
    assert (new.bucket, new.prefix, new.client) == ("b", "t", {"allow_http": "true"})


def test_the_environment_fills_in_what_the_options_leave_out() -> None:
    environ = {"AWS_ACCESS_KEY_ID": "from-env", "AWS_REGION": "us-west-2", "AWS_ALLOW_HTTP": "true",
               "AWS_PROFILE": "ignored", "GOOGLE_SERVICE_ACCOUNT": "/other/store"}
    resolved = store_options("s3a://b", {"aws_access_key_id": "given"}, environ=environ)
    assert resolved.config == {"aws_access_key_id": "given", "aws_region": "us-west-2"}
    assert resolved.client == {"allow_http": "true"}
    assert resolved.prefix == ""


@pytest.mark.parametrize(("uri", "option", "hint"), [
    ("s3://b/t", "aws_secret_acess_key", "did you mean 'aws_secret_access_key'"),
    ("gs://b/t", "google_service_acount", "did you mean 'google_service_account'"),
    ("az://c/t", "azure_storage_acount_key", "did you mean 'azure_storage_account_key'"),
    ("abfss://c@a.dfs.core.windows.net/t", "aws_region", "which Azure tables do not take"),
])
def test_an_option_the_store_does_not_take_is_refused_naming_the_close_one(
        uri: str, option: str, hint: str) -> None:
    with pytest.raises(InvalidOptionError, match=f"storage_options for '{uri}' name '{option}'.*{hint}"):
        open_storage(uri, {option: "x"})


def test_s3fs_nested_options_are_translated_or_refused() -> None:
    resolved = store_options("s3://b", {"config_kwargs": {"connect_timeout": 1, "read_timeout": 5,
                                                          "retries": {"max_attempts": 1}},
                                        "use_listings_cache": False}, environ={})
    assert resolved.client == {"connect_timeout": "1s", "timeout": "5s"}
    assert resolved.retry == {"max_retries": 0}
    with pytest.raises(InvalidOptionError,
                       match=r"'client_kwargs.verfy' \(did you mean 'client_kwargs.verify'"):
        store_options("s3://b", {"client_kwargs": {"verfy": False}}, environ={})


def test_a_value_of_the_wrong_kind_is_refused() -> None:
    with pytest.raises(InvalidOptionError, match="storage option 'aws_region' must be a string"):
        store_options("s3://b", {"aws_region": ["eu"]}, environ={})


def test_options_for_external_segments_reach_fsspec_in_its_own_spelling() -> None:
    assert fsspec_options("s3://x/data", DELTALAKE) == {
        "key": "AK", "secret": "SK",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"}}
    assert fsspec_options("s3a://x/data", S3FS) == S3FS
    assert fsspec_options("gs://x", {"google_service_account_key": '{"a": 1}'}) == {"token": {"a": 1}}
    azurite = fsspec_options("abfs://c/x", {"azure_storage_use_emulator": True})
    assert sorted(azurite) == ["account_key", "account_name"]
    assert azurite["account_name"] == AZURITE_ACCOUNT
    assert fsspec_options("file:///x", {"anything": 1}) == {"anything": 1}


def test_the_data_path_is_pyarrow_s_own_filesystem_configured_from_the_options(tmp_path: Path) -> None:
    s3 = open_storage("s3://b/t", {**DELTALAKE})
    filesystem, root = s3.arrow_filesystem()  # type: ignore[attr-defined]
    assert isinstance(filesystem, pa.fs.S3FileSystem) and root == "b/t"
    assert filesystem.region == "eu-west-1" and not makes_folders(filesystem)

    emulator = tmp_path / "gcs.json"
    emulator.write_text(json.dumps({"gcs_base_url": "http://127.0.0.1:4443", "disable_oauth": True,
                                    "client_email": "", "private_key": "", "private_key_id": ""}))
    gcs = open_storage("gs://b", {"google_service_account": str(emulator)})
    filesystem, root = gcs.arrow_filesystem()  # type: ignore[attr-defined]
    assert isinstance(filesystem, pa.fs.PyFileSystem) and root == "b"  # obstore's adapter

    azure = open_storage("az://c/t", {"azure_storage_use_emulator": True})
    filesystem, root = azure.arrow_filesystem()  # type: ignore[attr-defined]
    assert isinstance(filesystem, pa.fs.AzureFileSystem) and root == "c/t"

    # A bearer token is a credential pyarrow's Azure filesystem cannot take: obstore's adapter.
    token = open_storage("az://c/t", {"account_name": "a", "bearer_token": "tok"})
    filesystem, _ = token.arrow_filesystem()  # type: ignore[attr-defined]
    assert isinstance(filesystem, pa.fs.PyFileSystem) and not makes_folders(filesystem)
    assert isinstance(token, ObjectStorage)

    assert makes_folders(pa.fs.LocalFileSystem())
