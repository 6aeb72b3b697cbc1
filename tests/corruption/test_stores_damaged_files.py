"""The corruption suite on each object store (``long``): every kind of file a table keeps,
damaged every way, on S3 (moto), GCS (the emulator behind its enforcing front) and Azure
(Azurite).

The cases and the checks are ``test_damaged_files.py``'s: the same template table (built once
per module on local disk, with its dead writer), uploaded object by object to a fresh location
on the store for each case, one object damaged there through the store (truncated, garbage,
empty or deleted), then ``_check``: reads, lookups, validate and a write, each harmless or a
``TxnError`` naming the file. The table is opened by location alone; the store's options are in
the environment (``tests/stores.py``).

One case takes 10-30 s on a store (several hundred requests to a Python server), so the whole
matrix (148 cases) on three stores would take hours. Each store runs every kind of file once,
the damage turning with the kind and with the store (so across the three stores each kind meets
three of the four damages), and a third of the badly named files: 36 cases a store.
``METATXN_STORE_CORRUPTION=all`` runs the whole matrix on each.

Figures (2026-11-29, ``pytest -n 2 -m long``, load average about 20 on 2 CPUs, so inflated):
108 cases in 18.8 min on two workers, 19.5 s a case on average (GCS up to 63 s); 106 passed,
and the 2 of the control-character name (both on GCS in the rotation) fail in the test's own
put: obstore cannot name that key (``_UNNAMEABLE``, marked xfail).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from metatxn.timeline import LocalStorage, Storage, open_storage
from tests.corruption.test_damaged_files import (
    ADVISORY,
    BAD_NAMES,
    DAMAGES,
    KINDS,
    Template,
    _check,
    template,  # noqa: F401 - the module-scoped fixture, built here once
)
from tests.stores import StoreRoot

pytestmark = [pytest.mark.long, pytest.mark.allow_metatxn_warnings]

STORES = ["s3", "gcs", "azure"]
EVERY_CASE = os.environ.get("METATXN_STORE_CORRUPTION") == "all"
DAMAGE_CASES = [(store, kind, damage) for s, store in enumerate(STORES)
                for k, kind in enumerate(sorted(KINDS)) for d, damage in enumerate(DAMAGES)
                if EVERY_CASE or (k + s) % len(DAMAGES) == d]
#: obstore's ``Path`` refuses a key with control characters (``\x01``, ``\x7f``), so the put of
#: that name raises a plain ``ValueError`` (not a ``TxnError``) and no metatxn client can make
#: such a file on an object store; listing one another tool made is untested.
_UNNAMEABLE = pytest.mark.xfail(raises=ValueError, strict=True, reason=(
    "obstore refuses keys with control characters: ObjectStorage.put raises ValueError"))
NAME_CASES = [pytest.param(store, folder, name, marks=[_UNNAMEABLE] if name == "garbage" else [])
              for s, store in enumerate(STORES)
              for n, (folder, name) in enumerate((f, m) for f in ["_timeline", "_metadata/_timeline"]
                                                 for m in sorted(BAD_NAMES))
              if EVERY_CASE or n % len(STORES) == s]


def _upload(built: Template, uri: str) -> Storage:
    """The template's objects, copied to ``uri`` (eight at a time)."""
    source = LocalStorage(str(built.root))
    target = open_storage(uri)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: target.put(key, source.read(key)), built.files))
    return target


def _damage(storage: Storage, path: str, how: str) -> None:
    data = storage.read(path)
    if how == "truncated":
        storage.put(path, data[: len(data) // 2])
    elif how == "garbage":
        storage.put(path, bytes((7 * i + 13) % 256 for i in range(max(len(data), 16))))
    elif how == "empty":
        storage.put(path, b"")
    else:
        storage.delete(path)


@pytest.mark.parametrize(("store_uri", "kind", "damage"), DAMAGE_CASES, indirect=["store_uri"])
def test_a_damaged_file_is_harmless_or_named_on_each_store(
        template: Template, store_env: Any, kind: str, damage: str,  # noqa: F811 - the fixture
        caplog: pytest.LogCaptureFixture) -> None:
    uri = StoreRoot(store_env) / "table"
    storage = _upload(template, uri)
    path = KINDS[kind](template)
    _damage(storage, path, damage)
    _check(template, uri, path, kind, damage, caplog, advisory=(kind, damage) in ADVISORY)  # type: ignore[arg-type]


@pytest.mark.parametrize(("store_uri", "folder", "name"), NAME_CASES, indirect=["store_uri"])
def test_a_badly_named_timeline_file_is_harmless_or_named_on_each_store(
        template: Template, store_env: Any, folder: str, name: str,  # noqa: F811 - the fixture
        caplog: pytest.LogCaptureFixture) -> None:
    uri = StoreRoot(store_env) / "table"
    storage = _upload(template, uri)
    path = f"{folder}/{BAD_NAMES[name]}"
    storage.put(path, b'{"kind": "instant"}')
    _check(template, uri, path, f"{folder}/{name}", "named", caplog, advisory=name == "stray")  # type: ignore[arg-type]
