"""Spike (issue 25 design): peak memory of a streamed scan vs ``to_arrow``, and DuckDB on a reader.

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python bench/spikes/stream_scan.py
Each measurement runs in a fresh process (peak RSS is per process). The streamed scan is a
prototype built on public names only (``Snapshot.files()``, ``FileReader.deleted_positions``):
files without deletes through one Arrow dataset scan in batches, files with deletes one row
group batch at a time with their positions masked. Figures are quoted in design/open-reads.md.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

ROWS, FILES = int(sys.argv[1]) if len(sys.argv) == 2 else 1_000_000, 10


def build(uri: str) -> None:
    import txn
    schema = pa.schema([("id", pa.int64())] + [(f"v{i}", pa.float64()) for i in range(6)]
                       + [("s", pa.string())])
    t = txn.create_table(uri, schema)
    per = ROWS // FILES
    for k in range(FILES):
        ids = np.arange(k * per, (k + 1) * per)
        cols = {"id": ids, **{f"v{i}": np.random.default_rng(i).random(per) for i in range(6)},
                "s": pa.array([f"row-{x:08d}" for x in ids])}
        t.append(pa.table(cols, schema=schema))
    t.delete(pc.field("id").isin(list(range(7, ROWS, 1000))))  # 0.1% of rows, every file


def stream(snap, batch_size: int = 65_536, readahead: dict | None = None):
    reader = snap.file_reader()
    files = snap.files()
    plain = [f.path for f in files if f.deleted_rows == 0]
    if plain:
        yield from ds.dataset(plain, schema=snap.schema).to_batches(batch_size=batch_size,
                                                                    **(readahead or {}))
    for f in files:
        if f.deleted_rows == 0:
            continue
        deleted = reader.deleted_positions(f)
        start = 0
        for batch in pq.ParquetFile(f.path).iter_batches(batch_size=batch_size):
            pos = np.arange(start, start + batch.num_rows)
            start += batch.num_rows
            keep = ~np.isin(pos, deleted, assume_unique=True)
            yield batch.filter(pa.array(keep))


def measure(uri: str, mode: str) -> None:
    import duckdb

    import txn
    snap = txn.open_table(uri).snapshot()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    if mode == "to_arrow":
        rows = snap.to_arrow().num_rows
    elif mode == "stream":
        rows = sum(b.num_rows for b in stream(snap))
    elif mode == "stream_bounded":  # Arrow's readahead (defaults 16 batches, 4 files) off
        rows = sum(b.num_rows for b in stream(snap, readahead={"batch_readahead": 1,
                                                               "fragment_readahead": 1}))
    elif mode == "duckdb_reader":
        con = duckdb.connect()
        con.register("r", pa.RecordBatchReader.from_batches(snap.schema, stream(snap)))
        rows = con.sql("select count(*), sum(v0) from r where id % 2 = 0").fetchall()[0][0]
    elif mode == "duckdb_limit":
        pulled = 0

        def counted():
            nonlocal pulled
            for b in stream(snap):
                pulled += b.num_rows
                yield b
        con = duckdb.connect()
        con.register("r", pa.RecordBatchReader.from_batches(snap.schema, counted()))
        rows = len(con.sql("select id from r limit 10").fetchall())
        rows = f"{rows} (batches pulled: {pulled:,} rows)"
    elif mode == "duckdb_capsule":  # reusable? pushdown into read_parquet through an anti join?
        calls = []

        class Capsule:
            def __arrow_c_stream__(self, requested_schema=None):
                calls.append(requested_schema)
                return pa.RecordBatchReader.from_batches(
                    snap.schema, stream(snap)).__arrow_c_stream__(requested_schema)
        con = duckdb.connect()
        con.register("c", Capsule())
        first = con.sql("select count(*) from c").fetchall()[0][0]
        second = con.sql("select count(*) from c where id < 10").fetchall()[0][0]
        files = snap.files()
        reader = snap.file_reader()
        con.register("d", pa.table({
            "filename": [f.path for f in files for _ in reader.deleted_positions(f)],
            "file_row_number": np.concatenate([reader.deleted_positions(f) for f in files])}))
        view = (f"select * from read_parquet({[f.path for f in files]}, filename=true, "
                "file_row_number=true) anti join d using (filename, file_row_number)")
        third = con.sql(f"select count(*) from ({view}) where id < 10").fetchall()[0][0]
        plan = con.sql(f"explain select v0 from ({view}) where id < 10").fetchall()[0][1]
        rows = (f"{first}/{second}, anti-join view {third}, __arrow_c_stream__ calls: {len(calls)}, "
                f"filter in READ_PARQUET: {'Filters:' in plan}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"{mode:14s} rows={rows} seconds={time.perf_counter() - t0:.2f} "
          f"peak_rss_mb={peak / 1024:.0f} growth_mb={(peak - base) / 1024:.0f}")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        measure(sys.argv[1], sys.argv[2])
        sys.exit(0)
    with tempfile.TemporaryDirectory() as folder:
        uri = f"{folder}/t"
        build(uri)
        for mode in ("to_arrow", "stream", "stream_bounded", "duckdb_reader", "duckdb_limit",
                     "duckdb_capsule"):
            subprocess.run([sys.executable, __file__, uri, mode], check=True)
