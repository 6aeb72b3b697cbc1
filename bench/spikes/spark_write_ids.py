"""Spike (issue 24 design): does Spark's native Parquet writer write field ids we put on a schema?

Run: PYTHONPATH=$PWD /work/main/.venv/bin/python bench/spikes/spark_write_ids.py
"""

from __future__ import annotations

import glob
import tempfile

import pyarrow.parquet as pq
from pyspark.sql import SparkSession
from pyspark.sql import types as T


def sf(name, typ, fid):
    return T.StructField(name, typ, True, {"parquet.field.id": fid})


spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
df = spark.createDataFrame([(1, "a", ("x",))], "id long, name string, addr struct<city:string>")
target = T.StructType([sf("id", T.LongType(), 1), sf("name", T.StringType(), 2),
                       sf("addr", T.StructType([sf("city", T.StringType(), 4)]), 3)])
out = tempfile.mkdtemp() + "/w"
df.to(target).write.parquet(out)
schema = pq.read_schema(glob.glob(out + "/*.parquet")[0])
print("ids written by Spark via df.to(schema):",
      [(f.name, (f.metadata or {}).get(b"PARQUET:field_id")) for f in schema],
      [(c.name, (c.metadata or {}).get(b"PARQUET:field_id")) for c in schema.field("addr").type])
spark.stop()
