"""The ``metatxn`` command line, its text tables, and the demo job behind ``make demo``."""

from ._main import build_parser, main

__all__ = ["build_parser", "main"]
