"""What every table command shares: its URI argument, the table's storage options, ``--json``,
and the parsing of option values whose mistakes are the user's (reported as
:class:`txn.InvalidOptionError`, exit 1, like the library's own checks, rather than as argparse's
usage errors)."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeAlias

from txn import InvalidOptionError, Table, open_table

Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
#: A command: parsed arguments in, exit status out.
Run: TypeAlias = Callable[[argparse.Namespace], int]

URI_HELP = "the table: a local path, or a file://, s3://, gs:// or az:// (abfss://) URL"
#: The table's storage options from the environment, as one JSON object: nested values (s3fs's
#: ``client_kwargs``) fit in it, which one variable per key could not carry.
STORAGE_OPTIONS_ENV = "METATXN_STORAGE_OPTIONS"
_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


def add_command(commands: Commands, name: str, run: Run, summary: str, *,
                description: str | None = None,
                json_help: str = "print JSON instead of a table",
                table_option: str = "--storage-option") -> argparse.ArgumentParser:
    """Add command ``name`` taking the table's URI first, its storage options, and ``--json``.

    ``summary`` is its line in ``metatxn --help`` (keep it within 50 characters: one line at 80
    columns); ``description`` heads its own ``--help`` (default: the summary). ``table_option``
    names the flag of the table's storage options, for a command whose ``--storage-option``
    already means something else (add-segment's source folder).
    """
    parser = commands.add_parser(name, help=summary,
                                 description=description or summary[:1].upper() + summary[1:] + ".")
    parser.add_argument("uri", metavar="URI", help=URI_HELP)
    parser.add_argument(table_option, action="append", default=[], metavar="KEY=VALUE",
                        dest="table_storage_option",
                        help="a storage option of the table, as txn.open_table(uri, storage_options) "
                             "takes them (repeatable; a VALUE that is JSON, such as true, 5 or "
                             "{...}, is decoded); each KEY replaces the same key of "
                             f"${STORAGE_OPTIONS_ENV}, a JSON object of the table's options")
    parser.add_argument("--json", action="store_true", help=json_help)
    parser.set_defaults(run=run, table_option=table_option)
    return parser


def open_uri(args: argparse.Namespace) -> Table:
    """The table at the command's URI, opened with its storage options (flags over environment)."""
    return open_table(args.uri, table_storage_options(args.table_storage_option, args.table_option,
                                                      os.environ.get(STORAGE_OPTIONS_ENV)))


def table_storage_options(pairs: Sequence[str], option: str,
                          environment: str | None) -> dict[str, Any] | None:
    """The table's storage options: ``environment`` (the JSON object of
    ``$METATXN_STORAGE_OPTIONS``; unset or blank: none), then each ``KEY=VALUE`` of ``pairs``
    replacing the key it names, as a command line overrides the environment elsewhere."""
    base: dict[str, Any] = {}
    if environment is not None and environment.strip():
        try:
            decoded = json.loads(environment)
        except ValueError as error:
            raise InvalidOptionError(
                f"${STORAGE_OPTIONS_ENV} is not JSON ({error}); expected a JSON object of option "
                'name -> value, such as {"key": "...", "client_kwargs": {"endpoint_url": '
                '"http://127.0.0.1:9000"}}') from None
        if not isinstance(decoded, dict):
            kind = _JSON_KINDS.get(type(decoded), type(decoded).__name__)
            raise InvalidOptionError(
                f"${STORAGE_OPTIONS_ENV} holds a JSON {kind}, not an object; "
                'expected a JSON object of option name -> value, such as {"anon": true}')
        base = decoded
    options = {**base, **(storage_options(pairs, option) or {})}
    return options or None


def segment_ids(values: Sequence[str], option: str) -> list[str]:
    """Segment ids given as separate words or comma-separated (``1,2 0.1``), in order."""
    ids = []
    for value in values:
        parts = [part.strip() for part in value.split(",")]
        if not all(parts):
            raise InvalidOptionError(
                f"{option}: {value!r} holds an empty segment id; expected ids separated by commas or "
                "spaces, such as 1,2 or 0.1 3")
        ids.extend(parts)
    return ids


def moment(text: str, option: str) -> datetime:
    """An ISO-8601 date or date-time (``2026-01-31``, ``2026-01-31 12:00``, ``...T12:00:00Z``).

    Without a UTC offset it is local time: the time zone SHOW SEGMENTS shows its times in, so a
    Load Start Time copied from its output means what it says.
    """
    try:
        parsed = datetime.fromisoformat(text.strip())
        # Local time near year 1 or 9999 has no UTC equivalent: OverflowError, or ValueError.
        return parsed if parsed.tzinfo is not None else parsed.astimezone()
    except (ValueError, OverflowError):
        raise InvalidOptionError(
            f"{option}: {text!r} is not a date-time this machine can represent; expected "
            "ISO-8601 such as 2026-01-31, '2026-01-31 17:59:40' (local time) or "
            "2026-01-31T17:59:40+00:00, between the years 1 and 9999") from None


def storage_options(pairs: Sequence[str], option: str) -> dict[str, Any] | None:
    """``KEY=VALUE`` pairs as fsspec storage options; a VALUE that is JSON (``true``, ``5``,
    ``{"a": 1}``) is passed decoded, any other as the string it is."""
    if not pairs:
        return None
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidOptionError(f"{option}: {pair!r} is not KEY=VALUE; expected for example "
                                     "anon=true or endpoint_url=http://127.0.0.1:9000")
        try:
            options[key.strip()] = json.loads(value)
        except ValueError:
            options[key.strip()] = value
    return options
