"""The table's storage options on the command line: ``--storage-option KEY=VALUE`` (repeatable;
add-segment's is ``--table-storage-option``, its ``--storage-option`` being the source folder's)
and ``$METATXN_STORAGE_OPTIONS`` (a JSON object), the flags replacing the environment's keys.

Most cases run ``main`` in this process with ``open_table`` recorded, so that every command is
covered in milliseconds; a few run the installed executable against real storage (local disk,
the moto S3 server) to show the options really open the table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, rows
from tests.unit.txn.test_cli import assert_one_line_error, metatxn, ok
from txn import InvalidOptionError
from txn._cli import _shared, build_parser, main

ENV = "METATXN_STORAGE_OPTIONS"
#: Every command that opens a table, with the arguments it needs besides the URI.
COMMANDS: dict[str, tuple[str, ...]] = {
    "describe": (),
    "segments": (),
    "timeline": (),
    "changes": ("--since", "earliest"),
    "partitions": (),
    "streams": (),
    "validate": (),
    "compact": (),
    "clean": ("--dry-run",),
    "add-segment": ("/some/folder",),
    "delete-segment": ("0",),
    "drop-stream": ("a_stream",),
}


def table_flag(command: str) -> str:
    return "--table-storage-option" if command == "add-segment" else "--storage-option"


class Recorded(InvalidOptionError):
    """Raised by the recording ``open_table`` once it has seen its call: nothing further runs."""


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any] | None]]:
    """The ``(uri, storage_options)`` of each ``open_table`` call the command line makes."""
    calls: list[tuple[str, dict[str, Any] | None]] = []

    def record(uri: str, storage_options: dict[str, Any] | None = None) -> txn.Table:
        calls.append((uri, storage_options))
        raise Recorded("recorded")

    monkeypatch.setattr(_shared, "open_table", record)
    monkeypatch.delenv(ENV, raising=False)
    return calls


def _subparsers() -> dict[str, Any]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_command_that_opens_a_table_is_covered() -> None:
    table_commands = {name for name, parser in _subparsers().items()
                      if any(a.dest == "uri" for a in parser._actions)}
    assert table_commands == set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("flags", "environment", "expected"), [
    pytest.param((), None, None, id="none"),
    pytest.param(("fsync=true", 'client_kwargs={"endpoint_url": "http://h:9000"}', "key=k"), None,
                 {"fsync": True, "client_kwargs": {"endpoint_url": "http://h:9000"}, "key": "k"},
                 id="flags"),
    pytest.param((), '{"key": "env", "anon": false}', {"key": "env", "anon": False}, id="env"),
    pytest.param(("key=flag", "secret=s"), '{"key": "env", "anon": false}',
                 {"key": "flag", "anon": False, "secret": "s"}, id="flags-over-env"),
])
def test_the_tables_options_reach_open_table(
    opened: list[tuple[str, dict[str, Any] | None]], monkeypatch: pytest.MonkeyPatch,
    command: str, flags: tuple[str, ...], environment: str | None, expected: dict[str, Any] | None,
) -> None:
    if environment is not None:
        monkeypatch.setenv(ENV, environment)
    options = [word for flag in flags for word in (table_flag(command), flag)]
    assert main([command, "memory://t", *COMMANDS[command], *options]) == 1
    assert opened == [("memory://t", expected)]


def test_add_segments_storage_option_stays_the_source_folders(
    opened: list[tuple[str, dict[str, Any] | None]],
) -> None:
    assert main(["add-segment", "memory://t", "s3://b/folder", "--storage-option", "anon=true"]) == 1
    assert opened == [("memory://t", None)]


@pytest.mark.parametrize(("flag", "environment", "message"), [
    ("endpoint_url", None, "--storage-option: 'endpoint_url' is not KEY=VALUE; expected"),
    ("=1", None, "--storage-option: '=1' is not KEY=VALUE; expected"),
    (None, "{endpoint_url: x}", "$METATXN_STORAGE_OPTIONS is not JSON"),
    (None, '["anon", true]', "$METATXN_STORAGE_OPTIONS holds a JSON array, not an object; expected"),
])
def test_a_malformed_option_is_one_error_line_before_the_table_is_opened(
    opened: list[tuple[str, dict[str, Any] | None]], monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], flag: str | None, environment: str | None, message: str,
) -> None:
    if environment is not None:
        monkeypatch.setenv(ENV, environment)
    assert main(["segments", "memory://t", *(("--storage-option", flag) if flag else ())]) == 1
    assert opened == []
    error, advice = capsys.readouterr().err.splitlines()
    assert error.startswith("metatxn: error: ") and message in error, error
    assert advice.startswith("metatxn: help: ")


def test_a_blank_environment_variable_means_no_options(
    opened: list[tuple[str, dict[str, Any] | None]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, " ")
    assert main(["segments", "memory://t"]) == 1
    assert opened == [("memory://t", None)]


def test_the_executable_opens_a_local_table_with_them_and_storage_judges_them(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(range(3)))
    assert json.loads(ok("segments", t.uri, "--storage-option", "fsync=true", "--json"))[0]["rows"] == 3
    assert_one_line_error(metatxn("segments", t.uri, "--storage-option", "region=eu"),
                          "storage_options ['region'] given for")
    assert_one_line_error(metatxn("segments", t.uri, env={ENV: '{"region": "eu"}'}),
                          "storage_options ['region'] given for")


@pytest.mark.s3
def test_the_executable_reaches_an_s3_endpoint_by_flags_or_by_the_environment(s3_uri: Any) -> None:
    uri, options = s3_uri
    t = txn.create_table(uri, SCHEMA, storage_options=options)
    t.append(rows(range(4)))
    flags = [word for key, value in options.items()
             for word in ("--storage-option", f"{key}={json.dumps(value)}")]
    assert json.loads(ok("segments", uri, *flags, "--json"))[0]["rows"] == 4
    result = metatxn("segments", uri, "--json", env={ENV: json.dumps(options)})
    assert (result.returncode, result.stderr) == (0, ""), result
    assert json.loads(result.stdout)[0]["rows"] == 4
