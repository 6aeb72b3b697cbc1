"""``file:/abs/path`` (one slash, as Java and Spark print a local URI) is that local path, and a
warehouse given with a scheme is kept as given (issue 29)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from metatxn.timeline import open_storage
from txn.spark._sql._catalog import WAREHOUSE_KEY, set_warehouse


def test_a_file_uri_with_one_slash_is_the_absolute_local_path(tmp_path: Path) -> None:
    for uri in (f"file:{tmp_path}", f"file://{tmp_path}", str(tmp_path)):
        storage = open_storage(uri)
        storage.put("probe", b"1")
        assert (tmp_path / "probe").read_bytes() == b"1", uri
        storage.delete("probe")
    assert not (Path.cwd() / "file:").exists()


class _Conf:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


class _Spark:
    def __init__(self) -> None:
        self.conf = _Conf()


def test_set_warehouse_keeps_locations_with_a_scheme_and_makes_paths_absolute() -> None:
    for location in ("file:/tmp/x/wh", "file:///tmp/x/wh", "s3a://bucket/wh", "memory://wh"):
        spark = _Spark()
        set_warehouse(spark, location)
        assert spark.conf.values[WAREHOUSE_KEY] == location
    spark = _Spark()
    set_warehouse(spark, "rel/wh")
    assert spark.conf.values[WAREHOUSE_KEY] == os.path.abspath("rel/wh")
