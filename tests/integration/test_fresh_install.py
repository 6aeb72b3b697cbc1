"""What a new user gets: metatxn installed into a new virtual environment without the test
extra (only what pyproject.toml's dependencies bring) runs a Spark write that creates a table,
and a Spark read of it, through the library's own session helper, with no third-party warning.

Slow (an install, and a Spark driver of its own); pip's cache makes the install take seconds
after the first run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]

_JOB = r"""
import json, sys
import txn, txn.spark

uri = sys.argv[1]
spark = txn.spark.local_session("fresh-install", cores=1)
orders = spark.range(1000).selectExpr("id", "CAST(id % 3 AS STRING) AS region",
                                      "CAST(id * 0.5 AS DOUBLE) AS price")
created = txn.spark.write(orders, uri, mode="append", partition_by=["region"], record_key="id")
upserted = txn.spark.write(orders.where("id < 10").selectExpr("id", "region", "price + 1 AS price"),
                           uri, mode="upsert")
back = txn.spark.read(spark, uri)
print(json.dumps({"created": created.rows_added, "replaced": upserted.rows_deleted, "rows": back.count(),
                  "sum": float(back.agg({"price": "sum"}).first()[0]),
                  "layout": [txn.open_table(uri).partition_by, txn.open_table(uri).record_key]}))
spark.stop()
"""


def test_a_fresh_environment_runs_a_spark_write_and_read(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # A copy of the source tree: pip builds in the folder it installs, and a build/ left in the
    # checkout by an older build could ship modules that no longer exist.
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "warehouse", ".*_cache", ".hypothesis", "__pycache__"))
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", str(source)],
                             capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stderr[-3000:]
    # Nothing of the test extra came along.
    missing = subprocess.run([str(python), "-c", "import hypothesis"], capture_output=True)
    assert missing.returncode != 0

    job = subprocess.run([str(python), "-c", _JOB, str(tmp_path / "orders")], capture_output=True,
                         text=True, timeout=600, cwd=tmp_path)
    assert job.returncode == 0, job.stderr[-3000:]
    report = json.loads(job.stdout.strip().splitlines()[-1])
    assert report == {"created": 1000, "replaced": 10, "rows": 1000, "sum": 0.5 * sum(range(1000)) + 10,
                      "layout": [["region"], "id"]}
    assert "Warning" not in job.stderr, job.stderr
