"""The ``metatxn`` command: its parser, and how failures reach the user.

Exit status: 0 on success; 1 when the table refuses the request (a :class:`txn.TxnError`: no
table at the URI, an unknown segment, stream or compaction kind, a bad option value), printed as
one ``metatxn: error: ...`` line and one ``metatxn: help: ...`` line on stderr, never a
traceback; 1 as well, in the same two lines, when the command needs a part of metatxn that is
not installed (``demo`` without the ``[spark]`` extra), and from ``validate`` when it finds
problems; 2 for a command line argparse cannot parse (its usual usage message); 130 when
interrupted. Shell completion is not offered: argparse has none of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from txn import TxnError

from . import _inspect, _maintain

#: Where an error's message ends and its advice begins (``...\nHelp: retry later``).
_HELP = re.compile(r"\s*\bHelp:\s*")
#: What the message of an optional part's ImportError says (``txn.spark`` without pyspark).
_EXTRA = "pip install 'metatxn["


def _demo(args: argparse.Namespace) -> int:
    from ._demo import run

    run(args.warehouse)
    return 0


def _version() -> str:
    try:
        return version("metatxn")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metatxn",
        description="Inspect and maintain metatxn tables: CarbonData-style segments on a "
                    "Hudi-style timeline. Every command but demo takes the table's URI first.",
        epilog="Run 'metatxn COMMAND --help' for a command's options.",
    )
    parser.add_argument("--version", action="version", version=f"metatxn {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _inspect.register(commands)
    _maintain.register(commands)
    demo = commands.add_parser("demo", help="run the demonstration pipeline on local Spark",
                               description="Run the demonstration pipeline on local Spark: loads, "
                                           "compaction, upsert, delete, a change feed reader, ADD "
                                           "SEGMENT, time travel, "
                                           "CLEAN FILES and a streaming table.")
    demo.add_argument("--warehouse", default="warehouse",
                      help="folder for the demo's tables, recreated (default: %(default)s)")
    demo.set_defaults(run=_demo)
    return parser


def error_lines(error: TxnError | ModuleNotFoundError, command: str) -> tuple[str, str]:
    """The ``metatxn: error:`` and ``metatxn: help:`` lines for ``error``.

    The message's own lines are joined into one; the advice is the error's ``Help:`` part when
    it has one, else a pointer to the command's help.
    """
    message, *advice = _HELP.split(str(error), maxsplit=1)
    message = " ".join(message.split()) or type(error).__name__
    hint = " ".join(advice[0].split()) if advice else f"run 'metatxn {command} --help'"
    return f"metatxn: error: {message}", f"metatxn: help: {hint}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        status: int = args.run(args)
    except TxnError as error:
        sys.stdout.flush()
        print(*error_lines(error, args.command), sep="\n", file=sys.stderr)
        return 1
    except ModuleNotFoundError as error:
        # A part of metatxn that its core install leaves out (``demo`` runs on Spark): the
        # message names the extra to install. Any other missing module is a bug: a traceback.
        if _EXTRA not in str(error):
            raise
        sys.stdout.flush()
        print(*error_lines(error, args.command), sep="\n", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("metatxn: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout went away (``metatxn segments URI | head``): not an error of
        # ours. Point stdout at devnull so that the interpreter's final flush stays quiet
        # (https://docs.python.org/3/library/signal.html#note-on-sigpipe).
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return status


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
