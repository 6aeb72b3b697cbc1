"""The user guide's Python code runs as written: every ```python block of a page in docs/, in
order, in one namespace per page, inside a fresh working folder. A block of ``>>>`` lines is a
doctest (its printed results are checked); any other block is run as a script; the ```sh
blocks of the pages in ``SHELL_PAGES`` are ``metatxn`` commands, run by the CLI's ``main``. A block right
after ``<!-- not run: why -->`` is skipped (it needs a cloud account); the pages listed in
``SPARK_PAGES`` start a Spark session, about 30 s, so they run under the ``long`` marker.

Tables, properties and commands the guide lists are also checked against the code, so a new
property or command without a line in the guide fails here.
"""

from __future__ import annotations

import argparse
import contextlib
import doctest
import io
import re
import shlex
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[3] / "docs"
SPARK_PAGES = {"spark.md", "sql.md"}
#: Pages whose ```sh blocks run too (elsewhere they show installs and the like).
SHELL_PAGES = {"cli.md"}
_BLOCK = re.compile(r"^(?P<mark><!-- not run: [^>]*-->\n)?```(?P<lang>python|sh)\n(?P<code>.*?)^```$",
                    re.MULTILINE | re.DOTALL)


def _pages() -> list[str]:
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))


def blocks(page: str) -> list[tuple[str, int, str]]:
    """The page's runnable ```python and ```sh blocks: language, the line it starts on, code."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return [(m.group("lang"), text.count("\n", 0, m.start("code")) + 1, m.group("code"))
            for m in _BLOCK.finditer(text) if m.group("mark") is None]


def run_shell(code: str, where: str) -> None:
    """A shell block of ``metatxn`` commands, one a line, each run by the CLI's ``main`` in this
    process (a subprocess per command would cost a second of imports each)."""
    from txn._cli import main

    for number, line in enumerate(code.splitlines()):
        words = shlex.split(line, comments=True)
        if not words:
            continue
        assert words[0] == "metatxn", f"{where}: only metatxn commands run here, not {line!r}"
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(words[1:])
        assert status == 0, f"{where}+{number}: {line!r} exited {status}\n{out.getvalue()}{err.getvalue()}"


def run_page(page: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(folder)
    namespace: dict[str, object] = {"__name__": "__guide__"}
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for lang, line, code in blocks(page):
        if lang == "sh":
            if page in SHELL_PAGES:
                run_shell(code, f"{page}:{line}")
        elif code.lstrip().startswith(">>>"):
            test = parser.get_doctest(code, namespace, f"{page}:{line}", page, line)
            failures_before = runner.failures
            runner.run(test, clear_globs=False)
            namespace = test.globs  # the doctest ran in a copy of the namespace
            assert runner.failures == failures_before, f"{page}, the block at line {line} (output above)"
        else:
            exec(compile(code, f"{page}:{line}", "exec"), namespace)


@pytest.mark.parametrize("page", [p for p in _pages() if p not in SPARK_PAGES])
def test_page_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_page(page, tmp_path, monkeypatch)


@pytest.mark.long
@pytest.mark.spark
@pytest.mark.parametrize("page", sorted(SPARK_PAGES))
def test_spark_page_runs(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_page(page, tmp_path, monkeypatch)


def _first_cells(page: str) -> set[str]:
    """The first cell of every table row of ``page`` (its backticked name)."""
    text = (DOCS / page).read_text(encoding="utf-8")
    return {m.group(1) for m in re.finditer(r"^\| `([^`]+)` \|", text, re.MULTILINE)}


def test_every_property_is_in_the_guide() -> None:
    from txn._context._options import KNOWN_PROPERTIES

    assert _first_cells("properties.md") == set(KNOWN_PROPERTIES)


def test_every_command_is_in_the_guide() -> None:
    from txn._cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {cell.split()[0] for cell in _first_cells("cli.md")} == set(commands.choices)
