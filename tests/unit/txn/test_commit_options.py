"""Commit options as one value on every write: ``commit_properties=txn.CommitProperties(...)``.

Each write records its ``extra``, skips a version its ``app_id`` committed already (returning
None and writing nothing), and refuses the value together with the older keywords.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, rows

Write = Callable[..., "txn.Commit | None"]


def _transaction(table: txn.Table, **options: Any) -> txn.Commit | None:
    with table.transaction(**options) as tx:
        tx.append(rows([40]))
    return tx.result


def _writes(folder: Path) -> dict[str, Write]:
    def add_segment(table: txn.Table, **options: Any) -> txn.Commit | None:
        if not folder.exists():
            folder.mkdir()
            pq.write_table(rows([50, 51]), folder / "part-0.parquet")
        return table.add_segment(folder, "parquet", **options)

    return {
        "append": lambda t, **o: t.append(rows([30]), **o),
        "overwrite": lambda t, **o: t.overwrite(rows([1, 2]), **o),
        "upsert": lambda t, **o: t.upsert(rows([3, 31]), **o),
        "delete": lambda t, **o: t.delete(keys=[1], **o),
        "update": lambda t, **o: t.update(pc.field("id") == 2, {"price": 9.0}, **o),
        "add_segment": add_segment,
        "transaction": _transaction,
    }


WRITES = ["append", "overwrite", "upsert", "delete", "update", "add_segment", "transaction"]


def _table(uri: str) -> txn.Table:
    table = txn.create_table(uri, SCHEMA, record_key="id")
    table.append(rows(range(5)))
    return table


def _content(table: txn.Table) -> list[Any]:
    return sorted(table.to_arrow().to_pylist(), key=lambda r: r["id"])


@pytest.mark.parametrize("write", WRITES)
def test_every_write_records_its_commit_properties(memory_uri: str, tmp_path: Path, write: str) -> None:
    table = _table(memory_uri)
    commit = _writes(tmp_path / "ext")[write](
        table, commit_properties=txn.CommitProperties(extra={"job": write}))
    assert commit is not None and commit.extra == {"job": write}


@pytest.mark.parametrize("write", WRITES)
def test_every_write_commits_an_app_version_once(memory_uri: str, tmp_path: Path, write: str) -> None:
    table = _table(memory_uri)
    run = _writes(tmp_path / "ext")[write]
    options = txn.CommitProperties(app_id="loader", version=7)
    assert run(table, commit_properties=options) is not None
    content, instants = _content(table), len(table.timeline())
    assert run(table, commit_properties=options) is None
    assert run(table, commit_properties=txn.CommitProperties(app_id="loader", version=6)) is None
    assert _content(table) == content and len(table.timeline()) == instants


@pytest.mark.parametrize("write", ["append", "overwrite", "upsert", "delete", "update"])
def test_the_keywords_and_the_value_are_the_same_options(memory_uri: str, tmp_path: Path,
                                                         write: str) -> None:
    table = _table(memory_uri)
    run = _writes(tmp_path / "ext")[write]
    commit = run(table, extra={"job": "k"}, app_id="loader", version=1)
    assert commit is not None and commit.extra == {"job": "k"}
    assert run(table, commit_properties=txn.CommitProperties(app_id="loader", version=1)) is None


@pytest.mark.parametrize("write", ["append", "overwrite", "upsert", "delete", "update"])
@pytest.mark.parametrize("loose", [{"extra": {"a": "b"}}, {"app_id": "x", "version": 1}])
def test_the_value_and_the_keywords_together_are_refused(memory_uri: str, tmp_path: Path, write: str,
                                                        loose: dict[str, Any]) -> None:
    table = _table(memory_uri)
    content, instants = _content(table), len(table.timeline())
    with pytest.raises(txn.InvalidOptionError, match="not both"):
        _writes(tmp_path / "ext")[write](table, commit_properties=txn.CommitProperties(), **loose)
    assert _content(table) == content and len(table.timeline()) == instants


@pytest.mark.parametrize("write", WRITES)
def test_a_commit_properties_that_is_not_one_is_refused(memory_uri: str, tmp_path: Path, write: str) -> None:
    table = _table(memory_uri)
    with pytest.raises(txn.InvalidOptionError, match="CommitProperties"):
        _writes(tmp_path / "ext")[write](table, commit_properties={"extra": {}})


def test_extra_values_must_be_strings(memory_uri: str) -> None:
    table = _table(memory_uri)
    with pytest.raises(txn.InvalidOptionError, match="string"):
        table.append(rows([30]), extra={"batch": 3})  # type: ignore[dict-item]
    assert len(table.timeline()) == 1
