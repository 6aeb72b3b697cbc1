"""What a schema change costs readers: a table's full and filtered reads before and right after
``add_columns`` (every file then of the older version, read by column id), against deltalake
doing the same (``dt.alter.add_columns``) in the same run, and DuckDB reading the same Parquet
files directly as the floor.

    .venv/bin/python -m bench.bench_schema_versions [--files 20] [--rows 100000]

Prints each system's median time (of 5) before and after, and the ratio after/before: metatxn's
should stay near 1 (design/schema-evolution.md, section 2).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import txn

SCHEMA = pa.schema([("id", pa.int64()), ("amount", pa.float64()), ("tag", pa.string())])


def _batch(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows)
    return pa.table({"id": ids, "amount": ids * 0.5,
                     "tag": pa.array([f"t{i % 100}" for i in range(rows)])}, schema=SCHEMA)


def _median_ms(work: Callable[[], object], repeat: int = 5) -> float:
    work()  # warm the page cache and imports
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def _metatxn(root: Path, files: int, rows: int) -> tuple[float, float, float, float]:
    t = txn.create_table(str(root / "metatxn"), SCHEMA)
    for i in range(files):
        t.append(_batch(i * rows, rows))
    where = pc.field("amount") > rows * files * 0.4
    before = _median_ms(lambda: t.to_arrow()), _median_ms(lambda: t.to_arrow(filter=where))
    t.add_columns([pa.field("note", pa.string())])
    after = _median_ms(lambda: t.to_arrow()), _median_ms(lambda: t.to_arrow(filter=where))
    return (*before, *after)


def _deltalake(root: Path, files: int, rows: int) -> tuple[float, float, float, float] | None:
    try:
        import deltalake
    except ImportError:
        return None
    uri = str(root / "delta")
    for i in range(files):
        deltalake.write_deltalake(uri, _batch(i * rows, rows), mode="append")
    dt = deltalake.DeltaTable(uri)
    where = pc.field("amount") > rows * files * 0.4

    def full() -> object:
        return deltalake.DeltaTable(uri).to_pyarrow_table()

    def filtered() -> object:
        return deltalake.DeltaTable(uri).to_pyarrow_dataset().to_table(filter=where)

    before = _median_ms(full), _median_ms(filtered)
    dt.alter.add_columns([deltalake.Field("note", "string", nullable=True)])
    after = _median_ms(full), _median_ms(filtered)
    return (*before, *after)


def _duckdb(root: Path) -> float | None:
    try:
        import duckdb
    except ImportError:
        return None
    pattern = str(root / "metatxn" / "**" / "*.parquet")
    return _median_ms(lambda: duckdb.sql(f"SELECT * FROM read_parquet('{pattern}')").arrow())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        results = {"metatxn": _metatxn(root, args.files, args.rows),
                   "deltalake": _deltalake(root, args.files, args.rows)}
        floor = _duckdb(root)
        print(f"{args.files} files x {args.rows:,} rows; median of 5, ms")
        print(f"{'system':<10} {'full':>8} {'after':>8} {'ratio':>6} {'filter':>8} {'after':>8} {'ratio':>6}")
        for name, found in results.items():
            if found is None:
                print(f"{name:<10} skipped (pip install -r bench/requirements.txt)")
                continue
            full, filtered, full_after, filtered_after = found
            print(f"{name:<10} {full:8.1f} {full_after:8.1f} {full_after / full:6.2f} "
                  f"{filtered:8.1f} {filtered_after:8.1f} {filtered_after / filtered:6.2f}")
        if floor is not None:
            print(f"{'duckdb':<10} {floor:8.1f}   (the same Parquet files read directly: the floor)")


if __name__ == "__main__":
    main()
