"""The rooms of ``txn`` import only the rooms below them, and the engines on top (Spark and its
SQL layer) only the public facade (design/architecture.md, "Rooms").

Every import is read: ``import a.b``, ``from a import b`` and relative imports at every level,
including those inside functions, resolved to the absolute module they name; every module of
every room is checked, at any depth (``txn/_commit/_writes/``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import txn

PACKAGE = Path(txn.__file__).parent
#: metatxn.timeline and metatxn.indexes live in timeline/ and indexes/ (pyproject maps them).
FIRST_PARTY = ("txn", "metatxn")

#: Each room and the rooms it may import (``_table``: the private module behind the facade).
ALLOWED = {
    "_results": set(),
    "_schema": set(),
    "_files": {"_schema"},
    "_rows": set(),
    "_context": {"_files", "_results"},
    "_commit": {"_context", "_files", "_results", "_rows", "_schema"},
    "_read": {"_context", "_files", "_results", "_schema"},
    "_changes": {"_context", "_files", "_read", "_results", "_rows"},
    "_write": {"_commit", "_context", "_files", "_read", "_results", "_rows", "_schema"},
    "_segments": {"_commit", "_context", "_files", "_read", "_results", "_rows", "_write"},
    "_external": {"_commit", "_context", "_files", "_results", "_rows", "_write"},
    "_streams": {"_commit", "_context", "_results", "_rows", "_segments", "_write"},
    "_twophase": {"_commit", "_context", "_files", "_read", "_results", "_rows", "_segments", "_write"},
    # The command line drives tables like any user, and starts Spark through txn.spark.
    "_cli": {"_context", "_files", "_results", "_table", "spark"},
}

#: The engines built on the public API: they import the ``txn`` facade and their own modules.
ENGINES = ("spark",)



def module_name(path: Path) -> str:
    """``txn/spark/_sql/_ddl.py`` -> ``txn.spark._sql._ddl`` (a package: its own name)."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, *, package: bool = False) -> Iterator[str]:
    """Every module the source of ``module`` imports, absolute. ``from a import b`` yields ``a``
    and ``a.b`` (``b`` may be a name in ``a`` or a submodule of it); ``package``: the source is
    an ``__init__.py``, whose relative imports start at the package itself."""
    base = module.split(".") if package else module.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                assert node.level - 1 < len(base), f"{module}: import above the top package"
                parent = base[:len(base) - (node.level - 1)]
                target = ".".join(parent + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target
            yield from (f"{target}.{alias.name}" for alias in node.names)


def imports_of(path: Path) -> set[str]:
    return set(imported_modules(path.read_text(), module_name(path), package=path.name == "__init__.py"))


def is_module(name: str) -> bool:
    """Whether ``name`` is a first-party module or package (not a name defined in one)."""
    parts = name.split(".")
    if parts[0] not in FIRST_PARTY:
        return False
    if parts[0] == "metatxn":
        parts = parts[1:]
        if not parts:
            return True
    relative = PACKAGE.parent / Path(*parts)
    return relative.is_dir() or relative.with_suffix(".py").exists()


def room_of(name: str) -> str | None:
    """The room of ``txn`` a module belongs to (``txn._commit._writes._base`` -> ``_commit``), the
    private top-level module (``txn._table``), ``spark``; None for the facade or another package."""
    parts = name.split(".")
    return parts[1] if parts[0] == "txn" and len(parts) > 1 else None


def _rooms() -> list[Path]:
    return sorted(p for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def test_each_room_imports_only_the_rooms_below_it() -> None:
    assert {p.name for p in _rooms()} == set(ALLOWED) | set(ENGINES), "a new room needs its place in ALLOWED"
    for room in _rooms():
        if room.name in ENGINES:
            continue
        for path in sorted(room.rglob("*.py")):
            wrong = {room_of(m) for m in imports_of(path) if is_module(m)} - {room.name, None}
            wrong -= ALLOWED[room.name]
            assert not wrong, f"{path.relative_to(PACKAGE)} imports {sorted(wrong)}"


def test_engines_use_only_the_public_api() -> None:
    """Spark and SQL import the ``txn`` facade and their own modules, never a private room, the
    facade's private module or the timeline and metadata-table packages underneath."""
    for engine in ENGINES:
        own = f"txn.{engine}"
        for path in sorted((PACKAGE / engine).rglob("*.py")):
            name = str(path.relative_to(PACKAGE))
            wrong = sorted(m for m in imports_of(path) if is_module(m)
                           and m != "txn" and m != own and not m.startswith(own + "."))
            assert not wrong, f"{name} imports {wrong}"


def test_no_room_imports_the_public_table() -> None:
    for path in sorted(PACKAGE.glob("_*/**/*.py")):
        if path.relative_to(PACKAGE).parts[0] == "_cli":
            continue  # the command line drives tables like any user
        assert "txn._table" not in imports_of(path), f"{path.relative_to(PACKAGE)} imports the facade"


def test_the_reader_of_imports_sees_every_form() -> None:
    """A check that reads only some import forms passes unseen violations (the first one read only
    level-2 relative imports): each form, at each level and inside a function, is resolved."""
    source = ("import txn._commit\n"
              "import metatxn.timeline, metatxn.indexes._layout as layout\n"
              "from ..._table import Table\n"
              "from ... import _files\n"
              "from .. import _write as spark_write\n"
              "from ._parse import Cursor\n"
              "from txn._read import snapshot\n"
              "def f():\n"
              "    from ..._results import Commit\n"
              "    class C:\n"
              "        def g(self):\n"
              "            import txn._rows\n")
    found = set(imported_modules(source, "txn.spark._sql._probe"))
    assert {"txn._commit", "metatxn.timeline", "metatxn.indexes._layout",
            "txn._table", "txn._table.Table", "txn._files",
            "txn.spark._write", "txn.spark._sql._parse", "txn._read", "txn._rows", "txn._results"} <= found
    # An __init__.py's "." is its own package: one level less to climb.
    in_package = set(imported_modules("from .. import _write\n", "txn.spark._sql", package=True))
    assert "txn.spark._write" in in_package
    assert {room_of(m) for m in found if is_module(m)} >= {"_commit", "_table", "_files", "_read", "_rows"}
    # And the engine rule refuses what it reads: each private module found is outside the facade.
    private = sorted(m for m in found if is_module(m) and m != "txn" and not m.startswith("txn.spark"))
    assert private == ["metatxn.indexes._layout", "metatxn.timeline", "txn._commit", "txn._files",
                       "txn._read",
                       "txn._results", "txn._rows", "txn._table"]
