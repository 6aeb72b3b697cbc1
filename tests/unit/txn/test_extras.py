"""The core install leaves Spark out: ``import txn`` never imports it, and ``import txn.spark`` and
``metatxn demo`` without it name the extra to install (``metatxn[spark]``).

Absence is simulated in a new interpreter by a finder ahead of every other that refuses the
modules, as an environment without them would (tests/integration/test_fresh_install.py proves
the same on a real core install).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from txn._cli import main

#: Makes the named top-level modules (sys.argv[1], comma-separated) impossible to import.
_BLOCK = r"""
import sys
blocked = set(sys.argv[1].split(","))

class Absent:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Absent)
"""


def _run(blocked: str, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCK + code, blocked], capture_output=True, text=True,
                          timeout=120)


def test_import_txn_imports_no_engine_and_no_command_line() -> None:
    """What ``import txn`` loads: none of Spark, its SQL parser, the optional readers, the object
    stores' clients or the command line's rich (the core declares none of them but rich)."""
    done = _run("pyspark,sqlglot", "import txn, json; print(json.dumps(sorted({m.split('.')[0] for m in "
                "sys.modules})))")
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert "txn" in loaded
    assert not loaded & {"pyspark", "py4j", "sqlglot", "rich", "duckdb", "polars", "s3fs", "obstore",
                         "botocore"}


@pytest.mark.parametrize("missing", ["pyspark", "sqlglot"])
def test_import_txn_spark_without_its_extra_names_the_extra(missing: str) -> None:
    done = _run(missing, "import json\ntry:\n    import txn.spark\nexcept ImportError as e:\n"
                         "    print(json.dumps([type(e).__name__, e.name, str(e)]))\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        "ModuleNotFoundError", missing,
        f"txn.spark needs {missing}, which is not installed (metatxn's core leaves Spark out)\n"
        "Help: install the extra: pip install 'metatxn[spark]'"]


def test_metatxn_demo_without_spark_is_an_error_line_and_a_help_line(tmp_path: Path) -> None:
    done = _run("pyspark", "from txn._cli import main\n"
                           f"sys.exit(main(['demo', '--warehouse', {str(tmp_path)!r}]))")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        "metatxn: error: txn.spark needs pyspark, which is not installed (metatxn's core leaves Spark out)",
        "metatxn: help: install the extra: pip install 'metatxn[spark]'"]
    assert done.stdout == ""


def test_another_missing_module_in_the_command_line_is_not_disguised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the message of an optional part becomes the two lines; a module missing for another
    reason (a broken install) keeps its traceback."""
    monkeypatch.setitem(sys.modules, "txn._cli._demo", None)
    with pytest.raises(ModuleNotFoundError, match=r"txn\._cli\._demo"):
        main(["demo"])
