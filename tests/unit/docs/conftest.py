"""The `long` marker for the guide's Spark pages, registered here too so this folder runs the
same before and after the marker is declared in pyproject.toml (registering twice is harmless)."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long: deselected by the default run (make test-long runs it)")
