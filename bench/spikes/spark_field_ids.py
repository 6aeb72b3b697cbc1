"""Spike (issue 24 design): does Spark's native Parquet scan read by field id?

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python bench/spikes/spark_field_ids.py
"""

from __future__ import annotations

import os
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import types as T

FID = b"PARQUET:field_id"


def f(name, typ, fid):
    return pa.field(name, typ, metadata={FID: str(fid).encode()})


folder = tempfile.mkdtemp()
old = os.path.join(folder, "old.parquet")   # written under v1: id 1 id, 2 name, 3 amt, 4 addr{5 city}
pq.write_table(pa.table({
    "id": pa.array([1, 2], pa.int64()), "name": ["a", "b"], "amt": pa.array([10, 20], pa.int32()),
    "addr": [{"city": "x"}, {"city": "y"}],
}, schema=pa.schema([f("id", pa.int64(), 1), f("name", pa.string(), 2), f("amt", pa.int32(), 3),
                     f("addr", pa.struct([f("city", pa.string(), 5)]), 4)])), old)
new = os.path.join(folder, "new.parquet")   # written under v2: name renamed, amt dropped + re-added
pq.write_table(pa.table({
    "id": pa.array([3], pa.int64()), "full_name": ["c"], "addr": [{"town": "z"}],
    "amt": pa.array([30], pa.int64()),
}, schema=pa.schema([f("id", pa.int64(), 1), f("full_name", pa.string(), 2),
                     f("addr", pa.struct([f("town", pa.string(), 5)]), 4),
                     f("amt", pa.int64(), 9)])), new)

spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())


def sf(name, typ, fid):
    return T.StructField(name, typ, True, {"parquet.field.id": fid})


v2 = T.StructType([sf("id", T.LongType(), 1), sf("full_name", T.StringType(), 2),
                   sf("addr", T.StructType([sf("town", T.StringType(), 5)]), 4),
                   sf("amt", T.LongType(), 9)])
print("default (by name):")
spark.read.schema(v2).parquet(old, new).orderBy("id").show()
spark.conf.set("spark.sql.parquet.fieldId.read.enabled", "true")
print("fieldId.read.enabled:")
df = spark.read.schema(v2).parquet(old, new)
df.orderBy("id").show()
print("filter on renamed column:", df.filter("full_name = 'a'").count())
print("projection of renamed only:", [r[0] for r in df.select("full_name").collect()])
# a widened type read natively: int32 in the file, LongType asked
v3 = T.StructType([sf("id", T.LongType(), 1), sf("amt_old", T.LongType(), 3)])
try:
    print("int32 file read as long:", spark.read.schema(v3).parquet(old).collect())
except Exception as exc:
    print("int32 file read as long: refused", type(exc).__name__, str(exc)[:200])
spark.stop()
