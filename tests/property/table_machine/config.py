"""The table the machine creates and the fixed numbers of a run: the schema, the properties
drawn at create (``properties``) and the timeline settings the observer shares with the table.
"""

from __future__ import annotations

import re

import pyarrow as pa

from metatxn.timeline import TimelineOptions

SCHEMA = pa.schema([("k", pa.int64()), ("g", pa.string()), ("v", pa.int64())])


HEARTBEAT_TIMEOUT_MS = 60_000


LOCK_LEASE_MS = 5_000


RETENTIONS = (1000, 3)


#: Record-index shards of a keyed table: one (every lookup reads one shard), a few, the default.
SHARDS = (1, 4, 64)


#: deletes.compaction.threshold: 1 (a data file keeps one live delete delta) or 2.
DELTA_THRESHOLDS = (1, 2)


#: compaction.level_threshold: MINOR merges 2 loads into ``x.1`` and 2 of those into ``x.2``, or
#: 3 loads at a time with level 2 off; either way it happens within a run.
LEVEL_THRESHOLDS = ((2, 2), (3, 0))


#: clean.retain_commits: CLEAN FILES keeps what time travel to the last 2 (or 4) commits needs
#: (clean.retain_hours is 0, so the commits decide); clean.trash_hours: 0 (a clean deletes the
#: trash of earlier ones for good) or 1 (only ``force`` does, as the clock never gets that far).
CLEAN_RETENTIONS = (2, 4)


TRASH_HOURS = (0, 1)


#: changes.retain_commits: unset (the change feed reaches as far back as CLEAN FILES kept), or 3
#: (clean then keeps at least 4 commits: a feed of the last 3 starts after the 4th last).
CHANGES_RETENTIONS = (None, None, 3)


#: maintenance.mode: writers maintain the table after their commits, or only the maintainer does.
MAINTENANCE_MODES = ("inline", "manual")


def properties(retain_commits: int, *, shards: int | None, delta_threshold: int,
               level_threshold: tuple[int, int] = LEVEL_THRESHOLDS[0],
               clean_retain: int = CLEAN_RETENTIONS[0], trash_hours: int = TRASH_HOURS[0],
               maintenance: str = MAINTENANCE_MODES[0], streaming: bool = False,
               stream_max: int | None = None, auto_handoff: bool = True,
               changes_retain: int | None = None) -> dict[str, str]:
    chosen = {
        "maintenance.mode": maintenance,
        # Compact the metadata table every second commit; keep what time travel to the last
        # retain_commits commits needs.
        "metadata.compact_after": "2",
        "metadata.retain_commits": str(retain_commits),
        # Archive the data and metadata timelines often (as far as retention allows).
        "timeline.archive.trigger": "6",
        "timeline.archive.retain": "3",
        # The background heartbeat thread beats on the *real* clock every interval: keep it far
        # longer than any write, so it never adds a storage call and call numbers stay
        # deterministic. Expiry is judged on the fake clock, which the machine moves on purpose.
        "heartbeat.interval_ms": "30000",
        "heartbeat.timeout_ms": str(HEARTBEAT_TIMEOUT_MS),
        "lock.lease_ms": str(LOCK_LEASE_MS),
        "deletes.compaction.threshold": str(delta_threshold),
        "compaction.level_threshold": ",".join(map(str, level_threshold)),
        "clean.retain_commits": str(clean_retain),
        "clean.retain_hours": "0",
        "clean.trash_hours": str(trash_hours),
    }
    if shards is not None:
        chosen["record_index.shards"] = str(shards)
    if changes_retain is not None:
        chosen["changes.retain_commits"] = str(changes_retain)
    if streaming:
        chosen["streaming"] = "true"
        chosen["streaming.auto_handoff"] = str(auto_handoff).lower()
        if stream_max is not None:
            chosen["streaming.segment.max_size"] = str(stream_max)
    return chosen


#: The same settings as the table's timeline, for the observer's reads and expiry checks.
OPTIONS = TimelineOptions(heartbeat_interval_ms=30_000, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
                          lock_lease_ms=LOCK_LEASE_MS, archive_trigger=6, archive_retain=3)


DATA_ACTIONS = ("commit", "replacecommit", "compaction")


#: A metadata base file: ``<compaction time>_<horizon>.base.<format>``.
BASE_NAME = re.compile(r"^(\d{17})_\d{17}\.base\.[a-z]+$")


#: Before the first clean write of an operation has been measured: more calls than any write
#: makes.
INITIAL_CALL_BOUND = {"all": 100, "writes": 30, "instants": 10}


#: Streaming tables: the streams and the idempotent producers (app_id) the machine writes with.
STREAM_NAMES = ("s1", "s2")


APP_IDS = ("nightly", "hourly")


#: streaming.segment.max_size: a batch of a few rows writes 1-3 KB (a file per partition value),
#: so a segment rolls over every few batches; None: the default (1 GiB), never.
STREAM_MAX_SIZES = (2048, 4096, 8192, None)
