"""Where the metadata table keeps its files.

```
_metadata/
  _timeline/                        its own timeline: deltacommits (at the data instant's time)
                                    and compactions
  <partition>/<T>.log.arrow         one log block (Arrow IPC file) per data instant T that
                                    touched the partition
  <partition>/<M>_<H>.base.arrow    a base: every completed block with completion time <= H,
                                    folded by the metadata compaction instant M
  record_index/<T>.log.arrow        the record index's log files, all shards in one file
  record_index/<shard>/...          its sorted runs per root shard (<M>_<H>.base.arrow from "",
                                    <M>_<L>_<H>.<n>.run.arrow above), and the folders of the
                                    shards split from it (see ``_index_layout``)
```
"""

from __future__ import annotations

import re
from dataclasses import dataclass

METADATA_FOLDER = "_metadata"
FILES = "files"
COLUMN_STATS = "column_stats"
SEGMENTS = "segments"
DELETES = "deletes"
STREAMS = "streams"
RECORD_INDEX = "record_index"
#: Table versions (``_schemas``): resolved before ``column_stats``, whose blocks are read in the
#: schema of the latest version.
SCHEMAS = "schemas"
PARTITIONS = (FILES, COLUMN_STATS, SEGMENTS, DELETES, STREAMS, SCHEMAS)

_LOG = re.compile(r"^(?P<time>\d{17})\.log\.arrow$", re.ASCII)
_BASE = re.compile(r"^(?P<compaction>\d{17})_(?P<horizon>\d{17})\.base\.(?:parquet|arrow)$", re.ASCII)


def partition_folder(partition: str) -> str:
    return f"{METADATA_FOLDER}/{partition}"


def shard_folder(shard: int) -> str:
    """The folder of one record-index root shard (numbered from 0), which also holds the folders
    of the shards split from it."""
    return f"{METADATA_FOLDER}/{RECORD_INDEX}/{shard:04d}"


def log_path(folder: str, instant_time: str) -> str:
    return f"{folder}/{instant_time}.log.arrow"


def base_path(folder: str, compaction_time: str, horizon: str, extension: str = "parquet") -> str:
    """A base file of a partition (``_metadata_table.BASE_FORMAT``; earlier versions wrote
    Parquet) or a bottom run of a record-index shard (Arrow IPC, see ``_index_runs``)."""
    return f"{folder}/{compaction_time}_{horizon}.base.{extension}"


@dataclass(frozen=True)
class LogBlock:
    path: str
    instant_time: str


@dataclass(frozen=True)
class BaseFile:
    path: str
    compaction_time: str
    #: Every block whose instant completed at or before this time is folded in; no other is.
    horizon: str


def parse_listing(keys: list[str]) -> tuple[list[BaseFile], list[LogBlock]]:
    """Split a partition folder's listing into base files and log blocks (other names ignored)."""
    bases: list[BaseFile] = []
    logs: list[LogBlock] = []
    for key in keys:
        name = key.rsplit("/", 1)[-1]
        if match := _LOG.match(name):
            logs.append(LogBlock(key, match.group("time")))
        elif match := _BASE.match(name):
            bases.append(BaseFile(key, match.group("compaction"), match.group("horizon")))
    return bases, logs
