"""A moto S3 server on 127.0.0.1 for the tests, and fresh buckets on it.

The server runs in a thread of the pytest process (see the session fixture ``s3_server`` in
``tests/conftest.py``); other processes reach it through its endpoint, so a
:class:`S3Location` is plain picklable data that a spawned child can open.

moto evaluates ``If-None-Match: *`` as check-then-insert inside one request thread, without a
lock, whereas S3 decides conditional writes atomically on the server. The tests are about our
client, not about moto, so conditional PUTs are serialised here to give the server guarantee the
S3 backend relies on (see ``timeline/_object.py``). Every other request runs concurrently.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from tests.stores import StoreLocation

ACCESS_KEY = "testing"
SECRET_KEY = "testing"
REGION = "us-east-1"

_bucket_numbers = itertools.count()


S3Location = StoreLocation


_CONFLICT = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict'
             b'</Code><Message>A conflicting conditional operation is currently in progress '
             b'against this resource.</Message></Error>')


class _SerialisedConditionalPuts:
    """WSGI middleware: one ``PUT`` with ``If-None-Match: *`` at a time (see module docstring)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._lock = threading.Lock()
        #: How many coming conditional PUTs to answer 409 ConditionalRequestConflict, as S3
        #: does while another conditional write on the key is in flight.
        self.conflicts = 0

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("REQUEST_METHOD") == "PUT" and environ.get("HTTP_IF_NONE_MATCH") == "*":
            with self._lock:
                if self.conflicts > 0:
                    self.conflicts -= 1
                    start_response("409 Conflict", [("Content-Type", "application/xml")])
                    return [_CONFLICT]
                # moto decides and stores the object inside this call; the body it returns is
                # already materialised, so iterating it later needs no lock.
                return self._app(environ, start_response)
        return self._app(environ, start_response)


class S3Server:
    """A threaded moto S3 server bound to a free port on 127.0.0.1."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        # werkzeug logs one line per request at INFO; thousands of them drown test output.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.endpoint_url = ""
        self._admin: Any = None
        self._middleware: _SerialisedConditionalPuts | None = None

    def start(self) -> S3Server:
        self._server.start()
        wsgi_server = getattr(self._server, "_server", None)
        if wsgi_server is None or not hasattr(wsgi_server, "app"):
            self._server.stop()
            raise RuntimeError(
                "moto's ThreadedMotoServer no longer exposes its werkzeug server as `_server`; "
                "update tests/s3server.py so conditional PUTs stay serialised"
            )
        self._middleware = wsgi_server.app = _SerialisedConditionalPuts(wsgi_server.app)
        host, port = self._server.get_host_and_port()
        self.endpoint_url = f"http://{host}:{port}"
        return self

    def answer_conflicts(self, count: int) -> None:
        """Answer the next ``count`` conditional PUTs ``409 ConditionalRequestConflict``."""
        assert self._middleware is not None, "start the server first"
        self._middleware.conflicts = count

    def pending_conflicts(self) -> int:
        """How many of the conflicts asked for are still to be answered."""
        assert self._middleware is not None, "start the server first"
        return self._middleware.conflicts

    def stop(self) -> None:
        self._server.stop()

    @property
    def storage_options(self) -> dict[str, Any]:
        """What ``open_storage`` needs to reach this server (fresh dict on each call)."""
        return {
            "key": ACCESS_KEY,
            "secret": SECRET_KEY,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": REGION},
        }

    def create_bucket(self) -> str:
        """Create an empty bucket with a name no other test uses, and return the name."""
        if self._admin is None:
            import s3fs

            self._admin = s3fs.S3FileSystem(**self.storage_options, skip_instance_cache=True)
        name = f"metatxn-{os.getpid()}-{next(_bucket_numbers)}"
        # s3fs's mkdir sends a LocationConstraint that moto rejects for us-east-1
        # (InvalidLocationConstraint), so create the bucket through the plain API call.
        self._admin.call_s3("create_bucket", Bucket=name)
        return name

    def new_location(self, path: str = "table") -> S3Location:
        """A table location in a fresh bucket."""
        return S3Location(f"s3://{self.create_bucket()}/{path}", self.storage_options)
