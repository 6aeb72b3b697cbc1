"""Record-index log files: one per data instant (or per piece of one), one shard node per batch.

A log file is an Arrow IPC file of the entries one data instant wrote, sorted by (node, key),
the repeated strings dictionary-encoded, in the stored encoding of ``_index_runs`` (LZ4, integer
keys, positions and dictionary indices narrowed; read back through ``run_batches``; logs written
before it are uncompressed and read the same way). Its schema metadata names the node of each batch:
``metatxn.batch_shards`` and ``metatxn.batch_shard_counts`` (a batch of node ``(s, n)`` holds
the keys whose hash ``h`` has ``h % n == s``). Logs written before shards could split have no
counts: their batches are of the table's creation count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import msgspec
import pyarrow as pa

from metatxn.timeline import CorruptMetadataError

from ._layout import LogBlock

#: Schema metadata of a log file: the shard of each batch (a JSON list).
SHARDS: Final = b"metatxn.batch_shards"
#: Schema metadata of a log file: the shard count each batch's shard is of (a JSON list; absent
#: in logs written before shards could split: the table's creation count).
SHARD_COUNTS: Final = b"metatxn.batch_shard_counts"
#: Largest batch of a log file (a shard with more entries in one instant gets several).
LOG_BATCH_ROWS: Final = 65536
_INDEX_LOG = re.compile(r"^(?P<time>\d{17})(?:\.(?P<part>\d+))?\.log\.arrow$", re.ASCII)


#: One log file of a data instant (entries of several shards, one shard per batch): named like
#: any metadata log block, so it is one.
IndexLog = LogBlock


@dataclass(frozen=True)
class LogLayout:
    """The shard node of each batch of a log file, as ``(shard, count)``."""

    batches: list[tuple[int, int]]


def parse_index_log(key: str) -> IndexLog | None:
    match = _INDEX_LOG.match(key.rsplit("/", 1)[-1])
    return IndexLog(key, match.group("time")) if match else None


def log_layout(path: str, schema: pa.Schema, roots: int) -> LogLayout:
    """The node of each batch of the log file at ``path`` (its ``schema``), for a table created
    with ``roots`` shards.

    Raises:
        CorruptMetadataError: the batches' nodes are missing or impossible.
    """
    metadata = schema.metadata or {}
    try:
        shards = msgspec.json.decode(metadata[SHARDS], type=list[int])
        counts = (msgspec.json.decode(metadata[SHARD_COUNTS], type=list[int])
                  if SHARD_COUNTS in metadata else [roots] * len(shards))
    except (KeyError, msgspec.DecodeError) as exc:
        raise CorruptMetadataError(path, "a record-index log with its batch shards", str(exc)) from None
    if len(counts) != len(shards) or any(not _is_count(count, roots) or not 0 <= shard < count
                                         for shard, count in zip(shards, counts, strict=False)):
        raise CorruptMetadataError(path, f"a record-index log of shards 0..n-1 of counts n = {roots} * 2**k",
                                   f"shards {shards} of counts {counts}")
    return LogLayout(list(zip(shards, counts, strict=True)))


def _is_count(count: int, roots: int) -> bool:
    """Whether ``count`` is a shard count of a table created with ``roots``: ``roots * 2**k``."""
    ratio, rest = divmod(count, roots)
    return rest == 0 and ratio > 0 and ratio & (ratio - 1) == 0
