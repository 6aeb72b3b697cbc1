"""Spark's Python workers must run metatxn: when they cannot, a write, a read, a stream and the
format's registration fail up front with WorkerEnvironmentError naming the workers' interpreter,
the driver's, and the fix, and nothing is written.

Each case runs a driver of its own in a subprocess (one SparkContext per process), whose workers
get an interpreter without metatxn or pyarrow: a bare virtual environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: A driver that tries each entry point and reports what each raised, as JSON on its last line.
_DRIVER = r"""
import json, sys
import txn, txn.spark
from pyspark.sql import SparkSession

uri, checkpoint, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
for key, value in config.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
calls = {
    "write": lambda: txn.spark.write(spark.range(3), uri),
    "read": lambda: txn.spark.read(spark, uri),
    "register": lambda: txn.spark.register(spark),
    "stream": lambda: txn.spark.write_stream(spark.readStream.format("rate").load(), uri,
                                             checkpoint_location=checkpoint),
}
report = {}
for name, call in calls.items():
    try:
        call()
        report[name] = {"raised": None}
    except txn.WorkerEnvironmentError as exc:
        report[name] = {"raised": "WorkerEnvironmentError", "message": str(exc),
                        "worker": exc.worker_python, "driver": exc.driver_python}
    except Exception as exc:
        report[name] = {"raised": type(exc).__name__, "message": str(exc)[:500]}
report["active_streams"] = len(spark.streams.active)
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interpreter of the driver's Python version with nothing installed."""
    folder = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder / "bin" / "python"


@pytest.fixture(scope="module")
def pyarrow_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An interpreter with pyarrow (the driver's own) and without metatxn.

    The driver's pyarrow package is linked into a bare environment rather than installed from
    the index: the same package (pyarrow requires nothing else), in a second instead of a
    download and a pip run."""
    import pyarrow

    folder = tmp_path_factory.mktemp("arrow") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    os.symlink(os.path.dirname(pyarrow.__file__), os.path.join(site, "pyarrow"))
    return python


def _run_driver(tmp_path: Path, env: dict[str, str], config: dict[str, str]) -> dict[str, dict[str, str]]:
    uri = tmp_path / "orders"
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(uri), str(tmp_path / "checkpoint"), json.dumps(config)],
        env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report: dict[str, dict[str, str]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert not uri.exists(), "nothing may be written when the workers cannot run metatxn"
    return report


def _assert_refused(report: dict[str, dict[str, str]], worker: Path,
                    missing: str = "No module named 'pyarrow'") -> None:
    assert report.pop("active_streams") == 0  # type: ignore[comparison-overlap]
    for name, outcome in report.items():
        assert outcome["raised"] == "WorkerEnvironmentError", (name, outcome)
        assert outcome["worker"].startswith(str(worker.parent)), (name, outcome["worker"])
        assert outcome["driver"] == sys.executable
        message = outcome["message"]
        assert missing in message, message
        assert f"PYSPARK_PYTHON={sys.executable}" in message and "install metatxn" in message


def _environment(**changes: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    env.update(changes)
    return env


def test_workers_given_by_pyspark_python_without_metatxn_are_named(tmp_path: Path, bare_python: Path) -> None:
    report = _run_driver(tmp_path, _environment(PYSPARK_PYTHON=str(bare_python)), {})
    _assert_refused(report, bare_python)


def test_workers_with_pyarrow_but_without_metatxn_are_named(tmp_path: Path, pyarrow_python: Path) -> None:
    report = _run_driver(tmp_path, _environment(PYSPARK_PYTHON=str(pyarrow_python)), {})
    _assert_refused(report, pyarrow_python, missing="No module named 'txn'")


def test_a_session_whose_spark_pyspark_python_lacks_metatxn_gets_the_clear_error(
        tmp_path: Path, bare_python: Path) -> None:
    # PySpark 4.3 starts the workers of an in-process session with PYSPARK_PYTHON, or `python3`
    # from the PATH, whatever spark.pyspark.python says; the PATH leads to the same bare
    # interpreter here, so the case holds whichever of the two PySpark honours.
    path = f"{bare_python.parent}{os.pathsep}{os.environ.get('PATH', '')}"
    report = _run_driver(tmp_path, _environment(PATH=path), {"spark.pyspark.python": str(bare_python)})
    _assert_refused(report, bare_python)


def test_the_check_runs_once_per_spark_context(spark: Any) -> None:
    from txn.spark import _workers

    _workers.ensure_workers_run_metatxn(spark)
    context = spark.sparkContext
    assert (context.applicationId, context.pythonExec) in _workers._checked
    jobs = context.statusTracker().getJobIdsForGroup(None)
    _workers.ensure_workers_run_metatxn(spark)
    assert context.statusTracker().getJobIdsForGroup(None) == jobs, "a checked session runs no job"
