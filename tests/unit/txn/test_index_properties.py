"""``record_index.shard_max_entries``: checked like every table property, and it reaches the
index: a shard past it splits at the next metadata compaction."""

from __future__ import annotations

import pyarrow as pa
import pytest

import txn
from metatxn.indexes import METADATA_FOLDER

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.string())])


@pytest.mark.parametrize("value", ["0", "1023", "lots", "-5", "\uff15"])
def test_a_bad_shard_limit_is_refused_and_nothing_is_created(memory_uri: str, value: str) -> None:
    with pytest.raises(txn.InvalidOptionError, match=r"record_index.shard_max_entries"):
        txn.create_table(memory_uri, SCHEMA, record_key="k",
                         properties={"record_index.shard_max_entries": value})
    with pytest.raises(txn.TableNotFoundError):
        txn.open_table(memory_uri)


def test_a_shard_past_the_limit_splits_and_every_key_is_still_found(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="k", properties={
        "record_index.shards": "1", "record_index.shard_max_entries": "1024",
        "maintenance.mode": "manual", "metadata.compact_after": "1"})
    keys = list(range(3000))
    table.append(pa.table({"k": keys, "v": [str(k) for k in keys]}, schema=SCHEMA))
    assert table.maintain().compaction is not None
    table.append(pa.table({"k": [5000], "v": ["x"]}, schema=SCHEMA))
    table.maintain()
    folders = {key.rsplit("/", 1)[0] for key in
               table._context.storage.list(f"{METADATA_FOLDER}/record_index", recursive=True)}
    # Split to its final depth at once since issue 27: 3,000 keys with a limit of 1,024 make
    # four nodes (3,000 / 4 <= 1,024), where halving once per compaction made two.
    assert any(folder.endswith(".4") for folder in folders), sorted(folders)
    found = txn.open_table(memory_uri).lookup(pa.table({"k": [0, 1, 1024, 2999, 5000, 7000]}))
    assert sorted(found["k"].to_pylist()) == [0, 1, 1024, 2999, 5000]
    assert txn.open_table(memory_uri).validate().ok
