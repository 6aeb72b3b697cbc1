"""Running a test written for local disk on each object store: S3 (moto), GCS (the emulator behind
``tests/gcsserver.py``'s front) and Azure (Azurite).

A table on a store needs its ``storage_options`` everywhere it is opened, and the multi-process
and kill tests open tables in child processes that get only a location. So the options are
handed over the way a user of deltalake or object_store would in a job: as the environment
(``AWS_*``, ``GOOGLE_*``, ``AZURE_*``), which metatxn reads for whatever the options leave out
(design/storage.md). :func:`environment` turns a location's options into those variables;
``monkeypatch.setenv`` them and every ``txn.open_table(uri)`` in the test and in the children it
spawns reaches the server.

:class:`StoreRoot` stands in for ``tmp_path`` in a test that builds its table location as
``str(tmp_path / "table")``: there the same expression names a fresh place on the store, so the
test body (and what it asserts) is the one that runs on local disk.
"""

from __future__ import annotations

import itertools
import socket
import subprocess
from typing import Any, NamedTuple

from metatxn.timeline import Storage, open_storage


def free_port() -> int:
    """A port of 127.0.0.1 free now, for a test server to bind."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def end_process(process: subprocess.Popen[bytes]) -> None:
    """Terminate a test server's process, killing it if it has not exited within 10 s."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class StoreLocation(NamedTuple):
    """A table location on one of the tests' servers (S3, GCS, Azure): unpack as ``uri,
    storage_options``."""

    uri: str
    storage_options: dict[str, Any]

    @property
    def bucket(self) -> str:
        """The bucket (Azure: the container) the location is in."""
        return self.uri.split("://", 1)[1].split("/", 1)[0]

    def sibling(self, path: str) -> StoreLocation:
        """Another location in the same bucket, at ``path`` below it."""
        scheme = self.uri.split("://", 1)[0]
        return StoreLocation(f"{scheme}://{self.bucket}/{path}", self.storage_options)

    def open(self) -> Storage:
        """A new handle on the location (a new client each time)."""
        return open_storage(self.uri, dict(self.storage_options))


#: The fixture of each store's locations (``tests/conftest.py``), by store.
LOCATION_FIXTURES = {"s3": "s3_uri", "gcs": "gcs_uri", "azure": "azure_uri"}
_PREFIXES = {"s3": "AWS_", "gs": "GOOGLE_", "az": "AZURE_"}
#: s3fs's spellings (what tests/s3server.py passed before the object-store layer) -> deltalake's.
_S3FS_KEYS = {"key": "aws_access_key_id", "secret": "aws_secret_access_key", "token": "aws_session_token"}
_S3FS_CLIENT_KEYS = {"endpoint_url": "aws_endpoint_url", "region_name": "aws_region"}
_numbers = itertools.count()


def environment(uri: str, storage_options: dict[str, Any]) -> dict[str, str]:
    """The environment variables that stand for ``storage_options`` of the store ``uri`` is on."""
    scheme = uri.split("://", 1)[0]
    prefix = _PREFIXES[scheme]
    options: dict[str, Any] = {}
    for key, value in storage_options.items():
        if key == "client_kwargs":
            options.update({_S3FS_CLIENT_KEYS[k]: v for k, v in value.items() if k in _S3FS_CLIENT_KEYS})
        else:
            options[_S3FS_KEYS.get(key, key)] = value
    if scheme == "s3" and str(options.get("aws_endpoint_url", "")).startswith("http://"):
        options.setdefault("allow_http", "true")
    variables = {}
    for key, value in options.items():
        name = key.upper()
        variables[name if name.startswith(prefix) else prefix + name] = str(value).lower() \
            if isinstance(value, bool) else str(value)
    return variables


class StoreRoot:
    """A stand-in for ``tmp_path`` whose children are fresh locations on a store.

    ``str(root / "table")`` is ``<scheme>://<bucket>/<n>/table``, ``n`` new for each root, so
    that tests sharing a bucket never share a table.
    """

    def __init__(self, location: Any) -> None:
        self.base = f"{location.uri.rsplit('/', 1)[0]}/root-{next(_numbers)}"

    def __truediv__(self, name: str) -> str:
        return f"{self.base}/{name}"

    def __str__(self) -> str:
        return self.base
