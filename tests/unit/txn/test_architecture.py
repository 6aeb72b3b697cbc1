"""The rooms of ``txn`` import only rooms below them (design/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import txn

#: Each room and the rooms it may import. Order matters only for readability.
ALLOWED = {
    "_results": set(),
    "_files": set(),
    "_rows": set(),
    "_context": {"_files", "_results"},
    "_commit": {"_context", "_files", "_results", "_rows"},
    "_read": {"_context", "_files", "_results"},
    "_write": {"_commit", "_context", "_files", "_read", "_results", "_rows"},
    "_segments": {"_commit", "_context", "_files", "_read", "_results", "_rows", "_write"},
    "_external": {"_commit", "_context", "_files", "_results", "_rows", "_write"},
    "_streams": {"_commit", "_context", "_results", "_rows", "_segments", "_write"},
    "_twophase": {"_commit", "_context", "_files", "_read", "_results", "_rows", "_segments", "_write"},
    "_cli": {"_context", "_files", "_results", "_table", "spark"},
    "spark": {"_commit", "_context", "_files", "_read", "_results", "_rows", "_segments", "_streams",
              "_twophase",
              "_write"},
}


def _imported_rooms(path: Path) -> set[str]:
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 2 and node.module:
            rooms.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 2 and not node.module:

            rooms |= {alias.name for alias in node.names if alias.name not in txn.__all__}
    return rooms


def test_each_room_imports_only_the_rooms_below_it() -> None:
    package = Path(txn.__file__).parent
    rooms = sorted(p for p in package.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert {p.name for p in rooms} == set(ALLOWED), "a new room needs its place in ALLOWED"
    for room in rooms:
        for module in room.glob("*.py"):
            wrong = _imported_rooms(module) - ALLOWED[room.name]
            assert not wrong, f"{module.relative_to(package)} imports {sorted(wrong)}"


def test_no_room_imports_the_public_table() -> None:
    package = Path(txn.__file__).parent
    for module in package.glob("*/*.py"):
        if module.parent.name in ("_cli",):
            continue  # the command line drives tables like any user
        assert "_table" not in _imported_rooms(module), f"{module} imports the facade"


#: Spark's read paths, on the engines' public seam (issue 23): they import only ``txn``'s facade
#: and ``txn.spark``'s own modules. (``_source.py`` joins once its writer does.)
READ_SEAM = ("spark/_read.py", "spark/_external.py", "spark/_sql/_positions.py", "spark/_sql/_select.py")


def _imported_modules(path: Path, package: Path) -> set[str]:
    """Every module ``path`` imports from, relative imports resolved at every level."""
    parts = ["txn", *path.relative_to(package).parent.parts]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = parts[:len(parts) - node.level + 1] if node.level else []
            found.add(".".join([*base, *([node.module] if node.module else [])]))
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_spark_read_paths_import_only_the_public_facade() -> None:
    package = Path(txn.__file__).parent
    for name in READ_SEAM:
        private = {m for m in _imported_modules(package / name, package)
                   if m.startswith("txn.") and not m.startswith("txn.spark")}
        assert not private, f"{name} imports {sorted(private)}"
