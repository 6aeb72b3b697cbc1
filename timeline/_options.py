"""Object-store locations and ``storage_options``: one vocabulary for S3, GCS and Azure.

The keys are deltalake's, which are Rust ``object_store``'s configuration keys
(``aws_access_key_id``, ``google_service_account``, ``azure_storage_account_name``, ...), with
``object_store``'s own short spellings (``region``, ``endpoint``, ``account_name``) and its
client options (``allow_http``, ``timeout``, ...), optionally prefixed with the store's
``aws_``/``google_``/``azure_``. The environment fills in what the options leave out, as
``object_store``'s ``from_env`` reads it: every ``AWS_*`` (``GOOGLE_*``, ``AZURE_*``) variable
whose lower-cased name is a key.

S3 tables also keep the s3fs spellings metatxn took before obstore (``key``, ``secret``,
``token``, ``endpoint_url``, ``anon``, ``client_kwargs={"endpoint_url", "region_name", ...}``,
``config_kwargs={"connect_timeout", "read_timeout", "retries"}``) as aliases, and accept s3fs's
cache switches (``use_listings_cache``, ...) without effect: listings are never cached. An
unknown key is refused before any request, naming the close match and the common keys.

Everything here is pure: nothing touches the network.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from ._errors import InvalidOptionError

#: URL scheme -> store kind.
SCHEMES = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs", "az": "azure", "azure": "azure",
           "abfs": "azure", "abfss": "azure"}
#: What each kind is called in messages.
STORE_NAMES = {"s3": "S3", "gcs": "GCS", "azure": "Azure"}
_PREFIXES = {"s3": "aws_", "gcs": "google_", "azure": "azure_"}

# Canonical key -> the other spellings object_store (and, for S3, s3fs) accepts for it.
_S3_KEYS: dict[str, tuple[str, ...]] = {
    "aws_access_key_id": ("access_key_id", "key"),
    "aws_secret_access_key": ("secret_access_key", "secret"),
    "aws_session_token": ("aws_token", "session_token", "token"),
    "aws_region": ("region", "region_name"),
    "aws_default_region": ("default_region",),
    "aws_endpoint_url": ("aws_endpoint", "endpoint_url", "endpoint"),
    "aws_skip_signature": ("skip_signature", "anon"),
    "aws_virtual_hosted_style_request": ("virtual_hosted_style_request",),
    "aws_imdsv1_fallback": ("imdsv1_fallback",),
    "aws_metadata_endpoint": ("metadata_endpoint",),
    "aws_unsigned_payload": ("unsigned_payload",),
    "aws_checksum_algorithm": ("checksum_algorithm",),
    "aws_request_payer": ("request_payer",),
    "aws_server_side_encryption": ("server_side_encryption",),
    "aws_sse_kms_key_id": ("sse_kms_key_id",),
    "aws_sse_bucket_key_enabled": ("sse_bucket_key_enabled",),
    "aws_role_arn": ("role_arn",),
    "aws_role_session_name": ("role_session_name",),
    "aws_web_identity_token_file": ("web_identity_token_file",),
    "aws_sts_endpoint": ("sts_endpoint",),
    "aws_container_credentials_relative_uri": ("container_credentials_relative_uri",),
    "aws_container_credentials_full_uri": ("container_credentials_full_uri",),
    "aws_s3_express": ("s3_express",),
    "aws_disable_tagging": ("disable_tagging",),
}
_GCS_KEYS: dict[str, tuple[str, ...]] = {
    "google_service_account": ("service_account", "google_service_account_path",
                               "service_account_path"),
    "google_service_account_key": ("service_account_key",),
    "google_application_credentials": ("application_credentials",),
    "google_skip_signature": ("skip_signature",),
}
_AZURE_KEYS: dict[str, tuple[str, ...]] = {
    "azure_storage_account_name": ("account_name",),
    "azure_storage_account_key": ("azure_storage_access_key", "azure_storage_master_key",
                                  "account_key", "access_key", "master_key"),
    "azure_storage_sas_token": ("azure_storage_sas_key", "sas_token", "sas_key"),
    "azure_storage_token": ("bearer_token", "token"),
    "azure_storage_client_id": ("azure_client_id", "client_id"),
    "azure_storage_client_secret": ("azure_client_secret", "client_secret"),
    "azure_storage_tenant_id": ("azure_tenant_id", "azure_storage_authority_id",
                                "azure_authority_id", "tenant_id", "authority_id"),
    "azure_storage_use_emulator": ("use_emulator",),
    "azure_storage_endpoint": ("azure_endpoint", "endpoint"),
    "azure_use_fabric_endpoint": ("use_fabric_endpoint",),
    "azure_use_azure_cli": ("use_azure_cli",),
    "azure_skip_signature": ("skip_signature",),
    "azure_msi_endpoint": ("azure_identity_endpoint", "msi_endpoint", "identity_endpoint"),
    "azure_object_id": ("object_id",),
    "azure_msi_resource_id": ("msi_resource_id",),
    "azure_federated_token_file": ("federated_token_file",),
    "azure_disable_tagging": ("disable_tagging",),
}
_CONFIG_KEYS = {"s3": _S3_KEYS, "gcs": _GCS_KEYS, "azure": _AZURE_KEYS}
#: object_store's HTTP client options (each also with the store's prefix, as deltalake takes
#: ``aws_allow_http``).
_CLIENT_KEYS = ("allow_http", "allow_invalid_certificates", "connect_timeout", "timeout",
                "proxy_url", "proxy_ca_certificate", "proxy_excludes", "user_agent",
                "pool_idle_timeout", "pool_max_idle_per_host", "http1_only", "http2_only")
_TIMEOUTS = frozenset({"connect_timeout", "timeout", "pool_idle_timeout"})
#: s3fs switches with nothing to do here (listings are never cached anyway).
_IGNORED_S3FS = frozenset({"use_listings_cache", "listings_expiry_time", "max_paths",
                           "skip_instance_cache", "use_ssl"})
#: Keys named in the "expected" part of an error, per store.
_COMMON = {
    "s3": ("aws_access_key_id", "aws_secret_access_key", "aws_session_token", "aws_region",
           "aws_endpoint_url", "aws_allow_http"),
    "gcs": ("google_service_account", "google_service_account_key",
            "google_application_credentials"),
    "azure": ("azure_storage_account_name", "azure_storage_account_key",
              "azure_storage_sas_token", "azure_storage_use_emulator", "azure_storage_endpoint"),
}
#: Azurite's well-known development account (object_store's and Azure's SDKs' default).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr"
               "/KBHBeksoGMGw==")


class StoreOptions(NamedTuple):
    """Where an object-store table lives and how to reach it, in object_store's terms."""

    kind: str  #: "s3", "gcs" or "azure"
    bucket: str  #: the bucket (Azure: the container)
    prefix: str  #: the table's folder in it ("" for the bucket's root)
    config: dict[str, str]  #: canonical object_store keys -> values, options over environment
    client: dict[str, str]  #: object_store client options
    retry: dict[str, Any]  #: obstore retry_config (empty: obstore's defaults)

    @property
    def name(self) -> str:
        return STORE_NAMES[self.kind]


def _aliases(kind: str) -> dict[str, str]:
    """Every accepted spelling of a key of ``kind`` -> ("config" or "client", canonical)."""
    found = {}
    for canonical, others in _CONFIG_KEYS[kind].items():
        for spelling in (canonical, *others):
            found[spelling] = canonical
    for key in _CLIENT_KEYS:
        found[key] = "client:" + key
        found[_PREFIXES[kind] + key] = "client:" + key
    return found


def known_keys(kind: str) -> list[str]:
    """The option names ``kind`` stores accept, canonical ones first."""
    names = [*_CONFIG_KEYS[kind], *(_PREFIXES[kind] + k for k in _CLIENT_KEYS)]
    rest = sorted(set(_aliases(kind)) - set(names))
    extra = sorted(_IGNORED_S3FS | {"client_kwargs", "config_kwargs"}) if kind == "s3" else []
    return [*names, *rest, *extra]


def _text(key: str, value: Any) -> str:
    """object_store takes every value as a string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if key in _TIMEOUTS and isinstance(value, (int, float)):
        return f"{value}s"
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, Mapping):
        return json.dumps(dict(value))
    raise InvalidOptionError(f"storage option {key!r} must be a string, number or bool, "
                             f"got {value!r} ({type(value).__name__})")


def parse_location(uri: str) -> tuple[str, str, str, str | None]:
    """``(kind, bucket, prefix, account)`` of an object-store URL; ``account`` is the Azure
    storage account an ``abfs[s]://container@account.dfs.core.windows.net/...`` URL names."""
    scheme, _, rest = uri.partition("://")
    kind = SCHEMES[scheme.lower()]
    stripped = rest.strip("/")
    bucket, _, prefix = stripped.partition("/")
    account = None
    if kind == "azure" and "@" in bucket:
        bucket, _, host = bucket.partition("@")
        account = host.split(".", 1)[0] or None
    if not bucket:
        example = {"s3": "s3://bucket/path", "gcs": "gs://bucket/path",
                   "azure": "az://container/path"}[kind]
        raise InvalidOptionError(f"{STORE_NAMES[kind]} location {uri!r} names no bucket; "
                                 f"expected {example}")
    return kind, bucket, prefix.strip("/"), account


def store_options(uri: str, options: Mapping[str, Any] | None,
                  environ: Mapping[str, str] | None = None) -> StoreOptions:
    """Resolve ``options`` (and the environment) for the object-store location ``uri``.

    Raises:
        InvalidOptionError: the URL names no bucket, or an option is unknown to its store or
            has a value of the wrong kind.
    """
    kind, bucket, prefix, account = parse_location(uri)
    aliases = _aliases(kind)
    given = dict(options or {})
    config: dict[str, str] = {}
    client: dict[str, str] = {}
    retry: dict[str, Any] = {}
    if kind == "s3":
        given = _s3fs_structures(uri, given, retry)
    unknown = sorted(k for k in given if k not in aliases and not (kind == "s3" and k in _IGNORED_S3FS))
    if unknown:
        _refuse(uri, kind, unknown)
    for key, value in given.items():
        target = aliases.get(key)
        if target is None or value is None:
            continue
        if target.startswith("client:"):
            client[target[7:]] = _text(target[7:], value)
        else:
            config[target] = _text(target, value)
    env = os.environ if environ is None else environ
    prefix_upper = _PREFIXES[kind].upper()
    for name, value in env.items():
        if not name.startswith(prefix_upper):
            continue
        target = aliases.get(name.lower())
        if target is None:
            continue
        if target.startswith("client:"):
            client.setdefault(target[7:], value)
        else:
            config.setdefault(target, value)
    if account and "azure_storage_account_name" not in config:
        config["azure_storage_account_name"] = account
    endpoint = config.get("aws_endpoint_url" if kind == "s3" else "azure_storage_endpoint", "")
    if endpoint.lower().startswith("http://"):
        # The user named a plain-HTTP endpoint (a MinIO or an emulator): that is their consent.
        client.setdefault("allow_http", "true")
    if kind == "azure" and config.get("azure_storage_use_emulator", "").lower() == "true":
        client.setdefault("allow_http", "true")
    return StoreOptions(kind, bucket, prefix, config, client, retry)


def _s3fs_structures(uri: str, given: dict[str, Any], retry: dict[str, Any]) -> dict[str, Any]:
    """Flatten s3fs's ``client_kwargs`` and ``config_kwargs`` into keys of their own."""
    flat = {k: v for k, v in given.items() if k not in ("client_kwargs", "config_kwargs")}
    client_kwargs = given.get("client_kwargs") or {}
    config_kwargs = given.get("config_kwargs") or {}
    for name, value in (("client_kwargs", client_kwargs), ("config_kwargs", config_kwargs)):
        if not isinstance(value, Mapping):
            raise InvalidOptionError(f"storage option {name} for {uri!r} must be a dict, got {value!r}")
    from_client = {"endpoint_url": "aws_endpoint_url", "region_name": "aws_region",
                   "aws_access_key_id": "aws_access_key_id",
                   "aws_secret_access_key": "aws_secret_access_key",
                   "aws_session_token": "aws_session_token"}
    for key, value in client_kwargs.items():
        if key == "verify":
            flat.setdefault("allow_invalid_certificates", not value)
        elif key in from_client:
            flat.setdefault(from_client[key], value)
        else:
            _refuse(uri, "s3", [f"client_kwargs.{key}"], [f"client_kwargs.{k}" for k in
                                                              [*from_client, "verify"]])
    for key, value in config_kwargs.items():
        if key == "connect_timeout":
            flat.setdefault("connect_timeout", value)
        elif key == "read_timeout":
            flat.setdefault("timeout", value)
        elif key == "retries" and isinstance(value, Mapping) and "max_attempts" in value:
            retry["max_retries"] = max(0, int(value["max_attempts"]) - 1)
        else:
            _refuse(uri, "s3", [f"config_kwargs.{key}"],
                    ["config_kwargs.connect_timeout", "config_kwargs.read_timeout",
                     "config_kwargs.retries"])
    return flat


def _refuse(uri: str, kind: str, unknown: list[str], known: list[str] | None = None) -> None:
    choices = known if known is not None else known_keys(kind)
    hints = [f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name)
             for name in unknown for close in [difflib.get_close_matches(name, choices, n=1)]]
    raise InvalidOptionError(
        f"storage_options for {uri!r} name {', '.join(hints)}, which {STORE_NAMES[kind]} tables "
        f"do not take; expected deltalake's (object_store's) keys such as "
        f"{', '.join(_COMMON[kind])}, or the environment ({_PREFIXES[kind].upper()}*)")


def fsspec_options(url: str, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """``options`` as fsspec's filesystem for ``url`` (s3fs, gcsfs, adlfs) takes them.

    A table's storage options also reach the external segments' files read through fsspec;
    deltalake's keys are translated to the fsspec implementation's, its own keys pass through
    (for the implementation to judge), and keys only object_store knows are dropped.
    """
    given = dict(options or {})
    scheme = url.split("://", 1)[0].lower() if "://" in url else "file"
    kind = SCHEMES.get(scheme)
    if kind is None or not given:
        return given
    aliases = _aliases(kind)
    native = {"s3": {"aws_access_key_id": "key", "aws_secret_access_key": "secret",
                     "aws_session_token": "token", "aws_skip_signature": "anon"},
              "gcs": {}, "azure": {"azure_storage_account_name": "account_name",
                                   "azure_storage_account_key": "account_key",
                                   "azure_storage_sas_token": "sas_token",
                                   "azure_storage_client_id": "client_id",
                                   "azure_storage_client_secret": "client_secret",
                                   "azure_storage_tenant_id": "tenant_id"}}[kind]
    out: dict[str, Any] = {}
    client_kwargs = dict(given.get("client_kwargs") or {}) if kind == "s3" else {}
    for key, value in given.items():
        canonical = aliases.get(key)
        if key in native.values() or canonical is None or key == "client_kwargs":
            if key != "client_kwargs":
                out[key] = value  # fsspec's own spelling: theirs to judge
            continue
        if canonical in native:
            out[native[canonical]] = value
        elif canonical == "aws_endpoint_url":
            client_kwargs.setdefault("endpoint_url", value)
        elif canonical == "aws_region":
            client_kwargs.setdefault("region_name", value)
        elif canonical in ("google_service_account", "google_application_credentials"):
            out["token"] = value
        elif canonical == "google_service_account_key":
            out["token"] = json.loads(value) if isinstance(value, str) else value
        elif canonical == "azure_storage_use_emulator" and str(value).lower() == "true":
            out.setdefault("account_name", AZURITE_ACCOUNT)
            out.setdefault("account_key", AZURITE_KEY)
        # Other object_store keys (allow_http, ...) have no fsspec counterpart.
    if client_kwargs:
        out["client_kwargs"] = client_kwargs
    return out


def _host(endpoint: str) -> tuple[str, str]:
    """``(scheme, host[:port])`` of an endpoint URL (``https`` when it names none)."""
    parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
    return parts.scheme or "https", parts.netloc
