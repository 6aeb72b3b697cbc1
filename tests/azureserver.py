"""Azurite (Microsoft's Azure Storage emulator) on 127.0.0.1 for the tests, and fresh containers on it.

Azurite is a Node.js program from the npm registry. ``make install-test`` installs it into
``.venv/node`` (``npm install --prefix .venv/node azurite@3``); :func:`find_azurite` looks there
(beside the running interpreter's ``sys.prefix``), then at ``$METATXN_AZURITE`` and on ``PATH``.
The blob service runs as a subprocess with its state in memory, on a free port.

Azurite honours ``If-None-Match: *`` on ``Put Blob`` (checked before trusting it: a second
create of one name gets ``409 BlobAlreadyExists``, and of 16 concurrent creates exactly one
wins; design/storage.md, "Testing the stores"). Node serves requests on one thread, so the
check and the insert cannot interleave: the guarantee Azure gives, with no wrapper needed.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from email.utils import formatdate
from pathlib import Path
from typing import Any

from tests.stores import StoreLocation, end_process, free_port

# Azurite's one built-in account and its published key (the same for every Azurite).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

_container_numbers = itertools.count()


AzureLocation = StoreLocation


def find_azurite() -> str | None:
    """The ``azurite-blob`` executable, or None if neither it nor Node.js is installed."""
    if shutil.which("node") is None:
        return None
    candidates = [Path(sys.prefix) / "node" / "node_modules" / ".bin" / "azurite-blob"]
    if os.environ.get("METATXN_AZURITE"):
        candidates.insert(0, Path(os.environ["METATXN_AZURITE"]))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("azurite-blob")


class AzuriteServer:
    """Azurite's blob service bound to a free port on 127.0.0.1, state in memory."""

    def __init__(self, executable: str) -> None:
        self._executable = executable
        self._process: subprocess.Popen[bytes] | None = None
        self.endpoint_url = ""

    def start(self) -> AzuriteServer:
        port = free_port()
        # --skipApiVersionCheck: object_store may send a newer x-ms-version than this Azurite
        # knows; --loose: ignore headers Azurite does not implement instead of failing on them.
        self._process = subprocess.Popen(
            [self._executable, "--inMemoryPersistence", "--skipApiVersionCheck", "--loose",
             "--blobHost", "127.0.0.1", "--blobPort", str(port), "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    error = b""
                    if self._process.poll() is not None and self._process.stderr is not None:
                        error = self._process.stderr.read()
                    self.stop()
                    raise RuntimeError(f"Azurite did not start: {error.decode(errors='replace')}") from None
                time.sleep(0.05)
        self.endpoint_url = f"http://127.0.0.1:{port}/{ACCOUNT}"
        return self

    def stop(self) -> None:
        if self._process is None:
            return
        end_process(self._process)
        if self._process.stderr is not None:
            self._process.stderr.close()
        self._process = None

    @property
    def storage_options(self) -> dict[str, Any]:
        """What ``open_storage`` needs to reach this server (fresh dict on each call)."""
        return {
            "azure_storage_account_name": ACCOUNT,
            "azure_storage_account_key": ACCOUNT_KEY,
            "azure_storage_endpoint": self.endpoint_url,
            "allow_http": "true",
        }

    def create_container(self) -> str:
        """Create an empty container with a name no other test uses, and return the name."""
        name = f"metatxn-{os.getpid()}-{next(_container_numbers)}"
        # Create Container signed with Shared Key by hand: object_store has no call for it, and
        # one request does not justify the Azure SDK as a test dependency.
        headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": "2021-08-06",
                   "Content-Type": "application/octet-stream"}
        signed = "\n".join(["PUT", "", "", "", "", headers["Content-Type"], "", "", "", "", "", ""])
        signed += "\n" + "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-ms-"))
        signed += f"/{ACCOUNT}/{ACCOUNT}/{name}\nrestype:container"
        digest = hmac.new(base64.b64decode(ACCOUNT_KEY), signed.encode(), hashlib.sha256).digest()
        headers["Authorization"] = f"SharedKey {ACCOUNT}:{base64.b64encode(digest).decode()}"
        request = urllib.request.Request(f"{self.endpoint_url}/{name}?restype=container", data=b"",
                                         method="PUT", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30):
                pass
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"Azurite refused to create container {name}: {exc.read()[:300]!r}") from exc
        return name

    def new_location(self, path: str = "table") -> AzureLocation:
        """A table location in a fresh container."""
        return AzureLocation(f"az://{self.create_container()}/{path}", self.storage_options)
