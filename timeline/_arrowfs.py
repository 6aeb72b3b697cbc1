"""The pyarrow filesystem that data files of an object-store table are read and written through.

pyarrow's own C++ filesystems for S3 and Azure (``S3FileSystem``, ``AzureFileSystem``) move
every byte outside Python, so Parquet reads overlap their range requests on pyarrow's I/O
threads. Each is configured from the same resolved options as the commit path
(:class:`~timeline._options.StoreOptions`), so one set of options reaches both. GCS, and
credentials pyarrow cannot take (Azure bearer tokens, managed-identity endpoints, the Azure CLI;
S3 requester-pays, KMS keys, invalid certificates), go through obstore's fsspec adapter over the
very same obstore configuration: still Rust I/O, through a Python dispatch. design/storage.md
has the figures that chose this.

pyarrow's object-store filesystems write a zero-byte "directory marker" object for
``create_dir``, and again for a parent emptied by ``delete_file``/``move``. metatxn's listings
would see those as keys, so the data path never calls them on object stores
(``txn/_files/_storage_io.py`` checks :func:`makes_folders`).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.fs

from ._options import AZURITE_ACCOUNT, AZURITE_KEY, StoreOptions, _host

#: Filesystem type names (``FileSystem.type_name``) that have folders of their own.
_FLAT = frozenset({"s3", "gcs", "abfs"})


def makes_folders(filesystem: pa.fs.FileSystem) -> bool:
    """Whether ``create_dir`` and deletes are harmless on ``filesystem``: not an object store
    whose directory markers would show in listings."""
    if filesystem.type_name in _FLAT:
        return False
    handler = getattr(filesystem, "handler", None)
    return not type(getattr(handler, "fs", None)).__module__.startswith("obstore")


def _seconds(value: str | None) -> float | None:
    if not value:
        return None
    text = value.strip().lower()
    for unit, factor in (("ms", 0.001), ("s", 1.0), ("m", 60.0)):
        if text.endswith(unit):
            try:
                return float(text[: -len(unit)]) * factor
            except ValueError:
                return None
    try:
        return float(text)
    except ValueError:
        return None


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("true", "1", "yes", "on")


def arrow_filesystem(options: StoreOptions) -> tuple[pa.fs.FileSystem, str]:
    """A pyarrow filesystem for the store and the table root's path in it."""
    root = f"{options.bucket}/{options.prefix}" if options.prefix else options.bucket
    # A pyarrow built without the store's filesystem (Azure came to the wheels late) falls back.
    available = {"s3": "S3FileSystem", "gcs": "GcsFileSystem", "azure": "AzureFileSystem"}
    native = ({"s3": _s3, "gcs": _gcs, "azure": _azure}[options.kind](options)
              if hasattr(pa.fs, available[options.kind]) else None)
    return (native if native is not None else _adapter(options)), root


def _s3(options: StoreOptions) -> pa.fs.FileSystem | None:
    config, client = options.config, options.client
    kwargs: dict[str, Any] = {
        "region": config.get("aws_region") or config.get("aws_default_region") or "us-east-1",
        "allow_bucket_creation": False, "allow_bucket_deletion": False,
    }
    if config.get("aws_access_key_id"):
        kwargs.update(access_key=config["aws_access_key_id"],
                      secret_key=config.get("aws_secret_access_key", ""),
                      session_token=config.get("aws_session_token"))
    if _true(config.get("aws_skip_signature")):
        kwargs["anonymous"] = True
    if config.get("aws_endpoint_url"):
        scheme, host = _host(config["aws_endpoint_url"])
        kwargs.update(endpoint_override=host, scheme=scheme)
    if _true(config.get("aws_virtual_hosted_style_request")):
        kwargs["force_virtual_addressing"] = True
    if config.get("aws_role_arn"):
        kwargs["role_arn"] = config["aws_role_arn"]
        if config.get("aws_role_session_name"):
            kwargs["session_name"] = config["aws_role_session_name"]
    connect, request = _seconds(client.get("connect_timeout")), _seconds(client.get("timeout"))
    if connect is not None:
        kwargs["connect_timeout"] = connect
    if request is not None:
        kwargs["request_timeout"] = request
    if client.get("proxy_url"):
        kwargs["proxy_options"] = client["proxy_url"]
    if "max_retries" in options.retry:
        kwargs["retry_strategy"] = pa.fs.AwsStandardS3RetryStrategy(
            max_attempts=int(options.retry["max_retries"]) + 1)
    if _true(client.get("allow_invalid_certificates")) or config.get("aws_sse_kms_key_id") or (
            config.get("aws_request_payer")):
        return None  # pyarrow's S3 has no switch for these: obstore's adapter honours them
    return pa.fs.S3FileSystem(**kwargs)


def _gcs(options: StoreOptions) -> pa.fs.FileSystem | None:
    """None: GCS data goes through obstore's adapter. pyarrow's GcsFileSystem takes a key only
    from the environment, and on the test emulator its JSON-API reads of objects that
    object_store's XML API had written and listed failed with NOT_FOUND under concurrent writers
    (design/storage.md, "The data path"); the adapter's reads were as fast on S3."""
    return None


def _azure(options: StoreOptions) -> pa.fs.FileSystem | None:
    config = options.config
    kwargs: dict[str, Any] = {}
    emulator = _true(config.get("azure_storage_use_emulator"))
    account = config.get("azure_storage_account_name") or (AZURITE_ACCOUNT if emulator else None)
    if account is None:
        return None
    kwargs["account_name"] = account
    if config.get("azure_storage_account_key") or emulator:
        kwargs["account_key"] = config.get("azure_storage_account_key") or AZURITE_KEY
    elif config.get("azure_storage_sas_token"):
        kwargs["sas_token"] = config["azure_storage_sas_token"].lstrip("?")
    elif config.get("azure_storage_client_secret"):
        kwargs.update(client_id=config.get("azure_storage_client_id"),
                      client_secret=config["azure_storage_client_secret"],
                      tenant_id=config.get("azure_storage_tenant_id"))
    elif any(config.get(k) for k in ("azure_storage_token", "azure_use_azure_cli",
                                     "azure_msi_endpoint", "azure_federated_token_file",
                                     "azure_skip_signature", "azure_use_fabric_endpoint")):
        return None
    endpoint = config.get("azure_storage_endpoint") or (
        "http://127.0.0.1:10000" if emulator else None)
    if endpoint:
        scheme, host = _host(endpoint)
        kwargs.update(blob_storage_authority=host, blob_storage_scheme=scheme,
                      dfs_storage_authority=host, dfs_storage_scheme=scheme)
    return pa.fs.AzureFileSystem(**kwargs)


def _adapter(options: StoreOptions) -> pa.fs.FileSystem:
    from obstore.fsspec import FsspecStore

    protocol = {"s3": "s3", "gcs": "gs", "azure": "az"}[options.kind]
    store = FsspecStore(protocol, config=options.config,  # type: ignore[call-overload]
                        client_options=options.client or None,
                        retry_config=options.retry or None)
    return pa.fs.PyFileSystem(pa.fs.FSSpecHandler(store))
