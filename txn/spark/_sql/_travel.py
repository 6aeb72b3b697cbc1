"""Time travel in ``txn.spark.sql``: ``FROM t VERSION AS OF <instant>`` and ``FROM t TIMESTAMP
AS OF '<timestamp>'`` (Spark's synonyms ``FOR SYSTEM_VERSION`` / ``FOR SYSTEM_TIME AS OF`` are
not read: sqlglot cannot parse them, and the statement reaches Spark, which refuses it).

Spark 4 parses the clause but refuses it for a Python data source's table
(``UNSUPPORTED_FEATURE.TIME_TRAVEL``), so plain ``spark.sql`` cannot travel; ``txn.spark.sql``
reads the table through a view of the snapshot the clause names (:mod:`._select`), wherever the
table appears (joins, subqueries, CTEs).

``VERSION AS OF`` names an instant (17 digits, as ``DESCRIBE HISTORY`` lists them) that
completed on the table, else :class:`txn.InvalidOptionError` naming the oldest and newest.
``TIMESTAMP AS OF`` takes a literal date or timestamp, read in the session's time zone unless it
carries an offset, as Spark reads timestamp literals; the snapshot is what had completed by then
(``Table.snapshot``, whose errors pass through unchanged). Nothing is written either way.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlglot import exp

from ... import InvalidOptionError, Table
from ._frames import session_zone

#: The clause after a table's name, as Spark writes it (sqlglot does not say where it ends).
CLAUSE = re.compile(
    r"\s+(?:VERSION|TIMESTAMP)\s+AS\s+OF\s+"
    r"(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[0-9]+)", re.IGNORECASE)


def travel_of(table: exp.Table, text: str) -> tuple[str, str] | None:
    """``("VERSION" | "TIMESTAMP", value)`` of a table reference's AS OF clause; None without one."""
    version = table.args.get("version")
    if version is None:
        return None
    kind = "VERSION" if str(version.this).upper() == "VERSION" else "TIMESTAMP"
    value = version.args.get("expression")
    if not isinstance(value, exp.Literal):
        raise InvalidOptionError(f"{kind} AS OF takes a literal (an instant, or a date or timestamp in "
                                 f"quotes), in: {text!r}")
    return kind, str(value.this)


def as_of(spark: Any, table: Table, travel: tuple[str, str]) -> str | datetime:
    """What ``Table.snapshot`` takes for the clause."""
    kind, value = travel
    if kind == "TIMESTAMP":
        iso = value.strip()
        # Python 3.10's fromisoformat (the oldest we support) refuses the ``Z`` suffix.
        iso = iso[:-1] + "+00:00" if iso[-1:] in ("Z", "z") else iso
        try:
            moment = datetime.fromisoformat(iso)
        except ValueError:
            return value  # Table.snapshot names the forms it takes
        return moment if moment.tzinfo is not None else moment.replace(tzinfo=session_zone(spark))
    completed = [i.time for i in table.timeline() if i.is_completed]
    if value not in completed:
        known = f"from {min(completed)} to {max(completed)}" if completed else "none yet"
        raise InvalidOptionError(f"VERSION AS OF {value} names no completed instant of the table at "
                                 f"{table.uri!r} (its instants: {known}; DESCRIBE HISTORY lists them)")
    return value
