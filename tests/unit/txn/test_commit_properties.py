"""``txn.CommitProperties``: the commit options every write takes, checked when built."""

from __future__ import annotations

import pytest

import txn
from txn._results import commit_properties


def test_defaults_record_nothing() -> None:
    options = txn.CommitProperties()
    assert options.extra == {} and options.app_id is None and not options.idempotent


@pytest.mark.parametrize("bad", [
    {"extra": {"a": 1}},
    {"extra": {1: "a"}},
    {"extra": None},
    {"extra": ["a"]},
    {"app_id": "loader"},
    {"version": 3},
    {"app_id": "", "version": 3},
    {"app_id": "loader", "version": True},
    {"app_id": "loader", "version": -1},
    {"app_id": "loader", "version": 2**63},
])
def test_bad_options_are_refused_when_built(bad: dict[str, object]) -> None:
    with pytest.raises(txn.InvalidOptionError):
        txn.CommitProperties(**bad)  # type: ignore[arg-type]


def test_keywords_or_properties_never_both() -> None:
    given = txn.CommitProperties(extra={"job": "7"})
    assert commit_properties(given) is given
    assert commit_properties(None, extra={"job": "7"}) == given
    assert commit_properties(None, app_id="a", version=1) == txn.CommitProperties(app_id="a", version=1)
    with pytest.raises(txn.InvalidOptionError, match="not both"):
        commit_properties(given, extra={"job": "8"})
    with pytest.raises(txn.InvalidOptionError, match="CommitProperties"):
        commit_properties({"extra": {}})  # type: ignore[arg-type]


def test_engines_resolve_both_forms_through_the_public_type() -> None:
    """``CommitProperties.of``: the resolution ``Table``'s writes use, for engines (txn.spark.write)."""
    given = txn.CommitProperties(app_id="a", version=1)
    assert txn.CommitProperties.of(given) is given
    assert txn.CommitProperties.of(None, extra={"job": "7"}) == txn.CommitProperties(extra={"job": "7"})
    assert txn.CommitProperties.of() == txn.CommitProperties()
    with pytest.raises(txn.InvalidOptionError, match="not both"):
        txn.CommitProperties.of(given, version=2)
    with pytest.raises(txn.InvalidOptionError, match="extra"):
        txn.CommitProperties.of(None, extra=["not", "a", "mapping"])
