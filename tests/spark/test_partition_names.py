"""Partition folder names against Spark's own (issue 29): the names metatxn writes for awkward
values are the names ``df.write.partitionBy`` gives them, and ADD SEGMENT of Spark's folders
reads back the values Spark wrote. One Spark write job; the escape functions are compared with
Spark's through the JVM, which runs no job. (``txn.spark.read`` of such folders: test_add_segment.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.unit.txn.helpers import data_files_on_storage
from txn._files._hive import escape_path_name, hive_folder, unescape_path_name

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.string())])
#: Spark writes the empty string as null (``__HIVE_DEFAULT_PARTITION__``); metatxn keeps it apart.
VALUES = ["10:00", "a/b", "%", "=", "#", "a b", " ", "Zürich", "日本", "x?y*z", "{[^]}", "'q\"",
          "\\t\x01", "100%3A", "<a|b>&!$()", "", None]


def test_escaping_is_spark_s(spark: Any) -> None:
    utils = spark._jvm.org.apache.spark.sql.catalyst.catalog.ExternalCatalogUtils
    text = "".join(map(chr, range(1, 0x80))) + "Zürich 日本 é"
    assert escape_path_name(text) == utils.escapePathName(text)
    assert unescape_path_name(utils.escapePathName(text)) == text
    assert utils.unescapePathName(escape_path_name(text)) == text
    for column, value in [("k", "10:00"), ("a:b=c/d", "x"), ("é t#", "%")]:
        assert hive_folder(column, value) == utils.getPartitionPathString(column, value)


def test_folders_are_the_ones_spark_writes_and_add_segment_reads_them(spark: Any, tmp_path: Path) -> None:
    ids = list(range(len(VALUES)))
    written = tmp_path / "spark"
    spark.createDataFrame(list(zip(ids, VALUES, strict=True)), "id long, k string").coalesce(1) \
        .write.partitionBy("k").parquet(str(written))
    spark_folders = sorted(p.name for p in written.iterdir() if p.is_dir())

    native = txn.create_table(str(tmp_path / "native"), SCHEMA, partition_by=["k"])
    native.append(pa.table({"id": ids, "k": VALUES}, schema=SCHEMA))
    folders = {path.split("/", 1)[0] for path in data_files_on_storage(native.uri)}
    assert sorted(folders - {"k="}) == spark_folders  # "k=": the empty string, null to Spark

    table = txn.create_table(str(tmp_path / "added"), SCHEMA, partition_by=["k"])
    table.add_segment(str(written), "parquet", partition="k:string")
    spark_values = [None if v == "" else v for v in VALUES]
    assert table.to_arrow().sort_by("id")["k"].to_pylist() == spark_values
    assert table.to_arrow(filter=pc.field("k") == "10:00")["id"].to_pylist() == [0]
