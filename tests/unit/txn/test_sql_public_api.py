"""The SQL modules that run on the public API import nothing private of ``txn`` and reach storage
only through the table (no fsspec, ``os`` or ``shutil``); ``_dml.py`` and ``_positions.py`` joined
them with UPDATE and DELETE on the two-phase write (design/sql.md, "What the SQL layer stands on")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SQL = Path(__file__).resolve().parents[3] / "txn" / "spark" / "_sql"
ON_PUBLIC_API = ("_alter", "_alter_syntax", "_catalog", "_ddl", "_dml", "_insert", "_load", "_positions",
                 "_segments", "_streams")
NO_STORAGE_BUT_THE_TABLE = ("fsspec", "os", "shutil", "pathlib")


def _imports(module: str) -> list[tuple[int, str]]:
    """(relative level, module) of every import, at any depth of the module."""
    tree = ast.parse((SQL / f"{module}.py").read_text())
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or ""))
        elif isinstance(node, ast.Import):
            found += [(0, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize("module", ON_PUBLIC_API)
def test_a_sql_module_imports_only_txn_s_facade(module: str) -> None:
    private = [f"{'.' * level}{name}" for level, name in _imports(module)
               if (level == 3 and name) or (level == 0 and name.startswith("txn._"))]
    assert private == [], f"txn/spark/_sql/{module}.py imports private rooms of txn: {private}"


@pytest.mark.parametrize("module", sorted(p.stem for p in SQL.glob("*.py")))
def test_no_sql_module_touches_storage_but_through_the_table(module: str) -> None:
    direct = [name for level, name in _imports(module)
              if level == 0 and name.split(".")[0] in NO_STORAGE_BUT_THE_TABLE]
    assert direct == [], f"txn/spark/_sql/{module}.py imports {direct}"
