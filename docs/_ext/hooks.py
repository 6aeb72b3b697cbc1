"""mkdocs hooks that take pages' text from the sources, so it cannot drift: ``<!-- metatxn help -->``
becomes the ``--help`` of ``metatxn`` and of each of its commands, from the parser itself, and
``<!-- changelog -->`` the repository's CHANGELOG.md."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

MARKER = "<!-- metatxn help -->"
CHANGELOG = "<!-- changelog -->"
ROOT = Path(__file__).resolve().parents[2]


def _help(parser: argparse.ArgumentParser) -> str:
    return parser.format_help().rstrip()


def cli_reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: the same page everywhere
    from txn._cli._main import build_parser

    parser = build_parser()
    parts = ["## metatxn", "", "```text", _help(parser), "```"]
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        parts += ["", f"## metatxn {name}", "", "```text", _help(command), "```"]
    return "\n".join(parts)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, cli_reference())
    if CHANGELOG in markdown:
        markdown = markdown.replace(CHANGELOG, (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"))
    return markdown
