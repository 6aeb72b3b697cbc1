"""The ``metatxn`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from timeline import TxnError

from .._table import open_table
from ._render import render, render_timeline


def _timeline(args: argparse.Namespace) -> None:
    print(render_timeline(open_table(args.uri).timeline()))


def _describe(args: argparse.Namespace) -> None:
    table = open_table(args.uri)
    print(f"table     {table.uri}")
    print(f"id        {table.table_id} (created {table.created_at})")
    print(f"partition {table.partition_by or '-'}")
    print(f"key       {table.record_key or '-'}")
    print(f"sort      {table.sort_by or '-'}")
    print(f"props     {table.properties or '-'}")
    print()
    print(render(("column", "type", "nullable"),
                 ((f.name, f.type, f.nullable) for f in table.schema)))


def _demo(args: argparse.Namespace) -> None:
    from ._demo import run

    run(args.warehouse)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metatxn",
        description="Inspect and maintain metatxn tables (a timeline of instants over Parquet).",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    timeline = commands.add_parser("timeline", help="list every instant of a table")
    timeline.add_argument("uri", help="table location: a path, file://, memory:// or s3:// URL")
    timeline.set_defaults(run=_timeline)

    describe = commands.add_parser("describe", help="show a table's schema, layout and properties")
    describe.add_argument("uri", help="table location")
    describe.set_defaults(run=_describe)

    demo = commands.add_parser("demo", help="run the demonstration job on a local warehouse")
    demo.add_argument("--warehouse", default="warehouse", help="folder for the demo tables")
    demo.set_defaults(run=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.run(args)
    except TxnError as exc:
        print(f"metatxn: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
