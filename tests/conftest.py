"""Shared fixtures and Hypothesis profiles.

Profiles: ``ci`` (the default, locally and in CI: derandomized and bounded so ``make test`` fits
in 15 minutes on 2 cores: 11.5 on two workers), ``dev`` (random, 100 examples:
``make test-long``) and ``long``
(random, 1,000 examples: ``make test-long HYPOTHESIS_PROFILE=long``). The random profiles are run
before resolving an issue that touches the commit protocol or the metadata table.
"""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=40, stateful_step_count=30, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=100, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long", max_examples=1000, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config: pytest.Config) -> None:
    from tests.xdist_order import keep_collection_order

    keep_collection_order(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadscope``, slow scopes first (tests/xdist_order.py says why)."""
    from tests.xdist_order import slow_scopes_first

    slow_scopes_first(config, items)


class FakeClock:
    """A settable epoch-millisecond clock; every call returns the current reading."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    def sleep(self, seconds: float) -> None:
        """A sleep that only moves this clock, for lock waits in tests."""
        self.now_ms += max(1, int(seconds * 1000))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


_memory_roots = itertools.count()


@pytest.fixture
def memory_uri() -> Iterator[str]:
    """A fresh memory:// location, removed afterwards."""
    import fsspec

    root = f"/metatxn-test-{os.getpid()}-{next(_memory_roots)}"
    yield f"memory://{root}"
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


@pytest.fixture
def local_uri(tmp_path) -> str:  # type: ignore[no-untyped-def]
    return str(tmp_path / "table")


@pytest.fixture(params=["memory", "local"])
def table_uri(request, memory_uri: str, local_uri: str) -> str:  # type: ignore[no-untyped-def]
    """A fresh table location on each fast backend."""
    return memory_uri if request.param == "memory" else local_uri


def make_ids(prefix: str = "id") -> Callable[[], str]:
    counter = itertools.count()
    return lambda: f"{prefix}{next(counter):06d}"


# -- S3 (moto) -------------------------------------------------------------------------------------

from typing import TYPE_CHECKING  # noqa: E402 - appended section; kept next to its only use

if TYPE_CHECKING:
    from tests.s3server import S3Location, S3Server


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server for the whole session, on a free port of 127.0.0.1."""
    pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    from tests.s3server import S3Server

    server = S3Server().start()
    yield server
    server.stop()


@pytest.fixture
def s3_uri(s3_server: S3Server) -> S3Location:
    """A table location ``s3://<fresh bucket>/table``; unpacks as ``uri, storage_options``."""
    return s3_server.new_location()


def _raised_by_fault(exc_info: object) -> bool:
    from tests.faults import InjectedFault

    error = exc_info[1] if isinstance(exc_info, tuple) else None
    while error is not None:
        if isinstance(error, InjectedFault):
            return True
        error = error.__cause__ or error.__context__
    return False


@pytest.fixture(autouse=True)
def _no_swallowed_errors(request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fail a test in which metatxn logged a warning that no injected fault explains.

    metatxn logs, instead of raising, the failures a caller can do nothing about: maintenance
    after a commit that already landed, or a rollback that a later writer will redo. Outside
    fault injection such a warning means a bug was swallowed, so tests treat it as an error.
    Mark a test ``allow_metatxn_warnings`` when the warning is what it provokes on purpose.
    """
    caplog.set_level(logging.WARNING, logger="metatxn")
    yield
    if request.node.get_closest_marker("allow_metatxn_warnings"):
        return
    swallowed = [r for r in caplog.get_records("call")
                 if r.name == "metatxn" and r.levelno >= logging.WARNING
                 and not _raised_by_fault(r.exc_info)]
    if swallowed:
        pytest.fail("metatxn logged unexpected warnings:\n" + "\n".join(
            f"{r.getMessage()}: {r.exc_info[1]!r}" if r.exc_info else r.getMessage()
            for r in swallowed))


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MB tmpfs, where the machine allows mounting one (root in a permissive container)."""
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True, timeout=30)


# -- GCS (gcp-storage-emulator behind tests/gcsserver.py's front) and Azure (Azurite) ------------

if TYPE_CHECKING:
    from tests.azureserver import AzureLocation, AzuriteServer
    from tests.gcsserver import GcsLocation, GcsServer


@pytest.fixture(scope="session")
def gcs_server() -> Iterator[GcsServer]:
    """One GCS emulator for the whole session, on free ports of 127.0.0.1."""
    pytest.importorskip("gcp_storage_emulator")
    from tests.gcsserver import GcsServer

    server = GcsServer().start()
    yield server
    server.stop()


@pytest.fixture
def gcs_uri(gcs_server: GcsServer) -> GcsLocation:
    """A table location ``gs://<fresh bucket>/table``; unpacks as ``uri, storage_options``."""
    return gcs_server.new_location()


@pytest.fixture(scope="session")
def azure_server() -> Iterator[AzuriteServer]:
    """One Azurite blob service for the whole session, on a free port of 127.0.0.1."""
    import shutil

    from tests.azureserver import AzuriteServer, find_azurite

    executable = find_azurite()
    if executable is None:
        if shutil.which("node") is None or shutil.which("npm") is None:
            pytest.skip("Azurite needs Node.js and npm, which this machine lacks")
        pytest.fail("Azurite is not installed: run `make install-test` "
                    "(npm install --prefix .venv/node azurite@3)")
    server = AzuriteServer(executable).start()
    yield server
    server.stop()


@pytest.fixture
def azure_uri(azure_server: AzuriteServer) -> AzureLocation:
    """A table location ``az://<fresh container>/table``; unpacks as ``uri, storage_options``."""
    return azure_server.new_location()


# -- every object store in turn --------------------------------------------------------------------


@pytest.fixture(params=["s3", "gcs", "azure"])
def store_uri(request: pytest.FixtureRequest) -> Any:
    """A table location on each object store in turn (S3, GCS, Azure), from that store's fixture
    above; unpacks as ``uri, storage_options``."""
    from tests.stores import LOCATION_FIXTURES

    return request.getfixturevalue(LOCATION_FIXTURES[request.param])


@pytest.fixture
def store_env(store_uri: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``store_uri`` with its options also in the environment, where ``txn.open_table(uri)`` in
    this process and in the processes it starts finds them (``tests/stores.py``)."""
    from tests.stores import environment

    for name, value in environment(*store_uri).items():
        monkeypatch.setenv(name, value)
    return store_uri
