"""The order in which ``make test``'s two workers (``-n 2 --dist loadscope``) take the suite.

loadscope hands out whole scopes (a module, or a class of it), each to the worker that runs
low, in the order it got them. By default xdist orders them by their number of tests, which
puts single-test scopes last: the table state machines (a minute or more each) then start at
the very end, and the run ends with one worker busy and the other idle. Instead every scope
holding a ``slow`` test goes first, the longest work while both workers are busy, and the
rest follows by number of tests as before, so the run ends on small scopes; the worker whose
last scope ends first then waits seconds, not minutes. ``tests/conftest.py`` wires it in.
"""

from __future__ import annotations

import pytest


def keep_collection_order(config: pytest.Config) -> None:
    """On the controller: hand scopes out in the order the workers collected them."""
    if getattr(config.option, "dist", "no") == "loadscope" and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def slow_scopes_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker (whatever ``--dist``: a worker's own option says "no"): scopes holding a
    ``slow`` test first, then by number of tests (descending); the order of the tests inside a
    scope is left alone. A run without workers keeps the collection order."""
    if not hasattr(config, "workerinput"):
        return
    scopes: dict[str, list[pytest.Item]] = {}
    for item in items:
        # the same split as xdist's LoadScopeScheduling._split_scope
        scopes.setdefault(item.nodeid.rsplit("::", 1)[0], []).append(item)
    ordered = sorted(scopes.values(), key=lambda scope: (
        not any(item.get_closest_marker("slow") for item in scope), -len(scope)))
    items[:] = [item for scope in ordered for item in scope]
