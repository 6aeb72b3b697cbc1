"""Whether a keyed table's active metadata timeline stays bounded under single-key upserts.

A keyed table of ``--shards`` record-index shards gets one append of ``--keys`` keys (so the
first metadata compaction gives every shard a run), then N upserts of one random key each, for
each N of ``--upserts``, on local disk, with inline maintenance, ``metadata.compact_after`` 3,
``metadata.retain_commits`` 10 and archival at ``timeline.archive.trigger`` 5 /
``timeline.archive.retain`` 4. After each N it prints the active instants of both timelines and
the time of opening a fresh handle plus a one-key lookup (median and minimum of ``--repeat``).
A bounded timeline shows the same counts at every N. Run from the repository root::

    .venv/bin/python -m bench.probe_metadata_timeline --upserts 60 120 240
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pyarrow as pa

import txn
from metatxn.indexes import METADATA_FOLDER
from metatxn.timeline import PrefixedStorage, Timeline

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


def active(storage: object, folder: str | None) -> int:
    inner = PrefixedStorage(storage, folder) if folder else storage  # type: ignore[arg-type]
    return len(Timeline(inner, owner="probe").load().instants)  # type: ignore[arg-type]


def probe(workdir: str | None, shards: int, keys: int, upserts: int, repeat: int) -> str:
    uri = tempfile.mkdtemp(prefix="probe-mdtl-", dir=workdir)
    table = txn.create_table(uri, SCHEMA, record_key="k", properties={
        "record_index.shards": str(shards), "metadata.compact_after": "3",
        "metadata.retain_commits": "10", "timeline.archive.trigger": "5",
        "timeline.archive.retain": "4"})
    table.append(pa.table({"k": list(range(keys)), "v": ["a"] * keys}, schema=SCHEMA))
    rng = random.Random(upserts)
    for i in range(upserts):
        table.upsert(pa.table({"k": [rng.randrange(keys)], "v": [f"u{i}"]}, schema=SCHEMA))
    storage = table._context.storage
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        found = txn.open_table(uri).lookup(pa.table({"k": [rng.randrange(keys)]}))
        times.append((time.perf_counter() - start) * 1000)
        if found.num_rows != 1:
            raise SystemExit(f"a key of the table was not found after {upserts} upserts")
    return (f"N={upserts}: active metadata instants {active(storage, METADATA_FOLDER)}, "
            f"active data instants {active(storage, None)}; open + lookup median "
            f"{statistics.median(times):.1f} ms, min {min(times):.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upserts", type=int, nargs="+", default=[60, 120, 240])
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    for upserts in args.upserts:
        print(probe(args.workdir, args.shards, args.keys, upserts, args.repeat), flush=True)


if __name__ == "__main__":
    main()
