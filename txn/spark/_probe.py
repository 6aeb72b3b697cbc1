"""What a Spark Python worker reports about itself. Shipped by value (see ``_workers``): this
module must import nothing of metatxn at the top, since the worker may not have it."""

from __future__ import annotations


def report(_: object) -> tuple[str, str, str]:
    """(interpreter, Python version, why metatxn cannot run here or "")."""
    import sys

    try:
        import pyarrow  # noqa: F401

        import txn.spark  # noqa: F401
    except Exception as exc:
        problem = f"{type(exc).__name__}: {exc}"
    else:
        problem = ""
    return sys.executable, sys.version.split()[0], problem
