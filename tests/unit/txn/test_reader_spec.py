"""design/reader-spec.md, followed literally: a reader that resolves a snapshot from the table's
folder with nothing but listings, JSON and pyarrow (section 2), then reads the rows by column id
and drops the deleted positions (sections 4 and 5), finds what ``file_table()``, ``deletes()``
and ``to_arrow()`` find. If the spec and the code part, this fails."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import txn

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.int32())])
_COMPLETED = re.compile(r"^(\d{17})_(\d{17})\.(\w+)$")
_BASE = re.compile(r"^(\d{17})_(\d{17})\.base\.arrow$")
_LOG = re.compile(r"^(\d{17})\.log\.arrow$")


def _completed(folder: Path) -> dict[str, str]:
    """Section 2.2: the completed instants of a timeline folder, time -> completion time."""
    return {m[1]: m[2] for m in map(_COMPLETED.match, os.listdir(folder)) if m}


def _partition(root: Path, name: str, bound: str) -> pa.Table | None:
    """Section 2.3, steps 1 to 3: the newest usable base at or below the bound, and the blocks of
    data instants completed after its horizon and at or before the bound, in completion order."""
    data = _completed(root / "_timeline")
    compactions = _completed(root / "_metadata" / "_timeline")
    folder = root / "_metadata" / name
    names = os.listdir(folder) if folder.exists() else []
    bases = [(m[2], m[0]) for m in map(_BASE.match, names)
             if m and m[1] in compactions and m[2] <= bound]
    horizon, base = max(bases, default=("", None))
    blocks = sorted((data[m[1]], m[0]) for m in map(_LOG.match, names)
                    if m and m[1] in data and horizon < data[m[1]] <= bound)
    parts = [pa.ipc.open_file(pa.BufferReader((folder / f).read_bytes())).read_all()
             for f in ([base] if base else []) + [f for _, f in blocks]]
    return pa.concat_tables(parts, promote_options="permissive") if parts else None


def _live(records: pa.Table | None) -> dict[str, dict[str, Any]]:
    """Section 2.3, the two-phase set: purged (any null ``deleted``) and removed (any true) keys
    go; a live key keeps its adding record."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for row in (records.to_pylist() if records is not None else []):
        by_key.setdefault(row["path"], []).append(row)
    return {key: next(r for r in rows if r["deleted"] is False) for key, rows in by_key.items()
            if all(r["deleted"] is False for r in rows)}


def _with_ids(schema: pa.Schema) -> pa.Schema:
    """Version 0's ids (section 2.1) for a flat schema: 1, 2, ... in field order."""
    return pa.schema([f.with_metadata({b"PARQUET:field_id": str(i).encode()})
                      for i, f in enumerate(schema, start=1)])


def resolve(root: Path) -> tuple[dict[str, dict[str, Any]], dict[str, list[int]], pa.Schema,
                                 dict[int, pa.Schema]]:
    """Sections 2.1 to 2.4: live files, deleted positions per file key, the snapshot's schema
    and every version's schema, at the latest bound."""
    config = json.loads((root / "_timeline" / "table.json").read_bytes())
    assert config["format_version"] in (1, 2)  # format 2 changes nothing read here (section 2.1)
    bound = max(_completed(root / "_timeline").values())
    files = _live(_partition(root, "files", bound))
    deleted: dict[str, list[int]] = {}
    for key, delta in sorted(_live(_partition(root, "deletes", bound)).items()):
        if delta["file"] in files:
            deleted.setdefault(delta["file"], []).extend(
                pq.read_table(root / key)["position"].to_pylist())
    versions = {0: _with_ids(pa.ipc.read_schema(pa.py_buffer(base64.b64decode(config["arrow_schema"]))))}
    for row in (_partition(root, "schemas", bound) or pa.table({"record": []})).to_pylist():
        record = json.loads(row["record"])
        versions[record["version"]] = pa.ipc.read_schema(
            pa.py_buffer(base64.b64decode(record["arrow_schema"])))
    return files, {k: sorted(v) for k, v in deleted.items()}, versions[max(versions)], versions


def _by_id(table: pa.Table, written: pa.Schema, schema: pa.Schema) -> pa.Table:
    """Section 5: the snapshot's columns from a file of another version, by id."""
    names = {f.metadata[b"PARQUET:field_id"]: f.name for f in written}
    columns = [table[names[f.metadata[b"PARQUET:field_id"]]].cast(f.type)
               if f.metadata[b"PARQUET:field_id"] in names else pa.nulls(table.num_rows, f.type)
               for f in schema]
    return pa.table(columns, schema=schema)


def read(root: Path) -> pa.Table:
    """Sections 4 and 5: every live file's rows less its deleted positions, by column id."""
    files, deleted, schema, versions = resolve(root)
    parts = []
    for key, record in files.items():
        rows = pq.read_table(root / key)
        keep = [True] * rows.num_rows
        for position in deleted.get(key, []):
            keep[position] = False
        version = versions[record["schema_id"] or 0]
        parts.append(_by_id(rows.filter(pa.array(keep)), version, schema))
    return pa.concat_tables(parts)


def _table(tmp_path: Path) -> tuple[txn.Table, Path]:
    root = tmp_path / "t"
    t = txn.create_table(str(root), SCHEMA, record_key="id",
                         properties={"metadata.compact_after": "3"})
    for start in range(0, 40, 10):
        t.append(pa.table({"id": range(start, start + 10), "name": [f"n{i}" for i in range(10)],
                           "amount": pa.array(range(10), pa.int32())}, schema=SCHEMA))
    t.delete(keys=[1, 12, 23])
    t.delete(pc.field("id") == 2)          # a second delta on one file: replaced in the commit
    t.rename_column("name", "label")
    t.alter_column("amount", pa.int64())   # a widening: older files are read by id and cast
    t.add_columns([pa.field("note", pa.string())])
    t.append(pa.table({"id": [50, 51], "label": ["x", "y"], "amount": [7, 8], "note": ["a", None]}))
    t.delete(keys=[50, 33])
    t.maintain()
    return t, root


def test_the_folder_resolves_to_the_public_surface(tmp_path: Path) -> None:
    t, root = _table(tmp_path)
    assert any(_BASE.match(f) for f in os.listdir(root / "_metadata" / "files")), \
        "the table should have a metadata base: the spec's base rule is exercised"
    files, deleted, schema, _ = resolve(root)
    snap = t.snapshot()
    table = snap.file_table(stats=False)
    assert sorted(files) == sorted(table["path"].to_pylist())
    for row in table.to_pylist():
        assert files[row["path"]]["rows"] == row["rows"]
        assert (files[row["path"]]["schema_id"] or 0) == row["schema_id"]
        assert len(deleted.get(row["path"], [])) == row["deleted_rows"]
    public = snap.deletes()
    assert [(k, p) for k, positions in deleted.items() for p in positions] == \
        sorted(zip(public["path"].to_pylist(), public["position"].to_pylist(), strict=True))
    assert schema == snap.schema


def test_the_rows_read_by_the_spec_are_the_snapshot(tmp_path: Path) -> None:
    t, root = _table(tmp_path)
    mine = read(root).sort_by("id")
    assert mine.equals(t.to_arrow().sort_by("id"))
    assert mine.num_rows == 36


def test_blocks_and_bases_of_uncompleted_instants_are_skipped(tmp_path: Path) -> None:
    """A block whose data instant never completed, and a base whose compaction never completed,
    both on storage, change nothing (section 2.3, steps 1 and 3)."""
    t, root = _table(tmp_path)
    before = read(root).sort_by("id")
    files = root / "_metadata" / "files"
    deletes = root / "_metadata" / "deletes"
    block = sorted(f for f in os.listdir(deletes) if _LOG.match(f))[-1]
    base = sorted(f for f in os.listdir(files) if _BASE.match(f))[-1]
    horizon = _BASE.match(base)[2]  # type: ignore[index]
    shutil.copy(deletes / block, deletes / "29991231235959999.log.arrow")
    tombstones = pa.table({"path": list(_live(_partition(root, "files", "9" * 17))),
                           "deleted": [True] * len(_live(_partition(root, "files", "9" * 17)))})
    with pa.ipc.new_file(files / f"29991231235959998_{horizon}.base.arrow", tombstones.schema) as w:
        w.write_table(tombstones)
    assert read(root).sort_by("id").equals(before)
    assert t.to_arrow().sort_by("id").equals(before)
